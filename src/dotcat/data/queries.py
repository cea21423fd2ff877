"""Queries: BEIR ``queries.jsonl`` (``_id``, ``text``), JSON Lines or TSV (``qid<TAB>text``).

Files may be gzipped. With a BEIR directory and a split, only the queries judged in
``qrels/<split>.tsv`` are returned, as BEIR's own ``GenericDataLoader`` does.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dotcat.data._io import (
    check_id,
    detect_format,
    find_one,
    get_json_id,
    get_json_text,
    iter_lines,
    parse_json_object,
    require_file,
    split_tsv,
)
from dotcat.data.catalog import resolve_data_path
from dotcat.data.qrels import available_splits, load_qrels
from dotcat.data.sniff import QUERIES, hint
from dotcat.errors import DataFormatError

logger = logging.getLogger(__name__)

#: Names looked for in a BEIR directory, in this order.
QUERIES_FILE_NAMES = ("queries.jsonl", "queries.jsonl.gz")
_TSV_ID_HEADERS = {"id", "_id", "qid", "query-id", "query_id"}
_TSV_TEXT_HEADERS = {"text", "query"}
_EXAMPLES = 5


def find_queries_file(path: str | Path) -> Path:
    """The queries file of ``path``: a BEIR directory's ``queries.jsonl[.gz]``, or a file."""
    p = resolve_data_path(path)
    return find_one(p, QUERIES_FILE_NAMES, "queries") if p.is_dir() else require_file(p)


def _read_queries(file: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    jsonl = detect_format(file) == "jsonl"
    first_record = True
    for lineno, line in iter_lines(file):
        if jsonl:
            obj = parse_json_object(file, lineno, line)
            qid, id_field = get_json_id(file, lineno, obj)
            text = get_json_text(file, lineno, obj, ("text", "query"))
            if text is None:
                raise DataFormatError(
                    file, lineno, "missing field (expected 'text' or 'query')", "text"
                )
        else:
            fields = split_tsv(line)
            low = [f.strip().lower() for f in fields]
            header = len(fields) == 2 and low[0] in _TSV_ID_HEADERS and low[1] in _TSV_TEXT_HEADERS
            if first_record and header:
                first_record = False
                continue  # a header line
            if len(fields) != 2:
                problem = f"expected 2 tab-separated columns (id, text), found {len(fields)}"
                raise DataFormatError(file, lineno, problem + hint(file, QUERIES))
            id_field = "id"
            qid, text = check_id(file, lineno, fields[0], id_field), fields[1]
        if qid in first_line:
            problem = f"duplicate query id {qid!r} (first at line {first_line[qid]})"
            raise DataFormatError(file, lineno, problem, id_field)
        if not text.strip():
            raise DataFormatError(file, lineno, f"query {qid!r} has an empty text", "text")
        first_line[qid] = lineno
        queries[qid] = text
        first_record = False
    if not queries:  # an empty run would follow, and evaluate as zeros
        raise DataFormatError(file, None, "no queries (the file has no query line)")
    logger.info("%s: %d queries", file, len(queries))
    return queries


def load_queries(path: str | Path, split: str | None = None) -> dict[str, str]:
    """Read queries: ``{query_id: text}`` in file order.

    Args:
        path: a queries file (JSON Lines with ``_id``/``id`` and ``text``/``query``, or TSV
            ``qid<TAB>text``, optionally .gz) or a BEIR directory.
        split: with a BEIR directory, keep only the queries that have judgements in
            ``qrels/<split>.tsv``; judged queries missing from the queries file are logged as a
            warning (the evaluation counts them too). Ignored, with an info message, for a file.

    Raises:
        DataFormatError: a malformed record, a missing, empty or duplicate id, an empty query
            text, no query at all, or (with a split) a missing qrels file, listing the
            available splits, or none of the split's queries in the file.
    """
    p = resolve_data_path(path)
    file = find_queries_file(p)
    if split is not None and not (p.is_dir() and available_splits(p)):  # (not the default: said)
        level = logging.INFO if split == "test" else logging.WARNING
        what = "has no qrels/" if p.is_dir() else "is a queries file"
        logger.log(level, "split %r ignored: %s %s: all its queries are read", split, p, what)
        split = None
    if split is not None:
        judged = load_qrels(p, split)  # first, so a missing split fails before any reading
        queries = _read_queries(file)
        missing = [qid for qid in judged if qid not in queries]
        if missing:
            logger.warning(
                "%s: %d queries judged in split %r have no text (e.g. %s)",
                file, len(missing), split, ", ".join(repr(q) for q in missing[:_EXAMPLES]),
            )  # fmt: skip
        queries = {qid: text for qid, text in queries.items() if qid in judged}
        if not queries:
            raise DataFormatError(
                file, None, f"none of the {len(judged)} queries judged in split {split!r} is here"
            )
        logger.info("split %r: %d queries with judgements", split, len(queries))
        return queries
    return _read_queries(file)
