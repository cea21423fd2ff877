"""dotcat.search.fusion: RRF and linear fusion against hand values, the dev choice."""

from __future__ import annotations

import math
import random

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


def smoothed(scores: dict[str, float]) -> dict[str, float]:
    """Min-max fused scores of ``n`` candidates put on [1 / (n + 1), 1]."""
    n = len(scores)
    return {d: (n * s + 1) / (n + 1) for d, s in scores.items()}


def test_linear_fusion_normalises_each_side_and_counts_a_missing_side_as_zero():
    fused = dict(linear_fusion(DENSE, BM25, weight=0.7))
    # dense: a 1, b 0.5, c 0; bm25: c 1, d 0.5, a 0
    assert fused == pytest.approx(smoothed({"a": 0.7, "b": 0.35, "c": 0.3, "d": 0.15}))
    assert [d for d, _ in linear_fusion(DENSE, BM25, 0.0)][:2] == ["c", "d"]  # BM25 only
    assert [d for d, _ in linear_fusion(DENSE, BM25, 1.0)][:2] == ["a", "b"]  # dense only
    assert linear_fusion([("x", 3.0), ("y", 3.0)], [], 0.5) == [("x", 2 / 3), ("y", 2 / 3)]


def test_a_lone_bm25_match_keeps_its_side_s_full_share():
    # dense: a 1, b 0.875, c 0. BM25 matched b alone: its list's best (1), as under RRF where it
    # ranks first; scaled to 0 it would fall below a.
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.1)]
    fused = dict(linear_fusion(dense, [("b", 3.2)], 0.5))
    assert fused == pytest.approx(smoothed({"a": 0.5, "b": 0.9375, "c": 0.0}))


def test_no_candidate_scores_zero_and_the_ranking_is_min_max_s_own():
    """The lowest of two filtered hits scored 0.0000 (issue 64): the last of every list it was
    in, as a document no side found. Over random lists (ties and lone matches included), the
    order is the plain min-max fusion's and every score lies in [1 / (n + 1), 1]."""
    rng = random.Random(64)
    for _ in range(500):
        docs = [f"d{i}" for i in range(rng.randint(1, 12))]
        sides = [
            [(d, float(rng.choice([0.5, 1.0, rng.random() * 10]))) for d in rng.sample(docs, m)]
            for m in (rng.randint(0, len(docs)), rng.randint(0, len(docs)))
        ]
        weight = rng.choice([0.0, 0.3, 0.5, 1.0])
        plain = {}
        for side, share in zip(sides, (weight, 1 - weight), strict=True):
            low, high = min((s for _, s in side), default=0), max((s for _, s in side), default=0)
            for d, s in side:
                norm = (s - low) / (high - low) if high > low else 1.0
                plain[d] = plain.get(d, 0.0) + share * norm
        fused = linear_fusion(*sides, weight)
        expected = sorted(plain, key=lambda d: (-round(plain[d], 12), d))
        assert [d for d, _ in fused] == expected
        assert all(1 / (len(plain) + 1) - 1e-12 <= s <= 1 + 1e-12 for _, s in fused)


def test_fusion_settings_are_checked_and_round_trip():
    for bad in (dict(method="sum"), dict(method="linear", weight=1.5), dict(k=0)):
        with pytest.raises(DotcatError):
            Fusion(**bad)
    fusion = Fusion("linear", 0.3, dev={"source": "dev"})
    assert Fusion.from_json(fusion.to_json()) == fusion
    assert Fusion.from_json(fusion.to_json()).dev == {"source": "dev"}


def test_choose_fusion_moves_from_the_prior_only_as_far_as_dev_shows():
    # Dense puts the relevant r last, BM25 first: r is first for weights up to 0.4 (nDCG@10 1
    # on every query), second from 0.5 on and with RRF. No spread: 0 to 0.4 tie exactly, the
    # prior (0.5) is clearly worse, the tied weight nearest it (0.4) is chosen.
    dense = {f"q{i}": [("a", 0.9), ("b", 0.8), ("r", 0.1)] for i in range(24)}
    bm25 = {f"q{i}": [("r", 10.0), ("a", 1.0), ("b", 0.5)] for i in range(24)}
    qrels = {f"q{i}": {"r": 1} for i in range(24)}
    fusion = choose_fusion(dense, bm25, qrels, "test dev")
    assert (fusion.method, fusion.weight) == ("linear", 0.4)
    dev = fusion.dev
    assert dev["tied"] == [f"linear {w / 10:g}" for w in range(5)] and dev["best"] == "linear 0"
    assert dev["scores"]["linear 0.4"] == 1.0
    assert dev["scores"]["rrf"] == dev["scores"]["linear 0.5"] == pytest.approx(1 / math.log2(3))
    assert dev["source"] == "test dev" and dev["queries"] == 24 and dev["prior"] == "linear 0.5"
    assert dev["reason"].endswith("linear 0.4 is the nearest to it")


def test_ties_and_too_few_queries_keep_the_prior():
    same = {f"q{i}": [("a", 1.0)] for i in range(24)}
    fusion = choose_fusion(same, same, {q: {"a": 1} for q in same}, "dev")
    assert (fusion.method, fusion.weight) == ("linear", 0.5)
    assert fusion.dev["reason"].endswith("is tied: kept")
    two = {"q1": [("d", 10.0), ("a", 1.0)], "q2": [("e", 10.0), ("b", 9.0)]}
    fusion = choose_fusion(two, two, {"q1": {"d": 1}, "q2": {"b": 1}}, "dev")
    assert (fusion.method, fusion.weight) == ("linear", 0.5)
    assert fusion.dev["reason"].startswith("only 2 dev queries")


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


@pytest.mark.kernels
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
    assert dev["rule"] == "paired one-standard-error" and dev["prior"] == "linear 0.5"
    assert dev["grid"] == ["rrf", *(f"linear {w / 10:g}" for w in range(11))]
    assert set(dev["scores"]) == set(dev["errors"]) == set(dev["grid"])
    assert dev["best"] in dev["tied"] and dev["chosen"] in dev["tied"]
    assert dev["scores"][dev["best"]] == max(dev["scores"].values())
    # The tied set is what the recorded curve and errors say; the choice follows from it.
    gap = {p: dev["scores"][dev["best"]] - dev["scores"][p] for p in dev["grid"]}
    assert dev["tied"] == [p for p in dev["grid"] if gap[p] <= dev["errors"][p] + 1e-5]
    if dev["prior"] in dev["tied"]:
        assert dev["chosen"] == "linear 0.5" and dev["reason"].endswith("is tied: kept")
    else:
        assert dev["reason"].endswith(f"{dev['chosen']} is the nearest to it")
    assert "fusion chosen: " in result.output and dev["reason"] in result.output
    assert "tied with the best: " + ", ".join(dev["tied"]) in result.output
