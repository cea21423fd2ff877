"""The document store: SQLite table of (position, id, title, text).

Position is the row's FAISS id (0-based, insertion order), so a FAISS hit maps to its
document with one primary-key lookup and nothing else must be held in memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dotcat.errors import DotcatError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    pos   INTEGER PRIMARY KEY,
    id    TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    text  TEXT NOT NULL
)
"""
_LOOKUP_CHUNK = 900  # stays under SQLite's default limit of host parameters per statement


@dataclass(frozen=True)
class StoredDocument:
    """A document as stored in an index: its FAISS position, id, title and text."""

    pos: int
    id: str
    title: str
    text: str


class DocStore:
    """Read/write access to ``docstore.sqlite`` in an index directory."""

    def __init__(self, path: Path, readonly: bool = True) -> None:
        self.path = Path(path)
        if readonly:
            uri = f"file:{self.path}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        else:
            self._conn = sqlite3.connect(self.path, check_same_thread=False)
            # Built in a temporary directory that is renamed into place: durability comes
            # from the final fsync and rename, so the journal is not needed while writing.
            self._conn.execute("PRAGMA journal_mode=OFF")
            self._conn.execute("PRAGMA synchronous=OFF")
            self._conn.execute(_SCHEMA)

    def add(self, rows: Iterable[tuple[int, str, str, str]]) -> None:
        """Insert ``(pos, id, title, text)`` rows."""
        try:
            self._conn.executemany("INSERT INTO docs VALUES (?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as e:
            raise DotcatError(f"{self.path}: duplicate document id or position ({e})") from None

    def commit(self) -> None:
        self._conn.commit()

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0]

    def _select(self, columns: str, positions: Sequence[int]) -> Iterator[tuple]:
        """Rows ``SELECT columns`` at the given positions, in chunks of host parameters."""
        wanted = sorted({int(p) for p in positions if p >= 0})
        for start in range(0, len(wanted), _LOOKUP_CHUNK):
            chunk = wanted[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            yield from self._conn.execute(
                f"SELECT {columns} FROM docs WHERE pos IN ({marks})", chunk
            )

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
            rows = self._conn.execute(
                f"SELECT pos, id, title, text FROM docs WHERE id IN ({marks})", chunk
            )
            found.update((row[1], StoredDocument(*row)) for row in rows)
        return found

    def ids(self, positions: Sequence[int]) -> dict[int, str]:
        """Document ids at the given FAISS positions."""
        return dict(self._select("pos, id", positions))

    def close(self) -> None:
        self._conn.close()
