"""A small hybrid index (the tiny random BERT, BM25) and its judgements file, for the judging
tests; a pool of three queries over it."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from dotcat.index import IndexConfig, build_index
from dotcat.models import EncoderConfig

WORDS = ["cells", "energy", "wolves", "dogs", "insulin", "sugar", "blood", "light", "plants",
         "immune", "virus", "mammals", "domesticated", "glucose", "protein", "enzyme"]  # fmt: skip
TOPICS = [
    {"_id": "q1", "text": "which animals were domesticated from wolves",
     "description": "Where dogs come from."},
    {"_id": "q2", "text": "how do cells make energy"},
    {"_id": "q3", "text": "hormone controlling blood sugar"},
]  # fmt: skip


def documents() -> list[dict]:
    """The six tiny documents and 24 more made of the topics' words (seeded)."""
    from tests.conftest import TINY_DOCS

    rng = random.Random(7)
    extra = [
        {"_id": f"x{i:02d}", "title": " ".join(rng.sample(WORDS, 2)),
         "text": " ".join(rng.sample(WORDS, 6)) + "."}
        for i in range(24)
    ]  # fmt: skip
    return [*TINY_DOCS, *extra]


def write_corpus(path: Path, docs: list[dict]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    return path


@pytest.fixture(scope="session")
def judge_index(tmp_path_factory, tiny_bert_dir) -> Path:
    """30 documents, dense + BM25, fp32."""
    root = tmp_path_factory.mktemp("judge_index")
    corpus = write_corpus(root / "corpus.jsonl.gz", documents())
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(corpus, root / "index", encoder, IndexConfig(bm25=True), show_progress=False)
    return root / "index"


@pytest.fixture(scope="session")
def judge_pipeline(judge_index):
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    return SearchPipeline(judge_index, PipelineConfig(device="cpu", precision="fp32"))


@pytest.fixture()
def topics_file(tmp_path) -> Path:
    path = tmp_path / "topics.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TOPICS), encoding="utf-8")
    return path


@pytest.fixture()
def pooled_store(tmp_path, judge_index, judge_pipeline, topics_file):
    """A fresh judgements file with the three topics pooled at depth 5 (dense, BM25, hybrid)."""
    from dotcat.judging import JudgmentStore, PoolConfig, build_pool, read_topics

    store = JudgmentStore(tmp_path / "judgments.sqlite", judge_index, create=True)
    build_pool(judge_pipeline, store, read_topics(topics_file), PoolConfig(pool_depth=5))
    yield store
    store.close()
