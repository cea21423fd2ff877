"""dotcat.training.data.pools: first-stage pools, sampling, examples, the fused teacher."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.training.toy import make_training_beir

from dotcat.data import write_run
from dotcat.errors import DotcatError
from dotcat.training.data.examples import load_training_data
from dotcat.training.data.pools import (
    build_cat_examples,
    first_stage_run,
    group_teacher,
    negative_pools,
    sample_negatives,
    teacher_scores,
)


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    return make_training_beir(tmp_path_factory.mktemp("pools_toy") / "beir")


def test_negative_pools_interleave_dedupe_and_drop_relevant():
    bm25 = {"q1": [("a", 9.0), ("b", 8.0), ("c", 7.0)], "q2": [("x", 1.0)]}
    dense = {"q1": [("c", 0.9), ("d", 0.8), ("a", 0.7)]}
    pools = negative_pools([bm25, dense], {"q1": {"b": 1, "d": 0}}, depth=2)
    # rank 1 of each run, then rank 2 of each; b is relevant, d judged non-relevant stays
    assert pools == {"q1": ["a", "c", "d"], "q2": ["x"]}


def test_sample_negatives_is_deterministic_and_repeats_a_short_pool():
    pool = [f"d{i}" for i in range(20)]
    a = sample_negatives(pool, 5, 42, 0, "q1", "p")
    assert a == sample_negatives(pool, 5, 42, 0, "q1", "p")
    assert len(set(a)) == 5 and set(a) <= set(pool)
    assert a != sample_negatives(pool, 5, 42, 1, "q1", "p")  # another epoch, other draws
    short = sample_negatives(["x", "y"], 4, 1, 0, "q", "p")
    assert len(short) == 4 and set(short) <= {"x", "y"}


def test_examples_one_per_relevant_document_and_skip_queries_without_pool():
    examples = build_cat_examples(
        {"q1": "one", "q2": "two"}, {"q1": {"a": 1, "b": 2, "c": 0}, "q2": {"z": 1}}, {"q1": ["n"]}
    )
    assert [(e.qid, e.positive_id) for e in examples] == [("q1", "a"), ("q1", "b")]


def test_teacher_scores_fuse_normalised_runs_and_the_positive_is_raised_to_the_best():
    bm25 = {"q": [("a", 10.0), ("b", 6.0), ("c", 2.0)]}
    dense = {"q": [("c", 0.9), ("a", 0.5), ("d", 0.1)]}
    fused = teacher_scores([bm25, dense], depth=3)["q"]
    # min-max per run, mean over runs; a document one run does not list counts 0 there
    assert fused == pytest.approx({"a": (1.0 + 0.5) / 2, "b": 0.5 / 2, "c": 1.0 / 2, "d": 0.0})
    assert teacher_scores([bm25], depth=1)["q"] == {"a": 0.0}  # one score: no spread
    assert group_teacher(fused, "d", ["b", "a"]) == [0.75, 0.25, 0.75]
    assert group_teacher(fused, "a", ["b", "x"]) == [0.75, 0.25, 0.0]


def test_first_stage_from_a_run_file_and_refusal_of_unknown_sources(toy_data, tmp_path):
    data = load_training_data(toy_data)
    path = tmp_path / "first.trec"
    write_run({"q0": [("d3", 2.0), ("d1", 1.0)]}, path)
    run = first_stage_run(str(path), data, {"q0": "x", "q1": "y"}, k=1)
    assert run == {"q0": [("d3", 2.0)], "q1": []}
    bm25 = first_stage_run("bm25", data, {"q0": data.queries["q0"]}, k=3)
    assert len(bm25["q0"]) == 3 and bm25["q0"][0][0] == "d0"
    with pytest.raises(DotcatError, match="not 'bm25'"):
        first_stage_run(str(tmp_path / "nothing"), data, {"q0": "x"}, k=1)
