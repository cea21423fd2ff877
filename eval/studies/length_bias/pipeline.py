"""The default pipeline before and after issue 68, on every collection's **test** queries.

    python eval/studies/length_bias/indexes.py      # the indexes (cached)
    python eval/studies/length_bias/pipeline.py [--collections ...]

``today``: the ``x16`` index (documents longer than 16 windows split, MaxP), searched as it was
built (its fusion chosen on the dev queries with MaxP). ``new``: the ``x2`` index (documents
longer than 2 windows split) with the default aggregation of this checkout, its fusion chosen
again on the dev queries as ``dotcat index`` chooses it now (:func:`dotcat.tuning.tune_fusion`,
written into a copy of the index's manifest; the mixed folder has no dev queries: linear 0.5).
Both are ``SearchPipeline(index).run(...)``, the default hybrid, top 100; nDCG@10 with a paired
t-test. The mixed folder also reports dense recall@10 of its tail queries (a sentence from the
middle or the end of a document of 2-16 or more windows, and pylib's docstring queries) on the
half of its queries ``candidates.py`` did not see (documents at odd positions).

Writes ``pipeline.md`` and ``pipeline.json`` beside this script.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
from candidates import DATA, GROUPS, MIXED, by_kind, index_dir, mixed_half

import common

HERE = Path(__file__).resolve().parent
K = 100


def new_index(work: Path, name: str) -> Path:
    """The ``x2`` index with its fusion chosen again under the default aggregation (a copy
    whose large files are links to the built ones)."""
    from dotcat.tuning import tune_fusion

    built, out = index_dir(work, name, "x2"), work / name / "x2-now"
    if not (out / "manifest.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for path in built.iterdir():
            if path.name == "manifest.json":
                shutil.copy(path, out / path.name)
            elif path.name != "seconds.txt":
                (out / path.name).symlink_to(path.resolve())
        if name != MIXED:
            tune_fusion(out, DATA[name])
    return out


def evaluate_pair(name: str, work: Path) -> dict:
    """Test nDCG@10 of the default pipeline on both indexes (and the mixed folder's dense
    recall@10 by kind)."""
    from dotcat.data import load_qrels, load_queries
    from dotcat.evaluation import evaluate
    from dotcat.evaluation.significance import paired_ttest
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    if name == MIXED:
        held = mixed_half(DATA[name], 1)
        queries, qrels = held.queries, held.qrels
    else:
        queries, qrels = load_queries(DATA[name], split="test"), load_qrels(DATA[name], "test")
    out: dict = {"queries": len(queries)}
    reports = {}
    sides = {"today": (index_dir(work, name, "x16"), PipelineConfig(aggregation="maxp")),
             "new": (new_index(work, name), PipelineConfig())}  # fmt: skip
    for side, (index, config) in sides.items():
        pipeline = SearchPipeline(index, config)
        reports[side] = evaluate(pipeline.run(queries, K, show_progress=False), qrels,
                                 measures=["nDCG@10"])  # fmt: skip
        out[side] = float(reports[side].aggregate["nDCG@10"])
        out[f"{side} fusion"] = pipeline.fusion.describe()
        out[f"{side} aggregation"] = pipeline.config.aggregation
        if name == MIXED:
            dense = evaluate(pipeline.run(queries, K, first_stage="dense", show_progress=False),
                             qrels, measures=["R@10"])  # fmt: skip
            kinds = json.loads((DATA[MIXED] / "kinds.json").read_text())
            out[f"{side} tail"] = {g: by_kind(dense, "R@10", kinds, GROUPS[g]) for g in GROUPS}
    test = paired_ttest(reports["today"], reports["new"], "nDCG@10")
    out["p"] = float(test.pvalue)
    out["per query"] = {s: {q: v["nDCG@10"] for q, v in r.per_query.items()}
                        for s, r in reports.items()}  # fmt: skip
    return out


def main() -> None:
    p = common.parser(__doc__, output=HERE / "pipeline.md", work="runs/length_bias")
    p.add_argument("--collections", nargs="+", default=list(DATA), choices=list(DATA))
    args = p.parse_args()
    common.setup_logging()
    rows = {}
    for name in args.collections:
        rows[name] = evaluate_pair(name, args.work)
        print(name, rows[name]["today"], rows[name]["new"], rows[name]["p"], flush=True)
    lines = common.header(
        "The default pipeline before and after issue 68: test nDCG@10",
        "Encoder: the default (all-MiniLM-L6-v2) at `auto` precision; `today`: documents longer "
        "than 16 windows split, MaxP; `new`: longer than 2 windows split, this checkout's "
        "default aggregation, the fusion chosen again on dev.",
        torch=True,
    )
    lines += [
        "| collection | queries | today | new | new - today | p (paired t) | fusion today / new |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['queries']} | {r['today']:.4f} | {r['new']:.4f} "
            f"| {r['new'] - r['today']:+.4f} | {r['p']:.2g} | {r['today fusion']} / "
            f"{r['new fusion']} |"
        )
    shifts = [r["new"] - r["today"] for n, r in rows.items() if n != MIXED]
    lines += ["", f"Mean over the collections (mixed folder aside): {np.mean(shifts):+.4f}."]
    if MIXED in rows:
        r = rows[MIXED]
        lines += [
            "",
            "Mixed folder, held-out half: dense recall@10 by query kind and document length "
            "(windows of 256 tokens; queries in brackets).",
            "",
            "| rule | " + " | ".join(f"{g} ({r['today tail'][g][1]})" for g in GROUPS) + " |",
            "| --- | " + " | ".join("---:" for _ in GROUPS) + " |",
        ]
        for side in ("today", "new"):
            cells = " | ".join(f"{r[f'{side} tail'][g][0]:.3f}" for g in GROUPS)
            lines.append(f"| {side} | {cells} |")
    common.write(args.output, lines + [""])
    args.output.with_suffix(".json").write_text(json.dumps(rows, default=str) + "\n")


if __name__ == "__main__":
    main()
