"""Second stage: re-rank a first stage's top-k with BERT_CAT.

``rerank`` = :func:`score_candidates` (the cross-encoder's logit for each of a query's top
``depth`` documents) then :func:`fuse` (order by that logit, or by an interpolation of the
min-max normalised first-stage and cross-encoder scores). Documents below ``depth`` keep their
first-stage order underneath the re-ranked ones, so R@100 of a depth-20 re-ranking is the
first stage's.

Interpolation (``alpha`` in [0, 1]) follows the usual hybrid re-ranking recipe
(e.g. Pyserini's and Nogueira et al.'s score fusion)::

    s(q, d) = alpha * norm(s_cat(q, d)) + (1 - alpha) * norm(s_first(q, d))

with ``norm`` the min-max normalisation over the query's re-ranked documents; alpha = 1 is
the plain cross-encoder (dotcat's default), chosen on the dev split by ``dotcat train cat``.

A long document is re-ranked by its passages (:mod:`dotcat.index.passages`): the cross-encoder
reads the query with each of the passages the first stage found best in the document
(``pair_texts``), and the document takes the highest logit (MaxP, as Dai and Callan, SIGIR
2019, score a document by BERT). Without them it reads the document's text, cut at its window.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dotcat.data.corpus import document_fields
from dotcat.data.runs import ranked
from dotcat.errors import DotcatError
from dotcat.index import document_text
from dotcat.models.cross_encoder import CrossEncoder
from dotcat.types import Run, RunLike

logger = logging.getLogger(__name__)


@dataclass
class Candidates:
    """One query's first-stage list with the cross-encoder's logits for its head.

    Attributes:
        docs: document ids, first-stage order (best first), the whole list.
        first: first-stage scores, same order.
        cat: cross-encoder logits of ``docs[:len(cat)]`` (the re-ranked head).
    """

    docs: list[str]
    first: np.ndarray
    cat: np.ndarray

    def to_json(self) -> dict[str, list]:
        """JSON-ready lists (a training checkpoint keeps the best epoch's candidates)."""
        return {"docs": list(self.docs), "first": self.first.tolist(), "cat": self.cat.tolist()}

    @classmethod
    def from_json(cls, value: dict[str, list]) -> Candidates:
        return cls(
            docs=list(value["docs"]),
            first=np.asarray(value["first"], dtype=np.float64),
            cat=np.asarray(value["cat"], dtype=np.float32),
        )


def corpus_texts(corpus: Iterable, ids: set[str]) -> dict[str, str]:
    """id -> ``document_text(title, text)`` of the documents in ``ids``, in one corpus pass.

    ``corpus``: a ``datasets.Dataset`` from :func:`dotcat.data.load_corpus` (read in Arrow
    batches) or any iterable of documents with ``id``, ``title``, ``text``.
    """
    texts: dict[str, str] = {}
    if hasattr(corpus, "iter") and hasattr(corpus, "column_names"):
        for batch in corpus.iter(batch_size=10_000):
            for doc_id, title, text in zip(batch["id"], batch["title"], batch["text"], strict=True):
                if doc_id in ids:
                    texts[doc_id] = document_text(title or "", text or "")
        return texts
    for n, doc in enumerate(corpus, start=1):
        doc_id, title, text = document_fields(doc, n)
        if doc_id in ids:
            texts[doc_id] = document_text(title, text)
    return texts


def score_candidates(
    run: RunLike,
    queries: Mapping[str, str],
    doc_texts: Mapping[str, str],
    cross_encoder: CrossEncoder,
    depth: int = 100,
    *,
    show_progress: bool = False,
    pair_texts: Mapping[tuple[str, str], Sequence[str]] | None = None,
) -> dict[str, Candidates]:
    """Cross-encoder logits of every query's top-``depth`` documents, in one scoring call.

    All pairs of all queries go to :meth:`CrossEncoder.score` together, so they are sorted
    by length across queries (less padding) and every query is tokenized once.

    Args:
        doc_texts: id -> the text the cross-encoder reads of a document.
        pair_texts: ``(qid, doc id)`` -> the texts it reads instead for that query (a long
            document's best passages); the document's logit is their highest.

    Raises:
        DotcatError: ``depth`` < 1, a run query without text, or a document without text
            (naming the first few).
    """
    if depth < 1:
        raise DotcatError(f"re-ranking depth must be >= 1, got {depth}")
    lists = ranked(run)
    missing_q = [q for q in lists if q not in queries]
    if missing_q:
        raise DotcatError(
            f"{len(missing_q)} queries of the run have no text (e.g. {', '.join(missing_q[:5])})"
        )
    pair_q: list[str] = []
    pair_d: list[str] = []
    group: list[int] = []  # the (query, document) each pair scores: 0, 1, ... in run order
    scored = 0
    missing_d: set[str] = set()
    for qid, docs in lists.items():
        for doc, _ in docs[:depth]:
            texts = (pair_texts or {}).get((qid, doc))
            if not texts:
                text = doc_texts.get(doc)
                if text is None:
                    missing_d.add(doc)
                    continue
                texts = [text]
            pair_q += [queries[qid]] * len(texts)
            pair_d += texts
            group += [scored] * len(texts)
            scored += 1
    if missing_d:
        examples = ", ".join(sorted(missing_d)[:5])
        raise DotcatError(f"{len(missing_d)} run documents are not in the corpus: {examples}")
    logits = _best_per_group(cross_encoder.score(pair_q, pair_d, show_progress=show_progress),
                             group)  # fmt: skip
    out: dict[str, Candidates] = {}
    start = 0
    for qid, docs in lists.items():
        head = min(depth, len(docs))
        out[qid] = Candidates(
            docs=[d for d, _ in docs],
            first=np.asarray([s for _, s in docs], dtype=np.float64),
            cat=logits[start : start + head].astype(np.float64),
        )
        start += head
    return out


def _best_per_group(logits: np.ndarray, group: list[int]) -> np.ndarray:
    """The highest logit of each group of consecutive pairs (a document's passages)."""
    logits = np.asarray(logits)
    if len(group) == 0 or group[-1] == len(group) - 1:  # one text per document
        return logits
    groups = np.asarray(group)
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    return np.maximum.reduceat(logits, starts)


def minmax(scores: np.ndarray) -> np.ndarray:
    """``(s - min) / (max - min)``; all zeros when the scores are all equal."""
    if len(scores) == 0:
        return scores
    low, high = float(scores.min()), float(scores.max())
    return (scores - low) / (high - low) if high > low else np.zeros_like(scores)


def fuse(candidates: Mapping[str, Candidates], alpha: float = 1.0) -> Run:
    """The re-ranked run: the head by ``alpha * norm(cat) + (1 - alpha) * norm(first)``.

    alpha = 1 orders the head by the raw logits (their values are the run's scores). The tail
    (below the re-ranked depth) keeps its first-stage order with scores below every head score.
    """
    if not 0.0 <= alpha <= 1.0:
        raise DotcatError(f"interpolation weight must be in [0, 1], got {alpha}")
    out: Run = {}
    for qid, c in candidates.items():
        head = len(c.cat)
        if alpha == 1.0:
            scores = c.cat
        else:
            scores = alpha * minmax(c.cat) + (1.0 - alpha) * minmax(c.first[:head])
        # Stable sort on -score: ties keep the first-stage order.
        order = np.argsort(-scores, kind="stable")
        ranking = [(c.docs[i], float(scores[i])) for i in order]
        floor = float(scores.min()) if head else 0.0
        ranking += [(doc, floor - 1.0 - i) for i, doc in enumerate(c.docs[head:])]
        out[qid] = ranking
    return out


def rerank(
    run: RunLike,
    queries: Mapping[str, str],
    doc_texts: Mapping[str, str],
    cross_encoder: CrossEncoder,
    depth: int = 100,
    alpha: float = 1.0,
    *,
    show_progress: bool = False,
    pair_texts: Mapping[tuple[str, str], Sequence[str]] | None = None,
) -> Run:
    """Re-rank each query's top-``depth`` (:func:`score_candidates` then :func:`fuse`)."""
    cross_encoder.require_trained()
    candidates = score_candidates(
        run, queries, doc_texts, cross_encoder, depth, show_progress=show_progress,
        pair_texts=pair_texts,
    )  # fmt: skip
    return fuse(candidates, alpha)
