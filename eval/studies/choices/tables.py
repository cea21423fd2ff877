"""Per-query scores of every grid point, computed once, for the choices study (``choices.py``).

Three kinds of table, each a gzipped JSON file under ``--work`` (default ``runs/choices``):

- ``fusion``: one index per collection and encoder (``dotcat index``'s defaults: BM25 beside,
  passages where the collection's documents are long, ``auto`` precision), then the dense and
  the BM25 top 100 of every judged query (every split) once, and nDCG@10 of every fusion of
  :func:`dotcat.search.fusion.fusion_grid` per query. A choice on any dev set is then
  arithmetic over the table, with no index rebuilt per seed.
- ``rerank``: SciFact with the trained BERT_CAT. Dev: the lists ``train cat`` chooses its
  interpolation weight on (the first ``--first-stage`` index's dense top 20 of the held-out
  dev queries, scored in the training's precision); test: the default pipeline's first stage
  (hybrid, the index's fusion) top 100 re-ranked at ``auto`` precision. nDCG@10 of every
  weight per query.
- ``calibrate``: per collection and calibration seed, the pseudo-queries ``dotcat calibrate``
  draws (nDCG@10 of every weight per pseudo-query), and the collection's test and dev queries
  re-ranked (the dev ones judge the calibration's prior), nDCG@10 of every weight per query.

Run from the repository root (see ``choices.py``).
"""

from __future__ import annotations

import gzip
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import numpy as np  # noqa: E402

import common  # noqa: E402
from dotcat.data.qrels import available_splits, load_qrels  # noqa: E402
from dotcat.data.queries import load_queries  # noqa: E402
from dotcat.data.splits import DEV_SEED, split_dev  # noqa: E402
from dotcat.evaluation import evaluate  # noqa: E402
from dotcat.index import IndexConfig, build_index  # noqa: E402
from dotcat.index.manifest import Manifest  # noqa: E402
from dotcat.models import EncoderConfig  # noqa: E402
from dotcat.options import FUSION_DEPTH, RERANK_DEPTH  # noqa: E402
from dotcat.search.fusion import Fusion, fusion_grid  # noqa: E402
from dotcat.search.pipeline import PipelineConfig, SearchPipeline  # noqa: E402

logger = logging.getLogger("choices")

MEASURE = "nDCG@10"
COLLECTIONS = common.COLLECTIONS


def save(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        json.dump(value, f)
    tmp.replace(path)


def load(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def judged(data: Path) -> tuple[dict[str, str], dict[str, dict], dict[str, list[str]]]:
    """Every judged query of every split: texts, qrels (all splits together), split -> ids."""
    texts = load_queries(data)
    qrels, splits = {}, {}
    for split in available_splits(data):
        split_qrels = {q: r for q, r in load_qrels(data, split=split).items() if q in texts}
        overlap = set(split_qrels) & set(qrels)
        if overlap:
            raise SystemExit(f"{data}: {len(overlap)} queries in two splits")
        qrels.update(split_qrels)
        splits[split] = sorted(split_qrels)
    return {q: texts[q] for q in qrels}, qrels, splits


def per_query(run, qrels) -> dict[str, float]:
    report = evaluate(run, qrels, measures=[MEASURE])
    return {q: round(v[MEASURE], 8) for q, v in report.per_query.items()}


def build(data: Path, model: str, out: Path, precision: str) -> float:
    """``dotcat index``'s build (no fusion tuning: the study does every choice itself)."""
    if (out / "manifest.json").is_file():
        return 0.0
    start = time.perf_counter()
    build_index(data, out, EncoderConfig(model=model, precision=precision), IndexConfig())
    return time.perf_counter() - start


def fusion_table(name: str, model_tag: str, model: str, work: Path, precision: str) -> Path:
    """The ``fusion`` table of one collection and encoder (built once; reused after)."""
    path = work / "tables" / f"fusion-{name}-{model_tag}.json.gz"
    if path.is_file():
        return path
    data = COLLECTIONS[name]
    index = work / "indexes" / f"{name}-{model_tag}"
    seconds = build(data, model, index, precision)
    texts, qrels, splits = judged(data)
    pipeline = SearchPipeline(index, PipelineConfig(first_stage="dense", precision=precision))
    dense = pipeline.run(texts, FUSION_DEPTH, first_stage="dense")
    bm25 = pipeline.run(texts, FUSION_DEPTH, first_stage="bm25")
    scores = {n: per_query(f.fuse_runs(dense, bm25), qrels) for n, f in fusion_grid().items()}
    manifest = Manifest.read(index)
    save(path, {
        "collection": name, "model": model_tag, "encoder": manifest.encoder.get("name"),
        "precision": manifest.encoder.get("precision"), "passages": bool(manifest.passages),
        "index": common.shown(index), "build_seconds": round(seconds, 1), "splits": splits,
        "scores": scores,
    })  # fmt: skip
    logger.info("%s: %d queries, %d points", path.name, len(qrels), len(scores))
    return path


# -- the re-ranker ------------------------------------------------------------------------


def rerank_table(work: Path, index: Path, cat: Path, fusions: dict[str, Fusion]) -> Path:
    """The ``rerank`` table: SciFact, ``train cat``'s dev lists and the pipeline's test lists.

    ``fusions``: name -> the hybrid fusion of the test first stage (one column set each)."""
    path = work / "tables" / f"rerank-scifact-{cat.name}.json.gz"
    if path.is_file():
        return path
    import torch

    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
    from dotcat.search.reranker import corpus_texts, fuse, score_candidates
    from dotcat.training.data.examples import load_training_data
    from dotcat.training.data.pools import first_stage_run

    data = common.SCIFACT
    training = json.loads(common.training_record_path(cat).read_text())
    config = training["hyperparameters"]
    dev_depth = config["dev_depth"]
    train = load_training_data(data, "train", None, None)
    _, dev_ids = split_dev(list(train.queries), config["dev_fraction"], DEV_SEED)
    dev_queries = {q: train.queries[q] for q in dev_ids}
    dev_qrels = {q: train.qrels[q] for q in dev_ids}
    # train cat's dev check: its first first stage's top dev_depth, its doc texts, bf16 autocast.
    first = first_stage_run(config["first_stages"][0], train, dev_queries, dev_depth)
    doc_texts = corpus_texts(train.corpus, {d for docs in first.values() for d, _ in docs})
    trained = CrossEncoder.load(CrossEncoderConfig(model=str(cat), precision="fp32"))
    trained.autocast_dtype = torch.bfloat16 if training.get("bf16") else None
    dev = score_candidates(first, dev_queries, doc_texts, trained, dev_depth, show_progress=True)
    alphas = [round(a / 10, 1) for a in range(11)]
    table = {"dev": {str(a): per_query(fuse(dev, a), dev_qrels) for a in alphas}, "test": {}}
    test_texts = load_queries(data, split="test")
    test_qrels = load_qrels(data, split="test")
    for name, candidates in _pipeline_candidates(index, cat, fusions, test_texts).items():
        table["test"][name] = {str(a): per_query(fuse(candidates, a), test_qrels) for a in alphas}
    table.update({"dev_depth": dev_depth, "test_depth": RERANK_DEPTH, "model": str(cat)})
    save(path, table)
    return path


def _pipeline_candidates(
    index: Path, cat: Path, fusions: dict[str, Fusion], queries: dict[str, str]
) -> dict:
    """Each fusion's default pipeline: its top :data:`RERANK_DEPTH` with the cross-encoder's
    logits, every (query, document) pair the fusions share scored once."""
    from dotcat.search.aggregation import to_run
    from dotcat.search.reranker import Candidates, score_candidates

    lists, union, texts = {}, {}, {}
    for name, fusion in fusions.items():
        config = PipelineConfig(
            rerank=str(cat), fusion=fusion.method,
            fusion_weight=fusion.weight if fusion.method == "linear" else None,
        )  # fmt: skip
        pipeline = SearchPipeline(index, config)
        found = pipeline.matches(queries, RERANK_DEPTH, rerank=False)
        lists[name] = to_run(found)
        for key, value in pipeline.candidate_texts(found, RERANK_DEPTH).items():
            if texts.setdefault(key, value) != value:
                raise SystemExit(f"{key}: the fusions give the cross-encoder other passages")
        for qid, docs in lists[name].items():
            seen = union.setdefault(qid, {})
            for doc, _ in docs[:RERANK_DEPTH]:
                seen.setdefault(doc, -float(len(seen)))
    run = {q: sorted(docs.items(), key=lambda x: -x[1]) for q, docs in union.items()}
    depth = max(len(docs) for docs in run.values())
    ce = pipeline.reranker.cross_encoder
    scored = score_candidates(run, queries, {}, ce, depth, show_progress=True, pair_texts=texts)
    logit = {(q, d): c.cat[i] for q, c in scored.items() for i, d in enumerate(c.docs)}
    return {
        name: {
            q: Candidates(
                docs=[d for d, _ in docs],
                first=np.asarray([s for _, s in docs], dtype=np.float64),
                cat=np.asarray([logit[q, d] for d, _ in docs[:RERANK_DEPTH]], dtype=np.float64),
            )
            for q, docs in found.items()
        }
        for name, found in lists.items()
    }


# -- calibration --------------------------------------------------------------------------


def calibrate_table(
    work: Path, name: str, index: Path, cat: Path, fusion: Fusion, seeds: list[int]
) -> Path:
    """The ``calibrate`` table of one collection: pseudo-queries per seed, and test."""
    from dotcat.search.calibrate import WEIGHTS, pseudo_scores
    from dotcat.search.reranker import fuse

    path = work / "tables" / f"calibrate-{name}-{cat.name}.json.gz"
    table = load(path) if path.is_file() else {"pseudo": {}, "test": None}
    config = PipelineConfig(
        rerank=str(cat), fusion=fusion.method,
        fusion_weight=fusion.weight if fusion.method == "linear" else None,
    )  # fmt: skip
    pipeline = SearchPipeline(index, config)
    for seed in seeds:
        if str(seed) in table["pseudo"]:
            continue
        found = pseudo_scores(pipeline, seed=seed, show_progress=True)
        table["pseudo"][str(seed)] = {str(a): found.per_query[a] for a in WEIGHTS}
        save(path, table)
    for split in ("test", "dev"):
        if table.get(split) is None:
            texts, qrels = _split_queries(COLLECTIONS[name], split)
            candidates = _pipeline_candidates(index, cat, {"": fusion}, texts)[""]
            table[split] = {str(a): per_query(fuse(candidates, a), qrels) for a in WEIGHTS}
            table["fusion"] = fusion.describe()
            save(path, table)
    return path


def _split_queries(data: Path, split: str) -> tuple[dict[str, str], dict[str, dict]]:
    """A split's query texts and qrels; ``dev`` where a collection has none (SciFact): the
    split ``dotcat train`` carves from ``train`` with its seed, held out of training."""
    texts, qrels, splits = judged(data)
    if split == "dev" and "dev" not in splits:
        ids = split_dev(splits["train"], 0.1, DEV_SEED)[1]
    else:
        ids = splits[split]
    return {q: texts[q] for q in ids}, {q: qrels[q] for q in ids}
