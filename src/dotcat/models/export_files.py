"""Exported models on disk: where they live, and how an export is known to be current.

The int8 runtimes (:mod:`dotcat.models.onnx_backend`, :mod:`dotcat.models.openvino_backend`)
run files exported from a model's weights. Each runtime keeps its files in one directory (its
*home*): beside the weights (``onnx/``, ``openvino/``, where ``dotcat export`` writes and where
sentence-transformers looks), or, for an export made on first use, in the cache under
``$DOTCAT_CACHE/<directory>/<fingerprint>/``: a model's own directory, perhaps a packaged or
shared one, is not written to behind the user's back.

An export is never silently stale: a home's ``dotcat_export.json`` records, per file, the
recipe it was made with, the sha256 of the weights included, and the sha256 of each file
written; a file whose record differs from the recipe asked for, or whose files are not those
recorded (damaged), is exported again. Files are written under temporary names and renamed
into place, so a crash leaves no half file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from dotcat.cache import cache_root
from dotcat.files import read_json_or_none, write_json, writing
from dotcat.models.resolve import file_sha256

logger = logging.getLogger(__name__)

EXPORT_RECORD = "dotcat_export.json"


def cache_home(directory: str, fingerprint: str) -> Path:
    """Where exports made on first use are cached: ``$DOTCAT_CACHE/<directory>/<fingerprint>``
    (the fingerprint's first 32 hex digits)."""
    return cache_root() / directory / fingerprint[:32]


def current_export(homes: list[Path], name: str, recipe: dict, *companions: str) -> Path | None:
    """``home/name`` in the first of ``homes`` whose record for ``name`` is ``recipe`` and that
    holds the file (and its ``companions``, suffixes such as ``.bin``) as recorded (sha256);
    None if none does, with a warning when a file is there under another recipe (stale: other
    weights) or differs from its record (damaged: a truncated or overwritten file)."""
    damaged = None
    for home in homes:
        found = dict(_records(home).get(name) or {})
        digests = found.pop("sha256", None)  # (None: recorded by a dotcat before the check)
        if found == recipe:
            now = _digests(home / name, companions)
            if now and digests in (None, now):
                return home / name
            damaged = damaged or home / name
    stale = [str(h / name) for h in homes if (h / name).is_file()]
    if damaged:
        logger.warning("export %s is damaged (its files are not those its %s records): "
                       "exporting it again", damaged, EXPORT_RECORD)  # fmt: skip
    elif stale:
        logger.warning("export %s is stale (other weights or recipe): exporting again", stale[0])
    return None


def record(home: Path, name: str, recipe: dict, *companions: str) -> None:
    """Record ``home/name`` (and its ``companions``, in place) as made with ``recipe``."""
    digests = {"sha256": _digests(home / name, companions)}
    write_json(home / EXPORT_RECORD, _records(home) | {name: recipe | digests})


def _digests(path: Path, companions: tuple[str, ...]) -> dict[str, str] | None:
    """File name -> sha256 of ``path`` and its ``companions`` (None if one is missing), cached
    by size and mtime: a search does not hash them again."""
    files = [path, *(path.with_suffix(suffix) for suffix in companions)]
    return {f.name: file_sha256(f) for f in files} if all(f.is_file() for f in files) else None


def _records(home: Path) -> dict:
    """``home/dotcat_export.json``: file name -> recipe (empty when missing or unreadable)."""
    records = read_json_or_none(home / EXPORT_RECORD)
    return records if isinstance(records, dict) else {}


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed onto it if the block succeeds; removed if it
    fails (a full disk: one :class:`~dotcat.errors.DiskFullError`)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with writing(path, remove=[tmp]):
            yield Path(tmp)
        shareable(Path(tmp))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def shareable(path: Path) -> None:
    """Mode 0666 less the umask: mkstemp's (and onnx's external data's) 0600 is not for models."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """The exporters' and quantisers' warnings (tracer, pre-processing advice) are noise here."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # onnxruntime.quantization logs its advice on the root logger
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)
