"""Paired significance tests between systems evaluated on the same queries, and the
correction for testing several systems against one baseline.

- :func:`paired_ttest`: the paired Student t-test (:func:`scipy.stats.ttest_rel`).
- :func:`paired_randomisation_test`: the paired randomisation (permutation) test, Monte Carlo
  with a fixed seed (Smucker, Allan and Carterette, CIKM 2007).
- :func:`holm_bonferroni`: Holm's step-down correction of several p-values (Holm 1979).
- :func:`wins_ties_losses`: per-query wins, ties and losses against a baseline.
- :func:`compare_to_baseline`: all of them for every system and measure of an evaluation,
  as ``dotcat eval --baseline`` and ``dotcat experiment`` report them.
- :func:`holm_across`: Holm's correction over several such evaluations at once (one per
  dataset of an experiment), so a table of systems x datasets is one family per measure.

Every test is two-sided and works on the per-query values that
:func:`dotcat.evaluation.metrics.evaluate` computed (queries without results already count as 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from dotcat.errors import DotcatError
from dotcat.evaluation.metrics import EvalReport, parse_measures
from dotcat.options import SIGNIFICANCE_TESTS, Check, Settings, at_least, setting

#: Test names accepted by :func:`compare_to_baseline` (``randomization`` is accepted too).
TESTS = SIGNIFICANCE_TESTS
DEFAULT_PERMUTATIONS = 10_000
DEFAULT_SEED = 0
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True, repr=False)
class ComparisonConfig(Settings):
    """How systems are compared with a baseline (:func:`compare_to_baseline`)."""

    test: str = setting(
        "t",
        help="Paired test: t (Student's paired t-test) or randomisation (randomization too).",
        choices=TESTS,
    )
    alpha: float = setting(
        DEFAULT_ALPHA, help="Significance level, applied after Holm-Bonferroni correction."
    )
    permutations: int = setting(
        DEFAULT_PERMUTATIONS, help="Randomisation test: random permutations drawn."
    )
    seed: int = setting(DEFAULT_SEED, help="Randomisation test: random seed.")

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "test", {"randomization": "randomisation"}.get(self.test, self.test)
        )

    def checks(self) -> list[Check]:
        return [
            (0.0 < self.alpha < 1.0, "alpha", f"alpha must be in (0, 1), got {self.alpha}"),
            at_least("permutations", self.permutations, 1),
        ]


#: Values closer than this count as a tie in :func:`wins_ties_losses`.
TIE_TOLERANCE = 1e-9
# Permutation sums that differ from the observed one by less than this share of sum(|d|)
# count as equal: summing in another order must not decide a p-value.
_SUM_TOLERANCE = 1e-10
# Sign-flip matrix entries drawn per block (bounds memory to ~32 MB of float64).
_BLOCK_ENTRIES = 1 << 22


@dataclass(frozen=True)
class PairedTestResult:
    """Outcome of a paired test; ``diff = mean_b - mean_a``.

    ``statistic`` is the t statistic for the t-test and the observed mean difference for the
    randomisation test; ``permutations`` is the number of random permutations (None for t).
    """

    measure: str
    n: int
    mean_a: float
    mean_b: float
    statistic: float
    pvalue: float
    test: str = "t"
    permutations: int | None = None

    @property
    def diff(self) -> float:
        return self.mean_b - self.mean_a


#: The t-test's result (the name earlier versions used).
TTestResult = PairedTestResult


def paired_values(
    report_a: EvalReport, report_b: EvalReport, measure: str
) -> tuple[str, np.ndarray, np.ndarray]:
    """The canonical measure name and both reports' per-query values, in the same query order.

    Raises:
        DotcatError: the measure is not in both reports, the query sets differ, or n < 2.
    """
    name = str(parse_measures(measure)[0])
    for label, report in (("first", report_a), ("second", report_b)):
        if name not in report.aggregate:
            raise DotcatError(f"the {label} report has no {name} (it has {report.measures})")
    queries = list(report_a.per_query)
    if set(queries) != set(report_b.per_query):
        only_a = len(set(queries) - set(report_b.per_query))
        only_b = len(set(report_b.per_query) - set(queries))
        raise DotcatError(
            f"paired test needs the same queries: {only_a} only in the first report, "
            f"{only_b} only in the second"
        )
    if len(queries) < 2:
        raise DotcatError("paired test needs at least 2 queries")
    a = np.array([report_a.per_query[q][name] for q in queries], dtype=np.float64)
    b = np.array([report_b.per_query[q][name] for q in queries], dtype=np.float64)
    return name, a, b


def paired_ttest(report_a: EvalReport, report_b: EvalReport, measure: str) -> PairedTestResult:
    """Two-sided paired Student t-test on the per-query values of one measure.

    With d_q = b_q - a_q over the n shared queries, ``t = mean(d) / (sd(d) / sqrt(n))`` with
    n - 1 degrees of freedom (:func:`scipy.stats.ttest_rel`). Smucker, Allan and Carterette
    ("A comparison of statistical significance tests for information retrieval evaluation",
    CIKM 2007) found the paired t-test agrees well with randomisation tests on IR measures.
    Correct for multiple comparisons (:func:`holm_bonferroni`) when testing many pairs.

    Both reports must cover the same queries (evaluate both runs against the same qrels:
    missing queries are already in the reports as 0). If every difference is 0 the result is
    ``statistic=0, pvalue=1`` (scipy would return NaN).

    Raises:
        DotcatError: the measure is not in both reports, the query sets differ, or n < 2.
    """
    name, a, b = paired_values(report_a, report_b, measure)
    statistic, pvalue = ttest_pvalue(a, b)
    return PairedTestResult(name, len(a), float(a.mean()), float(b.mean()), statistic, pvalue)


def ttest_pvalue(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """``(t, p)`` of the two-sided paired t-test of ``b`` against ``a`` (see
    :func:`paired_ttest`); all-zero differences give ``(0, 1)``, a constant non-zero
    difference ``(+-inf, 0)``."""
    from scipy import stats  # imported here: scipy.stats is slow to import for the CLI

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if np.array_equal(a, b):
        return 0.0, 1.0
    differences = b - a
    if np.all(differences == differences[0]):  # sd(d) = 0: scipy warns and returns NaN
        return math.copysign(math.inf, float(differences[0])), 0.0
    result = stats.ttest_rel(b, a)
    statistic, pvalue = float(result.statistic), float(result.pvalue)
    if math.isnan(pvalue):  # constant non-zero difference: sd(d) = 0
        return math.copysign(math.inf, float(np.sum(b - a))), 0.0
    return statistic, pvalue


def paired_randomisation_test(
    report_a: EvalReport,
    report_b: EvalReport,
    measure: str,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> PairedTestResult:
    """Two-sided paired randomisation (permutation) test on one measure's per-query values.

    Under the null hypothesis the two systems are exchangeable on every query, so each
    difference d_q = b_q - a_q is as likely to have had the other sign. The test draws
    ``permutations`` random sign assignments and counts those whose mean difference is at
    least as far from 0 as the observed one (Fisher's randomisation test, as Smucker, Allan
    and Carterette, "A comparison of statistical significance tests for information retrieval
    evaluation", CIKM 2007, recommend for IR; see :func:`randomisation_pvalue`).

    Raises:
        DotcatError: as :func:`paired_ttest`, or ``permutations`` < 1.
    """
    name, a, b = paired_values(report_a, report_b, measure)
    pvalue = randomisation_pvalue(b - a, permutations, seed)
    observed = float(np.mean(b - a))
    return PairedTestResult(
        measure=name,
        n=len(a),
        mean_a=float(a.mean()),
        mean_b=float(b.mean()),
        statistic=observed,
        pvalue=pvalue,
        test="randomisation",
        permutations=permutations,
    )


def randomisation_pvalue(
    differences: np.ndarray, permutations: int = DEFAULT_PERMUTATIONS, seed: int = DEFAULT_SEED
) -> float:
    """Monte Carlo p-value of the two-sided paired randomisation test (Smucker et al. 2007).

    Permutation ``i`` flips the sign of d_q where ``u_iq < 0.5``, the ``u`` drawn row by row
    from ``numpy.random.default_rng(seed).random`` (so a loop drawing one row of n numbers per
    permutation sees the same assignments). Its statistic is ``|sum_q s_iq d_q|``; with c the
    number of permutations reaching ``|sum_q d_q|``, ``p = (c + 1) / (permutations + 1)``: the
    observed assignment counts as one of the permutations, so p is never 0 (Phipson and
    Smyth, "Permutation p-values should never be zero", 2010). Sums within 1e-10 of
    ``sum |d|`` of each other count as equal. All-zero differences give p = 1.

    Raises:
        DotcatError: ``permutations`` < 1.
    """
    if permutations < 1:
        raise DotcatError(f"permutations must be >= 1, got {permutations}")
    d = np.asarray(differences, dtype=np.float64)
    if not np.any(d):
        return 1.0
    observed = abs(float(np.sum(d)))
    tolerance = _SUM_TOLERANCE * float(np.sum(np.abs(d)))
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_ENTRIES // len(d))
    reached = 0
    for start in range(0, permutations, block):
        rows = min(block, permutations - start)
        signs = np.where(rng.random((rows, len(d))) < 0.5, -1.0, 1.0)
        reached += int(np.count_nonzero(np.abs(signs @ d) >= observed - tolerance))
    return (reached + 1) / (permutations + 1)


def holm_bonferroni(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order (Holm, "A simple sequentially
    rejective multiple test procedure", Scandinavian Journal of Statistics, 1979).

    With the m p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted value of the
    j-th is ``max_{i <= j} min(1, (m - i + 1) p_(i))``. Rejecting where the adjusted p-value
    is below alpha keeps the family-wise error rate at alpha, as Bonferroni does, while
    rejecting at least as often.
    """
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        adjusted[i] = running
    return adjusted


def wins_ties_losses(
    baseline: np.ndarray, system: np.ndarray, tolerance: float = TIE_TOLERANCE
) -> tuple[int, int, int]:
    """Queries where ``system`` scores above, equal to (within ``tolerance``), and below
    ``baseline``."""
    d = np.asarray(system, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    wins = int(np.count_nonzero(d > tolerance))
    losses = int(np.count_nonzero(d < -tolerance))
    return wins, len(d) - wins - losses, losses


@dataclass(frozen=True)
class Comparison:
    """One system against the baseline on one measure (see :func:`compare_to_baseline`).

    Attributes:
        diff: the system's mean minus the baseline's.
        pvalue: the paired test's two-sided p-value.
        pvalue_holm: ``pvalue`` corrected by Holm-Bonferroni over the systems compared with
            the baseline on this measure.
        significant: ``pvalue_holm < alpha``.
        wins, ties, losses: queries where the system scores above, equal to, below the
            baseline.
    """

    system: str
    baseline: str
    measure: str
    n: int
    diff: float
    pvalue: float
    pvalue_holm: float
    significant: bool
    wins: int
    ties: int
    losses: int

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("system", "baseline")}


def normalise_test(test: str) -> str:
    """``t`` or ``randomisation`` (``randomization`` accepted).

    Raises:
        DotcatError: any other name.
    """
    config = ComparisonConfig(test=test)
    config.validate()
    return config.test


def compare_to_baseline(
    reports: Mapping[str, EvalReport],
    baseline: str,
    measures: Sequence[str] | None = None,
    test: str = "t",
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> dict[str, dict[str, Comparison]]:
    """Every system against ``baseline``, per measure: difference, paired p-value (t-test or
    randomisation test), Holm-Bonferroni-corrected p-value and wins/ties/losses.

    The correction runs per measure, over the m systems other than the baseline (Holm 1979):
    a dagger in a table then means "different from the baseline" with a family-wise error
    rate of at most ``alpha`` among the systems, measure by measure.

    Args:
        reports: system name -> report, all from the same qrels (the same queries).
        baseline: the name of one of the reports.
        measures: which measures (default: the baseline report's).
        test: ``t`` (:func:`paired_ttest`) or ``randomisation``
            (:func:`paired_randomisation_test`, ``permutations`` draws from ``seed``).
        alpha: significance level applied to the corrected p-values.

    Returns:
        system -> measure -> :class:`Comparison`, for every system but the baseline.

    Raises:
        DotcatError: an unknown baseline or test, alpha outside (0, 1), or reports that
            cannot be paired (see :func:`paired_values`).
    """
    if baseline not in reports:
        raise DotcatError(f"baseline {baseline!r} is not one of {', '.join(reports)}")
    config = ComparisonConfig(test, alpha, permutations, seed)
    config.validate()
    test = config.test
    base = reports[baseline]
    systems = [name for name in reports if name != baseline]
    out: dict[str, dict[str, Comparison]] = {name: {} for name in systems}
    for measure in measures if measures is not None else base.measures:
        rows = []
        for name in systems:
            canonical, a, b = paired_values(base, reports[name], measure)
            if test == "t":
                p = ttest_pvalue(a, b)[1]
            else:
                p = randomisation_pvalue(b - a, permutations, seed)
            rows.append((name, canonical, a, b, p))
        corrected = holm_bonferroni([row[4] for row in rows])
        for (name, canonical, a, b, p), p_holm in zip(rows, corrected, strict=True):
            wins, ties, losses = wins_ties_losses(a, b)
            out[name][canonical] = Comparison(
                system=name,
                baseline=baseline,
                measure=canonical,
                n=len(a),
                diff=float(b.mean() - a.mean()),
                pvalue=p,
                pvalue_holm=p_holm,
                significant=p_holm < alpha,
                wins=wins,
                ties=ties,
                losses=losses,
            )
    return out


def holm_across(
    tables: Mapping[str, Mapping[str, Mapping[str, Comparison]]], alpha: float = DEFAULT_ALPHA
) -> dict[str, dict[str, dict[str, Comparison]]]:
    """Holm's correction over every cell of several :func:`compare_to_baseline` results.

    ``tables`` maps a dataset to its comparisons (system -> measure -> :class:`Comparison`).
    Per measure, the raw p-values of every (dataset, system) cell form one family of m tests
    (Holm 1979, see :func:`holm_bonferroni`): a mark then means "different from the baseline"
    with a family-wise error rate of at most ``alpha`` over the whole systems x datasets
    table of that measure, not only within one dataset's column.

    Returns:
        The same structure, each comparison's ``pvalue_holm`` and ``significant`` replaced.
    """
    cells: dict[str, list[tuple[str, str]]] = {}
    for dataset, systems in tables.items():
        for system, measures in systems.items():
            for measure in measures:
                cells.setdefault(measure, []).append((dataset, system))
    out: dict[str, dict[str, dict[str, Comparison]]] = {
        dataset: {system: {} for system in systems} for dataset, systems in tables.items()
    }
    for measure, keys in cells.items():
        raw = [tables[d][s][measure].pvalue for d, s in keys]
        for (dataset, system), p_holm in zip(keys, holm_bonferroni(raw), strict=True):
            comparison = tables[dataset][system][measure]
            out[dataset][system][measure] = replace(
                comparison, pvalue_holm=p_holm, significant=p_holm < alpha
            )
    return out
