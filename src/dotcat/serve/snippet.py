"""Snippets: a short, bounded excerpt of a document for a search answer, around the query's words.

A server answer carries a snippet per hit rather than the whole document: an answer's size then
depends on ``k``, not on how long the documents are (one 10 MB document would otherwise make
every answer that returns it 10 MB). The whole text is there on request (``full_text``).

The excerpt is the window of at most :data:`SNIPPET_CHARS` characters that holds the most
distinct query terms, opening a little before the first of them (the way web search engines
show a result, e.g. Lucene's highlighter): the query's words of two or more letters or digits,
lower-cased, without NLTK's English stop words (bm25s' ``STOPWORDS_EN_PLUS``); a term of four
or more characters matches the words it begins ("cell": "cells"), a shorter one whole words
only ("dna", not "dnase"); a CJK run (no spaces between its words) is its pairs of characters,
found anywhere. Either spelling of an accent (NFC "é", NFD "e" + U+0301) matches. With no term
in the text, the text's start. A hit that carries the passage that matched (a long document,
:mod:`dotcat.index.passages`) gets its snippet from that passage (:func:`passage_snippet`);
:func:`highlights` says where the terms are in it, as character (code point) offsets a page or
a program marks up. Cuts fall between words and are marked with "…"; runs of white space become
one space. Only the first :data:`SCAN_CHARS` characters are searched for terms, so a huge
document costs no more than a long one.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Any

import regex

from dotcat.index.bm25 import bm25s_stopwords, starts_cjk  # (without importing bm25s)

#: The most characters of document text in a snippet (a cut adds "… " or " …").
SNIPPET_CHARS = 300
#: The most characters of a title in an answer without ``full_text``.
TITLE_CHARS = 200
#: How far into a document the query's terms are looked for.
SCAN_CHARS = 100_000
#: Terms this long or longer also match the words they begin.
PREFIX_CHARS = 4
#: How much of the window comes before the first term found (context to read it in).
LEAD = 0.2

_TERM = regex.compile(r"[^\W_]{2,}")  # (regex's \w holds marks: Devanagari's vowel signs)
_SPACE = re.compile(r"\s")
_GRAPHEME = regex.compile(r"\X")  # what shows as one character: "e" + U+0301, an emoji sequence
_STOP = frozenset(bm25s_stopwords("STOPWORDS_EN_PLUS"))
ELLIPSIS = "…"


def query_terms(query: str) -> list[str]:
    """The query's words that a snippet looks for: lower-cased, two or more letters or
    digits, no stop words, each once, in query order."""
    found = _TERM.findall(unicodedata.normalize("NFC", query))
    words = (t.lower().replace("i\u0307", "i") for t in found)
    terms = (w[i : i + 2] if starts_cjk(w) else w for w in words for i in range(max(1, len(w) - 1)))
    return list(dict.fromkeys(t for t in terms if t not in _STOP))


def snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    """At most ``width`` characters of ``text`` around the most ``terms`` (see the module
    docstring), "…" where it is cut."""
    if len(text) <= width:
        return _squeeze(text)
    start, end = best_window(text, terms, width)
    body = _squeeze(text[start:end])
    head = f"{ELLIPSIS} " if start > 0 else ""
    tail = f" {ELLIPSIS}" if end < len(text) else ""
    return head + body + tail


def passage_snippet(
    text: str, start: int, stop: int, terms: list[str], width: int = SNIPPET_CHARS
) -> str:
    """:func:`snippet` of the passage ``text[start:stop]`` (the part of a long document that
    matched), with "…" where the passage itself is cut out of the document."""
    inner = snippet(text[start:stop], terms, width)
    if text[:start].strip() and not inner.startswith(ELLIPSIS):
        inner = f"{ELLIPSIS} {inner}"
    if text[stop:].strip() and not inner.endswith(ELLIPSIS):
        inner = f"{inner} {ELLIPSIS}"
    return inner


def highlights(text: str, terms: list[str]) -> list[tuple[int, int]]:
    """Where the query's terms are in ``text`` (a snippet): ``(start, stop)`` character
    offsets of each word a term matches (:func:`_matches`: the whole word a term of
    :data:`PREFIX_CHARS` or more characters begins), in order."""
    spans = []
    for at, term in _matches(text[:SCAN_CHARS], terms):
        stop = at + len(term)
        while stop < len(text) and _in_word(text[stop]) and not starts_cjk(term):
            stop += 1
        if spans and at < spans[-1][1]:  # overlapping (CJK pairs): one span
            spans[-1] = (spans[-1][0], max(stop, spans[-1][1]))
        else:
            spans.append((at, stop))
    return spans


def hit_snippet(hit: Any, terms: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """A hit's snippet, cut from the passage that matched where there is one, and where the
    query's terms are in it (:func:`highlights`)."""
    if hit.start is None or hit.stop is None:
        cut = snippet(hit.text, terms)
    else:
        cut = passage_snippet(hit.text, hit.start, hit.stop, terms)
    return cut, highlights(cut, terms)


def best_window(text: str, terms: list[str], width: int) -> tuple[int, int]:
    """``(start, stop)`` of the ``width`` characters of ``text`` that hold the most distinct
    query ``terms`` (the window :func:`snippet` cuts, uncut: the judging page marks it as the
    passage to read first), on word boundaries where they are near."""
    if len(text) <= width:
        return 0, len(text)
    start = _best_start(text[:SCAN_CHARS], terms, width)
    if start > 0:  # begin on a word: skip the rest of a cut one
        space = _next_space(text, start, start + width // 4)
        start = space + 1 if space >= 0 else start
    stop = min(len(text), start + width)
    if stop < len(text) and not text[stop].isspace():  # end on a word: leave out a cut one
        stop = _last_space(text, start + width // 2, stop)
    return _grapheme_start(text, start), _grapheme_start(text, stop)


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with "…" at the end (on a word where one ends
    near the cut)."""
    if len(text) <= width:
        return text
    cut = text.rfind(" ", width // 2, width)
    return text[: cut if cut > 0 else _grapheme_start(text, width - 1)].rstrip() + ELLIPSIS


def _best_start(text: str, terms: list[str], width: int) -> int:
    """Where the window with the most distinct terms begins (0 when no term occurs).

    A sliding window over the matches (two pointers, each match counted in and out once):
    for each match as the window's first term, the distinct terms that start before the
    window's end. Ties go to the earlier window.
    """
    matches = _matches(text, terms)
    if not matches:
        return 0
    lead = int(width * LEAD)
    reach = width - lead  # from the first term to the window's end
    best, best_at = 0, matches[0][0]
    seen: Counter[str] = Counter()
    right = 0
    for at, term in matches:
        while right < len(matches) and matches[right][0] < at + reach:
            seen[matches[right][1]] += 1
            right += 1
        if len(seen) > best:
            best, best_at = len(seen), at
        seen[term] -= 1
        if not seen[term]:
            del seen[term]
    return max(0, best_at - lead)


def _matches(text: str, terms: list[str]) -> list[tuple[int, str]]:
    """Where the terms begin words of ``text``, in order: ``(position, term)``. A term of
    :data:`PREFIX_CHARS` or more characters matches the words it begins ("cell": "cells"), a
    shorter one whole words ("dna", not "dnase"). (``str.find`` on the lower-cased text: a
    regular expression ignoring case is several times slower.)"""
    lower = text.lower()
    if len(lower) != len(text):  # a letter whose lower case is longer ("İ"): keep positions
        lower = "".join(c.lower()[0] for c in text)
    found = []
    for term, form in ((t, f) for t in terms for f in {t, unicodedata.normalize("NFD", t)}):
        whole, free = len(term) < PREFIX_CHARS, starts_cjk(term)  # (CJK: no spaces, no words)
        at = lower.find(form)
        while at >= 0:
            end = at + len(form)
            starts = free or at == 0 or not _in_word(lower[at - 1])
            if starts and not (whole and not free and end < len(lower) and _in_word(lower[end])):
                found.append((at, term))
            at = lower.find(form, end)
    found.sort()
    return found


def _grapheme_start(text: str, at: int) -> int:
    """``at``, or where the grapheme it cuts begins (a cut inside one long word)."""
    if 0 < at < len(text):
        return next(m.start() for m in _GRAPHEME.finditer(text, max(0, at - 32)) if m.end() > at)
    return at


def _next_space(text: str, start: int, stop: int) -> int:
    """The first white space in ``text[start:stop]``, or -1 (a cut inside a word)."""
    if text[start - 1].isspace():
        return start - 1  # the cut is already between words
    match = _SPACE.search(text, start, stop)
    return match.start() if match else -1


def _last_space(text: str, start: int, end: int) -> int:
    """The last white space in ``text[start:end]``, else ``end`` (one long word: cut it)."""
    return next((at for at in range(end - 1, start - 1, -1) if text[at].isspace()), end)


def columns(text: str) -> int:
    """The terminal columns ``text`` takes: two a wide (CJK) character, none a mark or a joiner."""
    return sum(0 if unicodedata.category(c) in ("Mn", "Me", "Cf") else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)  # fmt: skip


def _in_word(char: str) -> bool:
    """A letter, a digit, or a mark on one (the accent of "e" + U+0301, a vowel sign)."""
    return char.isalnum() or unicodedata.category(char)[0] == "M"


def _squeeze(text: str) -> str:
    return " ".join(text.split())
