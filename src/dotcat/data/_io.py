"""Shared low-level reading: plain or gzipped files, strict UTF-8 lines, JSON records, ids.

Every reader in :mod:`dotcat.data` goes through :func:`iter_lines`, so every format gets the
same treatment of gzip, byte-order marks, blank lines, line numbers and invalid UTF-8, and
every problem is reported as one :class:`~dotcat.errors.DataFormatError` naming the file and
the physical (1-based) line.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dotcat.errors import DataFormatError

#: The first bytes of every SQLite database (a judging store, a doc store).
SQLITE_HEADER = b"SQLite format 3\0"

#: File name endings (after an optional ``.gz``) read as JSON Lines.
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
#: File name endings (after an optional ``.gz``) read as tab-separated values.
TSV_SUFFIXES = (".tsv", ".txt")

_INTEGER = re.compile(r"[+-]?[0-9]+")
_WHITESPACE = re.compile(r"\s")


def is_gzipped(path: Path) -> bool:
    """Whether ``path`` is read through gzip (its name ends in ``.gz``)."""
    return path.name.lower().endswith(".gz")


def require_file(path: str | Path) -> Path:
    """Return ``path`` as a :class:`Path` if it is an existing regular file, else raise."""
    p = Path(path)
    if not p.exists():
        raise DataFormatError(p, None, "no such file or directory")
    if p.is_dir():
        raise DataFormatError(p, None, "is a directory, expected a file")
    return p


def find_one(directory: Path, names: Sequence[str], what: str) -> Path:
    """The single file among ``names`` present in ``directory``.

    Two candidates (say ``corpus.jsonl`` and ``corpus.jsonl.gz``) are refused rather than
    silently preferring one of them: they may differ.
    """
    found = [directory / name for name in names if (directory / name).is_file()]
    if not found:
        raise DataFormatError(
            directory, None, f"no {what} file here (expected {' or '.join(names)})"
        )
    if len(found) > 1:
        listed = " and ".join(p.name for p in found)
        raise DataFormatError(directory, None, f"both {listed} exist; keep only one")
    return found[0]


def detect_format(path: Path) -> str:
    """``"jsonl"`` or ``"tsv"`` from the file name, else from the first non-blank line.

    A name ending in one of :data:`JSONL_SUFFIXES` or :data:`TSV_SUFFIXES` (optionally followed
    by ``.gz``) decides; otherwise a first record starting with ``{`` means JSON Lines.
    """
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(TSV_SUFFIXES):
        return "tsv"
    for _, text in iter_lines(path):
        return "jsonl" if text.lstrip().startswith("{") else "tsv"
    return "jsonl"  # an empty file: either reader yields nothing


def iter_lines(path: Path, encoding: str | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for every non-blank line of a plain or gzipped file.

    Line numbers are physical and 1-based (blank lines count but are not yielded). Lines are
    split on ``\\n`` only and decoded as strict UTF-8 (or ``encoding``); a byte-order mark at
    the start and a trailing ``\\r`` are dropped. Invalid UTF-8, a corrupt or truncated gzip
    stream and read errors become a :class:`DataFormatError`.
    """
    if encoding is not None and codecs.lookup(encoding).name != "utf-8":
        yield from _iter_decoded_lines(path, encoding)
        return
    gz = is_gzipped(path)
    lineno = 0
    offset = 0  # byte offset of the current line in the (decompressed) file
    try:
        with gzip.open(path, "rb") if gz else open(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if lineno == 1 and raw.startswith(SQLITE_HEADER):
                    why = "an SQLite database (a judging store, a doc store), not a text file"
                    raise DataFormatError(path, None, why)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    where = "decompressed file" if gz else "file"
                    raise DataFormatError(
                        path,
                        lineno,
                        f"invalid UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start} in the line "
                        f"(offset {offset + e.start} in the {where}): {e.reason}",
                    ) from None
                offset += len(raw)
                if lineno == 1 and text.startswith("\ufeff"):
                    text = text[1:]
                text = text.rstrip("\r\n")
                if text.strip():
                    yield lineno, text
    except (OSError, EOFError, zlib.error) as e:
        # gzip.BadGzipFile is an OSError; a truncated stream raises EOFError on the next read.
        line = lineno + 1 if lineno else None
        raise DataFormatError(path, line, f"cannot read{' gzip data' if gz else ''}: {e}") from None


def _iter_decoded_lines(path: Path, encoding: str) -> Iterator[tuple[int, str]]:
    """:func:`iter_lines` in another encoding than UTF-8 (decoded as a stream, so that
    UTF-16's two-byte line ends are found)."""
    lineno = 0
    try:
        with gzip.open(path, "rb") if is_gzipped(path) else open(path, "rb") as raw:
            text = io.TextIOWrapper(raw, encoding=encoding, newline="")
            for lineno, line in enumerate(text, start=1):
                line = line.removeprefix("\ufeff").rstrip("\r\n")
                if line.strip():
                    yield lineno, line
    except UnicodeDecodeError as e:
        raise DataFormatError(path, lineno + 1, f"invalid {encoding}: {e.reason}") from None
    except (OSError, EOFError, zlib.error) as e:
        raise DataFormatError(path, lineno + 1 if lineno else None, f"cannot read: {e}") from None


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "array" if isinstance(value, list) else "object"


def parse_json_object(path: Path, lineno: int, text: str) -> dict[str, Any]:
    """Decode one JSON Lines record, which must be a JSON object."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFormatError(path, lineno, f"malformed JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(obj, dict):
        raise DataFormatError(path, lineno, f"expected a JSON object, found {json_type(obj)}")
    return whole_characters(path, lineno, obj) if "\\ud" in text.lower() else obj


def whole_characters(path: Path, lineno: int | None, obj: Any) -> Any:
    """``obj``, refused where a ``\\uD83D`` escape without its pair (a cut emoji) left half a
    character, which no encoder or Arrow file reads."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        half = f"U+{ord(e.object[e.start]):04X}"
        raise DataFormatError(path, lineno, f"a \\u escape of half a character ({half})") from None
    return obj


def check_id(path: Path, lineno: int | None, value: str, field: str) -> str:
    """Validate an id read as text: non-empty and free of whitespace.

    Whitespace is refused because TREC run and qrels files separate their columns with it, so
    such an id could not be written or evaluated faithfully.
    """
    if not value.strip():
        raise DataFormatError(path, lineno, "empty id", field)
    if _WHITESPACE.search(value):
        problem = f"id {value!r} contains whitespace (TREC runs and qrels cannot hold it)"
        raise DataFormatError(path, lineno, problem, field)
    return value


def get_json_id(path: Path, lineno: int, obj: Mapping[str, Any]) -> tuple[str, str]:
    """The record's id and the field it came from (``_id`` preferred, ``id`` accepted).

    Integer ids are turned into strings (as BEIR's own loader does); other types are refused.
    """
    present = [key for key in ("_id", "id") if key in obj]
    if not present:
        raise DataFormatError(path, lineno, "missing id (expected an '_id' or 'id' field)", "_id")
    if len(present) == 2 and obj["_id"] != obj["id"]:
        raise DataFormatError(
            path, lineno, f"'_id' {obj['_id']!r} and 'id' {obj['id']!r} disagree", "_id"
        )
    field = present[0]
    return json_id_value(path, lineno, obj[field], field), field


def json_id_value(path: Path, lineno: int | None, value: Any, field: str) -> str:
    """An id read from a record's ``field``: a string, or an integer turned into one (as
    BEIR's own loader does); other types are refused. Checked by :func:`check_id`."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    elif not isinstance(value, str):
        raise DataFormatError(
            path, lineno, f"id must be a string or an integer, found {json_type(value)}", field
        )
    return check_id(path, lineno, value, field)


def get_json_text(
    path: Path, lineno: int, obj: Mapping[str, Any], names: Sequence[str]
) -> str | None:
    """The first of the fields ``names`` present in ``obj`` as a string, or None if none is.

    ``null`` reads as ``""``; other non-string values are refused. If several of the names are
    present with different values the record is ambiguous and refused.
    """
    present = [name for name in names if name in obj]
    if not present:
        return None
    for name in present:
        if obj[name] is not None and not isinstance(obj[name], str):
            raise DataFormatError(
                path, lineno, f"expected a string, found {json_type(obj[name])}", name
            )
    values = [obj[name] or "" for name in present]
    if any(v != values[0] for v in values[1:]):
        raise DataFormatError(
            path, lineno, f"fields {' and '.join(present)} are both present and differ", present[0]
        )
    return values[0]


def split_tsv(text: str) -> list[str]:
    """Split a TSV line on tabs (no quoting: a tab inside a field is a format error)."""
    return text.split("\t")


def is_integer(text: str) -> bool:
    """Whether ``text`` is a plain decimal integer (``int()`` alone would accept ``1_0``)."""
    return _INTEGER.fullmatch(text) is not None


def jsonl_lines(records: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """``records`` as JSON Lines (UTF-8 text kept as it is, not escaped)."""
    return (json.dumps(record, ensure_ascii=False) + "\n" for record in records)
