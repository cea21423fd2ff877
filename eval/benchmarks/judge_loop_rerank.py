"""What costs a re-ranker trained by ``judge_loop.py`` on test: re-ranking depth, int8, or weight.

Run on one collection's work folder of ``judge_loop.py`` (its ``index-dot`` and a BERT_CAT
trained there), each search on the test queries as ``dotcat search`` runs it:

    python eval/benchmarks/judge_loop_rerank.py --work runs/judge-loop/scifact \\
        --model runs/judge-loop/scifact/cat-depth20 --data data/scifact

1. the model's dev-chosen weight, re-ranking the top 20 (``--depth 20``), int8 (``auto``);
2. the same in fp32;
3. the weight 0.5 at search's depth (100).

``dotcat eval`` then compares them, with ``--loop-run`` (the loop's own re-ranked run of that
model) and the loop's trained hybrid, against the zero-shot hybrid. A search whose output
exists is reused (delete it to redo).
"""

from __future__ import annotations

from pathlib import Path

import common

SEARCHES = {
    "rerank-alpha1-depth20-int8.trec": ("--depth", "20"),
    "rerank-alpha1-depth20-fp32.trec": ("--depth", "20", "--precision", "fp32"),
    "rerank-alpha0.5-depth100.trec": ("--interpolate", "0.5"),
}


def main() -> None:
    p = common.parser(__doc__, output="judge_loop_rerank.md")
    p.add_argument("--work", type=Path, required=True, help="a judge_loop.py collection folder")
    p.add_argument("--model", type=Path, required=True, help="the BERT_CAT trained there")
    p.add_argument("--data", type=Path, required=True, help="the BEIR directory (test split)")
    p.add_argument("--loop-run", default="trained-hybrid-plus-BERT_CAT.depth20.trec")
    args = p.parse_args()
    work = args.work
    for name, options in SEARCHES.items():
        out = work / name
        if not out.exists():
            common.dotcat("search", work / "index-dot", "--rerank", args.model, *options,
                          "--queries", args.data, "--split", "test", "--output", out)  # fmt: skip
    runs = [args.loop_run, *SEARCHES, "trained-hybrid.trec", "zero-shot-hybrid.trec"]
    table, _ = common.dotcat("eval", *(work / r for r in runs), args.data, "--split", "test",
                             "--baseline", "zero-shot-hybrid.trec", "-m", "nDCG@10",
                             capture=True)  # fmt: skip
    rows = [line for line in table.splitlines() if line.startswith("|")]
    lines = [
        *common.header(
            "The loop's re-ranker searched other ways (depth, precision, weight)", torch=True
        ),
        f"Work folder `{work}`, model `{args.model}`, {args.data}'s test queries. "
        f"`{args.loop_run}` is the loop's own search with that model (depth 100, its dev-chosen "
        "weight, `auto` precision: int8 through OpenVINO on a VNNI CPU). Searches:",
        "",
        *(
            f"- `{name}`: `dotcat search index-dot --rerank MODEL {' '.join(options)}`"
            for name, options in SEARCHES.items()
        ),  # fmt: skip
        "",
        *rows,
        "",
        "p: paired t-test, Holm-corrected; † significant at 0.05.",
    ]
    print("\n".join(lines))
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
