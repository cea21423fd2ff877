"""dotcat.training.data.mining: BM25 and dense negatives (window, exclusion, order), save/load."""

from __future__ import annotations

import gzip
import json
import random
import re
from dataclasses import dataclass

import datasets
import numpy as np
import pytest

from dotcat.errors import DataFormatError, DotcatError
from dotcat.search.lexical import bm25_search
from dotcat.training.data.mining import (
    check_window,
    load_negatives,
    mine_bm25_negatives,
    mine_dense_negatives,
    negatives_meta,
    save_negatives,
    window_negatives,
)

WORDS = [
    "protein",
    "cell",
    "gene",
    "virus",
    "immune",
    "insulin",
    "glucose",
    "blood",
    "heart",
    "brain",
    "neuron",
    "cancer",
    "tumor",
    "drug",
    "dose",
    "trial",
    "mouse",
    "human",
    "liver",
    "kidney",
    "lung",
    "bone",
    "muscle",
    "fat",
    "sugar",
]


@dataclass(frozen=True)
class Doc:  # the shape of dotcat.data.Document
    id: str
    title: str
    text: str


def _corpus(n: int = 24, seed: int = 0) -> list[Doc]:
    rng = random.Random(seed)
    return [
        Doc(
            f"d{i:02d}",
            rng.choice(WORDS) if i % 3 else "",
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))),
        )
        for i in range(n)
    ]


QUERIES = {"qa": "insulin glucose blood", "qb": "cancer tumor drug trial", "qc": "brain neuron"}


def _qrels_from(run, ranks_relevant=(0, 3), rank_nonrelevant=4):
    """Judge the docs at the given ranks of each query relevant, one at another rank grade 0."""
    qrels = {}
    for qid, hits in run.items():
        qrels[qid] = {hits[r][0]: 1 for r in ranks_relevant if r < len(hits)}
        if rank_nonrelevant < len(hits):
            qrels[qid][hits[rank_nonrelevant][0]] = 0
    return qrels


# ---------------------------------------------------------------------------- windows


def test_window_negatives_keeps_ranks_and_drops_relevant():
    ranked = ["a", "b", "c", "d", "e", "f"]
    assert window_negatives(ranked, (1, 5), {"c": 1, "d": 0, "x": 2}) == ["b", "d", "e"]
    assert window_negatives(ranked, (4, 100), None) == ["e", "f"]


@pytest.mark.parametrize("window", [(5, 5), (-1, 3), (3,), ("a", 2), (1.0, 3), (True, 3)])
def test_check_window_rejects_bad_windows(window):
    with pytest.raises(DotcatError, match="window"):
        check_window(window)


# ---------------------------------------------------------------------------- BM25


def test_bm25_negatives_window_exclusion_and_order():
    docs = _corpus()
    run = bm25_search(docs, QUERIES, k=24, show_progress=False)
    qrels = _qrels_from(run)
    meta: dict = {}
    negatives = mine_bm25_negatives(
        docs, QUERIES, qrels, window=(2, 9), show_progress=False, meta=meta
    )
    assert set(negatives) == set(QUERIES)
    for qid, negs in negatives.items():
        ranked = [d for d, _ in run[qid]]
        assert negs == [d for d in ranked[2:9] if qrels[qid].get(d, 0) <= 0]
        relevant = {d for d, r in qrels[qid].items() if r > 0}
        assert not relevant & set(negs)
        assert ranked[3] in relevant and ranked[3] not in negs  # inside the window, excluded
        assert ranked[4] in negs  # judged non-relevant (grade 0): kept
        assert ranked[0] not in negs and ranked[1] not in negs  # above the window
        assert len(negs) == 6  # 7 ranks minus the relevant one at rank 3
    assert meta["method"] == "bm25" and meta["window"] == [2, 9] and meta["corpus_size"] == 24
    assert meta["model_fingerprint"] is None and meta["bm25_config"]["k1"] == 0.9


def test_bm25_negatives_from_a_dataset_equal_those_from_documents():
    docs = _corpus()
    dataset = datasets.Dataset.from_list([d.__dict__ for d in docs])
    qrels = {"qa": {"d01": 1}}
    a = mine_bm25_negatives(docs, QUERIES, qrels, window=(0, 5), show_progress=False)
    b = mine_bm25_negatives(dataset, QUERIES, qrels, window=(0, 5), show_progress=False)
    assert a == b and "d01" not in a["qa"]
    assert mine_bm25_negatives(docs, {"qz": "unseenword"}, {}, show_progress=False) == {"qz": []}


# ---------------------------------------------------------------------------- dense


class FakeEncoder:
    """Bag of words through a fixed random projection: a stand-in for dotcat.models.BiEncoder."""

    def __init__(self, dim: int = 16, similarity: str = "cos", seed: int = 0):
        self.dim, self.similarity = dim, similarity
        self.vocab = {w: i for i, w in enumerate(WORDS)}
        self.projection = np.random.default_rng(seed).normal(size=(len(WORDS), dim))
        self.fingerprint = f"fake-{seed}"
        self.name = "fake"
        self.calls: list[int] = []

    def _encode(self, texts):
        counts = np.zeros((len(texts), len(self.vocab)))
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                if word in self.vocab:
                    counts[row, self.vocab[word]] += 1
        x = (counts @ self.projection).astype(np.float32)
        if self.similarity == "cos":
            x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return x

    def encode_queries(self, texts):
        return self._encode(list(texts))

    def encode_documents(self, texts):
        self.calls.append(len(texts))
        return self._encode(list(texts))


def _dense_ranking(encoder, docs, queries):
    texts = [f"{d.title} {d.text}" if d.title else d.text for d in docs]
    scores = encoder.encode_queries(list(queries.values())) @ encoder._encode(texts).T
    ids = np.array([d.id for d in docs])
    return {
        qid: ids[np.lexsort((np.arange(len(docs)), -scores[row]))].tolist()
        for row, qid in enumerate(queries)
    }


@pytest.mark.parametrize("similarity", ["cos", "dot"])
@pytest.mark.parametrize("chunk_size", [5, 1000])
def test_dense_negatives_match_exhaustive_search(similarity, chunk_size):
    docs = _corpus(30, seed=1)
    encoder = FakeEncoder(similarity=similarity)
    ranking = _dense_ranking(encoder, docs, QUERIES)
    qrels = {qid: {ranked[0]: 1, ranked[5]: 2, ranked[6]: 0} for qid, ranked in ranking.items()}
    meta: dict = {}
    negatives = mine_dense_negatives(
        encoder, docs, QUERIES, qrels, window=(3, 12), chunk_size=chunk_size,
        show_progress=False, meta=meta,
    )  # fmt: skip
    for qid, ranked in ranking.items():
        assert negatives[qid] == [d for d in ranked[3:12] if d not in (ranked[0], ranked[5])]
        assert ranked[6] in negatives[qid] and len(negatives[qid]) == 8
    assert max(encoder.calls) <= chunk_size and sum(encoder.calls) == 30
    assert meta["method"] == "dense" and meta["model_fingerprint"] == "fake-0"
    assert meta["window"] == [3, 12] and meta["corpus_size"] == 30


def test_dense_negatives_window_beyond_corpus_and_dataset_input():
    docs = _corpus(12, seed=2)
    dataset = datasets.Dataset.from_list([d.__dict__ for d in docs])
    encoder = FakeEncoder()
    ranking = _dense_ranking(encoder, docs, QUERIES)
    qrels = {"qa": {ranking["qa"][7]: 1}}
    negatives = mine_dense_negatives(
        encoder, dataset, QUERIES, qrels, window=(2, 100), chunk_size=4, show_progress=False
    )
    assert negatives["qa"] == [d for d in ranking["qa"][2:] if d != ranking["qa"][7]]
    assert negatives["qb"] == ranking["qb"][2:]  # all 10 remaining, no relevant to drop


def test_dense_negatives_reject_mismatched_encoder_output():
    class Broken(FakeEncoder):
        def encode_documents(self, texts):
            return np.zeros((len(texts), self.dim + 1), dtype=np.float32)

    with pytest.raises(DotcatError, match="dim"):
        mine_dense_negatives(Broken(), _corpus(4), QUERIES, {}, show_progress=False)


# ---------------------------------------------------------------------------- save / load


@pytest.mark.parametrize("name", ["negatives.jsonl", "negatives.jsonl.gz"])
def test_save_load_round_trip(tmp_path, name):
    negatives = {"q2": ["d3", "d1"], "q1": [], "é": ["d€"]}
    meta = negatives_meta("dense", (10, 100), 5183, model_fingerprint="abc", seed=3)
    path = save_negatives(tmp_path / "sub" / name, negatives, meta)
    loaded, header = load_negatives(path)
    assert loaded == negatives and list(loaded) == list(negatives)
    assert header["method"] == "dense" and header["window"] == [10, 100]
    assert header["model_fingerprint"] == "abc" and header["corpus_size"] == 5183
    assert header["seed"] == 3 and header["n_queries"] == 3 and header["created"]
    assert header["format"] == "dotcat-negatives"
    assert [p.name for p in path.parent.iterdir()] == [name]  # no temporary file left


def test_save_is_atomic_on_failure(tmp_path):
    path = save_negatives(tmp_path / "n.jsonl", {"q": ["d"]}, {"method": "bm25"})
    before = path.read_bytes()
    with pytest.raises(TypeError):
        save_negatives(path, {"q": ["x"]}, {"method": "bm25", "bad": object()})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["n.jsonl"]


HEADER = json.dumps({"format": "dotcat-negatives", "format_version": 1, "method": "bm25"})


@pytest.mark.parametrize(
    ("lines", "where", "message"),
    [
        ([HEADER, '{"qid": "q1", "negatives": ["d1"]}', "{not json"], ":3:", "invalid JSON"),
        (['{"qid": "q1", "negatives": []}'], ":1:", "not a dotcat negatives file"),
        ([HEADER.replace('"format_version": 1', '"format_version": 9')], ":1:", "version"),
        ([HEADER, '{"qid": "q1"}'], ":2:", "negatives"),
        ([HEADER, '{"qid": "q1", "negatives": [1]}'], ":2:", "list of strings"),
        ([HEADER, '{"negatives": []}'], ":2:", "qid"),
        ([HEADER, "[1, 2]"], ":2:", "JSON object"),
        (
            [HEADER, '{"qid": "q", "negatives": []}', '{"qid": "q", "negatives": []}'],
            ":3:",
            "repeated",
        ),
        ([HEADER[:-1] + ', "n_queries": 2}', '{"qid": "q", "negatives": []}'], "", "announces 2"),
        ([], ":1:", "empty file"),
    ],
)
def test_load_negatives_reports_file_and_line(tmp_path, lines, where, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(line + "\n" for line in lines), "utf-8")
    with pytest.raises(DataFormatError, match=re.escape(message)) as info:
        load_negatives(path)
    assert str(info.value).startswith(f"{path}{where}")


def test_load_negatives_missing_or_corrupt_file(tmp_path):
    with pytest.raises(DotcatError, match="no such"):
        load_negatives(tmp_path / "absent.jsonl")
    bad_gz = tmp_path / "bad.jsonl.gz"
    bad_gz.write_bytes(gzip.compress(HEADER.encode())[:-6])
    with pytest.raises(DataFormatError):
        load_negatives(bad_gz)
