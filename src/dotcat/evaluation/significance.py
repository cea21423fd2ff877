"""Paired comparisons of systems evaluated on the same queries: one method gives each
difference its p-value and its interval, and Holm's correction decides, each interval at the
level its decision uses, so that "the interval excludes 0" and "significant" are one statement.

Methods (``test``), each a test and the interval that inverts it (the differences it would not
reject), on the per-query differences ``d_q = b_q - a_q`` (queries without results already
count as 0, :func:`dotcat.evaluation.metrics.evaluate`):

- ``t`` (:class:`TTest`, the default): Student's paired t-test and the t interval.
- ``randomisation`` (:class:`Randomisation`): Fisher's paired randomisation (sign-flip) test,
  Monte Carlo with a fixed seed (Smucker, Allan and Carterette, "A comparison of statistical
  significance tests for information retrieval evaluation", CIKM 2007), inverted with the same
  sign draws into its interval (Ernst, "Permutation methods: a basis for exact inference",
  Statistical Science 2004).
- ``bootstrap`` (:class:`dotcat.evaluation.intervals.Bootstrap`): the paired percentile
  bootstrap, its p-value the smallest level at which its interval excludes 0.

Why the t-test by default: on IR measures it agrees closely with the randomisation test (Smucker et
al. 2007); in Urbano, Lima and Hanjalic's simulations from TREC data ("Statistical significance
testing in information retrieval: an empirical analysis of type I, type II and type III errors",
SIGIR 2019) it and the permutation test kept their type I error rates nearest the nominal level,
while the bootstrap test erred too often on small topic sets, the case of a collection judged by
hand. Its interval is closed-form and needs no seed: the effect size with its interval that Sakai
asks to report beside p ("Statistical reform in information retrieval?", SIGIR Forum 2014).

Holm's correction (Holm, "A simple sequentially rejective multiple test procedure", Scandinavian
Journal of Statistics 1979) over m comparisons: with the p-values sorted ascending, step i (from 1)
rejects where ``(m - i + 1) p_(i) <= alpha`` and the procedure stops at the first step that does
not. Each comparison's interval is at the level its step tests, ``1 - alpha / (m - i + 1)``; those
after the step where it stopped, never tested, take that step's level (their p-values are at least
its). So an interval excludes 0 exactly when its Holm-adjusted p-value is <= alpha. These intervals
are each decision's, not a joint 1 - alpha region: intervals compatible with Holm's procedure and
jointly covering say little more than "> 0" for the rejected (Strassburger and Bretz, Statistics in
Medicine 2008), and Bonferroni's at ``alpha / m`` would disagree with Holm's decisions.

- :func:`compare_to_baseline`: every system against a baseline, per measure, as ``dotcat eval
  --baseline`` and ``dotcat experiment`` report it; :func:`holm_across`: Holm over several
  such evaluations at once (one per dataset of an experiment).
- :func:`paired_ttest`: one pair of reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from dotcat.errors import DotcatError
from dotcat.evaluation.intervals import DEFAULT_SAMPLES, Bootstrap, resample_means
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
        help="Paired test, and the interval that inverts it: t (Student's paired t-test), "
        "randomisation (sign flips; randomization too) or bootstrap (percentile).",
        choices=TESTS,
    )
    alpha: float = setting(
        DEFAULT_ALPHA,
        help="Significance level after Holm's correction; the intervals are at the level "
        "each comparison is tested at.",
    )
    permutations: int = setting(
        DEFAULT_PERMUTATIONS, help="Randomisation test: random sign flips drawn."
    )
    seed: int = setting(DEFAULT_SEED, help="Random seed of the randomisation test and bootstrap.")
    bootstrap: int = setting(
        DEFAULT_SAMPLES,
        help="Bootstrap resamples of the queries: for --test bootstrap, and the intervals of "
        "each run's means (0: none of those).",
    )

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "test", {"randomization": "randomisation"}.get(self.test, self.test)
        )

    def checks(self) -> list[Check]:
        return [
            (0.0 < self.alpha < 1.0, "alpha", f"alpha must be in (0, 1), got {self.alpha}"),
            at_least("permutations", self.permutations, 1),
            at_least("bootstrap", self.bootstrap, 1 if self.test == "bootstrap" else 0),
        ]


#: Values closer than this count as a tie in :func:`wins_ties_losses`.
TIE_TOLERANCE = 1e-9
# Sign-flip matrix entries drawn per block (bounds memory to ~32 MB of float64).
_BLOCK_ENTRIES = 1 << 22


def _t(d: np.ndarray) -> tuple[float, float]:
    """``(t, p)`` of the two-sided one-sample t-test of mean(d) = 0; all-zero differences give
    ``(0, 1)``, a constant non-zero difference ``(+-inf, 0)`` (scipy would return NaN)."""
    from scipy import stats  # imported here: scipy.stats is slow to import for the CLI

    if not np.any(d):
        return 0.0, 1.0
    if np.all(d == d[0]):
        return math.copysign(math.inf, float(d[0])), 0.0
    result = stats.ttest_1samp(d, 0.0)
    return float(result.statistic), float(result.pvalue)


def ttest_pvalue(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """``(t, p)`` of the two-sided paired t-test of ``b`` against ``a`` (:class:`TTest`)."""
    return _t(np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64))


class TTest:
    """Student's paired t-test: ``t = mean(d) / (sd(d) / sqrt(n))`` on n - 1 degrees of freedom
    (as :func:`scipy.stats.ttest_rel`), and the interval ``mean(d) +- t_{n-1}(1 - a/2) sd(d) /
    sqrt(n)``, which excludes 0 exactly when p <= a."""

    name = "paired t-test"

    def __init__(self, d: np.ndarray) -> None:
        self.n, self.mean = len(d), float(np.mean(d))
        self.se = float(np.std(d, ddof=1)) / math.sqrt(self.n)
        self.statistic, self.pvalue = _t(d)

    def bounds(self, k: int, alpha: float) -> tuple[float, float]:
        """The interval a Holm step rejecting where ``k p <= alpha`` does not reject."""
        from scipy import stats

        half = float(stats.t.isf(alpha / k / 2, self.n - 1)) * self.se
        return self.mean - half, self.mean + half


class Randomisation:
    """Fisher's paired randomisation test, Monte Carlo, and its interval by inversion.

    Permutation ``i`` flips the sign of d_q where ``u_iq < 0.5``, the ``u`` drawn row by row
    from ``numpy.random.default_rng(seed).random``. Testing that the mean difference is δ, it
    counts as extreme where ``|sum_q s_iq (d_q - δ)| >= |sum_q (d_q - δ)|``, and ``p(δ) = (1 +
    c(δ)) / (permutations + 1)`` with c(δ) the permutations that do (the observed assignment
    counts as one, so p is never 0: Phipson and Smyth, "Permutation p-values should never be
    zero", 2010); p = p(0). With ``k_i = sum_q s_iq`` and ``B_i = sum_q s_iq (d_q - mean(d))``,
    permutation i is extreme for ``δ = mean(d) + x`` (x >= 0) while ``x <= max(B_i / (n +
    k_i), -B_i / (n - k_i))``, and for ``δ = mean(d) - x`` while ``x <= max(B_i / (n - k_i),
    -B_i / (n + k_i))`` (always, where no sign or every sign is flipped): c falls as δ leaves
    mean(d), and the interval a level keeps is read off these thresholds, sorted. Thresholds
    within 1e-9 max|d| of each other count as equal, so that summing in another order does
    not decide a p-value.
    """

    name = "paired randomisation test"

    def __init__(
        self, d: np.ndarray, permutations: int, seed: int, drawn: Sequence | None = None
    ) -> None:
        """``drawn``: d's sorted thresholds, where ``_thresholds`` drew them for several
        differences at once (the same sign draws)."""
        d = np.asarray(d, dtype=np.float64)
        self.mean, self.permutations = float(np.mean(d)), permutations
        self.slack = 1e-9 * float(np.max(np.abs(d), initial=0.0))
        above, below = drawn or [t[0] for t in _thresholds(d[None, :], permutations, seed)]
        self.above, self.below = above, below  # largest first
        side = below if self.mean > 0 else above
        reached = int(np.count_nonzero(side >= abs(self.mean) - self.slack))
        self.pvalue = float(self._pvalues()[reached])

    def _pvalues(self) -> np.ndarray:
        """The p-value of each count 0..permutations of extreme permutations."""
        return np.arange(1, self.permutations + 2) / (self.permutations + 1)

    def bounds(self, k: int, alpha: float) -> tuple[float, float]:
        """The interval a Holm step rejecting where ``k p <= alpha`` does not reject: the δ
        for which at least ``need`` permutations are extreme, ``need`` the first count whose
        p-value it keeps (0: every δ, too few permutations for this level)."""
        need = int(np.argmax(~(k * self._pvalues() <= alpha)))
        if need == 0:
            return -math.inf, math.inf
        return (self.mean - (float(self.below[need - 1]) + self.slack),
                self.mean + (float(self.above[need - 1]) + self.slack))  # fmt: skip


def _thresholds(
    differences: np.ndarray, permutations: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's thresholds above and below its mean (:class:`Randomisation`), each sorted
    largest first: two m x permutations arrays from one set of sign draws."""
    if permutations < 1:
        raise DotcatError(f"permutations must be >= 1, got {permutations}")
    m, n = differences.shape
    centred = (differences - differences.mean(axis=1, keepdims=True)).T
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK_ENTRIES // n)
    above, below = np.empty((m, permutations)), np.empty((m, permutations))
    for start in range(0, permutations, rows):
        signs = np.where(rng.random((min(rows, permutations - start), n)) < 0.5, -1.0, 1.0)
        k, b = signs.sum(axis=1, keepdims=True), signs @ centred
        whole = np.abs(k) == n
        with np.errstate(divide="ignore", invalid="ignore"):
            up = np.where(whole, np.inf, np.maximum(b / (n + k), -b / (n - k)))
            down = np.where(whole, np.inf, np.maximum(b / (n - k), -b / (n + k)))
        above[:, start : start + len(signs)], below[:, start : start + len(signs)] = up.T, down.T
    return -np.sort(-above, axis=1), -np.sort(-below, axis=1)


#: How reports name the methods.
TEST_NAMES = {"t": TTest.name, "randomisation": Randomisation.name, "bootstrap": Bootstrap.name}


@dataclass(frozen=True)
class PairedTestResult:
    """Outcome of :func:`paired_ttest` on one measure; ``diff = mean_b - mean_a``."""

    measure: str
    n: int
    mean_a: float
    mean_b: float
    statistic: float
    pvalue: float

    @property
    def diff(self) -> float:
        return self.mean_b - self.mean_a


def paired_values(
    report_a: EvalReport, report_b: EvalReport, measure: str
) -> tuple[str, np.ndarray, np.ndarray]:
    """The canonical measure name and both reports' :meth:`EvalReport.values`, in one query order.

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
    a = np.array(report_a.values(name, queries), dtype=np.float64)
    b = np.array(report_b.values(name, queries), dtype=np.float64)
    return name, a, b


def paired_ttest(report_a: EvalReport, report_b: EvalReport, measure: str) -> PairedTestResult:
    """Two-sided paired t-test (:class:`TTest`) of one measure between two reports of the same
    queries (evaluate both runs against the same qrels). Correct for multiple comparisons
    (:func:`holm_bonferroni`) when testing many pairs.

    Raises:
        DotcatError: the measure is not in both reports, the query sets differ, or n < 2.
    """
    name, a, b = paired_values(report_a, report_b, measure)
    statistic, pvalue = ttest_pvalue(a, b)
    return PairedTestResult(name, len(a), float(a.mean()), float(b.mean()), statistic, pvalue)


def holm_bonferroni(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order (Holm 1979).

    With the m p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted value of the
    j-th is ``max_{i <= j} min(1, (m - i + 1) p_(i))``. Rejecting where the adjusted p-value
    is <= alpha keeps the family-wise error rate at alpha, as Bonferroni does, while
    rejecting at least as often.
    """
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
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
        diff: system minus baseline, the mean of their :meth:`EvalReport.values`' differences.
        pvalue: the paired test's two-sided p-value.
        pvalue_holm: ``pvalue`` adjusted by Holm's correction over its ``family`` of
            comparisons (the systems compared with the baseline on this measure).
        significant: ``pvalue_holm <= alpha``; exactly when ``[low, high]`` excludes 0.
        low, high: the interval of ``diff`` at ``confidence``, the level of its Holm step
            (module docstring); infinite where too few resamples reach that level.
        wins, ties, losses: queries where the system scores above, equal to, below the baseline.
        method: the test (:class:`TTest`, :class:`Randomisation`, ``Bootstrap``), kept to
            draw the interval at another level when the family grows (:func:`holm_across`).
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
    low: float = -math.inf
    high: float = math.inf
    confidence: float = 0.0
    family: int = 1
    method: Any = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("system", "baseline", "method"):
            del out[key]
        return out | {k: out[k] if math.isfinite(out[k]) else None for k in ("low", "high")}


def holm(comparisons: Sequence[Comparison], alpha: float) -> list[Comparison]:
    """Holm's correction over one family of comparisons: each one's adjusted p-value, its
    decision, and its interval at the level of its step (module docstring)."""
    pvalues = [c.pvalue for c in comparisons]
    m, adjusted = len(pvalues), holm_bonferroni(pvalues)
    steps, stop = [0] * m, 0
    for rank, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        steps[i] = stop or m - rank
        if not stop and adjusted[i] > alpha:
            stop = m - rank
    out = []
    for c, k, p_holm in zip(comparisons, steps, adjusted, strict=True):
        significant = p_holm <= alpha
        low, high = _agreeing(*c.method.bounds(k, alpha), c.diff, significant)
        out.append(replace(c, pvalue_holm=p_holm, significant=significant, low=low, high=high,
                           confidence=1.0 - alpha / k, family=m))  # fmt: skip
    return out


def _agreeing(low: float, high: float, mean: float, significant: bool) -> tuple[float, float]:
    """The interval, its bound nearest 0 moved to the side of 0 the decision is on where
    rounding in the last digit put it on the other (each method's interval excludes 0
    exactly when its p-value is rejected; the arithmetic of a bound can round across)."""
    if significant and low <= 0.0 <= high:
        tiny = math.ulp(0.0)
        return (tiny, high) if mean > 0 else (low, -tiny)
    if not significant and not low <= 0.0 <= high:
        return (0.0, high) if low > 0 else (low, 0.0)
    return low, high


def _methods(differences: list[np.ndarray], config: ComparisonConfig) -> list[Any]:
    """The test of each difference vector (same length, same query order)."""
    if config.test == "t":
        return [TTest(d) for d in differences]
    if config.test == "randomisation":
        above, below = _thresholds(np.array(differences), config.permutations, config.seed)
        return [Randomisation(d, config.permutations, config.seed, drawn)
                for d, *drawn in zip(differences, above, below, strict=True)]  # fmt: skip
    resampled = resample_means(np.array(differences), config.bootstrap, config.seed)
    return [Bootstrap(d.mean(), r) for d, r in zip(differences, resampled, strict=True)]


def compare_to_baseline(
    reports: Mapping[str, EvalReport],
    baseline: str,
    measures: Sequence[str] | None = None,
    test: str = "t",
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
    bootstrap: int = DEFAULT_SAMPLES,
) -> dict[str, dict[str, Comparison]]:
    """Every system against ``baseline``, per measure: difference, its interval, paired
    p-value, Holm-adjusted p-value, decision and wins/ties/losses (module docstring).

    Holm's correction runs per measure over the m systems other than the baseline: a mark
    then means "different from the baseline" with a family-wise error rate of at most
    ``alpha`` among the systems, measure by measure.

    Args:
        reports: system name -> report, all from the same qrels (the same queries).
        baseline: the name of one of the reports.
        measures: which measures (default: the baseline report's).
        test: ``t``, ``randomisation`` (``permutations`` sign draws from ``seed``) or
            ``bootstrap`` (``bootstrap`` resamples from ``seed``).
        alpha: significance level applied to the adjusted p-values.

    Returns:
        system -> measure -> :class:`Comparison`, for every system but the baseline.

    Raises:
        DotcatError: an unknown baseline or test, alpha outside (0, 1), or reports that
            cannot be paired (see :func:`paired_values`).
    """
    if baseline not in reports:
        raise DotcatError(f"baseline {baseline!r} is not one of {', '.join(reports)}")
    config = ComparisonConfig(test, alpha, permutations, seed, bootstrap)
    config.validate()
    base = reports[baseline]
    systems = [name for name in reports if name != baseline]
    pairs = [(name, *paired_values(base, reports[name], measure))
             for measure in (measures if measures is not None else base.measures)
             for name in systems]  # fmt: skip
    # Rounded to 12 decimals: differences equal in exact arithmetic (0.7 - 0.6, 0.4 - 0.3) are
    # equal here, as the tests' ties and constant differences need.
    methods = _methods([np.round(b - a, 12) for _, _, a, b in pairs], config)
    families: dict[str, list[Comparison]] = {}
    for (name, measure, a, b), method in zip(pairs, methods, strict=True):
        families.setdefault(measure, []).append(Comparison(
            name, baseline, measure, len(a), method.mean, method.pvalue, method.pvalue, False,
            *wins_ties_losses(a, b), method=method,
        ))  # fmt: skip
    out: dict[str, dict[str, Comparison]] = {name: {} for name in systems}
    for family in families.values():
        for c in holm(family, alpha):
            out[c.system][c.measure] = c
    return out


def compare(
    reports: Mapping[str, EvalReport], baseline: str, settings: Any
) -> dict[str, dict[str, Comparison]]:
    """:func:`compare_to_baseline` as ``settings`` say: a :class:`ComparisonConfig`, or any
    object with its fields (an experiment's configuration)."""
    names = ("test", "alpha", "permutations", "seed", "bootstrap")
    return compare_to_baseline(reports, baseline, **{k: getattr(settings, k) for k in names})


def holm_across(
    tables: Mapping[str, Mapping[str, Mapping[str, Comparison]]], alpha: float = DEFAULT_ALPHA
) -> dict[str, dict[str, dict[str, Comparison]]]:
    """Holm's correction over every cell of several :func:`compare_to_baseline` results.

    ``tables`` maps a dataset to its comparisons (system -> measure -> :class:`Comparison`). Per
    measure, every (dataset, system) cell forms one family (:func:`holm`): a mark then means
    "different from the baseline" with a family-wise error rate of at most ``alpha`` over the whole
    systems x datasets table of that measure, not only within one dataset's column.

    Returns:
        The same structure, each comparison decided and its interval drawn in the larger
        family.
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
        family = holm([tables[d][s][measure] for d, s in keys], alpha)
        for (dataset, system), comparison in zip(keys, family, strict=True):
            out[dataset][system][measure] = comparison
    return out
