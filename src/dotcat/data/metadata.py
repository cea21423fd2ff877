"""Metadata: the fields of a document beyond its id, title and text, read with their types.

Every reader hands a document's other fields here (:func:`record_fields`): a record's columns
or keys, a Markdown or reStructuredText file's front matter, a PDF's or an HTML page's
metadata, and for a file of a folder its own fields (:func:`file_fields`). They come out as a
flat mapping from a field name to a JSON value of one of four kinds (:data:`KINDS`):

- ``string``: text;
- ``number``: an integer or a float (JSON, YAML and Parquet numbers; a CSV or TSV cell that is
  written as a decimal number, without leading zeros: ``0042`` stays a code);
- ``date``: an ISO 8601 date or date-time string (``2025-01-01``, ``2025-01-01T09:30:00Z``),
  whatever it came from (a YAML or Parquet date, a string written so); a time without a zone
  is taken as UTC (:func:`parse_date`);
- ``list``: a list of strings (a JSON or YAML array, a Parquet list).

Nested objects are flattened into dotted names (``{"author": {"name": "Ada"}}`` gives
``author.name``), an array of objects into a list per dotted name; ``null`` and empty values
are left out; a boolean is the string ``true`` or ``false``. Which kind a *field* has is
decided over all of a collection's documents when the index is written
(:mod:`dotcat.index.fields`): a field whose values are all numbers is a number field, all
dates a date field, any list makes it a list field, and anything else a string field.

A folder's file gives ``path`` (its path in the folder), ``folder``, ``extension`` (lower
case, no dot, ``.gz`` left out), ``size`` (bytes) and ``mtime`` (its modification time); a
text file also ``encoding``, the one it was read in (:mod:`dotcat.data.encodings`). A record's
column of the same name keeps the record's value; a document file's own key (front matter) is
kept as ``meta.NAME``, the file's field keeping its value.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: The kinds of value a field holds.
KINDS = ("string", "number", "date", "list")

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_DATE = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:[T ](?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})"
    r"(?::(?P<second>[0-9]{2})(?P<fraction>\.[0-9]+)?)?"
    r"(?P<zone>Z|[+-][0-9]{2}:?[0-9]{2})?)?"
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_date(text: str) -> tuple[float, bool] | None:
    """``(seconds since 1970-01-01 UTC, whether it is a whole day)`` of an ISO 8601 date or
    date-time (``2025-01-31``, ``2025-01-31T09:30``, ``2025-01-31 09:30:15.5+02:00``), or None.

    A date-time without a zone is UTC; a date alone is its day's first second (UTC)."""
    match = _DATE.fullmatch(text.strip())
    if match is None:
        return None
    try:
        day = dt.date.fromisoformat(match["date"])
        if match["hour"] is None:
            moment = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
            return (moment - _EPOCH).total_seconds(), True
        zone = dt.UTC
        if match["zone"] and match["zone"] != "Z":
            sign = -1 if match["zone"][0] == "-" else 1
            digits = match["zone"][1:].replace(":", "")
            zone = dt.timezone(sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        moment = dt.datetime(
            day.year, day.month, day.day, int(match["hour"]), int(match["minute"]),
            int(match["second"] or 0), tzinfo=zone,
        )  # fmt: skip
    except ValueError:  # 2025-02-30, hour 25
        return None
    fraction = float(match["fraction"] or 0.0)
    return (moment - _EPOCH).total_seconds() + fraction, False


def iso_date(value: dt.date | dt.datetime) -> str:
    """A date as ``2025-01-31``, a date-time as ``2025-01-31T09:30:00Z`` (UTC; a naive one is
    taken as UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"
    return value.isoformat()


#: The key of a document's fields JSON that keeps the text its :class:`Written` numbers had.
WRITTEN = "\x00written"


class Written(float):
    """A CSV cell's decimal number that keeps its text (``1.10``, ``2.5e3``): a field that
    also holds words (a text field: ``version`` = 1.10, 2.0-beta) stores it as written."""

    def __new__(cls, text: str) -> Written:
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __str__(self) -> str:
        return self.text


def cell_value(text: str) -> str | int | float:
    """A CSV or TSV cell as a typed value: a decimal number (no leading zeros) as a number
    (:class:`Written`), anything else as the text (dates are recognised from text later)."""
    text = text.strip()
    if _NUMBER.fullmatch(text) and math.isfinite(float(text)):
        return int(text) if re.fullmatch(r"-?[0-9]+", text) else Written(text)
    return text


def record_fields(
    obj: Mapping[str, Any], used: Iterable[str] = (), cells: bool = False
) -> dict[str, Any]:
    """A record's fields beyond those ``used`` (its id, title and text), flattened and typed
    (see the module docstring); ``cells``: the values are CSV or TSV text (numbers inferred)."""
    skip = set(used)
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = str(key)
        if name in skip or not name.strip():
            continue
        if cells and isinstance(value, str):
            value = cell_value(value)
        _flatten(out, name, value)
    return out


def _flatten(out: dict[str, Any], name: str, value: Any) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if str(key).strip():
                _flatten(out, f"{name}.{key}", inner)
        return
    if isinstance(value, (list, tuple, set, frozenset)):
        _flatten_list(out, name, list(value))
        return
    scalar = scalar_value(value)
    if scalar is not None:
        out[name] = scalar


def _flatten_list(out: dict[str, Any], name: str, items: list[Any]) -> None:
    """An array: its scalars as a list of strings under ``name``, its objects' fields as
    lists under their dotted names."""
    strings: list[str] = []
    for item in items:
        if isinstance(item, Mapping):
            inner: dict[str, Any] = {}
            _flatten(inner, name, item)
            for key, value in inner.items():
                _append(out, key, value)
        elif isinstance(item, (list, tuple)):
            nested: dict[str, Any] = {}
            _flatten_list(nested, name, list(item))
            strings += nested.get(name, [])
        else:
            scalar = scalar_value(item)
            if scalar is not None:
                strings.append(_as_text(scalar))
    if strings:
        _append(out, name, strings)


def _append(out: dict[str, Any], name: str, value: Any) -> None:
    items = value if isinstance(value, list) else [_as_text(value)]
    held = out.get(name, [])  # (a field's value is never None: scalar_value drops it)
    out[name] = (held if isinstance(held, list) else [_as_text(held)]) + list(items)


def scalar_value(value: Any) -> str | int | float | None:
    """A scalar as a field value: text stripped (None when empty), a finite number, a boolean
    as ``true``/``false``, a date as ISO text; None for what is no value (null, NaN, bytes)."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Written):
        return value
    if isinstance(value, (float, decimal.Decimal)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, (dt.date, dt.datetime)):
        return iso_date(value)
    text = str(value).strip()
    return text or None


def _as_text(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def file_fields(rel: str, size: int, mtime_ns: int) -> dict[str, Any]:
    """A folder's file's own fields (see the module docstring)."""
    folder, _, name = rel.rpartition("/")
    base = name[:-3] if name.lower().endswith(".gz") else name
    extension = base.rsplit(".", 1)[1].lower() if "." in base.lstrip(".") else ""
    moment = dt.datetime.fromtimestamp(mtime_ns / 1e9, tz=dt.UTC).replace(microsecond=0)
    return {"path": rel, "folder": folder, "extension": extension, "size": size,
            "mtime": iso_date(moment)}  # fmt: skip


def merged(own: Mapping[str, Any], derived: Mapping[str, Any], file_wins: bool = False) -> dict:
    """A document's fields: the ``derived`` ones (a file's), then its ``own``, which win in a
    record (a product's ``size``); in a document file the file's win (``path`` is where the
    file is, whatever a Gatsby note's front matter says), its own key kept as ``meta.KEY``."""
    if file_wins:
        own = {f"meta.{key}" if key in derived else key: value for key, value in own.items()}
    return {**derived, **own}
