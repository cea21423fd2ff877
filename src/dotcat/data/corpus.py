"""Corpora: BEIR directories, JSON Lines and TSV files (optionally gzipped), streamed.

Formats (see :func:`iter_corpus`):

- BEIR directory: ``corpus.jsonl`` or ``corpus.jsonl.gz`` with ``_id``, ``title``, ``text``
  (Thakur et al., 2021, "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of
  Information Retrieval Models").
- JSON Lines: one object per line with ``_id`` or ``id``, optional ``title``, and ``text`` or
  ``contents`` (Pyserini's JsonCollection field name).
- TSV: ``id<TAB>text`` or ``id<TAB>title<TAB>text`` (MS MARCO's ``collection.tsv`` is the
  first), every line with the same number of columns, an optional header line.

:func:`iter_corpus` streams :class:`Document` objects; :func:`load_corpus` streams them once
into an Arrow file through :meth:`datasets.Dataset.from_generator` and returns the
memory-mapped :class:`datasets.Dataset`, so a corpus larger than RAM can be indexed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock

from dotcat.cache import cache_root
from dotcat.data._io import (
    check_id,
    detect_format,
    find_one,
    get_json_id,
    get_json_text,
    iter_lines,
    parse_json_object,
    require_file,
    split_tsv,
)
from dotcat.errors import DataFormatError, DotcatError
from dotcat.progress import progress_bar

if TYPE_CHECKING:
    import datasets

logger = logging.getLogger(__name__)

#: Names looked for in a BEIR directory, in this order.
CORPUS_FILE_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
#: Bump when the reader's output for the same file could change: old cache entries then miss.
CACHE_FORMAT_VERSION = 1

_summarised: set[Path] = set()  # cache entries whose counts this process has logged
_DUPLICATES_NAMED = 5  # how many duplicate ids an error message lists
_EMPTY_LOGGED = 5  # how many skipped/title-only documents are logged one by one
_TSV_ID_HEADERS = {"id", "_id", "docid", "doc_id", "doc-id", "pid", "corpus-id"}
_TSV_TEXT_HEADERS = {"text", "contents", "passage", "body"}


@dataclass(frozen=True)
class Document:
    """One corpus document. ``title`` may be empty; ``text`` is empty for a title-only one.

    Consumers index ``title + " " + text`` (as Pyserini's BEIR flat indexes and BEIR's own
    dense evaluation do), so a document without text is indexed on its title.
    """

    id: str
    title: str
    text: str


@dataclass
class CorpusStats:
    """Counts from one pass over a corpus, filled in by :func:`iter_corpus`/:func:`load_corpus`.

    Pass an instance as ``stats=`` and read it once iteration has finished (or, for
    :func:`load_corpus`, once it has returned; a cached corpus reports the counts recorded
    when it was built).

    Attributes:
        path: the corpus file read.
        records: non-blank lines holding a record (TSV header excluded).
        documents: documents produced, ``records - skipped_empty``.
        title_only: documents with an empty text, indexed on their title alone.
        skipped_empty: records with neither title nor text, skipped (with a warning).
    """

    path: str = ""
    records: int = 0
    documents: int = 0
    title_only: int = 0
    skipped_empty: int = 0


def document_fields(doc: object, n: int) -> tuple[str, str, str]:
    """``(id, title, text)`` of a document given as a mapping (``id``/``_id``) or an object.

    Args:
        doc: a dict-like record or an object with ``id``, ``title``, ``text`` attributes.
        n: its 0-based position, named in the error when it has no id.
    """
    if isinstance(doc, Mapping):
        doc_id = doc.get("id", doc.get("_id"))
        title, text = doc.get("title"), doc.get("text")
    else:
        doc_id = getattr(doc, "id", None)
        title, text = getattr(doc, "title", None), getattr(doc, "text", None)
    if doc_id is None:
        raise DotcatError(f"corpus document #{n + 1} has no id")
    return str(doc_id), title or "", text or ""


def find_corpus_file(path: str | Path) -> Path:
    """The corpus file of ``path``: a BEIR directory's ``corpus.jsonl[.gz]``, or a file itself.

    Raises:
        DataFormatError: ``path`` does not exist, or a directory holds no corpus file (or both
            the plain and the gzipped one).
    """
    p = Path(path)
    if p.is_dir():
        return find_one(p, CORPUS_FILE_NAMES, "corpus")
    return require_file(p)


def _iter_jsonl_records(file: Path) -> Iterator[tuple[int, str, str, str, str]]:
    """``(line, id, id_field, title, text)`` for each JSON Lines record, validated."""
    for lineno, line in iter_lines(file):
        obj = parse_json_object(file, lineno, line)
        doc_id, id_field = get_json_id(file, lineno, obj)
        text = get_json_text(file, lineno, obj, ("text", "contents"))
        if text is None:
            raise DataFormatError(
                file, lineno, "missing field (expected 'text' or 'contents')", "text"
            )
        title = get_json_text(file, lineno, obj, ("title",)) or ""
        yield lineno, doc_id, id_field, title, text


def _iter_tsv_records(file: Path) -> Iterator[tuple[int, str, str, str, str]]:
    """``(line, id, "id", title, text)`` for each TSV record, validated.

    The first record fixes the column count (2: id, text; 3: id, title, text). A first line
    whose first column is an id header (``id``, ``docid``, ...) and last a text header
    (``text``, ``contents``, ...) is a header and skipped.
    """
    columns = 0
    first_line = 0
    for lineno, line in iter_lines(file):
        fields = split_tsv(line)
        if not columns:
            lowered = [f.strip().lower() for f in fields]
            if (
                len(fields) in (2, 3)
                and lowered[0] in _TSV_ID_HEADERS
                and lowered[-1] in _TSV_TEXT_HEADERS
            ):
                logger.debug("%s:%d: skipping TSV header %r", file, lineno, line)
                columns, first_line = len(fields), lineno
                continue
            if len(fields) not in (2, 3):
                raise DataFormatError(
                    file,
                    lineno,
                    f"expected 2 tab-separated columns (id, text) or 3 (id, title, text), "
                    f"found {len(fields)}",
                )
            columns, first_line = len(fields), lineno
        elif len(fields) != columns:
            names = "id, text" if columns == 2 else "id, title, text"
            raise DataFormatError(
                file,
                lineno,
                f"expected {columns} tab-separated columns ({names}) as on line {first_line}, "
                f"found {len(fields)}",
            )
        doc_id = check_id(file, lineno, fields[0], "id")
        title, text = ("", fields[1]) if columns == 2 else (fields[1], fields[2])
        yield lineno, doc_id, "id", title, text


def _iter_records(file: Path) -> Iterator[tuple[int, str, str, str, str]]:
    if detect_format(file) == "jsonl":
        return _iter_jsonl_records(file)
    return _iter_tsv_records(file)


def _duplicate_error(
    file: Path,
    lineno: int,
    doc_id: str,
    id_field: str,
    seen: set[str],
    rest: Iterator[tuple[int, str, str, str, str]],
) -> DataFormatError:
    """Build the duplicate-id error: scan the rest of the file to name the first few repeats.

    Only ids are collected from the rest of the file; a later format error just ends the scan
    (the duplicate is reported first). A second, partial pass finds where the first repeated
    id first appeared, so that memory stays at one set of ids.
    """
    repeated: dict[str, None] = {doc_id: None}
    try:
        for _, other, *_ in rest:
            if other in seen:
                repeated[other] = None
            else:
                seen.add(other)
    except DataFormatError:
        pass
    first_at = next((line for line, other, *_ in _iter_records(file) if other == doc_id), None)
    problem = f"duplicate id {doc_id!r} (first at line {first_at})"
    if len(repeated) > 1:
        named = ", ".join(repr(i) for i in list(repeated)[:_DUPLICATES_NAMED])
        more = len(repeated) - _DUPLICATES_NAMED
        problem += f"; {len(repeated)} ids occur more than once: {named}"
        if more > 0:
            problem += f" and {more} more"
    return DataFormatError(file, lineno, problem, id_field)


def iter_corpus(path: str | Path, stats: CorpusStats | None = None) -> Iterator[Document]:
    """Stream the documents of a corpus (BEIR directory, JSON Lines or TSV, optionally .gz).

    Documents come in file order. A record with an empty (or blank) text but a title is kept
    and indexed on its title; one with neither is skipped; both are counted in ``stats`` and
    summarised in one warning at the end. Blank lines are ignored.

    Args:
        path: a BEIR directory or a corpus file (see :func:`find_corpus_file`).
        stats: if given, reset and filled in as the corpus is read.

    Raises:
        DataFormatError: on the first bad record (malformed JSON, not an object, missing or
            duplicate id, missing text field, wrong TSV column count, invalid UTF-8, corrupt
            gzip), naming the file and line. Documents before it have already been yielded.

    Memory: one set of the ids seen (needed to detect duplicates), nothing else.
    """
    file = find_corpus_file(path)
    if stats is None:
        stats = CorpusStats()
    for field in dataclasses.fields(CorpusStats):
        setattr(stats, field.name, field.default)
    stats.path = str(file)
    seen: set[str] = set()
    first_skipped: int | None = None
    records = _iter_records(file)
    for lineno, doc_id, id_field, title, text in records:
        stats.records += 1
        if doc_id in seen:
            raise _duplicate_error(file, lineno, doc_id, id_field, seen, records)
        seen.add(doc_id)
        if not text.strip():
            if not title.strip():
                stats.skipped_empty += 1
                first_skipped = first_skipped or lineno
                if stats.skipped_empty <= _EMPTY_LOGGED:
                    logger.debug(
                        "%s:%d: document %r has no title and no text", file, lineno, doc_id
                    )
                continue
            stats.title_only += 1
            if stats.title_only <= _EMPTY_LOGGED:
                logger.debug(
                    "%s:%d: document %r has no text, indexed on title", file, lineno, doc_id
                )
        stats.documents += 1
        yield Document(doc_id, title, text)
    _log_summary(stats, first_skipped)


def _log_summary(stats: CorpusStats, first_skipped: int | None = None) -> None:
    logger.info("%s: %d documents", stats.path, stats.documents)
    if stats.title_only:
        logger.warning(
            "%s: %d document(s) have no text and are indexed on their title only",
            stats.path,
            stats.title_only,
        )
    if stats.skipped_empty:
        first = f" (first at line {first_skipped})" if first_skipped else ""
        logger.warning(
            "%s: skipped %d record(s) with neither title nor text%s",
            stats.path,
            stats.skipped_empty,
            first,
        )


def default_cache_dir() -> Path:
    """Where :func:`load_corpus` keeps Arrow copies: ``datasets/`` under dotcat's cache
    (``$DOTCAT_CACHE``, :func:`dotcat.cache.cache_root`)."""
    return cache_root() / "datasets"


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def _find_cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of type ``kind`` in ``exc``'s cause/context chain (datasets wraps
    errors raised inside a generator in a ``DatasetGenerationError``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class _CacheMiss(Exception):
    """Raised by the placeholder generator if datasets wants to rebuild a cached entry."""


def _features() -> datasets.Features:
    import datasets  # ~1 s to import: dotcat.data is on the CLI's path before torch

    return datasets.Features({name: datasets.Value("string") for name in ("id", "title", "text")})


def _from_generator(generator, entry: Path, fingerprint: str) -> datasets.Dataset:
    """``Dataset.from_generator`` without datasets' own "Generating train split" bar (dotcat
    shows its own, which ``-q`` silences); datasets' setting is restored afterwards."""
    import datasets  # ~1 s to import: dotcat.data is on the CLI's path before torch

    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        return datasets.Dataset.from_generator(
            generator,
            features=_features(),
            cache_dir=str(entry / "arrow"),
            fingerprint=fingerprint,
            keep_in_memory=False,
        )
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()


def _write_json_atomically(path: Path, value: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_corpus(
    path: str | Path,
    cache_dir: str | Path | None = None,
    stats: CorpusStats | None = None,
) -> datasets.Dataset:
    """Load a corpus as a memory-mapped Arrow :class:`datasets.Dataset` (columns id, title, text).

    The first call streams :func:`iter_corpus` through :meth:`datasets.Dataset.from_generator`
    into an Arrow file under ``cache_dir`` (default :func:`default_cache_dir`); the dataset is
    memory-mapped from that file, so the corpus never has to fit in RAM. Later calls reuse the
    file while the corpus file's resolved path, size and modification time (ns) are unchanged;
    an edited file is read again, and the stale entry for the same path is removed.

    A build writes ``stats.json`` into its cache entry last, as a completion marker: an entry
    without it (an interrupted or failed build) is deleted and rebuilt, never loaded.

    Args:
        path: a BEIR directory or a corpus file.
        cache_dir: the cache root; entries are ``<name>-<path hash>-<version hash>/``, with
            their lock files under ``.locks/``.
        stats: if given, filled in with the corpus counts (see :class:`CorpusStats`).

    Raises:
        DataFormatError: any problem :func:`iter_corpus` reports (unwrapped from datasets'
            own exception), or a corpus with no documents at all.
    """
    file = find_corpus_file(path).resolve()
    st = file.stat()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", file.name)[:60]
    path_key = _digest(str(file))
    version_key = _digest([CACHE_FORMAT_VERSION, st.st_size, st.st_mtime_ns])
    entry = root / f"{slug}-{path_key}-{version_key}"
    fingerprint = f"dotcat-corpus-{path_key}-{version_key}"
    result = stats if stats is not None else CorpusStats()

    (root / ".locks").mkdir(parents=True, exist_ok=True)
    # One builder per entry: several processes (say torchrun ranks) may load the same corpus.
    with FileLock(str(root / ".locks" / f"{entry.name}.lock")):
        cached = _load_cached(entry, fingerprint)
        if cached is not None:
            dataset, recorded = cached
            logger.info("corpus %s loaded from cache %s", file, entry)
            if entry not in _summarised:  # once per process (a command may load it twice)
                _log_summary(recorded)
        else:
            dataset, recorded = _build(file, st, entry, fingerprint)
            for stale in root.glob(f"{slug}-{path_key}-*"):
                if stale != entry:
                    logger.info("removing stale corpus cache %s", stale)
                    shutil.rmtree(stale, ignore_errors=True)
    _summarised.add(entry)
    for name, value in dataclasses.asdict(recorded).items():
        setattr(result, name, value)
    return dataset


def _load_cached(entry: Path, fingerprint: str) -> tuple[datasets.Dataset, CorpusStats] | None:
    """The completed cache entry's dataset and counts, or None (after deleting any leftovers)."""
    marker = entry / "stats.json"
    if marker.is_file():
        try:
            recorded = CorpusStats(**json.loads(marker.read_text(encoding="utf-8"))["stats"])
            return _from_generator(_cached_only, entry, fingerprint), recorded
        except Exception as e:  # noqa: BLE001 - any unreadable entry is simply rebuilt
            logger.warning("cache entry %s is unusable (%s); rebuilding it", entry, e)
    shutil.rmtree(entry, ignore_errors=True)  # leftovers of an interrupted build
    return None


def _build(
    file: Path, st: os.stat_result, entry: Path, fingerprint: str
) -> tuple[datasets.Dataset, CorpusStats]:
    """Stream ``file`` into a new cache entry; on any failure delete the entry and re-raise
    (a :class:`DataFormatError` unwrapped from datasets' ``DatasetGenerationError``)."""
    entry.mkdir(parents=True, exist_ok=True)
    build_stats = CorpusStats()

    def generate() -> Iterator[dict[str, str]]:
        with progress_bar(desc=f"reading {file.name}", unit="doc") as bar:
            for doc in iter_corpus(file, stats=build_stats):
                yield {"id": doc.id, "title": doc.title, "text": doc.text}
                bar.update()
        if build_stats.documents == 0:
            raise DataFormatError(
                file,
                None,
                f"no documents ({build_stats.records} records, "
                f"{build_stats.skipped_empty} without title or text)",
            )

    logger.info("reading corpus %s into %s", file, entry)
    try:
        dataset = _from_generator(generate, entry, fingerprint)
        now = file.stat()
        if (now.st_size, now.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            # Not marked complete: the next load reads the file again.
            logger.warning("%s changed while it was being read; it will be read again", file)
            return dataset, build_stats
        record = {
            "source": str(file),
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "format_version": CACHE_FORMAT_VERSION,
            "stats": dataclasses.asdict(build_stats),
        }
        _write_json_atomically(entry / "stats.json", record)
    except BaseException as e:
        shutil.rmtree(entry, ignore_errors=True)
        cause = _find_cause(e, DataFormatError)
        if cause is not None and cause is not e:
            raise cause from None
        raise
    return dataset, build_stats


def _cached_only() -> Iterator[dict[str, str]]:
    """Placeholder generator for a cache hit: datasets must not call it."""
    raise _CacheMiss("the cached Arrow file is missing")
    yield {}  # pragma: no cover - makes this a generator


def iter_row_batches(
    dataset: datasets.Dataset, start: int = 0, stop: int | None = None, batch_size: int = 1000
) -> Iterator[tuple[int, dict[str, list[str]]]]:
    """Rows ``[start, stop)`` of a corpus from :func:`load_corpus`, read sequentially without
    memory-mapping: ``(position of the first row, {"id": [...], "title": [...], "text": [...]})``.

    ``Dataset[...]`` reads through a memory map, and every page touched stays counted in the
    process's resident memory until the kernel needs it back: indexing a corpus of millions
    that way grows RSS with the corpus. Streaming the Arrow file with plain reads keeps
    memory at a batch, whatever the corpus size.
    """
    import pyarrow as pa  # loads numpy (~0.2 s): dotcat.data is on the CLI's path before torch

    stop = len(dataset) if stop is None else min(stop, len(dataset))
    if dataset._indices is not None:  # a selection or shuffle: rows are not in file order
        for begin in range(start, stop, batch_size):
            rows = dataset[begin : min(stop, begin + batch_size)]
            yield begin, {k: rows[k] for k in ("id", "title", "text")}
        return
    position = 0
    pending: list = []
    pending_start = start
    for cache in dataset.cache_files:
        with pa.OSFile(cache["filename"]) as source:
            for batch in pa.ipc.open_stream(source):
                first, position = position, position + batch.num_rows
                if position <= start:
                    continue
                if first >= stop:
                    break
                pending.append(
                    batch.slice(max(0, start - first), min(stop, position) - max(first, start))
                )
                if sum(b.num_rows for b in pending) >= batch_size:
                    table = pa.Table.from_batches(pending)
                    yield (
                        pending_start,
                        {k: table.column(k).to_pylist() for k in ("id", "title", "text")},
                    )
                    pending_start += table.num_rows
                    pending = []
    if pending:
        table = pa.Table.from_batches(pending)
        yield pending_start, {k: table.column(k).to_pylist() for k in ("id", "title", "text")}
