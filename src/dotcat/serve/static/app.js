// dotcat's search page: plain JavaScript, no build step, no network beyond this server.
// Document text is only ever inserted as text nodes (never innerHTML), so a document cannot
// inject markup into the page; highlight.js marks the query's terms.
"use strict";

const $ = (id) => document.getElementById(id);
// The search options kept in the page's address beside q (and filter).
const OPTIONS = ["k", "first_stage", "rerank", "depth"];
// The fields shown under a hit, at most (the rest are in its JSON).
const SHOWN_FIELDS = 6;

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

// Append `snippet` to `parent` with the spans `highlights` ([start, stop) offsets the server
// found the query's words at, in code points as Python counts them, not UTF-16 units) in <mark>.
function appendMarked(parent, snippet, highlights) {
  const text = Array.from(snippet);
  let last = 0;
  for (const [start, stop] of highlights) {
    if (start < last || stop > text.length) continue;
    parent.append(text.slice(last, start).join(""));
    const mark = document.createElement("mark");
    mark.textContent = text.slice(start, stop).join("");
    parent.append(mark);
    last = stop;
  }
  parent.append(text.slice(last).join(""));
}

// A field's value as text: a list joined by commas.
function fieldText(value) {
  return Array.isArray(value) ? value.join(", ") : String(value);
}

// Add `field = "value"` to the filter (a facet's click) and search again.
function narrow(field, value) {
  const name = /^[A-Za-z_][\w.-]*$/.test(field) ? field : `\`${field}\``;
  const known = ((info && info.fields) || []).find((f) => f.name === field);
  const literal = known && known.kind === "number" ? String(value) : JSON.stringify(String(value));
  const condition = `${name} = ${literal}`;
  const current = $("filter").value.trim();
  $("filter").value = current ? `(${current}) and ${condition}` : condition;
  const query = $("q").value.trim();
  if (query) search(query);
}

function renderFacets(facets) {
  const box = $("facets");
  box.replaceChildren();
  for (const facet of facets || []) {
    const group = document.createElement("span");
    group.className = "facet";
    const name = document.createElement("span");
    name.className = "facet-name";
    name.textContent = `${facet.field}:`;
    group.append(name);
    for (const { value, count } of facet.values.slice(0, 8)) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "facet-value";
      button.textContent = value === "" ? "(none)" : value;
      const counted = document.createElement("span");
      counted.className = "count";
      counted.textContent = `(${count})`;
      button.append(counted);
      button.addEventListener("click", () => narrow(facet.field, value));
      group.append(button);
    }
    box.append(group);
  }
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
  if (hit.highlights) appendMarked(snippet, hit.snippet, hit.highlights);
  else appendHighlighted(snippet, hit.snippet, terms);
  const meta = document.createElement("div");
  meta.className = "meta muted";
  meta.textContent = `id ${hit.doc_id}`;
  item.append(head, snippet, meta);
  const shown = Object.entries(hit.fields || {}).slice(0, SHOWN_FIELDS);
  if (shown.length) {
    const fields = document.createElement("div");
    fields.className = "fields muted";
    fields.textContent = shown.map(([name, value]) => `${name}: ${fieldText(value)}`).join(" · ");
    item.append(fields);
  }

  // Enter (or a click) shows the whole text, asked of the server once; again, the snippet.
  let full = false;
  let text = null;
  const toggle = async () => {
    full = !full;
    if (full && text === null) {
      try {
        text = (await getJSON(`/documents/${encodeURIComponent(hit.doc_id)}`)).text;
      } catch (error) {
        full = false;
        meta.textContent = `id ${hit.doc_id} · ${error.message}`;
        return;
      }
    }
    snippet.replaceChildren();
    if (full || !hit.highlights) appendHighlighted(snippet, full ? text : hit.snippet, terms);
    else appendMarked(snippet, hit.snippet, hit.highlights);
    item.classList.toggle("open", full);
  };
  item.addEventListener("click", toggle);
  item.addEventListener("keydown", (event) => {
    if (event.key === "Enter") toggle();
  });
  return item;
}

// The search's parameters: the query and the options the form sets.
function searchParams(query) {
  const params = new URLSearchParams({ q: query, k: $("k").value || "10" });
  const filter = $("filter").value.trim();
  if (filter) params.set("filter", filter);
  params.set("facets", "true");
  const stage = $("first-stage").value;
  if (stage) params.set("first_stage", stage);
  if (info && info.reranker) {
    params.set("rerank", $("rerank").checked ? "true" : "false");
    if ($("rerank").checked) params.set("depth", $("depth").value || String(info.reranker.depth));
  }
  return params;
}

// The options of a page address (e.g. a bookmark) into the form. A field set here or by the
// user keeps its value when /info answers (loadInfo sets the others to the server's defaults).
function restoreOptions(params) {
  if (params.has("filter")) $("filter").value = params.get("filter");
  if (params.has("k")) setField("k", params.get("k"));
  if (params.has("first_stage")) setField("first-stage", params.get("first_stage"));
  if (params.has("rerank")) {
    $("rerank").checked = params.get("rerank") === "true";
    $("rerank").dataset.set = "1";
  }
  if (params.has("depth")) setField("depth", params.get("depth"));
}

function setField(id, value) {
  $(id).dataset.set = "1";
  $(id).dataset.wanted = value; // a first stage may come before its <option> does
  $(id).value = value;
}

async function search(query) {
  if (!info) await loadInfo(); // a key given since: the header and the options follow it
  const params = searchParams(query);
  const shown = new URLSearchParams(params);
  shown.delete("facets"); // the page always asks for them
  history.replaceState(null, "", `/?${shown}`);
  const status = $("status");
  status.className = "";
  status.textContent = "Searching…";
  const started = performance.now();
  try {
    const answer = await getJSON(`/search?${params}`);
    const roundTrip = performance.now() - started;
    $("results").replaceChildren(...answer.hits.map((hit) => renderHit(hit, answer.terms)));
    renderFacets(answer.facets);
    const stages = answer.first_stage + (answer.reranked ? " + BERT_CAT" : "");
    status.textContent = answer.hits.length
      ? `${answer.hits.length} result${answer.hits.length === 1 ? "" : "s"} in ` +
        `${answer.took_ms.toFixed(0)} ms on the server ` +
        `(${roundTrip.toFixed(0)} ms here) · ${stages}`
      : answer.filter
        ? "No results within the filter."
        : "No results.";
    if ($("api-key").value) sessionStorage.setItem("dotcat-api-key", $("api-key").value);
  } catch (error) {
    status.className = "error";
    status.textContent = `Error: ${error.message}`;
    $("results").replaceChildren();
    renderFacets([]);
  }
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
  } catch (error) {
    $("index-info").textContent = `(${error.message})`;
    return;
  }
  $("index-info").textContent =
    `${info.index.documents.toLocaleString()} documents · ${info.first_stage}` +
    (info.reranker ? " · BERT_CAT re-ranking available" : "");
  const select = $("first-stage");
  select.replaceChildren(select.options[0]);
  for (const stage of info.first_stages) {
    const option = document.createElement("option");
    option.value = stage;
    option.textContent = stage;
    select.append(option);
  }
  if (info.first_stages.includes(select.dataset.wanted)) select.value = select.dataset.wanted;
  $("k").max = String(info.limits.max_k);
  if (Number($("k").value) > info.limits.max_k) $("k").value = $("k").max; // (else a 422)
  $("depth").max = String(info.limits.max_depth);
  $("rerank").disabled = $("depth").disabled = !info.reranker;
  if (!info.reranker || !$("rerank").dataset.set) $("rerank").checked = Boolean(info.reranker);
  if (info.reranker && !$("depth").dataset.set) $("depth").value = String(info.reranker.depth);
}

document.addEventListener("DOMContentLoaded", async () => {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = $("q").value.trim();
    if (!query) return;
    $("q").blur(); // the keys are the page's again: j, k walk the results, / comes back
    search(query);
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
  for (const id of ["k", "first-stage", "depth"]) {
    $(id).addEventListener("change", () => setField(id, $(id).value));
  }
  $("rerank").addEventListener("change", () => {
    $("rerank").dataset.set = "1";
  });
  const initial = new URLSearchParams(location.search);
  restoreOptions(initial);
  await loadInfo();
  if (OPTIONS.some((name) => initial.has(name))) $("options").open = true;
  const query = initial.get("q");
  if (query) {
    $("q").value = query;
    search(query);
  }
});
