// dotcat's search page: plain JavaScript, no build step, no network beyond this server.
// Document text is only ever inserted as text nodes (never innerHTML), so a document cannot
// inject markup into the page.
"use strict";

const $ = (id) => document.getElementById(id);
const SNIPPET_CHARS = 280;
const STOP = new Set(["a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in",
  "is", "it", "of", "on", "or", "that", "the", "to", "was", "were", "with"]);

let info = null;

function apiHeaders() {
  const headers = { Accept: "application/json" };
  const key = $("api-key").value || sessionStorage.getItem("dotcat-api-key") || "";
  if (key) headers["X-API-Key"] = key;
  return headers;
}

async function getJSON(url) {
  const response = await fetch(url, { headers: apiHeaders() });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) {
    $("key-row").hidden = false;
    $("options").open = true;
  }
  if (!response.ok) {
    throw new Error(body.error || `${response.status} ${response.statusText}`);
  }
  return body;
}

// Query terms for highlighting: lower-cased words of 2+ letters, stop words left out.
function queryTerms(query) {
  return [...new Set(query.toLowerCase().match(/[\p{L}\p{N}]{2,}/gu) || [])]
    .filter((t) => !STOP.has(t));
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

// The part of the text around the first query term, at most SNIPPET_CHARS long.
function snippetOf(text, terms) {
  if (text.length <= SNIPPET_CHARS) return text;
  const lower = text.toLowerCase();
  let first = -1;
  for (const term of terms) {
    const at = lower.indexOf(term);
    if (at >= 0 && (first < 0 || at < first)) first = at;
  }
  let start = Math.max(0, first - 60);
  if (start > 0) start = text.indexOf(" ", start) + 1 || start;
  const end = Math.min(text.length, start + SNIPPET_CHARS);
  return (start > 0 ? "… " : "") + text.slice(start, end) + (end < text.length ? " …" : "");
}

// Append `text` to `parent`, with the query terms (word prefixes: "cell" marks "cells") in <mark>.
function appendHighlighted(parent, text, terms) {
  if (!terms.length) {
    parent.append(text);
    return;
  }
  const pattern = new RegExp(`\\b(${terms.map(escapeRegExp).join("|")})[\\p{L}\\p{N}]*`, "giu");
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    parent.append(text.slice(last, match.index));
    const mark = document.createElement("mark");
    mark.textContent = match[0];
    parent.append(mark);
    last = match.index + match[0].length;
  }
  parent.append(text.slice(last));
}

function renderHit(hit, terms) {
  const item = document.createElement("li");
  item.className = "hit";
  item.tabIndex = 0;
  item.dataset.docId = hit.doc_id;

  const head = document.createElement("div");
  head.className = "hit-head";
  const rank = document.createElement("span");
  rank.className = "rank";
  rank.textContent = `${hit.rank}.`;
  const title = document.createElement("span");
  title.className = "title";
  appendHighlighted(title, hit.title || "(no title)", terms);
  const score = document.createElement("span");
  score.className = "score";
  score.textContent = hit.score.toFixed(4);
  head.append(rank, title, score);

  const snippet = document.createElement("p");
  snippet.className = "snippet";
  appendHighlighted(snippet, snippetOf(hit.text, terms), terms);
  const meta = document.createElement("div");
  meta.className = "meta muted";
  meta.textContent = `id ${hit.doc_id}`;
  item.append(head, snippet, meta);

  // Enter (or a click) shows the whole text; again, the snippet.
  let full = false;
  const toggle = () => {
    full = !full;
    snippet.replaceChildren();
    appendHighlighted(snippet, full ? hit.text : snippetOf(hit.text, terms), terms);
  };
  item.addEventListener("click", toggle);
  item.addEventListener("keydown", (event) => {
    if (event.key === "Enter") toggle();
  });
  return item;
}

async function search(query) {
  const params = new URLSearchParams({ q: query, k: $("k").value || "10" });
  const stage = $("first-stage").value;
  if (stage) params.set("first_stage", stage);
  if (info && info.pipeline.reranker) {
    params.set("rerank", $("rerank").checked ? "true" : "false");
    if ($("rerank").checked) params.set("depth", $("depth").value || "20");
  }
  history.replaceState(null, "", `/?${new URLSearchParams({ q: query })}`);
  const status = $("status");
  status.className = "";
  status.textContent = "Searching…";
  const started = performance.now();
  try {
    const answer = await getJSON(`/search?${params}`);
    const roundTrip = performance.now() - started;
    const terms = queryTerms(query);
    $("results").replaceChildren(...answer.hits.map((hit) => renderHit(hit, terms)));
    const stages = answer.first_stage + (answer.reranked ? " + BERT_CAT" : "");
    status.textContent = answer.hits.length
      ? `${answer.hits.length} results in ${answer.took_ms.toFixed(0)} ms on the server ` +
        `(${roundTrip.toFixed(0)} ms here) · ${stages}`
      : "No results.";
    if (key()) sessionStorage.setItem("dotcat-api-key", key());
  } catch (error) {
    status.className = "error";
    status.textContent = `Error: ${error.message}`;
  }
}

function key() {
  return $("api-key").value;
}

function moveSelection(step) {
  const hits = [...document.querySelectorAll(".hit")];
  if (!hits.length) return;
  const at = hits.indexOf(document.activeElement);
  const next = at < 0 ? 0 : Math.min(hits.length - 1, Math.max(0, at + step));
  hits[next].focus();
}

async function loadInfo() {
  try {
    info = await getJSON("/info");
    const p = info.pipeline;
    $("index-info").textContent =
      `${p.documents.toLocaleString()} documents · ${p.first_stage}` +
      (p.reranker ? ` · BERT_CAT re-ranking available` : "");
    for (const stage of p.stages_available) {
      const option = document.createElement("option");
      option.value = stage;
      option.textContent = stage;
      $("first-stage").append(option);
    }
    $("rerank").disabled = !p.reranker;
    $("rerank").checked = Boolean(p.reranker);
    if (p.reranker) $("depth").value = String(Math.min(p.reranker.depth, 100));
  } catch (error) {
    $("index-info").textContent = `(${error.message})`;
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = $("q").value.trim();
    if (query) search(query);
  });
  document.addEventListener("keydown", (event) => {
    const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
    if (event.key === "/" && !typing) {
      event.preventDefault();
      $("q").focus();
      $("q").select();
    } else if (!typing && (event.key === "j" || event.key === "ArrowDown")) {
      event.preventDefault();
      moveSelection(1);
    } else if (!typing && (event.key === "k" || event.key === "ArrowUp")) {
      event.preventDefault();
      moveSelection(-1);
    } else if (event.key === "Escape") {
      $("q").focus();
    }
  });
  await loadInfo();
  const initial = new URLSearchParams(location.search).get("q");
  if (initial) {
    $("q").value = initial;
    search(initial);
  }
});
