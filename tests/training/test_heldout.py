"""dotcat.training.heldout: ``train dot`` and ``train cat`` are judged on judged queries they
never trained on, and a model not shown better does not become a default."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from tests.training.toy import FILLER, TOPICS, make_training_beir
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.models.bi_encoder import BiEncoder
from dotcat.models.config import EncoderConfig
from dotcat.search.reranker import Reranker
from dotcat.training.config import CatConfig, DotConfig
from dotcat.training.data.judged import split_queries
from dotcat.training.heldout import compare, folds
from dotcat.training.run import train

QIDS = [f"q{i}" for i in range(len(TOPICS))]


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    """16 queries whose BM25 top 1 is their one relevant document: nothing to gain."""
    return make_training_beir(tmp_path_factory.mktemp("heldout") / "beir")


@pytest.fixture(scope="module")
def marked_data(tmp_path_factory) -> tuple[Path, Path]:
    """16 queries and a first-stage run that ranks two decoys (the query's words, like the
    answer) above the relevant document, which alone says "verified": a re-ranker trained on
    some queries lifts the answer of the others."""
    root = tmp_path_factory.mktemp("marked")
    data = root / "beir"
    (data / "qrels").mkdir(parents=True)
    rng = random.Random(0)
    docs, run = [], []
    for i, (a, b) in enumerate(TOPICS):
        filler = [" ".join(rng.sample(FILLER, 4)) for _ in range(3)]
        docs += [
            {"_id": f"d{i}", "text": f"{a} {b} verified {filler[0]}"},
            {"_id": f"e{i}", "text": f"{a} {b} {filler[1]}"},
            {"_id": f"f{i}", "text": f"{b} {a} {filler[2]}"},
        ]
        ranked = [f"e{i}", f"f{i}", f"d{i}", f"e{(i + 1) % 16}", f"f{(i + 2) % 16}"]
        run += [f"q{i} Q0 {d} {r + 1} {5 - r} toy" for r, d in enumerate(ranked)]
    (data / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": f"q{i}", "text": f"{a} {b}"} for i, (a, b) in enumerate(TOPICS)]
    (data / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    qrels = "".join(f"q{i}\td{i}\t1\n" for i in range(len(TOPICS)))
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    (root / "first.trec").write_text("\n".join(run) + "\n")
    return data, root / "first.trec"


def _cat(data: Path, out: Path, base: Path, **overrides) -> CatConfig:
    settings = dict(
        data=data, out_dir=out, base=str(base), first_stages=("bm25",), depth=5,
        n_negatives=2, epochs=2, batch_size=4, pairs_per_forward=12, lr=1e-3, max_length=24,
        dev_depth=5, seed=3, bf16="off", device="cpu", show_progress=False,
    )  # fmt: skip
    return CatConfig(**{**settings, **overrides})


def _record(out: Path) -> dict:
    return json.loads((out / "dotcat_training.json").read_text())


def test_folds_deal_every_query_once_evenly_by_its_id():
    parts = folds(QIDS, 5)
    assert sorted(q for part in parts for q in part) == sorted(QIDS)
    assert sorted(len(part) for part in parts) == [3, 3, 3, 3, 4]
    assert folds(list(reversed(QIDS)), 5) == parts  # the ids decide, not their order
    assert [len(part) for part in folds(QIDS[:3], 5)] == [1, 1, 1]  # no empty fold


def test_a_gain_is_shown_only_where_the_interval_lies_above_zero():
    qrels = {q: {"good": 1} for q in QIDS}
    first = {q: [("bad", 2.0), ("good", 1.0)] for q in QIDS}  # nDCG@10 0.63 each
    better = {q: [("good", 2.0), ("bad", 1.0)] for q in QIDS}  # 1.0 each
    shown = compare(first, better, qrels, "test")
    assert shown.shown_better and shown.low > 0 and shown.queries == len(QIDS)
    assert shown.diff == pytest.approx(1 - 1 / np.log2(3))
    # Better on half the queries, worse on the other half: no gain shown.
    mixed = {q: (better if i % 2 else first)[q] for i, q in enumerate(QIDS)}
    flipped = {q: (first if i % 2 else better)[q] for i, q in enumerate(QIDS)}
    even = compare(flipped, mixed, qrels, "test")
    assert not even.shown_better and even.low < 0 < even.high and even.diff == pytest.approx(0)
    one = compare({"q0": first["q0"]}, {"q0": better["q0"]}, qrels, "test")
    assert not one.shown_better and one.queries == 1  # one query cannot show anything
    assert one.to_json()["low"] is None


def test_the_split_a_run_trains_on(toy_data):
    config = _cat(toy_data, "out", "base")
    assert split_queries(config, QIDS) == (QIDS, [])  # under 100 queries: the folds judge
    fold = _cat(toy_data, "out", "base", held_out=("q1", "q2"), check=False)
    assert split_queries(fold, QIDS) == ([q for q in QIDS if q not in ("q1", "q2")], [])
    train_ids, dev = split_queries(_cat(toy_data, "o", "b", check=False, dev_fraction=0.25), QIDS)
    assert dev and sorted(train_ids + dev) == sorted(QIDS)  # no check: the dev split as before
    many = [f"q{i}" for i in range(120)]
    train_ids, dev = split_queries(config, many)  # 100 or more: the dev split is the check's
    assert 0 < len(dev) < len(many) and sorted(train_ids + dev) == sorted(many)
    assert not config.kfold(len(many))
    # No dev split asked for (or too small a share to make one): the folds judge the run.
    for share in (0.0, 0.02):
        undivided = _cat(toy_data, "out", "base", dev_fraction=share)
        assert undivided.kfold(len(many)) and split_queries(undivided, many) == (many, [])


def test_a_reranker_the_folds_show_no_better_keeps_weight_0_and_says_so(
    toy_data, tiny_bert_dir, tmp_path
):
    """BM25 already ranks every answer first: the re-ranker cannot be shown better, so the
    model records weight 0 (search keeps the first stage) and one line gives the figures."""
    out = tmp_path / "cat"
    result = CliRunner().invoke(app, [
        "train", "cat", str(toy_data), str(out), "--base", str(tiny_bert_dir), "--depth", "5",
        "--n-negatives", "2", "--epochs", "1", "--max-length", "24", "--dev-depth", "5",
        "--bf16", "off", "--device", "cpu",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "held-out check" in line]
    assert len(lines) == 1, result.output
    assert re.search(
        r"nDCG@10 \d\.\d{4} re-ranked against 1\.0000 for the first stage alone \(bm25\): "
        r"[+-]\d\.\d{4} \[[+-]\d\.\d{4}, [+-]\d\.\d{4}\] over 16 held-out judged queries "
        r"\(5-fold cross-validation\): not shown better, so .* records interpolation weight 0",
        lines[0],
    ), lines[0]
    assert "LOAD REPORT" not in result.output and "MISSING" not in result.output
    assert sum("new one is initialised" in line for line in result.output.splitlines()) == 1

    check = _record(out)["heldout_check"]
    assert check["shown_better"] is False and check["interpolation_alpha"] == 0.0
    assert check["queries"] == 16 and check["diff"] <= 0 and check["first"] == 1.0
    assert json.loads((out / "dotcat_cross_encoder.json").read_text())["interpolation_alpha"] == 0
    reranker = Reranker.load(str(out), depth=5, device="cpu", precision="fp32")
    assert reranker.alpha == 0.0  # --interpolate auto: the first stage's ranking
    run = {"q0": [("d0", 2.0), ("x1", 1.0)]}
    assert reranker.rerank(run, {"q0": "insulin glucose"}, {}) == run
    assert not (out / "heldout").exists()  # the folds' work is gone


def test_a_reranker_the_folds_show_better_keeps_the_weight_it_chose(
    marked_data, tiny_bert_dir, tmp_path
):
    data, first = marked_data
    out = train(_cat(data, tmp_path / "cat", tiny_bert_dir, first_stages=(str(first),),
                     epochs=3, check_folds=3))  # fmt: skip
    check = _record(out)["heldout_check"]
    assert check["shown_better"] is True and check["low"] > 0, check
    assert check["method"] == "3-fold cross-validation" and check["queries"] == 16
    # Fewer than 20 queries to choose on: the prior weight, recorded for search to use.
    assert check["interpolation_alpha"] == 0.5
    assert _record(out)["interpolation"]["alpha"] == 0.5
    assert Reranker.load(str(out), device="cpu", precision="fp32").alpha == 0.5


def test_a_bi_encoder_not_shown_better_leaves_the_base_model_where_index_looks(
    toy_data, tiny_bert_dir, tmp_path
):
    """The hybrid already answers every query: ``OUT_DIR`` gets the base model back as it
    searches (its vectors, pooling, similarity and length are the base's, not the ones the run
    trained with), the trained one moves to ``OUT_DIR/trained``."""
    out = train(DotConfig(
        data=toy_data, out_dir=tmp_path / "dot", base=str(tiny_bert_dir), pooling="mean",
        similarity="cos", window=(1, 10), n_negatives=1, epochs=1, batch_size=4, lr=1e-3,
        max_length=32, query_max_length=16, bf16="off", device="cpu", show_progress=False,
        check_folds=2,
    ))  # fmt: skip
    check = _record(out)["heldout_check"]
    assert check["shown_better"] is False and check["kept"] == "base"
    assert check["trained_model"] == str(out / "trained")

    def vectors(model) -> np.ndarray:
        config = EncoderConfig(model=str(model), device="cpu", precision="fp32",
                               pooling="mean", similarity="cos")  # fmt: skip
        return BiEncoder.load(config).encode_documents(["insulin glucose", "bone calcium"])

    np.testing.assert_allclose(vectors(out), vectors(tiny_bert_dir), atol=1e-5)
    kept, base = (BiEncoder.load(EncoderConfig(model=str(m), device="cpu", precision="fp32"))
                  for m in (out, tiny_bert_dir))  # fmt: skip
    assert (kept.pooling, kept.similarity, kept.max_length) == (
        base.pooling, base.similarity, base.max_length,
    ) != ("mean", "cos", 32)  # fmt: skip
    trained = BiEncoder.load(EncoderConfig(model=str(out / "trained"), device="cpu"))
    assert (trained.pooling, trained.similarity, trained.max_length) == ("mean", "cos", 32)
    assert not np.allclose(vectors(out / "trained"), vectors(tiny_bert_dir), atol=1e-5)
    from dotcat.models.resolve import weights_fingerprint

    assert _record(out)["model"]["fingerprint"] == weights_fingerprint(out)


def test_a_finished_run_owing_its_check_runs_it_on_resume(toy_data, tiny_bert_dir, tmp_path):
    unchecked = train(_cat(toy_data, tmp_path / "cat", tiny_bert_dir, epochs=1, check=False))
    assert "heldout_check" not in _record(unchecked)
    recorded = json.loads((unchecked / "dotcat_cross_encoder.json").read_text())
    assert recorded["interpolation_alpha"] == 0.0  # unchecked: the first stage alone, not weight 1
    steps = _record(unchecked)["steps"]
    train(_cat(toy_data, unchecked, tiny_bert_dir, epochs=1, resume=True))
    record = _record(unchecked)
    assert record["heldout_check"]["queries"] == 16 and record["steps"] == steps  # not retrained


def test_a_fold_that_cannot_train_leaves_its_queries_out(toy_data, tiny_bert_dir, tmp_path, caplog):
    """No BM25 negative in the window: only q0, judged irrelevant documents beside its answer,
    makes an example; the fold that holds q0 out has nothing to train on."""
    qrels = tmp_path / "qrels.tsv"
    lines = [f"q{i}\td{i}\t1" for i in range(len(TOPICS))] + ["q0\tx0\t0", "q0\tx1\t0"]
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")
    out = train(DotConfig(
        data=toy_data, qrels=qrels, queries=toy_data / "queries.jsonl", out_dir=tmp_path / "dot",
        base=str(tiny_bert_dir), window=(50, 60), n_negatives=1, epochs=1, batch_size=4,
        max_length=32, query_max_length=16, bf16="off", device="cpu", show_progress=False,
    ))  # fmt: skip
    left_out = next(part for part in folds(QIDS, 5) if "q0" in part)
    warned = [r.getMessage() for r in caplog.records if "are left out" in r.getMessage()]
    assert len(warned) == 1 and f"its {len(left_out)} queries are left out" in warned[0]
    check = _record(out)["heldout_check"]
    assert check["queries"] == len(QIDS) - len(left_out) and check["shown_better"] is False
