"""Where an index directory lives on disk, and how a new one replaces it without a gap.

An index ``INDEX`` is only ever written beside itself and moved into place whole:

* ``.INDEX.lock`` (a sibling file, there only while held): whoever builds, updates or repairs
  ``INDEX`` holds an exclusive lock on it (``flock`` on POSIX, released by the kernel when the
  process dies, kill -9 included). A second builder of the same path is refused at once.
* ``.INDEX.building``: the build folder. ``manifest.json`` is the last file written into it,
  so a build folder with a manifest is a complete index.
* The swap: where Linux offers ``renameat2(RENAME_EXCHANGE)`` the new and the old directory
  trade places in one atomic step, so ``INDEX`` always holds a complete index. Elsewhere it
  takes two renames (old away to ``.INDEX.old-*``, new in), and a kill between them leaves no
  index at the path, only the two complete folders beside it.
* Recovery: the next build (and the next open, when ``INDEX`` is missing) takes the lock and
  restores what a killed process left: with no index at the path, the newest complete build,
  else the old index, is renamed back into place; leftovers beside a complete index are
  stale (no live process holds the lock) and are removed, each one logged (a leftover this
  process owns but cannot write, e.g. the copy of a read-only index, is made writable first;
  one it cannot remove is an error naming it, never reported as removed).
* Permissions: a writer (a build with ``overwrite``, an update, a merge, a calibration) first
  checks that it can change the whole index and create files beside it
  (:func:`check_writable`); a read-only or foreign-owned index is refused in one line before
  any work, and nothing is left beside it.
* Generations: an update (``add``, ``delete``, a sync, an HTTP write) builds the next generation in
  the build folder, every file hard-linked from the current one but those it changes in place
  (:data:`IN_PLACE`, copied: :func:`copy_for_update`), fsyncs it and swaps it in. Readers open a
  generation's files inside :func:`reading` (a shared ``flock`` on its folder); the swap first takes
  that lock exclusively (:func:`swap_into_place`), so a reader opens one generation whole, never
  files of two, and keeps what it opened (the old files are unlinked, not changed) until it moves.

Nothing here imports FAISS or torch: the CLI checks paths before paying for those imports.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from dotcat.data.index_source import INDEX_DOCSTORE, INDEX_MANIFEST
from dotcat.errors import DotcatError
from dotcat.files import check_can_create_in, remove_tree, unwritable

try:
    import fcntl
except ImportError:  # Windows: filelock's lock
    fcntl = None

logger = logging.getLogger(__name__)

# The manifest and document store names are the data layer's, which reads an index as a
# corpus (dotcat.data.index_source).
MANIFEST_NAME = INDEX_MANIFEST
INDEX_NAME = "index.faiss"
DOCSTORE_NAME = INDEX_DOCSTORE
#: The BM25 side index (:mod:`dotcat.index.bm25`), a directory, when the index has one.
BM25_DIR = "bm25"
#: Files an update changes in place (the doc store, FAISS's on-disk lists): copied into the
#: next generation. Every other file is only ever replaced (written anew, renamed), so the next
#: generation hard-links it.
IN_PLACE = (DOCSTORE_NAME, "index.ivfdata")
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


class IndexBusy(DotcatError):
    """Another process holds an index's writer lock (a build, an update, a sync)."""


def real_path(index_dir: str | Path) -> Path:
    """Where the index at ``index_dir`` really is: a symbolic link's target (a writer locks it,
    builds beside it and swaps it, so the link stays a link and leads to the update), else it."""
    index_dir = Path(index_dir)
    return index_dir.resolve() if index_dir.is_symlink() else index_dir


def lock_path(index_dir: Path) -> Path:
    return index_dir.with_name(f".{index_dir.name}.lock")


def build_path(index_dir: Path) -> Path:
    return index_dir.with_name(f".{index_dir.name}.building")


def leftovers(index_dir: Path) -> list[Path]:
    """Build and old-index folders beside ``index_dir`` (``.building-*`` from dotcat 0.1 too)."""
    parent, escaped = index_dir.parent, _glob_escape(index_dir.name)
    if not parent.is_dir():
        return []
    found = [p for end in ("building*", "old-*") for p in parent.glob(f".{escaped}.{end}")]
    return sorted(p for p in found if p.is_dir())


def _glob_escape(name: str) -> str:
    """``name`` with glob metacharacters bracketed, so ``a[1]`` matches only itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def check_target(index_dir: Path, overwrite: bool) -> None:
    """Refuse to clobber anything but an existing dotcat index, and that only if asked.

    Raises:
        DotcatError: ``index_dir`` is a file, lies under a file, is a directory that is not a
            dotcat index (never touched), or is an index and ``overwrite`` is False.
    """
    check_can_create_in(index_dir)  # the build folder and the lock go beside it
    if not index_dir.exists():
        return
    if not index_dir.is_dir():
        raise DotcatError(f"{index_dir}: exists and is not a directory")
    if not any(index_dir.iterdir()):
        return
    if not (index_dir / MANIFEST_NAME).is_file():
        raise DotcatError(
            f"{index_dir}: exists, is not empty and is not a dotcat index; refusing to touch it"
        )
    if not overwrite:
        raise DotcatError(
            f"{index_dir}: an index exists there; pass overwrite=True to replace it",
            settings=("overwrite",),
        )
    check_writable(index_dir)  # the old index is removed once the new one is in its place


def check_writable(index_dir: Path) -> None:
    """Refuse to change an index this process cannot change whole: a writer works on a copy
    beside it (the folder must take new files) and replaces or removes the old one (every
    folder and file of it must be this process's to change). Checked before any work, so a
    read-only or foreign-owned index is one line and nothing is left beside it.

    Raises:
        DotcatError: the folder beside the index is not writable, or an entry of the index
            is read-only, another user's, or on a read-only file system (named).
    """
    index_dir = Path(index_dir)
    check_can_create_in(index_dir)
    if not index_dir.is_dir():
        return
    found = unwritable(index_dir)
    if found is None:
        return
    path, why = found
    where = "it" if path == index_dir else str(path.relative_to(index_dir))
    if why.startswith("belongs to"):
        advice = "run as its owner, or work on a copy (cp -r)"
    elif why.startswith("is on a read-only"):
        advice = "copy it to a writable disk and work on the copy"
    else:
        advice = f"make it writable first (chmod -R u+w {index_dir}) or work on a copy"
    raise DotcatError(f"{index_dir}: cannot be changed: {where} {why}; {advice}")


def is_resumable(directory: Path) -> bool:
    """An interrupted build that recorded its plan (and did not finish)."""
    return (directory / "build.json").is_file() and not is_complete(directory)


def is_complete(directory: Path) -> bool:
    """A directory holding a whole index: the manifest (written last) and its two files."""
    return all((directory / name).is_file() for name in (MANIFEST_NAME, INDEX_NAME, DOCSTORE_NAME))


@contextmanager
def index_lock(index_dir: Path, wait: float = 0.0) -> Iterator[None]:
    """Hold the exclusive lock of ``index_dir`` (see the module docstring); the lock file is
    removed when it is released, so none is left beside the index.

    Removing a lock file is safe only if every taker checks, once it holds the lock, that the
    file it locked is still the one at the path (a waiter may have opened it just before the
    holder removed it): :func:`_flock` does; where ``flock`` is missing, ``filelock`` is used
    (on Windows it removes the file itself).

    Args:
        wait: seconds to wait for another holder; 0 refuses at once.

    Raises:
        DotcatError: another process holds it (a build, an update or a repair of this index).
    """
    path = lock_path(index_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = _flock if fcntl is not None else _filelock
    with holder(path, wait) as acquired:
        if not acquired:
            raise IndexBusy(
                f"{index_dir}: another dotcat process is building or updating this index "
                f"(it holds {path}); wait for it to finish"
            )
        yield


@contextmanager
def _flock(path: Path, wait: float) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path``; yields whether it was taken within ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                yield False
                return
            time.sleep(0.05)
            continue
        if _still_at(fd, path):
            break
        os.close(fd)  # its holder removed it on release: lock the file now at the path
    try:
        yield True
    finally:
        # Removed while still held: whoever opens the path next makes a new file, and whoever
        # opened this one meanwhile finds it gone once it gets the lock, and starts over.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _still_at(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


@contextmanager
def _filelock(path: Path, wait: float) -> Iterator[bool]:
    """``filelock``'s lock where ``flock`` is missing; yields whether it was taken in time."""
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=wait)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def generation_id(index_dir: Path) -> tuple[int, ...] | None:
    """What tells one generation of an index from the next: its manifest file's identity
    (device, inode, modification time, size; every writer writes a new manifest), or None."""
    try:
        st = os.stat(Path(index_dir) / MANIFEST_NAME)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


@contextmanager
def reading(index_dir: Path) -> Iterator[tuple[int, ...] | None]:
    """Open an index's files inside this block to read one generation whole: a shared ``flock``
    on its folder, which :func:`swap_into_place` takes exclusively before a swap, so no swap
    comes between two opens. What was opened stays readable after the block and after later
    swaps (a replaced file is unlinked, never changed). Yields the generation's
    :func:`generation_id`. Without ``flock`` (Windows) or without the folder (the opener says
    so), nothing is locked."""
    fd = None
    while fcntl is not None and index_dir.is_dir():
        fd = os.open(index_dir, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH)
        if _still_at(fd, index_dir):
            break
        os.close(fd)  # swapped while this waited: read the generation now in place
        fd = None
    try:
        yield generation_id(index_dir)
    finally:
        if fd is not None:
            os.close(fd)


@contextmanager
def _no_readers(index_dir: Path) -> Iterator[None]:
    """Hold ``index_dir``'s folder lock exclusively: readers opening it (:func:`reading`)
    finish first, and new ones wait for the swap, then open what replaced it."""
    fd = os.open(index_dir, os.O_RDONLY) if fcntl is not None else None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd is not None:
            os.close(fd)


def copy_for_update(index_dir: Path, new: Path) -> None:
    """Make ``new``, the next generation of ``index_dir``: its files hard-linked (where the file
    system has no links, copied) but those an update changes in place (:data:`IN_PLACE`),
    copied. A write into the next generation replaces a linked file, never changes it."""

    def link_or_copy(source: str, target: str) -> str:
        if Path(source).name not in IN_PLACE:
            with contextlib.suppress(OSError):
                os.link(source, target)
                return target
        return shutil.copy2(source, target)

    shutil.copytree(index_dir, new, copy_function=link_or_copy)


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under ``folder`` to disk (before it is published: an
    acknowledged write survives a power cut, not only kill -9)."""
    for path, _, names in os.walk(folder):
        for name in names:
            fd = os.open(os.path.join(path, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(path))


def recover(index_dir: Path, strict: bool = True) -> list[str]:
    """Restore or clean up after a killed build; call with the lock held.

    Args:
        strict: a leftover that cannot be removed is an error (a writer is about to use
            its place); False: a warning naming it (a reader goes on).

    Returns:
        One line per action taken, for the caller to show (they are logged too).

    Raises:
        DotcatError: with ``strict``, a leftover that cannot be removed (another user's).
    """
    actions: list[str] = []
    found = leftovers(index_dir)
    if not found:
        return actions
    if not is_complete(index_dir) and not (index_dir.is_dir() and any(index_dir.iterdir())):
        # Newest complete build first (it finished: only the swap was cut short), else the
        # old index that it was replacing.
        builds = [p for p in found if ".building" in p.name and is_complete(p)]
        olds = [p for p in found if ".old-" in p.name and is_complete(p)]
        newest_first = sorted(builds, key=_mtime, reverse=True) + sorted(olds, key=_mtime)
        if newest_first:
            chosen = newest_first[0]
            if index_dir.exists():
                index_dir.rmdir()  # empty (checked above)
            os.replace(chosen, index_dir)
            _fsync_dir(index_dir.parent)
            found.remove(chosen)
            actions.append(f"restored {index_dir} from {chosen.name} (a build was interrupted)")
            logger.warning("%s", actions[-1])
    for path in found:
        if path == build_path(index_dir) and is_resumable(path):
            continue  # an interrupted build: the next build resumes it (dotcat.index.build)
        # No live process holds the lock: whatever is here was left by a killed build.
        try:
            clear(path, "left by a killed build")
        except DotcatError as e:
            if strict:
                raise
            logger.warning("%s", e)
            continue
        actions.append(f"removed {path.name} (left by a killed build)")
        logger.warning("%s", actions[-1])
    return actions


def clear(path: Path, what: str) -> None:
    """Remove the folder ``path`` (``what`` says what it is) if it is there; this process's
    own read-only copies are made writable first (:func:`dotcat.files.remove_tree`).

    Raises:
        DotcatError: it cannot be removed (another user's, a read-only mount), naming the
            entry that stays and saying to remove it by hand.
    """
    try:
        remove_tree(path)
    except OSError as e:
        entry = e.filename or path
        raise DotcatError(
            f"{path}: {what}, and it cannot be removed ({entry}: {e.strerror or e}); remove "
            "it by hand, then run the command again"
        ) from None


def recover_for_reading(index_dir: Path) -> None:
    """Before opening ``index_dir``: if it is missing but a killed swap left a complete index
    beside it, restore it (waiting a few seconds for a live builder to finish its swap)."""
    if is_complete(index_dir) or not leftovers(index_dir):
        return
    try:
        with index_lock(index_dir, wait=10.0):
            recover(index_dir, strict=False)
    except OSError as e:
        names = ", ".join(p.name for p in leftovers(index_dir))
        raise DotcatError(
            f"{index_dir}: missing, and restoring it from {names} failed ({e}); "
            "move the complete one into place by hand or rebuild"
        ) from None


def swap_into_place(new: Path, index_dir: Path) -> None:
    """Move the finished build ``new`` to ``index_dir``, replacing any index there.

    Atomic where ``renameat2(RENAME_EXCHANGE)`` works (Linux 3.15+ on ext4, xfs, btrfs,
    tmpfs...): the old index is in ``new``'s place afterwards and is removed. Elsewhere two
    renames, with :func:`recover` covering a kill between them. Readers opening the old index
    (:func:`reading`) finish before the swap; the files they opened stay theirs.
    """
    if not index_dir.exists():
        os.replace(new, index_dir)
        _fsync_dir(index_dir.parent)
        return
    with _no_readers(index_dir):
        if _exchange(new, index_dir):
            old = new  # the exchange left the old index there
        else:
            old = index_dir.with_name(f".{index_dir.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(index_dir, old)
            os.replace(new, index_dir)
        _fsync_dir(index_dir.parent)
    _remove_old(old)
    _fsync_dir(index_dir.parent)


def _remove_old(old: Path) -> None:
    """Remove the index a swap replaced; where it cannot be (a writer checks first, with
    :func:`check_writable`), say where it stays: the new index is in place either way."""
    try:
        clear(old, "the index just replaced")
    except DotcatError as e:
        logger.warning("%s", e)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with ``renameat2(RENAME_EXCHANGE)``; False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p] * 2 + [ctypes.c_uint]  # (dir, path) x 2
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # kernel or filesystem without it: the two-rename path
    raise OSError(err, os.strerror(err), str(b))


def _mtime(path: Path) -> float:
    try:
        return (path / MANIFEST_NAME).stat().st_mtime
    except OSError:
        return 0.0


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op where directories cannot sync)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
