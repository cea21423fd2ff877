"""The percentile bootstrap over queries: the interval of each run's mean, and the paired
bootstrap test of a difference (:class:`Bootstrap`), from the same resamples.

The queries are a sample from those a system will meet (Efron and Tibshirani, "An
Introduction to the Bootstrap", 1993, ch. 13; Sakai, "Evaluating evaluation metrics based on
the bootstrap", SIGIR 2006): resampling them with replacement B times and taking the mean
each time gives the spread of the mean over such samples. With per-query values ``x_1..x_n``:

    draw ``idx`` of shape (B, n) from ``numpy.random.default_rng(seed).integers(0, n, ...)``
    ``v_b = mean_j x[idx[b, j]]``                      (b = 1..B), sorted: v_(1) <= ... <= v_(B)
    interval at level 1 - a = [v_(J), v_(B+1-J)], J the fewest resamples cut from each tail
    for which ``(1 + 2J) / (B + 1) > a``       (J = 250 of B = 10,000 at a = 0.05)

A difference ``b - a`` is bootstrapped on the per-query differences ``d_q = b_q - a_q`` (a
paired bootstrap: one query's two values are drawn together). Its p-value is the smallest
level at which that interval excludes 0, ``(1 + 2 min(#{v_b <= 0}, #{v_b >= 0})) / (B + 1)``:
the test the interval inverts, so "the interval excludes 0" and "p <= a" are one statement
(the +1 counts the observed sample as a resample, so p is never 0). The resampled means are
rounded to 12 decimals first: a mean that is 0 in exact arithmetic (frequent: IR measures tie
on many queries) counts as 0 whatever order the machine summed in. Every run and measure of
one evaluation uses the same draws, and the same seed gives the same figures on every machine
(numpy's PCG64 generator is specified).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dotcat.errors import DotcatError
from dotcat.evaluation.metrics import EvalReport

#: Resamples drawn by default: the 2.5% tails hold 250 each, and a Holm step at 0.05 / 20
#: still cuts 12 from each tail.
DEFAULT_SAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
# Index draws per block (bounds memory to ~32 MB whatever B x n).
_BLOCK_ENTRIES = 1 << 22


@dataclass(frozen=True)
class Interval:
    """A mean (or a mean difference) and its interval ``[low, high]``."""

    mean: float
    low: float
    high: float

    def to_json(self) -> dict[str, float | None]:
        """The interval as JSON: an open end (too few resamples for the level) is null."""
        ends = {"low": self.low, "high": self.high}
        return {"mean": self.mean} | {k: v if math.isfinite(v) else None for k, v in ends.items()}

    def __str__(self) -> str:
        return f"{self.mean:.4f} [{self.low:.4f}, {self.high:.4f}]"


def resample_means(values: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """The mean of each row of ``values`` (k x n) under each of ``samples`` resamples of its n
    columns: a k x samples array. The draws are ``default_rng(seed).integers(0, n, size=
    (samples, n))``, drawn in blocks of rows (which gives the same numbers as one call) and
    counted per column, so that the means are one matrix product."""
    values = np.atleast_2d(np.asarray(values, dtype=np.float64))
    n = values.shape[1]
    if n < 1:
        raise DotcatError("a bootstrap needs at least one query")
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK_ENTRIES // n)
    out = np.empty((values.shape[0], samples))
    for start in range(0, samples, rows):
        block = min(rows, samples - start)
        drawn = rng.integers(0, n, size=(block, n)) + n * np.arange(block)[:, None]
        counts = np.bincount(drawn.ravel(), minlength=block * n).reshape(block, n)
        out[:, start : start + block] = (counts.astype(np.float64) @ values.T).T / n
    return out


class Bootstrap:
    """The paired percentile bootstrap of one mean (difference): p-value and interval from
    the same resampled means (module docstring)."""

    name = "paired bootstrap"

    def __init__(self, mean: float, resampled: np.ndarray) -> None:
        self.mean = float(mean)
        self.sorted = np.sort(np.round(np.asarray(resampled, dtype=np.float64), 12))
        below = int(np.searchsorted(self.sorted, 0.0, side="right"))  # v <= 0
        above = len(self.sorted) - int(np.searchsorted(self.sorted, 0.0, side="left"))  # v >= 0
        self.pvalue = float(self._pvalues(min(below, above))[-1])

    def _pvalues(self, last: int) -> np.ndarray:
        """The p-value of each tail count 0..last: ``min(1, (1 + 2j) / (B + 1))``."""
        return np.minimum(1.0, (1 + 2 * np.arange(last + 1)) / (len(self.sorted) + 1))

    def bounds(self, k: int, alpha: float) -> tuple[float, float]:
        """The interval a Holm step rejecting where ``k p <= alpha`` does not reject:
        ``[v_(J), v_(B+1-J)]``, J the first tail count whose p-value it keeps (none: the
        whole line, too few resamples for this level)."""
        keep = ~(k * self._pvalues(len(self.sorted) // 2 + 1) <= alpha)
        cut = int(np.argmax(keep))
        if cut == 0:
            return -np.inf, np.inf
        return float(self.sorted[cut - 1]), float(self.sorted[len(self.sorted) - cut])


def intervals(
    reports: Mapping[str, EvalReport],
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, dict[str, Interval]]:
    """Every run's measures, each with its percentile bootstrap interval (run -> measure ->
    :class:`Interval`); one set of draws for all (module docstring).

    Raises:
        DotcatError: the reports cover different queries.
    """
    if not reports:
        return {}
    queries = list(next(iter(reports.values())).per_query)
    for name, report in reports.items():
        if set(report.per_query) != set(queries):
            raise DotcatError(f"{name}: evaluated on other queries than the first run")
    cells = [(name, m) for name, report in reports.items() for m in report.measures]
    values = np.array([reports[name].values(m, queries) for name, m in cells])
    out: dict[str, dict[str, Interval]] = {name: {} for name in reports}
    for (name, m), row, resampled in zip(cells, values, resample_means(values, samples, seed),
                                         strict=True):  # fmt: skip
        low, high = Bootstrap(row.mean(), resampled).bounds(1, 1.0 - confidence)
        out[name][m] = Interval(float(row.mean()), low, high)
    return out


def format_intervals(
    found: Mapping[str, Mapping[str, Interval]], samples: int, confidence: float, seed: int
) -> str:
    """The intervals as text: one line per run."""
    level = f"{100 * confidence:.6g}%"
    lines = [f"{level} bootstrap intervals of the means (sums for the counts ir-measures sums; "
             f"{samples} resamples of the queries, seed {seed}):"]  # fmt: skip
    for name, measures in found.items():
        lines.append(f"  {name}: " + ", ".join(f"{m} {i}" for m, i in measures.items()))
    ends = [e for measures in found.values() for i in measures.values() for e in (i.low, i.high)]
    if not all(map(math.isfinite, ends)):
        lines.append(f"  (an infinite end: {samples} resamples are too few for this level)")
    return "\n".join(lines)
