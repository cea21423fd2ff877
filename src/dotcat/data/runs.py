"""TREC run files: ``qid Q0 docid rank score tag``, one retrieved document per line.

The format read by trec_eval and ir-measures (Voorhees & Harman, "TREC: Experiment and
Evaluation in Information Retrieval", 2005). Evaluation tools order a query's documents by
descending score and tied scores by descending document id, not by the rank column, so
:func:`write_run` refuses lists whose scores are not in descending order, and writes a score
tied with the one above a single-precision step below it (trec_eval reads scores so), rather
than write a file that would be evaluated in another order than the one given.
"""

from __future__ import annotations

import gzip
import itertools
import logging
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from dotcat.data._io import is_gzipped, is_integer, iter_lines, require_file
from dotcat.data.sniff import RUN, hint
from dotcat.errors import DataFormatError, DotcatError
from dotcat.files import UMASK, check_can_create_in, writing
from dotcat.types import trec_order

logger = logging.getLogger(__name__)

_WHITESPACE = re.compile(r"\s")


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a TREC run (optionally .gz): ``{query_id: {doc_id: score}}``.

    The ``Q0`` and ``tag`` columns are not interpreted; ``rank`` must be an integer and
    ``score`` a finite number.

    Raises:
        DataFormatError: a line without exactly 6 whitespace-separated fields, a non-integer
            rank, a non-numeric or non-finite score, or a document listed twice for the same
            query, naming the file and line.
    """
    file = require_file(path)
    run: dict[str, dict[str, float]] = {}
    lines = 0
    for lineno, text in iter_lines(file):
        fields = text.split()
        if len(fields) != 6:
            problem = f"expected 6 fields (qid Q0 docid rank score tag), found {len(fields)}"
            if not lines and _looks_like_qrels(fields):
                problem += ": this is a qrels file (judgements), not a run; give it last"
            else:
                problem += hint(file, RUN)
            raise DataFormatError(file, lineno, problem)
        qid, _, docid, rank, score_text, _ = fields
        if not is_integer(rank):
            raise DataFormatError(
                file, lineno, f"expected an integer, found {rank!r}{hint(file, RUN)}", "rank"
            )
        try:
            score = float(score_text)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataFormatError(
                file, lineno, f"expected a finite number, found {score_text!r}{hint(file, RUN)}",
                "score",
            )  # fmt: skip
        docs = run.setdefault(qid, {})
        if docid in docs:
            raise DataFormatError(
                file, lineno, f"document {docid!r} appears twice for query {qid!r}", "docid"
            )
        docs[docid] = score
        lines += 1
    logger.info("%s: %d results for %d queries", file, lines, len(run))
    return run


def _looks_like_qrels(fields: list[str]) -> bool:
    """A first line of qrels: TREC's ``qid 0 docid grade`` or BEIR's header or record."""
    if len(fields) == 4:
        return is_integer(fields[1]) and is_integer(fields[3])
    if len(fields) == 3:
        return fields[0].lower() in ("query-id", "query_id", "qid") or is_integer(fields[2])
    return False


def ranked(
    run: Mapping[str, Mapping[str, float] | Sequence[tuple[str, float]]],
) -> dict[str, list[tuple[str, float]]]:
    """A run as ranked lists, best first (ties: :func:`~dotcat.types.trec_order`), from lists
    or id->score maps."""
    out: dict[str, list[tuple[str, float]]] = {}
    for qid, docs in run.items():
        pairs = list(docs.items()) if isinstance(docs, Mapping) else list(docs)
        out[qid] = trec_order(sorted(((str(d), float(s)) for d, s in pairs), key=lambda x: -x[1]))
    return out


def _check_token(value: str, what: str) -> str:
    if not isinstance(value, str) or not value or _WHITESPACE.search(value):
        raise ValueError(f"{what} {value!r} must be a non-empty string without whitespace")
    return value


def _lines(run: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> Iterable[str]:
    """The run's lines, validating as they are produced. A score tied with the one above as
    trec_eval reads scores (single precision) is written a step of that precision below it,
    as Anserini's tie adjuster does: evaluators sort by score alone, so the file holds no tie
    they could order otherwise."""
    import numpy as np  # (not at import: the command line's argument checks read this module)

    for qid, ranking in run.items():
        _check_token(qid, "query id")
        if isinstance(ranking, Mapping):  # {doc: score}, as read_run gives: ranked by score
            ranking = ranked({qid: ranking})[qid]
        seen: set[str] = set()
        previous = written = math.inf
        for rank, (docid, score) in enumerate(ranking, start=1):
            _check_token(docid, f"document id (query {qid!r}, rank {rank})")
            if docid in seen:
                raise ValueError(f"document {docid!r} listed twice for query {qid!r}")
            seen.add(docid)
            value = float(score)
            if not math.isfinite(value):
                raise ValueError(f"score {value} of query {qid!r}, rank {rank} is not finite")
            if value > previous:
                raise ValueError(
                    f"ranking of query {qid!r} is not in descending score order at rank {rank} "
                    f"({value!r} > {previous!r})"
                )
            tied = np.float32(value) >= np.float32(written)
            written = float(np.nextafter(np.float32(written), -np.inf)) if tied else value
            previous = value
            # repr() is the shortest text that reads back as the same float: no ties invented.
            yield f"{qid} Q0 {docid} {rank} {written!r} {tag}\n"


def _write(stream: BinaryIO, run: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> int:
    count, lines = 0, _lines(run, tag)
    while batch := list(itertools.islice(lines, 10_000)):  # written 10,000 lines at a time
        stream.write("".join(batch).encode("utf-8"))
        count += len(batch)
    return count


#: The output path that means standard output (``--output -``).
STDOUT = "-"


def check_output_file(path: str | Path) -> Path:
    """Check, before any work, that a run (or any output file) can be written at ``path``
    (``-``: standard output, always).

    Raises:
        DotcatError: ``path`` is a directory, lies under a file or inside a dotcat index, its
            folder is not writable (checked by creating a probe file there), or it exists
            read-only or is a SQLite database (a judgements file: never a text output).
    """
    from dotcat.data.index_source import index_holding, is_sqlite

    path = Path(path)
    if str(path) == STDOUT:
        return path
    if path.is_dir():
        raise DotcatError(f"{path}: is a directory; give the path of a file to write")
    if (index := index_holding(path)) is not None:
        raise DotcatError(f"{path}: lies inside the dotcat index {index}; write it elsewhere")
    check_can_create_in(path)
    if path.exists() and not os.access(path, os.W_OK):
        raise DotcatError(f"{path}: exists and is not writable")
    if is_sqlite(path):
        raise DotcatError(f"{path}: is a SQLite database (judgements?); refusing to overwrite it")
    return path


def write_run(
    run: Mapping[str, Sequence[tuple[str, float]] | Mapping[str, float]],
    path: str | Path,
    tag: str = "dotcat",
) -> None:
    """Write ranked lists as a TREC run, atomically (gzipped if ``path`` ends in ``.gz``).

    Each query's list is written in the order given, with ranks 1..n; it must be in
    non-increasing score order (see the module docstring). Queries with an empty list write
    no line. The file is written to a temporary file in the same directory, flushed to disk
    and renamed over ``path`` (``os.replace``), so a crash or error leaves either the old
    file or the complete new one, never half a run. Parent directories are created.

    Args:
        run: ``{query_id: [(doc_id, score), ...]}`` best first, or ``{query_id: {doc_id:
            score}}`` (:func:`read_run`'s, ranked by :func:`ranked`).
        path: the run file to (over)write; ``-``: standard output.
        tag: the run name in the last column.

    Raises:
        ValueError: an id or tag that is empty or contains whitespace, a document listed
            twice for a query, a non-finite score, or scores out of descending order.
        DiskFullError: no room for the file (the old one at ``path`` is untouched).
    """
    _check_token(tag, "run tag")
    if str(path) == STDOUT:
        _write(sys.stdout.buffer, run, tag)
        sys.stdout.flush()
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    with writing(path, remove=[tmp]):  # a full disk: one line, the old run file kept
        with os.fdopen(fd, "wb") as raw:
            if is_gzipped(path):
                with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
                    count = _write(gz, run, tag)
            else:
                count = _write(raw, run, tag)
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o666 & ~UMASK)  # mkstemp creates 0600; give it a normal file's mode
        os.replace(tmp, path)
    logger.info("%s: wrote %d results for %d queries", path, count, len(run))
