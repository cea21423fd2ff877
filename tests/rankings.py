"""Comparing rankings computed by two code paths, with ties allowed.

FAISS, BLAS, oneDNN and ONNX Runtime pick their kernels by CPU (AVX2 on a Zen 3, AVX-512 on a
Zen 4): the same scores differ in the last bits from one kind to the other, and between two
paths (one index or its shards, one batch or another) on the same machine. Two rankings agree
when their scores agree within a tolerance position by position, and every document ranked
clear of the cut-off (its score more than the tolerance above the last one) is in both lists
with the same score: documents whose scores tie within the tolerance may come in either order,
and which of them make the cut is the kernels' choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

#: Scores of the tiny test models lie within ~1e-3 of each other; kernels differ by ~1e-6.
ATOL = 1e-4


def assert_same_ranking(
    a: Sequence[tuple[str, float]], b: Sequence[tuple[str, float]], atol: float = ATOL
) -> None:
    """Assert that two ranked lists of ``(id, score)`` agree, ties within ``atol`` allowed."""
    assert len(a) == len(b), f"{len(a)} hits against {len(b)}"
    if not a:
        return
    scores_a = np.array([s for _, s in a], dtype=np.float64)
    scores_b = np.array([s for _, s in b], dtype=np.float64)
    np.testing.assert_allclose(scores_a, scores_b, rtol=0, atol=atol)
    cut = max(scores_a[-1], scores_b[-1]) + atol
    for this, other in ((a, b), (b, a)):
        found = dict(other)
        for doc, score in this:
            if score <= cut:
                continue  # tied with the last hit: either list may hold it
            assert doc in found, f"{doc!r} (score {score}) ranked in one list, not the other"
            assert abs(found[doc] - score) <= atol, f"{doc!r}: {score} against {found[doc]}"


def assert_same_runs(
    a: Mapping[str, Sequence[tuple[str, float]]],
    b: Mapping[str, Sequence[tuple[str, float]]],
    atol: float = ATOL,
) -> None:
    """:func:`assert_same_ranking` for every query of two runs (the same queries in both)."""
    assert a.keys() == b.keys()
    for query in a:
        assert_same_ranking(a[query], b[query], atol)


def assert_same_search(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], atol: float = ATOL
) -> None:
    """Two FAISS answers ``(scores, positions)`` for the same queries, ties allowed."""
    (scores_a, pos_a), (scores_b, pos_b) = a, b
    assert pos_a.shape == pos_b.shape
    for row in range(len(pos_a)):
        assert_same_ranking(
            list(zip(pos_a[row].tolist(), scores_a[row].tolist(), strict=True)),
            list(zip(pos_b[row].tolist(), scores_b[row].tolist(), strict=True)),
            atol,
        )
