"""The queries a pool is built for: a queries file, or the queries a server was asked.

- :func:`read_topics`: any queries file dotcat reads (:func:`dotcat.data.queries.load_queries`: JSON
  Lines, TSV, a BEIR directory, gzipped or not); a JSON Lines record may carry a ``description`` (or
  TREC's ``narrative``) saying what an answer must hold, shown to the assessor beside the query.
- :func:`read_query_log`: the log ``dotcat serve --query-log FILE`` keeps (opt-in: one JSON
  line per query asked, ``{"time": ..., "query": ...}``): its distinct queries, most asked
  first, each with a stable id made from its text (``log-`` and 10 hex digits of its sha1).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from pathlib import Path

from dotcat.data import find_queries_file, load_queries
from dotcat.data._io import detect_format, iter_lines, parse_json_object
from dotcat.errors import DataFormatError, DotcatError
from dotcat.judging.store import Topic

logger = logging.getLogger(__name__)

#: Record fields read as a topic's description, first found wins.
DESCRIPTION_FIELDS = ("description", "narrative")


def read_topics(path: str | Path, split: str | None = None) -> list[Topic]:
    """The queries of ``path`` (with a BEIR directory and ``split``: that split's judged
    ones), with their descriptions where the records have them.

    Raises:
        DataFormatError: as :func:`dotcat.data.queries.load_queries`, or a description that is not
            text.
    """
    queries = load_queries(path, split=split)
    file = find_queries_file(path)
    descriptions = _descriptions(file) if detect_format(file) == "jsonl" else {}
    source = str(path)
    return [Topic(q, text, descriptions.get(q, ""), source) for q, text in queries.items()]


def _descriptions(file: Path) -> dict[str, str]:
    out = {}
    for lineno, line in iter_lines(file):
        record = parse_json_object(file, lineno, line)
        qid = record.get("_id", record.get("id"))
        for name in DESCRIPTION_FIELDS:
            value = record.get(name)
            if value is None:
                continue
            if not isinstance(value, str):
                raise DataFormatError(file, lineno, "expected text", name)
            out[str(qid)] = value.strip()
            break
    return out


def log_id(text: str) -> str:
    """A logged query's id: ``log-`` and 10 hex digits of the sha1 of its normalised text."""
    return "log-" + hashlib.sha1(_normalise(text).encode("utf-8")).hexdigest()[:10]


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def read_query_log(path: str | Path, max_queries: int | None = None) -> list[Topic]:
    """The distinct queries of a server's query log, most asked first (then first asked).

    Queries that differ only in case or spacing are one; each keeps the spelling first asked.

    Raises:
        DataFormatError: a line that is not such a record.
        DotcatError: a log without queries.
    """
    file = Path(path)
    if not file.is_file():
        raise DataFormatError(file, None, "no such query log (dotcat serve --query-log FILE)")
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    for lineno, line in iter_lines(file):
        record = parse_json_object(file, lineno, line)
        text = record.get("query")
        if not isinstance(text, str) or not text.strip():
            raise DataFormatError(file, lineno, "expected the query's text", "query")
        key = _normalise(text)
        counts[key] += 1
        first.setdefault(key, text.strip())
    if not counts:
        raise DotcatError(f"{file}: the query log holds no query yet")
    order = sorted(counts, key=lambda key: -counts[key])[:max_queries]  # stable: first asked first
    logger.info("%s: %d distinct queries of %d asked", file, len(counts), sum(counts.values()))
    return [Topic(log_id(first[k]), first[k], "", f"query log {file}") for k in order]


def log_record(text: str, time: str) -> str:
    """One line of a query log (what the server appends)."""
    return json.dumps({"time": time, "query": text}, ensure_ascii=False) + "\n"
