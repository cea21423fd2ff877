"""BM25 as a one-off search: a corpus indexed in memory, a batch of queries searched.

The lexical baseline of ``dotcat bm25`` and of experiments. The index itself (analysis,
scoring, saving) is :class:`dotcat.index.bm25.BM25Index`; index directories keep one for BM25
and hybrid search (:class:`dotcat.search.pipeline.SearchPipeline`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dotcat.index.bm25 import BM25Config, BM25Index
from dotcat.search.feedback import RM3, rm3_search
from dotcat.types import Run


def bm25_search(
    corpus: Iterable[Any],
    queries: Mapping[str, str],
    k: int = 100,
    config: BM25Config = BM25Config(),
    show_progress: bool = True,
    rm3: RM3 | None = None,
) -> Run:
    """Index ``corpus`` with BM25 and return the top-k per query: qid -> [(docid, score)].

    See :meth:`BM25Index.build` for the accepted corpus forms and :meth:`BM25Index.search`
    for the result order. Use :class:`BM25Index` directly to search several batches. With
    ``rm3``, each query is expanded by RM3 first (:mod:`dotcat.search.feedback`).
    """
    index = BM25Index.build(corpus, config=config, show_progress=show_progress)
    if rm3 is not None:
        return rm3_search(index, queries, k, rm3, show_progress=show_progress)
    return index.search(queries, k=k, show_progress=show_progress)
