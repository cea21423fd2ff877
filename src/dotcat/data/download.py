"""Downloading a dataset archive and unpacking it into a BEIR directory, safely.

:func:`download` fetches one URL over HTTP(S) into a ``.part`` file with a progress bar. A
transfer that breaks off (a dropped connection, a timeout, a body shorter than its
``Content-Length``, a 5xx answer) is retried after a pause, resuming where it stopped with a
``Range`` request (RFC 9110, section 14) when the server honours it; a 404 or another refusal
is not retried.

Every wait on the network is bounded and said: the download's bar shows what is awaited (the
server, and for how long at most) from before the connection is made; a connection, an answer
and each
block of the body wait at most :func:`network_timeout` seconds (``DOTCAT_NETWORK_TIMEOUT``,
default :data:`TIMEOUT`); a server that takes the connection and never answers is asked
:data:`SILENT_ATTEMPTS` times, then given up on, naming the wait.

The finished file's md5 is checked against the published one when there is one; its size and
sha256 are computed either way and returned, to be recorded.

:func:`extract_zip` reads a zip (BEIR's: one top folder holding ``corpus.jsonl``,
``queries.jsonl`` and ``qrels/<split>.tsv``) into a temporary folder that
:func:`fill_atomically` renames into place once :func:`check_beir_layout` accepts it: the
target is either absent or complete. Members that would land outside the folder (absolute
paths, ``..``) are refused.

Nothing half-written is ever read as data: a partial download stays a ``.part`` file (kept to
resume the next attempt, removed when its checksum fails), and a failed unpacking removes its
temporary folder.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import logging
import os
import shutil
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dotcat.errors import DotcatError
from dotcat.files import atomic_dir
from dotcat.progress import progress_bar
from dotcat.version import __version__

logger = logging.getLogger(__name__)

#: Pauses (seconds) before the second, third and fourth attempt of a broken transfer.
RETRY_WAITS = (1.0, 4.0, 10.0)
#: Seconds each network wait may last (a connection, an answer, a block of the body).
TIMEOUT = 30.0
TIMEOUT_ENV = "DOTCAT_NETWORK_TIMEOUT"
#: Attempts a server that never answers is given (a silent one rarely wakes up).
SILENT_ATTEMPTS = 2
_BLOCK = 1 << 20
#: HTTP statuses worth asking again: a timeout, too many requests, a server's own trouble.
_RETRY_STATUSES = {408, 429, 500, 502, 503, 504}
#: Errors of the network itself at connection time: no retry helps a machine offline.
_OFFLINE_ERRNOS = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED}


class DownloadError(DotcatError):
    """A download that failed; ``offline`` when the network itself could not be reached."""

    def __init__(self, message: str, offline: bool = False) -> None:
        super().__init__(message)
        self.offline = offline


@dataclass(frozen=True)
class Downloaded:
    """A complete download: where it is, its size and checksums."""

    path: Path
    url: str
    size: int
    md5: str
    sha256: str


class _Broken(Exception):
    """A transfer that stopped early: worth another attempt, resuming."""


class _Silent(_Broken):
    """No answer at all within the timeout (a connection taken and never answered)."""


def network_timeout() -> float:
    """Seconds one network wait may last: ``DOTCAT_NETWORK_TIMEOUT``, else :data:`TIMEOUT`.

    Raises:
        DotcatError: the variable is set to something other than a positive number.
    """
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise DotcatError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds > 0")
    return value


def download(
    url: str,
    part: Path,
    *,
    md5: str | None = None,
    size: int | None = None,
    retry_waits: Sequence[float] = RETRY_WAITS,
    timeout: float | None = None,
    desc: str | None = None,
) -> Downloaded:
    """Download ``url`` into the file ``part``, resuming and retrying (module docstring).

    Args:
        url: what to fetch (``http``, ``https`` or ``file``).
        part: the file to write; bytes already there are resumed from.
        md5: the published md5 of the whole file, checked at the end.
        size: the expected size in bytes (a checksum recorded earlier), checked at the end.
        retry_waits: the pause before each new attempt; their number is the retries' number.
        timeout: seconds without an answer or a byte before an attempt counts as broken
            (default :func:`network_timeout`).

    Returns:
        The finished file's size, md5 and sha256.

    Raises:
        DownloadError: a refusal (404...), the network out of reach (``offline``), every
            attempt broken off, a server silent :data:`SILENT_ATTEMPTS` times, a size or md5
            that differs (the file is removed then), or a file that cannot be written.
    """
    timeout = timeout or network_timeout()
    part.parent.mkdir(parents=True, exist_ok=True)
    desc = desc or PurePosixPath(url).name
    logger.info("%s: downloading %s (each network wait at most %g s: %s)", desc, url, timeout,
                TIMEOUT_ENV)  # fmt: skip
    with progress_bar(desc=f"downloading {desc}", unit="B", unit_scale=True,
                      unit_divisor=1024) as bar:  # fmt: skip
        _attempts(url, part, timeout, retry_waits, bar)
    return _verify(url, part, md5, size)


def _attempts(url: str, part: Path, timeout: float, retry_waits: Sequence[float], bar) -> None:
    """Transfer ``url`` into ``part``, again after a break (at most ``len(retry_waits)``
    times), giving up on a silent server after :data:`SILENT_ATTEMPTS` tries."""
    host = urllib.parse.urlsplit(url).netloc or url
    attempts, silent = len(retry_waits) + 1, 0
    for attempt in range(attempts):
        # Said before each wait, at once (a server may take the connection and say nothing).
        bar.set_postfix_str(f"waiting for {host}, at most {timeout:g} s", refresh=True)
        try:
            _transfer(url, part, timeout, bar)
            return
        except _Broken as e:
            silent += isinstance(e, _Silent)
            if silent == SILENT_ATTEMPTS:
                raise DownloadError(
                    f"{url}: {e}, {silent} times: the server takes the connection and does "
                    "not answer; try again later, or another mirror"
                ) from None
            if attempt == attempts - 1:
                raise DownloadError(
                    f"{url}: the transfer broke off {attempts} times ({e}); run the same "
                    "command again to resume"
                ) from None
            wait = retry_waits[attempt]
            resuming = " (resuming)" if part.exists() and part.stat().st_size else ""
            logger.warning("%s: %s; trying again in %g s%s", url, e, wait, resuming)
            time.sleep(wait)


def _transfer(url: str, part: Path, timeout: float, bar) -> None:
    """One attempt: ask for the bytes after those already in ``part`` and append them."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"dotcat/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout
        )
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the range starts at or past the end of the file
            if e.headers.get("Content-Range", "") == f"bytes */{have}":
                return  # the .part is the whole file already (an earlier run stopped after it)
            part.unlink()
            raise _Broken("the partial file did not match the server's; starting over") from None
        if e.code in _RETRY_STATUSES:
            raise _Broken(f"HTTP {e.code} {e.reason}") from None
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise _connection_error(url, e.reason, timeout) from None
    except TimeoutError:
        raise _Silent(f"no answer within {timeout:g} s") from None
    except (OSError, http.client.HTTPException) as e:
        raise _Broken(_describe(e)) from None
    with response:
        start, total = _range_of(response, have)
        if start == 0 and have:
            logger.info("%s: the server does not resume; starting over", url)
        _append(response, part, (start, total), bar, timeout)


def _range_of(response, have: int) -> tuple[int, int | None]:
    """Where the answer's bytes start in the file (0 or ``have``) and the file's full size."""
    length = response.headers.get("Content-Length")
    length = int(length) if length and length.isdigit() else None
    if response.status != 206:
        return 0, length
    content_range = response.headers.get("Content-Range", "")  # bytes START-END/TOTAL
    try:
        span, total = content_range.split()[1].split("/")
        start = int(span.split("-")[0])
    except (IndexError, ValueError):
        raise _Broken(f"unreadable Content-Range {content_range!r}") from None
    if start != have:
        raise _Broken(f"the server resumed at byte {start}, not {have}")
    return start, int(total) if total.isdigit() else None


def _append(response, part: Path, span: tuple[int, int | None], bar, timeout: float) -> None:
    """Write the answer's body into ``part`` from byte ``start`` (of ``total``, when known),
    advancing ``bar``; a short body, or ``timeout`` seconds without a byte, is broken."""
    start, total = span
    written = start
    bar.reset(total=total)
    bar.update(start)
    bar.set_postfix_str("")
    with open(part, "ab" if start else "wb") as out:
        while True:
            try:
                block = response.read(_BLOCK)
            except TimeoutError:
                raise _Broken(f"no byte for {timeout:g} s after {written} bytes") from None
            except (OSError, http.client.HTTPException) as e:
                raise _Broken(_describe(e)) from None
            if not block:
                break
            try:
                out.write(block)
            except OSError as e:
                raise DownloadError(f"{part}: cannot write ({e.strerror or e})") from None
            written += len(block)
            bar.update(len(block))
    if total is not None and written < total:
        raise _Broken(f"the connection closed after {written} of {total} bytes")
    if total is not None and written > total:
        part.unlink()
        raise _Broken(f"got {written} bytes, more than the {total} announced; starting over")


def _verify(url: str, part: Path, md5: str | None, size: int | None) -> Downloaded:
    """The finished file's checksums, checked against the expected ones (removed if wrong)."""
    md5_hash, sha256_hash = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with open(part, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            md5_hash.update(block)
            sha256_hash.update(block)
    got = Downloaded(part, url, part.stat().st_size, md5_hash.hexdigest(), sha256_hash.hexdigest())
    if size is not None and got.size != size:
        part.unlink()
        raise DownloadError(
            f"{url}: {got.size} bytes, expected {size} (as first downloaded); the file was removed"
        )
    if md5 is not None and got.md5 != md5.lower():
        part.unlink()
        raise DownloadError(
            f"{url}: md5 {got.md5}, expected {md5} (the published checksum): a corrupt or "
            "changed file; it was removed"
        )
    return got


def _connection_error(url: str, reason: object, timeout: float) -> Exception:
    """A failure to connect: offline (no DNS, no route, refused) or worth another attempt."""
    if isinstance(reason, TimeoutError):
        return _Silent(f"no answer within {timeout:g} s")
    if isinstance(reason, socket.gaierror) or (
        isinstance(reason, OSError) and reason.errno in _OFFLINE_ERRNOS
    ):
        return DownloadError(f"{url}: no network ({_describe(reason)})", offline=True)
    if isinstance(reason, OSError | http.client.HTTPException):
        return _Broken(_describe(reason))
    return DownloadError(f"{url}: {reason}")


def _describe(error: object) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


# -- unpacking --------------------------------------------------------------------------------

#: What a BEIR directory holds (either name of each).
BEIR_CORPUS = ("corpus.jsonl", "corpus.jsonl.gz")
BEIR_QUERIES = ("queries.jsonl", "queries.jsonl.gz")


def extract_zip(archive: Path, folder: Path) -> None:
    """Extract a zip into ``folder`` (a fresh temporary one: see :func:`fill_atomically`).

    The archive's single top folder, if it has one, is dropped: BEIR's ``nfcorpus/corpus.jsonl``
    becomes ``folder/corpus.jsonl``. Every member's CRC is checked before anything is written.

    Raises:
        DotcatError: not a zip archive (a truncated one, say), a corrupt member, or a member
            outside the folder.
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            members = _members(zf, archive)
            bad = zf.testzip()
            if bad is not None:
                raise DotcatError(f"{archive.name}: member {bad} is corrupt (CRC mismatch)")
            for info, relative in members:
                destination = folder.joinpath(*relative.parts)
                destination.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(destination, "wb") as dst:
                    shutil.copyfileobj(src, dst, _BLOCK)
    except zipfile.BadZipFile as e:
        raise DotcatError(f"{archive.name}: not a readable zip archive ({e})") from None


def _members(zf: zipfile.ZipFile, archive: Path) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """The archive's files with their paths inside the target (top folder dropped)."""
    files = []
    for info in zf.infolist():
        path = PurePosixPath(info.filename)
        if path.is_absolute() or ".." in path.parts or ":" in info.filename:
            raise DotcatError(f"{archive}: member {info.filename!r} points outside the folder")
        if info.is_dir() or path.parts[0] == "__MACOSX" or path.name == ".DS_Store":
            continue
        files.append((info, path))
    if not files:
        raise DotcatError(f"{archive}: the archive holds no file")
    tops = {path.parts[0] for _, path in files}
    if len(tops) == 1 and all(len(path.parts) > 1 for _, path in files):
        return [(info, PurePosixPath(*path.parts[1:])) for info, path in files]
    return files


def check_beir_layout(folder: Path, source: object) -> None:
    """Refuse a folder without a corpus, queries and at least one ``qrels/<split>.tsv``."""
    missing = [
        names[0]
        for names in (BEIR_CORPUS, BEIR_QUERIES)
        if not any((folder / name).is_file() for name in names)
    ]
    qrels = folder / "qrels"
    if not (qrels.is_dir() and any(p.name.endswith((".tsv", ".tsv.gz")) for p in qrels.iterdir())):
        missing.append("qrels/<split>.tsv")
    if missing:
        raise DotcatError(f"{source}: not a BEIR dataset: no {', no '.join(missing)} inside")


def fill_atomically(target: Path, fill: Callable[[Path], None]) -> None:
    """Fill a temporary folder beside ``target``, then rename it to ``target``
    (:func:`dotcat.files.atomic_dir`); ``target`` must be absent or an empty folder.

    Raises:
        DotcatError: ``target`` exists and is not an empty folder.
    """
    target = Path(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise DotcatError(f"{target}: exists and is not empty; remove it or choose another folder")
    atomic_dir(target, fill)
