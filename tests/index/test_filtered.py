"""FAISS searched within admitted ids: exact on flat storage, k results whenever k are
admitted, whatever the structure (Flat, IVF, HNSW, an updated index's ID map)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from dotcat.index import filtered
from dotcat.index.filtered import Admitted, search_admitted

pytestmark = pytest.mark.kernels  # its results can depend on the CPU (Makefile: test-kernels)

N, DIM, K = 3000, 16, 20


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make(spec: str, x: np.ndarray) -> faiss.Index:
    index = faiss.index_factory(DIM, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    if "IVF" in spec:
        faiss.extract_index_ivf(index).nprobe = 4
    return index


def admitted_of(ids: np.ndarray) -> Admitted:
    every = np.arange(N, dtype=np.int64)
    return Admitted.of(ids, every, every, N)


def brute_force(x: np.ndarray, queries: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    scores = queries @ x[ids].T
    return ids[np.argsort(-scores, axis=1, kind="stable")[:, :k]]


@pytest.mark.parametrize("share", [0.5, 0.05, 0.005])
@pytest.mark.parametrize("spec", ["Flat", "IVF32,Flat", "HNSW16"])
def test_a_filtered_search_finds_the_subsets_nearest(vectors, spec, share, monkeypatch):
    monkeypatch.setattr(filtered, "EXACT_LIMIT", 0)  # the selector path, at every share
    rng = np.random.default_rng(1)
    ids = np.sort(rng.choice(N, size=max(1, int(share * N)), replace=False))
    queries = vectors[rng.choice(N, size=10, replace=False)] + 0.01
    index = make(spec, vectors)
    scores, found = search_admitted(index, queries, K, admitted_of(ids))
    k = min(K, len(ids))
    assert found.shape == (10, k) and set(found.ravel()) <= set(ids)  # only admitted ones
    assert (found >= 0).all()  # k came back
    recall = _recall(found, brute_force(vectors, queries, ids, K), k)
    every = np.arange(N, dtype=np.int64)
    unfiltered = _recall(index.search(queries, K)[1], brute_force(vectors, queries, every, K), K)
    # As good as the structure searches unfiltered (random 16-d vectors: IVF's worst case).
    assert recall == 1.0 if spec == "Flat" else recall >= unfiltered - 0.05, (recall, unfiltered)
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first


def _recall(found: np.ndarray, expected: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(found, expected, strict=True)]))


def test_few_admitted_are_compared_exactly_and_all_come_back(vectors):
    ids = np.array([5, 17, 2999], dtype=np.int64)
    index = make("HNSW16", vectors)
    scores, found = search_admitted(index, vectors[:2], 10, admitted_of(ids))
    assert found.shape == (2, 3) and sorted(found[0]) == [5, 17, 2999]
    np.testing.assert_allclose(scores[0], np.sort(vectors[ids] @ vectors[0])[::-1], rtol=1e-5)
    empty = search_admitted(index, vectors[:2], 10, admitted_of(np.array([], dtype=np.int64)))
    assert empty[1].shape == (2, 0)


def test_an_updated_index_filters_by_its_own_ids(vectors):
    inner = faiss.IndexFlatIP(DIM)
    wrapped = faiss.IndexIDMap2(inner)
    ids = np.arange(N, dtype=np.int64) * 3 + 7  # ids with gaps, as updates leave them
    wrapped.add_with_ids(vectors, ids)
    keep = ids[::2]
    admitted = Admitted.of(keep, ids, ids, int(ids[-1]) + 1)
    _, found = search_admitted(wrapped, vectors[:5], K, admitted)
    local = np.arange(0, N, 2, dtype=np.int64)  # the rows of the admitted ids
    np.testing.assert_array_equal(found, ids[brute_force(vectors, vectors[:5], local, K)])
    assert found[0, 0] == ids[0] and found[2, 0] == ids[2]  # an admitted vector finds itself


def test_a_short_selector_search_is_completed_exactly(vectors, monkeypatch):
    monkeypatch.setattr(filtered, "EXACT_LIMIT", 0)
    index = make("HNSW16", vectors)
    index.hnsw.efSearch = 16
    monkeypatch.setattr(
        filtered,
        "search_parameters",
        lambda *a: faiss.SearchParametersHNSW(sel=a[1].selector(), efSearch=16),
    )
    ids = np.arange(0, N, 97, dtype=np.int64)  # 31 admitted: a narrow walk finds few
    _, found = search_admitted(index, vectors[:4], K, admitted_of(ids))
    assert (found >= 0).all() and found.shape == (4, K)
    np.testing.assert_array_equal(found, brute_force(vectors, vectors[:4], ids, K))


def test_a_documents_score_does_not_depend_on_what_else_is_admitted():
    """The exact path gives each (query, vector) pair one score, bit for bit, whichever set a
    filter admits around it (or the shard holding it): a hybrid's min-max normalisation
    magnifies a last-bit difference where a query's scores lie close together."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((600, 384)) * 0.05 + 1.0).astype(np.float32)  # close scores
    queries = (rng.standard_normal((3, 384)) * 0.05 + 1.0).astype(np.float32)
    index = faiss.IndexFlatIP(384)
    index.add(x)
    every = np.arange(len(x), dtype=np.int64)
    scores_of = {}
    for size in (7, 33, 100, 257, 599):
        ids = np.sort(np.append(rng.choice(np.arange(1, len(x)), size, replace=False), 0))
        admitted = Admitted.of(ids, every, every, len(x))
        scores, found = search_admitted(index, queries, len(ids), admitted)
        for row in range(len(queries)):
            for doc, score in zip(found[row], scores[row], strict=True):
                scores_of.setdefault((row, int(doc)), set()).add(float(score))
    assert all(len(seen) == 1 for seen in scores_of.values())
    first = [next(iter(scores_of[(row, 0)])) for row in range(len(queries))]
    np.testing.assert_allclose(first, queries.astype(np.float64) @ x[0], rtol=1e-6)
