// The annotation page: renders api/state and sends one answer at a time to api/answer (URLs relative to the
// page, so that it works under a proxy's path prefix too: docs/tunnels.md).
// Answers are sent in order through one queue, each with the version (etag) of the label file the
// page last saw and the server's token (from the page's <meta>). A page shows an answer at once; if
// the server refuses it or cannot be reached, every answer it has not confirmed is taken back, so the
// page never shows as saved what is not, and the page stops taking input until it is reloaded.
"use strict";

const LISTS = ["A", "B"];
const app = {
  data: null, index: 0, cursor: 0, etag: null, queue: Promise.resolve(), pending: 0, broken: false,
  commentTimer: null, unconfirmed: [],
  token: document.querySelector('meta[name="annotate-token"]').content,
};
const $ = (id) => document.getElementById(id);

function answerOf(item) {
  let answer = app.data.answers[item.item];
  if (!answer) {
    answer = { labels: {}, preference: null, comment: "" };
    for (const name of LISTS) answer.labels[name] = item.lists[name].map(() => null);
    app.data.answers[item.item] = answer;
  }
  return answer;
}

function isComplete(item) {
  const answer = app.data.answers[item.item];
  return !!answer && LISTS.every((name) => answer.labels[name].every((v) => v !== null));
}

function isStarted(item) {
  const answer = app.data.answers[item.item];
  return !!answer && (answer.preference !== null || LISTS.some((name) => answer.labels[name].some((v) => v !== null)));
}

function current() { return app.data.queries[app.index]; }
function slots() { const item = current(); return LISTS.flatMap((name) => item.lists[name].map((c) => [name, c.rank])); }

function firstUnlabelled() {
  const answer = answerOf(current());
  const open = slots().findIndex(([name, rank]) => answer.labels[name][rank - 1] === null);
  return open >= 0 ? open : 0;
}

function showError(message) {
  app.broken = true;
  $("error").textContent = `${message.replace(/\.?$/, ".")} Reload this page to go on.`;
  $("error").hidden = false;
  document.querySelectorAll("main button").forEach((el) => { el.disabled = true; });
  $("comment").readOnly = true; // still selectable, so an unsaved comment can be copied
  renderStatus();
}

function renderStatus() {
  const status = $("status");
  status.className = "status" + (app.pending ? " saving" : "");
  status.textContent = app.broken ? "Not saving" : app.pending ? "Saving\u2026" : "All answers saved";
}

function renderProgress() {
  const total = app.data.queries.length;
  const done = app.data.queries.filter(isComplete).length;
  $("progress-text").textContent = `${done} of ${total} queries complete`;
  $("progress-fill").style.width = total ? `${(100 * done) / total}%` : "0";
  $("complete").hidden = !isComplete(current());
  const dots = $("dots");
  dots.replaceChildren(...app.data.queries.map((item, i) => {
    const dot = document.createElement("button");
    dot.type = "button";
    dot.className = "dot" + (isComplete(item) ? " complete" : isStarted(item) ? " started" : "") + (i === app.index ? " current" : "");
    dot.title = `Query ${i + 1}${isComplete(item) ? " (complete)" : ""}`;
    dot.disabled = app.broken;
    dot.addEventListener("click", () => go(i));
    return dot;
  }));
}

class Refused extends Error {}

// keepalive: an answer sent as the tab closes (pagehide) still reaches the server
function post(change) {
  return fetch("api/answer", {
    method: "POST", keepalive: true, body: JSON.stringify({ ...change, etag: app.etag }),
    headers: { "Content-Type": "application/json", "X-Annotate-Token": app.token },
  });
}

// Take back every answer the server has not confirmed, newest first, and stop.
function fail(message) {
  for (const entry of app.unconfirmed.reverse()) entry.undo();
  app.unconfirmed = [];
  showError(message);
  renderCandidates();
  renderDecision();
  renderProgress();
}

function send(change, undo) {
  if (app.broken) return;
  const entry = { undo };
  app.unconfirmed.push(entry);
  app.pending += 1;
  renderStatus();
  app.queue = app.queue.then(async () => {
    if (app.broken) return;
    const response = await post(change);
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Refused(body.error || `The server answered ${response.status}.`);
    app.etag = body.etag;
    app.unconfirmed.splice(app.unconfirmed.indexOf(entry), 1);
  }).catch((err) => {
    if (app.broken) return;
    fail(err instanceof Refused ? `Not saved: ${err.message}`
      : `Not saved: could not reach the annotation server (${err}). Everything saved before is safe: restart the server.`);
  }).finally(() => { app.pending -= 1; renderStatus(); });
}

function setLabel(name, rank, value) {
  if (app.broken || !name) return;
  const item = current();
  const labels = answerOf(item).labels[name];
  const before = labels[rank - 1];
  labels[rank - 1] = value;
  send({ kind: "label", item: item.item, list: name, rank, value }, () => { labels[rank - 1] = before; });
  renderCandidates();
  renderProgress();
}

function setPreference(value) {
  if (app.broken) return;
  const item = current();
  const answer = answerOf(item);
  const before = answer.preference;
  answer.preference = value;
  send({ kind: "preference", item: item.item, value }, () => { answer.preference = before; });
  renderDecision();
  renderProgress();
}

function saveComment() {
  clearTimeout(app.commentTimer);
  if (app.broken || !app.data || !app.data.queries.length) return;
  const item = current();
  const answer = answerOf(item);
  const value = $("comment").value;
  if ((answer.comment || "") === value) return;
  const before = answer.comment;
  answer.comment = value;
  send({ kind: "comment", item: item.item, value }, () => { answer.comment = before; });
}

function renderCommentCount() {
  const limit = app.data.limits.comment;
  $("comment-count").textContent = `${$("comment").value.length.toLocaleString()} of at most ${limit.toLocaleString()} characters`;
}

function renderCandidates() {
  const item = current();
  const answer = answerOf(item);
  const cursorSlot = slots()[app.cursor];
  for (const name of LISTS) {
    const list = $(`list-${name}`).querySelector("ol");
    list.replaceChildren(...item.lists[name].map((candidate) => {
      const li = document.createElement("li");
      const value = answer.labels[name][candidate.rank - 1];
      li.className = "candidate" + (value ? ` is-${value}` : "");
      if (cursorSlot && cursorSlot[0] === name && cursorSlot[1] === candidate.rank) li.classList.add("cursor");
      li.id = `cand-${name}-${candidate.rank}`;
      li.dataset.list = name;
      li.dataset.rank = candidate.rank;
      const rank = document.createElement("span");
      rank.className = "rank";
      rank.textContent = candidate.rank;
      const text = document.createElement("span");
      text.className = "text";
      text.textContent = candidate.text;
      const marks = document.createElement("span");
      marks.className = "marks";
      for (const [mark, caption] of [["useful", "Useful"], ["not_useful", "Not useful"]]) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = `mark ${mark}`;
        button.textContent = caption;
        button.setAttribute("aria-pressed", String(value === mark));
        button.disabled = app.broken;
        button.addEventListener("click", () => {
          app.cursor = slots().findIndex(([n, r]) => n === name && r === candidate.rank);
          setLabel(name, candidate.rank, mark);
        });
        marks.append(button);
      }
      li.append(rank, text, marks);
      return li;
    }));
  }
}

function renderDecision() {
  const answer = answerOf(current());
  document.querySelectorAll(".pref").forEach((button) => {
    button.setAttribute("aria-pressed", String(answer.preference === button.dataset.value));
  });
}

function render() {
  const item = current();
  const move = app.data.study.moves[item.move] || {};
  $("position").textContent = `Query ${app.index + 1} of ${app.data.queries.length}`;
  $("move-name").textContent = item.move;
  $("move-definition").textContent = move.definition || "";
  $("query").textContent = item.query;
  $("question").textContent = move.question || "";
  $("comment").value = answerOf(item).comment || "";
  renderCommentCount();
  $("prev").disabled = app.broken || app.index === 0;
  $("next").disabled = app.broken || app.index === app.data.queries.length - 1;
  renderCandidates();
  renderDecision();
  renderProgress();
}

function go(index) {
  if (app.broken || !app.data.queries.length) return;
  saveComment();
  app.index = Math.max(0, Math.min(app.data.queries.length - 1, index));
  app.cursor = firstUnlabelled();
  render();
  window.scrollTo(0, 0);
}

// Scroll just enough that `el` is in view below the sticky bar (header and any message).
function reveal(el) {
  const margin = 8;
  const top = $("top").getBoundingClientRect().bottom + margin;
  const rect = el.getBoundingClientRect();
  if (rect.top < top) window.scrollBy(0, rect.top - top);
  else if (rect.bottom > window.innerHeight - margin) window.scrollBy(0, Math.min(rect.bottom - window.innerHeight + margin, rect.top - top));
}

function placeCursor(index) {
  app.cursor = index;
  renderCandidates();
  const el = document.querySelector(".candidate.cursor");
  if (el) reveal(el);
}

function moveCursor(step) { placeCursor(Math.max(0, Math.min(slots().length - 1, app.cursor + step))); }

function switchList() {
  const [name, rank] = slots()[app.cursor];
  const other = name === "A" ? "B" : "A";
  const target = slots().findIndex(([n, r]) => n === other && r === rank);
  if (target >= 0) placeCursor(target);
}

function onKey(event) {
  if (!app.data || app.broken || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.target.tagName === "TEXTAREA") {
    if (event.key === "Escape") { event.target.blur(); }
    return;
  }
  const [name, rank] = slots()[app.cursor] || [];
  const actions = {
    ArrowDown: () => moveCursor(1), j: () => moveCursor(1), ArrowUp: () => moveCursor(-1), k: () => moveCursor(-1),
    ArrowLeft: switchList, ArrowRight: switchList,
    y: () => { setLabel(name, rank, "useful"); moveCursor(1); }, 1: () => { setLabel(name, rank, "useful"); moveCursor(1); },
    n: () => { setLabel(name, rank, "not_useful"); moveCursor(1); }, 0: () => { setLabel(name, rank, "not_useful"); moveCursor(1); },
    a: () => setPreference("A"), b: () => setPreference("B"), t: () => setPreference("tie"),
    "[": () => go(app.index - 1), "]": () => go(app.index + 1), c: () => $("comment").focus(),
  };
  // Shift or Caps Lock: "Y" is "y"
  const action = actions[event.key.length === 1 ? event.key.toLowerCase() : event.key];
  if (action) { event.preventDefault(); action(); }
}

async function start() {
  try {
    const response = await fetch("api/state", { headers: { "X-Annotate-Token": app.token } });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(body.error || `the server answered ${response.status}`);
    app.data = body;
  } catch (err) {
    showError(`Could not load the packet from the annotation server (${err.message || err}).`);
    return;
  }
  app.etag = app.data.etag;
  $("annotator").textContent = app.data.annotator;
  $("main").hidden = false;
  if (!app.data.queries.length) { showError("No queries are assigned to you in this packet."); return; }
  const firstOpen = app.data.queries.findIndex((item) => !isComplete(item));
  app.index = firstOpen >= 0 ? firstOpen : 0;
  app.cursor = firstUnlabelled();
  $("comment").maxLength = app.data.limits.comment; // what the server accepts
  document.querySelectorAll(".pref").forEach((button) => button.addEventListener("click", () => setPreference(button.dataset.value)));
  $("prev").addEventListener("click", () => go(app.index - 1));
  $("next").addEventListener("click", () => go(app.index + 1));
  $("comment").addEventListener("input", () => {
    renderCommentCount();
    clearTimeout(app.commentTimer);
    app.commentTimer = setTimeout(saveComment, 600);
  });
  $("comment").addEventListener("blur", saveComment);
  document.addEventListener("keydown", onKey);
  window.addEventListener("pagehide", saveComment);
  render();
  renderStatus();
}

start();
