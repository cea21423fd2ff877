"""Corpus sources: what a corpus argument names, and the records it holds, in a fixed order.

:func:`open_source` turns what a user passes into one of four sources, each yielding
:class:`~dotcat.data.records.Record` objects:

- :class:`FileSource`: a corpus file (JSON Lines, JSON, CSV, TSV, Parquet; .gz for the text
  ones), or a BEIR directory, whose ``corpus.jsonl[.gz]`` is that file. Ids are the records'.
- :class:`FolderSource`: any other directory, walked recursively in sorted order (path components
  compared as strings, so ``--shard I/N`` splits the same list on every machine). Each text
  (``.txt``, or no suffix where its first 8 KiB are not binary: ``README``), Markdown (``.md``),
  reStructuredText (``.rst``), HTML (``.html``, ``.htm``) or PDF file is one document
  (:mod:`dotcat.data.extract`) whose id is its path relative to the folder with ``/``
  separators; each record file (``.jsonl``, ``.ndjson``, ``.json``, ``.csv``, ``.tsv``,
  ``.parquet``) holds documents with ids ``<relative path>#<record id>``. Text kinds may be gzipped
  (``notes.md.gz``). Whitespace, ``%`` and ``#`` in a path are percent-encoded in its id (``my
  notes/a.md`` becomes ``my%20notes/a.md``): TREC runs separate their columns with whitespace, and
  ``#`` separates a record's id. Hidden files and folders (``.git``...) are skipped unless asked
  for; symbolic links to files are followed, to folders not (no cycles). A single document file
  (``report.pdf``) is a folder of one file, its name the id. A folder inside that holds a dotcat
  index (or an index's build) is never read as documents: an index kept inside its own corpus folder
  (``dotcat index docs docs/idx``) is skipped, and named in one warning. Files of other kinds
  (``.docx``, images) are not read: counted by kind and named in one warning (exclude patterns leave
  them out without it). The record field options (``id_field``...) given for a folder that holds no
  record file are refused: they would do nothing.
- :class:`~dotcat.data.index_source.IndexSource`: a dotcat index directory, whose document
  store holds every document it indexed (ids as indexed).
- :class:`PythonSource`: a list of strings (ids ``"0"``, ``"1"``, ...), a list of dicts, a
  pandas DataFrame or a ``datasets.Dataset`` (:func:`dotcat.data.records.iter_python_records`).

Every document keeps its fields beyond id, title and text (:mod:`dotcat.data.metadata`: record
columns, front matter, PDF and HTML metadata) and, from a folder, its file's own (``path``,
``folder``, ``extension``, ``size``, ``mtime``). A folder's record files may each name their
fields, and any file its encoding, in the folder's ``dotcat.toml`` or with ``--fields``
(:mod:`dotcat.data.rules`); text that is not UTF-8 is read in ``--encoding``, else in the
encoding detected (:mod:`dotcat.data.encodings`).

A file of a folder that cannot be read (empty, binary, text in no encoding tried, an encrypted
or corrupt PDF, a corrupt gzip or Parquet file), and whatever the walk cannot read
(:func:`dotcat.files.walk_tree`: a folder or file without permission, a path past PATH_MAX, a
loop of links or a broken one, a name that is not UTF-8, a FIFO, socket or device, never
opened) is skipped and counted in :class:`CorpusStats`;
:func:`dotcat.data.corpus.iter_corpus` names the first few in one summary line.
With ``strict`` the first one stops the read with a :class:`~dotcat.errors.DataFormatError`
naming it. A record file whose first record is not one (a pretty-printed settings ``.json``)
is unreadable too; one that holds records without the wanted field, or a bad record further
down, stops the read as a corpus file does (file, line, field): skipping a file of records, or
part of one, would lose documents with only a warning.

``--include``/``--exclude`` patterns (:class:`CorpusOptions`) are shell patterns
(:func:`fnmatch.fnmatchcase`): one without ``/`` matches a file's name (``*.md``), one with ``/``
its relative path, where ``*`` crosses folders (``notes/*.md`` matches ``notes/2024/a.md``; a
leading ``**/`` matches at any depth, none included). A file is read when it matches an include (if
any) and no exclude; a folder matching an exclude is not entered (``--exclude node_modules``).
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import gzip
import hashlib
import json
import logging
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dotcat.data._io import find_one, is_gzipped, require_file
from dotcat.data.catalog import resolve_data_path
from dotcat.data.encodings import NotDecodable, binary, check_encoding, decode
from dotcat.data.extract import TEXT_KINDS, Unreadable, check_html_support, extract
from dotcat.data.index_source import IndexSource, file_identity, is_index_dir
from dotcat.data.metadata import file_fields, merged
from dotcat.data.records import (
    FieldNames,
    Record,
    is_python_source,
    iter_file_records,
    iter_python_records,
    python_source_name,
)
from dotcat.data.rules import RULES_FILE, FileRule, Rules, pattern_matches
from dotcat.errors import DataFormatError, DotcatError, SettingError
from dotcat.files import Entry, entry_of, printable, walk_tree
from dotcat.options import Settings, setting

logger = logging.getLogger(__name__)

#: Names looked for in a BEIR directory, in this order.
CORPUS_FILE_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
#: Files of a folder read as one document each: suffix -> kind (see :mod:`dotcat.data.extract`).
DOCUMENT_SUFFIXES = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".rst": "rst",
                     ".html": "html", ".htm": "html", ".pdf": "pdf"}  # fmt: skip
#: Files of a folder read as records (see :mod:`dotcat.data.records`).
RECORD_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".parquet")
#: Kinds that may be gzipped (``.md.gz``): the text ones. PDF and Parquet compress themselves.
_GZIP_OK = (
    *(suffix for suffix, kind in DOCUMENT_SUFFIXES.items() if kind in TEXT_KINDS),
    *(suffix for suffix in RECORD_SUFFIXES if suffix != ".parquet"),
)
#: How many unreadable files the summary line names.
UNREADABLE_NAMED = 5
_ID_ESCAPES = re.compile(r"[\s%#]")

CorpusSource = Any  # a path (str or Path), or a list, DataFrame or datasets.Dataset


@dataclass
class CorpusStats:
    """Counts from one pass over a corpus, filled in by :func:`iter_corpus`/:func:`load_corpus`.

    Pass an instance as ``stats=`` and read it once iteration has finished (or, for
    :func:`load_corpus`, once it has returned; a cached corpus reports the counts recorded
    when it was built).

    Attributes:
        path: the corpus read (a file, a folder, or ``<list>`` and the like).
        kind: ``file``, ``folder``, ``index`` or ``python`` (:mod:`dotcat.data.sources`).
        records: records read (a folder's document files count one each).
        documents: documents produced, ``records - skipped_empty``.
        title_only: documents with an empty text, indexed on their title alone.
        skipped_empty: records with neither title nor text, skipped (with a warning).
        files: a folder's files read (or tried).
        unreadable: a folder's files skipped because they cannot be read.
        unreadable_named: the first few of those, as ``relative/path (reason)``.
        other_kinds: a folder's files of kinds not read, by suffix.
        guessed: a folder's text files not in UTF-8 read in a guessed encoding
            (:func:`dotcat.data.encodings.guess`).
        guessed_named: the first few of those, as ``relative/path (encoding)``, the unsure
            ones first (``relative/path (encoding, unsure)``).
        sha256: the content's fingerprint: a file's bytes; for a folder, its files' paths and
            bytes; for Python objects, the documents.
    """

    path: str = ""
    kind: str = ""
    records: int = 0
    documents: int = 0
    title_only: int = 0
    skipped_empty: int = 0
    files: int = 0
    unreadable: int = 0
    unreadable_named: list[str] = field(default_factory=list)
    other_kinds: dict[str, int] = field(default_factory=dict)
    guessed: int = 0
    guessed_named: list[str] = field(default_factory=list)
    sha256: str = ""

    def reset(self, to: CorpusStats | None = None) -> None:
        """Back to zero, for a new pass (or to a copy of ``to``'s counts)."""
        for name, value in dataclasses.asdict(to or CorpusStats()).items():
            setattr(self, name, value)


@dataclass(frozen=True, repr=False)
class CorpusOptions(Settings):
    """How to read a corpus source.

    Attributes:
        id_field, title_field, text_field: the record fields to read (JSON Lines, JSON, CSV,
            TSV with a header, Parquet, dicts, data frames); None: the defaults (``_id``/``id``,
            ``title``, ``text``/``contents``).
        include, exclude: shell patterns selecting a folder's files (module docstring).
        strict: stop at the first file of a folder that cannot be read (else skip it).
        hidden: also read hidden files and folders (names starting with ``.``).
        encoding: the encoding of text that is not UTF-8 (None: detected).
        file_rules: per-file rules, ``GLOB:key=value,...`` (``--fields``; :mod:`dotcat.data.rules`).
    """

    id_field: str | None = setting(
        None, help="The records' id field (JSONL, JSON, CSV, TSV, Parquet); default _id or id."
    )
    title_field: str | None = setting(None, help="The records' title field; default title.")
    text_field: str | None = setting(
        None, help="The records' text field; default text or contents."
    )
    include: tuple[str, ...] = setting(
        (),
        help="Only a folder's files matching this glob (repeat): *.md matches names, "
        "notes/*.md paths.",
        metavar="GLOB",
    )
    exclude: tuple[str, ...] = setting(
        (), help="Skip a folder's files and folders matching this glob (repeat).", metavar="GLOB"
    )
    strict: bool = setting(
        False,
        help="Stop at a folder's first file that cannot be read (default: skip it, and name "
        "the skipped ones in one warning).",
    )
    hidden: bool = setting(False, help="Also read hidden files and folders (.name).")
    encoding: str | None = setting(
        None,
        help="The encoding of text files that are not UTF-8 (e.g. latin-1; default: "
        "detected); UTF-8 files are read as UTF-8.",
    )
    file_rules: tuple[str, ...] = setting(
        (),
        help="Per-file fields and encoding, GLOB:key=value,... with keys id, title, text, "
        "encoding (repeat; e.g. 'faq.jsonl:id=key,title=question,text=answer'); a folder's "
        "dotcat.toml says the same.",
        metavar="GLOB:KEY=VALUE,...",
        flags=("--fields",),
    )

    def __post_init__(self) -> None:
        for name in ("include", "exclude", "file_rules"):  # lists from Python, tuples from the CLI
            value = getattr(self, name)
            patterns = (value,) if isinstance(value, str) else tuple(value)
            object.__setattr__(self, name, patterns)
            for pattern in patterns:
                if not pattern.strip():
                    raise DotcatError(f"--{name} {pattern!r}: an empty pattern")
        Rules.of(self.file_rules)  # each rule checked now, with the option named
        if self.encoding is not None:
            check_encoding(self.encoding)
        for name in ("id_field", "title_field", "text_field"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise DotcatError(f"--{name.replace('_', '-')} {value!r}: an empty field name")

    @property
    def fields(self) -> FieldNames:
        return FieldNames(self.id_field, self.title_field, self.text_field)

    def to_json(self) -> dict[str, Any]:
        """The options that differ from the defaults (for manifests, plans and cache keys)."""
        return {
            f.name: list(v) if isinstance(v, tuple) else v
            for f in fields(self)
            if (v := getattr(self, f.name)) != f.default
        }

    def rule_for(self, rel: str, rules: Rules | None = None) -> FileRule:
        """How to read one file: the first rule matching it (``rules``, else ``--fields``),
        its gaps filled in from these options."""
        rule = (rules or Rules.of(self.file_rules)).for_file(rel) or FileRule("*", origin="")
        return FileRule(
            rule.pattern, rule.id or self.id_field, rule.title or self.title_field,
            rule.text or self.text_field, rule.encoding, rule.origin,
        )  # fmt: skip

    def folder_options(self) -> list[str]:
        """The options given that only apply to a folder of files (their names)."""
        return [name for name in ("include", "exclude", "hidden") if getattr(self, name)]


def _names(rule: FileRule) -> FieldNames:
    return FieldNames(rule.id, rule.title, rule.text)


def path_id(rel: str) -> str:
    """A relative path as a document id: whitespace, ``%`` and ``#`` percent-encoded."""
    return _ID_ESCAPES.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), rel)


def file_kind(name: str) -> str | None:
    """What a folder reads a file name as: a document kind, ``records``, or None (not read)."""
    lowered = name.lower()
    suffix = os.path.splitext(lowered.removesuffix(".gz"))[1]
    if lowered.endswith(".gz") and suffix not in _GZIP_OK:
        return None
    return DOCUMENT_SUFFIXES.get(suffix) or ("records" if suffix in RECORD_SUFFIXES else None)


def plain_text(path: Path) -> str | None:
    """``text`` for a regular file without a suffix (``README``, ``NEWS.gz``) whose first 8 KiB
    are not binary (:func:`~dotcat.data.encodings.binary`), as grep reads it; else None."""
    name = path.name[:-3] if path.name.lower().endswith(".gz") else path.name
    if os.path.splitext(name)[1] or not path.is_file():
        return None
    opener = gzip.open if name != path.name else open
    with contextlib.suppress(OSError, EOFError, zlib.error), opener(path, "rb") as f:
        head = f.read(8192)
        return "text" if head and not binary(head) else None
    return None


def _stem(rel: str) -> str:
    """A file's name without its suffixes (``a/notes.md.gz`` -> ``notes``): the default title."""
    name = rel.rsplit("/", 1)[-1]
    return os.path.splitext(name[:-3] if name.lower().endswith(".gz") else name)[0]


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# -- sources -----------------------------------------------------------------------------


class FileSource:
    """One corpus file (a BEIR directory's ``corpus.jsonl[.gz]`` or a file given itself)."""

    kind = "file"

    def __init__(self, file: Path, options: CorpusOptions) -> None:
        self.file, self.options = file, options

    def describe(self) -> str:
        return str(self.file)

    def identity(self, again: bool = False) -> dict[str, Any]:
        """What the cached copy depends on: the file's real path, size and mtime, the options
        (``again``: for the folder source's sake; a file is looked at every time)."""
        return {**file_identity(self.file), "options": self.options.to_json()}

    def records(self, stats: CorpusStats) -> Iterator[Record]:
        rule = self.options.rule_for(self.file.name)
        encoding = rule.encoding or self.options.encoding
        yield from iter_file_records(self.file, _names(rule), encoding)
        stats.sha256 = _sha256_file(self.file)


@dataclass
class ListedFile:
    """A file of a folder to read: relative path (POSIX), real path, size, mtime, kind."""

    rel: str
    path: Path
    size: int
    mtime_ns: int
    kind: str


@dataclass
class Listing:
    """A folder's walk: the files to read in order, and what was left out."""

    files: list[ListedFile] = field(default_factory=list)
    problems: list[tuple[str, Path, str]] = field(default_factory=list)  # rel, path, reason
    other_kinds: Counter = field(default_factory=Counter)  # suffix -> files not read
    other_named: list[str] = field(default_factory=list)  # the first few of those
    excluded: Counter = field(default_factory=Counter)  # suffix -> files left out by patterns
    indexes: list[str] = field(default_factory=list)  # folders skipped: dotcat indexes


class FolderSource:
    """A folder of files, walked once when opened (see the module docstring); ``empty_ok``: a
    folder with no file to read is not refused (a sync empties the index it gave)."""

    kind = "folder"

    def __init__(
        self, root: Path, options: CorpusOptions, only: Path | None = None, empty_ok: bool = False
    ) -> None:
        self.root, self.options, self.only, self.empty_ok = root, options, only, empty_ok
        self.rules = Rules.of(options.file_rules, root if only is None else None)
        self.listing = self._walk()

    def describe(self) -> str:
        return str(self.only if self.only is not None else self.root)

    def _walk(self) -> Listing:
        if self.only is not None:
            listing = Listing()
            _list_file(listing, entry_of(self.only, self.only.name))
            _refuse_record_fields(self.only, listing, self.options)
            return listing
        listing = walk(self.root, self.options)
        if listing.files or not self.empty_ok:
            _check_listing(self.root, listing, self.options)
        _say_indexes_skipped(self.root, listing.indexes)
        _say_kinds_not_read(self.root, listing)
        for rule in self.rules.rules:  # a misspelt pattern is never silently nothing
            key = (str(self.root.resolve()), (rule.origin, rule.pattern))
            names = ((f.rel, f.rel.rsplit("/", 1)[-1]) for f in listing.files)
            if key not in _NAMED and not any(pattern_matches(*n, rule.pattern) for n in names):
                _NAMED.add(key)
                logger.warning("%s: the rule for %r matches no file in %s", *key[1], self.root)
        return listing

    def identity(self, again: bool = False) -> dict[str, Any]:
        """Every file's relative path, size and mtime as walked when opened, or walked
        ``again`` (to see whether the folder changed while it was read), and the options."""
        listing = self._walk() if again else self.listing
        rows = [(f.rel, f.size, f.mtime_ns) for f in listing.files]
        rows += [(rel, reason) for rel, _, reason in listing.problems]
        digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
        return {
            "folder": str(self.root.resolve()),
            "only": self.only is not None,
            "files": len(rows),
            "listing": digest,
            "options": self.options.to_json(),
            **({"rules": self.rules.to_json()} if self.rules.rules else {}),
        }

    def records(self, stats: CorpusStats) -> Iterator[Record]:
        """Every file's records in walk order; unreadable files counted (or fatal if strict).

        ``stats.sha256`` becomes the sha256 of the list of ``relative path<TAB>sha256 of the
        file's bytes`` lines: the folder's content, whatever the machine or the mtimes.
        """
        digest = hashlib.sha256()
        for rel, path, reason in self.listing.problems:  # (failed at stat: files too)
            stats.files += 1
            self._unreadable(stats, rel, path, reason)
        for listed in self.listing.files:
            stats.files += 1
            sha = "unreadable"
            rule = self.options.rule_for(listed.rel, self.rules)
            try:
                if listed.kind == "records":
                    sha, encoding, guess = _probe_records(
                        listed, rule.encoding, self.options.encoding
                    )
                    _note_guess(stats, listed.rel, encoding, guess)
                    yield from self._file_records(listed, rule, encoding)
                else:
                    data = _read_bytes(listed)
                    sha = hashlib.sha256(data).hexdigest()
                    record, guess = self._document(listed, _gunzip(listed, data), rule)
                    _note_guess(stats, listed.rel, record.fields.get("encoding"), guess)
                    yield record
            except Unreadable as e:
                self._unreadable(stats, listed.rel, listed.path, str(e))
            digest.update(f"{listed.rel}\t{sha}\n".encode())
        stats.sha256 = digest.hexdigest()

    def _document(self, listed: ListedFile, data: bytes, rule: FileRule) -> tuple[Record, str]:
        """A document file as one record (its title, text and fields, its file's fields), and
        how its encoding was known (:class:`dotcat.data.encodings.Decoded`)."""
        found = extract(data, listed.kind, _stem(listed.rel), self.options.encoding,
                        rule.encoding, str(listed.path))  # fmt: skip
        fields = merged(found.fields, file_fields(listed.rel, listed.size, listed.mtime_ns), True)
        record = Record(str(listed.path), None, path_id(listed.rel), "path", found.title,
                        found.text, fields)  # fmt: skip
        return record, found.guess

    def _file_records(
        self, listed: ListedFile, rule: FileRule, encoding: str | None
    ) -> Iterator[Record]:
        """A record file's records, ids prefixed with its path, its file's fields added. A
        file whose first record is not a record at all (a settings ``.json``, a CSV that is
        not) is unreadable; a record without the wanted field, or a bad record further down,
        stops the read."""
        prefix = path_id(listed.rel)
        own = file_fields(listed.rel, listed.size, listed.mtime_ns)
        if encoding is not None:
            own["encoding"] = encoding
        count = 0
        try:
            for record in iter_file_records(listed.path, _names(rule), encoding):
                count += 1
                fields = merged(record.fields or {}, own)
                yield record._replace(id=f"{prefix}#{record.id}", fields=fields)
        except DataFormatError as e:
            if count or e.field is not None:
                raise
            raise Unreadable(f"not records: {e.problem}") from None
        if not count:
            raise Unreadable("no records")

    def _unreadable(self, stats: CorpusStats, rel: str, path: Path, reason: str) -> None:
        if self.options.strict:
            raise DataFormatError(printable(path), None, f"cannot read: {reason} (strict)",
                                  settings=("strict",))  # fmt: skip
        stats.unreadable += 1
        if len(stats.unreadable_named) < UNREADABLE_NAMED:
            shown = rel if len(rel) <= 120 else f"{rel[:60]}...{rel[-40:]}"  # past PATH_MAX
            stats.unreadable_named.append(f"{shown} ({reason})")
        logger.debug("%s: skipped: %s", path, reason)


def _note_guess(stats: CorpusStats, rel: str, encoding: str | None, guess: str) -> None:
    """Count a file read in a guessed encoding; name the first few, the unsure ones first."""
    if not guess:
        return
    stats.guessed += 1
    named = stats.guessed_named
    if guess == "unsure":
        unsure = sum(entry.endswith(", unsure)") for entry in named)
        named.insert(unsure, f"{rel} ({encoding}, unsure)")
    else:
        named.append(f"{rel} ({encoding})")
    del named[UNREADABLE_NAMED:]


class PythonSource:
    """Documents given as a Python list, DataFrame or ``datasets.Dataset``."""

    kind = "python"

    def __init__(self, source: object, options: CorpusOptions) -> None:
        self.source, self.options = source, options

    def describe(self) -> str:
        return python_source_name(self.source)

    def identity(self, again: bool = False) -> None:
        """None: an object in memory is not cached on disk."""
        return None

    def records(self, stats: CorpusStats) -> Iterator[Record]:
        """The records; ``stats.sha256`` becomes the sha256 of their ids, titles and texts."""
        digest = hashlib.sha256()
        for record in iter_python_records(self.source, self.options.fields):
            digest.update(json.dumps([record.id, record.title, record.text]).encode() + b"\n")
            yield record
        stats.sha256 = digest.hexdigest()


Source = FileSource | FolderSource | PythonSource | IndexSource


def open_source(source: CorpusSource, options: CorpusOptions | None = None) -> Source:
    """What ``source`` is (see the module docstring); a folder is walked now.

    Raises:
        DataFormatError: a path that does not exist, a BEIR directory with both corpus files,
            a folder with no file to read or none matching ``include``, a dotcat index.
        DotcatError: folder options (``--include``...) with a corpus file or Python objects,
            or a folder with HTML files and no trafilatura.
    """
    options = options or CorpusOptions()
    if isinstance(source, (FileSource, FolderSource, PythonSource, IndexSource)):
        return source
    if is_python_source(source):
        _refuse_folder_options(options, python_source_name(source), "documents given in Python")
        return PythonSource(source, options)
    if not isinstance(source, (str, os.PathLike)):
        raise DotcatError(
            f"cannot read documents from a {type(source).__name__}: expected a path, a list of "
            "strings or dicts, a pandas DataFrame or a datasets.Dataset"
        )
    path = resolve_data_path(source)
    if path.is_dir():
        if is_index_dir(path):  # a dotcat index: the documents its store keeps
            _refuse_folder_options(options, path, "a dotcat index")
            return IndexSource(path, options)
        if any(os.path.isfile(path / name) for name in CORPUS_FILE_NAMES):
            _refuse_folder_options(options, path, "a BEIR directory")
            return FileSource(find_one(path, CORPUS_FILE_NAMES, "corpus"), options)
        if is_index_folder(path):
            raise DataFormatError(
                path, None, "a dotcat index's build folder (an interrupted `dotcat index`), not "
                "documents; give the folder or file it is built from"
            )  # fmt: skip
        return FolderSource(path, options)
    require_file(path)
    kind = file_kind(path.name)  # (a file without a suffix given alone: records, as before)
    if kind is not None and kind != "records":
        _refuse_folder_options(options, path, "one file")
        if kind == "html":
            check_html_support()
        return FolderSource(path.parent, options, only=path)
    _refuse_folder_options(options, path, "a corpus file")
    return FileSource(path, options)


def _refuse_folder_options(options: CorpusOptions, where: object, what: str) -> None:
    if given := options.folder_options():
        verb = "select" if len(given) > 1 else "selects"
        raise DotcatError(f"{' and '.join(given)} {verb} files in a folder; {where} is {what}",
                          settings=given)  # fmt: skip


# -- walking a folder ----------------------------------------------------------------------


def walk(root: Path, options: CorpusOptions) -> Listing:
    """The files of ``root`` to read, sorted by path components (see the module docstring);
    what cannot be read (:func:`dotcat.files.walk_tree`) is in ``problems``.

    Raises:
        DataFormatError: ``root`` itself cannot be listed.
    """
    listing = Listing()

    def enter(folder: Entry) -> bool:
        if folder.path.name.startswith(".") and not options.hidden:
            return False
        if is_index_folder(folder.path):
            listing.indexes.append(folder.rel)
        elif _excluded_dir(folder.rel, folder.path.name, options):
            listing.excluded["(folder)"] += 1
        else:
            return True
        return False

    for entry in walk_tree(root, enter):
        name = entry.path.name
        if entry.rel == ".":  # the root cannot be listed
            raise DataFormatError(root, None, f"cannot be read: {entry.problem}")
        if entry.is_folder:  # one that cannot be listed, a link, or a name not UTF-8: named
            left_out = name.startswith(".") and not options.hidden
            if entry.problem and not left_out and not _excluded_dir(entry.rel, name, options):
                listing.problems.append((entry.rel, entry.path, entry.problem))
            continue
        if name.startswith(".") and not options.hidden:
            continue
        if not _selected(entry.rel, name, options):
            listing.excluded[_suffix(name)] += 1
        else:
            _list_file(listing, entry)
    return listing


#: What marks a folder as a dotcat index (:mod:`dotcat.index.layout`: its manifest beside its
#: doc store) or an index's build (its plan, ``build.json``, beside a doc store or chunks).
INDEX_MARKERS = ("manifest.json", "build.json")
INDEX_PARTS = ("docstore.sqlite", "index.faiss", "chunks.jsonl")


#: Folders whose skipped indexes (or kinds not read) were named already (a command opens
#: its corpus more than once).
_NAMED: set[tuple[str, tuple]] = set()


def _say_indexes_skipped(root: Path, indexes: list[str]) -> None:
    """Name, once per process, the index folders a folder's walk skipped."""
    key = (str(root.resolve()), tuple(indexes))
    if indexes and key not in _NAMED:
        _NAMED.add(key)
        logger.warning(
            "%s: not read: %s, a dotcat index (an index inside its corpus folder is skipped, "
            "never indexed as documents)", root, ", ".join(indexes),
        )  # fmt: skip


def _say_kinds_not_read(root: Path, listing: Listing) -> None:
    """Warn, once per process, of a folder's files of kinds dotcat does not read (``.docx``,
    images...): counted by kind and the first few named, never dropped without a word."""
    total = sum(listing.other_kinds.values())
    key = (str(root.resolve()), ("kinds", *sorted(listing.other_kinds.items())))
    if not total or key in _NAMED:
        return
    _NAMED.add(key)
    named = named_first(listing.other_named, total)
    logger.warning(
        "%s: not read: %d file(s) of kinds dotcat does not index (%s): %s; convert them to "
        "text, Markdown, HTML or PDF to index them, or leave them out with exclude patterns",
        root, total, _counts(listing.other_kinds), named, extra={"settings": ("exclude",)},
    )  # fmt: skip


def is_index_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a dotcat index or an index's build folder: never documents."""
    isfile = os.path.isfile  # False, never an error, where a path cannot be looked at
    return any(isfile(folder / m) for m in INDEX_MARKERS) and any(
        isfile(folder / p) for p in INDEX_PARTS
    )


def _list_file(listing: Listing, entry: Entry) -> None:
    """``entry`` read, named as not read (:attr:`Entry.problem`), or counted as a kind not read."""
    if entry.rel == RULES_FILE:  # the folder's own rules: configuration, never a document
        return
    if entry.problem:
        listing.problems.append((entry.rel, entry.path, entry.problem))
    elif (kind := file_kind(entry.path.name) or plain_text(entry.path)) is None:
        listing.other_kinds[_suffix(entry.path.name)] += 1
        if len(listing.other_named) < UNREADABLE_NAMED:
            listing.other_named.append(entry.rel)
    else:
        info = entry.info
        listing.files.append(
            ListedFile(entry.rel, entry.path, info.st_size, info.st_mtime_ns, kind)
        )


def _suffix(name: str) -> str:
    return os.path.splitext(name)[1].lower() or "(no suffix)"


def named_first(names: Iterable[str], total: int) -> str:
    """The first few of ``total`` things, named: ``a, b and 3 more``."""
    names = list(names)
    more = total - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _counts(counter: Counter) -> str:
    shown = ", ".join(f"{n} {suffix}" for suffix, n in counter.most_common(5))
    return shown + (", ..." if len(counter) > 5 else "")


def _selected(rel: str, name: str, options: CorpusOptions) -> bool:
    if options.include and not any(pattern_matches(rel, name, p) for p in options.include):
        return False
    return not any(pattern_matches(rel, name, p) for p in options.exclude)


def _excluded_dir(rel: str, name: str, options: CorpusOptions) -> bool:
    return any(pattern_matches(rel, name, p.rstrip("/")) for p in options.exclude)


def _check_listing(root: Path, listing: Listing, options: CorpusOptions) -> None:
    """Refuse a folder with nothing to read, saying what it holds; check HTML support."""
    if not listing.files and not listing.problems:
        others = _counts(listing.other_kinds)
        held = f"it holds {others}" if others else "it holds no file"
        if listing.excluded:
            raise DataFormatError(
                root, None, f"no file to read matches include={list(options.include)} "
                f"exclude={list(options.exclude)}; they leave out {_counts(listing.excluded)}",
                settings=("include", "exclude"),
            )  # fmt: skip
        kinds = " ".join(sorted({*DOCUMENT_SUFFIXES, *RECORD_SUFFIXES}))
        raise DataFormatError(
            root, None, f"no file to index here: a folder is read for its {kinds} files "
            f"(gzipped text kinds too), a BEIR directory for its corpus.jsonl; {held}"
        )  # fmt: skip
    _refuse_record_fields(root, listing, options)
    if any(f.kind == "html" for f in listing.files):
        check_html_support()


def _refuse_record_fields(where: Path, listing: Listing, options: CorpusOptions) -> None:
    """Refuse ``id_field``/``title_field``/``text_field`` where no record file is read: a
    document file's id is its path and its title its own, so the option would do nothing."""
    given = [name for name in ("id_field", "title_field", "text_field") if getattr(options, name)]
    if not given or any(f.kind == "records" for f in listing.files):
        return
    name = given[0]
    kinds = " ".join(RECORD_SUFFIXES)
    raise SettingError(
        name, f"{name} {getattr(options, name)!r} names a field of record files ({kinds}); "
        f"{where} holds none to read: its documents are files, each with its path as its id "
        "and its own title and text", others=given[1:],
    )  # fmt: skip


# -- reading one file of a folder ----------------------------------------------------------


def _read_bytes(listed: ListedFile) -> bytes:
    try:
        return listed.path.read_bytes()
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None


def _gunzip(listed: ListedFile, data: bytes) -> bytes:
    if not is_gzipped(listed.path):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise Unreadable(f"corrupt gzip: {e}") from None


def _probe_records(
    listed: ListedFile, forced: str | None, fallback: str | None
) -> tuple[str, str | None, str]:
    """Check that a record file can be opened (not empty, not binary, a Parquet file that
    pyarrow opens); return the sha256 of its bytes, its encoding (``forced``, else None (UTF-8)
    where its first MiB decodes as UTF-8, else ``fallback``, else a guess) and how it was
    known (:class:`dotcat.data.encodings.Decoded`)."""
    if listed.size == 0:
        raise Unreadable("empty")
    try:
        if listed.path.name.lower().endswith(".parquet"):
            _open_parquet(listed.path)
            return _sha256_file(listed.path), None, ""
        opener = gzip.open if is_gzipped(listed.path) else open
        with opener(listed.path, "rb") as f:
            head = f.read(1 << 20)
        if not head.strip():
            raise Unreadable("empty")
        if binary(head, forced):
            raise Unreadable("binary")
        encoding, guess = (forced, "") if forced else _head_encoding(head, fallback)
        return _sha256_file(listed.path), encoding, guess
    except (OSError, EOFError, zlib.error) as e:
        raise Unreadable(f"cannot read: {e}") from None


def _head_encoding(head: bytes, fallback: str | None) -> tuple[str | None, str]:
    """``(None, "")`` where a file's head is UTF-8 (a character cut at its end allowed), else
    the encoding :func:`dotcat.data.encodings.decode` finds for it and how."""
    with contextlib.suppress(UnicodeDecodeError):
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        return None, ""
    try:
        found = decode(head, fallback)
    except NotDecodable as e:
        raise Unreadable(str(e)) from None
    return found.encoding, found.guess


def _open_parquet(path: Path) -> None:
    import pyarrow as pa  # loads numpy (~0.2 s): dotcat.data is on the CLI's path before torch
    import pyarrow.parquet as pq

    try:
        pq.ParquetFile(path).close()
    except (OSError, pa.ArrowException) as e:
        raise Unreadable(f"not a Parquet file: {e}") from None
