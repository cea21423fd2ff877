"""Small file-system checks shared by every command that writes: one home for each.

Light on purpose (standard library only): the command line runs them before importing
torch or FAISS, so a bad output path is reported in milliseconds, not after the work.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from dotcat.errors import DotcatError


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
