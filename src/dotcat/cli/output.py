"""What the search commands print: a table that fits the terminal, JSON, and line mode."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import unicodedata
from collections.abc import Callable, Sequence

import typer

from dotcat.errors import DotcatError
from dotcat.search.hits import Hit
from dotcat.serve.snippet import columns, hit_snippet, query_terms

#: Narrowest text column: below it the table would be unreadable, and wraps instead.
_MIN_TEXT = 20
_SCORE_WIDTH = 8


def hits_json(hits: Sequence[Hit], query: str = "", full_text: bool = False) -> list[dict]:
    """The hits as the server answers them (:class:`dotcat.serve.protocol.HitOut`): rank, id,
    score and its kind, title, the snippet cut from the passage that matched with the
    query's terms as character offsets into it (``highlights``), the passage's place in the
    text, the fields; the whole text only with ``full_text``."""
    terms = query_terms(query)
    out = []
    for h in hits:
        cut, marks = hit_snippet(h, terms)
        passage = None
        if h.start is not None and h.stop is not None:
            passage = {"start": h.start, "stop": h.stop, "text": h.passage}
        item = {"rank": h.rank, "doc_id": h.doc_id, "score": h.score, "score_kind": h.score_kind,
                "title": h.title, "snippet": cut, "highlights": [list(m) for m in marks],
                "passage": passage, "fields": h.fields}  # fmt: skip
        if full_text:
            item["text"] = h.text
        out.append(item)
    return out


def print_hits(
    hits: Sequence[Hit],
    as_json: bool,
    *,
    query: str = "",
    full_text: bool = False,
    width: int | None = None,
) -> None:
    """The hits as JSON (:func:`hits_json`), or as a table whose lines fit ``width`` columns
    (the terminal's, ``COLUMNS`` where set): rank, score (headed by its kind: ``cosine
    score``, ``rrf score``), document id, then title and snippet (the passage that matched,
    around the query's words, as the page shows it) cut to the room left."""
    if as_json:
        typer.echo(json.dumps(hits_json(hits, query, full_text), ensure_ascii=False, indent=2))
        return
    if not hits:
        typer.echo("no results")
        return
    width = width or shutil.get_terminal_size().columns
    kind = hits[0].score_kind
    header = f"{kind} score" if kind else "score"
    score_width = max(_SCORE_WIDTH, len(header))
    id_width = max(6, *(columns(h.doc_id) for h in hits))
    text_width = max(_MIN_TEXT, width - (4 + 2 + score_width + 2 + id_width + 2))
    typer.echo(f"{'rank':>4}  {header:>{score_width}}  {'doc id':<{id_width}}  title / snippet")
    terms = query_terms(query)
    for h in hits:
        # (cut first: textwrap reads all of a text, and a document may be 50 MB)
        head = 4 * text_width + 100
        title = _shorten(h.title[:head] or "(no title)", text_width)
        snippet = _shorten(hit_snippet(h, terms)[0][:head], text_width)
        doc_id = h.doc_id + " " * (id_width - columns(h.doc_id))  # (wide characters: 2)
        typer.echo(f"{h.rank:>4}  {h.score:>{score_width}.4f}  {doc_id}  {title}")
        if snippet:
            typer.echo(f"{'':>4}  {'':>{score_width}}  {'':<{id_width}}  {snippet}")


def _shorten(text: str, width: int) -> str:
    """``text`` on one line of ``width`` terminal columns (a CJK character takes two), cut
    between words, or inside the first where it is longer than the line (Chinese or Japanese
    text has no spaces: one "word" a sentence), never between a letter and its marks."""
    flat = " ".join(text.split())
    if columns(flat) == len(flat):  # a column a character: cut as textwrap cuts
        short = textwrap.shorten(flat, width, placeholder="...")
        return flat[: width - 3] + "..." if short == "..." else short
    if columns(flat) <= width:
        return flat
    used = end = 0  # ``end``: the first character left out
    width -= 3  # (the "...")
    while (used := used + columns(flat[end])) <= width:
        end += 1
    while end and (unicodedata.category(flat[end])[0] == "M" or "\u200d" in flat[end - 1 :][:2]):
        end -= 1  # (a letter with its marks, a joined emoji: whole or not at all)
    space = flat.rfind(" ", end // 2, end)
    return flat[: space if space > 0 else end] + "..."


def search_lines(
    search_one: Callable[[str], Sequence[Hit]], as_json: bool, full_text: bool = False
) -> None:
    """Queries from stdin, one per line, answered as they come.

    On a terminal: a prompt, a first line saying how to stop (Ctrl-D, or an empty line), and
    each answer headed by its query. From a pipe, blank lines are skipped. A bad query prints
    its error and the loop goes on. With --json, one JSON object per line
    (``{"query": ..., "hits": [...]}``), for programs.
    """
    interactive = sys.stdin.isatty()
    if interactive:
        typer.echo("one query per line; Ctrl-D or an empty line quits", err=True)
    while True:
        if interactive:
            typer.echo("query> ", nl=False, err=True)
        line = sys.stdin.readline()
        text = line.strip()
        if not line or (interactive and not text):
            break
        if not text:
            continue
        try:
            hits = search_one(text)
        except DotcatError as e:
            typer.echo(f"dotcat: error: {e}", err=True)
            continue
        if as_json:
            answer = {"query": text, "hits": hits_json(hits, text, full_text)}
            typer.echo(json.dumps(answer, ensure_ascii=False))
        else:
            typer.echo(f"query: {text}")
            print_hits(hits, False, query=text)
            typer.echo("")
        sys.stdout.flush()
