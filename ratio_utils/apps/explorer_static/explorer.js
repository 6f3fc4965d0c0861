// The explorer page: asks api/ask for the three columns of one statement and sends marks to api/mark (URLs
// relative to the page, so that it works under a proxy's path prefix too: docs/tunnels.md).
// The statement and the retrievers live in the address (#q=...&r=...), so a reload or a shared link asks again
// and shows the marks the server saved.
"use strict";

const MOVES = {
  address: ["Address", "sentences that address, solve or mitigate the problem"],
  broaden: ["Broaden", "sentences that generalise it into a broader claim or framing"],
  specify: ["Specify", "sentences that make it concrete: an instance, a detail, a special case"],
};
const state = { info: null, answer: null, marks: {}, token: document.querySelector('meta[name="explorer-token"]').content };
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null) node.append(child);
  return node;
}

async function call(method, path, body) {
  const options = { method, headers: { "X-Explorer-Token": state.token } };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch (err) {
    throw new Error("the explorer server cannot be reached (was it stopped?)");
  }
  const data = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function setStatus(text) { $("status").textContent = text; }

function columnHeader(column) {
  const [name, what] = MOVES[column.move];
  const source = column.model ? `model ${column.model} · index ${column.index || "none"}` +
    (column.size ? ` (${column.size.toLocaleString("en")} sentences)` : "") : "no model";
  return el("header", {},
    el("h2", { text: name }),
    el("p", { class: "what", text: what }),
    el("p", { class: "source", text: source }));
}

function hitItem(move, hit) {
  const label = (state.marks[move] || {})[hit.docid] || null;
  const mark = (value, text) => {
    const button = el("button", { type: "button", class: `mark ${value}`, "aria-pressed": String(label === value),
      "data-docid": hit.docid, "data-move": move, "data-value": value, text });
    button.addEventListener("click", () => sendMark(move, hit.docid, label === value ? null : value));
    return button;
  };
  const meta = [hit.title || "(no title)", hit.year ?? "", hit.paper_id].filter((v) => v !== "").join(" · ");
  const context = el("details", { class: "context" },
    el("summary", { text: "Context in the paper" }),
    el("p", { class: "before" }, el("span", { class: "tag", text: "before" }), hit.previous || "(first sentence)"),
    el("p", { class: "hit" }, el("span", { class: "tag", text: "hit" }), hit.sentence),
    el("p", { class: "after" }, el("span", { class: "tag", text: "after" }), hit.next || "(last sentence)"));
  return el("li", { class: "hit-item", "data-docid": hit.docid },
    el("div", { class: "line" }, el("span", { class: "rank", text: `${hit.rank}.` }),
      el("span", { class: "sentence", text: hit.sentence }),
      el("span", { class: "score", title: "cosine similarity", text: hit.score.toFixed(3) })),
    el("div", { class: "paper", text: meta }),
    context,
    el("div", { class: "marks" }, mark("useful", "Useful"), mark("not_useful", "Not useful")));
}

function renderColumns() {
  const columns = state.answer ? state.answer.columns : (state.info.retrievers[$("retrievers").value] || []);
  for (const column of columns) {
    const section = $(`col-${column.move}`);
    const openContexts = new Set([...section.querySelectorAll("details[open]")].map((d) => d.closest("li").dataset.docid));
    section.replaceChildren(columnHeader(column));
    if (column.problem) {
      section.append(el("p", { class: "problem", text: `Not available: ${column.problem}` }));
    } else if (state.answer) {
      const list = el("ol", { class: "hits" }, ...column.hits.map((hit) => hitItem(column.move, hit)));
      list.querySelectorAll("li").forEach((li) => { if (openContexts.has(li.dataset.docid)) li.querySelector("details").open = true; });
      if (column.rerank) section.append(el("p", { class: `rerank rerank-${column.rerank.status}`, text: `LLM rerank: ${column.rerank.message}` }));
      section.append(list, el("p", { class: "timing", text: `${column.hits.length} hits in ${(column.seconds * 1000).toFixed(0)} ms` }));
    }
  }
}

async function ask(statement, retrievers, top) {
  showError("");
  setStatus("Searching\u2026");
  $("go").disabled = true;
  try {
    const started = performance.now();
    const rerank = $("rerank").checked;
    const answer = await call("POST", "api/ask", { statement, retrievers, top, rerank });
    state.answer = answer;
    state.marks = answer.marks;
    history.replaceState(null, "", "#" + new URLSearchParams({ q: statement, r: retrievers, k: String(top) }));
    renderColumns();
    setStatus(`Answered in ${((performance.now() - started) / 1000).toFixed(2)} s · marks saved to ${state.info.judgments}`);
  } catch (err) {
    showError(err.message);
    setStatus("Not answered");
  } finally {
    $("go").disabled = false;
  }
}

async function sendMark(move, docid, label) {
  const statement = state.answer.statement;
  try {
    const saved = await call("POST", "api/mark", { statement, retrievers: state.answer.retrievers, move, docid, label });
    state.marks = saved.marks;
    renderColumns();
    setStatus(label ? `Marked ${label.replace("_", " ")} · saved to ${state.info.judgments}` : "Mark taken back");
  } catch (err) {
    showError(`The mark was not saved: ${err.message}`);
  }
}

function updateCount() {
  const length = $("statement").value.length;
  $("count").textContent = `${length} / ${state.info.max_statement}`;
  $("count").classList.toggle("over", length > state.info.max_statement);
}

async function start() {
  try {
    state.info = await call("GET", "api/info");
  } catch (err) {
    showError(err.message);
    setStatus("Not loaded");
    return;
  }
  const select = $("retrievers");
  for (const [name, columns] of Object.entries(state.info.retrievers)) {
    const ready = columns.filter((c) => !c.problem).length;
    const title = name === "per-move" ? "fine-tuned per move" : name === "unified" ? "unified (move as instruction)" : `${name} (all moves)`;
    select.append(el("option", { value: name, text: `${title} \u2014 ${ready}/3 ready` }));
  }
  const firstReady = Object.entries(state.info.retrievers).find(([, cols]) => cols.some((c) => !c.problem));
  if (firstReady) select.value = firstReady[0];
  $("top").max = String(state.info.max_top);
  $("top").value = String(state.info.top);
  $("statement").maxLength = state.info.max_statement;
  const footer = () => {
    $("footer").textContent = `Marks go to ${state.info.judgments} on this machine; ` + ($("rerank").checked
      ? `with "Rerank with LLM" the statement and each move's top 100 are sent to ${state.info.rerank_endpoint}.`
      : "nothing is sent anywhere else.");
  };
  footer();
  $("rerank").addEventListener("change", footer);
  $("statement").addEventListener("input", updateCount);
  select.addEventListener("change", () => { state.answer = null; renderColumns(); });
  $("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    const statement = $("statement").value.trim();
    if (statement) ask(statement, select.value, Number($("top").value));
  });
  const saved = new URLSearchParams(location.hash.slice(1));
  renderColumns();
  setStatus("Ready");
  if (saved.get("q")) {
    $("statement").value = saved.get("q");
    if (saved.get("r") && state.info.retrievers[saved.get("r")]) select.value = saved.get("r");
    if (saved.get("k")) $("top").value = saved.get("k");
    updateCount();
    ask(saved.get("q"), select.value, Number($("top").value));
  } else {
    updateCount();
  }
}

start();
