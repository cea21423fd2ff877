"""Behaviour unchanged? ``make scifact``'s commands run by two checkouts, runs compared.

    git worktree add /tmp/before COMMIT --detach
    python eval/benchmarks/bench_same_results.py --before /tmp/before [--precision fp32]

Each checkout (``--before``, and this one) runs, one after the other and with its own
``src/`` first on ``PYTHONPATH``: ``dotcat index data/scifact`` at ``--precision``, ``dotcat
search`` hybrid and dense, ``dotcat bm25``, top 100 of the test queries. Reported: each run's
nDCG@10 (:func:`dotcat.evaluation.evaluate`) and, run by run, whether the two checkouts rank the
same documents in the same order (top 10 and top 100 per query, as sets and as lists) and the
largest score difference. Work under ``--work``; writes ``--output``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import common

RUNS = {
    "bm25": ("bm25", "data/scifact"),
    "dense": ("search", "{index}", "--first-stage", "dense"),
    "hybrid": ("search", "{index}"),
}


def build(tree: Path, work: Path, precision: str) -> float:
    """The index and the three runs of ``tree``'s code under ``work``; wall seconds."""
    os.environ["PYTHONPATH"] = str(tree / "src")
    work.mkdir(parents=True, exist_ok=True)
    index, started = work / "index", time.perf_counter()
    common.dotcat("index", "data/scifact", index, "--overwrite", "--precision", precision)
    for name, args in RUNS.items():
        args = [a.format(index=index) for a in args]
        extra = () if name == "bm25" else ("--precision", precision)
        common.dotcat(*args, "--queries", "data/scifact", "--split", "test", "-k", "100",
                      *extra, "--output", work / f"{name}.trec")  # fmt: skip
    return time.perf_counter() - started


def compare(a: dict, b: dict) -> dict:
    """How two runs (``{qid: {doc: score}}``) differ."""
    ranked = [{q: sorted(r, key=lambda d: (-r[d], d)) for q, r in run.items()} for run in (a, b)]
    same = {
        f"{what} top {k}": sum(
            f(ranked[0][q][:k]) == f(ranked[1].get(q, [])[:k]) for q in ranked[0]
        )
        for k in (10, 100)
        for what, f in (("lists", list), ("sets", set))
    }
    diff = max(abs(s - b[q].get(d, float("inf"))) for q, r in a.items() for d, s in r.items())
    return {"queries": len(a), **same, "max score difference": diff}


def main() -> None:
    p = common.parser(__doc__, output="same_results.md", work="runs/same_results")
    p.add_argument("--before", type=Path, required=True, help="the other checkout")
    p.add_argument("--precision", default="fp32")
    args = p.parse_args()
    from dotcat.data import load_qrels
    from dotcat.data.runs import read_run
    from dotcat.evaluation import evaluate

    seconds = {side: build(tree, args.work / side, args.precision)
               for side, tree in (("before", args.before), ("after", common.ROOT))}  # fmt: skip
    qrels = load_qrels(common.SCIFACT, split="test")
    lines = common.header(
        "Behaviour unchanged: make scifact's runs by two checkouts",
        f"Before: `{args.before}` ({seconds['before']:.0f} s); after: this checkout "
        f"({seconds['after']:.0f} s); precision {args.precision}.",
    )
    lines += ["| run | nDCG@10 before | after | queries | same lists top 10 | same sets top 10 "
              "| same lists top 100 | same sets top 100 | max score difference |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name in RUNS:
        a, b = (read_run(args.work / side / f"{name}.trec") for side in ("before", "after"))
        nd = [evaluate(r, qrels, ["nDCG@10"]).aggregate["nDCG@10"] for r in (a, b)]
        c = compare(a, b)
        lines.append(f"| {name} | {nd[0]:.4f} | {nd[1]:.4f} | {c['queries']} | "
                     f"{c['lists top 10']} | {c['sets top 10']} | {c['lists top 100']} | "
                     f"{c['sets top 100']} | {c['max score difference']:.2e} |")  # fmt: skip
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
