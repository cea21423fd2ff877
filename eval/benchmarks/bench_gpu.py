"""SciFact end to end on a GPU machine: the CPU path against the CUDA path, same run.

    python eval/benchmarks/bench_gpu.py [--model default] [--data data/scifact] [--work runs/gpu]
                                        [--output eval/benchmarks/results/gpu.md]

Runs ``dotcat index`` then ``dotcat search --queries`` (test split, k = 100) three times, as a
user would, on one machine: ``--device cpu --precision fp32`` (the baseline), ``--device cuda
--precision fp32`` and ``--device cuda --precision auto`` (bf16 on GPUs that have it). Reports
each one's index and search wall time (model load included) and its ratio to the CPU baseline,
SciFact test nDCG@10 / R@100, and how far each GPU run is from the CPU run: the share of
queries whose top 10 is the same list, and the largest score difference over shared hits.
Nothing here needs a GPU to be read; on a machine without one it stops with a clear message.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

import common

SETTINGS = {
    "cpu fp32 (baseline)": ("cpu", "fp32"),
    "cuda fp32": ("cuda", "fp32"),
    "cuda auto": ("cuda", "auto"),
}
MEASURES = ["nDCG@10", "R@100"]


def dotcat(*args: str) -> tuple[str, float]:
    """``dotcat ARGS`` in a new process: stdout and wall seconds."""
    return common.dotcat(*args, capture=True)


def read_run(path: Path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run as query id -> [(doc id, score)] in rank order."""
    run: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, []).append((doc, float(score)))
    return run


def agreement(run: dict, baseline: dict) -> tuple[float, float]:
    """Share of queries with the same top-10 list, and the largest |score difference| over
    the documents both runs return for a query."""
    same = sum([d for d, _ in run[q][:10]] == [d for d, _ in baseline[q][:10]] for q in baseline)
    largest = 0.0
    for q, hits in baseline.items():
        theirs = dict(run.get(q, []))
        largest = max([largest, *(abs(theirs[d] - s) for d, s in hits if d in theirs)])
    return same / len(baseline), largest


def main() -> None:
    parser = common.parser(__doc__, output="gpu.md", data=common.SCIFACT, work="runs/gpu")
    parser.add_argument("--model", default="default")
    parser.add_argument("--note", default="", help="A line on where the model came from.")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_gpu: no CUDA GPU on this machine")
    args.work.mkdir(parents=True, exist_ok=True)

    rows, runs = {}, {}
    for name, (device, precision) in SETTINGS.items():
        tag = name.split(" (")[0].replace(" ", "-")
        index, run_file = args.work / f"index-{tag}", args.work / f"{tag}.trec"
        out, index_s = dotcat(
            "index",
            str(args.data),
            str(index),
            "--model",
            args.model,
            "--device",
            device,
            "--precision",
            precision,
            "--overwrite",
        )
        _, search_s = dotcat(
            "search",
            str(index),
            "--queries",
            str(args.data),
            "--split",
            "test",
            "-k",
            "100",
            "--first-stage",
            "dense",
            "--device",
            device,
            "--precision",
            precision,
            "--output",
            str(run_file),
        )
        report, _ = dotcat("eval", str(run_file), str(args.data), "--split", "test", "--json")
        scores = json.loads(report)[run_file.name]["aggregate"]
        manifest = json.loads((index / "manifest.json").read_text())
        rows[name] = dict(
            index_s=index_s,
            search_s=search_s,
            docs=manifest["documents"]["count"],
            encoder=manifest.get("encoder", {}).get("precision", precision),
            **{m: scores[m] for m in MEASURES},
        )
        runs[name] = read_run(run_file)

    baseline_name = next(iter(SETTINGS))
    base = rows[baseline_name]
    lines = common.header(
        "SciFact on a GPU machine: the CPU path against the CUDA path", torch=True
    )
    if args.note:
        lines += [f"Model: {args.note}", ""]
    lines += [
        "Each row: `dotcat index` (the corpus, wall time with model load) and `dotcat search "
        "--queries` (300 test queries, k = 100, dense), then `dotcat eval`. Ratios are against "
        f"the {baseline_name} row, measured in the same run; agreement is with that row.",
        "",
        "| setting | encoder | index s | x | search s | x | nDCG@10 | R@100 | same top 10 | "
        "max score diff |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in rows.items():
        same, diff = agreement(runs[name], runs[baseline_name])
        lines.append(
            f"| {name} | {row['encoder']} | "
            f"{row['index_s']:.1f} | {base['index_s'] / row['index_s']:.2f} | "
            f"{row['search_s']:.1f} | {base['search_s'] / row['search_s']:.2f} | "
            f"{row['nDCG@10']:.4f} | {row['R@100']:.4f} | {same:.1%} | {diff:.2e} |"
        )
    print("\n".join(lines))
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
