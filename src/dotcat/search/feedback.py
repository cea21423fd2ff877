"""Pseudo-relevance feedback: the top documents of a first search taken as relevant, the
query rewritten from them, the index searched again.

**RM3** (BM25 side). The relevance model RM1 (Lavrenko and Croft, "Relevance-Based Language
Models", SIGIR 2001) estimated from the top ``fb_docs`` documents D of the BM25 ranking, each
weighted by its BM25 score, and interpolated with the original query (RM3: Abdul-Jaleel et al.,
"UMass at TREC 2004", 2004), as Anserini's ``Rm3Reranker`` (and so Pyserini's ``set_rm3``)
computes it::

    P(w | D)  = tf(w, D) / sum_{w' kept in D} tf(w', D)      over D's fb_terms likeliest terms
    RM1(w)   ~= sum_D P(w | D) * score(D)                    top fb_terms terms, L1-normalised
    q'(w)     = lambda * tf(w, q) / |q| + (1 - lambda) * RM1(w)      lambda: original_query_weight
    score'(d) = sum_w q'(w) * bm25(w, d)

A feedback term is 2 to 20 characters of ``[a-z0-9]``, and in at most 10% of the documents
(Anserini's document-frequency cut, which stands in for a stop-word list). The counts
``tf(w, D)`` come from bm25s' own score matrix (:meth:`BM25Index.term_frequencies`); the
expanded query is scored with its BM25 columns (:meth:`BM25Index.weighted_scores`). Defaults:
Anserini's and Pyserini's, 10 documents, 10 terms, weight 0.5. Equal weights are ordered by
term id (Anserini leaves them to its hash order).

**Rocchio** (dense side; Rocchio, "Relevance Feedback in Information Retrieval", 1971; on dense
retrievers: Li et al., "Pseudo Relevance Feedback with Deep Language Models and Dense
Retrievers: Successes and Pitfalls", ACM TOIS 2023)::

    q' = alpha * q + beta * (1 / k) * sum_{i <= k} d_i

with d_i the vectors of the top k documents of the first dense search, read back from the
FAISS index (:meth:`DenseIndex.vectors`), and q' searched again (normalised to unit length
where the index compares cosines). Defaults: k 3, alpha 1, beta 0.5.

On an index with passages (:mod:`dotcat.index.passages`) BM25's rows and FAISS's vectors are
passages, so the feedback documents D and d_i are the top passages (as Anserini and Pyserini
over segmented documents) and the statistics (document frequencies) the passages'; the
rewritten query ranks passages, and documents are ranked from them
(:mod:`dotcat.search.aggregation`) like any query's. A hybrid first stage applies each to its own
side before the fusion. The defaults (no feedback) were chosen on the dev queries of five
collections, where every setting of either fell below its first stage on the mean.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dotcat import options
from dotcat.errors import DotcatError
from dotcat.index.bm25 import BM25Index
from dotcat.progress import progress_bar
from dotcat.search.config import PRF_SIDES
from dotcat.types import Run

__all__ = [
    "RM3",
    "Rocchio",
    "RM3Expander",
    "eligible_terms",
    "expanded_query",
    "relevance_model",
    "rm3_of",
    "rm3_search",
    "rocchio_of",
    "rocchio_search",
    "rocchio_vectors",
]

#: Anserini's feedback terms: 2-20 characters of [a-z0-9], in at most 10% of the documents.
TERM_PATTERN = re.compile(r"[a-z0-9]{2,20}")
MAX_DF_RATIO = 0.1


@dataclass(frozen=True)
class RM3:
    """RM3's settings (Anserini's and Pyserini's defaults)."""

    fb_docs: int = options.RM3_FB_DOCS
    fb_terms: int = options.RM3_FB_TERMS
    original_query_weight: float = options.RM3_ORIGINAL_WEIGHT

    def __post_init__(self) -> None:
        if self.fb_docs < 1 or self.fb_terms < 1:
            raise DotcatError(f"RM3 needs fb_docs and fb_terms >= 1, got {self}")
        if not 0 <= self.original_query_weight <= 1:
            raise DotcatError(f"RM3's original_query_weight must be in [0, 1], got {self}")

    def describe(self) -> str:
        """``RM3 (10 docs, 10 terms, original weight 0.5)``."""
        return (f"RM3 ({_count(self.fb_docs, 'doc')}, {_count(self.fb_terms, 'term')}, "
                f"original weight {self.original_query_weight:g})")  # fmt: skip


@dataclass(frozen=True)
class Rocchio:
    """Rocchio's settings on query vectors (Li et al.'s)."""

    docs: int = options.ROCCHIO_DOCS
    alpha: float = options.ROCCHIO_ALPHA
    beta: float = options.ROCCHIO_BETA

    def __post_init__(self) -> None:
        if self.docs < 1:
            raise DotcatError(f"Rocchio needs docs >= 1, got {self.docs}")

    def describe(self) -> str:
        """``Rocchio (3 docs, alpha 1, beta 0.5)``."""
        return f"Rocchio ({_count(self.docs, 'doc')}, alpha {self.alpha:g}, beta {self.beta:g})"


def rm3_of(config) -> RM3 | None:
    """RM3's settings from a :class:`~dotcat.search.config.PipelineConfig` whose ``prf``
    rewrites the BM25 side; None where it does not."""
    if "bm25" not in PRF_SIDES[config.prf]:
        return None
    return RM3(config.fb_docs, config.fb_terms, config.original_query_weight)


def rocchio_of(config) -> Rocchio | None:
    """Rocchio's settings from a :class:`~dotcat.search.config.PipelineConfig` whose ``prf``
    rewrites the dense side; None where it does not."""
    if "dense" not in PRF_SIDES[config.prf]:
        return None
    return Rocchio(config.rocchio_docs, config.rocchio_alpha, config.rocchio_beta)


class RM3Expander:
    """RM3 over one :class:`BM25Index`: :meth:`expand` a query into weighted terms,
    :meth:`search` with them. The terms eligible for feedback are found once, here."""

    def __init__(self, index: BM25Index, params: RM3 = RM3()):
        self.index = index
        self.params = params
        self._eligible = eligible_terms(index.vocabulary, index.document_frequencies, len(index))

    def expand(self, query: str, mask: np.ndarray | None = None) -> dict[int, float]:
        """The expanded query ``q'``: term id -> weight (empty: no indexed term); with
        ``mask``, its feedback documents are among the rows it admits (a filter's)."""
        ids = self.index.query_token_ids(query)
        if not ids:
            return {}
        first = self.index.top(self.index.weighted_scores(Counter(ids)), self.params.fb_docs, mask)
        return expanded_query(ids, self.relevance_model(first), self.params)

    def relevance_model(self, feedback: Sequence[tuple[int, float]]) -> dict[int, float]:
        """RM1 from ``(row, score)`` feedback documents: term id -> weight, summing to 1."""
        return relevance_model(
            [(self.eligible_terms(row), score) for row, score in feedback], self.params.fb_terms
        )

    def eligible_terms(self, row: int) -> dict[int, float]:
        """A row's feedback terms with their counts (:meth:`BM25Index.term_frequencies`)."""
        return {t: c for t, c in self.index.term_frequencies(row).items() if self._eligible[t]}

    def search_one(
        self, query: str, k: int, mask: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """Top-k ``(doc_id, score)`` for the expanded query (among ``mask``'s rows)."""
        return self.search_expanded(self.expand(query, mask), k, mask)

    def search_expanded(
        self, weights: Mapping[int, float], k: int, mask: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """Top-k ``(row id, score)`` for an expanded query :meth:`expand` gave (rows: the index's
        documents, or its passages in an index directory built with them; those ``mask`` admits)."""
        if not weights:
            return []
        top = self.index.top(self.index.weighted_scores(weights), k, mask)
        return [(self.index.doc_ids[row], score) for row, score in top]

    def search(
        self,
        queries: Mapping[str, str],
        k: int,
        show_progress: bool = False,
        mask: np.ndarray | None = None,
    ) -> Run:
        """:meth:`search_one` for every query: ``{qid: [(doc_id, score), ...]}``."""
        items = progress_bar(queries.items(), total=len(queries), desc="BM25+RM3 search",
                             enabled=show_progress)  # fmt: skip
        return {str(qid): self.search_one(text, k, mask) for qid, text in items}


def relevance_model(
    feedback: Sequence[tuple[Mapping[int, float], float]], fb_terms: int
) -> dict[int, float]:
    """RM1 (see the module docstring) from feedback documents given as ``(their eligible
    terms' counts, their score)``: term id -> weight, summing to 1; equal weights by term id."""
    total: dict[int, float] = {}
    for counts, score in feedback:
        kept = _largest(counts, fb_terms)
        norm = sum(kept.values())
        if norm <= 0:
            continue
        for term, count in kept.items():
            total[term] = total.get(term, 0.0) + count / norm * score
    model = _largest(total, fb_terms)
    norm = sum(model.values())
    return {t: w / norm for t, w in model.items()} if norm > 0 else {}


def expanded_query(ids: Sequence[int], model: Mapping[int, float], params: RM3) -> dict[int, float]:
    """RM3's ``q'(w) = lambda * tf(w, q) / |q| + (1 - lambda) * RM1(w)`` for a query of term
    ids ``ids`` (repeats counted) and its relevance model."""
    original = {t: c / len(ids) for t, c in Counter(ids).items()}
    lam = params.original_query_weight
    terms = original.keys() | model.keys()
    return {t: lam * original.get(t, 0.0) + (1 - lam) * model.get(t, 0.0) for t in terms}


def eligible_terms(vocabulary: Sequence[str], df: np.ndarray, documents: int) -> np.ndarray:
    """Which terms may expand a query: Anserini's shape (:data:`TERM_PATTERN`), in at most
    :data:`MAX_DF_RATIO` of the ``documents``."""
    shaped = np.array([TERM_PATTERN.fullmatch(t) is not None for t in vocabulary], dtype=bool)
    return shaped & ~(np.asarray(df) > MAX_DF_RATIO * documents)


def rm3_search(
    index: BM25Index,
    queries: Mapping[str, str],
    k: int,
    params: RM3 = RM3(),
    show_progress: bool = False,
) -> Run:
    """BM25 with RM3 expansion over ``index`` (see the module docstring)."""
    return RM3Expander(index, params).search(queries, k, show_progress)


def rocchio_vectors(
    queries: np.ndarray,
    documents: np.ndarray,
    present: np.ndarray,
    params: Rocchio,
    score_kind: str = "dot",
) -> np.ndarray:
    """``alpha * q + beta * mean(d_i)`` per query, unit length again where the index compares
    cosines (``score_kind``).

    Args:
        queries: ``(n, dim)`` query vectors.
        documents: ``(n, k, dim)`` each query's feedback document vectors.
        present: ``(n, k)`` which of them exist (a query may find fewer than k).
    """
    counts = present.sum(axis=1, keepdims=True)
    summed = (documents * present[..., None]).sum(axis=1)
    mean = np.divide(summed, counts, out=np.zeros_like(summed), where=counts > 0)
    expanded = (params.alpha * queries + params.beta * mean).astype(np.float32)
    if score_kind == "cosine":
        expanded /= np.maximum(np.linalg.norm(expanded, axis=1, keepdims=True), 1e-12)
    return expanded


def rocchio_expand(
    index, vectors: np.ndarray, params: Rocchio, score_kind: str, admitted=None
) -> np.ndarray:
    """``q'`` for each row of ``vectors``: the index's top ``params.docs`` vectors for it (its
    passages' on an index with passages, FAISS ids as :meth:`DenseIndex.search` returns them;
    among the ``admitted`` ones, a filter's) read back (:meth:`DenseIndex.vectors`), mixed in
    by :func:`rocchio_vectors`."""
    vectors = np.asarray(vectors, dtype=np.float32)
    _, ids = index.search(vectors, params.docs, admitted)
    return rocchio_vectors(vectors, index.vectors(ids), ids >= 0, params, score_kind)


def rocchio_search(
    retriever,
    queries: Mapping[str, str],
    k: int,
    params: Rocchio = Rocchio(),
    batch_size: int = 256,
    show_progress: bool = False,
) -> Run:
    """Dense search with Rocchio feedback through a
    :class:`~dotcat.search.dense.DenseRetriever`: encode, search the top ``params.docs``,
    read their vectors back from the index, search again with ``q'`` (:func:`rocchio_expand`);
    documents ranked from their passages as any dense search."""
    return retriever.batch_search(queries, k, batch_size, show_progress, rocchio=params)


def _largest(weights: Mapping[int, float], n: int) -> dict[int, float]:
    """The n largest weights, ties by term id. Weights recovered from floating-point scores
    are compared to 6 significant digits, so that equal counts tie."""
    if not weights:
        return {}
    top = max(weights.values())
    scale = top if top > 0 else 1.0
    order = sorted(weights, key=lambda t: (-round(weights[t] / scale, 6), t))
    return {t: weights[t] for t in order[:n]}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
