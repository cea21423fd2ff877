"""A resumable on-disk cache of a cross-encoder teacher's scores of (query, document) pairs.

Distilling BERT_CAT into BERT_DOT (Hofstätter et al. 2020, arXiv:2010.02666) needs the
teacher's score of every (query, document) pair the student trains on; scoring them is the
slow part, so it is done once and kept in ``teacher_scores.jsonl``::

    {"format": "dotcat-teacher-scores", "format_version": 1, "teacher": ..., "fingerprint": ...,
     "backend": ..., "max_length": ...}
    ["q1", "d7", 3.141593]
    ...

Line 1 is the header: which teacher (its weights fingerprint and pair length decide whether
the scores still hold). Every other line is ``[qid, doc_id, score]``, the score rounded to 6
decimals. :func:`score_pairs` appends one chunk of lines at a time and syncs it to disk, so a
killed run loses at most one chunk, and a line cut by the crash is dropped (with a warning)
when the file is next read.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

from dotcat.errors import DataFormatError, DotcatError
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

TEACHER_SCORES_FILE = "teacher_scores.jsonl"
TEACHER_SCORES_FORMAT = "dotcat-teacher-scores"
TEACHER_SCORES_FORMAT_VERSION = 1
#: Header fields that must match for cached scores to be reused.
CHECKED_FIELDS = ("fingerprint", "max_length")
#: Decimals a score keeps on disk (and in memory, so a resumed run sees the same numbers).
DECIMALS = 6

Pair = tuple[str, str]
ScoreFn = Callable[[list[str], list[str]], Any]


class TeacherMismatchError(DataFormatError):
    """The file holds scores of another teacher (``field`` names what differs)."""


def teacher_header(teacher: str, fingerprint: str, backend: str, max_length: int) -> dict:
    """The header of a scores file. For a ``CrossEncoder`` ``ce``:
    ``teacher_header(ce.name, ce.fingerprint, ce.backend, ce.max_length)``."""
    return {
        "format": TEACHER_SCORES_FORMAT,
        "format_version": TEACHER_SCORES_FORMAT_VERSION,
        "teacher": str(teacher),
        "fingerprint": str(fingerprint),
        "backend": str(backend),
        "max_length": int(max_length),
    }


def scores_file(path: str | os.PathLike) -> Path:
    """The scores file of ``path``: itself if it names a ``.jsonl`` file, else
    ``path / teacher_scores.jsonl`` (a directory)."""
    path = Path(path)
    return path if path.suffix == ".jsonl" else path / TEACHER_SCORES_FILE


class TeacherScores:
    """Teacher scores by ``(qid, doc_id)``, read from (and written to) :attr:`path`."""

    def __init__(
        self, path: Path, header: dict | None, scores: dict[Pair, float] | None = None
    ) -> None:
        self.path = path
        #: the file's header; None while the file has none yet.
        self.header = header
        self._scores: dict[Pair, float] = scores if scores is not None else {}

    def get(self, qid: str, doc_id: str) -> float | None:
        """The teacher's score of the pair, or None if it was never scored."""
        return self._scores.get((qid, doc_id))

    def scores(self, qid: str, doc_ids: Sequence[str]) -> list[float]:
        """The scores of ``(qid, d)`` for each ``d`` in ``doc_ids``, in that order.

        Raises:
            KeyError: a pair is not in the cache (named in the message).
        """
        try:
            return [self._scores[(qid, d)] for d in doc_ids]
        except KeyError as e:
            raise KeyError(
                f"no teacher score for (query {qid!r}, document {e.args[0][1]!r})"
            ) from None

    def __contains__(self, pair: object) -> bool:
        return pair in self._scores

    def __len__(self) -> int:
        return len(self._scores)

    def __repr__(self) -> str:
        return f"TeacherScores({str(self.path)!r}, {len(self)} pairs)"


def load_teacher_scores(path: str | os.PathLike, header: Mapping[str, Any]) -> TeacherScores:
    """Read a scores file written for the teacher ``header`` describes.

    Args:
        path: the directory holding ``teacher_scores.jsonl``, or the file (see :func:`scores_file`).
        header: the expected header (:func:`teacher_header`); the file's ``fingerprint`` and
            ``max_length`` must equal its own, ``teacher`` and ``backend`` are not compared.

    Raises:
        TeacherMismatchError: (a :class:`DotcatError`) the file's header differs, naming the
            file and the field; the caller decides whether to score again from scratch.
        DataFormatError: a missing file, a foreign header, or a bad line other than the last, naming
            the file and the line. A bad *last* line (a crash mid-write) is dropped with a warning.
    """
    file = scores_file(path)
    if not file.is_file():
        raise DataFormatError(file, None, "no such teacher scores file")
    return _read(file, _expected_header(header))[0]


def score_pairs(
    path: str | os.PathLike,
    header: Mapping[str, Any],
    pairs: Sequence[Pair],
    queries: Mapping[str, str],
    doc_texts: Mapping[str, str],
    score_fn: ScoreFn,
    *,
    chunk_size: int = 512,
    show_progress: bool = True,
) -> TeacherScores:
    """Score the ``(qid, doc_id)`` pairs the cache at ``path`` lacks; return the whole cache.

    The file is created with ``header`` if absent, else read as by :func:`load_teacher_scores`.
    Repeated pairs are scored once. Missing pairs go to ``score_fn`` ``chunk_size`` at a time
    and each chunk is appended and synced to disk before the next, so an interrupted run
    resumes where it stopped.

    Args:
        path: the directory holding ``teacher_scores.jsonl``, or the file.
        header: the teacher's header (:func:`teacher_header`).
        pairs: ``(qid, doc_id)`` pairs, string ids.
        doc_texts: doc_id -> document text (as the teacher should read it).
        score_fn: ``score_fn(query_texts, doc_texts)`` -> one float per pair, e.g.
            ``CrossEncoder.score``.
        chunk_size: pairs per ``score_fn`` call (and per disk sync).

    Raises:
        KeyError: a missing pair's query or document has no text (checked before scoring).
        DotcatError: as :func:`load_teacher_scores`; ``score_fn`` gave a wrong number of
            scores or a non-finite one.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    file = scores_file(path)
    expected = _expected_header(header)
    cache, intact = _read(file, expected) if file.is_file() else (TeacherScores(file, None), 0)
    wanted = list(dict.fromkeys((q, d) for q, d in pairs))
    for q, d in wanted:
        if not isinstance(q, str) or not isinstance(d, str):
            raise TypeError(f"pair ids must be strings, got ({q!r}, {d!r})")
    missing = [pair for pair in wanted if pair not in cache]
    logger.info(
        "teacher scores %s: %d of %d pairs cached, %d to score",
        file, len(wanted) - len(missing), len(wanted), len(missing),
    )  # fmt: skip
    if not missing:
        return cache
    for q, d in missing:
        if q not in queries:
            raise KeyError(f"no text for query {q!r} (pair ({q!r}, {d!r}))")
        if d not in doc_texts:
            raise KeyError(f"no text for document {d!r} (pair ({q!r}, {d!r}))")
    texts = [(queries[q], doc_texts[d]) for q, d in missing]
    with (
        _appending(file, expected, intact) as out,
        progress_bar(
            desc="teacher scores",
            total=len(wanted),
            initial=len(wanted) - len(missing),
            unit="pair",
            enabled=show_progress,
        ) as bar,
    ):
        cache.header = expected
        for start in range(0, len(missing), chunk_size):
            chunk = missing[start : start + chunk_size]
            values = _score_chunk(score_fn, chunk, texts[start : start + chunk_size])
            _write_lines(out, [[q, d, v] for (q, d), v in zip(chunk, values, strict=True)])
            cache._scores.update(zip(chunk, values, strict=True))
            bar.update(len(chunk))
    logger.info("teacher scores %s: scored %d pairs, %d in all", file, len(missing), len(cache))
    return cache


# -- reading ------------------------------------------------------------------------------------


def _expected_header(header: Mapping[str, Any]) -> dict:
    missing = [k for k in ("teacher", "fingerprint", "backend", "max_length") if k not in header]
    if missing:
        raise ValueError(f"teacher header lacks {', '.join(missing)}")
    return teacher_header(
        header["teacher"], header["fingerprint"], header["backend"], header["max_length"]
    )


def _read(file: Path, expected: dict) -> tuple[TeacherScores, int]:
    """The scores of ``file`` and how many of its bytes are intact (a dropped last line not).

    An unparsable line is fatal only once another line follows it: the last one may be a
    write cut short by a crash.
    """
    scores: dict[Pair, float] = {}
    header: dict | None = None
    intact = offset = 0
    bad: tuple[int, str] | None = None
    with open(file, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if bad is not None:
                raise DataFormatError(file, *bad)
            offset += len(raw)
            if raw.strip():
                try:
                    value = _parse(raw)
                except ValueError as e:
                    bad = (lineno, str(e))
                    continue
                if header is None:
                    header = _check_header(file, lineno, value, expected)
                else:
                    pair, score = _record(file, lineno, value)
                    scores[pair] = score
            intact = offset
    if bad is not None:
        logger.warning("%s:%d: dropped an incomplete last line (%s)", file, bad[0], bad[1])
    return TeacherScores(file, header, scores), intact


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON ({e.msg})") from None


def _check_header(file: Path, lineno: int, value: Any, expected: dict) -> dict:
    if not isinstance(value, dict) or value.get("format") != TEACHER_SCORES_FORMAT:
        raise DataFormatError(file, lineno, f"not a {TEACHER_SCORES_FORMAT!r} header")
    version = value.get("format_version")
    if version != TEACHER_SCORES_FORMAT_VERSION:
        why = f"unsupported version {version!r} (expected {TEACHER_SCORES_FORMAT_VERSION})"
        raise DataFormatError(file, lineno, why, "format_version")
    for field in CHECKED_FIELDS:
        if value.get(field) != expected[field]:
            why = f"the file's {value.get(field)!r} differs from the teacher's {expected[field]!r}"
            raise TeacherMismatchError(file, lineno, f"{why} (scores of another teacher)", field)
    return value


def _record(file: Path, lineno: int, value: Any) -> tuple[Pair, float]:
    if not (
        isinstance(value, list)
        and len(value) == 3
        and isinstance(value[0], str)
        and isinstance(value[1], str)
        and isinstance(value[2], int | float)
        and not isinstance(value[2], bool)
        and math.isfinite(value[2])
    ):
        raise DataFormatError(file, lineno, "expected [qid, doc_id, finite score]")
    return (value[0], value[1]), float(value[2])


# -- scoring and writing ------------------------------------------------------------------------


def _score_chunk(score_fn: ScoreFn, chunk: list[Pair], texts: list[tuple[str, str]]) -> list:
    values = np.asarray(
        score_fn([q for q, _ in texts], [d for _, d in texts]), dtype=np.float64
    ).reshape(-1)
    if len(values) != len(chunk):
        raise DotcatError(f"the teacher returned {len(values)} scores for {len(chunk)} pairs")
    finite = np.isfinite(values)
    if not finite.all():
        q, d = chunk[int(np.argmin(finite))]
        raise DotcatError(f"the teacher scored pair ({q!r}, {d!r}) {values[~finite][0]}")
    return [round(float(v), DECIMALS) for v in values]


@contextmanager
def _appending(file: Path, header: dict, intact: int) -> Iterator[IO[bytes]]:
    """``file`` open at its end for appending, past its ``intact`` bytes (a cut line goes);
    a file with no intact header starts again with ``header``."""
    file.parent.mkdir(parents=True, exist_ok=True)
    if intact == 0:
        with open(file, "wb") as f:
            _write_lines(f, [header])
            yield f
        return
    with open(file, "r+b") as f:
        f.truncate(intact)
        f.seek(intact - 1)
        complete = f.read(1) == b"\n"
        f.seek(0, os.SEEK_END)
        if not complete:  # the last record was whole but its newline was not written
            f.write(b"\n")
        yield f


def _write_lines(f: IO[bytes], values: list) -> None:
    """Append one JSON line per value and sync them to disk."""
    f.write(b"".join(json.dumps(v, ensure_ascii=False).encode("utf-8") + b"\n" for v in values))
    f.flush()
    os.fsync(f.fileno())
