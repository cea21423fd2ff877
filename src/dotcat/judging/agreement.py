"""How far assessors agree: Cohen's kappa for each pair, on the documents both graded.

Cohen's kappa (Cohen, "A coefficient of agreement for nominal scales", 1960) corrects the
share of documents two assessors graded alike for the agreement chance alone would give::

    kappa = (p_o - p_e) / (1 - p_e)
    p_o = share of documents graded alike
    p_e = sum over grades g of  p_A(g) * p_B(g)     (each assessor's share of grade g)

Three views, each computed by scikit-learn's ``cohen_kappa_score`` (labels: the whole scale):
on the grades as given; linearly weighted (Cohen, "Weighted kappa", 1968: a 2 against a 3
disagrees less than a 0 against a 3); and on binary relevance (grade >= 1 against 0), the
agreement TREC's own studies report (Voorhees, "Variations in relevance judgments and the
measurement of retrieval effectiveness", IP&M 2000). A kappa is undefined when chance alone
explains every agreement (both gave one grade to everything): reported as None.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from dotcat.judging.store import Judgment, JudgmentStore


@dataclass(frozen=True)
class Agreement:
    """Two assessors on the documents both graded (skips left out)."""

    first: str
    second: str
    documents: int
    observed: float | None
    kappa: float | None
    weighted_kappa: float | None
    binary_kappa: float | None

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


def cohen_kappa(a: Sequence[int], b: Sequence[int], labels: Sequence[int],
                weights: str | None = None) -> float | None:  # fmt: skip
    """Cohen's kappa of two assessors' grades of the same documents (module docstring);
    None when undefined (no documents, or every agreement due to chance)."""
    if not a:
        return None
    from sklearn.metrics import cohen_kappa_score  # ~1 s to import: only when asked

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 0/0 when p_e = 1: undefined (NaN), said as None
        value = float(cohen_kappa_score(a, b, labels=list(labels), weights=weights))
    return None if math.isnan(value) else value


def pair_agreement(
    first: str, second: str, judged: Sequence[Judgment], labels: Sequence[int]
) -> Agreement:
    """Agreement of two assessors over ``judged`` (standing judgements of both)."""
    grades: dict[str, dict[tuple[str, str], int]] = {first: {}, second: {}}
    for j in judged:
        if j.assessor in grades and j.grade is not None:
            grades[j.assessor][(j.qid, j.doc_id)] = j.grade
    shared = sorted(set(grades[first]) & set(grades[second]))
    a = [grades[first][key] for key in shared]
    b = [grades[second][key] for key in shared]
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / len(a) if a else None
    binary_a, binary_b = [int(x > 0) for x in a], [int(y > 0) for y in b]
    return Agreement(
        first, second, len(shared), observed,
        cohen_kappa(a, b, labels), cohen_kappa(a, b, labels, "linear"),
        cohen_kappa(binary_a, binary_b, [0, 1]),
    )  # fmt: skip


def assessor_agreement(store: JudgmentStore) -> list[Agreement]:
    """Every pair of the store's assessors who graded documents in common."""
    judged = store.current()
    labels = sorted(store.scale)
    pairs = itertools.combinations(store.assessors(), 2)
    agreements = [pair_agreement(first, second, judged, labels) for first, second in pairs]
    return [pair for pair in agreements if pair.documents]


def format_agreement(pairs: Sequence[Agreement]) -> str:
    """A table: one row per pair of assessors."""
    if not pairs:
        return "agreement: no two assessors graded the same documents yet"

    def cell(value: float | None) -> str:
        return "undefined" if value is None else f"{value:.3f}"

    lines = ["assessors | documents | agreed | kappa | weighted kappa | binary kappa"]
    for p in pairs:
        lines.append(
            f"{p.first} / {p.second} | {p.documents} | {cell(p.observed)} | {cell(p.kappa)} | "
            f"{cell(p.weighted_kappa)} | {cell(p.binary_kappa)}"
        )
    return "\n".join(lines)
