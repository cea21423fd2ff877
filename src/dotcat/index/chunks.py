"""A build's vectors, written chunk by chunk and logged, so an interrupted build resumes.

A build folder holds:

* ``build.json``: the plan (corpus fingerprint, encoder fingerprint and settings, FAISS spec,
  chunk size, shard); a re-run resumes only under the same plan, and names what differs;
* ``vectors.npy``: float32 rows in position order, written with ``pwrite`` (no memory map, so
  the process's resident memory does not grow with the corpus);
* ``chunks.jsonl``: one line per written part of a chunk, ``{"chunk", "start", "stop",
  "sha256"}``, appended only after the part's rows are on disk (``fdatasync``), then synced
  itself. A chunk is written whole (Ray) or in parts from its start (a local build writes one
  part per minute or so of encoding, :func:`dotcat.index.build._encode_chunks`), so that a
  chunk of thousands of long passages (one 20 MB document) keeps its work too.

A kill at any moment loses at most the part being encoded: on resume every logged part is
read back and its checksum compared, and what follows a part that fails (a torn write after
power loss) is encoded again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dotcat.errors import DotcatError
from dotcat.files import read_json_or_none, replacing, write_text, writing

logger = logging.getLogger(__name__)

PLAN_FILE = "build.json"
VECTORS_FILE = "vectors.npy"
LOG_FILE = "chunks.jsonl"
FORMAT = "dotcat-build"
FORMAT_VERSION = 1


def read_plan(folder: Path) -> dict[str, Any] | None:
    """The plan recorded in a build folder (None: none, or unreadable)."""
    record = read_json_or_none(folder / PLAN_FILE) or {}
    if record.get("format") != FORMAT or record.get("format_version") != FORMAT_VERSION:
        return None
    return record.get("plan")


def write_plan(folder: Path, plan: Mapping[str, Any]) -> None:
    record = {"format": FORMAT, "format_version": FORMAT_VERSION, "plan": plan}
    write_text(folder / PLAN_FILE, [json.dumps(record, indent=1, sort_keys=True)])


def plan_differences(recorded: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """``"key: recorded -> wanted"`` for every setting that differs (nested keys dotted)."""
    out: list[str] = []
    for key in sorted(set(recorded) | set(wanted)):
        a, b = recorded.get(key), wanted.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += [f"{key}.{d}" for d in plan_differences(a, b)]
        elif a != b:
            out.append(f"{key}: {_short(a)} -> {_short(b)}")
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class ChunkStore:
    """The vectors file and chunk log of one build folder (see the module docstring).

    Args:
        folder: the build folder.
        n: rows (documents) in all.
        dim: vector dimension.
        chunk_size: rows per chunk; chunk ``c`` holds rows ``[c * chunk_size, ...)``.
    """

    def __init__(self, folder: Path, n: int, dim: int, chunk_size: int) -> None:
        self.folder = Path(folder)
        self.n, self.dim, self.chunk_size = n, dim, chunk_size
        self.path = self.folder / VECTORS_FILE
        self.log_path = self.folder / LOG_FILE
        self.row_bytes = dim * 4
        if not self.path.exists():
            self._create()
        with open(self.path, "rb") as f:  # the rows start after the header, checked
            shape, fortran, dtype = npy_header(f)
            if shape != (n, dim) or fortran or dtype != np.dtype("<f4"):
                raise DotcatError(f"{f.name}: holds {dtype} {shape}, expected float32 {(n, dim)}")
            self.offset = f.tell()

    @property
    def n_chunks(self) -> int:
        return -(-self.n // self.chunk_size)

    def chunk_range(self, chunk: int) -> tuple[int, int]:
        start = chunk * self.chunk_size
        return start, min(self.n, start + self.chunk_size)

    def rows(self, chunk: int) -> int:
        start, stop = self.chunk_range(chunk)
        return stop - start

    def _create(self) -> None:
        """An .npy header and a sparse file of the full size (nothing written, nothing mapped)."""
        with replacing(self.path) as tmp, open(tmp, "wb") as f:
            header = {"descr": "<f4", "fortran_order": False, "shape": (self.n, self.dim)}
            np.lib.format.write_array_header_1_0(f, header)
            f.truncate(f.tell() + self.n * self.row_bytes)
        self.log_path.unlink(missing_ok=True)

    def write(self, chunk: int, vectors: np.ndarray, offset: int = 0) -> None:
        """Write rows of a chunk durably (its whole, or the part from its row ``offset`` on),
        then log them."""
        first, last = self.chunk_range(chunk)
        start, stop = first + offset, first + offset + len(vectors)
        data = np.ascontiguousarray(vectors, dtype="<f4")
        if data.shape != (stop - start, self.dim) or not first <= start < stop <= last:
            raise ValueError(
                f"chunk {chunk}: rows {start}..{stop} of shape {data.shape} do not fit its rows "
                f"{first}..{last} of {self.dim} dims"
            )
        raw = data.tobytes()
        with writing(self.path):  # a full disk names the file
            fd = os.open(self.path, os.O_WRONLY)
            try:
                _pwrite_all(fd, raw, self.offset + start * self.row_bytes)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        line = {"chunk": chunk, "start": start, "stop": stop, "sha256": _sha(raw)}
        with writing(self.log_path), open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` as a float32 array (a plain read, no memory map)."""
        with open(self.path, "rb") as f:
            raw = os.pread(
                f.fileno(), (stop - start) * self.row_bytes, self.offset + start * self.row_bytes
            )
        if len(raw) != (stop - start) * self.row_bytes:
            raise DotcatError(f"{self.path}: truncated (rows {start}..{stop})")
        return np.frombuffer(raw, dtype="<f4").reshape(stop - start, self.dim)

    def iter_rows(self, block: int = 65_536) -> Iterator[np.ndarray]:
        """Every row, in order, ``block`` rows at a time."""
        for start in range(0, self.n, block):
            yield self.read(start, min(self.n, start + block))

    def finished(self, verify: bool = True) -> set[int]:
        """Chunks written whole (and, with ``verify``, whose rows still match the log)."""
        return {c for c, rows in self.encoded(verify).items() if rows == self.rows(c)}

    def encoded(self, verify: bool = True) -> dict[int, int]:
        """``chunk -> rows written from its start`` (whole chunks, and the head of one being
        encoded when the build stopped), with ``verify`` read back and checked: the parts
        logged are chained from each chunk's start; a gap or a part whose checksum fails ends
        its chunk's head there."""
        try:
            lines = self.log_path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return {}
        parts = []
        for line in lines:
            try:
                entry = json.loads(line)
                first, last = self.chunk_range(entry["chunk"])
                if first <= entry["start"] < entry["stop"] <= last:
                    parts.append((entry["chunk"], entry["start"], entry["stop"], entry["sha256"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a crash: its rows are simply encoded again
        done: dict[int, int] = {}
        for chunk, start, stop, sha in sorted(parts):
            head = self.chunk_range(chunk)[0] + done.get(chunk, 0)
            if not start <= head < stop:
                continue  # a gap before it (or nothing new)
            if verify and _sha(self.read(start, stop).tobytes()) != sha:
                logger.warning(
                    "rows %d..%d of %s failed their checksum; encoding them again",
                    start, stop, self.path,
                )  # fmt: skip
                continue
            done[chunk] = stop - self.chunk_range(chunk)[0]
        return done


def npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the .npy file open in ``f`` (left after it)."""
    if np.lib.format.read_magic(f) == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


def _sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``: a write may be short (a file system filling up
    writes what fits and says so only on the next call, which raises ENOSPC)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written == 0:  # no error and no progress: no room either
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view, offset = view[written:], offset + written
