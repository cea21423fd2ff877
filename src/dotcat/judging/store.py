"""The judgements store: one SQLite file holding the topics, their pools and every judgement.

Tables: ``meta`` (format, the index it pools, the grade scale, the judging order), ``topics`` (query
id, text, description, where it came from), ``pools`` (one row per pooling: the systems, depth and
order, as JSON: the pool's provenance), ``pooled`` (a topic's pooled documents: each system's rank
of it, its priority, the passage that matched) and ``judgments``, an append-only log: one row per
grade given or document skipped, with the assessor's name and the time (UTC). An undo marks the
assessor's latest row undone; an assessor's judgement of a document is their latest row not undone.
A row may name the request that wrote it (``client``, ``seq``: a page load and its n-th request),
which makes the request idempotent (:meth:`JudgmentStore.judge`).

Each judgement is its own transaction, committed before the call returns, in WAL mode with
``synchronous=FULL``: once the page has been told a grade is saved, neither a killed server
nor a power cut loses it (SQLite's atomic commit). Several processes may use the file at
once (the page's server, ``dotcat judge pool`` adding topics): SQLite locks it, and a writer
waits for another (``busy_timeout``).
"""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dotcat.errors import DotcatError
from dotcat.files import check_can_create_in, writing
from dotcat.judging.config import GRADES
from dotcat.judging.priority import rank_weight

logger = logging.getLogger(__name__)

FORMAT = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    qid TEXT PRIMARY KEY, text TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL, added TEXT NOT NULL, seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pools (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created TEXT NOT NULL, provenance TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pooled (
    qid TEXT NOT NULL, doc_id TEXT NOT NULL, weight REAL NOT NULL, best_rank INTEGER NOT NULL,
    ranks TEXT NOT NULL, start INTEGER, stop INTEGER, pool INTEGER NOT NULL,
    PRIMARY KEY (qid, doc_id)
);
CREATE TABLE IF NOT EXISTS judgments (
    id INTEGER PRIMARY KEY AUTOINCREMENT, qid TEXT NOT NULL, doc_id TEXT NOT NULL,
    assessor TEXT NOT NULL, grade INTEGER, time TEXT NOT NULL, source TEXT NOT NULL,
    undone INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS judgments_pair ON judgments (qid, doc_id, assessor, id);
CREATE INDEX IF NOT EXISTS judgments_assessor ON judgments (assessor, id);
"""
#: Columns of ``judgments`` newer than its first files, added in place when one is opened: the
#: request that wrote a row (its client and sequence number) and the undo request that withdrew it.
_ADDED = {"client": "TEXT", "seq": "INTEGER", "undone_by": "TEXT"}
_REQUEST = (
    "CREATE UNIQUE INDEX IF NOT EXISTS judgments_request ON judgments (client, seq) "
    "WHERE client IS NOT NULL"
)
#: A row of ``judgments`` as :class:`Judgment` holds it, after its id.
_FIELDS = "qid, doc_id, assessor, grade, time, source, client, seq"
_JUDGMENTS = f"SELECT id, {_FIELDS} FROM judgments"
_INSERT = f"INSERT INTO judgments ({_FIELDS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_TOPICS = "SELECT qid, text, description, source FROM topics"
_POOLED = "SELECT doc_id, ranks, weight, start, stop FROM pooled WHERE qid = ?"
#: The orders :meth:`JudgmentStore.pooled` returns a topic's documents in (config.ORDERS).
_ORDER_BY = {
    "weight": "weight DESC, best_rank, doc_id",
    "rank": "best_rank, weight DESC, doc_id",
    "docid": "doc_id",
}
_MAX_NAME = 100


def now() -> str:
    """The time in UTC, ISO 8601 to the millisecond (``2026-11-30T09:15:02.123Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Topic:
    """A query to judge for: its id, text, a description of what is wanted (TREC's), and
    where it came from (a file, the page, the query log)."""

    qid: str
    text: str
    description: str = ""
    source: str = ""


@dataclass(frozen=True)
class PoolEntry:
    """One pooled document of a topic: the rank each system gave it (1 = top), its judging
    priority, and the characters of the passage that matched (None: the whole document)."""

    doc_id: str
    ranks: dict[str, int]
    weight: float
    start: int | None = None
    stop: int | None = None

    @property
    def best_rank(self) -> int:
        return min(self.ranks.values())


@dataclass(frozen=True)
class Judgment:
    """One row of the log: a grade (None: skipped) given by an assessor at a time."""

    id: int
    qid: str
    doc_id: str
    assessor: str
    grade: int | None
    time: str
    source: str = "page"
    client: str | None = None
    seq: int | None = None


@dataclass
class Progress:
    """A topic's pool and how much of it one assessor has judged or skipped."""

    pooled: int = 0
    judged: int = 0
    skipped: int = 0
    grades: dict[int, int] = field(default_factory=dict)


def check_grade(grade: int | None, scale: Iterable[int] = GRADES) -> int | None:
    """``grade`` if it is on the scale (None: a skip).

    Raises:
        DotcatError: a grade outside the scale, or not a whole number.
    """
    scale = sorted(scale)
    if grade is None:
        return None
    if isinstance(grade, bool) or not isinstance(grade, int) or grade not in scale:
        raise DotcatError(f"grade {grade!r} is outside the scale {scale[0]}-{scale[-1]} (or skip)")
    return grade


def check_assessor(name: str) -> str:
    """An assessor's name: not blank, at most 100 characters, no line break."""
    name = (name or "").strip()
    if not name or len(name) > _MAX_NAME or any(c in name for c in "\r\n\t"):
        raise DotcatError(
            f"assessor name {name!r}: give a name of 1 to {_MAX_NAME} characters on one line"
        )
    return name


class JudgmentStore:
    """A judgements file (see the module docstring); safe to share between threads.

    Args:
        path: the SQLite file.
        index_dir: the index it pools; recorded when the file is created, and compared when
            it is opened again (another index: a warning, its documents may differ).
        create: make the file when it does not exist (else: refuse).
    """

    def __init__(
        self, path: str | Path, index_dir: str | Path | None = None, *, create: bool = False
    ) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise DotcatError(f"{self.path}: is a directory; give the judgements file")
        if not self.path.exists():
            if not create:
                raise DotcatError(
                    f"{self.path}: no judgements file (make one with `dotcat judge pool`)"
                )
            check_can_create_in(self.path)
        self._lock = threading.RLock()
        try:
            with writing(self.path):  # a file-size limit, a full disk: one line
                self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                with self._db:
                    self._db.executescript(_SCHEMA)
                    have = {row[1] for row in self._db.execute("PRAGMA table_info(judgments)")}
                    for name, kind in _ADDED.items():
                        if name not in have:
                            self._db.execute(f"ALTER TABLE judgments ADD COLUMN {name} {kind}")
                    self._db.execute(_REQUEST)
                self._init_meta(index_dir)
        except sqlite3.DatabaseError as e:
            raise DotcatError(f"{self.path}: not a judgements file ({e})") from None

    def _init_meta(self, index_dir: str | Path | None) -> None:
        meta = self.meta()
        if not meta:
            values = {"format": FORMAT, "created": now(), "scale": GRADES,
                      "index": str(Path(index_dir).resolve()) if index_dir else None}  # fmt: skip
            with self._write() as db:
                db.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)",
                               [(k, json.dumps(v)) for k, v in values.items()])  # fmt: skip
            return
        if meta.get("format", FORMAT) > FORMAT:
            raise DotcatError(f"{self.path}: written by a newer dotcat (format {meta['format']})")
        recorded = meta.get("index")
        if index_dir is not None and recorded and Path(index_dir).resolve() != Path(recorded):
            logger.warning(
                "%s pools %s, not %s: judged documents missing from this index are left out",
                self.path, recorded, Path(index_dir).resolve(),
            )  # fmt: skip

    # -- plumbing ------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction, committed (durably: synchronous=FULL) when the block ends."""
        with self._lock, writing(self.path), self._db:
            yield self._db

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> JudgmentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._rows("SELECT key, value FROM meta")}

    def set_meta(self, key: str, value: Any) -> None:
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    @property
    def scale(self) -> dict[int, str]:
        return {int(k): v for k, v in (self.meta().get("scale") or GRADES).items()}

    @property
    def order(self) -> str:
        return self.meta().get("order") or "weight"

    # -- topics ------------------------------------------------------------------------------

    def add_topics(self, topics: Iterable[Topic]) -> list[Topic]:
        """Add the topics not here yet (by id); returns those added. A topic already here
        with another text is refused: its judgements were made for the text it has."""
        added = []
        with self._write() as db:
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) FROM topics").fetchone()[0]
            for topic in topics:
                row = db.execute("SELECT text FROM topics WHERE qid = ?", (topic.qid,)).fetchone()
                if row is not None:
                    if row[0] != topic.text:
                        raise DotcatError(
                            f"query {topic.qid!r} is already pooled with another text "
                            f"({row[0]!r}); give the new one another id"
                        )
                    continue
                seq += 1
                db.execute(
                    "INSERT INTO topics VALUES (?, ?, ?, ?, ?, ?)",
                    (topic.qid, topic.text, topic.description, topic.source, now(), seq),
                )
                added.append(topic)
        return added

    def topics(self) -> list[Topic]:
        return [Topic(*row) for row in self._rows(f"{_TOPICS} ORDER BY seq")]

    def topic(self, qid: str) -> Topic | None:
        rows = self._rows(f"{_TOPICS} WHERE qid = ?", (qid,))
        return Topic(*rows[0]) if rows else None

    def new_topic_id(self, prefix: str = "page-") -> str:
        """The first ``page-N`` id not taken."""
        taken = {row[0] for row in self._rows("SELECT qid FROM topics")}
        return next(f"{prefix}{n}" for n in itertools.count(1) if f"{prefix}{n}" not in taken)

    # -- pools -------------------------------------------------------------------------------

    def add_pool(self, provenance: Mapping[str, Any]) -> int:
        """Record one pooling (its systems, depth, order...) and return its id."""
        with self._write() as db:
            cursor = db.execute("INSERT INTO pools (created, provenance) VALUES (?, ?)",
                                (now(), json.dumps(provenance)))  # fmt: skip
            return int(cursor.lastrowid)

    def pools(self) -> list[dict[str, Any]]:
        rows = self._rows("SELECT id, created, provenance FROM pools ORDER BY id")
        return [{"id": i, "created": c, **json.loads(p)} for i, c, p in rows]

    def add_pooled(self, qid: str, entries: Iterable[PoolEntry], pool: int) -> int:
        """Merge a topic's pooled documents: a document pooled before keeps its ranks (and the pool
        it came in) and gains the new systems' ranks and weight. Returns how many are new."""
        new = 0
        with self._write() as db:
            for entry in entries:
                row = db.execute(
                    "SELECT ranks, weight, start, stop, pool FROM pooled "
                    "WHERE qid = ? AND doc_id = ?",
                    (qid, entry.doc_id),
                ).fetchone()
                new += row is None
                merged, first = (entry, pool) if row is None else (_merged(entry, row), row[4])
                db.execute(
                    "INSERT OR REPLACE INTO pooled VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (qid, merged.doc_id, merged.weight, merged.best_rank,
                     json.dumps(merged.ranks), merged.start, merged.stop, first),
                )  # fmt: skip
        return new

    def pooled(self, qid: str, order: str | None = None) -> list[PoolEntry]:
        """A topic's pooled documents in judging order (the store's, or ``order``)."""
        rows = self._rows(f"{_POOLED} ORDER BY {_ORDER_BY[order or self.order]}", (qid,))
        return [PoolEntry(d, json.loads(r), w, s, e) for d, r, w, s, e in rows]

    def pooled_entry(self, qid: str, doc_id: str) -> PoolEntry | None:
        rows = self._rows(f"{_POOLED} AND doc_id = ?", (qid, doc_id))
        return PoolEntry(rows[0][0], json.loads(rows[0][1]), *rows[0][2:]) if rows else None

    def pool_sizes(self) -> dict[str, int]:
        return dict(self._rows("SELECT qid, COUNT(*) FROM pooled GROUP BY qid"))

    # -- judgements --------------------------------------------------------------------------

    def judge(
        self, qid: str, doc_id: str, assessor: str, grade: int | None, *, source: str = "page",
        pooled_only: bool = True, client: str | None = None, seq: int | None = None,
    ) -> Judgment:  # fmt: skip
        """Save one grade (None: a skip) by ``assessor``, durably, before returning.

        ``client`` and ``seq`` name the request: a page load (any id unique to it) and the
        number of its request, rising. A request already stored is answered with its row and
        stored again not at all; a request older than a stored one of the same client for the
        same document (it arrived late) is answered with that newer row and not stored. So a
        repeated or late request never lands twice, never on another document, and never
        overwrites a newer grade; the caller compares the row answered with what it sent.

        Returns:
            the row that stands for this request: the one stored, or the newer one.

        Raises:
            DotcatError: an unknown query, a document outside its pool (``pooled_only``), a
                grade outside the scale, a bad assessor name, or a request (``client``,
                ``seq``) stored before for another judgement.
        """
        grade = check_grade(grade, self.scale)
        assessor = check_assessor(assessor)
        _check_request(client, seq)
        if self.topic(qid) is None:
            raise DotcatError(f"unknown query id {qid!r}: it is not one of the pooled queries")
        if pooled_only and self.pooled_entry(qid, doc_id) is None:
            raise DotcatError(f"document {doc_id!r} is not in the pool of query {qid!r}")
        row = (qid, doc_id, assessor, grade, now(), source, client, seq)
        with self._write() as db:
            stored = None if client is None else _answered(db, row)
            if stored is not None:
                return stored
            return Judgment(int(db.execute(_INSERT, row).lastrowid), *row)

    def judge_many(self, rows: Iterable[tuple[str, str, str, int | None]], source: str) -> int:
        """Save many ``(qid, doc_id, assessor, grade)`` at once (one transaction): an import.
        The caller has checked them (:func:`dotcat.judging.imports.import_qrels`)."""
        time = now()
        with self._write() as db:
            return db.executemany(_INSERT, [(*r, time, source, None, None) for r in rows]).rowcount

    def undo(
        self, assessor: str, *, client: str | None = None, seq: int | None = None
    ) -> Judgment | None:
        """Withdraw ``assessor``'s latest judgement (or skip) not yet undone; None if none.

        ``client`` and ``seq`` name the request as :meth:`judge`'s do: a repeated undo request
        is answered with the row it withdrew, and withdraws no other; it withdraws the latest
        of that client's rows sent before it (a lower ``seq``), so a late undo never withdraws
        a newer grade, nor one another page (the same name on another device) sent.
        """
        assessor = check_assessor(assessor)
        _check_request(client, seq)
        name = None if client is None else f"{client} {seq}"
        with self._write() as db:
            select = f"{_JUDGMENTS} WHERE "
            done = name and db.execute(select + "undone_by = ?", (name,)).fetchone()
            if done:
                return Judgment(*done)
            mine = "" if name is None else " AND client = ? AND seq < ?"
            params = () if name is None else (client, seq)
            row = db.execute(
                select + f"assessor = ? AND undone = 0{mine} ORDER BY id DESC LIMIT 1",
                (assessor, *params),
            ).fetchone()
            if row is not None:
                db.execute("UPDATE judgments SET undone = 1, undone_by = ? WHERE id = ?",
                           (name, row[0]))  # fmt: skip
            return Judgment(*row) if row is not None else None

    def current(self, assessor: str | None = None, qid: str | None = None) -> list[Judgment]:
        """Each (query, document, assessor)'s standing judgement: the latest row not undone
        (a skip included, grade None)."""
        given = {"assessor": assessor, "qid": qid}
        where = ["undone = 0", *(f"{k} = ?" for k, v in given.items() if v is not None)]
        params = [v for v in given.values() if v is not None]
        rows = self._rows(
            f"SELECT j.id, {_FIELDS} FROM judgments j "
            "JOIN (SELECT MAX(id) AS id FROM judgments WHERE " + " AND ".join(where) +
            " GROUP BY qid, doc_id, assessor) last ON j.id = last.id ORDER BY j.id",
            tuple(params),
        )  # fmt: skip
        return [Judgment(*row) for row in rows]

    def log(self) -> list[Judgment]:
        """Every row ever written, undone ones included, oldest first."""
        return [Judgment(*row) for row in self._rows(f"{_JUDGMENTS} ORDER BY id")]

    def assessors(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT assessor FROM judgments ORDER BY 1")]

    def progress(self, assessor: str | None) -> dict[str, Progress]:
        """Per topic: its pool size and how much of it ``assessor`` judged or skipped (judged
        pooled documents only; None: nobody's)."""
        out = {t.qid: Progress() for t in self.topics()}
        for qid, size in self.pool_sizes().items():
            out.setdefault(qid, Progress()).pooled = size
        if assessor is None:
            return out
        pooled = {(q, d) for q, d in self._rows("SELECT qid, doc_id FROM pooled")}
        for j in self.current(assessor):
            if (j.qid, j.doc_id) in pooled and j.qid in out:
                progress = out[j.qid]
                if j.grade is None:
                    progress.skipped += 1
                else:
                    progress.judged += 1
                    progress.grades[j.grade] = progress.grades.get(j.grade, 0) + 1
        return out


def _check_request(client: str | None, seq: int | None) -> None:
    """A request's name: a client and its request number, both or neither."""
    if (client is None) != (seq is None):
        raise DotcatError("client and seq name a request together: give both or neither")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
        raise DotcatError(f"seq {seq!r}: a request number is a whole number, 0 or more")


def _answered(db: sqlite3.Connection, row: tuple) -> Judgment | None:
    """The stored row that answers the request writing ``row`` (in ``_FIELDS`` order), if
    any: the request itself, stored before (a repeat), or a later request of its client for
    the same document (this one came late).

    Raises:
        DotcatError: the request was stored for another judgement.
    """
    qid, doc_id, assessor, grade, _, _, client, seq = row
    found = db.execute(
        f"{_JUDGMENTS} WHERE client = ? AND (seq = ? OR (seq > ? AND qid = ? AND doc_id = ? "
        "AND assessor = ?)) ORDER BY seq DESC LIMIT 1",
        (client, seq, seq, qid, doc_id, assessor),
    ).fetchone()
    if found is None:
        return None
    stored = Judgment(*found)
    if stored.seq == seq and found[1:5] != row[:4]:  # (qid, doc_id, assessor, grade)
        raise DotcatError(
            f"request {seq} of client {client!r} was saved for another judgement (query "
            f"{stored.qid!r}, document {stored.doc_id!r}, grade {stored.grade}); a request "
            "number names one request"
        )
    return stored


def _merged(entry: PoolEntry, row: tuple) -> PoolEntry:
    """A pooled document pooled again: a system pooled before keeps its first rank, a new
    one adds its rank and its weight; the passage found first stays."""
    old = json.loads(row[0])
    ranks = {**entry.ranks, **old}
    weight = row[1] + sum(rank_weight(r) for s, r in entry.ranks.items() if s not in old)
    start, stop = (row[2], row[3]) if row[2] is not None else (entry.start, entry.stop)
    return PoolEntry(entry.doc_id, ranks, weight, start, stop)
