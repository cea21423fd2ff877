"""Bootstrap confidence intervals: for each measure of a run, and for each difference between
a run and a baseline on the same queries.

The percentile bootstrap over queries (Efron and Tibshirani, "An Introduction to the
Bootstrap", 1993, ch. 13), as Sakai ("Evaluating evaluation metrics based on the bootstrap",
SIGIR 2006) applies it to IR: the queries are a sample from the queries a system will meet;
resampling them with replacement B times and taking the mean each time gives the spread of
the mean over such samples. With per-query values ``x_1..x_n``:

    draw ``idx`` of shape (B, n) from ``numpy.random.default_rng(seed).integers(0, n, ...)``
    ``m_b = mean_j x[idx[b, j]]``                      (b = 1..B)
    interval = the ``(1 - c) / 2`` and ``(1 + c) / 2`` quantiles of ``m_1..m_B``
    (:func:`numpy.quantile`, linear interpolation), c the confidence level (0.95)

A difference ``b - a`` is bootstrapped the same way on the per-query differences
``d_q = b_q - a_q`` (a paired bootstrap: one query's two values are drawn together). Every run
and measure of one evaluation uses the same draws, so their intervals are comparable, and the
same seed gives the same intervals on every machine (numpy's PCG64 generator is specified).
An interval of a difference that excludes 0 agrees, roughly, with a paired test at
``1 - c``; the tests of :mod:`.significance` stay the decision, corrected for several systems.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dotcat.errors import DotcatError
from dotcat.evaluation.metrics import EvalReport
from dotcat.options import Check, Settings, at_least, setting

#: Resamples drawn by default: enough for the 2.5% and 97.5% quantiles to settle to about
#: +-0.003 nDCG on a few hundred queries, in milliseconds.
DEFAULT_SAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
# Index draws per block (bounds memory to ~32 MB of int64 whatever B x n).
_BLOCK_ENTRIES = 1 << 22


@dataclass(frozen=True, repr=False)
class IntervalConfig(Settings):
    """How ``dotcat eval`` draws its bootstrap confidence intervals (:func:`intervals`)."""

    bootstrap: int = setting(
        DEFAULT_SAMPLES,
        help="Bootstrap resamples of the queries for confidence intervals (0: none).",
    )
    confidence: float = setting(DEFAULT_CONFIDENCE, help="Confidence level of the intervals.")

    def checks(self) -> list[Check]:
        return [
            at_least("bootstrap", self.bootstrap, 0),
            (
                0.0 < self.confidence < 1.0,
                "confidence",
                f"confidence must be in (0, 1), got {self.confidence}",
            ),
        ]


@dataclass(frozen=True)
class Interval:
    """A mean (or a mean difference) and its bootstrap interval ``[low, high]``."""

    mean: float
    low: float
    high: float

    def to_json(self) -> dict[str, float]:
        return {"mean": self.mean, "low": self.low, "high": self.high}

    def __str__(self) -> str:
        return f"{self.mean:.4f} [{self.low:.4f}, {self.high:.4f}]"


def resample_means(values: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """The mean of ``values`` under each row of query indices ``draws`` (B x n)."""
    values = np.asarray(values, dtype=np.float64)
    return values[draws].mean(axis=1)


def draw_indices(n: int, samples: int, seed: int) -> np.ndarray:
    """``samples`` rows of ``n`` query indices drawn with replacement (see the module
    docstring): ``default_rng(seed).integers(0, n, size=(samples, n))``, drawn in blocks of
    rows, which gives the same numbers as one call."""
    if n < 1:
        raise DotcatError("a bootstrap needs at least one query")
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK_ENTRIES // n)
    blocks = [
        rng.integers(0, n, size=(min(rows, samples - start), n))
        for start in range(0, samples, rows)
    ]
    return np.concatenate(blocks) if blocks else np.empty((0, n), dtype=np.int64)


def interval(values: np.ndarray, draws: np.ndarray, confidence: float) -> Interval:
    """The mean of ``values`` and its percentile interval under ``draws``."""
    means = resample_means(values, draws)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(float(np.mean(values)), float(low), float(high))


def bootstrap_interval(
    values: np.ndarray,
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """The percentile bootstrap interval of the mean of ``values`` (module docstring).

    >>> bootstrap_interval(np.array([0.0, 1.0, 1.0, 0.0]), samples=2000, seed=0).mean
    0.5
    """
    values = np.asarray(values, dtype=np.float64)
    return interval(values, draw_indices(len(values), samples, seed), confidence)


@dataclass(frozen=True)
class RunIntervals:
    """One run's intervals: per measure, and per measure its difference to the baseline
    (``None`` for the baseline itself, or without one)."""

    measures: dict[str, Interval]
    differences: dict[str, Interval] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {m: i.to_json() for m, i in self.measures.items()}
        if self.differences is None:
            return {"measures": out}
        return {"measures": out, "vs_baseline": {m: i.to_json()
                                                 for m, i in self.differences.items()}}  # fmt: skip


def intervals(
    reports: Mapping[str, EvalReport],
    baseline: str | None = None,
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, RunIntervals]:
    """Every run's measure intervals and, with a ``baseline`` (one of the reports' names), each
    difference to it; one set of draws for all (module docstring).

    Raises:
        DotcatError: the baseline is not a report, or the reports cover different queries.
    """
    if not reports:
        return {}
    if baseline is not None and baseline not in reports:
        raise DotcatError(f"baseline {baseline!r} is not one of {', '.join(reports)}")
    first = next(iter(reports.values()))
    queries = list(first.per_query)
    for name, report in reports.items():
        if set(report.per_query) != set(queries):
            raise DotcatError(f"{name}: evaluated on other queries than the first run")
    draws = draw_indices(len(queries), samples, seed)

    def values(report: EvalReport, measure: str) -> np.ndarray:
        return np.array([report.per_query[q][measure] for q in queries], dtype=np.float64)

    out: dict[str, RunIntervals] = {}
    for name, report in reports.items():
        measures = {m: interval(values(report, m), draws, confidence) for m in report.measures}
        differences = None
        if baseline is not None and name != baseline:
            base = reports[baseline]
            differences = {
                m: interval(values(report, m) - values(base, m), draws, confidence)
                for m in report.measures
                if m in base.aggregate
            }
        out[name] = RunIntervals(measures, differences)
    return out


def format_intervals(
    found: Mapping[str, RunIntervals], baseline: str | None, samples: int, confidence: float,
    seed: int,
) -> str:  # fmt: skip
    """The intervals as text: one line per run and measure, then one per difference."""
    lines = [
        f"{confidence:.0%} bootstrap intervals ({samples} resamples of the queries, seed {seed}):"
    ]
    for name, run in found.items():
        cells = ", ".join(f"{m} {i}" for m, i in run.measures.items())
        lines.append(f"  {name}: {cells}")
    for name, run in found.items():
        if run.differences:
            cells = ", ".join(f"{m} {i.mean:+.4f} [{i.low:+.4f}, {i.high:+.4f}]"
                              for m, i in run.differences.items())  # fmt: skip
            lines.append(f"  {name} - {baseline}: {cells}")
    return "\n".join(lines)
