"""The rule end to end: ``dotcat index``'s fusion choice on a built index, then the default
pipeline's test nDCG@10 (issue 56's acceptance: SciFact with the README's ``train dot`` model).

A copy of ``--index`` (an index of ``--data``, e.g. one an older dotcat tuned by argmax) is
re-tuned with :func:`dotcat.tuning.tune_fusion` (the paired one-standard-error rule) and the
default pipeline (hybrid, no re-ranker) of the copy is judged on the test split:

    python eval/studies/choices/verify_index.py --index indexes/scifact-dot
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import common  # noqa: E402
from dotcat import evaluate  # noqa: E402
from dotcat.data.qrels import load_qrels  # noqa: E402
from dotcat.data.queries import load_queries  # noqa: E402
from dotcat.index.manifest import Manifest  # noqa: E402
from dotcat.search.pipeline import PipelineConfig, SearchPipeline  # noqa: E402
from dotcat.tuning import tune_fusion  # noqa: E402

MEASURE = "nDCG@10"


def main() -> None:
    parser = common.parser(
        __doc__, output=Path(__file__).parent / "verify_index.md", data=common.SCIFACT,
        work="runs/choices/verify_index",
    )  # fmt: skip
    parser.add_argument("--index", type=Path, required=True)
    args = parser.parse_args()
    common.setup_logging()
    copy = args.work / "index"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(args.index, copy)
    before = Manifest.read(copy).fusion
    fusion = tune_fusion(copy, args.data)
    pipeline = SearchPipeline(copy, PipelineConfig())
    queries = load_queries(args.data, split="test")
    run = pipeline.run(queries, 100)
    score = evaluate(run, load_qrels(args.data, split="test"), measures=[MEASURE])
    dev = Manifest.read(copy).fusion["dev"]
    lines = common.header(
        "The choice rule end to end: an index's fusion, then the default pipeline on test",
        f"Encoder precision: {pipeline.manifest.encoder.get('precision')}.",
    )
    lines += [
        f"Index: `{common.shown(args.index)}` (its encoder `{pipeline.manifest.encoder['name']}`);"
        f" its recorded fusion before: {before.get('method')} {before.get('weight')}.",
        "",
        f"Dev ({dev['source']}, {dev['queries']} queries), {MEASURE} and the paired standard "
        "error of each point's difference from the best:",
        "",
        "| fusion | dev | standard error | tied |",
        "| --- | --- | --- | --- |",
    ]
    for point in dev["grid"]:
        tied = "yes" if point in dev["tied"] else ""
        lines.append(
            f"| {point} | {dev['scores'][point]:.4f} | {dev['errors'][point]:.4f} | {tied} |"
        )
    lines += [
        "",
        f"Chosen: {fusion.describe()}: {dev['reason']}.",
        "",
        f"The default pipeline ({pipeline.first_stage}, {pipeline.fusion.describe()}): test "
        f"{MEASURE} {score.aggregate[MEASURE]:.4f} over {len(run)} queries.",
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
