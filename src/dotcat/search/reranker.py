"""Second stage: re-rank a first stage's top-k with BERT_CAT.

``rerank`` = :func:`score_candidates` (the cross-encoder's logit for each of a query's top
``depth`` documents) then :func:`fuse` (order by that logit, or by an interpolation of the min-max
normalised first-stage and cross-encoder scores). Documents below ``depth`` keep their first-stage
order underneath the re-ranked ones, so R@100 of a depth-20 re-ranking is the first stage's.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dotcat.data.corpus import iter_document_fields
from dotcat.data.index_source import corpus_shas
from dotcat.data.runs import ranked
from dotcat.errors import DotcatError
from dotcat.files import read_json_or_none
from dotcat.index import document_text
from dotcat.models.config import CrossEncoderConfig
from dotcat.models.resolve import TRAINING_RECORD, check_model
from dotcat.models.st_config import interpolation_source
from dotcat.options import RERANK_DEPTH
from dotcat.search.aggregation import Match, to_run
from dotcat.search.config import parse_interpolate
from dotcat.types import Run, RunLike

if TYPE_CHECKING:  # loaded only where a pipeline re-ranks: PyTorch takes seconds to import
    from dotcat.models.cross_encoder import CrossEncoder

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

    ``corpus``: a ``datasets.Dataset`` from :func:`dotcat.data.corpus.load_corpus` (read in Arrow
    batches) or any iterable of documents with ``id``, ``title``, ``text``.
    """
    fields = iter_document_fields(corpus, batch_size=10_000)
    return {i: document_text(title, text) for i, title, text in fields if i in ids}


def score_candidates(
    run: RunLike,
    queries: Mapping[str, str],
    doc_texts: Mapping[str, str],
    cross_encoder: CrossEncoder,
    depth: int = RERANK_DEPTH,
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
    depth: int = RERANK_DEPTH,
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


def _corpus_alpha(weights: Mapping[str, Any] | None, fingerprint: str) -> float | None:
    """The weight ``dotcat calibrate`` recorded in an index manifest for this model, if any."""
    entry = (weights or {}).get(fingerprint)
    if entry is None:
        return None
    try:
        return parse_interpolate(entry["alpha"])
    except (DotcatError, KeyError, TypeError):
        raise DotcatError(
            f"index manifest: the re-ranking weight recorded for model {fingerprint[:12]} is "
            f"unreadable ({entry!r}); run `dotcat calibrate` again"
        ) from None


class Reranker:
    """The second stage: a BERT_CAT cross-encoder, its depth and its interpolation weight.

    Args:
        cross_encoder: a loaded :class:`dotcat.models.cross_encoder.CrossEncoder` with a
            trained head.
        depth: how many results per query it re-ranks.
        interpolate: see :class:`PipelineConfig`.
        corpus_weights: the index manifest's ``rerank`` entries (weights chosen on its corpus,
            keyed by cross-encoder fingerprint).
    """

    def __init__(
        self,
        cross_encoder: Any,
        depth: int = RERANK_DEPTH,
        interpolate: str | float = "auto",
        corpus_weights: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        cross_encoder.require_trained()
        self.cross_encoder = cross_encoder
        self.depth = depth
        # The weight: given > chosen on this corpus (dotcat calibrate) > chosen on the
        # model's dev split > 1 (the plain logit).
        corpus = _corpus_alpha(corpus_weights, cross_encoder.fingerprint)
        weights = (
            ("given", parse_interpolate(interpolate)),
            ("corpus-chosen", corpus),
            (interpolation_source(cross_encoder.path), cross_encoder.interpolation_alpha),
            ("plain", 1.0),
        )
        self.alpha_source, alpha = next((s, a) for s, a in weights if a is not None)
        self.alpha = float(alpha)

    @classmethod
    def load(
        cls,
        model: str,
        depth: int = RERANK_DEPTH,
        interpolate: str | float = "auto",
        *,
        device: str = "auto",
        precision: str = "auto",
        backend: str = "auto",
        batch_size: int = 32,
        corpus_weights: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Reranker:
        # Refused before loading: a bi-encoder would get an untrained head (and transformers
        # would print its load report first).
        check_model(model, cross_encoder=True)
        from dotcat.models.cross_encoder import CrossEncoder
        from dotcat.models.runtime import store_linear_weights

        config = CrossEncoderConfig(
            model=model, device=device, precision=precision, backend=backend, batch_size=batch_size
        )
        cross_encoder = CrossEncoder.load(config)
        # Loaded here for inference only: its linear weights cast once, not on every call.
        store_linear_weights(cross_encoder.model, cross_encoder.autocast_dtype)
        return cls(cross_encoder, depth, interpolate, corpus_weights)

    @classmethod
    def from_config(
        cls, config: Any, corpus_weights: Mapping[str, Mapping[str, Any]] | None = None
    ) -> Reranker:
        """The re-ranker a :class:`~dotcat.search.config.PipelineConfig` names, loaded."""
        return cls.load(
            config.rerank, config.depth, config.interpolate, device=config.device,
            precision=config.precision, backend=config.rerank_backend,
            batch_size=config.batch_size, corpus_weights=corpus_weights,
        )  # fmt: skip

    def rerank(
        self,
        run: Mapping[str, Sequence[tuple[str, float]]],
        queries: Mapping[str, str],
        texts: Mapping[str, str],
        depth: int | None = None,
        show_progress: bool = False,
        pair_texts: Mapping[tuple[str, str], Sequence[str]] | None = None,
    ) -> Run:
        """Each query's top ``depth`` re-ordered; the rest keeps its first-stage order below.

        ``pair_texts``: ``(qid, doc id)`` -> the passages the cross-encoder reads of that document
        for that query instead of its text (see :func:`dotcat.search.reranker.score_candidates`).

        At weight 0 (``dotcat calibrate`` found that the cross-encoder does not help on this
        corpus) the first stage's ranking is the answer, and the cross-encoder is not run.
        """
        if self.alpha == 0.0:
            return {q: list(docs) for q, docs in run.items()}
        return rerank(run, queries, texts, self.cross_encoder, depth or self.depth, self.alpha,
                      show_progress=show_progress, pair_texts=pair_texts)  # fmt: skip

    def rerank_matches(
        self,
        found: Mapping[str, Sequence[Match]],
        queries: Mapping[str, str],
        depth: int,
        texts: Callable[[Mapping[str, Sequence[Match]], int], Mapping[tuple[str, str], Any]],
        show_progress: bool = False,
    ) -> dict[str, list[Match]]:
        """The later stage over a first stage's matches: each query's top ``depth`` re-ordered
        (:meth:`rerank`), every match keeping the passages that matched it.

        Args:
            texts: ``texts(found, depth)``: ``(qid, doc id)`` -> what the cross-encoder reads
                of each head document (its best passages, or its text).
        """
        if self.alpha == 0.0:  # the first stage's ranking is the answer
            return {q: list(docs) for q, docs in found.items()}
        by_id = {q: {m.doc_id: m for m in ms} for q, ms in found.items()}  # ties as rerank reads
        found = {q: [by_id[q][d] for d, _ in run] for q, run in ranked(to_run(found)).items()}
        reranked = self.rerank(
            to_run(found), queries, {}, depth, show_progress, pair_texts=texts(found, depth)
        )
        passages = {q: {m.doc_id: m.passages for m in found[q]} for q in reranked}
        return {q: [Match(d, s, passages[q][d]) for d, s in docs] for q, docs in reranked.items()}

    def describe(self) -> dict[str, Any]:
        return {
            **self.cross_encoder.describe(),
            "depth": self.depth,
            "interpolation": self.alpha,
            "interpolation_source": self.alpha_source,
        }


def candidate_texts(
    index: Any, found: Mapping[str, Sequence[Match]], depth: int, passages: int
) -> dict[tuple[str, str], list[str]]:
    """``(qid, doc id)`` -> what the cross-encoder reads of each of a query's top ``depth``
    documents: its best ``passages`` passages (title and passage text, from ``index``'s doc
    store), or its whole text (a document matched whole)."""
    wanted = {
        (qid, match.doc_id): [ref for ref, _ in match.passages[:passages]]
        for qid, matches in found.items()
        for match in matches[:depth]
    }
    refs = [ref for group in wanted.values() for ref in group]
    stored = index.store.by_ids(sorted({r.doc_id for r in refs if r.stop is None}))
    whole = {doc_id: document_text(d.title, d.text) for doc_id, d in stored.items()}
    parts = index.passage_texts([r for r in refs if r.stop is not None])
    return {
        key: [whole[r.doc_id] if r.stop is None else parts[r.pid] for r in group]
        for key, group in wanted.items()
    }


def advise_calibration(reranker: Reranker, manifest: Any, index_dir: Path, stage: str) -> None:
    """Warn where a weight may not suit a search of first stage ``stage``: one ``dotcat
    calibrate`` chose for another first stage or depth, or a dev-chosen one on a corpus the
    cross-encoder was not trained on (out of domain it re-ranked below its first stage)."""
    if reranker.alpha_source == "corpus-chosen":
        chosen, now = manifest.rerank[reranker.cross_encoder.fingerprint], (stage, reranker.depth)
        if (chosen["first_stage"], chosen["depth"]) != now:
            logger.warning(
                "the interpolation weight %g was chosen re-ranking %s at depth %d, not %s at "
                "depth %d: `dotcat calibrate %s --rerank %s --first-stage %s --depth %d` chooses "
                "one for it", reranker.alpha, chosen["first_stage"], chosen["depth"], *now,
                index_dir, reranker.cross_encoder.path, *now)  # fmt: skip
    if reranker.alpha_source != "dev-chosen":
        return
    record = read_json_or_none(Path(reranker.cross_encoder.path) / TRAINING_RECORD)
    try:
        data = record["data"]
        trained_on = {data["sha256"]["corpus"], data.get("source_corpus_sha256")} - {None}
    except (TypeError, KeyError):  # not trained by dotcat, or an older record
        return
    if trained_on and not trained_on & set(corpus_shas(manifest.corpus)):
        logger.warning(
            "%s was trained on another corpus: its dev-chosen interpolation weight %g may "
            "not suit this one; `dotcat calibrate %s --rerank %s` chooses one on it",
            reranker.cross_encoder.path, reranker.alpha, index_dir, reranker.cross_encoder.path,
        )  # fmt: skip
