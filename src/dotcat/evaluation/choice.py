"""Choosing a setting on dev queries without chasing noise: the paired one-standard-error rule.

dotcat picks several settings from a grid by their dev score: an index's hybrid fusion (RRF or a
linear dense weight), a re-ranker's interpolation weight (``train cat``), and the weight a
corpus's pseudo-queries give a re-ranker (``dotcat calibrate``). Dev sets are small (80-200
queries), so the grid point with the best mean is often best by chance: on SciFact, a trained
bi-encoder's hybrid chose a dense weight of 0.8 because it beat 0.7 by 0.00002 nDCG@10 on 101
dev queries, at the edge of a plateau from 0.6 to 0.8; on test that edge was 0.021 below 0.6.

:func:`choose` applies the one-standard-error rule of Breiman, Friedman, Olshen and Stone
(*Classification and Regression Trees*, 1984, section 3.4.3) as Hastie, Tibshirani and Friedman
state it (*The Elements of Statistical Learning*, 2nd ed., 2009, section 7.10): take the most
parsimonious model whose error is within one standard error of the best. Here the points are
scored on the same queries, so the standard error is that of the *paired* per-query
differences (as a paired t-test measures them), which the points' shared query difficulty does
not inflate. With ``s_p(q)`` the dev score of point ``p`` on query ``q`` (n queries) and ``b``
the point with the best mean::

    d_p(q) = s_b(q) - s_p(q)
    p is tied with b   iff   mean(d_p) <= Z * sd(d_p) / sqrt(n)          (Z = 1)

Among the tied points, "most parsimonious" is read as "moves least from the prior default",
the setting a caller holds before seeing dev (the centre of the fusion grid, the plain
cross-encoder score, the first stage alone):

1. the prior when it is tied: the dev data did not show it wrong;
2. else the tied point nearest the prior in the grid's order (of two as near, the higher dev
   mean, then the earlier): the evidence moves the setting only as far as it must. Choosing
   the fusion on half of each of five collections' dev queries and judging on the other half
   (no test query), this beat the most central tied point on all five.

With fewer than :data:`MIN_QUERIES` dev queries the standard error itself is too uncertain (its
relative error is about ``1 / sqrt(2 (n - 1))``, 16 % at 20 queries), and the prior default is
kept. No resampling: the rule is deterministic, the same on every machine.

The returned :class:`Choice` carries the curve (each point's mean and its standard error
against the best), the tied set and the reason in words, for a manifest or a model's record.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dotcat.errors import DotcatError

RULE = "paired one-standard-error"
#: Standard errors within which a point is tied with the best (Breiman et al.'s rule: one).
Z = 1.0
#: Fewer dev queries than this: the prior default is kept.
MIN_QUERIES = 20
# Means closer than this are equal (sums in another order must not decide a choice).
_TOLERANCE = 1e-12


@dataclass(frozen=True)
class Choice:
    """A grid point chosen on dev by :func:`choose`, and the evidence.

    Attributes:
        chosen: the point chosen.
        best: the point with the best dev mean (what an argmax picks).
        prior: the prior default.
        means: point -> dev mean, in the grid's order (empty with no queries).
        errors: point -> standard error of its paired per-query differences from ``best``.
        tied: the points within ``Z`` standard errors of the best, in the grid's order (empty
            when too few queries left no test).
        queries: dev queries.
        reason: why ``chosen`` was chosen, in words.
    """

    chosen: Hashable
    best: Hashable | None
    prior: Hashable
    means: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    tied: tuple = ()
    queries: int = 0
    reason: str = ""

    def to_json(self, digits: int = 6) -> dict[str, Any]:
        """The record as JSON (points as strings): ``rule``, ``queries``, ``prior``, ``best``,
        ``chosen``, ``grid`` (the points in the grid's order), ``scores`` (the curve: each
        point's dev mean), ``errors``, ``tied``, ``reason``."""
        return {
            "rule": RULE,
            "queries": self.queries,
            "prior": str(self.prior),
            "best": None if self.best is None else str(self.best),
            "chosen": str(self.chosen),
            "grid": [str(p) for p in self.means],
            "scores": {str(p): round(v, digits) for p, v in self.means.items()},
            "errors": {str(p): round(v, digits) for p, v in self.errors.items()},
            "tied": [str(p) for p in self.tied],
            "reason": self.reason,
        }


def choose(
    per_query: Mapping[Hashable, Mapping[str, float]],
    prior: Hashable,
    order: Sequence[Hashable] | None = None,
    *,
    min_queries: int = MIN_QUERIES,
    z: float = Z,
) -> Choice:
    """Choose a grid point by the paired one-standard-error rule (see the module docstring).

    Args:
        per_query: point -> query id -> dev score; every point scored on the same queries.
        prior: the prior default, one of the points.
        order: the grid's order (nearness to the prior is measured in it); default:
            ``per_query``'s.
        min_queries: with fewer dev queries, ``prior`` is kept.
        z: standard errors within which a point is tied with the best.

    Raises:
        DotcatError: ``prior`` or ``order`` do not match the points, or the points were
            scored on different queries (the rule compares them query by query).
    """
    order = list(per_query if order is None else order)
    _check(per_query, prior, order)
    queries = sorted(per_query[prior])
    n = len(queries)
    if n < max(min_queries, 2):  # a standard error needs two queries
        means = {p: _mean([per_query[p][q] for q in queries]) for p in order} if n else {}
        reason = f"only {n} dev queries (fewer than {min_queries}): kept the prior default"
        return Choice(prior, None, prior, means, queries=n, reason=f"{reason} {prior}")
    rows = {p: [per_query[p][q] for q in queries] for p in order}
    means = {p: _mean(rows[p]) for p in order}
    top = max(means.values())
    best = next(p for p in order if means[p] >= top - _TOLERANCE)  # ties: the earlier
    errors = {p: _paired_error(rows[best], rows[p]) for p in order}
    tied = tuple(p for p in order if means[best] - means[p] <= z * errors[p] + _TOLERANCE)
    chosen = prior if prior in tied else _nearest(tied, prior, order, means)
    reason = _reason(chosen, best, prior, tied, means, errors, z)
    return Choice(chosen, best, prior, means, errors, tied, n, reason)


def argmax(per_query: Mapping[Hashable, Mapping[str, float]], order: Sequence[Hashable]) -> Any:
    """The point with the best mean (ties: the earlier in ``order``): what the rule replaces,
    for comparisons."""
    means = {p: _mean(list(per_query[p].values())) for p in order}
    top = max(means.values())
    return next(p for p in order if means[p] >= top - _TOLERANCE)


def _check(per_query: Mapping, prior: Hashable, order: list) -> None:
    if prior not in per_query:
        raise DotcatError(f"the prior default {prior!r} is not one of the points scored on dev")
    if sorted(map(str, order)) != sorted(map(str, per_query)) or len(set(order)) != len(order):
        raise DotcatError(f"the grid's order {order!r} does not list each scored point once")
    queries = set(per_query[prior])
    for point in order:
        if set(per_query[point]) != queries:
            raise DotcatError(
                f"point {point!r} was scored on other queries than {prior!r}: the rule compares "
                "points query by query"
            )


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _paired_error(best: Sequence[float], other: Sequence[float]) -> float:
    """Standard error of the mean of ``best[i] - other[i]`` (sample deviation, n - 1)."""
    diffs = [b - o for b, o in zip(best, other, strict=True)]
    mean = _mean(diffs)
    variance = math.fsum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return math.sqrt(variance / len(diffs))


def _nearest(tied: Sequence[Hashable], prior: Hashable, order: list, means: Mapping) -> Hashable:
    """The tied point nearest ``prior`` in ``order``; of two as near, the higher mean, then the
    earlier."""
    at = order.index(prior)
    return min(tied, key=lambda p: (abs(order.index(p) - at), -means[p], order.index(p)))


def _reason(chosen, best, prior, tied, means, errors, z) -> str:
    within = f"within {z:g} standard error{'s' if z != 1 else ''} of the best"
    if chosen == prior and prior == best:
        return f"the prior default {prior} is the best on dev: kept"
    if chosen == prior:
        return (
            f"{len(tied)} points {within} ({best}, {means[best]:.4f}; paired per-query "
            f"differences): tied; the prior default {prior} ({means[prior]:.4f}) is tied: kept"
        )
    gap = means[best] - means[prior]
    return (
        f"the prior default {prior} is {gap:.4f} below the best ({best}, {means[best]:.4f}), "
        f"more than {z:g} x its standard error {errors[prior]:.4f}; of the {len(tied)} points "
        f"{within} ({', '.join(map(str, tied))}), {chosen} is the nearest to it"
    )
