// Query terms in <mark>, shared by the search page and the judging page. Text is only ever
// inserted as text nodes (never innerHTML), so a document cannot inject markup.
"use strict";

// A term this long or longer also marks the words it begins ("cell": "cells"), as the
// server's snippets do (dotcat.serve.snippet.PREFIX_CHARS).
const PREFIX_CHARS = 4;

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

// The pattern matching `terms` as the server's snippets do, or null without terms.
function termPattern(terms) {
  if (!terms.length) return null;
  const longer = terms.filter((t) => t.length >= PREFIX_CHARS).map(escapeRegExp);
  const short = terms.filter((t) => t.length < PREFIX_CHARS).map(escapeRegExp);
  const alternatives = [];
  if (longer.length) alternatives.push(`(?:${longer.join("|")})[\\p{L}\\p{N}]*`);
  if (short.length) alternatives.push(`(?:${short.join("|")})(?![\\p{L}\\p{N}])`);
  return new RegExp(`(?<![\\p{L}\\p{N}])(?:${alternatives.join("|")})`, "giu");
}

// Append `text` to `parent`, with the query's terms in <mark>.
function appendHighlighted(parent, text, terms) {
  const pattern = termPattern(terms);
  if (!pattern) {
    parent.append(text);
    return;
  }
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
