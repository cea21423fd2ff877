"""Training on judgements from a pool: judged-irrelevant documents as negatives, positives
from a grade up, a dev split only with queries enough, an index as the corpus."""

from __future__ import annotations

import json

import pytest
from tests.training.toy import make_training_beir

from dotcat.training.data.judged import dev_split, judged_negatives, with_judged_negatives


def test_judged_irrelevant_documents_come_first_among_the_negatives():
    qrels = {"q1": {"a": 2, "b": 0, "c": 1, "d": 0}, "q2": {"e": 1}, "q3": {"f": 0}}
    assert judged_negatives(qrels) == {"q1": ["b", "d"], "q3": ["f"]}
    mined = {"q1": ["x", "d", "y"], "q2": ["z"]}
    merged = with_judged_negatives(mined, qrels, ["q1", "q2"])
    assert merged == {"q1": ["b", "d", "x", "y"], "q2": ["z"]}  # q3 is not trained on
    assert with_judged_negatives(mined, {"q2": {"e": 1}}, ["q2"]) == mined
    assert with_judged_negatives(None, {"q2": {"e": 1}}, ["q2"]) is None


def test_a_dev_split_only_with_queries_enough():
    qids = [f"q{i}" for i in range(20)]
    assert dev_split(qids, 0.1, 3) == (qids, [])  # 2 expected: too few
    train, dev = dev_split(qids, 0.2, 3)
    assert dev and sorted(train + dev) == sorted(qids)
    assert dev_split(qids, 0.0, 3) == (qids, [])


def test_fifty_judged_queries_hold_out_twenty_for_a_rule_that_needs_twenty():
    qids = [f"q{i}" for i in range(50)]
    assert len(dev_split(qids, 0.1, 3)[1]) < 20
    train, dev = dev_split(qids, 0.1, 3, at_least=20)
    assert (len(train), len(dev)) == (30, 20) and sorted(train + dev) == sorted(qids)


@pytest.fixture(scope="module")
def judged_index(tmp_path_factory, tiny_bert_dir):
    """The toy collection indexed (the index is the corpus), its queries as a TSV file and
    judgements with grades 0-3 as a TREC qrels file."""
    from dotcat.index import IndexConfig, build_index
    from dotcat.models import EncoderConfig

    root = tmp_path_factory.mktemp("judged")
    beir = make_training_beir(root / "beir")
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(beir, root / "index", encoder, IndexConfig(bm25=True), show_progress=False)
    queries = [json.loads(line) for line in (beir / "queries.jsonl").read_text().splitlines()]
    (root / "queries.tsv").write_text("".join(f"{q['_id']}\t{q['text']}\n" for q in queries))
    lines = []
    for i, q in enumerate(queries):
        lines.append(f"{q['_id']} 0 d{i} {2 + i % 2}")  # the answer: grade 2 or 3
        lines.append(f"{q['_id']} 0 d{(i + 1) % len(queries)} 1")  # partly: neither
        lines.append(f"{q['_id']} 0 x{i % 8} 0")  # judged not relevant
    (root / "qrels.txt").write_text("\n".join(lines) + "\n")
    return root


def test_train_dot_on_an_index_with_judgements(judged_index, tiny_bert_dir, tmp_path):
    from dotcat.training.config import DotConfig
    from dotcat.training.recipes.dot import DotRecipe

    config = DotConfig(
        data=judged_index / "index", queries=judged_index / "queries.tsv",
        qrels=judged_index / "qrels.txt", out_dir=tmp_path / "dot", base=str(tiny_bert_dir),
        min_relevance=2, n_negatives=30, window=(0, 5), max_length=32, device="cpu",
        bf16="off", dev_fraction=0.0, show_progress=False,
    )  # fmt: skip
    config.validate()
    config.check_files()
    recipe = DotRecipe(config, DotRecipe.context("cpu"))
    tmp_path.joinpath("dot").mkdir()
    recipe.prepare()
    examples = recipe.examples
    assert len(examples) == len(recipe.train_queries)  # one positive each: grade 1 is not one
    for example in examples:
        i = int(example.qid[1:])
        assert example.positive_id == f"d{i}"
        assert f"d{(i + 1) % len(examples)}" not in example.negative_ids  # graded 1: neither
        # More negatives asked than the pool holds: each draws its whole pool (BM25's top 5
        # less the graded documents, and the judged-irrelevant one).
        assert f"x{i % 8}" in example.negative_ids
    assert recipe.data_info["path"] == str((judged_index / "index").resolve())


def test_train_refuses_an_index_without_queries_and_qrels(judged_index, tmp_path):
    from typer.testing import CliRunner

    from dotcat.cli import app

    result = CliRunner().invoke(app, ["train", "dot", str(judged_index / "index"),
                                      str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 2
    assert "a dotcat index; give the queries and qrels files as well" in result.output


def test_cat_examples_take_positives_from_the_threshold_up():
    from dotcat.training.data.pools import build_cat_examples

    qrels = {"q1": {"a": 3, "b": 1, "c": 0}, "q2": {"d": 2}}
    pools = {"q1": ["c", "x"], "q2": ["y"]}
    queries = {"q1": "one", "q2": "two"}
    assert [(e.qid, e.positive_id) for e in build_cat_examples(queries, qrels, pools)] == [
        ("q1", "a"), ("q1", "b"), ("q2", "d")
    ]  # fmt: skip
    strict = build_cat_examples(queries, qrels, pools, min_relevance=2)
    assert [(e.qid, e.positive_id) for e in strict] == [("q1", "a"), ("q2", "d")]
