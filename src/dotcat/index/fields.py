"""Documents' fields in the doc store: typed, indexed for filtering, counted for facets.

A document's fields (:mod:`dotcat.data.metadata`) are rows of one SQLite table of the doc
store, ``fields (pos, name, value, num, kind)``: one row per value (a list field one per
item), ``value`` its text (a date as written in ISO 8601, a number as written), ``num`` its
number (a date: seconds since 1970-01-01 UTC; NULL for text), ``kind`` what the value was
(:data:`KIND_CODES`). Two covering indexes, ``(name, value, pos)`` and ``(name, num, pos)``,
answer an equality, a range or a prefix on one field by an index range scan that never
touches the table, whatever the collection's size (the layout of an entity-attribute-value
table, as search engines' SQLite back-ends keep facets), and ``(pos)`` reads one document's.

Each field's kind (:data:`dotcat.data.metadata.KINDS`) is decided over all its values when the
store is written and after every update, and kept in ``field_kinds (name, kind, documents,
distinct_values)``: a list field if any document gave a list, a number field if every value
is a number, a date field if every value is a date, else a string field; the counts say which
fields have few distinct values (facets). An index written before fields were kept has
neither table (manifest format 1): it opens and searches as before, and a filter on it is
refused with one line saying to rebuild it.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dotcat.data.metadata import WRITTEN, parse_date

#: What each value was when read (``kind`` column).
KIND_CODES = {"string": 0, "number": 1, "date": 2, "list": 3}
FIELDS_SCHEMA = """
CREATE TABLE IF NOT EXISTS fields (
    pos   INTEGER NOT NULL,
    name  TEXT NOT NULL,
    value TEXT NOT NULL,
    num   REAL,
    kind  INTEGER NOT NULL
)
"""
KINDS_SCHEMA = """
CREATE TABLE IF NOT EXISTS field_kinds (
    name            TEXT PRIMARY KEY,
    kind            TEXT NOT NULL,
    documents       INTEGER NOT NULL,
    distinct_values INTEGER NOT NULL
)
"""
#: Covering indexes for filters (by value, by number) and one for reading a document's fields.
INDEXES = (
    "CREATE INDEX IF NOT EXISTS fields_by_value ON fields (name, value, pos)",
    "CREATE INDEX IF NOT EXISTS fields_by_num ON fields (name, num, pos)",
    "CREATE INDEX IF NOT EXISTS fields_by_pos ON fields (pos)",
)
_CHUNK = 900  # host parameters per statement, under SQLite's default limit


def chunks(keys: Sequence, size: int = _CHUNK) -> Iterator[tuple[list, str]]:
    """``(keys, "?,?,...")`` in chunks of ``size``, under SQLite's limit of host parameters."""
    for start in range(0, len(keys), size):
        chunk = list(keys[start : start + size])
        yield chunk, ",".join("?" * len(chunk))


@dataclass(frozen=True)
class FieldInfo:
    """A field of an index: its kind, how many documents have it, its distinct values."""

    kind: str
    documents: int
    distinct_values: int


#: One row of the ``fields`` table: position, name, value, number, kind code.
FieldRow = tuple[int, str, str, float | None, int]


def field_rows(pos: int, fields: Mapping[str, Any]) -> list[FieldRow]:
    """The ``fields`` table's rows of one document (see the module docstring)."""
    rows, written = [], fields.get(WRITTEN) or {}  # a CSV number's text, as written
    for name, value in fields.items():
        if isinstance(value, list):
            rows += [(pos, name, str(item), None, KIND_CODES["list"]) for item in value]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                text = getattr(value, "text", None) or written.get(name) or _number_text(value)
                rows.append((pos, name, text, float(value), KIND_CODES["number"]))
        elif name == WRITTEN:
            continue
        elif (date := parse_date(str(value))) is not None:
            rows.append((pos, name, str(value), date[0], KIND_CODES["date"]))
        else:
            rows.append((pos, name, str(value), None, KIND_CODES["string"]))
    return rows


def batch_field_rows(positions: Iterable[int], fields: Iterable[str]) -> list[FieldRow]:
    """The rows of a batch of documents at ``positions``, their fields as the corpus's Arrow
    file holds them (JSON, :func:`dotcat.data.corpus.fields_json`)."""
    return [
        row for pos, held in zip(positions, fields, strict=True) if held
        for row in field_rows(pos, json.loads(held))
    ]  # fmt: skip


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**63 else repr(value)


def create(conn: sqlite3.Connection) -> None:
    """The two tables (their indexes come in :func:`finish`, after the bulk insert)."""
    conn.execute(FIELDS_SCHEMA)
    conn.execute(KINDS_SCHEMA)


def insert(conn: sqlite3.Connection, rows: Iterable[tuple]) -> None:
    conn.executemany("INSERT INTO fields VALUES (?, ?, ?, ?, ?)", rows)


def delete(conn: sqlite3.Connection, positions: Sequence[int]) -> None:
    """Remove the fields of the documents at these positions."""
    for chunk, marks in chunks([int(p) for p in positions]):
        conn.execute(f"DELETE FROM fields WHERE pos IN ({marks})", chunk)


def finish(conn: sqlite3.Connection) -> None:
    """Index the table and decide every field's kind again (after a build, an update or a
    merge: one value can change a field's kind)."""
    for statement in INDEXES:
        conn.execute(statement)
    conn.execute("DELETE FROM field_kinds")
    conn.execute(
        "INSERT INTO field_kinds SELECT name, "
        "CASE WHEN MAX(kind = 3) THEN 'list' WHEN MIN(kind = 1) THEN 'number' "
        "WHEN MIN(kind = 2) THEN 'date' ELSE 'string' END, "
        "COUNT(DISTINCT pos), COUNT(DISTINCT value) FROM fields GROUP BY name"
    )


def kinds(conn: sqlite3.Connection) -> dict[str, FieldInfo]:
    """Every field of the store: name -> :class:`FieldInfo`, by name."""
    rows = conn.execute(
        "SELECT name, kind, documents, distinct_values FROM field_kinds ORDER BY name"
    ).fetchall()
    return {name: FieldInfo(kind, documents, values) for name, kind, documents, values in rows}


def values(conn: sqlite3.Connection, names: Sequence[str]) -> dict[str, set[str]]:
    """The distinct values (as text) of the fields ``names``."""
    out: dict[str, set[str]] = {name: set() for name in names}
    for chunk, marks in chunks(names):
        sql = f"SELECT DISTINCT name, value FROM fields WHERE name IN ({marks})"
        for name, value in conn.execute(sql, chunk):
            out[name].add(value)
    return out


def select_positions(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> np.ndarray:
    """The sorted positions a filter's query (``SELECT pos ...``) admits."""
    cursor = conn.execute(f"SELECT DISTINCT pos FROM ({sql}) ORDER BY pos", params)
    return np.fromiter((row[0] for row in cursor), dtype=np.int64)


def of(
    conn: sqlite3.Connection, positions: Sequence[int], known: Mapping[str, FieldInfo]
) -> dict[int, dict[str, Any]]:
    """The fields of the documents at these positions, typed as their fields' kinds (a list
    field's value a list, a number a number, a date its ISO text)."""
    out: dict[int, dict[str, Any]] = {int(p): {} for p in positions}
    for chunk, marks in chunks(sorted(out)):
        rows = conn.execute(
            f"SELECT pos, name, value, num FROM fields WHERE pos IN ({marks}) ORDER BY pos, rowid",
            chunk,
        ).fetchall()
        for pos, name, value, num in rows:
            info = known.get(name)
            fields = out[pos]
            if info is not None and info.kind == "list":
                fields.setdefault(name, []).append(value)
            elif info is not None and info.kind == "number" and num is not None:
                fields[name] = int(value) if re.fullmatch(r"-?[0-9]+", value) else num
            else:
                fields[name] = value
    return out


def counts(
    conn: sqlite3.Connection, positions: Sequence[int], names: Sequence[str]
) -> dict[str, dict[str, int]]:
    """How many of the documents at ``positions`` have each value of the fields ``names``:
    name -> value -> documents (for facets)."""
    out: dict[str, dict[str, int]] = {name: {} for name in names}
    wanted = sorted({int(p) for p in positions})
    if not wanted or not names:
        return out
    for chunk, marks in chunks(wanted, _CHUNK - len(names)):
        rows = conn.execute(
            "SELECT name, value, COUNT(DISTINCT pos) FROM fields "
            f"WHERE name IN ({','.join('?' * len(names))}) AND pos IN ({marks}) "
            "GROUP BY name, value",
            [*names, *chunk],
        ).fetchall()
        for name, value, count in rows:
            out[name][value] = out[name].get(value, 0) + count
    return out


def copy_shifted(source: sqlite3.Connection, target: sqlite3.Connection, shift: int) -> None:
    """Copy every field row of ``source`` into ``target``, positions shifted (a merge)."""
    cursor = source.execute("SELECT pos, name, value, num, kind FROM fields ORDER BY rowid")
    while rows := cursor.fetchmany(50_000):
        insert(target, ((pos + shift, *rest) for pos, *rest in rows))


def merged_kinds(parts: Iterable[Mapping[str, FieldInfo]]) -> dict[str, FieldInfo]:
    """The fields of several stores searched as one (shards): a field's kind where they
    agree, else the one that holds both (a list, else a string); counts summed (distinct
    values: an upper bound)."""
    out: dict[str, FieldInfo] = {}
    for part in parts:
        for name, info in part.items():
            held = out.get(name)
            if held is None:
                out[name] = info
                continue
            kinds = {held.kind, info.kind}
            kind = held.kind if len(kinds) == 1 else "list" if "list" in kinds else "string"
            out[name] = FieldInfo(kind, held.documents + info.documents,
                                  held.distinct_values + info.distinct_values)  # fmt: skip
    return dict(sorted(out.items()))


def with_distinct(
    kinds: Mapping[str, FieldInfo], values: Mapping[str, set[str]]
) -> dict[str, FieldInfo]:
    """``kinds`` (merged) with the distinct values of the fields in ``values`` counted
    exactly: the size of the union of every part's values, where :func:`merged_kinds` can
    only sum them (an upper bound)."""
    out = dict(kinds)
    for name, seen in values.items():
        if name in out:
            out[name] = replace(out[name], distinct_values=len(seen))
    return out
