"""`dotcat adapt`'s calibration: timed on small batches or on whole ones, against a run's rate.

    python eval/studies/adapt_calibration/bench_calibration.py \\
        --run runs/adapt/scifact-lr2e-5/model [--rounds 2] [--output adapt_calibration.md]

``--run`` is a finished ``dotcat adapt`` output: its pseudo dataset (``adapt/all``) is what
both timings sample, its settings (model, batch size, GradCache chunk, lengths, precision)
are what they time, and its training step's recorded examples/s is the reference. Each round
times, in the same process:

- **small batches** (the baseline): batches of ``min(batch size, 16)`` after a warm-up of
  two examples;
- **whole batches**: batches of the run's own size after an untimed batch of that size
  (``measure_rates``' default).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common


def main() -> None:
    from dotcat.training.rates import measure_rates

    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "adapt_calibration.md")
    parser.add_argument("--run", type=Path, required=True, help="a dotcat adapt output dir")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    record = json.loads((args.run / "dotcat_adapt.json").read_text())
    settings = record["settings"]
    reference = record["steps"]["training"]["result"]["examples_per_second"]
    shared = dict(
        chunk_size=settings["cache_chunk"],
        max_length=settings["max_length"],
        query_max_length=settings["query_max_length"],
        bf16=settings["bf16"],
        device=settings["device"],
        negatives=settings["n_negatives"] if settings.get("teacher") else 1,
    )
    data, model, size = args.run / "adapt" / "all", settings["model"], settings["batch_size"]
    rows = []
    for round_ in range(1, args.rounds + 1):
        small = measure_rates(data, model, batch_size=min(size, 16), warmup=2, **shared)
        whole = measure_rates(data, model, batch_size=size, **shared)
        cells = [
            f"{rate:.3f} ({rate / reference - 1:+.1%})"
            for rate in (small["examples_per_second"], whole["examples_per_second"])
        ]
        rows.append(f"| {round_} | {' | '.join(cells)} |")
        print(rows[-1], flush=True)
    lines = [
        *common.header(
            "`dotcat adapt`'s calibration: small batches and whole ones, against the run's rate"
        ),
        f"Reference: the run's training step, {reference:.3f} examples/s (batch {size}). "
        f"Small: batches of {min(size, 16)} after a warm-up of two examples; whole: batches of "
        f"{size} after an untimed batch of {size}. In brackets: off the reference.",
        "",
        "| round | small batches, examples/s | whole batches, examples/s |",
        "| ---: | ---: | ---: |",
        *rows,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
