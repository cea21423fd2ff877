// dotcat's judging page: one query, one pooled document at a time, graded by keyboard.
//
// A key is applied the moment it is pressed, to the document on screen, and the page moves on
// at once: typing ahead never waits for the server. Each grade becomes a request naming its
// query, document, this page load (`client`) and a number (`seq`); an outbox sends them one at
// a time, in key order, and sends a request again (the same one) until it is answered. The
// server stores a request once and answers with the row that stands, so a repeated or late
// request never lands on another document; a document shows as graded only when that answer
// agrees. A query switch or an undo needs the server: keys pressed meanwhile wait, in order.
// Plain JavaScript, no build step; document text goes in as text nodes only (highlight.js).
"use strict";

const $ = (id) => document.getElementById(id);
const ASSESSOR_KEY = "dotcat-assessor";
// Keys waiting for a query or an undo; more than this many is a stuck server, not typing.
const MAX_WAITING = 20;
const RETRY_MS = [500, 1000, 2000]; // then every 2 s, until answered or dropped

const view = {
  assessor: "",
  client: randomId(), // this page load: the server tells its requests from another tab's
  seq: 0, // the number of this page's latest request
  state: null, // GET /judge/api/state
  topic: null, // GET /judge/api/topic: the query and its pooled documents in judging order
  position: null, // the document on screen, an index into topic.docs; null: none
  documents: new Map(), // "qid\ndoc_id" -> a promise of GET /judge/api/document
  given: new Map(), // "qid\ndoc_id" -> this page's latest grade of it: {seq, grade, saved}
  outbox: [], // requests not answered yet, in key order; the first is the one being sent
  sending: false,
  failures: 0, // the first request's failed tries in a row
  timer: null, // the next try
  alert: "", // the sticky banner's text: a grade not saved
  note: "", // the status line's latest event
  blocked: "", // what keys wait for (a query, an undo); "" when they apply at once
  waiting: [], // keys pressed while blocked, applied in order once it is done
};

function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12)); // also where randomUUID is not
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function headers(json) {
  const out = { Accept: "application/json" };
  if (json) out["Content-Type"] = "application/json";
  const key = $("api-key").value || sessionStorage.getItem("dotcat-api-key") || "";
  if (key) out["X-API-Key"] = key;
  return out;
}

// The answer of a request; an Error with `status` (0: no answer at all) otherwise.
async function request(method, url, body) {
  let response;
  try {
    response = await fetch(url, {
      method,
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    throw Object.assign(new Error("the server does not answer (is it running?)"), { status: 0 });
  }
  const answer = await response.json().catch(() => ({}));
  if (response.status === 401) $("key-row").hidden = false;
  if (!response.ok) {
    const message = answer.error || `${response.status} ${response.statusText}`;
    throw Object.assign(new Error(message), { status: response.status });
  }
  if ($("api-key").value) sessionStorage.setItem("dotcat-api-key", $("api-key").value);
  return answer;
}

function query(params) {
  return new URLSearchParams(params).toString();
}

function docKey(qid, docId) {
  return `${qid}\n${docId}`;
}

function gradeName(grade) {
  return grade === null ? "skipped" : `graded ${grade}`;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

// -- what the page says: always derived from the state, never appended to -------------------

function say(note) {
  view.note = note;
  renderStatus();
}

function unsaved(qid = null) {
  let n = 0;
  for (const [key, given] of view.given) {
    if (!given.saved && (qid === null || key.startsWith(`${qid}\n`))) n += 1;
  }
  return n;
}

// A pooled document's standing on this page: this page's latest grade, else the server's.
function standing(entry) {
  const given = view.given.get(docKey(view.topic.qid, entry.doc_id));
  return given || { grade: entry.grade, skipped: entry.skipped, saved: true };
}

// Not graded nor skipped, here or on the server: where the page moves on to.
function isOpen(entry) {
  const s = standing(entry);
  return s.grade === null && !s.skipped;
}

// After grades changed: the status, and the badge (or the summary shown instead of a document).
function refresh() {
  renderStatus();
  if (view.blocked || !view.topic) return;
  if (onScreen()) renderBadge(onScreen());
  else renderHead(null);
}

function renderStatus() {
  const parts = [view.note];
  const pending = unsaved();
  if (pending && !view.alert) parts.push(`Saving ${plural(pending, "grade")}…`);
  if (view.topic && view.topic.docs.length && !view.blocked) {
    const all = view.topic.docs.every((d) => !isOpen(d));
    const here = unsaved(view.topic.qid);
    if (all && !here) parts.push("Every document of this query is judged; ] for the next query.");
    else if (all) parts.push(`Every document of this query has a grade, ${here} not saved yet.`);
  }
  $("status").textContent = parts.filter(Boolean).join(" ");
  renderAlert();
}

// A grade not saved is a banner fixed in view; it stays until the grade is saved or dropped.
function renderAlert() {
  const failing = view.outbox.length > 0 && view.failures > 0;
  $("alert").hidden = !view.alert;
  $("alert-text").textContent = view.alert;
  $("alert-retry").hidden = !failing;
  const unsent = plural(view.outbox.length, "unsaved request");
  $("alert-drop").textContent = failing ? `Drop ${unsent}` : "Close";
  $("alert-drop").onclick = failing ? drop : () => ((view.alert = ""), renderStatus());
}

function setBlocked(what) {
  view.blocked = what;
  $("doc").setAttribute("aria-busy", String(Boolean(what)));
  if (what) {
    view.position = null;
    renderHead(null, what);
  }
  renderStatus();
}

// Keys typed while blocked, applied in order once the page is no longer blocked; dropped (and
// counted) when what they waited for failed: they were meant for another screen.
function unblock(ok) {
  setBlocked("");
  if (!ok && view.waiting.length) {
    say(`${view.note} ${view.waiting.length} key(s) typed meanwhile were not applied.`);
    view.waiting = [];
  }
  while (!view.blocked && view.waiting.length) runKey(view.waiting.shift());
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
  if (view.topic) {
    const t = topicState(view.topic.qid);
    $("topic-progress").textContent =
      `${t.judged}/${t.pooled} judged` + (t.skipped ? `, ${t.skipped} skipped` : "");
  }
}

function topicState(qid) {
  return view.state.topics.find((t) => t.qid === qid);
}

// The first open document at or after `from` (wrapping); null when none is open.
function nextOpen(from) {
  const docs = view.topic.docs;
  for (let i = 0; i < docs.length; i++) {
    const at = (from + i) % docs.length;
    if (isOpen(docs[at])) return at;
  }
  return null;
}

// Open a query (a document of it, else its first open one). Keys wait meanwhile; false when
// the server did not answer (the page stays where it was).
async function openTopic(qid, docId = null) {
  const was = view.position;
  setBlocked(`Loading ${qid}…`);
  let topic;
  try {
    topic = await request("GET", `/judge/api/topic?${query({ qid, assessor: view.assessor })}`);
  } catch (error) {
    say(`Query ${qid} not opened: ${error.message}`);
    unblock(false);
    if (view.topic) show(was);
    return false;
  }
  view.topic = topic;
  $("query-text").textContent = topic.text;
  $("query-description").textContent = topic.description;
  $("query-description").hidden = !topic.description;
  $("topic").value = qid;
  history.replaceState(null, "", `/judge?${query({ q: qid })}`);
  renderTopics();
  setBlocked("");
  const at = topic.docs.findIndex((d) => d.doc_id === docId);
  show(at >= 0 ? at : nextOpen(0));
  if (!topic.docs.length) say("Nothing pooled for this query.");
  unblock(true);
  return true;
}

function switchTopic(step) {
  const topics = view.state ? view.state.topics : [];
  if (!topics.length) return;
  const at = topics.findIndex((t) => view.topic && t.qid === view.topic.qid);
  const to = at + step;
  const next = topics[(to + topics.length) % topics.length];
  openTopic(next.qid).then((opened) => {
    if (!opened) return;
    if (to >= topics.length) say(`That was the last query: back to the first, ${next.qid}.`);
    if (to < 0) say(`That was the first query: on to the last, ${next.qid}.`);
  });
}

// -- one document -----------------------------------------------------------------------------

function renderGrades() {
  const row = $("grades");
  if (row.childElementCount) return;
  for (const [grade, meaning] of Object.entries(view.state.scale)) {
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
  button.addEventListener("click", () => give(value));
  return button;
}

function fetchDocument(qid, docId) {
  const key = docKey(qid, docId);
  if (!view.documents.has(key)) {
    const url = `/judge/api/document?${query({ qid, doc_id: docId })}`;
    const loading = request("GET", url);
    loading.catch(() => view.documents.delete(key)); // asked again when shown again
    view.documents.set(key, loading);
  }
  return view.documents.get(key);
}

function onScreen() {
  return view.topic && view.position !== null ? view.topic.docs[view.position] : null;
}

// Put the document at `position` on screen at once (its text follows when it arrives); null:
// no document, the query's summary instead.
function show(position) {
  const docs = view.topic.docs;
  const last = docs.length - 1;
  view.position = position === null || last < 0 ? null : Math.max(0, Math.min(last, position));
  const entry = onScreen();
  renderHead(entry);
  renderStatus();
  if (!entry) return;
  const qid = view.topic.qid;
  fetchDocument(qid, entry.doc_id).then(
    (doc) => onScreen() === entry && renderDocument(doc),
    (error) => onScreen() === entry && say(`Cannot show ${entry.doc_id}'s text: ${error.message}`),
  );
  const next = nextOpen(view.position + 1);
  if (next !== null) fetchDocument(qid, docs[next].doc_id).catch(() => {}); // read next
}

// The document's head (position, id, grade) and title; without a document, what is instead.
function renderHead(entry, instead = "") {
  const docs = view.topic ? view.topic.docs : [];
  $("position").textContent = entry ? `${view.position + 1} of ${docs.length}` : "";
  $("doc-id").textContent = entry ? `id ${entry.doc_id}` : "";
  $("doc-title").textContent = entry ? entry.title || "(no title)" : instead || summary();
  $("doc-text").replaceChildren();
  if (!entry && !instead && docs.length) {
    $("doc-text").textContent = "] next query · p the last document · n the first";
  }
  renderBadge(entry);
}

function summary() {
  if (!view.topic || !view.topic.docs.length) return "";
  const here = unsaved(view.topic.qid);
  if (here) return `Every document of this query has a grade; ${here} not saved yet.`;
  return "Every document of this query is judged.";
}

function renderBadge(entry) {
  const badge = $("doc-grade");
  const s = entry ? standing(entry) : { grade: null, skipped: false, saved: false };
  const meaning = s.grade === null ? "" : `: ${view.state.scale[String(s.grade)]}`;
  const what = `${s.skipped ? "skip" : s.grade}: ${view.failures ? "not saved yet" : "saving…"}`;
  const shown = s.saved ? `${gradeName(s.grade)}${meaning}` : what; // graded: the server agreed
  badge.textContent = s.grade === null && !s.skipped ? "" : shown;
  badge.className = `grade-badge${s.saved ? " saved" : ""}`;
  const current = s.skipped ? "skip" : String(s.grade);
  for (const button of $("grades").children) {
    button.classList.toggle("current", Boolean(entry) && button.dataset.grade === current);
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
  const { start, stop } = doc.passage; // code points, as Python counts them
  const chars = Array.from(doc.text);
  appendHighlighted(text, chars.slice(0, start).join(""), terms);
  const passage = document.createElement("span");
  passage.className = "passage";
  passage.id = "passage";
  appendHighlighted(passage, chars.slice(start, stop).join(""), terms);
  text.append(passage);
  appendHighlighted(text, chars.slice(stop).join(""), terms);
  text.scrollTop = Math.max(0, passage.offsetTop - text.offsetTop - 24);
}

// -- grading: applied at once on the page, saved through the outbox ---------------------------

function give(value) {
  if (!view.assessor) {
    say("Type your name first (top right), then Enter.");
    $("assessor").focus();
    return;
  }
  const entry = onScreen();
  if (!entry) {
    say("No document on screen: ] for the next query, p to look back.");
    return;
  }
  const seq = ++view.seq;
  const qid = view.topic.qid;
  const body = { qid, doc_id: entry.doc_id, assessor: view.assessor, grade: value, seq };
  body.client = view.client;
  const given = { seq, grade: value, skipped: value === null, saved: false };
  view.given.set(docKey(qid, entry.doc_id), given);
  send({
    path: "judgments",
    body,
    done: (answer) => saved(body, answer),
    refused: (error) => {
      forget(body);
      view.alert = `Not saved: ${entry.doc_id} ${gradeName(value)}: ${error.message}`;
    },
  });
  say(`${entry.doc_id}: ${value === null ? "skip" : value} given.`);
  show(nextOpen(view.position + 1));
}

// The server's answer to a grade: the document shows as graded only when it agrees.
function saved(body, answer) {
  const same = answer.client === view.client && answer.qid === body.qid;
  const agrees = answer.seq === body.seq && answer.grade === body.grade; // stored as sent
  const newer = answer.seq > body.seq; // a later grade of it stands: that one's answer follows
  if (!same || answer.doc_id !== body.doc_id || !(agrees || newer)) {
    forget(body);
    view.alert =
      `The server holds ${gradeName(answer.grade)} for ${answer.doc_id}, not ` +
      `${gradeName(body.grade)} for ${body.doc_id}: look at it again.`;
    return;
  }
  const { judged, skipped, pooled } = answer;
  Object.assign(topicState(answer.qid), { judged, skipped, pooled });
  const given = view.given.get(docKey(body.qid, body.doc_id));
  if (given && given.seq === answer.seq) given.saved = true;
  if (answer.seq === view.seq) view.note = `Saved: ${answer.doc_id} ${gradeName(answer.grade)}.`;
  renderTopics();
  refresh();
}

// A grade that will not be saved: its document is open again (unless graded since).
function forget(body) {
  const key = docKey(body.qid, body.doc_id);
  if (view.given.has(key) && view.given.get(key).seq === body.seq) view.given.delete(key);
  refresh();
}

function send(item) {
  view.outbox.push(item);
  pump();
}

// Send the outbox's first request; again after a failure (the same request: the server
// stores it once); the next once it is answered. A refusal (4xx) is final: said, and dropped.
async function pump() {
  if (view.sending || !view.outbox.length) return;
  view.sending = true;
  clearTimeout(view.timer);
  const item = view.outbox[0];
  try {
    const answer = await request("POST", `/judge/api/${item.path}`, item.body);
    view.outbox.shift();
    view.failures = 0;
    if (view.alert.startsWith("Not saved")) view.alert = "";
    item.done(answer);
  } catch (error) {
    const retry = [401, 408, 429].includes(error.status);
    if (error.status >= 400 && error.status < 500 && !retry) {
      view.outbox.shift();
      view.failures = 0;
      item.refused(error);
    } else {
      view.failures += 1;
      const waiting = plural(view.outbox.length, "request");
      view.alert = `Not saved: ${error.message}. ${waiting} waiting; trying again.`;
      view.timer = setTimeout(pump, RETRY_MS[Math.min(view.failures, RETRY_MS.length) - 1]);
    }
  } finally {
    view.sending = false;
    refresh();
  }
  if (!view.failures) pump();
}

// Drop the requests not answered yet (the banner's button): their documents are open again.
function drop() {
  clearTimeout(view.timer);
  view.failures = 0;
  for (const item of view.outbox.splice(0)) item.refused(new Error("dropped"));
  view.alert = "";
  refresh();
}

// Undo waits for the grades before it (it is in the outbox after them), then shows the
// document it withdrew the grade of; keys wait meanwhile.
function undo() {
  if (!view.assessor) return;
  const was = view.position;
  setBlocked("Undoing…");
  const seq = ++view.seq;
  const body = { assessor: view.assessor, client: view.client, seq };
  const failed = (error) => {
    say(`Nothing undone: ${error.message}`);
    unblock(false);
    if (view.topic) show(was);
  };
  send({
    path: "undo",
    body,
    refused: failed,
    done: async (undone) => {
      view.given.delete(docKey(undone.qid, undone.doc_id));
      try {
        await loadState();
      } catch (error) {
        return failed(error);
      }
      if (await openTopic(undone.qid, undone.doc_id)) {
        say(`Undone: ${undone.doc_id} ${gradeName(undone.grade)}.`);
      }
    },
  });
}

function move(step) {
  if (!view.topic || !view.topic.docs.length) return;
  if (view.position === null) show(step > 0 ? 0 : view.topic.docs.length - 1);
  else show(view.position + step);
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
    say(`Not pooled: ${error.message}`);
  }
}

// -- the keyboard and start-up ----------------------------------------------------------------

const KEYS = {
  s: () => give(null),
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
  const known = (view.state && event.key in view.state.scale) || event.key in KEYS;
  if (!known) return;
  event.preventDefault();
  if (!view.blocked) {
    runKey(event.key);
  } else if (view.waiting.length < MAX_WAITING) {
    view.waiting.push(event.key); // applied in order once the query or the undo is done
  } else {
    say(`${MAX_WAITING} keys are waiting for the server; this one was not kept.`);
  }
}

function runKey(key) {
  if (view.state && key in view.state.scale) give(Number(key));
  else KEYS[key]();
}

async function start(assessor) {
  view.assessor = assessor;
  localStorage.setItem(ASSESSOR_KEY, assessor);
  $("assessor").value = assessor;
  $("assessor").blur();
  try {
    await loadState();
  } catch (error) {
    say(error.message);
    return;
  }
  if (!view.state.topics.length) {
    say("No queries pooled yet: add one above, or run dotcat judge pool.");
    return;
  }
  const wanted = new URLSearchParams(location.search).get("q");
  const first = view.state.topics.find((t) => t.judged + t.skipped < t.pooled);
  await openTopic(topicState(wanted) ? wanted : (first || view.state.topics[0]).qid);
}

document.addEventListener("DOMContentLoaded", () => {
  document.addEventListener("keydown", onKey);
  $("who").addEventListener("submit", (event) => {
    event.preventDefault();
    const name = $("assessor").value.trim();
    if (name) start(name);
  });
  $("topic").addEventListener("change", () => {
    openTopic($("topic").value);
    $("topic").blur();
  });
  $("topic-form").addEventListener("submit", addTopic);
  $("previous").addEventListener("click", () => move(-1));
  $("next").addEventListener("click", () => move(1));
  $("undo").addEventListener("click", undo);
  $("alert-retry").addEventListener("click", pump);
  window.addEventListener("beforeunload", (event) => {
    if (view.outbox.length) event.preventDefault(); // grades not saved yet: ask first
  });
  const given = new URLSearchParams(location.search).get("assessor");
  const name = (given || localStorage.getItem(ASSESSOR_KEY) || "").trim();
  if (name) {
    start(name);
  } else {
    say("Type your name (top right) and press Enter to start.");
    $("assessor").focus();
  }
});
