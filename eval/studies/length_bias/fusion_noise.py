"""How far the default hybrid's nDCG@10 moves when only the bottom of its dense list changes.

    python eval/studies/length_bias/fusion_noise.py [--collections ...] [--repeats 20]

Issue 68's bar is 0.003 of nDCG@10 per collection. An aggregation rule changes which documents
sit deep in the dense list, and the linear fusion's min-max takes its floor from the list's
last score (:func:`dotcat.search.fusion.linear_fusion`), so the hybrid's top 10 can move even
where the dense top 10 does not. This measures that noise with no rule at all: for each
collection's ``x16`` index (today's) and its fusion as recorded, every query's dense top 100 is
cut at a depth drawn uniformly from 90..99 (as if the last few documents had been replaced by
others scoring a little higher), fused with its BM25 top 100 and scored on the **test** queries
(a measurement: nothing is chosen here). Per collection, over ``--repeats`` seeded draws: the
share of queries whose top 10 changed, and the nDCG@10 difference to the uncut hybrid (mean,
smallest, largest) with how many draws fall more than 0.003 below it.

Writes ``fusion_noise.md`` beside this script.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
from candidates import DATA, index_dir

import common

HERE = Path(__file__).resolve().parent
K = 100
BAR = 0.003


def noise(name: str, work: Path, repeats: int) -> dict:
    """The hybrid's nDCG@10 without and with the dense list's bottom cut, ``repeats`` times."""
    from dotcat.data import load_qrels, load_queries
    from dotcat.evaluation import evaluate
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    queries, qrels = load_queries(DATA[name], split="test"), load_qrels(DATA[name], split="test")
    pipeline = SearchPipeline(index_dir(work, name, "x16"), PipelineConfig(aggregation="maxp"))
    dense = pipeline.run(queries, K, first_stage="dense")
    bm25 = pipeline.run(queries, K, first_stage="bm25")
    fusion = pipeline.fusion
    whole = fusion.fuse_runs(dense, bm25)
    base = evaluate(whole, qrels, measures=["nDCG@10"]).aggregate["nDCG@10"]
    rng = np.random.default_rng(0)
    diffs, moved = [], []
    for _ in range(repeats):
        cut = {q: run[: rng.integers(90, 100)] for q, run in dense.items()}
        fused = fusion.fuse_runs(cut, bm25)
        got = evaluate(fused, qrels, measures=["nDCG@10"]).aggregate["nDCG@10"]
        diffs.append(got - base)
        ids = {q: [d for d, _ in run[:10]] for q, run in fused.items()}
        moved.append(np.mean([ids[q] != [d for d, _ in run[:10]] for q, run in whole.items()]))
    return {"queries": len(queries), "fusion": fusion.describe(), "base": base,
            "diffs": diffs, "moved": float(np.mean(moved))}  # fmt: skip


def main() -> None:
    p = common.parser(__doc__, output=HERE / "fusion_noise.md", work="runs/length_bias")
    p.add_argument("--collections", nargs="+", default=["scifact", "faq", "pydoc", "man",
                   "debian", "mixed"])  # fmt: skip
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args()
    lines = common.header("The default hybrid's noise from the bottom of its dense list",
                          f"Test queries; {args.repeats} seeded draws per collection.")  # fmt: skip
    lines += ["| collection | queries | fusion | hybrid nDCG@10 | top 10 moved (share of "
              "queries) | difference: mean | smallest | largest | draws below -0.003 |",
              "| --- | ---: | --- |" + " ---: |" * 6]  # fmt: skip
    for name in args.collections:
        r = noise(name, args.work, args.repeats)
        d = np.array(r["diffs"])
        lines.append(f"| {name} | {r['queries']} | {r['fusion']} | {r['base']:.4f} | "
                     f"{r['moved']:.3f} | {d.mean():+.4f} | {d.min():+.4f} | {d.max():+.4f} | "
                     f"{int((d < -BAR).sum())} of {len(d)} |")  # fmt: skip
        print(lines[-1], flush=True)
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
