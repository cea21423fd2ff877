"""Each first stage alone and fused, on the ``after`` indexes of ``compare.py``.

    python eval/studies/bm25_words/compare.py ...     # the indexes (cached)
    python eval/studies/bm25_words/stages.py [--collections man-ja man-zh man]

What the default English encoder gives a folder in another script: dense alone, BM25 alone,
the hybrid with its fusion chosen on dev (what ``dotcat index`` records where the data has dev
queries), linear 0.5 (what a folder without dev queries gets) and RRF; test nDCG@10 of
``SearchPipeline(index).run(...)``, top 100.

Writes ``stages.md`` beside this script.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

HERE = Path(__file__).resolve().parent
K = 100
DATA = {
    **common.COLLECTIONS,
    **{n: common.ROOT / "runs/collections" / n for n in ("man-ja", "man-zh", "man-ru")},
}
#: (label, PipelineConfig settings, first stage)
STAGES = [
    ("dense", {}, "dense"),
    ("BM25", {}, "bm25"),
    ("hybrid, fusion chosen on dev", {}, "hybrid"),
    ("hybrid, linear 0.5", {"fusion": "linear", "fusion_weight": 0.5}, "hybrid"),
    ("hybrid, linear 0.3", {"fusion": "linear", "fusion_weight": 0.3}, "hybrid"),
    ("hybrid, RRF", {"fusion": "rrf"}, "hybrid"),
]


def main() -> None:
    from dotcat.data import load_qrels, load_queries
    from dotcat.evaluation import evaluate
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    p = common.parser(__doc__, output=HERE / "stages.md", work="runs/bm25_words")
    p.add_argument("--collections", nargs="+", default=["man-ja", "man-zh", "man-ru", "man"])
    args = p.parse_args()
    common.setup_logging()
    lines = common.header(
        "First stages alone and fused (BM25 in this checkout's words): test nDCG@10",
        "Encoder: the default (all-MiniLM-L6-v2, English) at `auto` precision.",
        torch=True,
    )
    lines += ["| collection | " + " | ".join(s[0] for s in STAGES) + " |",
              "| --- |" + " ---: |" * len(STAGES)]  # fmt: skip
    for name in args.collections:
        index = args.work / name / "after"
        queries, qrels = load_queries(DATA[name], split="test"), load_qrels(DATA[name], "test")
        cells = []
        for _, settings, stage in STAGES:
            pipeline = SearchPipeline(index, PipelineConfig(**settings))
            run = pipeline.run(queries, K, first_stage=stage, show_progress=False)
            cells.append(evaluate(run, qrels, measures=["nDCG@10"]).aggregate["nDCG@10"])
        lines.append(f"| {name} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
        print(lines[-1], flush=True)
    common.write(args.output, lines + [""])


if __name__ == "__main__":
    main()
