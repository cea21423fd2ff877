"""Records: documents stored as named fields, read from files or Python objects.

One document per JSON object, CSV/TSV row, Parquet row or Python item. Every format goes
through :func:`record_from_mapping`, so the same field names apply to all of them and a
record without the wanted field gets the same one-line error, naming the file, the line (or
row, or item) and the fields the record has: the right ``--id-field``, ``--title-field`` or
``--text-field`` is one look away.

Field names (:class:`FieldNames`): by default the id comes from ``_id`` or ``id`` (BEIR, Pyserini),
the title from ``title`` (optional), the text from ``text`` or ``contents`` (Pyserini's
JsonCollection). A named field is the only one read, and every record must have it (``null`` reads
as empty): a misspelt name fails on the first record instead of indexing empty titles.

Readers (:func:`iter_file_records` picks one by :func:`record_format`):

- JSON Lines (``.jsonl``, ``.ndjson``; a ``.json`` file not starting with ``[``): an object
  a line, streamed.
- JSON array (a ``.json`` file starting with ``[``): decoded whole by :mod:`json`.
- CSV (``.csv``): a header row naming the columns, RFC 4180 quoting (:mod:`csv`); rows are
  numbered by the physical line they start on.
- TSV (``.tsv``, and ``.txt`` given as a corpus file): headerless ``id<TAB>text`` or
  ``id<TAB>title<TAB>text`` (MS MARCO's ``collection.tsv``), or a header row: a header is read as
  column names when a field is named or when it holds the default id and text names
  (``_id<TAB>url<TAB>text``); else a 2- or 3-column one naming an id column first and a text column
  last is skipped and the columns read by position. No quoting, as in MS MARCO's files.
- Parquet (``.parquet``): record batches through :mod:`pyarrow.parquet`; rows numbered from 1.
- Python (:func:`iter_python_records`): a list of strings (ids ``"0"``, ``"1"``, ...), a list of
  dicts, a pandas DataFrame or a ``datasets.Dataset``; items numbered from 1.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import sys
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from dotcat.data._io import (
    check_id,
    get_json_text,
    is_gzipped,
    iter_lines,
    json_id_value,
    json_type,
    parse_json_object,
    split_tsv,
    whole_characters,
)
from dotcat.data.metadata import record_fields
from dotcat.errors import DataFormatError

DEFAULT_ID_FIELDS = ("_id", "id")
DEFAULT_TITLE_FIELDS = ("title",)
DEFAULT_TEXT_FIELDS = ("text", "contents")
#: First-column names that mark a TSV's first line as a header (MS MARCO and BEIR variants).
TSV_ID_HEADERS = frozenset({"id", "_id", "docid", "doc_id", "doc-id", "pid", "corpus-id"})
#: Last-column names that mark a TSV's first line as a header.
TSV_TEXT_HEADERS = frozenset({"text", "contents", "passage", "body"})
_BATCH = 1000  # rows per Arrow batch read from Parquet and Python tables
_LISTED_FIELDS = 12  # how many of a record's fields an error lists


class Record(NamedTuple):
    """One document as read: where it is, its id (and the field it came from), title, text,
    and its other fields (:mod:`dotcat.data.metadata`: typed, flattened; None: none)."""

    path: str
    line: int | None
    id: str
    id_field: str
    title: str
    text: str
    fields: dict[str, Any] | None = None


@dataclass(frozen=True)
class FieldNames:
    """The record fields to read; None means the defaults (see the module docstring)."""

    id: str | None = None
    title: str | None = None
    text: str | None = None

    @property
    def named(self) -> bool:
        """Whether any field was named."""
        return any(name is not None for name in (self.id, self.title, self.text))


def record_format(path: Path, encoding: str | None = None) -> str:
    """``jsonl``, ``json``, ``csv``, ``tsv`` or ``parquet`` from the name, else by content.

    A name without a known ending (after an optional ``.gz``) is JSON Lines when its first
    non-blank line starts with ``{``, else TSV. A ``.json`` file is an array when its first
    non-blank character is ``[``, else JSON Lines.
    """
    name = path.name.lower().removesuffix(".gz")
    by_suffix = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv",
                 ".txt": "tsv", ".parquet": "parquet"}  # fmt: skip
    for suffix, kind in by_suffix.items():
        if name.endswith(suffix):
            return kind
    first = next((text.lstrip() for _, text in iter_lines(path, encoding)), "")
    if name.endswith(".json"):
        return "json" if first.startswith("[") else "jsonl"
    return "jsonl" if first.startswith("{") or not first else "tsv"


def iter_file_records(
    path: Path, fields: FieldNames = FieldNames(), encoding: str | None = None
) -> Iterator[Record]:
    """The records of one file, in file order, validated (see the module docstring); text
    formats decoded from ``encoding`` (None: UTF-8).

    Raises:
        DataFormatError: the first bad record, naming the file, line and field.
    """
    kind = record_format(path, encoding)
    if kind == "parquet":
        return _parquet(path, fields)
    readers = {"jsonl": _jsonl, "json": _json_array, "csv": _csv, "tsv": _tsv}
    return readers[kind](path, fields, encoding)


def record_from_mapping(
    where: str | Path,
    line: int | None,
    obj: Mapping[str, Any],
    fields: FieldNames,
    cells: bool = False,
) -> Record:
    """Read ``(id, title, text)`` from one record through the field names ``fields``, and its
    other fields (:func:`dotcat.data.metadata.record_fields`; ``cells``: CSV or TSV text).

    Raises:
        DataFormatError: a missing id or text field (the message lists the record's fields),
            an id that is not a string or integer, or several default fields that disagree.
    """
    doc_id, id_field = _record_id(where, line, obj, fields.id)
    text = _named_text(where, line, obj, fields.text, DEFAULT_TEXT_FIELDS, "text")
    title = _named_text(where, line, obj, fields.title, DEFAULT_TITLE_FIELDS, "title")
    used = (
        *((fields.id,) if fields.id else DEFAULT_ID_FIELDS),
        *((fields.title,) if fields.title else DEFAULT_TITLE_FIELDS),
        *((fields.text,) if fields.text else DEFAULT_TEXT_FIELDS),
    )
    extra = record_fields(obj, used, cells=cells) or None
    return Record(str(where), line, doc_id, id_field, title or "", text or "", extra)


def _missing(where, line, obj: Mapping[str, Any], what: str, names: Sequence[str], option: str):
    """The error for a record without the wanted field: it lists the fields the record has,
    and names the ``option`` (``id_field``...) that names another (a front door's spelling:
    :attr:`~dotcat.errors.DotcatError.settings`)."""
    expected = " or ".join(repr(n) for n in names)
    have = [str(k) for k in obj]
    listed = ", ".join(have[:_LISTED_FIELDS]) + (", ..." if len(have) > _LISTED_FIELDS else "")
    return DataFormatError(
        where,
        line,
        f"missing {what} (expected {expected}); the record has fields "
        f"{listed or '(none)'}: name the field with {option}",
        names[0],
        settings=(option,),
    )


def _record_id(
    where: str | Path, line: int | None, obj: Mapping[str, Any], name: str | None
) -> tuple[str, str]:
    """The record's id and the field it came from; integers become strings (as BEIR's loader
    does). Two default id fields present must agree."""
    names = (name,) if name else DEFAULT_ID_FIELDS
    present = [n for n in names if n in obj]
    if not present:
        raise _missing(where, line, obj, "id", names, "id_field")
    field = present[0]
    if any(obj[n] != obj[field] for n in present[1:]):
        shown = " and ".join(f"{n!r} {obj[n]!r}" for n in present)
        raise DataFormatError(where, line, f"{shown} disagree", field)
    return json_id_value(Path(where), line, obj[field], field), field


def _named_text(
    where: str | Path,
    line: int | None,
    obj: Mapping[str, Any],
    name: str | None,
    defaults: Sequence[str],
    what: str,
) -> str | None:
    """A text field: the named one (required), else the first default present (the text's
    is required, the title's is not)."""
    names = (name,) if name else defaults
    value = get_json_text(Path(where), line, obj, names)  # type: ignore[arg-type]
    if value is None and (name or what == "text"):
        raise _missing(where, line, obj, "field", names, f"{what}_field")
    return value


# -- file readers ------------------------------------------------------------------------


def _jsonl(path: Path, fields: FieldNames, encoding: str | None = None) -> Iterator[Record]:
    for lineno, line in iter_lines(path, encoding):
        try:
            obj = parse_json_object(path, lineno, line)
        except DataFormatError as e:
            if lineno == 1 and path.name.lower().removesuffix(".gz").endswith(".json"):
                raise DataFormatError(
                    path, lineno, f"{e.problem} (a .json corpus holds an array of records or "
                    "one object a line)"
                ) from None  # fmt: skip
            raise
        yield record_from_mapping(path, lineno, obj, fields)


def _json_array(path: Path, fields: FieldNames, encoding: str | None = None) -> Iterator[Record]:
    """A JSON array of objects; records numbered from 1 (a JSON value has no useful lines)."""
    try:
        raw = _read_text(path, encoding)
        items = json.loads(raw)
    except json.JSONDecodeError as e:
        problem = f"malformed JSON: {e.msg} (column {e.colno})"
        raise DataFormatError(path, e.lineno, problem) from None
    if not isinstance(items, list):
        raise DataFormatError(path, None, f"expected a JSON array, found {json_type(items)}")
    for n, obj in enumerate(items, start=1):
        if not isinstance(obj, dict):
            raise DataFormatError(path, n, f"array item is {json_type(obj)}, expected an object")
        if "\\ud" in raw.lower():
            whole_characters(path, n, obj)
        yield record_from_mapping(path, n, obj, fields)


#: A file that is not UTF-8: what to do.
_NAME_IT = "UTF-8 (a file in another charset is read with encoding=NAME)"


def _read_text(path: Path, encoding: str | None = None) -> str:
    """A whole file as strict UTF-8 text (a byte-order mark dropped), or in ``encoding``,
    plain or gzipped."""
    name = encoding or "utf-8-sig"
    try:
        with gzip.open(path, "rb") if is_gzipped(path) else open(path, "rb") as f:
            return f.read().decode(name)
    except UnicodeDecodeError as e:
        problem = f"invalid {encoding or _NAME_IT} at byte offset {e.start}"
        raise DataFormatError(path, None, problem, settings=("encoding",)) from None
    except (OSError, EOFError, zlib.error) as e:
        raise DataFormatError(path, None, f"cannot read: {e}") from None


def _csv(path: Path, fields: FieldNames, encoding: str | None = None) -> Iterator[Record]:
    """A CSV file with a header row; each later row is a record under the header's names."""
    csv.field_size_limit(2**31 - 1)  # documents are longer than csv's 128 KiB default
    opener = gzip.open if is_gzipped(path) else open
    try:  # UTF-8 (a byte-order mark dropped) or ``encoding``
        with opener(path, "rt", encoding=encoding or "utf-8-sig", newline="") as f:
            yield from _under_header(path, _csv_rows(csv.reader(f)), fields, "columns")
    except UnicodeDecodeError as e:
        problem = f"invalid {encoding or _NAME_IT}: {e.reason}"
        raise DataFormatError(path, None, problem, settings=("encoding",)) from None
    except csv.Error as e:
        raise DataFormatError(path, None, f"malformed CSV: {e}") from None
    except (OSError, EOFError) as e:
        raise DataFormatError(path, None, f"cannot read: {e}") from None


def _csv_rows(reader) -> Iterator[tuple[int, list[str]]]:
    """``(line the row starts on, cells)`` for each non-blank row (a quoted cell may span
    lines, so :attr:`csv.reader.line_num` after the previous row tells where one starts)."""
    start = 1
    for row in reader:
        if any(cell.strip() for cell in row):
            yield start, row
        start = reader.line_num + 1


def _under_header(path: Path, rows, fields: FieldNames, columns: str) -> Iterator[Record]:
    """``(line, cells)`` rows, the first a header: each later row a record under its names
    (``columns``: what the error for a row of another length calls them)."""
    header: list[str] | None = None
    for line, row in rows:
        if header is None:
            header = _header(path, line, row)
            continue
        if len(row) != len(header):
            raise DataFormatError(path, line, f"{len(row)} {columns}, the header has {len(header)}")
        record = dict(zip(header, row, strict=True))
        yield record_from_mapping(path, line, record, fields, cells=True)


def _header(path: Path, line: int, row: list[str]) -> list[str]:
    names = [cell.strip() for cell in row]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise DataFormatError(path, line, f"header names {', '.join(repeated)} more than once")
    return names


def _tsv(path: Path, fields: FieldNames, encoding: str | None = None) -> Iterator[Record]:
    """A TSV file: named columns under a header row, else positional (id, [title,] text)."""
    lines = iter_lines(path, encoding)
    first = next(lines, None)
    if first is None:
        return
    lineno, line = first
    names = [f.strip() for f in split_tsv(line)]
    lowered = [n.lower() for n in names]
    positional_header = (
        len(names) in (2, 3) and lowered[0] in TSV_ID_HEADERS and lowered[-1] in TSV_TEXT_HEADERS
    )
    named_header = fields.named or (
        any(n in DEFAULT_ID_FIELDS for n in names) and any(n in DEFAULT_TEXT_FIELDS for n in names)
    )
    # "id<TAB>title<TAB>text" reads the same either way; "_id<TAB>url<TAB>text" must be named.
    plain_layout = positional_header and (len(names) == 2 or lowered[1] == "title")
    if named_header and not (plain_layout and not fields.named):
        rows = ((n, split_tsv(text)) for n, text in itertools.chain([first], lines))
        yield from _under_header(path, rows, fields, "tab-separated columns")
    elif positional_header:
        yield from _tsv_positional(path, len(names), lineno, lines)
    else:
        yield from _tsv_positional(path, 0, 0, itertools.chain([first], lines))


def _tsv_positional(path: Path, columns: int, first_line: int, lines) -> Iterator[Record]:
    """Headerless rows: the first fixes the column count (2: id, text; 3: id, title, text)."""
    for lineno, line in lines:
        row = split_tsv(line)
        if not columns:
            if len(row) not in (2, 3):
                hint = (
                    " (a .txt corpus file is read as TSV; put text files in a folder to index "
                    "each as one document)"
                    if path.name.lower().removesuffix(".gz").endswith(".txt")
                    else " (a TSV with a header row naming other columns: name them with "
                    "id_field and text_field)"
                )
                raise DataFormatError(
                    path,
                    lineno,
                    "expected 2 tab-separated columns (id, text) or 3 (id, title, text), "
                    f"found {len(row)}{hint}",
                    settings=("id_field", "text_field"),
                )
            columns, first_line = len(row), lineno
        elif len(row) != columns:
            names = "id, text" if columns == 2 else "id, title, text"
            raise DataFormatError(
                path,
                lineno,
                f"expected {columns} tab-separated columns ({names}) as on line {first_line}, "
                f"found {len(row)}",
            )
        doc_id = check_id(path, lineno, row[0], "id")
        title, text = ("", row[1]) if columns == 2 else (row[1], row[2])
        yield Record(str(path), lineno, doc_id, "id", title, text)


def _parquet(path: Path, fields: FieldNames) -> Iterator[Record]:
    import pyarrow as pa  # loads numpy (~0.2 s): dotcat.data is on the CLI's path before torch
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=_BATCH)
    except (OSError, pa.ArrowException) as e:
        raise DataFormatError(path, None, f"cannot read Parquet: {e}") from None
    yield from _table_records(str(path), batches, fields)


def _table_records(where: str, batches, fields: FieldNames) -> Iterator[Record]:
    """Records from Arrow record batches (Parquet, DataFrame), rows numbered from 1."""
    rows = (obj for batch in batches for obj in batch.to_pylist())
    for row, obj in enumerate(rows, start=1):
        yield record_from_mapping(where, row, obj, fields)


# -- Python objects ----------------------------------------------------------------------


def is_python_source(source: object) -> bool:
    """Whether ``source`` is a Python collection of documents rather than a path."""
    if isinstance(source, (str, Path)):
        return False
    return isinstance(source, (list, tuple)) or _is_dataframe(source) or _is_dataset(source)


def python_source_name(source: object) -> str:
    """How errors name a Python source: ``<list>``, ``<DataFrame>``, ``<Dataset>``."""
    return f"<{type(source).__name__}>"


def iter_python_records(source: object, fields: FieldNames = FieldNames()) -> Iterator[Record]:
    """Records from a list of strings or dicts, a pandas DataFrame or a datasets.Dataset.

    Raises:
        DataFormatError: an item of another type (named by its number, from 1) or a record
            without the wanted fields.
    """
    where = python_source_name(source)
    if _is_dataframe(source):
        import pyarrow as pa  # loads numpy (~0.2 s): dotcat.data is on the CLI's path before torch

        table = pa.Table.from_pandas(source, preserve_index=False)
        yield from _table_records(where, table.to_batches(max_chunksize=_BATCH), fields)
    elif _is_dataset(source):
        yield from _dataset_records(where, source, fields)
    else:
        yield from _list_records(where, source, fields)


def _list_records(where: str, items: Sequence[Any], fields: FieldNames) -> Iterator[Record]:
    kind = None
    for n, item in enumerate(items, start=1):
        this = "string" if isinstance(item, str) else "dict" if isinstance(item, Mapping) else None
        if this is None or (kind is not None and this != kind):
            expected = f"{kind}s" if kind else "strings or dicts"
            raise DataFormatError(
                where, n, f"item is {type(item).__name__}, expected {expected} (all alike)"
            )
        kind = this
        if this == "string":
            yield Record(where, n, str(n - 1), "position", "", item)
        else:
            yield record_from_mapping(where, n, item, fields)


def _dataset_records(where: str, dataset: Any, fields: FieldNames) -> Iterator[Record]:
    row = 0
    for batch in dataset.iter(batch_size=_BATCH):
        names = list(batch)
        for values in zip(*(batch[name] for name in names), strict=True):
            row += 1
            yield record_from_mapping(where, row, dict(zip(names, values, strict=True)), fields)


def _is_dataframe(source: object) -> bool:
    """A pandas DataFrame (pandas need not be imported: a DataFrame means it was)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(source, pandas.DataFrame)


def _is_dataset(source: object) -> bool:
    """A ``datasets.Dataset`` (the same reasoning)."""
    datasets = sys.modules.get("datasets")
    return datasets is not None and isinstance(source, datasets.Dataset)
