"""What a text file looks like, for errors that meet the wrong kind of file.

A qrels file given where a run is expected (``dotcat eval QRELS RUN``: the two swapped), a
queries file given as qrels: the reader fails on some field of the first line, and "expected 6
fields, found 4" does not say what happened. :func:`looks_like` reads the first lines and names
the kind they look like, so that the error can say it: "this looks like TREC qrels (4
columns: query, iteration, document, relevance)".
"""

from __future__ import annotations

from pathlib import Path

from dotcat.data._io import is_integer, iter_lines

#: The kinds :func:`looks_like` tells apart, as an error names them.
RUN = "a TREC run (6 columns: query, Q0, document, rank, score, tag)"
TREC_QRELS = "TREC qrels (4 columns: query, iteration, document, relevance)"
BEIR_QRELS = "BEIR qrels (query-id, corpus-id, score, under a header)"
QUERIES = "a queries file (an id, a tab, the query's text)"
JSON_LINES = "JSON Lines (a corpus or queries file)"
#: What the first column of a qrels file's header says.
QRELS_HEADERS = {"query-id", "query_id", "qid", "queryid", "query"}


def looks_like(path: Path) -> str | None:
    """The kind of file ``path``'s first line looks like (:data:`RUN`, :data:`TREC_QRELS`,
    :data:`BEIR_QRELS`, :data:`QUERIES`, :data:`JSON_LINES`), None when it is none of them
    or cannot be read."""
    try:
        first = next((text for _, text in iter_lines(path)), None)
    except (OSError, UnicodeDecodeError, EOFError, ValueError):
        return None
    return None if first is None else _kind(first)


def _kind(line: str) -> str | None:
    if line.lstrip().startswith("{"):
        return JSON_LINES
    tabs = line.split("\t")
    fields = line.split()
    if len(tabs) == 3 and (tabs[0].strip().lower() in QRELS_HEADERS or is_integer(tabs[2].strip())):
        return BEIR_QRELS
    if len(tabs) == 2 and tabs[1].strip():
        return QUERIES
    if len(fields) == 6 and is_integer(fields[3]) and _is_number(fields[4]):
        return RUN
    return TREC_QRELS if len(fields) == 4 and is_integer(fields[3]) else None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def hint(path: Path, expected: str | tuple[str, ...]) -> str:
    """``"; this looks like KIND"`` when ``path`` looks like another kind than ``expected``
    (one of this module's kinds, or several), else ``""``."""
    kind = looks_like(path)
    wanted = (expected,) if isinstance(expected, str) else expected
    return "" if kind is None or kind in wanted else f"; this looks like {kind}"
