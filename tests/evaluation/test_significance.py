"""Paired tests, their intervals, Holm-Bonferroni and wins/ties/losses of
dotcat.evaluation.significance."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dotcat.errors import DotcatError
from dotcat.evaluation import (
    EvalReport,
    compare_to_baseline,
    holm_bonferroni,
    paired_ttest,
    significance,
    wins_ties_losses,
)


def _report(values, measure: str = "nDCG@10") -> EvalReport:
    per_query = {f"q{i}": {measure: float(v)} for i, v in enumerate(values)}
    return EvalReport({measure: float(np.mean(values))}, per_query, n_queries=len(values))


def _systems(seed: int, n: int = 40):
    """A baseline and two systems: one clearly better, one about the same."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.8, n)
    better = np.clip(base + rng.normal(0.08, 0.1, n), 0, 1)
    same = np.clip(base + rng.normal(0.0, 0.1, n), 0, 1)
    return base, better, same


def reference_randomisation_pvalue(d, permutations: int, seed: int) -> float:
    """A straightforward loop: one row of uniforms per permutation, signs flipped below 0.5."""
    d = [float(x) for x in d]
    if all(x == 0 for x in d):
        return 1.0
    observed = abs(sum(d))
    tolerance = 1e-10 * sum(abs(x) for x in d)
    rng = np.random.default_rng(seed)
    reached = 0
    for _ in range(permutations):
        u = rng.random(len(d))
        total = sum(-x if flip < 0.5 else x for x, flip in zip(d, u, strict=True))
        if abs(total) >= observed - tolerance:
            reached += 1
    return (reached + 1) / (permutations + 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ttest_pvalues_equal_scipy_ttest_rel(seed):
    base, better, same = _systems(seed)
    reports = {"base": _report(base), "better": _report(better), "same": _report(same)}
    got = compare_to_baseline(reports, "base", test="t")
    for name, values in (("better", better), ("same", same)):
        expected = stats.ttest_rel(values, base)
        # compare_to_baseline rounds the differences to 12 decimals (ties stay ties)
        assert got[name]["nDCG@10"].pvalue == pytest.approx(expected.pvalue, rel=1e-9)
        direct = paired_ttest(reports["base"], reports[name], "nDCG@10")
        assert direct.pvalue == pytest.approx(expected.pvalue, rel=1e-12)
        assert direct.statistic == pytest.approx(expected.statistic, rel=1e-12)


@pytest.mark.parametrize(("seed", "n", "permutations"), [(0, 12, 500), (7, 30, 1000), (3, 5, 64)])
def test_randomisation_test_agrees_with_a_reference_loop(seed, n, permutations):
    base, better, _ = _systems(seed, n)
    d = better - base
    expected = reference_randomisation_pvalue(d, permutations, seed)
    result = significance.Randomisation(d, permutations, seed)
    assert result.pvalue == expected and result.mean == pytest.approx(np.mean(d))


def test_randomisation_blocks_do_not_change_the_draws(monkeypatch):
    base, better, same = _systems(5, 25)
    whole = significance.Randomisation(same - base, 999, 11)
    monkeypatch.setattr(significance, "_BLOCK_ENTRIES", 25 * 7)  # 7 permutations per block
    blocks = significance.Randomisation(same - base, 999, 11)
    assert blocks.pvalue == whole.pvalue
    # The same draws; the products' rounding may differ with the block's shape.
    assert blocks.above == pytest.approx(whole.above, rel=1e-12, abs=1e-15)
    assert blocks.below == pytest.approx(whole.below, rel=1e-12, abs=1e-15)


def test_randomisation_edge_cases_and_agreement_with_the_t_test():
    def pvalue(d, permutations, seed):
        return significance.Randomisation(d, permutations, seed).pvalue

    assert pvalue(np.zeros(10), 100, 0) == 1.0
    # Every assignment is at most as extreme as the observed all-positive one: p = 1/(B+1)...
    # except the all-positive one itself; with n = 20 it is (essentially) never drawn.
    assert pvalue(np.full(20, 0.1), 1000, 0) == 1 / 1001
    with pytest.raises(DotcatError, match="permutations"):
        pvalue(np.ones(3), 0, 0)
    # Smucker et al. (2007): on IR-like data the two tests agree closely.
    base, _, same = _systems(4, 300)
    p_t = stats.ttest_rel(same, base).pvalue
    p_r = significance.Randomisation(same - base, 20_000, 0).pvalue
    assert abs(p_t - p_r) < 0.02


def test_holm_bonferroni_against_hand_computed_values():
    # Sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 -> max(0.06, 0.04) = 0.06.
    assert holm_bonferroni([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_bonferroni([0.5, 0.6]) == [1.0, 1.0]  # 0.5*2 capped at 1; monotone after
    assert holm_bonferroni([0.02]) == [0.02]
    assert holm_bonferroni([0.01, 0.01, 0.2]) == pytest.approx([0.03, 0.03, 0.2])
    assert holm_bonferroni([]) == []


def test_wins_ties_losses():
    base = np.array([0.5, 0.2, 1.0, 0.0, 0.3])
    system = np.array([0.6, 0.2, 0.5, 0.0, 0.3 + 1e-12])
    assert wins_ties_losses(base, system) == (1, 3, 1)
    assert wins_ties_losses(system, base) == (1, 3, 1)


def test_compare_to_baseline_corrects_across_systems_and_marks_significance():
    base, better, same = _systems(0, 60)
    reports = {"base": _report(base), "better": _report(better), "same": _report(same)}
    got = compare_to_baseline(reports, "base", alpha=0.05)
    assert set(got) == {"better", "same"}
    raw = [got["better"]["nDCG@10"].pvalue, got["same"]["nDCG@10"].pvalue]
    assert [got[s]["nDCG@10"].pvalue_holm for s in ("better", "same")] == holm_bonferroni(raw)
    assert got["better"]["nDCG@10"].significant and not got["same"]["nDCG@10"].significant
    c = got["better"]["nDCG@10"]
    assert c.diff == pytest.approx(np.mean(better) - np.mean(base))
    assert (c.wins, c.ties, c.losses) == wins_ties_losses(base, better)
    assert c.wins + c.ties + c.losses == c.n == 60
    randomised = compare_to_baseline(reports, "base", test="randomization", permutations=500)
    assert (
        randomised["better"]["nDCG@10"].pvalue
        == significance.Randomisation(better - base, 500, 0).pvalue
    )


def test_compare_to_baseline_refuses_bad_arguments():
    reports = {"a": _report([0.1, 0.2]), "b": _report([0.3, 0.4])}
    with pytest.raises(DotcatError, match="baseline 'c'"):
        compare_to_baseline(reports, "c")
    with pytest.raises(DotcatError, match="test must be one of t, randomisation, bootstrap, got"):
        compare_to_baseline(reports, "a", test="wilcoxon")
    with pytest.raises(DotcatError, match="alpha"):
        compare_to_baseline(reports, "a", alpha=1.5)


def _with_pvalue(p: float, n: int = 20, sign: float = 1.0) -> np.ndarray:
    """Differences whose paired t-test p-value is ``p``: a fixed pattern of mean 0 and sd 1,
    shifted so that t = t_{n-1}(1 - p/2)."""
    z = np.random.default_rng(n).normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    return z + sign * stats.t.isf(p / 2, n - 1) / np.sqrt(n)


@pytest.mark.parametrize(("k", "alpha"), [(1, 0.05), (3, 0.05), (2, 0.2)])
def test_the_t_interval_is_scipys_at_the_holm_level(k, alpha):
    d = _systems(1, 25)[1] - _systems(1, 25)[0]
    ours = significance.TTest(d).bounds(k, alpha)
    theirs = stats.ttest_1samp(d, 0.0).confidence_interval(1 - alpha / k)
    assert ours == pytest.approx((theirs.low, theirs.high), rel=1e-12)


def test_the_randomisation_interval_is_the_set_its_test_keeps():
    """Brute force: shift the differences by each δ of a grid and test again, with the same
    draws; the interval is where the step (k p <= alpha) does not reject."""
    permutations, seed, k, alpha = 400, 5, 2, 0.1
    d = np.round(_systems(2, 15)[1] - _systems(2, 15)[0], 2)  # rounded: tied sums happen
    test = significance.Randomisation(d, permutations, seed)
    low, high = test.bounds(k, alpha)
    assert low < test.mean < high
    for delta in np.linspace(low - 0.05, high + 0.05, 81):
        if min(abs(delta - low), abs(delta - high)) < 1e-9:
            continue  # on a bound: closed, and where rounding decides
        kept = not k * significance.Randomisation(d - delta, permutations, seed).pvalue <= alpha
        assert kept == (low <= delta <= high), delta


def test_the_bootstrap_p_value_and_interval_by_hand():
    from dotcat.evaluation.intervals import Bootstrap

    # Nine resampled means: three <= 0, seven >= 0 (0.0 is both): p = (1 + 2 * 3) / 10 = 0.7.
    resampled = np.array([0.3, -0.2, 0.6, 0.0, 0.1, 0.5, -0.1, 0.2, 0.4])
    test = Bootstrap(0.2, resampled)
    assert test.pvalue == pytest.approx(0.7)
    # At 0.5: cut J = 3 from each tail ((1 + 2 * 3) / 10 = 0.7 > 0.5, 0.5 at J = 2 is not):
    # [v_(3), v_(7)] = [0.0, 0.4], holding 0 as p = 0.7 > 0.5 says.
    assert test.bounds(1, 0.5) == (0.0, 0.4)
    # At 0.75: J = 4, [v_(4), v_(6)] = [0.1, 0.3], without 0 as p = 0.7 <= 0.75 says.
    assert test.bounds(1, 0.75) == (0.1, 0.3)
    # Holm's k = 3 at 0.75 (the level 0.25): J = 1 (3 * 0.3 > 0.75), the whole range.
    assert test.bounds(3, 0.75) == (-0.2, 0.6)
    # At 0.05 even J = 0 is rejected ((1 + 0) / 10 > 0.05): 9 resamples cannot reach 95%.
    assert test.bounds(1, 0.05) == (-np.inf, np.inf)


def test_resampled_means_are_the_means_of_the_drawn_queries(monkeypatch):
    from dotcat.evaluation import intervals

    values = np.random.default_rng(3).random((2, 7))
    drawn = np.random.default_rng(9).integers(0, 7, size=(50, 7))
    expected = values[:, drawn].mean(axis=2)
    assert intervals.resample_means(values, 50, 9) == pytest.approx(expected, rel=1e-12)
    monkeypatch.setattr(intervals, "_BLOCK_ENTRIES", 14)  # two rows a block
    assert intervals.resample_means(values, 50, 9) == pytest.approx(expected, rel=1e-12)


def test_holm_intervals_take_the_level_of_their_step():
    def compared(*pvalues):
        reports = {"base": _report(np.zeros(20))}
        for i, p in enumerate(pvalues):
            reports[f"s{i}"] = _report(_with_pvalue(p))
        return compare_to_baseline(reports, "base")

    # p 0.03 and 0.04: step 1 tests 0.03 at 0.05/2 and stops; the second, never tested, takes
    # the same 97.5% level (at its own 0.05 its interval would exclude 0, as p 0.04 < 0.05).
    got = compared(0.03, 0.04)
    for name, p in (("s0", 0.03), ("s1", 0.04)):
        c = got[name]["nDCG@10"]
        assert c.pvalue == pytest.approx(p) and c.pvalue_holm == pytest.approx(0.06)
        assert not c.significant and c.confidence == pytest.approx(0.975)
        assert c.low < 0 < c.high and c.family == 2
    assert got["s1"]["nDCG@10"].method.bounds(1, 0.05)[0] > 0
    # p 0.01 and 0.04: both rejected, the first at 97.5%, the second at 95%.
    got = compared(0.01, 0.04)
    first, second = got["s0"]["nDCG@10"], got["s1"]["nDCG@10"]
    assert first.significant and second.significant
    assert (first.confidence, second.confidence) == pytest.approx((0.975, 0.95))
    assert first.low > 0 and second.low > 0 and second.method.bounds(2, 0.05)[0] < 0


def test_holm_across_draws_each_interval_in_the_larger_family():
    from dotcat.evaluation import holm_across

    one = {"base": _report(np.zeros(20)), "s": _report(_with_pvalue(0.04))}
    other = {"base": _report(np.zeros(20)), "s": _report(_with_pvalue(0.3, sign=-1.0))}
    alone = {d: compare_to_baseline(r, "base") for d, r in (("one", one), ("other", other))}
    assert alone["one"]["s"]["nDCG@10"].significant  # 0.04 <= 0.05 alone
    across = holm_across(alone)
    c = across["one"]["s"]["nDCG@10"]
    assert c.family == 2 and c.pvalue_holm == pytest.approx(0.08) and not c.significant
    assert c.confidence == pytest.approx(0.975) and c.low < 0 < c.high
    assert across["other"]["s"]["nDCG@10"].confidence == pytest.approx(0.975)
