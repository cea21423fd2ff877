"""A re-ranker's interpolation weight chosen for one corpus, from the corpus alone.

``dotcat train cat`` records the weight ``alpha`` of ``alpha * norm(cat) + (1 - alpha) *
norm(first)`` (:func:`dotcat.search.reranker.fuse`) that its dev split likes best, and every corpus
then gets that weight. A cross-encoder trained on one collection can rank another one worse than the
first stage it re-ranks; with the training data's weight the pipeline then loses to its own first
stage (measured: every fusion and depth chosen on SciFact dev lost on both collections the
models never saw).

:func:`calibrate_reranker` asks the corpus instead, without labels. It draws pseudo-queries
from the index's documents (:mod:`dotcat.data.pseudo`: a title, or a sentence cut out of its
document, the inverse cloze task of Lee et al., ACL 2019), each with one known answer: the
document it came from, without that title or sentence. A small index of those documents is
built with the index's own encoder, passage settings, BM25 and fusion settings; the pipeline's
first stage ranks it for each pseudo-query; the cross-encoder scores each top ``depth`` (a long
document by its best passages, as the pipeline re-ranks it); and ``alpha`` in 0, 0.1,
..., 1 is judged by nDCG@10 against the known answers, and chosen by the paired
one-standard-error rule (:func:`dotcat.evaluation.choice.choose`) with :data:`PSEUDO_PRIOR` (0.2) as
the prior default: kept unless the best weight beats it by more than a standard error of
their per-query differences, else the weight nearest it among those within a standard error
of the best (a re-ranker the pseudo-queries show to hurt is weighted down, to 0 at the least).
It is recorded in the index manifest under the cross-encoder's weights fingerprint, with the curve,
the tied weights and the reason, and ``interpolate="auto"`` follows it before the model's dev
weight (:class:`dotcat.search.reranker.Reranker`).

Measured with the guard of before (the best weight kept where a paired t-test against the first
stage gave p < 0.05): two SciFact-trained BERT_CATs whose SciFact dev weights made the pipeline lose
up to 0.15 nDCG@10 to its first stage on two collections they never saw are calibrated there to no
loss. With prior 0.2 a weak one can keep a little weight where the pseudo-queries cannot tell (one
lost 0.0135 on debian at its chosen 0.2; ``eval/studies/cat_corpus_weight``).
"""

from __future__ import annotations

import heapq
import logging
import tempfile
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dotcat.data.corpus import Document
from dotcat.data.pseudo import PseudoQueries, pseudo_queries, write_pseudo_dataset
from dotcat.data.splits import unit_hash
from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate
from dotcat.evaluation.choice import MIN_QUERIES, choose
from dotcat.index import IndexConfig, build_index
from dotcat.index.manifest import update_manifest
from dotcat.index.passages import PassageConfig
from dotcat.search.aggregation import to_run
from dotcat.search.config import CalibrationConfig
from dotcat.search.fusion import WEIGHTS as FUSION_WEIGHTS
from dotcat.search.pipeline import SearchPipeline
from dotcat.search.reranker import fuse, score_candidates
from dotcat.search.stages import entry
from dotcat.types import Qrels, Run

logger = logging.getLogger(__name__)

#: The interpolation weights judged (0: the first stage alone, 1: the plain logit): the same
#: grid as the hybrid fusion's.
WEIGHTS = FUSION_WEIGHTS
MEASURE = "nDCG@10"
#: The prior default: a little of the re-ranker. Chosen on the real dev queries of six
#: collections (``eval/studies/choices``), each judging the weight chosen on its pseudo-queries
#: with priors 0, 0.1, ..., 0.5: 0.2 was the best on the mean (+0.0024 nDCG@10 over 0, the first
#: stage alone, the prior before; its worst collection -0.0073 against argmax, 0's -0.0171).
PSEUDO_PRIOR = 0.2


@dataclass
class CorpusWeight:
    """The interpolation weight a corpus chose for one cross-encoder, and how.

    Attributes:
        alpha: the chosen weight of the cross-encoder (:func:`dotcat.evaluation.choice.choose`).
        best: the weight with the best nDCG@10 on the pseudo-queries.
        choice: the rule's record (:meth:`~dotcat.evaluation.choice.Choice.to_json`: the
            standard errors, the tied weights, the reason).
        model: the cross-encoder (path or name) and ``fingerprint``, its weights' sha256.
        depth: documents re-ranked per pseudo-query.
        first_stage: the first stage re-ranked (``dense``, ``bm25`` or ``hybrid``).
        queries, documents: pseudo-queries asked, documents of the sample they were asked on.
        scores: ``str(alpha) -> nDCG@10`` over the pseudo-queries.
        pseudo: where the pseudo-queries came from (titles, cut sentences...).
    """

    alpha: float
    model: str
    fingerprint: str
    depth: int
    first_stage: str
    queries: int
    documents: int
    seed: int
    scores: dict[str, float]
    best: float | None = None
    choice: dict[str, Any] = field(default_factory=dict)
    pseudo: dict[str, int] = field(default_factory=dict)
    measure: str = MEASURE
    created: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def sample_documents(pipeline: SearchPipeline, max_documents: int, seed: int) -> list[Document]:
    """At most ``max_documents`` of the index's documents, drawn by a hash of their ids (the
    same sample on every machine; a larger cap keeps every document a smaller one kept)."""
    rows = (
        Document(doc_id, title, text)
        for batch in pipeline.index.store.iter_rows()
        for _, doc_id, title, text in batch
    )
    # Streamed: only the sample is ever held in memory, whatever the corpus's size.
    return heapq.nsmallest(max_documents, rows, key=lambda d: unit_hash(seed, "calibrate", d.id))


def pseudo_first_stage(
    pipeline: SearchPipeline, pseudo: PseudoQueries, k: int, work: Path, show_progress: bool
) -> tuple[Run, dict[tuple[str, str], list[str]]]:
    """The pipeline's first stage over an index of the pseudo corpus (built in ``work`` with
    the pipeline's encoder, its index's passage settings, BM25 when the pipeline has it, and
    its fusion and aggregation): the run, and what the cross-encoder reads of each of its top
    ``k`` documents (their best passages, as the pipeline re-ranks them)."""
    data = write_pseudo_dataset(pseudo, work / "data")
    index_dir = work / "index"
    # The loaded query encoder encodes the documents too: same weights, precision, runtime.
    passages = PassageConfig.from_manifest(pipeline.manifest.passages)
    settings = IndexConfig(device=pipeline.config.device, bm25=pipeline.bm25 is not None,
                           passages=passages)  # fmt: skip
    build_index(
        data / "corpus.jsonl", index_dir, pipeline.encoder, settings, show_progress=show_progress
    )
    linear = pipeline.fusion.method == "linear"
    fused = {"fusion": pipeline.fusion.method, "fusion_weight": pipeline.fusion.weight if linear
             else None} if len(entry(pipeline.first_stage).sides) > 1 else {}  # fmt: skip
    config = replace(pipeline.config.first_stage_only(), first_stage=pipeline.first_stage, **fused)
    queries = {qid: text for qid, text, _ in pseudo.queries}
    pseudo_pipeline = SearchPipeline(index_dir, config)
    found = pseudo_pipeline.matches(queries, k, show_progress=show_progress)
    return to_run(found), pseudo_pipeline.candidate_texts(found, k)


@dataclass
class PseudoScores:
    """What the pseudo-queries said: ``per_query`` (weight -> pseudo-query -> nDCG@10), the
    sample of ``documents`` they search, and the queries (``pseudo``)."""

    per_query: dict[float, dict[str, float]]
    documents: int
    pseudo: PseudoQueries
    depth: int


def pseudo_scores(
    pipeline: SearchPipeline,
    queries: int = 200,
    max_documents: int = 10_000,
    seed: int = 0,
    show_progress: bool = True,
) -> PseudoScores:
    """nDCG@10 of every weight of :data:`WEIGHTS` on each pseudo-query of the index's corpus
    (the arguments as :func:`calibrate_reranker`'s)."""
    CalibrationConfig(queries=queries, documents=max_documents, seed=seed).validate()
    reranker = pipeline.reranker
    if reranker is None:
        raise DotcatError("calibration needs a cross-encoder to re-rank with (--rerank MODEL)")
    docs = sample_documents(pipeline, max_documents, seed)
    pseudo = pseudo_queries(docs, max_queries=queries, seed=seed)
    if len(pseudo.queries) < MIN_QUERIES:
        raise DotcatError(
            f"{pipeline.index_dir}: only {len(pseudo.queries)} pseudo-queries from "
            f"{len(docs)} documents (at least {MIN_QUERIES} needed): calibration asks a "
            "document's title (3 words or more) or a sentence cut from its text (2 sentences "
            f"or more, 20 words left); {pseudo.too_short} documents had neither"
        )
    depth = reranker.depth
    with tempfile.TemporaryDirectory(prefix="dotcat-calibrate-") as work:
        run, texts = pseudo_first_stage(pipeline, pseudo, depth, Path(work), show_progress)
    topics = {qid: text for qid, text, _ in pseudo.queries}
    candidates = score_candidates(
        run, topics, {}, reranker.cross_encoder, depth, show_progress=show_progress,
        pair_texts=texts,
    )  # fmt: skip
    qrels = {qid: {doc: 1} for qid, _, doc in pseudo.queries}
    per_query = {a: _per_query(fuse(candidates, a), qrels) for a in WEIGHTS}
    return PseudoScores(per_query, len(docs), pseudo, depth)


def calibrate_reranker(
    pipeline: SearchPipeline,
    queries: int = 200,
    max_documents: int = 10_000,
    seed: int = 0,
    show_progress: bool = True,
) -> CorpusWeight:
    """Choose the re-ranker's interpolation weight on pseudo-queries of the index's corpus.

    Args:
        pipeline: a pipeline with a cross-encoder (``PipelineConfig.rerank``); its first stage
            and depth are the ones judged.
        queries: pseudo-queries to ask (fewer when the sample has fewer).
        max_documents: the sample of documents the pseudo-queries search; a corpus this size
            or smaller is used whole.
        seed: changes the sample, the cut sentences and the drawn queries.

    Raises:
        DotcatError: no cross-encoder, or fewer than
            :data:`~dotcat.evaluation.choice.MIN_QUERIES` pseudo-queries.
    """
    found = pseudo_scores(pipeline, queries, max_documents, seed, show_progress)
    choice = choose(found.per_query, PSEUDO_PRIOR, WEIGHTS)
    scores = choice.means
    ce = pipeline.reranker.cross_encoder
    logger.info(
        "calibration on %d pseudo-queries, %s: %s", choice.queries, MEASURE,
        ", ".join(f"{a:g} {s:.4f}" for a, s in scores.items()),
    )  # fmt: skip
    logger.info("calibration: weight %g; %s", choice.chosen, choice.reason)
    return CorpusWeight(
        alpha=choice.chosen,
        model=str(ce.path),
        fingerprint=ce.fingerprint,
        depth=found.depth,
        first_stage=pipeline.first_stage,
        queries=choice.queries,
        documents=found.documents,
        seed=seed,
        scores={str(a): round(s, 6) for a, s in scores.items()},
        best=choice.best,
        choice=choice.to_json(),
        pseudo={k: v for k, v in found.pseudo.summary().items() if k != "queries"},
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def _per_query(run: Run, qrels: Qrels) -> dict[str, float]:
    """qid -> :data:`MEASURE` of ``run``."""
    report = evaluate(run, qrels, measures=[MEASURE])
    return {q: values[MEASURE] for q, values in report.per_query.items()}


def record_corpus_weight(index_dir: str | Path, weight: CorpusWeight) -> None:
    """Add ``weight`` to the index manifest's ``rerank`` entries (keyed by the cross-encoder's
    fingerprint; a new calibration of the same model replaces the old one), atomically."""

    def add(manifest) -> None:
        manifest.rerank = {**(manifest.rerank or {}), weight.fingerprint: weight.to_json()}

    update_manifest(index_dir, add)
