"""A trained BERT_CAT behind dotcat's first stages, in domain (SciFact test) and out of domain.

    python eval/benchmarks/bench_cat_pipeline.py --cat-model runs/cat \\
        --collection scifact=data/scifact:indexes/scifact-dot \\
        --collection debian=runs/collections/debian:runs/ood/debian \\
        --collection pydoc=runs/collections/pydoc:runs/ood/pydoc \\
        [--depth 100] [--work runs/cat-pipeline] \\
        [--output eval/benchmarks/results/cat_pipeline.md]

For each collection ``NAME=DATA:INDEX`` (a BEIR directory with a ``test`` split and a dotcat
index of it built with ``--bm25``), ``dotcat search`` writes the dense and the hybrid first
stage's top ``depth`` (the hybrid is what ``dotcat search`` runs by default). Every distinct
(query, document) pair of those heads is scored once by the cross-encoder; each first stage is
then re-ranked with the plain logit (interpolation 1) and with the interpolation weight the
model recorded on its dev split (``--interpolate auto``, what ``dotcat search --rerank`` does),
both with :func:`dotcat.search.reranker.fuse`. nDCG@10 by ir-measures; ``p`` is a paired
t-test over queries of each re-ranked run against its own first stage.

The models never saw the test queries of any collection; the OOD collections' documents and
queries were never trained on (``eval/benchmarks/ood_collections.py`` builds them).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

import common
from bench_rerank import reranked, score_pairs, union_pairs

STAGES = ("dense", "hybrid")


def first_stage(index: Path, data: Path, stage: str, depth: int, out: Path) -> dict:
    """``dotcat search`` over the test queries; the run read back ranked."""
    from dotcat.data import read_run
    from dotcat.search.reranker import ranked

    if not out.exists():
        command = ["search", str(index), "--queries", str(data), "--split", "test"]
        common.dotcat(*command, "--first-stage", stage, "-k", str(depth), "--output", str(out))
    return ranked(read_run(out))


def per_query(run: dict, qrels: dict) -> dict[str, float]:
    from dotcat.evaluation import evaluate

    report = evaluate(run, qrels, ["nDCG@10"])
    return {q: v["nDCG@10"] for q, v in report.per_query.items()}


def collection_rows(name: str, data: Path, index: Path, args, ce, alpha: float) -> list[str]:
    from scipy.stats import ttest_rel

    from dotcat.data import load_corpus, load_qrels, load_queries
    from dotcat.search.reranker import corpus_texts

    queries, qrels = load_queries(data, split="test"), load_qrels(data, "test")
    runs = {
        s: first_stage(index, data, s, args.depth, args.work / f"{name}-{s}.trec") for s in STAGES
    }
    pairs = union_pairs(runs, dict.fromkeys(STAGES, args.depth))
    texts = corpus_texts(load_corpus(data), {d for _, d in pairs})
    started = time.perf_counter()
    cache = score_pairs(ce, pairs, queries, texts)
    seconds = time.perf_counter() - started
    logging.info("%s: %d pairs in %.0f s (%.1f pairs/s)", name, len(pairs), seconds,
                 len(pairs) / seconds)  # fmt: skip
    rows = []
    for stage in STAGES:
        base = per_query(runs[stage], qrels)
        keys = sorted(base)
        rows.append(f"| {name} | {stage} | first stage | {np.mean(list(base.values())):.4f} | | |")
        for label, a in (("plain logit", 1.0), (f"interpolated, alpha {alpha:g}", alpha)):
            got = per_query(reranked(runs[stage], cache, args.depth, a), qrels)
            diff = np.mean([got[q] for q in keys]) - np.mean([base[q] for q in keys])
            p = ttest_rel([got[q] for q in keys], [base[q] for q in keys]).pvalue
            rows.append(
                f"| {name} | {stage} | {label} | {np.mean([got[q] for q in keys]):.4f} | "
                f"{diff:+.4f} | {p:.3f} |"
            )
    rows.append(f"| {name} | | pairs scored | {len(pairs)} in {seconds:.0f} s | | |")
    return rows


def main() -> None:
    parser = common.parser(__doc__, output="cat_pipeline.md", work="runs/cat-pipeline")
    parser.add_argument("--cat-model", type=Path, required=True)
    parser.add_argument("--collection", action="append", required=True, help="NAME=DATA:INDEX")
    parser.add_argument("--depth", type=int, default=100)
    args = parser.parse_args()
    common.setup_logging()
    args.work.mkdir(parents=True, exist_ok=True)

    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    ce = CrossEncoder.load(CrossEncoderConfig(model=str(args.cat_model)))
    alpha = ce.interpolation_alpha if ce.interpolation_alpha is not None else 1.0
    record = json.loads(common.training_record_path(args.cat_model).read_text())
    rows = []
    for spec in args.collection:
        name, rest = spec.split("=", 1)
        data, index = rest.split(":", 1)
        rows += collection_rows(name, Path(data), Path(index), args, ce, alpha)
        print("\n".join(rows), flush=True)
    hyper = record["hyperparameters"]
    lines = [
        *common.header(
            f"BERT_CAT `{args.cat_model}` behind dotcat's first stages",
            f"Scoring precision: {ce.precision} ({ce.backend}).",
        ),
        f"Model: trained by `dotcat train cat` (base {hyper['base']}, loss {hyper['loss']}, "
        f"{hyper['n_negatives']} negatives, {hyper['epochs']} epochs, teacher weight "
        f"{hyper.get('teacher_weight', 0)}, first stages {hyper['first_stages']}); "
        f"{record['timings']['train_seconds'] / 60:.1f} min training, "
        f"{record['pairs_per_second']} pairs/s; best dev nDCG@10 "
        f"{record['best_dev_nDCG@10']:.4f} (epoch {record['best_epoch']}); interpolation "
        f"weight {alpha:g} chosen on dev.",
        "",
        f"Every first stage's top {args.depth} re-ranked; test queries; nDCG@10; diff and p "
        "(paired t-test) against the same first stage.",
        "",
        "| collection | first stage | re-ranking | nDCG@10 | diff | p |",
        "| --- | --- | --- | ---: | ---: | ---: |",
        *rows,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
