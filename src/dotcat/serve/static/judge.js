// dotcat's judging page: one query, one pooled document at a time, graded by keyboard.
// Every grade is sent to the server and saved there (SQLite, committed) before the page moves
// on: a closed tab or a killed server loses at most the grade being given. Plain JavaScript,
// no build step; document text goes in as text nodes only (highlight.js marks the terms).
"use strict";

const $ = (id) => document.getElementById(id);
const ASSESSOR_KEY = "dotcat-assessor";

const view = {
  assessor: "",
  state: null, // GET /judge/api/state
  topic: null, // GET /judge/api/topic: the query and its pooled documents in judging order
  position: 0, // the document shown, an index into topic.docs
  documents: new Map(), // "qid\ndoc_id" -> GET /judge/api/document
  busy: false, // a grade is being saved: keys wait for it
};

function headers(json) {
  const out = { Accept: "application/json" };
  if (json) out["Content-Type"] = "application/json";
  const key = $("api-key").value || sessionStorage.getItem("dotcat-api-key") || "";
  if (key) out["X-API-Key"] = key;
  return out;
}

async function request(method, url, body) {
  let response;
  try {
    response = await fetch(url, {
      method,
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    throw new Error("the server does not answer (is it running?)");
  }
  const answer = await response.json().catch(() => ({}));
  if (response.status === 401) $("key-row").hidden = false;
  if (!response.ok) throw new Error(answer.error || `${response.status} ${response.statusText}`);
  if ($("api-key").value) sessionStorage.setItem("dotcat-api-key", $("api-key").value);
  return answer;
}

// While a grade is saved (and the next document loads), keys wait; the document says so.
function setBusy(flag) {
  view.busy = flag;
  $("doc").setAttribute("aria-busy", String(flag));
}

function say(text, error = false) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

function query(params) {
  return new URLSearchParams(params).toString();
}

// -- the queries ------------------------------------------------------------------------------

async function loadState() {
  view.state = await request("GET", `/judge/api/state?${query({ assessor: view.assessor })}`);
  renderGrades();
  renderTopics();
}

function topicLabel(t) {
  const text = t.text.length > 70 ? `${t.text.slice(0, 69)}…` : t.text;
  return `${t.qid}: ${text} (${t.judged}/${t.pooled})`;
}

function renderTopics() {
  const select = $("topic");
  select.replaceChildren(
    ...view.state.topics.map((t) => {
      const option = document.createElement("option");
      option.value = t.qid;
      option.textContent = topicLabel(t);
      return option;
    }),
  );
  if (view.topic) select.value = view.topic.qid;
  const judged = view.state.topics.reduce((n, t) => n + t.judged, 0);
  const pooled = view.state.topics.reduce((n, t) => n + t.pooled, 0);
  $("overall").textContent =
    `${view.assessor}: ${judged} of ${pooled} judged · ${view.state.topics.length} queries`;
}

function topicState(qid) {
  return view.state.topics.find((t) => t.qid === qid);
}

function renderProgress() {
  const t = topicState(view.topic.qid);
  $("topic-progress").textContent =
    `${t.judged}/${t.pooled} judged` + (t.skipped ? `, ${t.skipped} skipped` : "");
  const option = [...$("topic").options].find((o) => o.value === t.qid);
  if (option) option.textContent = topicLabel(t);
  renderTopics();
}

// The first document not graded or skipped at or after `from` (wrapping), else `from`.
function nextOpen(from) {
  const docs = view.topic.docs;
  for (let i = 0; i < docs.length; i++) {
    const at = (from + i) % docs.length;
    if (docs[at].grade === null && !docs[at].skipped) return at;
  }
  return Math.min(from, docs.length - 1);
}

async function openTopic(qid, docId = null) {
  view.topic = await request("GET", `/judge/api/topic?${query({ qid, assessor: view.assessor })}`);
  $("query-text").textContent = view.topic.text;
  $("query-description").textContent = view.topic.description;
  $("query-description").hidden = !view.topic.description;
  $("topic").value = qid;
  history.replaceState(null, "", `/judge?${query({ q: qid })}`);
  const at = docId === null ? -1 : view.topic.docs.findIndex((d) => d.doc_id === docId);
  renderProgress();
  if (!view.topic.docs.length) {
    say("Nothing pooled for this query.");
    return;
  }
  await show(at >= 0 ? at : nextOpen(0));
}

// -- one document -----------------------------------------------------------------------------

function renderGrades() {
  const row = $("grades");
  if (row.childElementCount) return;
  const entries = Object.entries(view.state.scale);
  for (const [grade, meaning] of entries) {
    row.append(gradeButton(grade, meaning, Number(grade)));
  }
  row.append(gradeButton("s", "skip: not now", null));
}

function gradeButton(key, meaning, value) {
  const button = document.createElement("button");
  button.type = "button";
  button.dataset.grade = value === null ? "skip" : String(value);
  const kbd = document.createElement("kbd");
  kbd.textContent = key;
  button.append(kbd, ` ${meaning}`);
  button.addEventListener("click", () => grade(value));
  return button;
}

async function fetchDocument(qid, docId) {
  const key = `${qid}\n${docId}`;
  if (!view.documents.has(key)) {
    const url = `/judge/api/document?${query({ qid, doc_id: docId })}`;
    view.documents.set(key, await request("GET", url));
  }
  return view.documents.get(key);
}

async function show(position) {
  const docs = view.topic.docs;
  view.position = Math.max(0, Math.min(docs.length - 1, position));
  const entry = docs[view.position];
  $("position").textContent = `${view.position + 1} of ${docs.length}`;
  $("doc-id").textContent = `id ${entry.doc_id}`;
  renderBadge(entry);
  let doc;
  try {
    doc = await fetchDocument(view.topic.qid, entry.doc_id);
  } catch (error) {
    $("doc-title").textContent = entry.title || "(no title)";
    $("doc-text").replaceChildren();
    say(`Cannot show ${entry.doc_id}: ${error.message}`, true);
    return;
  }
  if (view.topic.docs[view.position] !== entry) return; // moved on meanwhile
  renderDocument(doc);
}

function renderBadge(entry) {
  const badge = $("doc-grade");
  const meaning = entry.grade === null ? "" : view.state.scale[String(entry.grade)];
  badge.textContent = entry.skipped ? "skipped" : meaning ? `graded ${entry.grade}: ${meaning}` : "";
  badge.className = `grade-badge${entry.grade !== null ? " saved" : ""}`;
  for (const button of $("grades").children) {
    const current = entry.skipped ? "skip" : String(entry.grade);
    button.classList.toggle("current", button.dataset.grade === current);
  }
}

// The text with the terms marked and the passage to read first in its own block, in view.
function renderDocument(doc) {
  const terms = view.topic.terms;
  const title = $("doc-title");
  title.replaceChildren();
  appendHighlighted(title, doc.title || "(no title)", terms);
  const text = $("doc-text");
  text.replaceChildren();
  const { start, stop } = doc.passage;
  appendHighlighted(text, doc.text.slice(0, start), terms);
  const passage = document.createElement("span");
  passage.className = "passage";
  passage.id = "passage";
  appendHighlighted(passage, doc.text.slice(start, stop), terms);
  text.append(passage);
  appendHighlighted(text, doc.text.slice(stop), terms);
  text.scrollTop = Math.max(0, passage.offsetTop - text.offsetTop - 24);
}

// -- grading ----------------------------------------------------------------------------------

async function grade(value) {
  if (view.busy || !view.topic || !view.topic.docs.length) return;
  if (!view.assessor) {
    say("Type your name first (top right), then Enter.", true);
    $("assessor").focus();
    return;
  }
  const entry = view.topic.docs[view.position];
  setBusy(true);
  say("Saving…");
  try {
    const saved = await request("POST", "/judge/api/judgments", {
      qid: view.topic.qid,
      doc_id: entry.doc_id,
      assessor: view.assessor,
      grade: value,
    });
    entry.grade = saved.grade;
    entry.skipped = saved.grade === null;
    Object.assign(topicState(saved.qid), { judged: saved.judged, pooled: saved.pooled });
    topicState(saved.qid).skipped = view.topic.docs.filter((d) => d.skipped).length;
    renderProgress();
    const what = value === null ? "skipped" : `graded ${value}`;
    say(`Saved: ${entry.doc_id} ${what}.`);
    await advance();
  } catch (error) {
    say(`Not saved: ${error.message}. Give the grade again.`, true);
  } finally {
    setBusy(false);
  }
}

async function advance() {
  const docs = view.topic.docs;
  const next = nextOpen((view.position + 1) % docs.length);
  if (docs[next].grade !== null || docs[next].skipped) {
    say(`${$("status").textContent} Every document of this query is judged; ] for the next query.`);
    renderBadge(docs[view.position]);
    return;
  }
  await show(next);
}

async function undo() {
  if (view.busy || !view.assessor) return;
  setBusy(true);
  try {
    const undone = await request("POST", "/judge/api/undo", { assessor: view.assessor });
    await loadState();
    await openTopic(undone.qid, undone.doc_id);
    say(`Undone: ${undone.doc_id} (${undone.grade === null ? "skip" : `grade ${undone.grade}`}).`);
  } catch (error) {
    say(`Nothing undone: ${error.message}`, true);
  } finally {
    setBusy(false);
  }
}

function move(step) {
  if (view.topic && view.topic.docs.length) show(view.position + step);
}

function switchTopic(step) {
  const topics = view.state ? view.state.topics : [];
  if (!topics.length) return;
  const at = topics.findIndex((t) => view.topic && t.qid === view.topic.qid);
  const next = topics[(at + step + topics.length) % topics.length];
  openTopic(next.qid).catch((error) => say(error.message, true));
}

async function addTopic(event) {
  event.preventDefault();
  const text = $("new-text").value.trim();
  if (!text) return;
  say("Pooling the new query…");
  try {
    const added = await request("POST", "/judge/api/topics", {
      text,
      description: $("new-description").value,
    });
    $("new-text").value = $("new-description").value = "";
    await loadState();
    await openTopic(added.qid);
    say(`Pooled ${added.qid}: ${added.pooled} documents.`);
  } catch (error) {
    say(`Not pooled: ${error.message}`, true);
  }
}

// -- the keyboard and start-up ----------------------------------------------------------------

const KEYS = {
  s: () => grade(null),
  u: undo,
  z: undo,
  n: () => move(1),
  j: () => move(1),
  ArrowRight: () => move(1),
  p: () => move(-1),
  k: () => move(-1),
  ArrowLeft: () => move(-1),
  "]": () => switchTopic(1),
  "[": () => switchTopic(-1),
};

function onKey(event) {
  const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (view.state && event.key in view.state.scale) {
    event.preventDefault();
    grade(Number(event.key));
  } else if (event.key in KEYS) {
    event.preventDefault();
    KEYS[event.key]();
  }
}

async function start(assessor) {
  view.assessor = assessor;
  localStorage.setItem(ASSESSOR_KEY, assessor);
  $("assessor").value = assessor;
  $("assessor").blur();
  try {
    await loadState();
  } catch (error) {
    say(error.message, true);
    return;
  }
  if (!view.state.topics.length) {
    say("No queries pooled yet: add one above, or run dotcat judge pool.");
    return;
  }
  const wanted = new URLSearchParams(location.search).get("q");
  const first = view.state.topics.find((t) => t.judged + t.skipped < t.pooled);
  const qid = topicState(wanted) ? wanted : (first || view.state.topics[0]).qid;
  await openTopic(qid).catch((error) => say(error.message, true));
}

document.addEventListener("DOMContentLoaded", () => {
  document.addEventListener("keydown", onKey);
  $("who").addEventListener("submit", (event) => {
    event.preventDefault();
    const name = $("assessor").value.trim();
    if (name) start(name);
  });
  $("topic").addEventListener("change", () => {
    openTopic($("topic").value).catch((error) => say(error.message, true));
    $("topic").blur();
  });
  $("topic-form").addEventListener("submit", addTopic);
  $("previous").addEventListener("click", () => move(-1));
  $("next").addEventListener("click", () => move(1));
  $("undo").addEventListener("click", undo);
  const given = new URLSearchParams(location.search).get("assessor");
  const name = (given || localStorage.getItem(ASSESSOR_KEY) || "").trim();
  if (name) {
    start(name);
  } else {
    say("Type your name (top right) and press Enter to start.");
    $("assessor").focus();
  }
});
