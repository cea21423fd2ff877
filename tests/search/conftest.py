"""Shared by the search tests: a tiny BEIR directory with dev queries, and an index of it
(tiny BERT, BM25 inside), built once per module."""

from __future__ import annotations

import pytest

from dotcat.index import IndexConfig, build_index
from dotcat.models import EncoderConfig


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A BEIR dir whose train qrels give dev queries (as the training dev split carves them)."""
    from tests.training.toy import make_training_beir

    return make_training_beir(tmp_path_factory.mktemp("pipeline") / "beir")


@pytest.fixture(scope="module")
def index(data, tiny_bert_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline_index") / "index"
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(data, out, encoder, IndexConfig(bm25=True), show_progress=False)
    return out
