"""Bootstrap confidence intervals: a hand computation, reproducibility, a peer (scipy)."""

from __future__ import annotations

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate
from dotcat.evaluation.intervals import (
    IntervalConfig,
    bootstrap_interval,
    draw_indices,
    interval,
    intervals,
)
from dotcat.evaluation.judged import judged_at


def test_an_interval_by_hand_on_a_tiny_run():
    # Three queries, four resamples given explicitly (rows of query indices).
    values = np.array([0.2, 0.5, 0.9])
    draws = np.array([[0, 0, 1], [2, 2, 1], [0, 1, 2], [1, 1, 1]])
    # Resampled means by hand: (0.2+0.2+0.5)/3 = 0.3, (0.9+0.9+0.5)/3 = 0.7667,
    # (0.2+0.5+0.9)/3 = 0.5333, 0.5. Sorted: 0.3, 0.5, 0.5333, 0.7667. numpy's linear quantile
    # at q: position q * (4 - 1). q = 0.1: 0.3 + 0.3 * (0.5 - 0.3) = 0.36;
    # q = 0.9: position 2.7: 0.5333 + 0.7 * (0.7667 - 0.5333) = 0.6967.
    found = interval(values, draws, confidence=0.8)
    assert found.mean == pytest.approx(1.6 / 3)
    assert found.low == pytest.approx(0.36)
    assert found.high == pytest.approx(1.6 / 3 + 0.7 * (2.3 / 3 - 1.6 / 3))


def test_the_draws_are_numpys_seeded_generator_in_blocks_or_not(monkeypatch):
    expected = np.random.default_rng(7).integers(0, 5, size=(40, 5))
    assert np.array_equal(draw_indices(5, 40, 7), expected)
    monkeypatch.setattr("dotcat.evaluation.intervals._BLOCK_ENTRIES", 12)  # rows of 2
    assert np.array_equal(draw_indices(5, 40, 7), expected)


def _reports():
    qrels = {f"q{i}": {"a": 1, "b": int(i % 3 == 0)} for i in range(30)}
    rng = np.random.default_rng(1)
    runs = {
        name: {q: {"a": float(rng.random()), "b": float(rng.random()), "c": 0.5} for q in qrels}
        for name in ("base", "other")
    }
    return {name: evaluate(run, qrels, ["nDCG@10", "RR@10"]) for name, run in runs.items()}


def test_intervals_are_reproducible_under_a_seed_and_move_with_it():
    reports = _reports()
    one = intervals(reports, "base", samples=500, seed=3)
    assert one == intervals(reports, "base", samples=500, seed=3)
    other = intervals(reports, "base", samples=500, seed=4)
    assert one["other"].measures["nDCG@10"] != other["other"].measures["nDCG@10"]
    diff = one["other"].differences["nDCG@10"]
    expected = reports["other"].aggregate["nDCG@10"] - reports["base"].aggregate["nDCG@10"]
    assert diff.mean == pytest.approx(expected) and diff.low <= diff.mean <= diff.high
    assert one["base"].differences is None
    for found in one.values():
        for i in found.measures.values():
            assert i.low <= i.mean <= i.high


def test_the_percentile_interval_agrees_with_scipys():
    from scipy import stats

    values = np.random.default_rng(0).random(200)
    ours = bootstrap_interval(values, samples=20_000, seed=0)
    theirs = stats.bootstrap((values,), np.mean, n_resamples=20_000, method="percentile",
                             random_state=np.random.default_rng(1)).confidence_interval  # fmt: skip
    assert ours.low == pytest.approx(theirs.low, abs=0.004)
    assert ours.high == pytest.approx(theirs.high, abs=0.004)


def test_settings_and_bad_input():
    with pytest.raises(DotcatError, match="confidence must be in"):
        IntervalConfig(confidence=1.0).validate()
    with pytest.raises(DotcatError, match="bootstrap must be >= 0"):
        IntervalConfig(bootstrap=-1).validate()
    with pytest.raises(DotcatError, match="baseline 'x'"):
        intervals(_reports(), "x")


def test_judged_at_by_hand():
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 1}, "q3": {"d": 0}}
    run = {"q1": {"a": 3, "x": 2, "b": 1, "y": 0}, "q2": {"z": 1.0}}  # q3: no results
    # ir-measures' Judged@k: the share of the top k retrieved that is judged. q1: a and b of
    # its 4; q2: none of its 1; q3 retrieved nothing: 0.
    per_query = {"q1": 2 / 4, "q2": 0 / 1, "q3": 0.0}
    assert judged_at(run, qrels) == pytest.approx(sum(per_query.values()) / 3)


def test_judged_at_10_is_warned_of_for_judged_pools_only():
    from dotcat.evaluation.intervals import IntervalConfig
    from dotcat.evaluation.uncertainty import uncertainty

    run = {"q1": {"a": 3, "x": 2, "y": 1}, "q2": {"c": 2, "z": 1}}
    pool = {"q1": {"a": 1, "b": 0}, "q2": {"c": 1, "d": 0}}  # judged pools: zeros too
    positives = {"q1": {"a": 1}, "q2": {"c": 1}}  # a BEIR set's qrels: relevant ones only
    for qrels, pooled in ((pool, True), (positives, False)):
        reports = {"run": evaluate(run, qrels, ["nDCG@10"])}
        found = uncertainty({"run": run}, qrels, reports, None, IntervalConfig(bootstrap=0), 0)
        assert found.judged["run"] == pytest.approx((1 / 3 + 1 / 2) / 2)
        assert found.pooled is pooled and bool(found.notes) is pooled
        assert ("judged@10: run 0.417" in found.text()) is pooled
