"""Corpora: documents streamed from any source, and cached as memory-mapped Arrow.

Sources (:mod:`dotcat.data.sources`): a BEIR directory (``corpus.jsonl[.gz]`` with ``_id``,
``title``, ``text``; Thakur et al., 2021, "BEIR: A Heterogeneous Benchmark for Zero-shot
Evaluation of Information Retrieval Models"), a corpus file (JSON Lines, JSON, CSV, TSV,
Parquet; :mod:`dotcat.data.records`), a folder of files (text, Markdown, reStructuredText,
HTML, PDF and record files; :mod:`dotcat.data.extract`), or documents in Python (a list of
strings or dicts, a pandas DataFrame, a ``datasets.Dataset``). :class:`CorpusOptions` names
the record fields and selects a folder's files.

:func:`iter_corpus` streams :class:`Document` objects; :func:`load_corpus` streams them once
into an Arrow file through :meth:`datasets.Dataset.from_generator` and returns the
memory-mapped :class:`datasets.Dataset`, so a corpus larger than RAM can be indexed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from filelock import FileLock

from dotcat.cache import CACHE_ENV, cache_root
from dotcat.data._io import find_one, require_file
from dotcat.data.catalog import resolve_data_path
from dotcat.data.index_source import INDEX_DOCSTORE, is_index_dir
from dotcat.data.metadata import WRITTEN, Written
from dotcat.data.records import Record
from dotcat.data.sources import (
    CORPUS_FILE_NAMES,
    CorpusOptions,
    CorpusSource,
    CorpusStats,
    FolderSource,
    PythonSource,
    Source,
    named_first,
    open_source,
)
from dotcat.errors import DataFormatError, DotcatError
from dotcat.files import causes, write_json, writing
from dotcat.progress import progress_bar
from dotcat.reprs import short_repr

if TYPE_CHECKING:
    import datasets

logger = logging.getLogger(__name__)

__all__ = ["CORPUS_FILE_NAMES", "CorpusOptions", "CorpusStats", "Document", "iter_corpus",
           "load_corpus"]  # fmt: skip

#: Bump when the reader's output for the same file could change: old cache entries then miss.
CACHE_FORMAT_VERSION = 7
#: The Arrow file's columns: the fields are one JSON object a document ('' for none).
COLUMNS = ("id", "title", "text", "fields")
#: What to do when the cache's disk is full (it can live anywhere).
CACHE_ADVICE = f"free space, or set {CACHE_ENV} to a folder on a disk with room"

_summarised: set[Path] = set()  # cache entries whose counts this process has logged
_DUPLICATES_NAMED = 5  # how many duplicate ids an error message lists
_EMPTY_LOGGED = 5  # how many skipped/title-only documents are logged one by one


@dataclass(frozen=True)
class Document:
    """One corpus document: its id, title (may be empty) and whole text (empty for a
    title-only one), and its other fields (:mod:`dotcat.data.metadata`; None: none).
    Nothing is cut here: long documents keep every word.

    Consumers index ``title + " " + text`` (as Pyserini's BEIR flat indexes and BEIR's own
    dense evaluation do), so a document without text is indexed on its title; the fields
    are metadata, to filter by (:mod:`dotcat.search.filters`), never read by the models
    (nor compared: two documents are equal when their id, title and text are).
    """

    id: str
    title: str
    text: str
    fields: dict[str, Any] | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        """The id, the title and the text's first words (:func:`dotcat.reprs.preview`)."""
        fields = {"id": self.id, "title": self.title, "text": self.text}
        return short_repr("Document", fields, texts=("title", "text"))


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


def iter_document_fields(
    corpus: Iterable[Any], batch_size: int = 1024
) -> Iterator[tuple[str, str, str]]:
    """``(id, title, text)`` of each document of ``corpus``, in order: a ``datasets.Dataset``
    with ``id``, ``title`` (optional) and ``text`` columns, read in batches of ``batch_size``,
    or an iterable of documents (:func:`document_fields`)."""
    column_names = getattr(corpus, "column_names", None)
    if column_names is not None and hasattr(corpus, "iter"):  # datasets.Dataset
        if "id" not in column_names or "text" not in column_names:
            raise DotcatError(f"corpus dataset needs columns id and text, has {column_names}")
        for batch in corpus.iter(batch_size=batch_size):
            titles = batch["title"] if "title" in batch else [""] * len(batch["id"])
            for doc_id, title, text in zip(batch["id"], titles, batch["text"], strict=True):
                yield str(doc_id), title or "", text or ""
        return
    for n, doc in enumerate(corpus):
        yield document_fields(doc, n)


def find_corpus_file(path: str | Path) -> Path:
    """The corpus file of ``path``: a BEIR directory's ``corpus.jsonl[.gz]``, a dotcat index's
    document store, or a file itself.

    For the commands that need a BEIR directory (training, experiments); indexing reads any
    source (:func:`dotcat.data.sources.open_source`).

    Raises:
        DataFormatError: ``path`` does not exist, or a directory holds no corpus file (or both
            the plain and the gzipped one).
    """
    p = resolve_data_path(path)
    if is_index_dir(p):  # a dotcat index: its document store
        return p / INDEX_DOCSTORE
    return find_one(p, CORPUS_FILE_NAMES, "corpus") if p.is_dir() else require_file(p)


def _location(record: Record, corpus: str) -> str:
    """``line 3`` within the corpus file, else ``path:3`` (or the path of a document file)."""
    if record.line is None:
        return record.path
    return f"line {record.line}" if record.path == corpus else f"{record.path}:{record.line}"


def _duplicate_error(
    source: Source, record: Record, seen: set[str], rest: Iterator[Record]
) -> DataFormatError:
    """Build the duplicate-id error: scan the rest of the source to name the first few repeats.

    Only ids are collected from the rest; a later format error just ends the scan (the
    duplicate is reported first). A second, partial pass finds where the first repeated id
    first appeared, so that memory stays at one set of ids.
    """
    repeated: dict[str, None] = {record.id: None}
    with contextlib.suppress(DataFormatError):
        for other in rest:
            if other.id in seen:
                repeated[other.id] = None
            else:
                seen.add(other.id)
    first = next((r for r in source.records(CorpusStats()) if r.id == record.id), None)
    where = "not found again" if first is None else _location(first, record.path)
    problem = f"duplicate id {record.id!r} (first at {where})"
    if len(repeated) > 1:
        named = named_first(map(repr, list(repeated)[:_DUPLICATES_NAMED]), len(repeated))
        problem += f"; {len(repeated)} ids occur more than once: {named}"
    return DataFormatError(record.path, record.line, problem, record.id_field)


def iter_corpus(
    path: CorpusSource, stats: CorpusStats | None = None, options: CorpusOptions | None = None
) -> Iterator[Document]:
    """Stream the documents of a corpus source (see :mod:`dotcat.data.sources`).

    Documents come in source order (a folder's in sorted path order). A record with an empty
    (or blank) text but a title is kept and indexed on its title; one with neither is
    skipped; both are counted in ``stats`` and summarised in one warning at the end, as are a
    folder's unreadable files. Blank lines are ignored.

    Args:
        path: a BEIR directory, a corpus file, a folder of files, Python documents, or a
            source from :func:`dotcat.data.sources.open_source`.
        stats: if given, reset and filled in as the corpus is read.
        options: record field names and a folder's file selection (:class:`CorpusOptions`).

    Raises:
        DataFormatError: on the first bad record (malformed JSON, not an object, missing or
            duplicate id, missing text field, wrong TSV column count, invalid UTF-8, corrupt
            gzip), naming the file and line; with ``options.strict``, a folder's first file
            that cannot be read. Documents before it have already been yielded.

    Memory: one set of the ids seen (needed to detect duplicates), nothing else.
    """
    source = open_source(path, options)
    stats = stats if stats is not None else CorpusStats()
    stats.reset()
    stats.path, stats.kind = source.describe(), source.kind
    if isinstance(source, FolderSource):
        stats.other_kinds = dict(source.listing.other_kinds.most_common())
    seen: set[str] = set()
    first_skipped: str | None = None
    records = source.records(stats)
    for record in records:
        stats.records += 1
        if record.id in seen:
            raise _duplicate_error(source, record, seen, records)
        seen.add(record.id)
        if not record.text.strip():
            where = _location(record, stats.path)
            if not record.title.strip():
                stats.skipped_empty += 1
                first_skipped = first_skipped or where
                if stats.skipped_empty <= _EMPTY_LOGGED:
                    logger.debug("%s: document %r has no title and no text", where, record.id)
                continue
            stats.title_only += 1
            if stats.title_only <= _EMPTY_LOGGED:
                logger.debug("%s: document %r has no text, indexed on title", where, record.id)
        stats.documents += 1
        yield Document(record.id, record.title, record.text, record.fields or None)
    _log_summary(stats, first_skipped)


def _log_summary(stats: CorpusStats, first_skipped: str | None = None) -> None:
    logger.info("%s: %d documents", stats.path, stats.documents)
    if stats.title_only:
        logger.warning(
            "%s: %d document(s) have no text and are indexed on their title only",
            stats.path, stats.title_only,
        )  # fmt: skip
    if stats.skipped_empty:
        first = f" (first at {first_skipped})" if first_skipped else ""
        logger.warning(
            "%s: skipped %d record(s) with neither title nor text%s",
            stats.path, stats.skipped_empty, first,
        )  # fmt: skip
    if stats.unreadable:
        named = named_first(stats.unreadable_named, stats.unreadable)
        logger.warning(
            "%s: skipped %d of %d files that cannot be read: %s; strict=True stops at the first",
            stats.path, stats.unreadable, stats.files, named, extra={"settings": ("strict",)},
        )  # fmt: skip
    if stats.guessed:
        named = named_first(stats.guessed_named, stats.guessed)
        logger.warning(
            "%s: %d file(s) not in UTF-8 read as a guess (the field 'encoding' says in what): "
            "%s; where one reads wrong, name it: encoding=NAME, or for some files "
            "file_rules='GLOB:encoding=NAME' or a dotcat.toml rule",
            stats.path, stats.guessed, named, extra={"settings": ("encoding", "file_rules")},
        )  # fmt: skip


def default_cache_dir() -> Path:
    """Where :func:`load_corpus` keeps Arrow copies: ``datasets/`` under dotcat's cache
    (``$DOTCAT_CACHE``, :func:`dotcat.cache.cache_root`)."""
    return cache_root() / "datasets"


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


class _CacheMiss(Exception):
    """Raised by the placeholder generator if datasets wants to rebuild a cached entry."""


def _features() -> datasets.Features:
    import datasets  # ~1 s to import: dotcat.data is on the CLI's path before torch

    return datasets.Features({name: datasets.Value("string") for name in COLUMNS})


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


def load_corpus(
    path: CorpusSource,
    cache_dir: str | Path | None = None,
    stats: CorpusStats | None = None,
    options: CorpusOptions | None = None,
) -> datasets.Dataset:
    """Load a corpus as a memory-mapped Arrow :class:`datasets.Dataset` (columns id, title, text).

    The first call streams :func:`iter_corpus` through :meth:`datasets.Dataset.from_generator`
    into an Arrow file under ``cache_dir`` (default :func:`default_cache_dir`); the dataset is
    memory-mapped from that file, so the corpus never has to fit in RAM. Later calls reuse the
    file while the source is unchanged: a corpus file's resolved path, size and modification
    time (ns); a folder's every file's relative path, size and modification time; and the
    options. An edited source is read again, and the stale entry for the same path is removed.
    Documents given in Python are converted in memory, not cached.

    A build writes ``stats.json`` into its cache entry last, as a completion marker: an entry
    without it (an interrupted or failed build) is deleted and rebuilt, never loaded.

    Args:
        path: a BEIR directory, a corpus file, a folder of files, or Python documents
            (see :mod:`dotcat.data.sources`).
        cache_dir: the cache root; entries are ``<name>-<path hash>-<version hash>/``, with
            their lock files under ``.locks/``.
        stats: if given, filled in with the corpus counts (see :class:`CorpusStats`).
        options: record field names and a folder's file selection (:class:`CorpusOptions`).

    Raises:
        DataFormatError: any problem :func:`iter_corpus` reports (unwrapped from datasets'
            own exception), or a corpus with no documents at all.
    """
    source = open_source(path, options)
    result = stats if stats is not None else CorpusStats()
    if isinstance(source, PythonSource):
        dataset, recorded = _in_memory(source)
        result.reset(recorded)
        return dataset
    identity = source.identity()
    located = Path(identity.get("file") or identity["folder"])
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", located.name)[:60]
    path_key = _digest([str(located), identity.get("only", False)])
    version_key = _digest([CACHE_FORMAT_VERSION, identity])
    entry = root / f"{slug}-{path_key}-{version_key}"
    fingerprint = f"dotcat-corpus-{path_key}-{version_key}"

    (root / ".locks").mkdir(parents=True, exist_ok=True)
    # One builder per entry: several processes (say torchrun ranks) may load the same corpus.
    with FileLock(str(root / ".locks" / f"{entry.name}.lock")):
        cached = _load_cached(entry, fingerprint)
        if cached is not None:
            dataset, recorded = cached
            logger.info("corpus %s loaded from cache %s", source.describe(), entry)
            if entry not in _summarised:  # once per process (a command may load it twice)
                _log_summary(recorded)
        else:
            dataset, recorded = _build(source, identity, entry, fingerprint)
            for stale in root.glob(f"{slug}-{path_key}-*"):
                if stale != entry:
                    logger.info("removing stale corpus cache %s", stale)
                    shutil.rmtree(stale, ignore_errors=True)
    _summarised.add(entry)
    result.reset(recorded)
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


def _documents(source: Source, stats: CorpusStats) -> Iterator[dict[str, str]]:
    """The rows of the Arrow file, under a progress bar; refuses a source with no document."""
    with progress_bar(desc=f"reading {Path(source.describe()).name}", unit="doc") as bar:
        for doc in iter_corpus(source, stats=stats):
            yield {"id": doc.id, "title": doc.title, "text": doc.text,
                   "fields": fields_json(doc.fields)}  # fmt: skip
            bar.update()
    if stats.documents == 0:
        raise DataFormatError(source.describe(), None, _no_documents(stats))


def _no_documents(stats: CorpusStats) -> str:
    if stats.kind != "folder":
        return (
            f"no documents ({stats.records} records, {stats.skipped_empty} without title or text)"
        )
    return (
        f"no documents: {stats.files} files read, {stats.unreadable} unreadable"
        + (f" ({', '.join(stats.unreadable_named)})" if stats.unreadable_named else "")
        + f", {stats.skipped_empty} empty records"
    )


def _build(
    source: Source, identity: dict, entry: Path, fingerprint: str
) -> tuple[datasets.Dataset, CorpusStats]:
    """Stream ``source`` into a new cache entry; on any failure delete the entry and re-raise
    (a :class:`DataFormatError` unwrapped from datasets' ``DatasetGenerationError``)."""
    entry.mkdir(parents=True, exist_ok=True)
    build_stats = CorpusStats()
    logger.info("reading corpus %s into %s", source.describe(), entry)
    try:
        with writing(entry, advice=CACHE_ADVICE):
            dataset = _from_generator(lambda: _documents(source, build_stats), entry, fingerprint)
            if source.identity(again=True) != identity:
                # Not marked complete: the next load reads the source again.
                logger.warning(
                    "%s changed while it was being read; it will be read again", source.describe()
                )
                return dataset, build_stats
            record = {
                "source": source.describe(),
                "identity": identity,
                "format_version": CACHE_FORMAT_VERSION,
                "stats": dataclasses.asdict(build_stats),
            }
            write_json(entry / "stats.json", record, indent=1)
    except BaseException as e:
        shutil.rmtree(entry, ignore_errors=True)
        # datasets wraps an error raised inside a generator in a DatasetGenerationError
        cause = next((c for c in causes(e) if isinstance(c, DataFormatError)), None)
        if cause is not None and cause is not e:
            raise cause from None
        raise
    return dataset, build_stats


def _in_memory(source: PythonSource) -> tuple[datasets.Dataset, CorpusStats]:
    """Documents given in Python, validated, as an in-memory Arrow dataset."""
    import datasets  # ~1 s to import: dotcat.data is on the CLI's path before torch

    stats = CorpusStats()
    rows = list(_documents(source, stats))
    return datasets.Dataset.from_list(rows, features=_features()), stats


def _cached_only() -> NoReturn:
    """Placeholder generator for a cache hit: datasets must not call it."""
    raise _CacheMiss("the cached Arrow file is missing")


def fields_json(fields: Mapping[str, Any] | None) -> str:
    """A document's fields as the Arrow file holds them: one JSON object, '' for none; the
    text of its :class:`~dotcat.data.metadata.Written` numbers under ``WRITTEN``."""
    written = {k: v.text for k, v in (fields or {}).items() if isinstance(v, Written)}
    fields = {**fields, WRITTEN: written} if written else fields
    return json.dumps(fields, ensure_ascii=False) if fields else ""


def iter_row_batches(
    dataset: datasets.Dataset, start: int = 0, stop: int | None = None, batch_size: int = 1000
) -> Iterator[tuple[int, dict[str, list[str]]]]:
    """Rows ``[start, stop)`` of a corpus from :func:`load_corpus`, read sequentially without
    memory-mapping: ``(position of the first row, {"id": [...], "title": [...], "text": [...],
    "fields": [...]})`` (``fields``: JSON, :func:`fields_json`; empty for a dataset without
    that column).

    ``Dataset[...]`` reads through a memory map, and every page touched stays counted in the
    process's resident memory until the kernel needs it back: indexing a corpus of millions
    that way grows RSS with the corpus. Streaming the Arrow file with plain reads keeps
    memory at a batch, whatever the corpus size.
    """
    import pyarrow as pa  # loads numpy (~0.2 s): dotcat.data is on the CLI's path before torch

    stop = len(dataset) if stop is None else min(stop, len(dataset))
    names = [c for c in COLUMNS if c in dataset.column_names]
    # A selection or shuffle (rows not in file order), or a dataset held in memory (documents
    # given in Python): read by slices.
    if dataset._indices is not None or not dataset.cache_files:
        for begin in range(start, stop, batch_size):
            rows = dataset[begin : min(stop, begin + batch_size)]
            yield begin, _complete({k: rows[k] for k in names})
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
                    yield pending_start, _complete({k: table.column(k).to_pylist() for k in names})
                    pending_start, pending = pending_start + table.num_rows, []
    if pending:
        table = pa.Table.from_batches(pending)
        yield pending_start, _complete({k: table.column(k).to_pylist() for k in names})


def _complete(batch: dict[str, list]) -> dict[str, list]:
    """A batch with every column (a dataset made elsewhere may lack ``fields``)."""
    batch.setdefault("fields", [""] * len(batch["id"]))
    return batch
