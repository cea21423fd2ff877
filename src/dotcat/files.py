"""Small file-system helpers shared by every command that writes: one home for each.

Light on purpose (standard library only): the command line runs them before importing
torch or FAISS, so a bad output path is reported in milliseconds, not after the work.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dotcat.errors import DotcatError

_UMASK = os.umask(0o022)
os.umask(_UMASK)


def nearest_existing(path: Path) -> Path:
    """``path`` itself if it exists, else its closest existing ancestor."""
    path = Path(path).absolute()
    return next(p for p in (path, *path.parents) if p.exists())


def check_can_create_in(path: Path) -> None:
    """Check that ``path`` (a file or directory to be written) can be created or replaced.

    Its nearest existing ancestor must be a directory in which a file can really be created:
    a probe file is made and removed, so permissions, ACLs, immutable flags and read-only
    mounts all show, even for root (whom ``os.access`` always answers yes). Missing folders
    below that ancestor are created by the writer later.

    Raises:
        DotcatError: ``path`` lies under a file, or that folder is not writable.
    """
    path = Path(path)
    ancestor = nearest_existing(path.absolute().parent)
    if not ancestor.is_dir():
        raise DotcatError(f"{path}: cannot be written, {ancestor} is a file, not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".dotcat-probe-"):
            pass
    except OSError as e:
        raise DotcatError(f"{path}: cannot write in {ancestor} ({e.strerror})") from None


def write_json(path: str | os.PathLike, value: Any, indent: int | None = 2) -> None:
    """Write ``value`` as JSON (UTF-8) atomically: a temporary file beside ``path``, flushed
    to disk, renamed over it. A crash leaves the old file or the new one, never half of one.
    Parent directories are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=indent, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give it a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json_or_none(path: str | os.PathLike) -> Any:
    """The JSON in ``path``, or None where it is missing or unreadable (a run not yet begun)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def atomic_dir(target: str | os.PathLike, fill: Callable[[Path], Any]) -> None:
    """Fill a temporary sibling folder, then rename it to ``target`` (no half-written data).

    Whatever ``fill`` raises (Ctrl-C included), the temporary folder is removed and ``target``
    is left as it was."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
