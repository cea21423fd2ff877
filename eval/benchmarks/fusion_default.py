"""The hybrid fusion of an index without dev queries: RRF or linear 0.5, on every collection.

    python eval/benchmarks/fusion_default.py [--collections scifact pylib faq pydoc debian man] \\
        [--work runs/fusion-default] [--output eval/benchmarks/results/fusion_default.md]

A folder of a user's own files has no dev queries, so ``dotcat index`` cannot choose its
fusion; the hybrid then ran reciprocal rank fusion (RRF, k = 60) while the dev choice's prior
was linear 0.5. For each collection (``ood_collections.py`` builds them into
``runs/collections/NAME``; ``scifact`` is the bundled ``data/scifact``), as a user's folder:

1. ``dotcat index CORPUS INDEX``: the corpus file alone (no labels beside it), the default
   model and precision.
2. The dense and the BM25 first stages' top 100 (:data:`dotcat.options.FUSION_DEPTH`, what a
   hybrid search fuses) for the dev queries (``qrels/dev.tsv``, else the 10% of ``train`` that
   ``dotcat train`` holds out) and for the test queries.
3. Fused three ways: RRF; linear 0.5 with a list of equal scores scaled to 0 (the
   normalisation until now); linear 0.5 as dotcat fuses now (a list of equal scores, such as
   BM25's one match, scaled to 1: its own best).

Reports nDCG@10 and R@100 on dev and on test, each linear fusion against RRF (paired t-test,
wins/ties/losses), dense and BM25 alone, and how many queries had a BM25 list of equal scores
(where the two normalisations differ). The choice between RRF and linear 0.5 is made on dev;
test is reported.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import common

logger = logging.getLogger("fusion_default")

COLLECTIONS = common.COLLECTIONS
MEASURES = ("nDCG@10", "R@100")
SYSTEMS = ("RRF", "linear 0.5, equal -> 0", "linear 0.5", "dense", "BM25")


def old_linear(dense, bm25, weight: float = 0.5):
    """Linear fusion as it was: min-max per list, a list of equal scores scaled to 0."""

    def minmax(ranking):
        if not ranking:
            return {}
        low, high = min(s for _, s in ranking), max(s for _, s in ranking)
        return {d: (s - low) / (high - low) if high > low else 0.0 for d, s in ranking}

    a, b = minmax(dense), minmax(bm25)
    fused = {d: weight * a.get(d, 0.0) + (1 - weight) * b.get(d, 0.0) for d in {**a, **b}}
    return sorted(fused.items(), key=lambda x: (-x[1], x[0]))


def splits(data: Path):
    """``{"dev": Split, "test": Split}``: queries and qrels of each (dev as ``dotcat index``
    finds it)."""
    from dotcat.data import load_qrels, load_queries
    from dotcat.data.splits import find_dev_split

    dev = find_dev_split(data)
    test_qrels = load_qrels(data, split="test")
    queries = load_queries(data, split="test")
    return {
        "dev": (dev.queries, dev.qrels, dev.source),
        "test": (queries, test_qrels, "qrels/test.tsv"),
    }


def runs_of(index: Path, queries: dict) -> dict:
    """The five systems' runs of ``queries`` over ``index`` (dense and BM25 fetched once)."""
    from dotcat.options import FUSION_DEPTH
    from dotcat.search.config import PipelineConfig
    from dotcat.search.fusion import Fusion
    from dotcat.search.pipeline import SearchPipeline

    pipeline = SearchPipeline(index, PipelineConfig(first_stage="dense"))
    dense = pipeline.run(queries, FUSION_DEPTH, first_stage="dense")
    bm25 = pipeline.run(queries, FUSION_DEPTH, first_stage="bm25")
    return {
        "RRF": Fusion("rrf").fuse_runs(dense, bm25),
        "linear 0.5, equal -> 0": {
            q: old_linear(dense.get(q, ()), bm25.get(q, ())) for q in {**dense, **bm25}
        },
        "linear 0.5": Fusion("linear", 0.5).fuse_runs(dense, bm25),
        "dense": dense,
        "BM25": bm25,
    }


def equal_score_lists(run: dict) -> int:
    """Queries whose ranked list holds one score only (where the two normalisations differ)."""
    return sum(1 for ranking in run.values() if len({round(s, 9) for _, s in ranking}) == 1)


def measure(name: str, data: Path, work: Path) -> dict:
    from dotcat.data import find_corpus_file
    from dotcat.evaluation import evaluate
    from dotcat.evaluation.significance import paired_ttest, paired_values, wins_ties_losses

    index = work / name / "index"
    if not (index / "manifest.json").is_file():
        common.dotcat("index", find_corpus_file(data), index)
    found = {}
    for split, (queries, qrels, source) in splits(data).items():
        runs = runs_of(index, queries)
        reports = {s: evaluate(runs[s], qrels, MEASURES) for s in SYSTEMS}
        row = {
            "source": source,
            "queries": len(reports["RRF"].per_query),
            "flat": equal_score_lists(runs["BM25"]),
        }
        for system, report in reports.items():
            row[system] = {m: report.aggregate[m] for m in MEASURES}
        for system in SYSTEMS[1:3]:
            test = paired_ttest(reports["RRF"], reports[system], "nDCG@10")
            wins, ties, losses = wins_ties_losses(
                *paired_values(reports["RRF"], reports[system], "nDCG@10")[1:]
            )
            row[system]["p"], row[system]["wtl"] = test.pvalue, f"{wins}/{ties}/{losses}"
        found[split] = row
        logger.info("%s %s: %s", name, split, row)
    return found


def table(results: dict, split: str) -> list[str]:
    lines = [
        f"| collection ({split} queries) | RRF | linear 0.5, equal -> 0 | linear 0.5 (now) "
        "| now - RRF | p | W/T/L | dense | BM25 | equal-score BM25 lists |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    gains = []
    for name, found in results.items():
        row = found[split]
        rrf, old, new = (row[s]["nDCG@10"] for s in SYSTEMS[:3])
        gains.append(new - rrf)
        lines.append(
            f"| {name} ({row['queries']}) | {rrf:.4f} | {old:.4f} | {new:.4f} | "
            f"{new - rrf:+.4f} | {row['linear 0.5']['p']:.2g} | {row['linear 0.5']['wtl']} | "
            f"{row['dense']['nDCG@10']:.4f} | {row['BM25']['nDCG@10']:.4f} | {row['flat']} |"
        )
    mean = {s: sum(f[split][s]["nDCG@10"] for f in results.values()) / len(results)
            for s in SYSTEMS}  # fmt: skip
    lines.append(
        f"| mean | {mean['RRF']:.4f} | {mean[SYSTEMS[1]]:.4f} | {mean['linear 0.5']:.4f} | "
        f"{mean['linear 0.5'] - mean['RRF']:+.4f} (lowest {min(gains):+.4f}) |  |  | "
        f"{mean['dense']:.4f} | {mean['BM25']:.4f} |  |"
    )
    recall = ", ".join(
        f"{name} {f[split]['RRF']['R@100']:.4f} -> {f[split]['linear 0.5']['R@100']:.4f}"
        for name, f in results.items()
    )
    return [*lines, "", f"R@100 ({split}), RRF -> linear 0.5: {recall}.", ""]


def main() -> None:
    parser = common.parser(__doc__, work="runs/fusion-default", output="fusion_default.md")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    args = parser.parse_args()
    common.setup_logging()
    results = {}
    for name in args.collections:
        if name not in COLLECTIONS:
            sys.exit(f"--collections: unknown collection {name!r} ({', '.join(COLLECTIONS)})")
        results[name] = measure(name, COLLECTIONS[name], args.work)
    (args.work / "results.json").write_text(json.dumps(results, indent=1))
    lines = common.header(
        "The fusion of an index without dev queries: RRF or linear 0.5",
        "Each collection indexed as a user's folder (its corpus file alone: `dotcat index "
        "CORPUS`, default model and precision); dense and BM25 top 100 per query, fused. "
        "p: paired t-test of linear 0.5 (now) against RRF on nDCG@10; W/T/L: queries where "
        "it scores higher / the same / lower. The choice is read on dev; test is reported.",
    )
    for split in ("dev", "test"):
        lines += [f"## {split}", "", *table(results, split)]
    lines += [
        "Dev queries: " + "; ".join(f"{n} {r['dev']['source']}" for n, r in results.items()) + "."
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
