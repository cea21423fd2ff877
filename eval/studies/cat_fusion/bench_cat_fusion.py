"""How a BERT_CAT's scores should meet the first stage's: re-ranking depth and fusion, chosen on
dev, judged in domain and out of domain (does a weight chosen on dev transfer?).

    python eval/studies/cat_fusion/bench_cat_fusion.py --cat-model runs/cat-teacher \\
        --dev scifact=data/scifact:indexes/scifact-dot \\
        --collection scifact=data/scifact:indexes/scifact-dot \\
        --collection pydoc=runs/collections/pydoc:runs/ood/pydoc \\
        --collection debian=runs/collections/debian:runs/ood/debian \\
        [--depths 20,50,100] [--work runs/cat-pipeline-teacher] \\
        [--output eval/studies/cat_fusion/cat_fusion.md]

The first stage is dotcat's default, hybrid (BM25 + dense, the index's recorded fusion), top
100. Every (query, document) pair of it is scored once by the cross-encoder (cached under
``--work``). Then, for each re-ranking depth and each fusion of the two scores:

- ``minmax``: ``a * minmax(cat) + (1 - a) * minmax(first)`` per query (what dotcat does,
  :func:`dotcat.search.reranker.fuse`);
- ``zscore``: the same with each score standardised per query (mean 0, sd 1);
- ``rrf``: ``a / (60 + rank_cat) + (1 - a) / (60 + rank_first)`` (reciprocal rank fusion,
  Cormack et al. 2009, weighted; ranks only, no score scale to calibrate);

the weight ``a`` (0, 0.1, ..., 1; 1 = the plain logit) is chosen on the dev queries only (the
10% of SciFact train that ``dotcat train`` holds out), then applied unchanged to SciFact test
and to the out-of-domain collections. nDCG@10 by ir-measures; ``p``: paired t-test over the
queries against the first stage alone.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common
from bench_cat_pipeline import first_stage, per_query
from bench_rerank import score_pairs, union_pairs

WEIGHTS = [round(0.1 * i, 1) for i in range(11)]
FUSIONS = ("minmax", "zscore", "rrf")
RRF_K = 60


def _minmax(x: np.ndarray) -> np.ndarray:
    span = x.max() - x.min()
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


def _zscore(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


def _rrf(x: np.ndarray) -> np.ndarray:
    ranks = np.empty(len(x))
    ranks[np.argsort(-x, kind="stable")] = np.arange(1, len(x) + 1)
    return 1.0 / (RRF_K + ranks)


NORMALISE = {"minmax": _minmax, "zscore": _zscore, "rrf": _rrf}


def fused(run: dict, logits: dict, depth: int, fusion: str, weight: float) -> dict:
    """The run with each query's top ``depth`` re-ordered by the fused score; the tail below."""
    out = {}
    norm = NORMALISE[fusion]
    for q, docs in run.items():
        head = docs[:depth]
        cat = np.array([logits[(q, d)] for d, _ in head])
        first = np.array([s for _, s in head], dtype=np.float64)
        scores = cat if weight == 1.0 else weight * norm(cat) + (1 - weight) * norm(first)
        order = np.argsort(-scores, kind="stable")
        ranking = [(head[i][0], float(scores[i])) for i in order]
        floor = float(scores.min()) if len(head) else 0.0
        ranking += [(d, floor - 1.0 - i) for i, (d, _) in enumerate(docs[depth:])]
        out[q] = ranking
    return out


def _mean(values: dict) -> float:
    return float(np.mean(list(values.values())))


def scored(name: str, run: dict, queries: dict, data: Path, ce, work: Path) -> dict:
    """(qid, doc) -> logit for every pair of ``run``'s top 100, cached in ``work``."""
    from dotcat.data import load_corpus
    from dotcat.search.reranker import corpus_texts

    cache = work / f"{name}-hybrid-logits-{ce.fingerprint[:12]}-{ce.precision}.json"
    pairs = union_pairs({"hybrid": run}, {"hybrid": 100})
    if cache.exists():
        stored = json.loads(cache.read_text())
        logits = {tuple(k.split("\t")): v for k, v in stored["logits"].items()}
        if set(pairs) <= set(logits):
            return logits
    texts = corpus_texts(load_corpus(data), {d for _, d in pairs})
    started = time.perf_counter()
    logits = score_pairs(ce, pairs, queries, texts)
    seconds = time.perf_counter() - started
    logging.info("%s: %d pairs in %.0f s", name, len(pairs), seconds)
    stored = {"seconds": seconds, "logits": {f"{q}\t{d}": v for (q, d), v in logits.items()}}
    cache.write_text(json.dumps(stored))
    return logits


def dev_run(data: Path, index: Path) -> tuple[dict, dict, dict]:
    """The hybrid top 100 of the dev queries (queries, qrels, run), in process."""
    from dotcat.data.splits import find_dev_split
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    dev = find_dev_split(data)
    pipeline = SearchPipeline(index, PipelineConfig(first_stage="hybrid"))
    return dev.queries, dev.qrels, pipeline.run(dev.queries, 100)


def main() -> None:
    from scipy.stats import ttest_rel

    from dotcat.data import load_qrels, load_queries
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "cat_fusion.md", work="runs/cat-pipeline-teacher")
    parser.add_argument("--cat-model", type=Path, required=True)
    parser.add_argument("--dev", required=True, help="NAME=DATA:INDEX with a dev split")
    parser.add_argument("--collection", action="append", required=True, help="NAME=DATA:INDEX")
    parser.add_argument("--depths", default="20,50,100")
    args = parser.parse_args()
    common.setup_logging()
    args.work.mkdir(parents=True, exist_ok=True)
    depths = [int(d) for d in args.depths.split(",")]
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(args.cat_model)))

    name, rest = args.dev.split("=", 1)
    data, index = (Path(p) for p in rest.split(":", 1))
    queries, qrels, run = dev_run(data, index)
    logits = scored(f"{name}-dev", run, queries, data, ce, args.work)
    chosen, dev_rows = {}, []
    base = _mean(per_query(run, qrels))
    for depth in depths:
        for fusion in FUSIONS:
            scores = {
                w: _mean(per_query(fused(run, logits, depth, fusion, w), qrels)) for w in WEIGHTS
            }
            best = max(WEIGHTS, key=lambda w: (scores[w], -w))  # ties: the smaller weight
            chosen[depth, fusion] = best
            dev_rows.append(
                f"| {depth} | {fusion} | {best:g} | {scores[best]:.4f} | {scores[1.0]:.4f} | "
                + " ".join(f"{scores[w]:.3f}" for w in WEIGHTS)
                + " |"
            )
    rows = []
    for spec in args.collection:
        name, rest = spec.split("=", 1)
        data, index = (Path(p) for p in rest.split(":", 1))
        topics, qrels = load_queries(data, split="test"), load_qrels(data, "test")
        test_run = first_stage(index, data, "hybrid", 100, args.work / f"{name}-hybrid.trec")
        logits = scored(name, test_run, topics, data, ce, args.work)
        first = per_query(test_run, qrels)
        keys = sorted(first)
        rows.append(f"| {name} | first stage (hybrid) | | {_mean(first):.4f} | | |")
        for depth in depths:
            for fusion in FUSIONS:
                w = chosen[depth, fusion]
                got = per_query(fused(test_run, logits, depth, fusion, w), qrels)
                a, b = [got[q] for q in keys], [first[q] for q in keys]
                rows.append(
                    f"| {name} | depth {depth}, {fusion} | {w:g} | {np.mean(a):.4f} | "
                    f"{np.mean(a) - np.mean(b):+.4f} | {ttest_rel(a, b).pvalue:.3f} |"
                )
        print("\n".join(rows), flush=True)
    lines = [
        *common.header(
            f"BERT_CAT `{args.cat_model}`: re-ranking depth and score fusion, chosen on dev",
            f"Cross-encoder at {ce.precision} ({ce.backend}).",
        ),
        f"## Dev ({args.dev.split('=')[0]}: {len(queries)} queries held out of train; hybrid "
        f"first stage alone {base:.4f} nDCG@10)",
        "",
        "| depth | fusion | chosen weight | dev nDCG@10 | plain logit | weights 0, 0.1, ..., 1 |",
        "| ---: | --- | ---: | ---: | ---: | --- |",
        *dev_rows,
        "",
        "## Test (weights as chosen on dev; diff and p against the first stage alone)",
        "",
        "| collection | re-ranking | weight | nDCG@10 | diff | p |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        *rows,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
