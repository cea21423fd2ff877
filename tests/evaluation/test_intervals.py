"""Bootstrap intervals of the means: a hand computation, reproducibility, a peer (scipy)."""

from __future__ import annotations

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate
from dotcat.evaluation.intervals import intervals, resample_means
from dotcat.evaluation.judged import judged_at
from dotcat.evaluation.significance import ComparisonConfig


def test_a_mean_interval_by_hand_on_a_tiny_run():
    # Three queries, B = 39 resamples: at 80% cut J = 4 from each tail, the first J whose
    # (1 + 2J) / 40 > 0.2. The interval is the 4th smallest and 4th largest resampled mean.
    values = np.array([0.2, 0.5, 0.9])
    found = intervals({"run": _report(values)}, samples=39, confidence=0.8, seed=1)["run"]
    means = np.sort(resample_means(values[None, :], 39, 1)[0])
    assert found["nDCG@10"].mean == pytest.approx(1.6 / 3)
    assert (found["nDCG@10"].low, found["nDCG@10"].high) == pytest.approx((means[3], means[-4]))


def _report(values):
    from dotcat.evaluation import EvalReport

    per_query = {f"q{i}": {"nDCG@10": float(v)} for i, v in enumerate(values)}
    return EvalReport({"nDCG@10": float(np.mean(values))}, per_query, len(values))


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
    one = intervals(reports, samples=500, seed=3)
    assert one == intervals(reports, samples=500, seed=3)
    other = intervals(reports, samples=500, seed=4)
    assert one["other"]["nDCG@10"] != other["other"]["nDCG@10"]
    for found in one.values():
        for i in found.values():
            assert i.low <= i.mean <= i.high


def test_the_percentile_interval_agrees_with_scipys():
    from scipy import stats

    values = np.random.default_rng(0).random(200)
    ours = intervals({"run": _report(values)}, samples=20_000, seed=0)["run"]["nDCG@10"]
    theirs = stats.bootstrap((values,), np.mean, n_resamples=20_000, method="percentile",
                             random_state=np.random.default_rng(1)).confidence_interval  # fmt: skip
    assert ours.low == pytest.approx(theirs.low, abs=0.004)
    assert ours.high == pytest.approx(theirs.high, abs=0.004)


def test_a_summed_count_gets_its_interval_and_differences_on_the_scale_of_its_sum():
    # ir-measures sums NumRet over the queries: the table shows the sum, so its interval and
    # its difference to a baseline are of sums (n times the means'), the p-values unchanged.
    from dotcat.evaluation.significance import compare_to_baseline

    qrels = {f"q{i}": {"a": 1, "b": 0} for i in range(12)}
    runs = {"base": {f"q{i}": {"a": 2.0, "x": 1.0} for i in range(12)},
            "other": {f"q{i}": {"a": 1.0} for i in range(0, 12, 2)}}  # fmt: skip
    reports = {name: evaluate(run, qrels, ["NumRet", "nDCG@10"]) for name, run in runs.items()}
    assert reports["base"].aggregate["NumRet"] == 24 and reports["other"].aggregate["NumRet"] == 6
    for name, found in intervals(reports, samples=999, seed=0).items():
        sum_ = found["NumRet"]
        assert sum_.mean == pytest.approx(reports[name].aggregate["NumRet"])
        assert sum_.low <= sum_.mean <= sum_.high
    assert found["NumRet"].high - found["NumRet"].low > 2  # other's: a mean's would be < 1
    for test in ("t", "randomisation", "bootstrap"):
        c = compare_to_baseline(reports, "base", test=test, bootstrap=999)["other"]
        assert c["NumRet"].diff == pytest.approx(6 - 24)
        assert c["NumRet"].low <= -18 <= c["NumRet"].high and c["NumRet"].significant
        assert c["nDCG@10"].diff == pytest.approx(reports["other"].aggregate["nDCG@10"] - 1)


def test_settings_and_bad_input():
    with pytest.raises(DotcatError, match="bootstrap must be >= 0"):
        ComparisonConfig(bootstrap=-1).validate()
    with pytest.raises(DotcatError, match="bootstrap must be >= 1"):
        ComparisonConfig(test="bootstrap", bootstrap=0).validate()
    reports = _reports()
    del reports["other"].per_query["q0"]
    with pytest.raises(DotcatError, match="other: evaluated on other queries"):
        intervals(reports)


def test_judged_at_by_hand():
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 1}, "q3": {"d": 0}}
    run = {"q1": {"a": 3, "x": 2, "b": 1, "y": 0}, "q2": {"z": 1.0}}  # q3: no results
    # ir-measures' Judged@k: the share of the top k retrieved that is judged. q1: a and b of
    # its 4; q2: none of its 1; q3 retrieved nothing: 0.
    per_query = {"q1": 2 / 4, "q2": 0 / 1, "q3": 0.0}
    assert judged_at(run, qrels) == pytest.approx(sum(per_query.values()) / 3)


def test_judged_at_10_is_warned_of_for_judged_pools_only():
    from dotcat.evaluation.uncertainty import uncertainty

    run = {"q1": {"a": 3, "x": 2, "y": 1}, "q2": {"c": 2, "z": 1}}
    pool = {"q1": {"a": 1, "b": 0}, "q2": {"c": 1, "d": 0}}  # judged pools: zeros too
    positives = {"q1": {"a": 1}, "q2": {"c": 1}}  # a BEIR set's qrels: relevant ones only
    for qrels, pooled in ((pool, True), (positives, False)):
        reports = {"run": evaluate(run, qrels, ["nDCG@10"])}
        found = uncertainty({"run": run}, qrels, reports, ComparisonConfig(bootstrap=0))
        assert found.judged["run"] == pytest.approx((1 / 3 + 1 / 2) / 2)
        assert found.pooled is pooled and bool(found.notes) is pooled
        assert ("judged@10: run 0.417" in found.text()) is pooled


def test_a_low_judged_at_10_says_whether_queries_or_judgements_are_missing():
    # Judging more helps a run whose top 10 holds unjudged documents, not one that leaves
    # judged queries unanswered: each warning says which is the case.
    from dotcat.evaluation.judged import judged_notes

    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 1, "d": 0}, "q3": {"e": 1}, "q4": {"f": 0}}
    whole = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1}}  # all judged; q3, q4 without results
    gaps = {q: {"x": 9.0, **dict.fromkeys(docs, 1.0)} for q, docs in qrels.items()}
    runs = {"whole": whole, "gaps": gaps, "both": {"q1": {"x": 1, "a": 0}}}
    shares, notes = judged_notes(runs, qrels)
    expected = {"whole": 0.5, "gaps": (2 / 3 + 2 / 3 + 1 / 2 + 1 / 2) / 4, "both": 1 / 8}
    assert shares == pytest.approx(expected)
    missing = "judged queries have no results in this run"
    assert notes[0].startswith("whole: judged@10 0.500 < 80%: 2 of 4 " + missing)
    assert "judge more" not in notes[0] and missing not in notes[1]
    assert "only 58% of the top 10 of the queries it answers is judged" in notes[1]
    assert "judge more (dotcat judge pool --run gaps)" in notes[1]
    assert "3 of 4 " + missing in notes[2] and "only 50% of the top 10" in notes[2]


def test_an_interval_too_few_resamples_leave_open_is_said_and_null_in_json():
    from dotcat.evaluation.intervals import format_intervals

    values = np.array([0.2, 0.5, 0.9])
    found = intervals({"run": _report(values)}, samples=10, confidence=0.975, seed=1)
    interval = found["run"]["nDCG@10"]
    assert interval.to_json() == {"mean": pytest.approx(1.6 / 3), "low": None, "high": None}
    text = format_intervals(found, 10, 0.975, 1)
    assert text.startswith("97.5% bootstrap intervals")  # not rounded to "98%"
    assert "10 resamples are too few for this level" in text
    closed = intervals({"run": _report(values)}, samples=999, confidence=0.95, seed=1)
    assert None not in closed["run"]["nDCG@10"].to_json().values()
    assert "too few" not in format_intervals(closed, 999, 0.95, 1)
