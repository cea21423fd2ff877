"""dotcat.evaluation.choice: the paired one-standard-error rule against hand-computed cases."""

from __future__ import annotations

import json
import math

import pytest

from dotcat.errors import DotcatError
from dotcat.evaluation.choice import MIN_QUERIES, argmax, choose

QUERIES = [f"q{i:02d}" for i in range(30)]
GRID = ["rrf", "0.5", "0.6", "0.7", "0.8", "0.9"]


def _rows(means: dict[str, float], swing: dict[str, float] | None = None) -> dict:
    """Per-query scores: each point's mean, plus ``swing`` added on even and taken on odd
    queries (a per-query spread around the mean that cancels in it)."""
    swing = swing or {}
    return {
        p: {q: m + swing.get(p, 0.0) * (1 if i % 2 == 0 else -1) for i, q in enumerate(QUERIES)}
        for p, m in means.items()
    }


def test_a_clear_winner_is_chosen_over_the_prior():
    # 0.7 beats every other point by 0.1 or more on every query: alone within one SE.
    scores = _rows(
        {"rrf": 0.5, "0.5": 0.55, "0.6": 0.6, "0.7": 0.7, "0.8": 0.6, "0.9": 0.5},
        swing={"rrf": 0.01, "0.5": 0.02, "0.6": 0.02, "0.7": 0.03, "0.8": 0.02, "0.9": 0.01},
    )
    choice = choose(scores, "rrf", GRID)
    assert (choice.chosen, choice.best, choice.tied) == ("0.7", "0.7", ("0.7",))
    assert choice.queries == 30 and choice.means["0.7"] == pytest.approx(0.7)
    assert "the prior default rrf is 0.2000 below the best (0.7" in choice.reason
    assert choice.reason.endswith("(0.7), 0.7 is the nearest to it")


def test_the_standard_error_is_that_of_the_paired_differences():
    # d(q) = best - other alternates 0.1 +- 0.02: mean 0.1, sample sd of (+0.02, -0.02) over
    # 30 queries = 0.02 * sqrt(30 / 29), SE = that / sqrt(30).
    scores = _rows({"a": 0.6, "b": 0.5}, swing={"a": 0.01, "b": -0.01})
    choice = choose(scores, "b", ["a", "b"])
    assert choice.errors["a"] == 0.0
    assert choice.errors["b"] == pytest.approx(0.02 * math.sqrt(30 / 29) / math.sqrt(30))
    assert choice.chosen == "a" and choice.tied == ("a",)


def test_a_plateau_within_noise_keeps_the_prior():
    # The best (0.8) is 0.01 above the prior on the mean, but the per-query differences swing
    # by 0.3 either way: SE 0.055, far above 0.01.
    scores = _rows(
        {"rrf": 0.60, "0.5": 0.58, "0.6": 0.605, "0.7": 0.608, "0.8": 0.61, "0.9": 0.3},
        swing={"rrf": 0.15, "0.8": -0.15},
    )
    choice = choose(scores, "rrf", GRID)
    assert choice.best == "0.8" and choice.chosen == "rrf"
    assert "rrf" in choice.tied and "0.9" not in choice.tied
    assert choice.reason.endswith("the prior default rrf (0.6000) is tied: kept")
    assert argmax(scores, GRID) == "0.8"  # what the rule replaces


def test_without_the_prior_in_it_the_tied_point_nearest_the_prior_is_chosen():
    # The SciFact curve: 0.8 beat 0.7 by 0.00002 and 0.6 by 0.0017, all three within
    # noise of each other; the prior (0.5) 0.01 below with little spread, RRF far below.
    means = {"rrf": 0.7838, "0.5": 0.8059, "0.6": 0.8142, "0.7": 0.81585, "0.8": 0.81587}
    means["0.9"] = 0.8003
    choice = choose(_rows(means, {"0.6": 0.02, "0.7": 0.01, "0.8": -0.01}), "0.5", GRID)
    assert choice.best == "0.8" and choice.tied == ("0.6", "0.7", "0.8")
    assert choice.chosen == "0.6" and argmax(_rows(means), GRID) == "0.8"
    # Two tied points as near the prior: the higher dev mean (0.70 is within one SE, 0.019,
    # of 0.71: their differences swing by 0.1), then, with equal means, the earlier.
    grid, spread = ["0.4", "0.5", "0.6"], {"0.4": 0.05, "0.6": -0.05}
    choice = choose(_rows({"0.4": 0.70, "0.5": 0.5, "0.6": 0.71}, spread), "0.5", grid)
    assert (choice.tied, choice.chosen) == (("0.4", "0.6"), "0.6")
    choice = choose(_rows({"0.4": 0.71, "0.5": 0.5, "0.6": 0.71}), "0.5", grid)
    assert (choice.tied, choice.chosen) == (("0.4", "0.6"), "0.4")


def test_too_few_queries_keep_the_prior_and_say_so():
    few = {p: {q: s for q, s in list(row.items())[:5]} for p, row in _rows(
        {"rrf": 0.2, "0.5": 0.9, "0.6": 0.9, "0.7": 0.9, "0.8": 0.9, "0.9": 0.9}
    ).items()}  # fmt: skip
    choice = choose(few, "rrf", GRID)
    assert choice.chosen == "rrf" and choice.best is None and choice.tied == ()
    assert choice.reason == (
        f"only 5 dev queries (fewer than {MIN_QUERIES}): kept the prior default rrf"
    )
    assert choice.means["0.5"] == pytest.approx(0.9)  # the curve is still recorded
    assert choose({"a": {}, "b": {}}, "b").chosen == "b"  # no queries at all


def test_ties_are_broken_the_same_way_whatever_the_input_order():
    flat = _rows(dict.fromkeys(GRID, 0.5))
    assert choose(flat, "0.7", GRID).chosen == "0.7"  # all tied: the prior
    assert choose(flat, "rrf", GRID).reason == "the prior default rrf is the best on dev: kept"
    # Equal means, the prior outside the tied set: the tied point nearest it.
    scores = _rows({"rrf": 0.1, "0.5": 0.5, "0.6": 0.9, "0.7": 0.9, "0.8": 0.9, "0.9": 0.9})
    reordered = {p: dict(reversed(scores[p].items())) for p in reversed(GRID)}
    first = choose(scores, "0.9", ["rrf", "0.5", "0.6", "0.7", "0.8", "0.9"])
    assert first.best == "0.6" and first.chosen == "0.9"  # the prior is tied
    first = choose(scores, "0.5", GRID)
    assert first.tied == ("0.6", "0.7", "0.8", "0.9") and first.chosen == "0.6"
    assert choose(reordered, "0.5", GRID) == first
    # Sums in another order must not decide: 0.1 + 0.2 + 0.3 against 0.3 + 0.2 + 0.1.
    rows = {"a": dict(zip(QUERIES[:20], [0.1, 0.2, 0.3] * 6 + [0.5, 0.5], strict=True))}
    rows["b"] = dict(zip(QUERIES[:20], [0.3, 0.2, 0.1] * 6 + [0.5, 0.5], strict=True))
    assert choose(rows, "b", ["a", "b"]).chosen == "b"


def test_the_record_is_json_with_the_curve_the_tied_set_and_the_reason():
    scores = {0.0: {q: 0.4 for q in QUERIES}, 0.5: {q: 0.6 for q in QUERIES}}
    scores[1.0] = {q: 0.59 + (0.1 if i % 2 else -0.1) for i, q in enumerate(QUERIES)}
    record = json.loads(json.dumps(choose(scores, 1.0, [0.0, 0.5, 1.0]).to_json()))
    assert record["rule"] == "paired one-standard-error" and record["queries"] == 30
    assert (record["prior"], record["best"], record["chosen"]) == ("1.0", "0.5", "1.0")
    assert record["scores"] == {"0.0": 0.4, "0.5": 0.6, "1.0": 0.59}
    assert record["tied"] == ["0.5", "1.0"] and "is tied: kept" in record["reason"]
    assert set(record["errors"]) == {"0.0", "0.5", "1.0"}


def test_points_scored_on_other_queries_or_a_foreign_prior_are_refused():
    scores = _rows({"a": 0.5, "b": 0.6})
    with pytest.raises(DotcatError, match="prior default 'c'"):
        choose(scores, "c")
    with pytest.raises(DotcatError, match="does not list each scored point once"):
        choose(scores, "a", ["a"])
    scores["b"].pop("q00")
    with pytest.raises(DotcatError, match="point 'b' was scored on other queries"):
        choose(scores, "a")
