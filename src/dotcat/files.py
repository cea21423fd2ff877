"""Small file-system helpers shared by every command that writes: one home for each.

Light on purpose (standard library only): the command line runs them before importing
torch or FAISS, so a bad output path is reported in milliseconds, not after the work.

A full disk is one error for every writer (:class:`~dotcat.errors.DiskFullError`): each write
runs inside :func:`writing` (or :func:`replacing`, :func:`writes`), which recognises the
ways a write finds no room, whoever reports it (an ``OSError``'s errno ENOSPC, EDQUOT, EFBIG
or EROFS; ``shutil.Error``'s list of them; FAISS's and safetensors' C strerror text;
SQLite's "database or disk is full"), removes what was half written, and says which file,
how much room is left, and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotcat.errors import DiskFullError, DotcatError

#: The process umask, read once at import time (os.umask can only be read by setting it).
UMASK = os.umask(0o022)
os.umask(UMASK)

#: The name's start of the file a check for room in a folder makes there (and removes).
PROBE = ".dotcat-probe-"


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
        with tempfile.NamedTemporaryFile(dir=ancestor, prefix=PROBE):
            pass
    except OSError as e:
        raise DotcatError(f"{path}: cannot write in {ancestor} ({e.strerror})") from None


@dataclass(frozen=True)
class Entry:
    """A file or folder met by :func:`walk_tree`.

    Attributes:
        rel: its path relative to the walk's root, ``/``-separated (a name that is not UTF-8
            shown with ``\\xNN`` escapes).
        path: its path.
        info: its ``stat`` (a link's target's); None where it could not be looked at.
        problem: why it is not read, ``""`` where it can be.
    """

    rel: str
    path: Path
    info: os.stat_result | None = None
    problem: str = ""

    @property
    def is_folder(self) -> bool:
        """A folder (not a link to one), listed or not (``problem``)."""
        return self.info is not None and stat.S_ISDIR(self.info.st_mode)

    @property
    def is_file(self) -> bool:
        return not self.problem and stat.S_ISREG(self.info.st_mode)


#: Entries that are neither files nor folders: never opened (reading a FIFO waits for a writer).
_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))  # fmt: skip
_REASONS = {errno.EACCES: "permission denied", errno.EPERM: "permission denied",
            errno.ENAMETOOLONG: "path longer than the system allows (PATH_MAX)",
            errno.ELOOP: "a loop of symbolic links"}  # fmt: skip


def walk_tree(root: Path, enter: Callable[[Entry], bool] | None = None) -> Iterator[Entry]:
    """Every file and folder under ``root``, depth first, names sorted at each level (the
    order of their path components), each folder before what it holds.

    The one walk of a folder in dotcat (a corpus, an index, a model): whatever it meets is an
    entry, never an exception. A link to a file is followed (``info`` is the file's); a link
    to a folder is not (no cycles), and says so. Entries not read say why in ``problem``:
    a folder that cannot be listed (a second entry for its path, after its own; ``.`` for
    ``root`` itself), a file that cannot be looked at, a broken link or a loop of links, a
    path past PATH_MAX, a name that is not UTF-8 (it could be no document id), a FIFO, socket
    or device (never opened).

    Args:
        enter: called with each folder before it is listed; False leaves it out.
    """
    stack = [_listed(Path(root), "", None)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        yield entry
        if entry.is_folder and not entry.problem and (enter is None or enter(entry)):
            stack.append(_listed(entry.path, entry.rel + "/", entry.info))


def _listed(folder: Path, prefix: str, info: os.stat_result | None) -> Iterator[Entry]:
    """The entries of ``folder``, or one entry for it saying why it cannot be listed (``.``
    for the root)."""
    try:
        with os.scandir(folder) as found:
            items = sorted(found, key=lambda item: item.name)
    except OSError as e:
        yield Entry(prefix.rstrip("/") or ".", folder, info, _reason(e))
        return
    for item in items:
        yield entry_of(Path(item.path), prefix + item.name)


def entry_of(path: Path, rel: str) -> Entry:
    """What :func:`walk_tree` says of ``path`` (a link to a folder: not followed, said)."""
    try:
        info = os.stat(path)
    except OSError as e:
        broken = e.errno == errno.ENOENT and os.path.islink(path)
        return Entry(printable(rel), path, None, "a broken symbolic link" if broken else _reason(e))
    special = next((what for test, what in _SPECIAL if test(info.st_mode)), "")
    if stat.S_ISDIR(info.st_mode) and os.path.islink(path):
        special = "a link to a folder (not followed: index the folder itself)"
    if printable(rel) != rel:
        special = "a name that is not UTF-8"
    return Entry(printable(rel), path, info, special)


def printable(path: str | os.PathLike) -> str:
    """A path as text: bytes that are not UTF-8 (surrogate escapes) as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _reason(error: OSError) -> str:
    return _REASONS.get(error.errno) or error.strerror or str(error)


def unwritable(directory: Path) -> tuple[Path, str] | None:
    """The first entry of ``directory`` (itself included, then everything under it) that this
    process cannot change, and why (``is read-only``, ``belongs to user NAME``, ``is on a
    read-only file system``, ``cannot be read``); None when it can change all of it.

    Asked of the kernel with this process's effective ids (``faccessat(AT_EACCESS)``), so a
    root without ``CAP_DAC_OVERRIDE`` is answered as it will be treated, and root with it
    is not refused what it can do.
    """
    for entry in (Entry(".", Path(directory)), *walk_tree(directory)):
        if entry.problem:
            return entry.path, "cannot be read"
        if not _access(entry.path, os.W_OK):
            return entry.path, _why_unwritable(entry.path)
    return None


def _access(path: Path, mode: int) -> bool:
    """``os.access`` with the effective ids where the system can (Linux, macOS)."""
    if os.access in os.supports_effective_ids:
        return os.access(path, mode, effective_ids=True)
    return os.access(path, mode)


def _why_unwritable(path: Path) -> str:
    try:
        info, fs = os.stat(path), os.statvfs(path)
    except (OSError, AttributeError):  # (no statvfs on Windows)
        return "is read-only"
    if fs.f_flag & getattr(os, "ST_RDONLY", 1):
        return "is on a read-only file system"
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        try:
            import pwd  # (none on Windows)

            owner = pwd.getpwuid(info.st_uid).pw_name
        except (ImportError, KeyError):  # not in the user database: its number
            owner = str(info.st_uid)
        return f"belongs to user {owner}"
    return f"is read-only ({stat.filemode(info.st_mode)})"


def remove_tree(path: str | os.PathLike) -> None:
    """Delete a folder and everything in it (a file: the file), as ``shutil.rmtree`` does,
    except that a folder of this process's own that it may not write (the copy of a read-only
    index) is made writable first. Nothing there: nothing to do.

    Raises:
        OSError: an entry that still cannot be removed (another user's, a read-only mount);
            the folder is then partly removed, never reported as gone.
    """
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        path.unlink(missing_ok=True)
        return

    def own_bits(folder: Entry) -> bool:
        """Give a folder of this process's own its owner's bits: removing an entry takes a
        folder one can write and search (a file's own bits do not matter)."""
        if not _access(folder.path, os.R_OK | os.W_OK | os.X_OK):
            with contextlib.suppress(OSError):  # rmtree says what it cannot do
                info = os.lstat(folder.path)
                if not hasattr(os, "geteuid") or info.st_uid == os.geteuid():
                    os.chmod(folder.path, stat.S_IMODE(info.st_mode) | stat.S_IRWXU)
        return True

    own_bits(Entry(".", path))
    for _ in walk_tree(path, own_bits):
        pass
    shutil.rmtree(path)


#: The errors of a write that found no room, by errno: what happened, and what to do.
_NO_ROOM: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on device", "free space or choose another output"),
    errno.EDQUOT: ("disk quota exceeded", "free space or choose another output"),
    errno.EFBIG: ("file too large", "raise the limit or choose another output"),
    errno.EROFS: ("read-only file system", "choose another output"),
}
#: How libraries that drop the errno say it: C's strerror (FAISS, safetensors), SQLite's words.
_NO_ROOM_TEXT = {os.strerror(code): code for code in _NO_ROOM} | {
    "database or disk is full": errno.ENOSPC
}
_ERRNO = re.compile(r"\[Errno (\d+)\]")
#: Where FAISS names the file it was writing.
_FAISS_PATH = re.compile(r"write error in (.+?): \d+ != \d+|could not open (.+?) for writing")
#: Errors of the program itself, never of the disk.
_NOT_THE_DISK = (ValueError, TypeError, KeyError, IndexError, AttributeError, NameError)
#: Free space below which a file system counts as full (blocks, reserved space, metadata).
_FULL_BELOW = 1 << 20


def no_room(error: BaseException, path: str | os.PathLike | None = None) -> DiskFullError | None:
    """The :class:`DiskFullError` that ``error`` (or an error it was raised from) means, naming
    the file the error names, else ``path``; None when it means something else."""
    found = _no_room_cause(error)
    return None if found is None else disk_full(found[0], found[1] or path)


def disk_full(
    code: int, path: str | os.PathLike | None, advice: str | None = None
) -> DiskFullError:
    """The error of a write to ``path`` that failed with errno ``code`` (ENOSPC, EDQUOT, EFBIG
    or EROFS): what happened, where, the room left (or the file-size limit), what to do."""
    reason, default = _NO_ROOM[code]
    where = "writing" if path is None else f"writing {os.fspath(path)}"
    free = _free_bytes(path)
    if code == errno.EFBIG:
        limit = _file_size_limit()
        room = (
            "larger than the file system takes"
            if limit is None
            else f"the file-size limit, ulimit -f, is {_mib(limit)}"
        )
    elif code == errno.EROFS or free is None:
        room = None
    else:
        room = f"{_mib(free)} free"
    message = f"{reason} {where}{'' if room is None else f' ({room})'}: {advice or default}"
    return DiskFullError(message, None if path is None else os.fspath(path), code, free)


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def _file_size_limit() -> int | None:
    """This process's file-size limit (``ulimit -f``) in bytes, None when unlimited."""
    try:
        import resource
    except ImportError:  # Windows: no file-size limit to look at
        return None
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if limit == resource.RLIM_INFINITY else limit


@contextmanager
def writing(
    path: str | os.PathLike | None,
    *,
    remove: Iterable[str | os.PathLike] = (),
    advice: str | None = None,
) -> Iterator[None]:
    """Run a write to ``path``; on any failure delete ``remove`` (half-written temporary files
    or folders), and turn a failure for want of room into one :class:`DiskFullError`.

    The error names the file the failure names (FAISS's temporary file, the file a copy was
    writing), else ``path``. ``advice`` replaces the usual "free space or choose another
    output" (a cache says which variable moves it).
    """
    remove = [Path(p) for p in remove]
    try:
        yield
    except BaseException as e:
        found = None
        if isinstance(e, Exception) and not isinstance(e, DotcatError):  # said already
            found = _no_room_cause(e)
            if found is None and not isinstance(e, _NOT_THE_DISK):
                # Writers that drop the errno (PyTorch's "basic_ios::clear: iostream error",
                # SQLite's "disk I/O error"): no room if the disk is full or a file written
                # here reached the file-size limit.
                found = _exhausted([Path(path), *remove] if path is not None else remove)
        for leftover in remove:
            with contextlib.suppress(OSError):  # (what cannot be removed is left)
                remove_tree(leftover)
        if found is None:
            raise
        raise disk_full(found[0], found[1] or path, advice) from e


@contextmanager
def replacing(
    path: str | os.PathLike, suffix: str = ".tmp", advice: str | None = None
) -> Iterator[Path]:
    """A temporary name beside ``path`` (``path`` + ``suffix``) for a writer that needs a name
    (FAISS, SQLite); renamed over ``path`` when the block ends cleanly, removed when it fails, a
    full disk reported as by :func:`writing`. The old ``path`` is untouched until the rename."""
    path = Path(path)
    tmp = path.with_name(path.name + suffix)
    with writing(path, remove=[tmp], advice=advice):
        yield tmp
        os.replace(tmp, path)


def writes(parameter: str, advice: str | None = None) -> Callable:
    """Decorate a function that writes under the path given as its argument ``parameter``
    (an index, a model directory): any write inside that finds no room raises one
    :class:`DiskFullError` (see :func:`writing`)."""

    def decorate(function: Callable) -> Callable:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            path = signature.bind_partial(*args, **kwargs).arguments.get(parameter)
            with writing(path, advice=advice):
                return function(*args, **kwargs)

        return wrapper

    return decorate


def causes(error: BaseException | None) -> Iterator[BaseException]:
    """``error``, then each error it was raised from or during (``__cause__``, else
    ``__context__``), each once."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _no_room_cause(error: BaseException) -> tuple[int, str | None] | None:
    """``(errno, the file it names or None)`` for the first error in ``error``'s chain of
    causes that reports no room, else None."""
    return next((found for e in causes(error) if (found := _no_room_in(e))), None)


def _no_room_in(error: BaseException) -> tuple[int, str | None] | None:
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        for entry in error.args[0]:  # copytree's (source, destination, why) per failed file
            if isinstance(entry, tuple) and len(entry) == 3:
                match = _ERRNO.search(str(entry[2]))
                if match and int(match.group(1)) in _NO_ROOM:
                    return int(match.group(1)), str(entry[1])
        return None
    if isinstance(error, OSError) and error.errno is not None:
        if error.errno not in _NO_ROOM:
            return None
        return error.errno, None if error.filename is None else os.fsdecode(error.filename)
    text = str(error)
    code = next((c for words, c in _NO_ROOM_TEXT.items() if words in text), None)
    if code is None:
        return None
    where = _FAISS_PATH.search(text)
    return code, (where.group(1) or where.group(2)) if where else None


def _exhausted(paths: list[Path]) -> tuple[int, None] | None:
    """ENOSPC where a file system under ``paths`` is (nearly) full; EFBIG where a file there
    has reached this process's file-size limit; else None."""
    limit = _file_size_limit()
    for path in paths:
        free = _free_bytes(path)
        if free is not None and free < _FULL_BELOW:
            return errno.ENOSPC, None
        if limit is not None and any(size >= limit for size in _file_sizes(path)):
            return errno.EFBIG, None
    return None


def _file_sizes(path: Path) -> Iterator[int]:
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):  # and SQLite's beside it
        if file.is_file():
            yield file.stat().st_size
    if path.is_dir():
        yield from (entry.info.st_size for entry in walk_tree(path) if entry.is_file)


def _free_bytes(path: str | os.PathLike | None) -> int | None:
    if path is None:
        return None
    try:
        return shutil.disk_usage(nearest_existing(Path(path))).free
    except (OSError, StopIteration):
        return None


def write_text(path: str | os.PathLike, lines: Iterable[str], mode: int | None = None) -> None:
    """Write ``lines`` (UTF-8) atomically: a temporary file beside ``path``, flushed to disk,
    renamed over it. A crash leaves the old file or the new one, never half of one. Parent
    directories are created. The file gets ``mode`` (None: a normal file's, by the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with writing(path, remove=[tmp]):
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~UMASK if mode is None else mode)  # mkstemp creates 0600
        os.replace(tmp, path)


def write_json(path: str | os.PathLike, value: Any, indent: int | None = 2) -> None:
    """Write ``value`` as JSON (UTF-8) atomically (:func:`write_text`)."""
    write_text(path, [json.dumps(value, indent=indent, ensure_ascii=False), "\n"])


def move_into(src: Path, dst: Path, last: str = ".safetensors") -> None:
    """Move the entries of folder ``src`` into ``dst`` with ``os.replace`` (same file system),
    replacing what is there, the files ending in ``last`` (the weights) last: a crash on the
    way leaves the old weights or the new, never half a file."""
    for entry in sorted(Path(src).iterdir(), key=lambda p: (p.name.endswith(last), p.name)):
        target, old = Path(dst) / entry.name, Path(src) / f".old-{entry.name}"
        if entry.is_dir() and target.is_dir():  # moved aside, removed once the new one is in
            os.replace(target, old)
        os.replace(entry, target)
        shutil.rmtree(old, ignore_errors=True)


def read_json_or_none(path: str | os.PathLike) -> Any:
    """The JSON in ``path``, or None where it is missing or unreadable (a run not yet begun)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def atomic_dir(
    target: str | os.PathLike, fill: Callable[[Path], Any], unique: bool = False
) -> None:
    """Fill a temporary sibling folder, then rename it to ``target`` (no half-written data).

    Whatever ``fill`` raises (Ctrl-C included), the temporary folder is removed and ``target``
    is left as it was; an earlier ``target`` is renamed aside and removed only once the new
    one is in place, so a crash while it is removed loses neither. The folder is
    ``.NAME.tmp`` (what a killed fill left there removed first), or with ``unique`` one of this
    call's own: writers of one target at once (a cache entry) each fill theirs, and the last
    rename wins."""
    target = Path(target)
    if unique:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        os.chmod(tmp, 0o777 & ~UMASK)  # mkdtemp makes it 0700; the result is a normal folder
    else:
        tmp = target.with_name(f".{target.name}.tmp")
        for stale in (tmp, Path(f"{tmp}.old")):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir(parents=True)
    with writing(target, remove=[tmp]):
        fill(tmp)
        if target.exists():
            os.replace(target, f"{tmp}.old")
        os.replace(tmp, target)
    shutil.rmtree(f"{tmp}.old", ignore_errors=True)
