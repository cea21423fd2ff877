"""dotcat.search.fusion: RRF and linear fusion against hand values, the dev choice."""

from __future__ import annotations

import pytest

from dotcat.errors import DotcatError
from dotcat.search.fusion import (
    Fusion,
    choose_fusion,
    linear_fusion,
    reciprocal_rank_fusion,
)

DENSE = [("a", 0.9), ("b", 0.7), ("c", 0.5)]
BM25 = [("c", 12.0), ("d", 8.0), ("a", 4.0)]


def test_rrf_sums_reciprocal_ranks():
    fused = dict(reciprocal_rank_fusion([DENSE, BM25], k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["b"] == pytest.approx(1 / 62) and fused["d"] == pytest.approx(1 / 62)
    order = [d for d, _ in reciprocal_rank_fusion([DENSE, BM25], k=60)]
    assert order == ["a", "c", "b", "d"]  # ties broken by id


def test_linear_fusion_normalises_each_side_and_counts_a_missing_side_as_zero():
    fused = dict(linear_fusion(DENSE, BM25, weight=0.7))
    # dense: a 1, b 0.5, c 0; bm25: c 1, d 0.5, a 0
    assert fused == pytest.approx({"a": 0.7, "b": 0.35, "c": 0.3, "d": 0.15})
    assert [d for d, _ in linear_fusion(DENSE, BM25, 0.0)][:2] == ["c", "d"]  # BM25 only
    assert [d for d, _ in linear_fusion(DENSE, BM25, 1.0)][:2] == ["a", "b"]  # dense only
    assert linear_fusion([("x", 3.0), ("y", 3.0)], [], 0.5) == [("x", 0.0), ("y", 0.0)]


def test_fusion_settings_are_checked_and_round_trip():
    for bad in (dict(method="sum"), dict(method="linear", weight=1.5), dict(k=0)):
        with pytest.raises(DotcatError):
            Fusion(**bad)
    fusion = Fusion("linear", 0.3, dev={"source": "dev"})
    assert Fusion.from_json(fusion.to_json()) == fusion
    assert Fusion.from_json(fusion.to_json()).dev == {"source": "dev"}


def test_choose_fusion_takes_the_best_on_dev_and_records_every_score():
    # q1 wants what BM25 finds (d), q2 what dense finds (b): only a mix gets both at rank 1-2.
    dense = {"q1": [("a", 0.9), ("d", 0.8)], "q2": [("b", 0.9), ("e", 0.1)]}
    bm25 = {"q1": [("d", 10.0), ("a", 1.0)], "q2": [("e", 10.0), ("b", 9.0)]}
    qrels = {"q1": {"d": 1}, "q2": {"b": 1}}
    fusion = choose_fusion(dense, bm25, qrels, "test dev")
    scores = fusion.dev["scores"]
    assert set(scores) == {"rrf", *(f"linear {w / 10:g}" for w in range(11))}
    assert scores[_name(fusion)] == max(scores.values())
    assert fusion.dev["source"] == "test dev" and fusion.dev["queries"] == 2


def test_ties_go_to_rrf():
    same = {"q": [("a", 1.0)]}
    fusion = choose_fusion(same, same, {"q": {"a": 1}}, "dev")
    assert fusion.method == "rrf"


def _name(fusion: Fusion) -> str:
    return "rrf" if fusion.method == "rrf" else f"linear {fusion.weight:g}"


def _beir_with_dev(root):
    """The toy training BEIR dir plus ``qrels/dev.tsv``: 32 dev queries (two per topic: its
    two words, and one of them with a filler word), enough for the choice rule to test."""
    import json

    from tests.training.toy import TOPICS, make_training_beir

    make_training_beir(root)
    dev = {}
    for i, (a, b) in enumerate(TOPICS):
        dev[f"v{i}a"] = (f"{b} {a}", f"d{i}")
        dev[f"v{i}b"] = (f"{a} effect", f"d{i}")
    with open(root / "queries.jsonl", "a", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": t}) + "\n" for q, (t, _) in dev.items())
    lines = [f"{q}\t{d}\t1\n" for q, (_, d) in dev.items()]
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines))
    return root


def test_dotcat_index_records_and_prints_the_curve_the_tied_set_and_why(tiny_bert_dir, tmp_path):
    from typer.testing import CliRunner

    from dotcat.cli import app
    from dotcat.index.manifest import Manifest

    data, out = _beir_with_dev(tmp_path / "beir"), tmp_path / "index"
    args = ["-v", "index", str(data), str(out), "--model", str(tiny_bert_dir), "--precision"]
    args += ["fp32", "--device", "cpu"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    dev = Manifest.read(out).fusion["dev"]
    assert dev["source"] == "qrels/dev.tsv" and dev["queries"] == 32
    assert dev["rule"] == "paired one-standard-error" and dev["prior"] == "rrf"
    assert dev["grid"] == ["rrf", *(f"linear {w / 10:g}" for w in range(11))]
    assert set(dev["scores"]) == set(dev["errors"]) == set(dev["grid"])
    assert dev["best"] in dev["tied"] and dev["chosen"] in dev["tied"]
    assert dev["scores"][dev["best"]] == max(dev["scores"].values())
    # The tied set is what the recorded curve and errors say; the choice follows from it.
    gap = {p: dev["scores"][dev["best"]] - dev["scores"][p] for p in dev["grid"]}
    assert dev["tied"] == [p for p in dev["grid"] if gap[p] <= dev["errors"][p] + 1e-5]
    if dev["prior"] in dev["tied"]:
        assert dev["chosen"] == "rrf" and dev["reason"].endswith("is tied: kept")
    else:
        assert dev["reason"].endswith(f"{dev['chosen']} is the most central")
    assert "fusion chosen: " in result.output and dev["reason"] in result.output
    assert "tied with the best: " + ", ".join(dev["tied"]) in result.output
