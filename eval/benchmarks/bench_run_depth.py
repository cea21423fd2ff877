"""Does asking for more results reorder the first ones? The hybrid run at several depths.

    git worktree add /tmp/before COMMIT --detach
    python eval/benchmarks/bench_run_depth.py --before /tmp/before [--index INDEX] [--data DIR]

Each checkout (``--before``, and this one), with its own ``src/`` first on ``PYTHONPATH``,
runs ``dotcat search INDEX --queries DATA --split test -k K`` (the default pipeline: hybrid on
an index with BM25) for each ``K`` of ``--ks``, taking turns. Reported per checkout and ``K``:
nDCG@10 and R@100 (:func:`dotcat.evaluation.evaluate`), the queries whose top 10 differ from
the run at the first ``K``'s and whose top ``K'`` differ from the run at the ``K'`` before, and
the command's wall seconds (model load included);
then whether the two checkouts' runs are equal where ``K`` is at most the fusion depth (100).
Work under ``--work``; writes ``--output``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import common


def run(tree: Path, index: Path, data: Path, k: int, out: Path) -> tuple[dict, float]:
    """``tree``'s ``dotcat search`` run at depth ``k``: ``{qid: [(doc, score), ...]}`` in its
    order, and the command's wall seconds."""
    os.environ["PYTHONPATH"] = str(tree / "src")
    started = time.perf_counter()
    common.dotcat("search", index, "--queries", data, "--split", "test", "-k", str(k),
                  "--output", out)  # fmt: skip
    seconds = time.perf_counter() - started
    ranked: dict[str, list[tuple[str, float]]] = {}
    for line in out.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        ranked.setdefault(qid, []).append((doc, float(score)))
    return ranked, seconds


def differs(a: dict, b: dict, k: int) -> int:
    """Queries whose top ``k`` documents (as lists) differ between two runs."""
    return sum([d for d, _ in a[q][:k]] != [d for d, _ in b.get(q, [])[:k]] for q in a)


def main() -> None:
    p = common.parser(__doc__, output="run_depth.md", data=common.SCIFACT, work="runs/run_depth")
    p.add_argument("--before", type=Path, required=True, help="the other checkout")
    p.add_argument("--index", type=Path, default=Path("indexes/scifact-minilm"))
    p.add_argument("--ks", type=int, nargs="+", default=[10, 100, 300, 1000])
    args = p.parse_args()
    from dotcat.data import load_qrels
    from dotcat.evaluation import evaluate

    qrels = load_qrels(args.data, split="test")
    trees = {"before": args.before.resolve(), "after": common.ROOT}
    runs, seconds = {}, {}
    for k in args.ks:
        for name, tree in trees.items():
            (args.work / name).mkdir(parents=True, exist_ok=True)
            out = args.work / name / f"k{k}.trec"
            runs[name, k], seconds[name, k] = run(tree, args.index, args.data, k, out)
    lines = common.header("The hybrid run at several depths: does asking for more reorder?",
                          f"Index `{args.index}`, {len(qrels)} test queries of "
                          f"`{common.shown(args.data)}`; before: `{args.before}`.")  # fmt: skip
    lines += [f"| checkout | k | nDCG@10 | R@100 | top 10 differs from k={args.ks[0]}'s | top k' "
              "differs from k''s (k' the k above) | seconds |",
              "| --- |" + " ---: |" * 6]  # fmt: skip
    for name in trees:
        for before, k in zip([None, *args.ks], args.ks, strict=False):
            got = evaluate(runs[name, k], qrels, measures=["nDCG@10", "R@100"]).aggregate
            prev = "-" if before is None else differs(runs[name, before], runs[name, k], before)
            lines.append(f"| {name} | {k} | {got['nDCG@10']:.4f} | {got['R@100']:.4f} | "
                         f"{differs(runs[name, args.ks[0]], runs[name, k], 10)} | {prev} | "
                         f"{seconds[name, k]:.1f} |")  # fmt: skip
    lines.append("")
    for k in (k for k in args.ks if k <= 100):
        a, b = runs["before", k], runs["after", k]
        gap = max(abs(s - t) for q in a for (_, s), (_, t) in zip(a[q], b[q], strict=True))
        lines.append(f"k = {k}: before and after rank the same documents in the same order for "
                     f"{len(a) - differs(a, b, k)} of {len(a)} queries; largest score "
                     f"difference {gap:.2g}.")  # fmt: skip
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
