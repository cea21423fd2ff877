"""The document store: SQLite table of (position, id, title, text), and the text the models
read of a document (:func:`document_text`).

Position is the row's FAISS id (0-based, insertion order), so a FAISS hit maps to its
document with one primary-key lookup and nothing else must be held in memory.

Opened for search it is read-only, through a SQLite URI whose path is percent-encoded (a
``#``, ``?`` or ``%`` in a folder name would otherwise end the path early), and checked
against the manifest (schema, row count, positions 0..n-1) before the first query: a
damaged store is one clear error at load, never a traceback or a missing result later.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from dotcat.errors import DotcatError
from dotcat.files import writing
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
_LOOKUP_CHUNK = 900  # stays under SQLite's default limit of host parameters per statement


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


class DocStore:
    """Read/write access to ``docstore.sqlite`` in an index directory."""

    def __init__(self, path: Path, readonly: bool = True) -> None:
        self.path = Path(path)
        if readonly:
            if not self.path.is_file():
                raise DotcatError(f"{self.path}: doc store missing; rebuild the index")
            uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        else:
            self._conn = sqlite3.connect(self.path, check_same_thread=False)
            # Built in a temporary directory that is renamed into place: durability comes
            # from the final fsync and rename, so the journal is not needed while writing.
            self._conn.execute("PRAGMA journal_mode=OFF")
            self._conn.execute("PRAGMA synchronous=OFF")
            self._conn.execute(_SCHEMA)

    def add(self, rows: Iterable[tuple[int, str, str, str]]) -> None:
        """Insert ``(pos, id, title, text)`` rows (a full disk: :class:`DiskFullError`)."""
        try:
            with writing(self.path):
                self._conn.executemany("INSERT INTO docs VALUES (?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as e:
            raise DotcatError(f"{self.path}: duplicate document id or position ({e})") from None

    def commit(self) -> None:
        with writing(self.path):  # SQLite says "disk I/O error" where a file-size limit hit
            self._conn.commit()

    def delete(self, positions: Sequence[int]) -> None:
        """Remove the rows at these positions."""
        for start in range(0, len(positions), _LOOKUP_CHUNK):
            chunk = [int(p) for p in positions[start : start + _LOOKUP_CHUNK]]
            marks = ",".join("?" * len(chunk))
            self._conn.execute(f"DELETE FROM docs WHERE pos IN ({marks})", chunk)

    def check(self, expected: int, span: int | None = None) -> None:
        """Check the schema, the row count, and that positions lie in ``0..span-1``.

        ``span`` is the next unused position (the count, unless updates deleted some: then
        positions have gaps); without gaps, count and span equal and positions are exactly
        ``0..expected-1``.

        Raises:
            DotcatError: not SQLite, corrupt or truncated, another schema, or rows missing
                or extra against the manifest's document count.
        """
        span = expected if span is None else span
        columns = [row[1] for row in self._execute("PRAGMA table_info(docs)")]
        if columns != _COLUMNS:
            found = ", ".join(columns) if columns else "no docs table"
            raise DotcatError(
                f"{self.path}: not a dotcat doc store (expected table docs with columns "
                f"{', '.join(_COLUMNS)}; found {found}); rebuild the index"
            )
        # pos is the INTEGER PRIMARY KEY (unique): n rows spanning 0..n-1 are exactly 0..n-1.
        count, low, high = self._execute("SELECT COUNT(*), MIN(pos), MAX(pos) FROM docs")[0]
        if count != expected or (count and (low < 0 or high >= span)):
            raise DotcatError(
                f"{self.path}: the doc store holds {count} documents (positions {low}..{high}), "
                f"the manifest says {expected}; rebuild the index"
            )

    def iter_rows(self, batch: int = 10_000) -> Iterator[list[tuple[int, str, str, str]]]:
        """Every ``(pos, id, title, text)`` row in position order, ``batch`` rows at a time."""
        last = -1
        while True:
            rows = self._execute(
                "SELECT pos, id, title, text FROM docs WHERE pos > ? ORDER BY pos LIMIT ?",
                (last, batch),
            )
            if not rows:
                return
            yield rows
            last = rows[-1][0]

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

    def _select(self, columns: str, positions: Sequence[int]) -> Iterator[tuple]:
        """Rows ``SELECT columns`` at the given positions, in chunks of host parameters."""
        wanted = sorted({int(p) for p in positions if p >= 0})
        for start in range(0, len(wanted), _LOOKUP_CHUNK):
            chunk = wanted[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            yield from self._execute(f"SELECT {columns} FROM docs WHERE pos IN ({marks})", chunk)

    def get(self, positions: Sequence[int]) -> dict[int, StoredDocument]:
        """Documents at the given FAISS positions (missing ones are absent from the dict)."""
        return {
            row[0]: StoredDocument(*row) for row in self._select("pos, id, title, text", positions)
        }

    def by_ids(self, doc_ids: Sequence[str]) -> dict[str, StoredDocument]:
        """Documents with the given ids (the ``id`` column is UNIQUE, hence indexed)."""
        wanted = sorted(set(doc_ids))
        found: dict[str, StoredDocument] = {}
        for start in range(0, len(wanted), _LOOKUP_CHUNK):
            chunk = wanted[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._execute(
                f"SELECT pos, id, title, text FROM docs WHERE id IN ({marks})", chunk
            )
            found.update((row[1], StoredDocument(*row)) for row in rows)
        return found

    def ids(self, positions: Sequence[int]) -> dict[int, str]:
        """Document ids at the given FAISS positions."""
        return dict(self._select("pos, id", positions))

    def close(self) -> None:
        self._conn.close()
