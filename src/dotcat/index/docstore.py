"""The document store: SQLite table of (position, id, title, text), the passages of long
documents, and the text the models read of a document (:func:`document_text`).

An index built with passages (:mod:`dotcat.index.passages`) has a second table, ``passages``:
``(pid, pos, part, start, stop)``, one row per vector, ``pid`` its FAISS id, ``pos`` its
document's position, ``part`` its number in the document (0: the first), ``start`` and
``stop`` its characters in the document's text. Without that table (an index built before
passages, or with them off) a document's position is its FAISS id. Either way a FAISS hit maps
to its document with a primary-key lookup and nothing else must be held in memory.

Documents' fields (metadata) are the rows of a third table, ``fields``, with their kinds in
``field_kinds`` (:mod:`dotcat.index.fields`): what filters select and facets count.

Opened for search it is read-only, through a SQLite URI whose path is percent-encoded (a
``#``, ``?`` or ``%`` in a folder name would otherwise end the path early), and checked
against the manifest (schema, row count, positions 0..n-1) before the first query: a
damaged store is one clear error at load, never a traceback or a missing result later.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from dotcat.errors import DotcatError
from dotcat.files import writing
from dotcat.index import fields as field_table
from dotcat.reprs import short_repr

_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    pos   INTEGER PRIMARY KEY,
    id    TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    text  TEXT NOT NULL
)
"""
_COLUMNS = ["pos", "id", "title", "text"]
_PASSAGES_SCHEMA = """
CREATE TABLE IF NOT EXISTS passages (
    pid   INTEGER PRIMARY KEY,
    pos   INTEGER NOT NULL,
    part  INTEGER NOT NULL,
    start INTEGER NOT NULL,
    stop  INTEGER NOT NULL
)
"""
_PASSAGES_BY_POS = "CREATE INDEX IF NOT EXISTS passages_pos ON passages (pos)"
_PASSAGE_COLUMNS = ["pid", "pos", "part", "start", "stop"]
_PASSAGES_JOIN = "passages p JOIN docs d ON d.pos = p.pos"


def document_text(title: str, text: str) -> str:
    """The text a document is encoded (and BM25-indexed) on: title, a space, body.

    As BEIR and MTEB do for bi-encoders; an empty part is dropped.
    """
    return f"{title} {text}" if title and text else (title or text)


@dataclass(frozen=True)
class StoredDocument:
    """A document as stored in an index: its FAISS position, id, title and text."""

    pos: int
    id: str
    title: str
    text: str

    def __repr__(self) -> str:
        """The position, id, title and the text's first words (:func:`dotcat.reprs.preview`)."""
        fields = {"pos": self.pos, "id": self.id, "title": self.title, "text": self.text}
        return short_repr("StoredDocument", fields, texts=("title", "text"))


@dataclass(frozen=True)
class PassageRef:
    """Where one vector of an index lies: its document and its characters in the text.

    Attributes:
        pid: the vector's FAISS id.
        doc_id: its document's id.
        part: its number in the document (0: the first passage).
        start, stop: its characters in the document's text; ``stop`` None: to the end (a
            whole document, in an index without passages).
    """

    pid: int
    doc_id: str
    part: int = 0
    start: int = 0
    stop: int | None = None


def _nfc(value: object) -> object:
    """SQL ``nfc(x)``: text composed, as a filter compares it beyond ASCII (the "e" + U+0301 of
    macOS file names is "é"; :mod:`dotcat.search.filters`); ``fold(x)``, case-folded too."""
    return unicodedata.normalize("NFC", value) if isinstance(value, str) else value


def _connected(conn: sqlite3.Connection) -> sqlite3.Connection:
    conn.create_function("nfc", 1, _nfc, deterministic=True)
    conn.create_function("fold", 1, lambda v: _nfc(v).casefold(), deterministic=True)
    return conn


class DocStore:
    """Read/write access to ``docstore.sqlite`` in an index directory."""

    def __init__(self, path: Path, readonly: bool = True) -> None:
        self.path = Path(path)
        if readonly:
            if not self.path.is_file():
                raise DotcatError(f"{self.path}: doc store missing; rebuild the index")
            uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
            self._conn = _connected(sqlite3.connect(uri, uri=True, check_same_thread=False))
        else:
            self._conn = _connected(sqlite3.connect(self.path, check_same_thread=False))
            # Built in a temporary directory that is renamed into place: durability comes
            # from the final fsync and rename, so the journal is not needed while writing.
            self._conn.execute("PRAGMA journal_mode=OFF")
            self._conn.execute("PRAGMA synchronous=OFF")
            self._conn.execute(_SCHEMA)
            field_table.create(self._conn)

    def add(self, rows: Iterable[tuple[int, str, str, str]]) -> None:
        """Insert ``(pos, id, title, text)`` rows (a full disk: :class:`DiskFullError`)."""
        try:
            with writing(self.path):
                self._conn.executemany("INSERT INTO docs VALUES (?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as e:
            raise DotcatError(f"{self.path}: duplicate document id or position ({e})") from None

    def add_passages(self, rows: Iterable[tuple[int, int, int, int, int]]) -> None:
        """Insert ``(pid, pos, part, start, stop)`` rows (the table is made on first use)."""
        self._conn.execute(_PASSAGES_SCHEMA)
        self._conn.execute(_PASSAGES_BY_POS)
        try:
            self._conn.executemany("INSERT INTO passages VALUES (?, ?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as e:
            raise DotcatError(f"{self.path}: duplicate passage id ({e})") from None

    def add_fields(self, rows: Iterable[tuple]) -> None:
        """Insert field rows (:func:`dotcat.index.fields.field_rows`)."""
        with writing(self.path):
            field_table.insert(self._conn, rows)

    def copy_fields_from(self, source: DocStore, shift: int) -> None:
        """Copy another store's fields, their positions shifted by ``shift`` (a merge)."""
        with writing(self.path):
            field_table.copy_shifted(source._conn, self._conn, shift)

    def finish_fields(self) -> None:
        """Index the fields and decide their kinds (after writing documents or deleting)."""
        with writing(self.path):
            field_table.finish(self._conn)

    def has_fields(self) -> bool:
        """Whether this store keeps fields (an index written since they are kept)."""
        return bool(self._execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name='field_kinds'"
        ))  # fmt: skip

    def field_kinds(self) -> dict[str, field_table.FieldInfo]:
        """Every field: name -> kind and counts (none in a store without fields)."""
        if not self.has_fields():
            return {}
        try:
            return field_table.kinds(self._conn)
        except sqlite3.DatabaseError as e:
            raise DotcatError(f"{self.path}: the doc store is unreadable ({e})") from None

    def fields_of(
        self, positions: Sequence[int], known: dict | None = None
    ) -> dict[int, dict[str, Any]]:
        """The fields of the documents at these positions (empty without fields)."""
        if not self.has_fields():
            return {int(p): {} for p in positions}
        known = self.field_kinds() if known is None else known
        return field_table.of(self._conn, positions, known)

    def field_values(self, names: Sequence[str]) -> dict[str, set[str]]:
        """The distinct values (as text) of the fields ``names`` (none without fields)."""
        if not self.has_fields():
            return {name: set() for name in names}
        return field_table.values(self._conn, names)

    def select(self, sql: str, params: Sequence[Any]) -> np.ndarray:
        """The sorted positions a filter's query admits (:mod:`dotcat.search.filters`)."""
        try:
            return field_table.select_positions(self._conn, sql, params)
        except sqlite3.DatabaseError as e:
            raise DotcatError(f"{self.path}: the doc store is unreadable ({e})") from None

    def field_counts(self, positions: Sequence[int], names: Sequence[str]) -> dict:
        """Documents per value of each of ``names`` among ``positions`` (facets)."""
        return field_table.counts(self._conn, positions, names)

    def vector_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """``(FAISS ids, their documents' positions)``, by id: each passage and its document,
        or (without passages) each document's position twice. Sorted ids are also BM25's
        rows in order (the side index is written in that order)."""
        sql = "SELECT pid, pos FROM passages ORDER BY pid" if self.has_passages() else (
            "SELECT pos, pos FROM docs ORDER BY pos")  # fmt: skip
        rows = np.array(self._execute(sql), dtype=np.int64).reshape(-1, 2)
        return rows[:, 0].copy(), rows[:, 1].copy()

    def commit(self) -> None:
        with writing(self.path):  # SQLite says "disk I/O error" where a file-size limit hit
            self._conn.commit()

    def delete(self, positions: Sequence[int]) -> None:
        """Remove the documents at these positions, and their passages."""
        tables = ["docs", "passages"] if self.has_passages() else ["docs"]
        for chunk, marks in field_table.chunks([int(p) for p in positions]):
            for table in tables:
                self._conn.execute(f"DELETE FROM {table} WHERE pos IN ({marks})", chunk)
        if self.has_fields():
            field_table.delete(self._conn, [int(p) for p in positions])

    def has_passages(self) -> bool:
        """Whether this store has a passages table (an index built with passages)."""
        rows = self._execute("SELECT name FROM sqlite_master WHERE type='table' AND name=?",
                             ("passages",))  # fmt: skip
        return bool(rows)

    def passage_ids(self, positions: Sequence[int]) -> list[int]:
        """The FAISS ids of the passages of the documents at these positions."""
        return sorted(row[0] for row in self._select("pid", positions, "passages"))

    def check(self, expected: int, span: int | None = None) -> None:
        """Check the schema, the row count, and that positions lie in ``0..span-1``.

        ``span`` is the next unused position (the count, unless updates deleted some: then positions
        have gaps); without gaps, count and span equal and positions are exactly ``0..expected-1``.

        Raises:
            DotcatError: not SQLite, corrupt or truncated, another schema, or rows missing
                or extra against the manifest's document count.
        """
        if (found := self._columns("docs", _COLUMNS, "no docs table")) is not None:
            raise DotcatError(
                f"{self.path}: not a dotcat doc store (expected table docs with columns "
                f"{', '.join(_COLUMNS)}; found {found}); rebuild the index"
            )
        self._check_range("docs", "pos", expected, span, ("documents", "positions"))

    def check_passages(self, expected: int, span: int | None = None) -> None:
        """Check the passages table: its columns, ``expected`` rows, ids in ``0..span-1``
        (cheap checks, as :meth:`check`'s: no scan of the table).

        Raises:
            DotcatError: the table is missing or another schema, or disagrees with the
                manifest or with the documents.
        """
        if (found := self._columns("passages", _PASSAGE_COLUMNS, "no passages table")) is not None:
            raise DotcatError(
                f"{self.path}: the manifest records passages, the doc store has {found} "
                f"(expected {', '.join(_PASSAGE_COLUMNS)}); rebuild the index"
            )
        self._check_range("passages", "pid", expected, span, ("passages", "ids"))

    def _columns(self, table: str, expected: list[str], none: str) -> str | None:
        """None where ``table`` has the ``expected`` columns, else what it has (or ``none``)."""
        columns = [row[1] for row in self._execute(f"PRAGMA table_info({table})")]
        return None if columns == expected else (", ".join(columns) if columns else none)

    def _check_range(
        self, table: str, key: str, expected: int, span: int | None, what: tuple[str, str]
    ) -> None:
        """``expected`` rows with keys in ``0..span-1`` (a unique key: n rows spanning
        0..n-1 are exactly 0..n-1); ``what``: the rows' and the keys' names."""
        span = expected if span is None else span
        count, low, high = self._execute(f"SELECT COUNT(*), MIN({key}), MAX({key}) FROM {table}")[0]
        if count != expected or (count and (low < 0 or high >= span)):
            rows, keys = what
            raise DotcatError(
                f"{self.path}: the doc store holds {count} {rows} ({keys} {low}..{high}), the "
                f"manifest says {expected}; rebuild the index"
            )

    def iter_rows(
        self, batch: int = 10_000, after: int = -1
    ) -> Iterator[list[tuple[int, str, str, str]]]:
        """Every ``(pos, id, title, text)`` row in position order (of positions over
        ``after``), ``batch`` rows at a time."""
        return self._pages("pos, id, title, text", "docs", "pos", batch, after)

    def iter_passages(
        self, batch: int = 10_000, after: int = -1
    ) -> Iterator[list[tuple[int, str, str, str]]]:
        """Every passage (of ids over ``after``) as ``(pid, doc id, title, passage text)``, in
        FAISS id order, ``batch`` at a time, cut out of its document here: each document of a
        batch is read once (SQLite's ``substr`` would read a 50 MB document again for each of
        its thousands of passages, and count its characters from the start each time)."""
        for spans in self._pages("pid, pos, start, stop", "passages", "pid", batch, after):
            docs = self.get([pos for _, pos, _, _ in spans])
            yield [
                (pid, docs[pos].id, docs[pos].title, docs[pos].text[start:stop])
                for pid, pos, start, stop in spans
            ]

    def _pages(
        self, columns: str, table: str, key: str, batch: int, after: int
    ) -> Iterator[list[tuple]]:
        """``columns`` of the rows with ``key`` over ``after``, by key, ``batch`` at a time
        (each page starts after the last key of the one before)."""
        sql = f"SELECT {columns} FROM {table} WHERE {key} > ? ORDER BY {key} LIMIT ?"
        while rows := self._execute(sql, (after, batch)):
            yield rows
            after = rows[-1][0]

    def passage_spans(self, first: int, stop: int) -> list[tuple[int, int, int, int, int]]:
        """``(pid, pos, part, start, stop)`` of the passages with ids in ``[first, stop)``."""
        return self._execute(
            "SELECT pid, pos, part, start, stop FROM passages WHERE pid >= ? AND pid < ? "
            "ORDER BY pid",
            (first, stop),
        )

    def passages(self, pids: Sequence[int]) -> dict[int, PassageRef]:
        """Where the passages with these FAISS ids lie (missing ones are absent)."""
        rows = self._select("p.pid, d.id, p.part, p.start, p.stop", pids, _PASSAGES_JOIN, "p.pid")
        return {row[0]: PassageRef(*row) for row in rows}

    def passage_texts(self, pids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """``pid -> (title, passage text)`` for these FAISS ids (each document read once)."""
        spans = list(self._select("pid, pos, start, stop", pids, "passages", "pid"))
        docs = self.get([pos for _, pos, _, _ in spans])
        return {pid: (docs[pos].title, docs[pos].text[a:b]) for pid, pos, a, b in spans}

    def positions(self) -> np.ndarray:
        """Every document's position, sorted."""
        rows = self._execute("SELECT pos FROM docs ORDER BY pos")
        return np.array([r[0] for r in rows], dtype=np.int64)

    def text_lengths(self) -> list[tuple[int, int]]:
        """``(position, characters of its text)`` of every document, by position."""
        return self._execute("SELECT pos, length(text) FROM docs ORDER BY pos")

    def split_documents(self) -> int:
        """How many documents have more than one passage."""
        return self._execute("SELECT COUNT(DISTINCT pos) FROM passages WHERE part > 0")[0][0]

    def drop_passages(self) -> None:
        """Remove the passages table (a build that split no document)."""
        self._conn.execute("DROP TABLE IF EXISTS passages")

    def passage_count(self) -> int:
        return self._execute("SELECT COUNT(*) FROM passages")[0][0]

    def __len__(self) -> int:
        return self._execute("SELECT COUNT(*) FROM docs")[0][0]

    def _execute(self, sql: str, params: Sequence = ()) -> list[tuple]:
        """Run a query; a damaged database file becomes one clear error."""
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise DotcatError(
                f"{self.path}: the doc store is unreadable ({e}); rebuild the index"
            ) from None

    def _select(
        self, columns: str, positions: Sequence[int], table: str = "docs", key: str = "pos"
    ) -> Iterator[tuple]:
        """Rows ``SELECT columns`` at the given positions, in chunks of host parameters."""
        return self._select_in(columns, sorted({int(p) for p in positions if p >= 0}), table, key)

    def _select_in(self, columns: str, keys: list, table: str, key: str) -> Iterator[tuple]:
        for chunk, marks in field_table.chunks(keys):
            yield from self._execute(
                f"SELECT {columns} FROM {table} WHERE {key} IN ({marks})", chunk
            )

    def get(self, positions: Sequence[int]) -> dict[int, StoredDocument]:
        """Documents at the given FAISS positions (missing ones are absent from the dict)."""
        return {
            row[0]: StoredDocument(*row) for row in self._select("pos, id, title, text", positions)
        }

    def by_ids(self, doc_ids: Sequence[str], composed: bool = False) -> dict[str, StoredDocument]:
        """Documents by id (the ``id`` column is UNIQUE, hence indexed); ``composed``: also a
        non-ASCII id held in another form (NFD "e" + U+0301 for "é"), keyed by the id given."""
        rows = self._select_in("pos, id, title, text", sorted(set(doc_ids)), "docs", "id")
        found = {row[1]: StoredDocument(*row) for row in rows}
        other = {_nfc(i): i for i in doc_ids if composed and i not in found and not i.isascii()}
        for row in self._select_in("pos, id, title, text", sorted(other), "docs", "nfc(id)"):
            found[other[_nfc(row[1])]] = StoredDocument(*row)
        return found

    def of_file(self, doc_id: str) -> list[StoredDocument]:
        """The documents of one file of a folder: ``doc_id`` itself (a document file) and the
        records ``doc_id#...`` (a record file; ``$`` follows ``#``)."""
        rows = self._execute(
            "SELECT pos, id, title, text FROM docs WHERE id = ? OR (id > ? AND id < ?)",
            (doc_id, f"{doc_id}#", f"{doc_id}$"),
        )
        return [StoredDocument(*row) for row in rows]

    def all_ids(self) -> list[str]:
        """Every document's id, in the order indexed."""
        return [row[0] for row in self._execute("SELECT id FROM docs ORDER BY pos")]

    def field_rows(self, positions: Sequence[int]) -> dict[int, list[tuple]]:
        """Each document's ``fields`` rows ``(name, value, num, kind)``, sorted (none without
        fields)."""
        out: dict[int, list[tuple]] = {int(p): [] for p in positions}
        if self.has_fields():
            for pos, *row in self._select("pos, name, value, num, kind", positions, "fields"):
                out[pos].append(tuple(row))
        return {pos: sorted(rows) for pos, rows in out.items()}

    def replace_fields(self, rows: Sequence[tuple[int, str]]) -> None:
        """Give the documents of ``(position, fields as JSON)`` rows those fields instead."""
        field_table.delete(self._conn, [pos for pos, _ in rows])
        self.add_fields(field_table.batch_field_rows(*zip(*rows, strict=True)) if rows else [])

    def ids(self, positions: Sequence[int]) -> dict[int, str]:
        """Document ids at the given FAISS positions."""
        return dict(self._select("pos, id", positions))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> DocStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
