"""An index is never lost or left behind: kills during a swap or a build, odd paths, damage.

The kill tests run a real build in a child process that SIGKILLs itself at the injected
point (between the two renames of a swap, after an atomic exchange, in the middle of
encoding), then check what the next open or build of the same path does.
"""

from __future__ import annotations

import gzip
import json
import logging
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.index import DenseIndex, IndexConfig, build_index, layout
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.search.dense import DenseRetriever

# A child build that kills itself where WHERE says; argv: model corpus index where.
_CHILD = textwrap.dedent(
    """
    import os, shutil, signal, sys
    from pathlib import Path
    from dotcat.index import build_index, faiss_index, layout
    from dotcat.models import EncoderConfig

    model, corpus, index, where = sys.argv[1:]
    index = Path(index)
    die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    real_replace = os.replace
    if where == "between-renames":
        layout._exchange = lambda a, b: False  # the two-rename path (no RENAME_EXCHANGE)
        def replace(src, dst):
            if Path(dst) == index and Path(src) == layout.build_path(index):
                die()
            return real_replace(src, dst)
        os.replace = replace
    elif where == "after-exchange":
        real_exchange = layout._exchange
        def exchange(a, b):
            assert real_exchange(a, b)  # this filesystem has RENAME_EXCHANGE
            die()
        layout._exchange = exchange
    elif where == "encoding":
        faiss_index.add_vectors = die
    config = EncoderConfig(model=model, device="cpu", precision="fp32")
    build_index(corpus, index, config, overwrite=True, show_progress=False)
    """
)


def _corpus(path: Path, n: int) -> Path:
    """A JSONL corpus of ``n`` documents (n tells two builds apart)."""
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"_id": f"d{i}", "title": f"doc {i}", "text": f"text {i}"}) + "\n")
    return path


def _killed_build(model: Path, corpus: Path, index: Path, where: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model), str(corpus), str(index), where],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -9, done.stderr  # it really died at the injected point


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir) -> BiEncoder:
    config = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    return BiEncoder.load(config)


@pytest.fixture()
def corpora(tmp_path) -> tuple[Path, Path]:
    return _corpus(tmp_path / "six.jsonl.gz", 6), _corpus(tmp_path / "eight.jsonl.gz", 8)


def _folders_beside(index: Path) -> list[str]:
    return sorted(p.name for p in index.parent.iterdir() if p.is_dir())


def _six_then_killed_eight(model: Path, encoder, corpora, tmp_path: Path, where: str) -> Path:
    """An index of the six-document corpus, then a rebuild on eight killed at ``where``."""
    six, eight = corpora
    index = tmp_path / "idx"
    build_index(six, index, encoder, show_progress=False)
    _killed_build(model, eight, index, where)
    return index


def test_kill_between_the_two_renames_is_recovered_on_open(
    tiny_bert_dir, encoder, corpora, tmp_path, caplog
):
    index = _six_then_killed_eight(tiny_bert_dir, encoder, corpora, tmp_path, "between-renames")
    # The kill left no index at the path, only the two complete folders beside it.
    assert not index.exists()
    beside = _folders_beside(index)
    assert ".idx.building" in beside and any(n.startswith(".idx.old-") for n in beside)

    with caplog.at_level(logging.WARNING, logger="dotcat.index.layout"):
        opened = DenseIndex(index, device="cpu")
    assert len(opened) == 8  # the newer, finished build won
    assert _folders_beside(index) == ["idx"]
    assert "restored" in caplog.text and "removed .idx.old-" in caplog.text


def test_kill_after_the_atomic_exchange_keeps_the_new_index(
    tiny_bert_dir, encoder, corpora, tmp_path, caplog
):
    index = _six_then_killed_eight(tiny_bert_dir, encoder, corpora, tmp_path, "after-exchange")
    assert len(DenseIndex(index, device="cpu")) == 8  # never a moment without an index
    assert ".idx.building" in _folders_beside(index)  # the old one, not yet removed
    with caplog.at_level(logging.WARNING, logger="dotcat.index.layout"):
        build_index(corpora[0], index, encoder, overwrite=True, show_progress=False)
    assert "removed .idx.building" in caplog.text
    assert _folders_beside(index) == ["idx"] and len(DenseIndex(index, device="cpu")) == 6


def test_a_killed_build_is_resumed_by_the_same_command_and_leaves_nothing(
    tiny_bert_dir, encoder, corpora, tmp_path, caplog
):
    index = _six_then_killed_eight(tiny_bert_dir, encoder, corpora, tmp_path, "encoding")
    assert ".idx.building" in _folders_beside(index)  # the vectors of a killed build
    assert len(DenseIndex(index, device="cpu")) == 6  # the old index is untouched
    with caplog.at_level(logging.WARNING):
        build_index(corpora[1], index, encoder, overwrite=True, show_progress=False)
    assert "resuming the interrupted build" in caplog.text
    assert _folders_beside(index) == ["idx"] and len(DenseIndex(index, device="cpu")) == 8


def test_a_killed_build_with_other_settings_is_refused_unless_fresh(
    tiny_bert_dir, encoder, corpora, tmp_path, caplog
):
    index = _six_then_killed_eight(tiny_bert_dir, encoder, corpora, tmp_path, "encoding")
    with pytest.raises(DotcatError, match="other settings .*corpus.documents: 8 -> 6"):
        build_index(corpora[0], index, encoder, overwrite=True, show_progress=False)
    assert ".idx.building" in _folders_beside(index)  # refused: nothing thrown away
    with caplog.at_level(logging.WARNING):
        build_index(corpora[0], index, encoder, overwrite=True, show_progress=False, fresh=True)
    assert "discarding the interrupted build" in caplog.text
    assert _folders_beside(index) == ["idx"] and len(DenseIndex(index, device="cpu")) == 6


def test_old_style_random_build_folders_are_removed_too(encoder, corpora, tmp_path, caplog):
    six, _ = corpora
    index = tmp_path / "idx"
    stale = tmp_path / ".idx.building-1a2b3c4d"  # what dotcat 0.1 leaked
    stale.mkdir()
    (stale / "vectors.npy").write_bytes(b"\0" * 1024)
    with caplog.at_level(logging.WARNING, logger="dotcat.index.layout"):
        build_index(six, index, encoder, show_progress=False)
    assert not stale.exists() and "removed .idx.building-1a2b3c4d" in caplog.text


def test_a_second_builder_of_the_same_path_is_refused(encoder, corpora, tmp_path):
    six, _ = corpora
    index = tmp_path / "idx"
    with layout.index_lock(index), pytest.raises(DotcatError, match="another dotcat process"):
        build_index(six, index, encoder, show_progress=False)
    assert not index.exists()


def test_odd_characters_in_the_index_path(encoder, corpora, tmp_path, monkeypatch):
    six, _ = corpora
    index = tmp_path / "we#ird?dir%41" / "idx#1?mode=rw%20"
    build_index(six, index, encoder, show_progress=False)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    retriever = DenseRetriever(index, device="cpu", precision="fp32")
    hits = retriever.search("text 3", k=3)
    assert len(hits) == 3 and {h.doc_id for h in hits} <= {f"d{i}" for i in range(6)}
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no stray file in the cwd
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        retriever.index.store._conn.execute("DELETE FROM docs")  # really read-only


@pytest.fixture()
def built(encoder, corpora, tmp_path) -> Path:
    index = tmp_path / "idx"
    build_index(corpora[1], index, encoder, IndexConfig(passages=True), show_progress=False)
    return index


def _one_line(index: Path) -> str:
    with pytest.raises(DotcatError) as info:
        DenseIndex(index, device="cpu")
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_doc_store_that_is_not_sqlite(built):
    (built / "docstore.sqlite").write_bytes(b"this is not a database " * 200)
    assert "the doc store is unreadable" in _one_line(built)


def test_a_truncated_doc_store(built):
    path = built / "docstore.sqlite"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert "docstore.sqlite" in _one_line(built)


def test_a_doc_store_with_missing_rows(built):
    with sqlite3.connect(built / "docstore.sqlite") as conn:
        conn.execute("DELETE FROM docs WHERE pos IN (2, 5)")
    message = _one_line(built)
    assert "holds 6 documents" in message and "the manifest says 8" in message


def test_a_doc_store_with_another_schema(built):
    with sqlite3.connect(built / "docstore.sqlite") as conn:
        conn.execute("ALTER TABLE docs RENAME TO documents")
    assert "not a dotcat doc store" in _one_line(built)


def test_missing_rows_at_search_time_are_an_error_not_a_key_error(built, monkeypatch):
    index = DenseIndex(built, device="cpu")
    monkeypatch.setattr(index.store, "passages", lambda ids: {})
    with pytest.raises(DotcatError, match="nothing at FAISS ids"):
        index.documents([0, 1])


def test_a_doc_store_that_lost_its_passages(built):
    with sqlite3.connect(built / "docstore.sqlite") as conn:
        conn.execute("DELETE FROM passages WHERE pid = 3")
    message = _one_line(built)
    assert "holds 7 passages" in message and "the manifest says 8" in message


def test_sigterm_stops_a_build_in_order_and_keeps_it_resumable(tiny_bert_dir, corpora, tmp_path):
    """``timeout`` sends SIGTERM: the encoded chunks stay for a resume, the lock is released,
    exit 143."""
    script = textwrap.dedent(
        """
        import os, signal, sys, time
        from dotcat.cli import app
        from dotcat.index import faiss_index

        def terminated_here(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the signal arrives first

        faiss_index.add_vectors = terminated_here
        sys.exit(app(sys.argv[1:], prog_name="dotcat"))
        """
    )
    index = tmp_path / "idx"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "index",
            str(corpora[0]),
            str(index),
            "--model",
            str(tiny_bert_dir),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 143, done.stderr
    assert "dotcat: interrupted (SIGTERM)" in done.stderr and "Traceback" not in done.stderr
    assert "run the same command again to resume" in done.stderr
    assert _folders_beside(index) == [".idx.building"] and not index.exists()  # resumable
    with layout.index_lock(index):  # released: taken at once
        pass


_KILL_AFTER_CHUNKS = textwrap.dedent(
    """
    import os, signal, sys
    from dotcat.index import IndexConfig, build_index
    from dotcat.index.chunks import ChunkStore
    from dotcat.models import EncoderConfig

    model, corpus, index, after = sys.argv[1:]
    real_write, written = ChunkStore.write, []

    def write(self, chunk, vectors, offset=0):
        real_write(self, chunk, vectors, offset)
        written.append(chunk)
        if len(written) == int(after):
            os.kill(os.getpid(), signal.SIGKILL)

    ChunkStore.write = write
    config = EncoderConfig(model=model, device="cpu", precision="fp32")
    build_index(corpus, index, config, IndexConfig(chunk_size=50), show_progress=False)
    """
)


def test_kill_9_half_way_then_the_same_command_finishes_like_an_uninterrupted_build(
    tiny_bert_dir, encoder, tmp_path, monkeypatch
):
    from dotcat.index import IndexConfig

    corpus = _corpus(tmp_path / "c.jsonl.gz", 300)  # 6 chunks of 50
    whole = tmp_path / "whole"
    build_index(corpus, whole, encoder, IndexConfig(chunk_size=50), show_progress=False)
    index = tmp_path / "idx"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _KILL_AFTER_CHUNKS,
            str(tiny_bert_dir),
            str(corpus),
            str(index),
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -9, done.stderr
    encoded = []
    real = encoder.encode_documents
    monkeypatch.setattr(
        encoder,
        "encode_documents",
        lambda texts, **k: encoded.append(len(texts)) or real(texts, **k),
    )
    build_index(corpus, index, encoder, IndexConfig(chunk_size=50), show_progress=False)
    assert encoded == [50, 50, 50]  # the three chunks not on disk; none encoded twice
    import faiss

    a = faiss.read_index(str(whole / "index.faiss"))
    b = faiss.read_index(str(index / "index.faiss"))
    np.testing.assert_array_equal(a.reconstruct_n(0, a.ntotal), b.reconstruct_n(0, b.ntotal))
    ids = lambda d: DenseIndex(d, device="cpu").doc_ids(range(300))  # noqa: E731
    assert ids(whole) == ids(index)


def test_the_lock_file_goes_with_the_lock_and_a_waiter_takes_the_new_one(tmp_path):
    """The holder removes the lock file as it releases; a waiter that had opened the removed
    file sees it gone once it gets its lock, and locks the file now at the path."""
    import threading

    index = tmp_path / "idx"
    lock = layout.lock_path(index)
    took, held_by_waiter = threading.Event(), []

    def wait_for_it() -> None:
        with layout.index_lock(index, wait=30.0):
            took.set()
            held_by_waiter.append(lock.exists())
            refused = pytest.raises(DotcatError, match="another dotcat process")
            with refused, layout.index_lock(index):  # a third taker is refused: it is held
                pass

    with layout.index_lock(index):
        assert lock.exists()
        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        time.sleep(0.3)  # the waiter has opened the file and waits on it
        assert not took.is_set()
    waiter.join(timeout=30)
    assert took.is_set() and held_by_waiter == [True]
    assert not lock.exists()
    with layout.index_lock(index):  # free again, at once
        pass
    assert not lock.exists()
