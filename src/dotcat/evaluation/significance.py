"""Paired significance test between two systems evaluated on the same queries."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dotcat.errors import DotcatError
from dotcat.evaluation.metrics import EvalReport, parse_measures


@dataclass(frozen=True)
class TTestResult:
    """Outcome of :func:`paired_ttest`; ``diff = mean_b - mean_a``."""

    measure: str
    n: int
    mean_a: float
    mean_b: float
    statistic: float
    pvalue: float

    @property
    def diff(self) -> float:
        return self.mean_b - self.mean_a


def paired_ttest(report_a: EvalReport, report_b: EvalReport, measure: str) -> TTestResult:
    """Two-sided paired Student t-test on the per-query values of one measure.

    With d_q = b_q - a_q over the n shared queries, ``t = mean(d) / (sd(d) / sqrt(n))`` with
    n - 1 degrees of freedom (:func:`scipy.stats.ttest_rel`). Smucker, Allan and Carterette
    ("A comparison of statistical significance tests for information retrieval evaluation",
    CIKM 2007) found the paired t-test agrees well with randomisation tests on IR measures.
    Correct for multiple comparisons (e.g. Bonferroni) when testing many pairs.

    Both reports must cover the same queries (evaluate both runs against the same qrels:
    missing queries are already in the reports as 0). If every difference is 0 the result is
    ``statistic=0, pvalue=1`` (scipy would return NaN).

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
    from scipy import stats  # imported here: scipy.stats is slow to import for the CLI

    a = [report_a.per_query[q][name] for q in queries]
    b = [report_b.per_query[q][name] for q in queries]
    if all(x == y for x, y in zip(a, b, strict=True)):
        statistic, pvalue = 0.0, 1.0
    else:
        result = stats.ttest_rel(b, a)
        statistic, pvalue = float(result.statistic), float(result.pvalue)
        if math.isnan(pvalue):  # constant non-zero difference: sd(d) = 0
            statistic, pvalue = math.copysign(math.inf, sum(b) - sum(a)), 0.0
    return TTestResult(
        measure=name,
        n=len(queries),
        mean_a=sum(a) / len(a),
        mean_b=sum(b) / len(b),
        statistic=statistic,
        pvalue=pvalue,
    )
