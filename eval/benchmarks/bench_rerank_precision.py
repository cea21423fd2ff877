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


def first_stage(name: str, data: Path, index: Path, work: Path, n: int) -> Path:
    """The first stage's test run, cut to ``n`` queries (all with fewer)."""
    run = work / "first.trec"
    if run.exists():
        return run
    if not index.exists():
        from dotcat.data import find_corpus_file

        common.dotcat("index", find_corpus_file(data), index)
    whole = work / "first-all.trec"
    common.dotcat("search", index, "--queries", data, "--split", "test", "--output", whole)
    lines = whole.read_text().splitlines()
    qids = sorted({line.split()[0] for line in lines})
    kept = set(random.Random(SEED).sample(qids, min(n, len(qids))))
    run.write_text("".join(f"{line}\n" for line in lines if line.split()[0] in kept))
    return run


def per_query(run: Path, data: Path) -> dict[str, float]:
    """nDCG@10 of each query of ``run`` (ir-measures, the test qrels)."""
    import ir_measures

    from dotcat.data import load_qrels

    qrels = [
        ir_measures.Qrel(q, d, int(g))
        for q, docs in load_qrels(data, split="test").items()
        for d, g in docs.items()
    ]
    run_rows = ir_measures.read_trec_run(str(run))
    out = {
        m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.nDCG @ 10], qrels, run_rows)
    }
    queried = {line.split()[0] for line in run.read_text().splitlines()}
    return {q: out.get(q, 0.0) for q in queried}


def study(name: str, args) -> list[dict]:
    """Every path's run and figures on one collection."""
    from scipy.stats import ttest_rel

    data, work = common.COLLECTIONS[name], args.work / name
    work.mkdir(parents=True, exist_ok=True)
    first = first_stage(name, data, Path(args.index.format(name)), work, args.queries)
    figures = {"first stage": per_query(first, data)}
    for path in args.paths.split(","):
        out = work / f"{path}.trec"
        if not out.exists():
            weight = ("--interpolate", args.interpolate) if args.interpolate else ()
            common.dotcat("rerank", first, data, args.cat, "--split", "test", "--depth",
                          args.depth, *weight, *PATHS[path], "--output", out)  # fmt: skip
        figures[path] = per_query(out, data)
    qids = sorted(figures["first stage"])
    base = [figures["fp32"][q] for q in qids]
    rows = []
    for label, values in figures.items():
        v = [values[q] for q in qids]
        mean, ref = sum(v) / len(v), sum(base) / len(base)
        p = 1.0 if v == base else float(ttest_rel(v, base).pvalue)
        rows.append({"collection": name, "system": label, "queries": len(qids),
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
