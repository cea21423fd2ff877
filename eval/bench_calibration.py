"""`dotcat adapt`'s calibration: the earlier timing beside the current one, against a run's rate.

    python eval/bench_calibration.py --run runs/adapt/scifact-lr2e-5/model \\
        [--rounds 2] [--output eval/results/adapt_calibration.md]

``--run`` is a finished ``dotcat adapt`` output: its pseudo dataset (``adapt/all``) is what
both timings sample, its settings (model, batch size, GradCache chunk, lengths, precision)
are what they time, and its training step's recorded examples/s is the reference. Each round
times, in the same process:

- **before** (the baseline): batches of ``min(batch size, 16)`` after a warm-up of two
  examples, as ``measure_rates`` timed until the warm-up became a whole batch;
- **now**: batches of the run's own size after an untimed batch of that size (the default).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path

from machine import describe

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    from dotcat.training.rates import measure_rates

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a dotcat adapt output dir")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path, default=ROOT / "eval/results/adapt_calibration.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    record = json.loads((args.run / "dotcat_adapt.json").read_text())
    settings = record["settings"]
    reference = record["steps"]["training"]["result"]["examples_per_second"]
    common = dict(
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
        before = measure_rates(data, model, batch_size=min(size, 16), warmup=2, **common)
        now = measure_rates(data, model, batch_size=size, **common)
        cells = [
            f"{rate:.3f} ({rate / reference - 1:+.1%})"
            for rate in (before["examples_per_second"], now["examples_per_second"])
        ]
        rows.append(f"| {round_} | {' | '.join(cells)} |")
        print(rows[-1], flush=True)
    lines = [
        "# `dotcat adapt`'s calibration: before and now, against the run's own rate",
        "",
        f"Command: `python eval/bench_calibration.py {' '.join(sys.argv[1:])}`",
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. Machine: {describe()}.",
        "",
        f"Reference: the run's training step, {reference:.3f} examples/s (batch {size}). "
        f"Before: batches of {min(size, 16)} after a warm-up of two examples; now: batches of "
        f"{size} after an untimed batch of {size}. In brackets: off the reference.",
        "",
        "| round | before, examples/s | now, examples/s |",
        "| ---: | ---: | ---: |",
        *rows,
    ]
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
