"""Could the judged queries choose the trained index's fusion? A diagnostic over the judge
loop's own indexes (zero-shot ``index``, trained ``index-dot``): the default hybrid at each
linear dense weight on the judged queries (scored against the judgements, what a user has) and
on the test split (scored against the qrels; never used to choose anything).

    python eval/studies/judge_dot_steps/fusion_on_judged.py --loop LOOP/scifact \
        --data data/scifact --output eval/studies/judge_dot_steps/fusion_on_judged.md
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import common  # noqa: E402
from bench_precision_pipeline import hybrid_run  # noqa: E402

WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def main() -> None:
    from dotcat import PipelineConfig, SearchPipeline, evaluate, load_qrels, load_queries
    from dotcat.search.fusion import Fusion

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", type=Path, required=True, help="one collection's loop folder")
    parser.add_argument("--data", type=Path, required=True, help="the collection (test split)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    judged = load_qrels(args.loop / "judged", split="train")
    test = load_qrels(args.data, split="test")
    sets = {
        "judged (train dot's queries)": (load_queries(args.loop / "judged"), judged),
        "test": (load_queries(args.data, split="test"), test),
    }
    lines = common.header("The loop's hybrid at each fusion weight: judged queries and test")
    lines += ["| index | queries | " + " | ".join(f"linear {w}" for w in WEIGHTS) + " |"]
    lines += ["|" + " --- |" * (len(WEIGHTS) + 2)]
    for name in ("index", "index-dot"):
        pipeline = SearchPipeline(args.loop / name, PipelineConfig())
        for what, (queries, qrels) in sets.items():
            queries = {q: t for q, t in queries.items() if q in qrels}
            cells = []
            for weight in WEIGHTS:
                run = hybrid_run(pipeline, Fusion("linear", weight), queries)
                cells.append(f"{evaluate(run, qrels, ['nDCG@10']).aggregate['nDCG@10']:.4f}")
            lines.append(f"| {name} | {what} ({len(queries)}) | " + " | ".join(cells) + " |")
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
