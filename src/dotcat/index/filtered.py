"""Search within admitted documents: the set a filter admits, and FAISS searched inside it.

A filter (:mod:`dotcat.search.filters`) admits a set of documents; :class:`Admitted` holds it
as what each side of an index searches: the documents' positions, the FAISS ids of their
vectors (their passages' in an index with passages) and a mask over the index's vectors in id
order, which is also the BM25 side's row order. Searching inside the set, rather than
filtering a search's results, is what gives k results however selective the filter: a search
post-filtered from its top n returns fewer than k as soon as fewer than k of those n pass
(txtai and most vector stores filter so; FAISS's ``IDSelector`` search parameters, Douze et
al., "The Faiss library", 2024, section 5.4, search within).

:func:`search_admitted` searches a FAISS index within a set of ids:

- an ``IDSelectorBitmap`` over the ids, in the index's own search parameters: a flat index compares
  only the admitted vectors (exact); an IVF index scans ``nprobe`` lists, widened by the inverse of
  the admitted share (a list holds fewer admitted vectors), up to every list; an HNSW graph is
  walked with ``efSearch`` widened so that its candidate list holds at least the k wanted among the
  admitted (the walk still visits other nodes, only admitted ones are kept);
- exactly, by the admitted vectors themselves (read back from the index, compared with the
  query, in blocks), where the set holds at most :data:`EXACT_LIMIT` vectors (cheaper than a
  graph walk or a list scan then, and exact), where a structure cannot take a selector (a GPU
  index), and for each query the selector search left short of k results (an HNSW walk that
  met too few admitted nodes): k results always come back when k are admitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import faiss
import numpy as np

from dotcat.index.faiss_index import TIE_MARGIN, order_ties, reconstruct

#: Up to this many admitted vectors a search compares them all (exact; cheaper than a graph
#: walk or a list scan with a selector at that size).
EXACT_LIMIT = 2048
#: Vectors compared per block in an exact search (bounds its memory: 16k x dim doubles).
EXACT_BLOCK = 16_384


@dataclass(frozen=True)
class Admitted:
    """The documents a filter admits, as each side of an index searches them.

    Attributes:
        positions: the admitted documents' positions, sorted.
        mask: over the index's vectors in id order (the BM25 side's rows where they are
            passages): admitted or not.
        ids: the admitted vectors' FAISS ids, sorted.
        span: one past the largest FAISS id of the index (the bitmap's size).
        document_mask: over the index's documents in position order (the BM25 side's rows
            where they are documents).
    """

    positions: np.ndarray
    mask: np.ndarray
    ids: np.ndarray
    span: int
    document_mask: np.ndarray
    _selector: list = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        positions: np.ndarray,
        vector_ids: np.ndarray,
        vector_positions: np.ndarray,
        span: int,
        documents: np.ndarray | None = None,
    ) -> Admitted:
        """The set of documents at ``positions`` over an index whose vectors (ids sorted)
        belong to the documents at ``vector_positions``, and whose documents are at
        ``documents`` (sorted; default: the vectors', one each)."""
        positions = np.unique(np.asarray(positions, dtype=np.int64))
        mask = np.isin(vector_positions, positions)
        document_mask = mask if documents is None else np.isin(documents, positions)
        return cls(positions, mask, vector_ids[mask], int(span), document_mask)

    @property
    def documents(self) -> int:
        return int(len(self.positions))

    @property
    def vectors(self) -> int:
        return int(len(self.ids))

    def selector(self) -> faiss.IDSelector:
        """An ``IDSelectorBitmap`` over the admitted ids (made once; it holds its bitmap)."""
        if not self._selector:
            bits = np.zeros(self.span, dtype=bool)
            bits[self.ids] = True
            bitmap = np.packbits(bits, bitorder="little")
            selector = faiss.IDSelectorBitmap(self.span, faiss.swig_ptr(bitmap))
            self._selector.extend([selector, bitmap])  # the bitmap must outlive the selector
        return self._selector[0]


def search_admitted(
    index: faiss.Index, queries: np.ndarray, k: int, admitted: Admitted
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k ``(scores, ids)`` among the admitted vectors (see the module docstring); -1 pads
    where fewer than k are admitted; ties ordered by id."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(int(k), admitted.vectors)
    if k < 1:
        empty = np.empty((len(queries), 0))
        return empty.astype(np.float32), empty.astype(np.int64)
    fetch = min(k + TIE_MARGIN, admitted.vectors)
    if admitted.vectors <= EXACT_LIMIT:
        return _trim(*exact_search(index, queries, fetch, admitted.ids), k)
    try:
        params = search_parameters(index, admitted, fetch)
        scores, ids = index.search(queries, fetch, params=params)
    except (RuntimeError, TypeError):  # a structure that takes no selector (a GPU index)
        return _trim(*exact_search(index, queries, fetch, admitted.ids), k)
    short = (ids >= 0).sum(axis=1) < fetch
    if short.any():
        scores[short], ids[short] = exact_search(index, queries[short], fetch, admitted.ids)
    return _trim(scores, ids, k)


def _trim(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores, ids = order_ties(scores, ids)
    return scores[:, :k], ids[:, :k]


def search_parameters(index: faiss.Index, admitted: Admitted, k: int) -> faiss.SearchParameters:
    """The index's own search parameters with the selector, widened for the admitted share
    (see the module docstring)."""
    base = faiss.downcast_index(index)
    if isinstance(base, faiss.IndexIDMap):  # an updated index: the structure is inside
        base = faiss.downcast_index(base.index)
    share = max(admitted.vectors / max(index.ntotal, 1), 1e-9)
    selector = admitted.selector()
    ivf = faiss.try_extract_index_ivf(base)
    if ivf is not None:
        nprobe = min(ivf.nlist, max(ivf.nprobe, math.ceil(ivf.nprobe / share)))
        return faiss.SearchParametersIVF(sel=selector, nprobe=int(nprobe))
    if hasattr(base, "hnsw"):
        ef = max(base.hnsw.efSearch, math.ceil(k / share))
        return faiss.SearchParametersHNSW(sel=selector, efSearch=int(min(ef, index.ntotal)))
    return faiss.SearchParameters(sel=selector)


def exact_search(
    index: faiss.Index, queries: np.ndarray, k: int, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k inner products of ``queries`` with the vectors ``ids`` (read back from the
    index: exact for flat storage, the decoded codes for compressed ones), block by block."""
    n = len(queries)
    best_scores = np.full((n, 0), -np.inf, dtype=np.float32)
    best_ids = np.full((n, 0), -1, dtype=np.int64)
    for start in range(0, len(ids), EXACT_BLOCK):
        block = ids[start : start + EXACT_BLOCK]
        scores = inner_products(queries, reconstruct(index, block))
        scores = np.concatenate([best_scores, scores], axis=1)
        labels = np.concatenate([best_ids, np.broadcast_to(block, (n, len(block)))], axis=1)
        keep = min(k, scores.shape[1])
        top = np.argpartition(-scores, keep - 1, axis=1)[:, :keep]
        best_scores = np.take_along_axis(scores, top, axis=1)
        best_ids = np.take_along_axis(labels, top, axis=1)
    return order_ties(best_scores.astype(np.float32), best_ids)


def inner_products(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """``queries @ vectors.T`` in float32, each rounded once from a float64 sum.

    A product of two float32 numbers is exact in float64, and a float64 sum of a few hundred of
    them is within far less than a float32 ulp of the exact value, so each score is (almost
    always) the correctly rounded one, whatever the summation order. A float32 BLAS product's
    order follows the matrix's shape (which kernel takes which column), so a document's score
    would otherwise move by an ulp with the set a filter admits or the shard it lives in, and a
    hybrid's min-max normalisation magnifies that where a query's scores lie close together.
    """
    return (queries.astype(np.float64) @ vectors.astype(np.float64).T).astype(np.float32)
