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
..., 1 is judged by nDCG@10 against the known answers. The best weight is kept if a paired
t-test says it beats the first stage alone on them (p < 0.05), else 0: a re-ranker the corpus
cannot vouch for is not trusted. It is recorded in the index manifest under the
cross-encoder's weights fingerprint, and ``interpolate="auto"`` follows it
before the model's dev weight (:class:`dotcat.search.reranker.Reranker`). Ties go to the
smaller weight: where the corpus cannot tell, trust the first stage.

Measured: two SciFact-trained BERT_CATs whose SciFact
dev weights made the pipeline lose up to 0.15 nDCG@10 to its first stage on two collections
they never saw are calibrated there to no loss (the guard falls back to the first stage where
the re-ranker cannot show a gain on the corpus's own pseudo-queries).
"""

from __future__ import annotations

import heapq
import logging
import tempfile
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dotcat.data.corpus import Document
from dotcat.data.pseudo import PseudoQueries, pseudo_queries, write_pseudo_dataset
from dotcat.data.splits import unit_hash
from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate
from dotcat.evaluation.significance import ttest_pvalue
from dotcat.index import IndexConfig, build_index
from dotcat.index.manifest import update_manifest
from dotcat.index.passages import PassageConfig
from dotcat.search.aggregation import to_run
from dotcat.search.config import CalibrationConfig
from dotcat.search.fusion import WEIGHTS as FUSION_WEIGHTS
from dotcat.search.pipeline import SearchPipeline
from dotcat.search.reranker import fuse, score_candidates
from dotcat.types import Qrels, Run

logger = logging.getLogger(__name__)

#: The interpolation weights judged (0: the first stage alone, 1: the plain logit): the same
#: grid as the hybrid fusion's.
WEIGHTS = FUSION_WEIGHTS
MEASURE = "nDCG@10"
#: Fewer pseudo-queries than this cannot tell weights apart.
MIN_QUERIES = 20
#: The guard: a weight above 0 is kept only if it beats the first stage alone on the
#: pseudo-queries with a paired t-test p-value below this; else the first stage is kept.
SIGNIFICANCE = 0.05


@dataclass
class CorpusWeight:
    """The interpolation weight a corpus chose for one cross-encoder, and how.

    Attributes:
        alpha: the chosen weight of the cross-encoder: ``best``, or 0 where ``best`` did
            not beat the first stage significantly (``p_value`` >= :data:`SIGNIFICANCE`).
        best: the weight with the best nDCG@10 on the pseudo-queries.
        p_value: paired t-test of ``best`` against the first stage alone (None: best is 0).
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
    p_value: float | None = None
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


def choose_alpha(scores: dict[float, float]) -> float:
    """The best-scoring weight; ties go to the smaller one (more first stage)."""
    return max(scores, key=lambda a: (round(scores[a], 6), -a))


def guarded_alpha(per_query: dict[float, dict[str, float]]) -> tuple[float, float, float | None]:
    """``(alpha, best, p)``: the best weight by mean nDCG@10 (:func:`choose_alpha`), kept only
    where a paired t-test over the queries says it beats weight 0 (the first stage alone) at p <
    :data:`SIGNIFICANCE`; else 0. A re-ranker the corpus cannot vouch for is not trusted: with flat
    curves the best weight is noise (as measured on two collections the models never saw)."""
    means = {a: sum(v.values()) / len(v) for a, v in per_query.items()}
    best = choose_alpha(means)
    if best == 0.0:
        return 0.0, best, None
    queries = sorted(per_query[0.0])
    chosen = [per_query[best][q] for q in queries]
    first = [per_query[0.0][q] for q in queries]
    _, p = ttest_pvalue(first, chosen)  # identical scores: p = 1, no evidence either way
    return (best if p < SIGNIFICANCE else 0.0), best, p


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
    build_index(
        data / "corpus.jsonl",
        index_dir,
        pipeline.encoder,
        IndexConfig(
            device=pipeline.config.device,
            bm25=pipeline.bm25 is not None,
            passages=PassageConfig.from_manifest(pipeline.manifest.passages),
        ),
        show_progress=show_progress,
    )
    config = replace(
        pipeline.config.first_stage_only(),
        first_stage=pipeline.first_stage,
        fusion=pipeline.fusion.method,
        fusion_weight=pipeline.fusion.weight if pipeline.fusion.method == "linear" else None,
    )
    queries = {qid: text for qid, text, _ in pseudo.queries}
    pseudo_pipeline = SearchPipeline(index_dir, config)
    found = pseudo_pipeline.matches(queries, k, show_progress=show_progress)
    return to_run(found), pseudo_pipeline.candidate_texts(found, k)


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
        DotcatError: no cross-encoder, or fewer than :data:`MIN_QUERIES` pseudo-queries.
    """
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
    scores = {a: sum(v.values()) / len(v) for a, v in per_query.items()}
    alpha, best, p = guarded_alpha(per_query)
    ce = reranker.cross_encoder
    logger.info(
        "calibration on %d pseudo-queries: alpha %.1f (best %.1f, p %s; %s %.4f, first stage "
        "%.4f, plain %.4f)",
        len(topics), alpha, best, p, MEASURE, scores[best], scores[0.0], scores[1.0],
    )  # fmt: skip
    return CorpusWeight(
        alpha=alpha,
        model=str(ce.path),
        fingerprint=ce.fingerprint,
        depth=depth,
        first_stage=pipeline.first_stage,
        queries=len(topics),
        documents=len(docs),
        seed=seed,
        scores={str(a): round(s, 6) for a, s in scores.items()},
        best=best,
        p_value=None if p is None else round(p, 6),
        pseudo={k: v for k, v in pseudo.summary().items() if k != "queries"},
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
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
