"""BM25 at query time: the ``bm25`` first stage over an index, and a one-off corpus search.

:class:`BM25Stage` searches the BM25 index inside an index directory (``dotcat index`` builds
it beside FAISS), with RM3 feedback where the settings ask for it. Over an index with passages
its rows are passages, and documents are ranked from them
(:func:`dotcat.search.aggregation.rank_documents`) as the dense side ranks them.

:func:`bm25_search` is the lexical baseline of ``dotcat bm25`` and of experiments: a corpus
indexed in memory, a batch of queries searched. The index itself (analysis, scoring, saving)
is :class:`dotcat.index.bm25.BM25Index`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dotcat.errors import DotcatError
from dotcat.index.bm25 import BM25Index
from dotcat.index.config import BM25Config
from dotcat.index.filtered import Admitted
from dotcat.options import RUN_K
from dotcat.progress import progress_bar
from dotcat.search.aggregation import Match, rank_documents, resolve
from dotcat.search.feedback import RM3, RM3Expander, rm3_of, rm3_search
from dotcat.types import Run

__all__ = ["BM25Stage", "bm25_search", "load_bm25"]

#: Queries ranked from their passages per call of :func:`rank_documents` (a progress step).
_QUERIES_PER_STEP = 256


def load_bm25(index_dir: Path, index: Any) -> BM25Index | None:
    """The BM25 index inside an index directory (memory-mapped), or None; refused when it
    does not hold the dense index's rows."""
    entry = index.manifest.bm25
    if not entry:
        return None
    bm25 = BM25Index.load(index_dir / entry["dir"], mmap=True, search_only=True)
    # Its rows: the passages (FAISS's vectors), or the documents whole (an index without
    # passages, or one splitting only its longest documents).
    rows = len(index) if "passages" in entry else index.document_count
    if len(bm25) != rows:
        raise DotcatError(
            f"{index_dir}: BM25 index holds {len(bm25)} documents, the dense index "
            f"{rows}; rebuild the index"
        )
    return bm25


@dataclass(frozen=True)
class BM25Stage:
    """The ``bm25`` first stage over an index directory's BM25 index.

    Attributes:
        bm25: the BM25 index (memory-mapped).
        index: the open index (where passages lie, how many documents it holds).
        passages: whether the BM25 rows are passages (an index built with passages).
        aggregation, aggregate_top: how documents are ranked from their passages.
        rm3: RM3 over ``bm25`` (:meth:`with_feedback`), or None.
    """

    bm25: BM25Index
    index: Any
    passages: bool
    aggregation: str
    aggregate_top: int
    rm3: RM3Expander | None = None
    name: str = "bm25"
    score_kind: str = "bm25"

    @classmethod
    def create(cls, context) -> BM25Stage:
        """The stage over a :class:`~dotcat.search.stages.StageContext`'s BM25 index, with the
        RM3 feedback its settings ask for."""
        entry, config = context.manifest.bm25, context.config
        stage = cls(
            context.bm25, context.index, bool(entry and "passages" in entry),
            config.aggregation, config.aggregate_top,
        )  # fmt: skip
        return stage.with_feedback(rm3_of(config))

    def with_feedback(self, rm3: RM3 | None) -> BM25Stage:
        """This stage wrapped in RM3 feedback (None: as it is)."""
        return self if rm3 is None else replace(self, rm3=RM3Expander(self.bm25, rm3))

    def search(
        self,
        queries: Mapping[str, str],
        k: int,
        *,
        show_progress: bool = False,
        admitted: Admitted | None = None,
    ) -> dict[str, list[Match]]:
        """Each query's top ``k`` documents: ranked from its passages (an index with passages), or
        BM25's own document ranking (each document matched whole). With RM3, each query is expanded
        once from its top rows (passages, on an index with passages) and the expanded query ranks
        the rows, as the plain one would. With ``admitted``, only the rows of a filter's documents
        are ranked (and fed back): their score arrays masked, the statistics the index's."""
        if not self.passages:
            mask = None if admitted is None else admitted.document_mask
            run = (self.rm3 or self.bm25).search(queries, k, show_progress=show_progress, mask=mask)
            return {q: [Match.whole(d, s) for d, s in docs] for q, docs in run.items()}
        expanded: dict[str, dict[int, float]] = {}
        mask = None if admitted is None else admitted.mask

        def rows(qid: str, n: int) -> list[tuple[str, float]]:
            if self.rm3 is None:
                return self.bm25.search_one(queries[qid], n, mask)
            if qid not in expanded:  # the over-fetch asks again for more: expand once
                expanded[qid] = self.rm3.expand(queries[qid], mask)
            return self.rm3.search_expanded(expanded[qid], n, mask)

        return self.rank(rows, list(queries), k, admitted, show_progress)

    def rank(
        self,
        rows: Callable[[str, int], list[tuple[str, float]]],
        qids: list[str],
        k: int,
        admitted: Admitted | None = None,
        show_progress: bool = False,
    ) -> dict[str, list[Match]]:
        """Each query's top ``k`` documents from its top rows (``rows(qid, n)``: the top ``n``
        ``(row name, score)``, of the rows a filter ``admitted`` where given): ranked from its
        passages (an index with passages: rows named by their FAISS ids), or the rows
        themselves (each document matched whole)."""
        if not self.passages:
            return {q: [Match.whole(d, s) for d, s in rows(q, k)] for q in qids}
        if admitted is not None and admitted.vectors == 0:
            return {q: [] for q in qids}

        def search(chunk: list[str], n: int) -> dict[str, list[tuple[int, float]]]:
            return {q: [(int(i), s) for i, s in rows(q, n)] for q in chunk}

        out: dict[str, list[Match]] = {}
        with progress_bar(
            total=len(qids), desc="BM25 search", unit="query", enabled=show_progress
        ) as bar:
            for start in range(0, len(qids), _QUERIES_PER_STEP):
                chunk = qids[start : start + _QUERIES_PER_STEP]
                out.update(
                    rank_documents(
                        search, self.index.locate, chunk, k,
                        vectors=len(self.bm25) if admitted is None else admitted.vectors,
                        documents=self.index.document_count if admitted is None
                        else admitted.documents,
                        method=resolve(self.aggregation, self.index.passages),
                        top=self.aggregate_top,
                    )
                )  # fmt: skip
                bar.update(len(chunk))
        return out


def bm25_search(
    corpus: Iterable[Any],
    queries: Mapping[str, str],
    k: int = RUN_K,
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
