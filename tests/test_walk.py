"""Every path a folder walk can meet is one entry, never an exception (issue 64).

:func:`dotcat.files.walk_tree` is the one walk of a folder (a corpus, an index, a model): an
unreadable folder or file, a path past PATH_MAX, a loop of links, a broken link, a FIFO, a
socket, a device, a name that is not UTF-8. A corpus folder names each one it skips in one
warning (an error with ``strict``), and the index-inside-its-corpus check meets them too.

Unreadable paths are tested as a user: mode 000 does not hold root, so a root run gives up
``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` (``setpriv``) for the command under test.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dotcat.data import CorpusOptions
from dotcat.data.corpus import iter_corpus
from dotcat.data.sources import open_source
from dotcat.errors import DataFormatError
from dotcat.files import walk_tree

CLI = [sys.executable, "-c", "import sys; from dotcat.cli import app; sys.exit(app())"]
#: A name of 200 bytes: 21 folders of them make a path past Linux's PATH_MAX (4,096 bytes).
LONG = "d" * 200


def _deep(folder: Path, levels: int = 21) -> str:
    """Folders nested past PATH_MAX, a text file at the bottom (made relative to a folder
    descriptor: no path that long can be given whole); returns its relative path."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir(LONG, dir_fd=fd)
            inner = os.open(LONG, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"deep text")
        os.close(out)
    finally:
        os.close(fd)
    return "/".join([LONG] * levels)


@pytest.fixture()
def odd(tmp_path) -> Path:
    """A folder of one readable text and one of everything else a walk can meet."""
    root = tmp_path / "odd"
    root.mkdir()
    (root / "ok.txt").write_text("a readable note")
    os.mkfifo(root / "pipe.txt")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "sock.md"))
    (root / "null.txt").symlink_to("/dev/null")  # a device (no mknod needed)
    (root / "gone.md").symlink_to(root / "nowhere.md")
    (root / "loop1.txt").symlink_to("loop2.txt")
    (root / "loop2.txt").symlink_to("loop1.txt")
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "up").symlink_to("..")  # a link to a folder: not followed
    (root / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"a Latin-1 name")
    deep = _deep(root)
    yield root, deep
    server.close()


EXPECTED = {
    "gone.md": "a broken symbolic link",
    "loop1.txt": "a loop of symbolic links",
    "loop2.txt": "a loop of symbolic links",
    "null.txt": "a device",
    "pipe.txt": "a named pipe (FIFO)",
    "sock.md": "a socket",
    "caf\\xe9.txt": "a name that is not UTF-8",
    "elsewhere/up": "a link to a folder (not followed: index the folder itself)",
}


def test_the_walk_meets_every_kind_of_path_as_an_entry(odd):
    root, deep = odd
    entries = list(walk_tree(root))
    problems = {e.rel: e.problem for e in entries if e.problem}
    too_long = {rel: why for rel, why in problems.items() if rel.startswith(LONG)}
    assert {k: v for k, v in problems.items() if k not in too_long} == EXPECTED
    assert list(too_long.values()) == ["path longer than the system allows (PATH_MAX)"]
    assert deep.startswith(next(iter(too_long)))  # the folder that could not be listed
    assert [e.rel for e in entries if e.is_file] == ["ok.txt"]
    rels = [e.rel for e in entries]
    assert rels == sorted(rels, key=lambda rel: rel.split("/"))  # by path components


def test_a_corpus_folder_names_each_path_it_skips_in_one_warning(odd, caplog):
    """Nothing is opened but the readable file: a FIFO opened would wait for a writer."""
    root, _ = odd
    found: list = []
    with caplog.at_level(logging.WARNING, logger="dotcat"):
        reader = threading.Thread(target=lambda: found.extend(iter_corpus(root)), daemon=True)
        reader.start()
        reader.join(timeout=120)
    assert not reader.is_alive(), "the read blocks (a FIFO was opened)"
    assert [d.id for d in found] == ["ok.txt"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    skipped = [w for w in warnings if "files that cannot be read" in w]
    assert len(skipped) == 1 and "skipped 9 of 10 files" in skipped[0], warnings
    for rel in ("caf\\xe9.txt", "elsewhere/up", "gone.md", "loop1.txt"):  # the first five named
        assert f"{rel} ({EXPECTED[rel]})" in skipped[0]
    assert f"{LONG[:50]}..." in skipped[0]  # a path past PATH_MAX, shortened
    assert "and 4 more" in skipped[0] and "Traceback" not in caplog.text


def test_strict_stops_at_the_first_path_it_cannot_read(odd):
    root, _ = odd
    source = open_source(root, CorpusOptions(strict=True))  # listed: no error yet
    with pytest.raises(DataFormatError) as stopped:
        list(iter_corpus(source))
    assert (
        str(stopped.value) == f"{root}/caf\\xe9.txt: cannot read: a name that is not UTF-8 (strict)"
    )


# -- unreadable paths, as a user ------------------------------------------------------------


def _as_a_user(args: list) -> list[str]:
    """``args`` run so that file permissions hold: as they are for a user, for root without
    the capabilities that pass them by."""
    if os.geteuid() != 0:
        return [str(a) for a in args]
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: mode 000 would not hold the command")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *map(str, args)]


def _run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        _as_a_user([*CLI, *args]), cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture()
def locked(tmp_path) -> Path:
    """docs/: a note, a mode-000 sub-folder (where the index-inside check looks for a
    manifest), a mode-000 file, a path past PATH_MAX; and a query file."""
    docs = tmp_path / "docs"
    (docs / "locked").mkdir(parents=True)
    (docs / "a.md").write_text("# Alpha\n\nalpha words here")
    (docs / "locked" / "b.md").write_text("never read")
    (docs / "secret.txt").write_text("never read either")
    _deep(docs)
    (tmp_path / "q.jsonl").write_text('{"_id": "q1", "text": "alpha"}\n')
    tmp_path.chmod(0o755)
    (docs / "locked").chmod(0)
    (docs / "secret.txt").chmod(0)
    yield tmp_path
    (docs / "locked").chmod(0o755)


def test_unreadable_folders_files_and_long_paths_are_one_warning_not_a_traceback(locked):
    """They were tracebacks from the index-inside-its-corpus check: ``PermissionError: ...
    'docs/locked/manifest.json'`` and ``OSError: [Errno 36] File name too long``."""
    done = _run(["bm25", "docs", "--queries", "q.jsonl", "--output", locked / "run.trec"], locked)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if "cannot be read" in line]
    assert len(lines) == 1 and "skipped 3 of 4 files" in lines[0], done.stderr
    assert "locked (permission denied)" in lines[0]
    assert "secret.txt (Permission denied)" in lines[0]
    assert "(path longer than the system allows (PATH_MAX))" in lines[0]
    assert (locked / "run.trec").read_text().split()[2] == "a.md"

    strict = _run(["bm25", "docs", "--queries", "q.jsonl", "--output", "r", "--strict"], locked)
    assert strict.returncode == 2 and "Traceback" not in strict.stderr, strict.stderr
    assert "cannot read: path longer than the system allows" in strict.stderr  # first in order
    assert strict.stderr.strip().endswith("(--strict)")


def test_an_unreadable_corpus_folder_is_one_line(locked):
    """From the command line (its argument check) and from Python (the walk)."""
    done = _run(["bm25", "docs/locked", "--queries", "q.jsonl", "--output", "r"], locked)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "'docs/locked' is not readable" in done.stderr
    code = "from dotcat.data.sources import open_source\nopen_source('docs/locked')"
    python = subprocess.run(
        _as_a_user([sys.executable, "-c", code]), cwd=locked, capture_output=True, text=True
    )
    assert python.stderr.strip().splitlines()[-1] == (
        "dotcat.errors.DataFormatError: docs/locked: cannot be read: permission denied"
    )


def test_the_other_walks_meet_the_same_folder_without_an_error(locked):
    """A folder of shards, an index's check before a write, the index-inside check."""
    code = "\n".join([
        "from pathlib import Path",
        "from dotcat.data.index_source import indexes_in, is_index_dir",
        "from dotcat.data.sources import is_index_folder",
        "from dotcat.files import unwritable",
        "locked = Path('docs/locked')",
        "print(indexes_in('docs'), is_index_dir(locked), is_index_folder(locked))",
        "path, why = unwritable(Path('docs'))",
        "print(path.relative_to('docs').parts[0] == 'd' * 200, why)",
    ])  # fmt: skip
    done = subprocess.run(
        _as_a_user([sys.executable, "-c", code]), cwd=locked, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[] False False", "True cannot be read"]
