"""A build stopped while it encodes one long document keeps the passages encoded so far.

Issue 64: a 20 MB one-line text (19,209 passages) stopped by SIGTERM after 10 minutes of
encoding kept "0 of 19209 vectors": a chunk of 8,192 passages of 256 tokens takes 25 minutes
on two CPU cores, and only whole chunks were saved. Here a text file of ~400 passages, chunks
of 100 and parts of 40 (the child's ``PART_SECONDS`` is 0, so each part is ``FIRST_PART``
rows): a real ``dotcat index`` process is stopped after its fifth part, inside the second
chunk, and the same command finishes the build like one never stopped.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import faiss
import numpy as np
import pytest

from dotcat.index import DenseIndex, IndexConfig, build_index
from dotcat.index.docstore import DocStore
from dotcat.index.layout import build_path
from dotcat.index.passages import PassageConfig
from dotcat.models import BiEncoder, EncoderConfig

# A ``dotcat index`` whose build sends itself SIGNAL after its AFTER-th written part.
_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from dotcat.cli import app
    from dotcat.index import build
    from dotcat.index.chunks import ChunkStore

    number, after = getattr(signal, sys.argv[1]), int(sys.argv[2])
    build.FIRST_PART, build.PART_SECONDS = 40, 0.0  # parts of 40 rows, whatever the speed
    real, written = ChunkStore.write, []

    def write(self, *args, **kwargs):
        real(self, *args, **kwargs)
        written.append(args)
        if len(written) == after:
            os.kill(os.getpid(), number)
            time.sleep(30)  # the signal arrives first

    ChunkStore.write = write
    sys.exit(app(sys.argv[3:], prog_name="dotcat"))
    """
)
#: The rows written by the first five parts: chunk 0 as 40 + 40 + 20, chunk 1's first 80.
KEPT = 180
#: As the IndexConfig of the resume (below) says.
SETTINGS = ("--chunk-size", "100", "--passages", "--passage-window", "16", "--no-bm25")


@pytest.fixture(scope="module")
def long_text(tmp_path_factory):
    """One text file of one line, split into about 400 passages of 16 tokens."""
    rng = random.Random(64)
    words = [f"w{rng.randrange(5000)}" for _ in range(4000)]
    path = tmp_path_factory.mktemp("long") / "long.txt"
    path.write_text(" ".join(words), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32"))


def _vectors(index_dir):
    index = faiss.read_index(str(index_dir / "index.faiss"))
    return index.reconstruct_n(0, index.ntotal)


@pytest.mark.parametrize(("signal", "code"), [("SIGTERM", 143), ("SIGKILL", -9)])
def test_a_stop_inside_one_long_document_keeps_its_encoded_passages(
    tiny_bert_dir, encoder, long_text, tmp_path, monkeypatch, signal, code
):
    index = tmp_path / "idx"
    args = ["index", long_text, index, "--model", tiny_bert_dir, "--precision", "fp32", *SETTINGS]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, signal, "5", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == code, done.stderr
    if signal == "SIGTERM":
        assert "dotcat: interrupted (SIGTERM)" in done.stderr and "Traceback" not in done.stderr
        assert f"build stopped; {KEPT} of " in done.stderr, done.stderr
    assert build_path(index).is_dir() and not index.exists()

    encoded: list[int] = []
    real = encoder.encode_documents
    monkeypatch.setattr(
        encoder,
        "encode_documents",
        lambda texts, **k: encoded.append(len(texts)) or real(texts, **k),
    )
    config = IndexConfig(chunk_size=100, passages=PassageConfig(True, window=16), bm25=False)
    build_index(long_text, index, encoder, config, show_progress=False)
    passages = DenseIndex(index, device="cpu")
    total = passages.manifest.passages["count"]
    assert total > 300 and passages.manifest.documents["count"] == 1  # one document, 4 chunks
    assert sum(encoded) == total - KEPT  # what was kept is not encoded again

    monkeypatch.setattr(encoder, "encode_documents", real)
    fresh = tmp_path / "fresh"
    build_index(long_text, fresh, encoder, config, show_progress=False)
    np.testing.assert_allclose(_vectors(index), _vectors(fresh), atol=1e-5)
    assert DenseIndex(fresh, device="cpu").doc_ids(range(1)) == passages.doc_ids(range(1))
    assert _spans(index, total) == _spans(fresh, total)  # every passage where it was


def _spans(index_dir, count: int) -> list:
    store = DocStore(index_dir / "docstore.sqlite")
    try:
        return store.passage_spans(0, count)
    finally:
        store.close()
