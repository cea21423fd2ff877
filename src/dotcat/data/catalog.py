"""Datasets by name: ``beir/NAME`` (BEIR's public zips) and ``irds:ID`` (``ir_datasets``).

A name is usable wherever a data path is (``dotcat index``, ``search --queries``, ``eval``,
``bm25``, experiment files): :func:`resolve_data_path` turns it into a local BEIR directory in
dotcat's cache (``$DOTCAT_CACHE/collections/``, :func:`dotcat.cache.cache_root`), fetched on
first use. A path that exists always wins over a name.

The BEIR catalogue (:data:`BEIR`) holds the datasets BEIR publishes as zips (Thakur et al.,
"BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of Information Retrieval Models",
NeurIPS 2021 Datasets and Benchmarks), with the md5 BEIR's README publishes for each zip;
every download is checked against it (:mod:`dotcat.data.download`). An entry without a
published md5 (one added through :data:`CATALOG_ENV`) is checked by size and sha256 against
its first download, recorded in ``collections/checksums.json`` (trust on first use).

Environment:

- :data:`URL_ENV` (``DOTCAT_DATASETS_URL``): another base URL for the zips (a mirror; the
  published md5s still apply).
- :data:`CATALOG_ENV` (``DOTCAT_DATASETS_CATALOG``): a JSON file of more entries,
  ``{"NAME": {"file": "x.zip", "md5": "...", "description": "..."}}`` (``md5`` optional):
  a team's own collections on its own server.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from dotcat.cache import cache_root
from dotcat.data.download import (
    Downloaded,
    DownloadError,
    check_beir_layout,
    download,
    extract_zip,
    fill_atomically,
)
from dotcat.data.irds import INSTALL_HINT, write_irds_beir
from dotcat.data.irds import PREFIX as IRDS_PREFIX
from dotcat.errors import DotcatError
from dotcat.files import read_json_or_none, write_json

logger = logging.getLogger(__name__)

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"
URL_ENV = "DOTCAT_DATASETS_URL"
CATALOG_ENV = "DOTCAT_DATASETS_CATALOG"
#: The file a fetched dataset's directory records its source and checksums in.
RECORD_NAME = "dotcat-source.json"


@dataclass(frozen=True)
class Entry:
    """A dataset published as a zip in BEIR layout.

    Attributes:
        name: what users type (``beir/nfcorpus``).
        file: the zip's name under the base URL.
        md5: its published md5, or None (checked against its first download instead).
        description: the domain, documents and test queries, for ``dotcat datasets list``.
        subsets: folders of the zip that are datasets themselves (CQADupStack's forums),
            named ``NAME/SUBSET``; empty when the zip is one dataset.
    """

    name: str
    file: str
    md5: str | None
    description: str
    subsets: tuple[str, ...] = field(default=())

    @property
    def url(self) -> str:
        base = os.environ.get(URL_ENV, "").strip() or BEIR_URL
        return f"{base.rstrip('/')}/{self.file}"


def _beir(name: str, md5: str, description: str, subsets: tuple[str, ...] = ()) -> Entry:
    return Entry(f"beir/{name}", f"{name}.zip", md5, description, subsets)


_CQADUPSTACK = ("android", "english", "gaming", "gis", "mathematica", "physics", "programmers",
                "stats", "tex", "unix", "webmasters", "wordpress")  # fmt: skip

#: BEIR's public datasets: each zip's md5 and figures as BEIR's README lists them (its
#: "Available Datasets" table); CQADupStack's zip holds one dataset per forum.
# fmt: off
BEIR: dict[str, Entry] = {e.name: e for e in (
    _beir("msmarco", "444067daf65d982533ea17ebd59501e4",
          "web passages; 8.84M docs, 6,980 dev queries; train, dev, test"),
    _beir("trec-covid", "ce62140cb23feb9becf6270d0d1fe6d1",
          "bio-medical; 171K docs, 50 test queries"),
    _beir("nfcorpus", "a89dba18a62ef92f7d323ec890a0d38d",
          "bio-medical; 3.6K docs, 323 test queries; train, dev, test"),
    _beir("nq", "d4d3d2e48787a744b6f6e691ff534307",
          "Wikipedia QA; 2.68M docs, 3,452 test queries"),
    _beir("hotpotqa", "f412724f78b0d91183a0e86805e16114",
          "multi-hop QA; 5.23M docs, 7,405 test queries; train, dev, test"),
    _beir("fiqa", "17918ed23cd04fb15047f73e6c3bd9d9",
          "financial QA; 57K docs, 648 test queries; train, dev, test"),
    _beir("arguana", "8ad3e3c2a5867cdced806d6503f29b99",
          "counter-arguments; 8.67K docs, 1,406 test queries"),
    _beir("webis-touche2020", "46f650ba5a527fc69e0a6521c5a23563",
          "arguments; 382K docs, 49 test queries"),
    _beir("cqadupstack", "4e41456d7df8ee7760a7f866133bda78",
          "duplicate questions of 12 forums; 457K docs, 13,145 test queries", _CQADUPSTACK),
    _beir("quora", "18fb154900ba42a600f84b839c173167",
          "duplicate questions; 523K docs, 10,000 test queries; dev, test"),
    _beir("dbpedia-entity", "c2a39eb420a3164af735795df012ac2c",
          "entities; 4.63M docs, 400 test queries; dev, test"),
    _beir("scidocs", "38121350fc3a4d2f48850f6aff52e4a9",
          "citation prediction; 25K docs, 1,000 test queries"),
    _beir("fever", "5a818580227bfb4b35bb6fa46d9b6c03",
          "fact checking; 5.42M docs, 6,666 test queries; train, dev, test"),
    _beir("climate-fever", "8b66f0a9126c521bae2bde127b4dc99d",
          "fact checking; 5.42M docs, 1,535 test queries"),
    _beir("scifact", "5f7d1de60b170fc8027bb7898e2efca1",
          "fact checking; 5K docs, 300 test queries; train, test"),
)}
# fmt: on


def catalog() -> dict[str, Entry]:
    """:data:`BEIR` and the entries of the :data:`CATALOG_ENV` file (which win on a name).

    Raises:
        DotcatError: the file is unreadable, holds no JSON object, or an entry lacks its ``file``
            or holds a field of another type.
    """
    path = os.environ.get(CATALOG_ENV, "").strip()
    if not path:
        return dict(BEIR)
    try:
        extra = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DotcatError(f"{path} ({CATALOG_ENV}): cannot read the catalogue: {e}") from None
    if not isinstance(extra, dict):
        kind = {list: "a list", str: "a string", type(None): "null"}.get(type(extra), "a value")
        raise DotcatError(
            f'{path} ({CATALOG_ENV}): holds {kind}, expected an object of entries: {{"NAME": '
            '{"file": "NAME.zip", "md5": "...", "description": "..."}, ...}'
        )
    entries = dict(BEIR)
    for name, spec in extra.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("file"), str):
            raise DotcatError(f"{path} ({CATALOG_ENV}): {name}: needs a 'file' (the zip's name)")
        md5, about, subsets = spec.get("md5"), spec.get("description", ""), spec.get("subsets", [])
        texts = isinstance(md5 or "", str) and isinstance(about, str)
        if not (texts and isinstance(subsets, list) and all(isinstance(s, str) for s in subsets)):
            raise DotcatError(f"{path} ({CATALOG_ENV}): {name}: md5 and description are text, "
                              "subsets a list of names")  # fmt: skip
        entries[name] = Entry(name, spec["file"], md5, about, tuple(subsets))
    return entries


def describe_catalog() -> str:
    """``dotcat datasets list``: every entry (name, what, md5, where it is cached), then
    where the zips come from and whether ``irds:`` ids can be read here."""
    from dotcat.evaluation.tables import markdown_table

    rows = []
    for entry in catalog().values():
        cached = cached_dir(entry.name)
        md5 = entry.md5 or "none published (recorded at first download)"
        rows.append([entry.name, entry.description, md5, str(cached) if cached.is_dir() else "-"])
    table = markdown_table(["name", "what", "md5 of the zip", "cached at"], rows, left=4)
    base = os.environ.get(URL_ENV, "").strip() or BEIR_URL
    try:
        import ir_datasets  # noqa: F401

        irds = "ir_datasets is installed"
    except ImportError:
        irds = f"needs ir_datasets: {INSTALL_HINT}"
    return (
        f"{table}\n\nzips from {base} (${URL_ENV} sets another base URL)\n"
        f"irds:ID names any ir_datasets dataset, e.g. irds:vaswani ({irds})"
    )


# -- names ------------------------------------------------------------------------------------


def collections_root() -> Path:
    """Where fetched datasets live: ``collections/`` under dotcat's cache."""
    return cache_root() / "collections"


def cached_dir(name: str) -> Path:
    """The cache folder of a dataset name (``beir/nfcorpus`` -> ``collections/beir/nfcorpus``;
    ``irds:a/b`` -> ``collections/irds/a__b``), fetched or not."""
    if name.startswith(IRDS_PREFIX):
        return collections_root() / "irds" / name[len(IRDS_PREFIX) :].replace("/", "__")
    return collections_root().joinpath(*name.split("/"))


def _lookup(name: str, entries: dict[str, Entry]) -> tuple[Entry, str | None] | None:
    """The entry and subset a name designates, or None."""
    if name in entries:
        return entries[name], None
    parent, _, subset = name.rpartition("/")
    if parent in entries and subset in entries[parent].subsets:
        return entries[parent], subset
    return None


def looks_like_name(text: str) -> bool:
    """Whether ``text`` is written as a dataset name: ``irds:...`` or a catalogue prefix."""
    if text.startswith((IRDS_PREFIX, "beir/")):
        return True
    return any(text == name or text.startswith(f"{name}/") for name in catalog())


def resolve_data_path(path: str | os.PathLike) -> Path:
    """What a data argument names, as a local path (module docstring).

    A path that exists is returned as it is; so is one that is not written as a dataset
    name (the readers then say it does not exist). A name is fetched into the cache on
    first use, then found there.

    Raises:
        DotcatError: an unknown name (with the closest known one), a name that cannot be
            fetched here (offline: one line saying how to fetch it elsewhere).
    """
    local = Path(path)
    name = os.fspath(path)
    if local.exists() or not looks_like_name(name):
        return local
    target = cached_dir(name)
    if name.startswith(IRDS_PREFIX):
        if not target.is_dir():
            with _lock(name):
                if not target.is_dir():
                    fetch(name, target)
        return target
    _ensure_cached(_dataset(name)[0])  # (a subset: in its zip's folder, the target)
    logger.info("%s: %s", name, target)
    return target


def _dataset(name: str) -> tuple[Entry, str | None]:
    """The entry and subset a BEIR-style name designates.

    Raises:
        DotcatError: an unknown name (with the closest known one), or a name of a zip that
            holds several datasets (CQADupStack) without the subset.
    """
    entries = catalog()
    found = _lookup(name, entries)
    if found is None:
        known = sorted(entries) + [f"{e.name}/{s}" for e in entries.values() for s in e.subsets]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise DotcatError(
            f"{name}: no such file or directory, nor a dataset dotcat knows ({hint}`dotcat "
            "datasets list` shows them)"
        )
    entry, subset = found
    if entry.subsets and subset is None:
        raise DotcatError(
            f"{name} holds several datasets: name one, e.g. {name}/{entry.subsets[0]} "
            f"({', '.join(entry.subsets)})"
        )
    return found


def _lock(name: str) -> FileLock:
    """One process at a time fetches a name (another waits, then finds it fetched)."""
    locks = collections_root() / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(str(locks / (re.sub(r"[^A-Za-z0-9._-]+", "_", name) + ".lock")))


# -- fetching ---------------------------------------------------------------------------------


def fetch(name: str, target: Path, *, retry_waits: Sequence[float] | None = None) -> Path:
    """Put the dataset ``name`` in BEIR layout at ``target`` (absent or empty before,
    complete after: ``dotcat datasets get NAME DIR``), and return ``target``.

    A BEIR name is copied from the cache when it is there, else downloaded (resuming an
    earlier attempt's ``.part`` file), checked and unpacked straight into ``target``; a
    subset (``beir/cqadupstack/android``) is taken from its zip's copy in the cache. An
    ``irds:`` id is converted through ir_datasets.

    Raises:
        DotcatError: an unknown name (or a path given as one), a failed download or checksum
            (saying what to do when offline), a bad archive, or a ``target`` that exists and
            is not an empty folder.
    """
    target = Path(target)
    _check_name(name)
    if target.exists() and not target.is_dir():
        raise DotcatError(f"{target}: is a file; give a folder (absent or empty) to put {name} in")
    if name.startswith(IRDS_PREFIX):
        dataset_id = name[len(IRDS_PREFIX) :]
        fill_atomically(target, lambda tmp: _write_irds(dataset_id, tmp))
        return target
    entry, subset = _dataset(name)
    cached = cached_dir(name)
    if subset is not None:
        _ensure_cached(entry, retry_waits)
    if cached.is_dir():
        logger.info("%s: copying it from the cache (%s)", name, cached)
        fill_atomically(target, lambda tmp: shutil.copytree(cached, tmp, dirs_exist_ok=True))
    else:
        with _lock(entry.name):
            _download_and_unpack(entry, target, retry_waits)
    return target


def _check_name(name: str) -> None:
    """Refuse what cannot be a dataset name: nothing, or a path on this machine (a folder is
    used where it is, by every command that reads data)."""
    if not name.strip():
        raise DotcatError(
            "give a dataset name: beir/NAME or irds:ID (`dotcat datasets list` shows them)"
        )
    if Path(name).exists() and not looks_like_name(name):
        kind = "a folder" if Path(name).is_dir() else "a file"
        raise DotcatError(
            f"{name}: is {kind} on this machine, not a dataset name (beir/NAME or irds:ID); "
            "commands read it where it is, so there is nothing to get"
        )


def _ensure_cached(entry: Entry, retry_waits: Sequence[float] | None = None) -> Path:
    """The entry's folder in the cache, downloaded there first if it is not."""
    folder = cached_dir(entry.name)
    if not folder.is_dir():
        with _lock(entry.name):
            if not folder.is_dir():  # another process may have fetched it meanwhile
                _download_and_unpack(entry, folder, retry_waits)
    return folder


def _write_irds(dataset_id: str, folder: Path) -> None:
    counts = write_irds_beir(dataset_id, folder)
    write_json(folder / RECORD_NAME, {"name": f"{IRDS_PREFIX}{dataset_id}", **counts})


def _download_and_unpack(entry: Entry, target: Path, retry_waits) -> None:
    """Download the entry's zip (checked), unpack it into ``target``, record its checksums."""
    part = collections_root() / ".downloads" / f"{entry.file}.part"
    recorded = _recorded_checksums().get(entry.url) if entry.md5 is None else None
    options = {} if retry_waits is None else {"retry_waits": retry_waits}
    try:
        got = download(entry.url, part, md5=entry.md5, size=(recorded or {}).get("size"),
                       desc=entry.name, **options)  # fmt: skip
    except DownloadError as e:
        text = f"cannot download {entry.name}: {e}"
        if e.offline:
            text += (
                f"; fetch it on a machine with network with `dotcat datasets get {entry.name} "
                f"DIR`, then copy DIR here and give its path (or put it at "
                f"{cached_dir(entry.name)})"
            )
        raise DotcatError(text) from None
    if recorded is not None and got.sha256 != recorded["sha256"]:
        part.unlink()
        raise DotcatError(
            f"cannot use {entry.name}: sha256 {got.sha256} differs from its first download's "
            f"{recorded['sha256']} (recorded in {_checksums_path()}); the file was removed"
        )

    def fill(tmp: Path) -> None:
        extract_zip(part, tmp)
        for folder in [tmp / s for s in entry.subsets] or [tmp]:
            check_beir_layout(folder, entry.url)
        write_json(tmp / RECORD_NAME, _record(entry, got))

    try:
        fill_atomically(target, fill)
    except DotcatError as e:
        part.unlink(missing_ok=True)  # a bad archive: the next attempt downloads it afresh
        raise DotcatError(f"cannot use {entry.name}: {e}") from None
    if entry.md5 is None and recorded is None:
        _record_checksums(entry.url, got)
    part.unlink(missing_ok=True)


def _record(entry: Entry, got: Downloaded) -> dict:
    return {
        "name": entry.name,
        "url": got.url,
        "size": got.size,
        "md5": got.md5,
        "md5_published": entry.md5,
        "sha256": got.sha256,
    }


def _checksums_path() -> Path:
    return collections_root() / "checksums.json"


def _recorded_checksums() -> dict:
    return read_json_or_none(_checksums_path()) or {}


def _record_checksums(url: str, got: Downloaded) -> None:
    """Record the first download's size and sha256 of a zip with no published md5."""
    recorded = _recorded_checksums()
    recorded[url] = {"size": got.size, "sha256": got.sha256}
    write_json(_checksums_path(), recorded)
    logger.info("%s: no published checksum; recorded sha256 %s (%d bytes)", url, got.sha256,
                got.size)  # fmt: skip
