"""The re-ranker's precision judged on the pipeline a person runs: ``search`` then ``--rerank``,
nDCG@10 at each path against fp32, over several collections, on this CPU's kernels.

    python eval/benchmarks/bench_rerank_precision.py --cat runs/cat-avx2 \\
        [--collections scifact,pylib,faq,pydoc,debian,man] [--paths fp32,int8-ort] \\
        [--queries 100] [--depth 20] [--interpolate 1] \\
        [--index 'runs/precision_avx2/{}/index-int8-onnxruntime']

Per collection: the first stage is ``dotcat search INDEX --queries DATA --split test`` (the
hybrid, as the index was built; ``--index`` names it, ``{}`` the collection; built with
``dotcat index`` where missing), cut to ``--queries`` test queries drawn with a fixed seed (the
same for every path). Each path then re-ranks that one run with ``dotcat rerank``, the model's
recorded interpolation weight (or ``--interpolate``; 1: the cross-encoder's order alone, the
most sensitive to its precision), depth ``--depth``: ``fp32`` (PyTorch), ``int8-ort`` (ONNX
Runtime's int8 export: the 7-bit ``reduce_range`` weights on a CPU without VNNI),
``int8-ov`` (OpenVINO int8). Reported: the first stage's and each path's nDCG@10, the
retention (path / fp32), and a paired t-test of the path against fp32 over the queries, the
bar ``auto`` keeps (docs/precision.md: the mean >= 99.8%, none significantly below fp32, none
under 98.5%). Runs are cached under ``--work``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import common

PATHS = {
    "fp32": ("--precision", "fp32"),
    "int8-ort": ("--precision", "int8", "--rerank-backend", "onnxruntime"),
    "int8-ov": ("--precision", "int8", "--rerank-backend", "openvino"),
}
SEED = 42


def first_stage(
    name: str, data: Path, index: Path, work: Path, n: int, split: str = "test"
) -> Path:
    """The first stage's run of the ``split`` queries, cut to ``n`` drawn with :data:`SEED`
    (all with fewer)."""
    tail = "" if split == "test" else f"-{split}"
    run = work / f"first{tail}.trec"
    if run.exists():
        return run
    if not index.exists():
        from dotcat.data import find_corpus_file

        common.dotcat("index", find_corpus_file(data), index)
    whole = work / f"first{tail}-all.trec"
    common.dotcat("search", index, "--queries", data, "--split", split, "--output", whole)
    lines = whole.read_text().splitlines()
    qids = sorted({line.split()[0] for line in lines})
    kept = set(random.Random(SEED).sample(qids, min(n, len(qids))))
    run.write_text("".join(f"{line}\n" for line in lines if line.split()[0] in kept))
    return run


def report(run: Path, data: Path):
    """nDCG@10 of each query of ``run`` against the test qrels (:func:`dotcat.evaluation.evaluate`
    over the run's own queries)."""
    from dotcat.data import load_qrels
    from dotcat.data.runs import read_run
    from dotcat.evaluation import evaluate

    found = read_run(run)
    return evaluate(found, load_qrels(data, split="test"), ["nDCG@10"], known_queries=found)


def study(name: str, args) -> list[dict]:
    """Every path's run and figures on one collection."""
    from dotcat.evaluation.significance import paired_ttest

    data, work = common.COLLECTIONS[name], args.work / name
    work.mkdir(parents=True, exist_ok=True)
    first = first_stage(name, data, Path(args.index.format(name)), work, args.queries)
    reports = {"first stage": report(first, data)}
    for path in args.paths.split(","):
        out = work / f"{path}.trec"
        if not out.exists():
            weight = ("--interpolate", args.interpolate) if args.interpolate else ()
            common.dotcat("rerank", first, data, args.cat, "--split", "test", "--depth",
                          args.depth, *weight, *PATHS[path], "--output", out)  # fmt: skip
        reports[path] = report(out, data)
    base = reports["fp32"]
    rows = []
    for label, r in reports.items():
        mean, ref = r.aggregate["nDCG@10"], base.aggregate["nDCG@10"]
        same = r.per_query == base.per_query
        p = 1.0 if same else paired_ttest(base, r, "nDCG@10").pvalue
        rows.append({"collection": name, "system": label, "queries": len(r.per_query),
                     "ndcg": mean, "retention": mean / ref, "p": p})  # fmt: skip
    return rows


def main() -> None:
    parser = common.parser(__doc__, output="rerank_precision.md", work="runs/rerank_precision")
    parser.add_argument("--cat", type=Path, required=True, help="a trained BERT_CAT")
    parser.add_argument("--collections", default="scifact,pylib,faq,pydoc,debian,man")
    parser.add_argument("--paths", default="fp32,int8-ort")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--interpolate", help="the re-ranker's weight (default: its recorded)")
    parser.add_argument("--index", default="runs/precision_avx2/{}/index-int8-onnxruntime")
    args = parser.parse_args()
    rows = [row for name in args.collections.split(",") for row in study(name, args)]
    (args.work / "rerank_precision.json").write_text(json.dumps(rows, indent=1))
    lines = common.header(
        "The re-ranker's precision on the searched pipeline: nDCG@10 against fp32",
        f"Re-ranker: `{common.shown(args.cat)}`, depth {args.depth}, interpolation weight "
        f"{args.interpolate or 'its recorded one'}; first stage: `{args.index}` searched as "
        "`dotcat search` searches it.",
    )
    lines += ["| collection | system | queries | nDCG@10 | of fp32's | p (paired t vs fp32) |",
              "| --- | --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['collection']} | {r['system']} | {r['queries']} | {r['ndcg']:.4f} | "
                     f"{r['retention']:.2%} | {r['p']:.2g} |")  # fmt: skip
    lines += ["", "| path | mean of fp32's | lowest | lowest p |", "| --- | ---: | ---: | ---: |"]
    for path in args.paths.split(","):
        mine = [r for r in rows if r["system"] == path]
        mean = sum(r["retention"] for r in mine) / len(mine)
        lines.append(f"| {path} | {mean:.2%} | {min(r['retention'] for r in mine):.2%} | "
                     f"{min(r['p'] for r in mine):.2g} |")  # fmt: skip
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
