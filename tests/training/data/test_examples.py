"""dotcat.training.data.examples: training examples from qrels, loading training data, the
dev corpus sample."""

from __future__ import annotations

import json
import logging

import pytest

from dotcat.errors import DotcatError
from dotcat.training.data.examples import (
    ExampleStats,
    TrainingExample,
    build_examples,
    dev_subset,
    load_training_data,
)

# ---------------------------------------------------------------------------- build_examples

QUERIES = {
    "q1": "first query",
    "q2": "second query",
    "q3": "judged but nothing relevant",
    "q4": "not judged at all",
    "q6": "   ",
}
QRELS = {
    "q1": {"d1": 1, "d2": 2, "d3": 0},
    "q2": {"d4": 1},
    "q3": {"d5": 0},
    "q5": {"d6": 1},  # no text
    "q6": {"d6": 1},  # blank text
}
MINED = {
    "q1": ["d3", "d2", "d7", "d8", "d9", "d10", "d1", "d7"],  # d2, d1 relevant; d7 repeated
    "q2": ["d5"],
}


def test_build_examples_one_per_relevant_pair_and_counts(caplog):
    stats = ExampleStats()
    with caplog.at_level(logging.WARNING, logger="dotcat.training.data.examples"):
        examples = build_examples(QUERIES, QRELS, MINED, n_negatives=3, stats=stats)
    assert [(e.qid, e.query, e.positive_id) for e in examples] == [
        ("q1", "first query", "d1"),
        ("q1", "first query", "d2"),
        ("q2", "second query", "d4"),
    ]
    for e in examples[:2]:
        assert len(e.negative_ids) == 3 == len(set(e.negative_ids))
        assert set(e.negative_ids) <= {"d3", "d7", "d8", "d9", "d10"}  # judged 0 is fine
    assert examples[2].negative_ids == ("d5",)
    assert stats == ExampleStats(
        queries=2,
        examples=3,
        skipped_no_qrels=2,  # q3 (grade 0 only), q4
        skipped_no_text=2,  # q5, q6
        short_negatives=1,
        dropped_short=0,
        removed_relevant=2,
    )
    assert "removed" in caplog.text and "fewer than 3" in caplog.text


def test_build_examples_never_uses_a_relevant_negative():
    mined = {"q1": ["d1", "d2", "d3"], "q2": ["d4", "d1"]}
    for seed in range(20):
        for e in build_examples(QUERIES, QRELS, mined, n_negatives=2, seed=seed):
            judged = QRELS[e.qid]
            assert all(judged.get(d, 0) <= 0 for d in e.negative_ids)


def test_build_examples_seeded_sampling_is_reproducible():
    a = build_examples(QUERIES, QRELS, MINED, n_negatives=2, seed=7)
    assert a == build_examples(dict(QUERIES), dict(QRELS), dict(MINED), n_negatives=2, seed=7)
    samples = {
        tuple(e.negative_ids for e in build_examples(QUERIES, QRELS, MINED, 2, seed=s))
        for s in range(10)
    }
    assert len(samples) > 1  # the seed matters
    assert all(isinstance(e, TrainingExample) for e in a)


def test_build_examples_min_relevance_and_no_negatives():
    examples = build_examples(QUERIES, QRELS, MINED, n_negatives=3, min_relevance=2)
    assert [(e.qid, e.positive_id) for e in examples] == [("q1", "d2")]
    assert "d1" not in examples[0].negative_ids  # grade 1: not a positive, not a negative
    plain = build_examples(QUERIES, QRELS, None, n_negatives=3)
    assert len(plain) == 3 and all(e.negative_ids == () for e in plain)
    assert all(e.negative_ids == () for e in build_examples(QUERIES, QRELS, MINED, 0))


def test_build_examples_short_policies():
    stats = ExampleStats()
    dropped = build_examples(QUERIES, QRELS, MINED, n_negatives=3, on_short="drop", stats=stats)
    assert [e.qid for e in dropped] == ["q1", "q1"] and stats.dropped_short == 1
    repeated = build_examples(QUERIES, QRELS, MINED, n_negatives=3, on_short="repeat")
    assert repeated[2].negative_ids == ("d5", "d5", "d5")
    assert all(len(e.negative_ids) == 3 for e in repeated)
    none = build_examples(QUERIES, QRELS, {"q1": MINED["q1"]}, n_negatives=1, on_short="repeat")
    assert [e.qid for e in none] == ["q1", "q1"]  # q2 has no negatives: dropped


@pytest.mark.parametrize("kwargs", [{"n_negatives": -1}, {"min_relevance": 0}, {"on_short": "pad"}])
def test_build_examples_rejects_bad_arguments(kwargs):
    with pytest.raises(DotcatError):
        build_examples(QUERIES, QRELS, MINED, **{"n_negatives": 1, **kwargs})


# ---------------------------------------------------------------------------- loading


def test_load_training_data_from_beir_dir(tiny_beir_dir):
    queries, qrels, corpus = load_training_data(tiny_beir_dir, split="test")
    assert queries == {
        "q1": "which animals were domesticated from wolves",
        "q2": "how do cells make ATP",
        "q3": "hormone controlling blood sugar",
    }
    assert qrels == {"q1": {"d2": 1}, "q2": {"d4": 1}, "q3": {"d6": 1}}
    assert len(corpus) == 6


def test_load_training_data_from_files(tiny_beir_dir, tmp_path, caplog):
    queries_file = tmp_path / "queries.tsv"
    queries_file.write_text("a\tcats and dogs\nb\twolves\nc\tunjudged\n", "utf-8")
    qrels_file = tmp_path / "qrels.tsv"
    qrels_file.write_text(
        "query-id\tcorpus-id\tscore\na\td1\t1\na\tmissing\t1\nb\tgone\t1\nz\td2\t1\n", "utf-8"
    )
    corpus_file = tmp_path / "corpus.jsonl"
    corpus_file.write_text(
        "".join(
            json.dumps(d) + "\n" for d in [{"_id": "d1", "text": "x"}, {"_id": "d2", "text": "y"}]
        ),
        "utf-8",
    )
    with caplog.at_level(logging.WARNING, logger="dotcat.training.data.examples"):
        data = load_training_data(corpus_file, queries=queries_file, qrels=qrels_file)
    assert data.queries == {"a": "cats and dogs"}  # b: only a missing doc; c: unjudged
    assert data.qrels == {"a": {"d1": 1}, "z": {"d2": 1}}
    assert "2 qrels entries" in caplog.text and "no text" in caplog.text
    # a BEIR dir with its queries replaced: none of them judged in its test split
    with pytest.raises(DotcatError, match="no judged query"):
        load_training_data(tiny_beir_dir, queries=queries_file, split="test")


def test_load_training_data_needs_queries_and_qrels_for_a_corpus_file(tmp_path):
    corpus_file = tmp_path / "corpus.jsonl"
    corpus_file.write_text('{"_id": "d1", "text": "x"}\n', "utf-8")
    with pytest.raises(DotcatError, match="queries and qrels"):
        load_training_data(corpus_file)


def test_dev_subset_keeps_judged_documents_and_samples_the_rest():
    import datasets

    corpus = datasets.Dataset.from_dict(
        {"id": [f"d{i}" for i in range(100)], "title": [""] * 100, "text": ["t"] * 100}
    )
    qrels = {"q1": {"d3": 1, "d97": 0}, "q2": {"d50": 2}}
    subset = dev_subset(corpus, qrels, max_docs=10, seed=1)
    ids = subset["id"]
    assert {"d3", "d97", "d50"} <= set(ids) and len(ids) == 13
    assert dev_subset(corpus, qrels, max_docs=10, seed=1)["id"] == ids
    assert dev_subset(corpus, qrels, max_docs=100, seed=1) is corpus
