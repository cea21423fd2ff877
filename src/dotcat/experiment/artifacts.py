"""What an experiment has built, found again by fingerprint.

Every artifact (an index built from a model, a first-stage run, a re-ranked run) is stored
under the sha256 of a JSON description of *everything it depends on*: the files it reads
(by content: :func:`dotcat.models.resolve.file_sha256`, cached by size and mtime, so an
unchanged file is not read again), the models (every file of the model directory), the
settings, the precision and device it runs at, and dotcat's version. An unchanged
experiment therefore finds everything and only evaluates; a changed setting changes the
fingerprints of the artifacts that depend on it, and only those are computed again.

An artifact is complete when its record (``<fingerprint>.json``, written last and
atomically) exists; a crash in between leaves an artifact without record, redone next time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dotcat.files import walk_tree, write_json
from dotcat.models.resolve import file_sha256, resolve_model
from dotcat.version import __version__

logger = logging.getLogger(__name__)

# Parts of a model directory that do not change what the model computes.
_MODEL_SKIP = ("checkpoints",)


def digest(description: Mapping[str, Any]) -> str:
    """sha256 of a JSON description (keys sorted), with dotcat's version mixed in."""
    text = json.dumps({"dotcat": __version__, **description}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (cached by real path, size and mtime)."""
    return file_sha256(path)


def model_fingerprint(model: str) -> str:
    """A model's fingerprint: the sha256 of every file of its directory (checkpoints aside).

    ``model`` is a directory or a name :func:`dotcat.models.resolve.resolve_model` resolves
    (``default`` is the packaged all-MiniLM-L6-v2).
    """
    root = resolve_model(model)
    files = [e for e in walk_tree(root) if e.is_file and e.rel.split("/")[0] not in _MODEL_SKIP]
    lines = [f"{e.rel} {file_digest(e.path)}" for e in files]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def index_fingerprint(index_dir: str | os.PathLike) -> str:
    """An existing index's fingerprint: its manifest's bytes and every file's size and mtime.

    The manifest records the encoder's weights fingerprint, the corpus sha256, the fusion
    chosen on dev and the updates; sizes and mtimes catch a rebuilt or updated index without
    reading gigabytes of vectors.
    """
    root = Path(index_dir)
    lines = [hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest()]
    files = [e for e in walk_tree(root) if e.is_file]
    lines += [f"{e.rel} {e.info.st_size} {e.info.st_mtime_ns}" for e in files]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


@dataclass
class StageRecord:
    """One artifact of an experiment and how this invocation got it.

    Attributes:
        kind: ``index``, ``first_stage`` or ``rerank``.
        fingerprint: the sha256 it is stored under.
        path: where it is (a run file or an index directory).
        reused: found in the cache (True) or computed by this invocation (False).
        seconds: how long computing it took (when it was computed, possibly earlier).
        details: what it was made from and counts (queries, pairs...).
    """

    kind: str
    fingerprint: str
    path: str
    reused: bool
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


class Cache:
    """Artifacts under ``root``: ``runs/<fingerprint>.trec`` and ``indexes/<fingerprint>/``,
    each with its record ``<fingerprint>.json`` beside it."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self._checked_versions = False

    def run_path(self, fingerprint: str) -> Path:
        return self.root / "runs" / f"{fingerprint}.trec"

    def index_path(self, fingerprint: str) -> Path:
        return self.root / "indexes" / fingerprint

    def _record_path(self, artifact: Path) -> Path:
        return artifact.parent / f"{artifact.name.split('.')[0]}.json"

    def lookup(self, kind: str, artifact: Path) -> StageRecord | None:
        """The record of a complete artifact, marked reused; None when it must be made."""
        record_path = self._record_path(artifact)
        if not (record_path.is_file() and artifact.exists()):
            self._note_other_versions()
            return None
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            logger.warning("%s: unreadable record (%s); computing it again", record_path, e)
            return None
        logger.info("%s %s: reused (%s)", kind, artifact.name, record.get("created", "?"))
        seconds, details = float(record.get("seconds", 0.0)), record.get("details", {})
        return StageRecord(kind, artifact.name.split(".")[0], str(artifact), True, seconds, details)

    def _note_other_versions(self) -> None:
        """Say once why a cache made by another dotcat is not reused: every fingerprint mixes
        in dotcat's version (:func:`digest`), so its stages are computed again once."""
        if self._checked_versions:
            return
        self._checked_versions = True
        others = set()
        for record in self.root.glob("*/*.json"):
            if record.name.count(".") > 1:  # a run's passages beside it, not a record
                continue
            try:
                others.add(json.loads(record.read_text(encoding="utf-8")).get("dotcat", "< 0.3"))
            except (OSError, ValueError, AttributeError):
                continue
        others.discard(__version__)
        if others:
            logger.warning(
                "%s holds stages made by dotcat %s: dotcat %s fingerprints them anew (its "
                "settings say what a stage depends on), so they are computed again once; the "
                "old ones can be deleted", self.root, ", ".join(sorted(others)), __version__,
            )  # fmt: skip

    def discard(self, artifact: Path) -> None:
        """Remove an incomplete artifact (one without record) before making it again."""
        self._record_path(artifact).unlink(missing_ok=True)
        if artifact.is_dir():
            shutil.rmtree(artifact)
        else:
            artifact.unlink(missing_ok=True)

    def commit(
        self,
        kind: str,
        artifact: Path,
        seconds: float,
        description: Mapping[str, Any],
        details: Mapping[str, Any] | None = None,
    ) -> StageRecord:
        """Write the record of a finished artifact; from now on :meth:`lookup` finds it."""
        record = {
            "kind": kind,
            "dotcat": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": seconds,
            "depends_on": dict(description),
            "details": dict(details or {}),
        }
        write_json(self._record_path(artifact), record)
        return StageRecord(
            kind, artifact.name.split(".")[0], str(artifact), False, seconds, dict(details or {})
        )
