"""Paired tests, Holm-Bonferroni and wins/ties/losses of dotcat.evaluation.significance."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dotcat.errors import DotcatError
from dotcat.evaluation import (
    EvalReport,
    compare_to_baseline,
    holm_bonferroni,
    paired_randomisation_test,
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
        assert got[name]["nDCG@10"].pvalue == pytest.approx(expected.pvalue, rel=1e-12)
        direct = paired_ttest(reports["base"], reports[name], "nDCG@10")
        assert direct.pvalue == pytest.approx(expected.pvalue, rel=1e-12)
        assert direct.statistic == pytest.approx(expected.statistic, rel=1e-12)


@pytest.mark.parametrize(("seed", "n", "permutations"), [(0, 12, 500), (7, 30, 1000), (3, 5, 64)])
def test_randomisation_test_agrees_with_a_reference_loop(seed, n, permutations):
    base, better, _ = _systems(seed, n)
    d = better - base
    expected = reference_randomisation_pvalue(d, permutations, seed)
    assert significance.randomisation_pvalue(d, permutations, seed) == expected
    result = paired_randomisation_test(
        _report(base), _report(better), "nDCG@10", permutations=permutations, seed=seed
    )
    assert result.pvalue == expected and result.test == "randomisation"
    assert result.statistic == pytest.approx(np.mean(d))


def test_randomisation_blocks_do_not_change_the_draws(monkeypatch):
    base, better, same = _systems(5, 25)
    whole = significance.randomisation_pvalue(same - base, 999, 11)
    monkeypatch.setattr(significance, "_BLOCK_ENTRIES", 25 * 7)  # 7 permutations per block
    assert significance.randomisation_pvalue(same - base, 999, 11) == whole


def test_randomisation_edge_cases_and_agreement_with_the_t_test():
    assert significance.randomisation_pvalue(np.zeros(10), 100, 0) == 1.0
    # Every assignment is at most as extreme as the observed all-positive one: p = 1/(B+1)...
    # except the all-positive one itself; with n = 20 it is (essentially) never drawn.
    assert significance.randomisation_pvalue(np.full(20, 0.1), 1000, 0) == 1 / 1001
    with pytest.raises(DotcatError, match="permutations"):
        significance.randomisation_pvalue(np.ones(3), 0, 0)
    # Smucker et al. (2007): on IR-like data the two tests agree closely.
    base, _, same = _systems(4, 300)
    p_t = stats.ttest_rel(same, base).pvalue
    p_r = significance.randomisation_pvalue(same - base, 20_000, 0)
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
    assert randomised["better"]["nDCG@10"].pvalue == significance.randomisation_pvalue(
        better - base, 500, 0
    )


def test_compare_to_baseline_refuses_bad_arguments():
    reports = {"a": _report([0.1, 0.2]), "b": _report([0.3, 0.4])}
    with pytest.raises(DotcatError, match="baseline 'c'"):
        compare_to_baseline(reports, "c")
    with pytest.raises(DotcatError, match="test must be one of t, randomisation, got 'wilcoxon'"):
        compare_to_baseline(reports, "a", test="wilcoxon")
    with pytest.raises(DotcatError, match="alpha"):
        compare_to_baseline(reports, "a", alpha=1.5)
