"""Can a corpus, without labels, tell how much to trust a re-ranker on it?

    python eval/studies/cat_corpus_weight/bench_cat_corpus_weight.py \\
        --cat-model runs/cat-pt-fold0 \\
        --collection scifact=data/scifact:indexes/scifact-minilm \\
        --collection pydoc=runs/collections/pydoc:runs/ood-zs/pydoc \\
        --collection debian=runs/collections/debian:runs/ood-zs/debian \\
        [--pseudo-queries 200] [--depths 20,100] [--work runs/cat-corpus-weight] \\
        [--output eval/studies/cat_corpus_weight/cat_corpus_weight.md]

A SciFact-trained BERT_CAT records one interpolation weight, chosen on SciFact dev, and applies
it everywhere; out of domain that weight makes the pipeline worse than its first stage
(``eval/studies/cat_fusion/``). Here the weight is chosen per collection instead, on
pseudo-queries of that collection's own corpus (:func:`dotcat.data.pseudo.pseudo_queries`: a
title, or a sentence cut out of its document; the document without it is the one relevant
answer), so that a re-ranker that does not help on a corpus's own text is weighted down there.

For each collection ``NAME=DATA:INDEX``:

1. ``--pseudo-queries`` pseudo-queries and their pseudo corpus (titles removed, each cut
   sentence removed from its document), indexed like ``INDEX`` (same encoder and precision,
   BM25), searched with ``INDEX``'s hybrid fusion: the first stage the test queries get,
   on text where the answer is known.
2. Every (query, document) pair of the pseudo and of the test queries' hybrid top 100 is
   scored once by the cross-encoder (cached under ``--work``).
3. For each depth, dotcat's interpolation (:func:`dotcat.search.reranker.fuse`, per-query
   min-max) is computed at weights 0, 0.1, ..., 1 on the pseudo-queries and on the test
   queries; the weight that maximises the pseudo-queries' nDCG@10 (ties: the smaller), and
   that weight guarded as ``dotcat calibrate`` records it (kept only if it beats the first stage
   on the pseudo-queries, paired t-test p < 0.05, else 0), are applied to the test queries,
   beside the model's recorded dev weight and the first stage alone. nDCG@10 by ir-measures;
   ``p``: paired t-test over test queries against the first stage.

The test queries choose nothing; their best weight is printed only to show what was possible.
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
from bench_rerank import reranked, score_pairs
from dotcat.evaluation.significance import ttest_pvalue
from dotcat.search.calibrate import WEIGHTS

#: The guard ``dotcat calibrate`` used when this study ran (since replaced by the paired
#: one-standard-error rule of dotcat.evaluation.choice; compared in eval/studies/choices):
#: the best weight, kept where a paired t-test against weight 0 gave p below this, else 0.
SIGNIFICANCE = 0.05


def guarded_alpha(per_query: dict) -> tuple[float, float, float | None]:
    """``(alpha, best, p)`` of the old guard (see :data:`SIGNIFICANCE`)."""
    means = {a: _mean(v) for a, v in per_query.items()}
    best = max(means, key=lambda a: (round(means[a], 6), -a))
    if best == 0.0:
        return 0.0, best, None
    queries = sorted(per_query[0.0])
    _, p = ttest_pvalue([per_query[0.0][q] for q in queries], [per_query[best][q] for q in queries])
    return (best if p < SIGNIFICANCE else 0.0), best, p


def _mean(values: dict) -> float:
    return float(np.mean(list(values.values())))


def pseudo_collection(name: str, data: Path, index: Path, n: int, work: Path):
    """Pseudo queries/qrels of ``data``'s corpus and their hybrid top 100 over its pseudo
    corpus, indexed as ``index`` was; returns (queries, qrels, run, texts, summary)."""
    from dotcat.data.corpus import iter_corpus
    from dotcat.data.pseudo import pseudo_queries, write_pseudo_dataset
    from dotcat.index import document_text
    from dotcat.index.manifest import Manifest
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    pseudo = pseudo_queries(iter_corpus(data), max_queries=n, seed=0)
    out = write_pseudo_dataset(pseudo, work / f"{name}-pseudo")
    manifest = Manifest.read(index)
    pseudo_index = work / f"{name}-pseudo-index"
    if not (pseudo_index / "manifest.json").exists():
        encoder = manifest.encoder
        command = ["index", str(out / "corpus.jsonl"), str(pseudo_index)]
        if encoder.get("name") != "default":
            command += ["--model", str(encoder["path"])]
        common.dotcat(*command, "--precision", encoder["precision"], "--bm25")
    fusion = manifest.fusion or {"method": "rrf"}
    config = PipelineConfig(
        first_stage="hybrid",
        fusion=fusion["method"],
        fusion_weight=fusion.get("weight") if fusion["method"] == "linear" else None,
    )
    pipeline = SearchPipeline(pseudo_index, config)
    queries = {qid: text for qid, text, _ in pseudo.queries}
    qrels = {qid: {doc: 1} for qid, _, doc in pseudo.queries}
    run = pipeline.run(queries, 100)
    texts = {d.id: document_text("", d.text) for d in pseudo.documents}
    return queries, qrels, run, texts, pseudo.summary()


def logits_for(tag: str, run: dict, queries: dict, texts: dict, ce, work: Path) -> dict:
    """(qid, doc) -> logit for each query's top 100, cached in ``work``."""
    cache = work / f"{tag}-logits-{ce.fingerprint[:12]}-{ce.precision}.json"
    pairs = sorted({(q, d) for q, docs in run.items() for d, _ in docs[:100]})
    if cache.exists():
        stored = {tuple(k.split("\t")): v for k, v in json.loads(cache.read_text()).items()}
        if set(pairs) <= set(stored):
            return stored
    started = time.perf_counter()
    logits = score_pairs(ce, pairs, queries, texts)
    logging.info("%s: %d pairs in %.0f s", tag, len(pairs), time.perf_counter() - started)
    cache.write_text(json.dumps({f"{q}\t{d}": v for (q, d), v in logits.items()}))
    return logits


def curve(run: dict, logits: dict, qrels: dict, depth: int) -> dict[float, dict]:
    """weight -> per-query nDCG@10 of the run re-ranked at ``depth`` with that weight."""
    head = {q: docs[:depth] for q, docs in run.items()}
    return {w: per_query(reranked(head, logits, depth, w), qrels) for w in WEIGHTS}


def collection_rows(spec: str, args, ce) -> tuple[list[str], list[str]]:
    from scipy.stats import ttest_rel

    from dotcat.data import load_corpus, load_qrels, load_queries
    from dotcat.search.reranker import corpus_texts

    name, rest = spec.split("=", 1)
    data, index = (Path(p) for p in rest.split(":", 1))
    pq, pqrels, prun, ptexts, summary = pseudo_collection(
        name, data, index, args.pseudo_queries, args.work
    )
    plogits = logits_for(f"{name}-pseudo", prun, pq, ptexts, ce, args.work)
    queries, qrels = load_queries(data, split="test"), load_qrels(data, "test")
    run = first_stage(index, data, "hybrid", 100, args.work / f"{name}-hybrid.trec")
    pairs = {d for docs in run.values() for d, _ in docs[:100]}
    logits = logits_for(name, run, queries, corpus_texts(load_corpus(data), pairs), ce, args.work)
    first = per_query(run, qrels)
    keys = sorted(first)
    base = [first[q] for q in keys]
    pfirst = _mean(per_query(prun, pqrels))
    curves, rows = [], [f"| {name} | first stage (hybrid) | | {np.mean(base):.4f} | | |"]
    recorded = ce.interpolation_alpha if ce.interpolation_alpha is not None else 1.0
    for depth in args.depths:
        praw = curve(prun, plogits, pqrels, depth)
        pcurve = {w: _mean(v) for w, v in praw.items()}
        tcurve = curve(run, logits, qrels, depth)
        guarded, chosen, p = guarded_alpha(praw)  # what `dotcat calibrate` recorded then
        oracle = max(WEIGHTS, key=lambda w: (_mean(tcurve[w]), -w))
        curves.append(
            f"| {name} | {depth} | {len(pq)} pseudo | {pfirst:.3f} | "
            + " ".join(f"{pcurve[w]:.3f}" for w in WEIGHTS)
            + " |"
        )
        curves.append(
            f"| {name} | {depth} | {len(keys)} test | {np.mean(base):.3f} | "
            + " ".join(f"{_mean(tcurve[w]):.3f}" for w in WEIGHTS)
            + " |"
        )
        for label, w in (
            ("dev weight (recorded)", recorded),
            ("pseudo-chosen weight (best)", chosen),
            (f"pseudo-chosen, guarded (p {'-' if p is None else f'{p:.3f}'})", guarded),
            ("plain logit", 1.0),
            ("best weight on test (not a choice)", oracle),
        ):
            got = [tcurve[w][q] for q in keys]
            same = got == base  # the first stage's ranking: no test to run
            p = "same run" if same else f"{ttest_rel(got, base).pvalue:.3f}"
            rows.append(
                f"| {name} | depth {depth}, {label} | {w:g} | {np.mean(got):.4f} | "
                f"{np.mean(got) - np.mean(base):+.4f} | {p} |"
            )
    logging.info("%s pseudo-queries: %s", name, summary)
    return rows, curves


def main() -> None:
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    here = Path(__file__).resolve().parent
    parser = common.parser(
        __doc__, output=here / "cat_corpus_weight.md", work="runs/cat-corpus-weight"
    )
    parser.add_argument("--cat-model", type=Path, required=True)
    parser.add_argument("--collection", action="append", required=True, help="NAME=DATA:INDEX")
    parser.add_argument("--pseudo-queries", type=int, default=200)
    parser.add_argument("--depths", default="20,100")
    args = parser.parse_args()
    args.depths = [int(d) for d in args.depths.split(",")]
    common.setup_logging()
    args.work.mkdir(parents=True, exist_ok=True)
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(args.cat_model)))
    rows, curves = [], []
    for spec in args.collection:
        got_rows, got_curves = collection_rows(spec, args, ce)
        rows += got_rows
        curves += got_curves
        print("\n".join(got_rows), flush=True)
    lines = [
        *common.header(
            f"BERT_CAT `{args.cat_model}`: interpolation weight chosen per corpus on its "
            "pseudo-queries",
            f"Cross-encoder at {ce.precision} ({ce.backend}); its recorded dev weight "
            f"{ce.interpolation_alpha}.",
        ),
        "## Test queries (diff and p against the hybrid first stage alone)",
        "",
        "| collection | re-ranking | weight | nDCG@10 | diff | p |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "## nDCG@10 by interpolation weight (0 = first stage, 1 = plain logit)",
        "",
        "| collection | depth | queries | first stage | weights 0, 0.1, ..., 1 |",
        "| --- | ---: | --- | ---: | --- |",
        *curves,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
