// The annotation page: renders /api/state and sends one answer at a time to /api/answer.
// Answers are sent in order through one queue, each with the version (etag) of the label file the
// page last saw; the server refuses a stale version (another tab), and the page then stops editing.
"use strict";

const LISTS = ["A", "B"];
const app = { data: null, index: 0, cursor: 0, etag: null, queue: Promise.resolve(), pending: 0, broken: false, commentTimer: null };
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

function showError(message) {
  app.broken = true;
  $("error").textContent = message;
  $("error").hidden = false;
  document.querySelectorAll("main button, main textarea").forEach((el) => { el.disabled = true; });
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
  const dots = $("dots");
  dots.replaceChildren(...app.data.queries.map((item, i) => {
    const dot = document.createElement("button");
    dot.type = "button";
    dot.className = "dot" + (isComplete(item) ? " complete" : isStarted(item) ? " started" : "") + (i === app.index ? " current" : "");
    dot.title = `Query ${i + 1}${isComplete(item) ? " (complete)" : ""}`;
    dot.addEventListener("click", () => go(i));
    return dot;
  }));
}

function send(change) {
  if (app.broken) return;
  app.pending += 1;
  renderStatus();
  app.queue = app.queue.then(async () => {
    if (app.broken) return;
    const response = await fetch("/api/answer", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ...change, etag: app.etag }),
    });
    const body = await response.json();
    if (!response.ok) { showError(body.error || `the server answered ${response.status}`); return; }
    app.etag = body.etag;
  }).catch((err) => {
    showError(`Could not reach the annotation server (${err}). Everything saved so far is safe: restart the server and reload this page.`);
  }).finally(() => { app.pending -= 1; renderStatus(); });
}

function setLabel(name, rank, value) {
  if (app.broken) return;
  const item = current();
  answerOf(item).labels[name][rank - 1] = value;
  send({ kind: "label", item: item.item, list: name, rank, value });
  renderCandidates();
  renderProgress();
}

function setPreference(value) {
  if (app.broken) return;
  const item = current();
  answerOf(item).preference = value;
  send({ kind: "preference", item: item.item, value });
  renderDecision();
  renderProgress();
}

function saveComment() {
  clearTimeout(app.commentTimer);
  const item = current();
  const value = $("comment").value;
  if (app.broken || (answerOf(item).comment || "") === value) return;
  answerOf(item).comment = value;
  send({ kind: "comment", item: item.item, value });
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
  $("prev").disabled = app.index === 0;
  $("next").disabled = app.index === app.data.queries.length - 1;
  renderCandidates();
  renderDecision();
  renderProgress();
}

function go(index) {
  if (!app.data.queries.length) return;
  saveComment();
  app.index = Math.max(0, Math.min(app.data.queries.length - 1, index));
  app.cursor = 0;
  render();
  window.scrollTo(0, 0);
}

function moveCursor(step) {
  app.cursor = Math.max(0, Math.min(slots().length - 1, app.cursor + step));
  renderCandidates();
  const el = document.querySelector(".candidate.cursor");
  if (el) el.scrollIntoView({ block: "nearest" });
}

function switchList() {
  const [name, rank] = slots()[app.cursor];
  const other = name === "A" ? "B" : "A";
  const target = slots().findIndex(([n, r]) => n === other && r === rank);
  if (target >= 0) { app.cursor = target; renderCandidates(); }
}

function onKey(event) {
  if (!app.data || event.ctrlKey || event.metaKey || event.altKey) return;
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
  const action = actions[event.key];
  if (action) { event.preventDefault(); action(); }
}

async function start() {
  try {
    const response = await fetch("/api/state");
    if (!response.ok) throw new Error(`the server answered ${response.status}`);
    app.data = await response.json();
  } catch (err) {
    showError(`Could not load the packet from the annotation server (${err}).`);
    return;
  }
  app.etag = app.data.etag;
  $("annotator").textContent = app.data.annotator;
  $("main").hidden = false;
  if (!app.data.queries.length) { showError("No queries are assigned to you in this packet."); return; }
  const firstOpen = app.data.queries.findIndex((item) => !isComplete(item));
  app.index = firstOpen >= 0 ? firstOpen : 0;
  document.querySelectorAll(".pref").forEach((button) => button.addEventListener("click", () => setPreference(button.dataset.value)));
  $("prev").addEventListener("click", () => go(app.index - 1));
  $("next").addEventListener("click", () => go(app.index + 1));
  $("comment").addEventListener("input", () => { clearTimeout(app.commentTimer); app.commentTimer = setTimeout(saveComment, 600); });
  $("comment").addEventListener("blur", saveComment);
  document.addEventListener("keydown", onKey);
  window.addEventListener("beforeunload", saveComment);
  render();
  renderStatus();
}

start();
