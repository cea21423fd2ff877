"""Would dynamic int8 re-ranking pass the agreement bar? dotcat fp32 vs int8, same pairs, same run.

    python eval/rerank_int8_agreement.py [--model runs/cat/lce] [--n-queries 4] [--depth 20]

The pairs are those of ``bench_rerank_throughput.py`` (SciFact test queries with their BM25
top ``depth``), scored one query at a time by dotcat's ``CrossEncoder.score`` in fp32 (the
baseline), then again after ``torch.ao.quantization.quantize_dynamic`` turned every
``nn.Linear`` into int8. Reported: pairs/s of each, the ratio, and the Spearman correlation and
max absolute difference of the int8 logits against fp32 (the re-ranking bar is Spearman
>= 0.999). Writes ``eval/results/rerank_int8_agreement.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from bench_rerank_throughput import make_pairs, spearman  # eval/, run as python eval/NAME.py
from machine import cpu_model

ROOT = Path(__file__).resolve().parent.parent


def timed_scores(ce, per_query: list[list[tuple[str, str]]]) -> tuple[np.ndarray, float]:
    """Logits of every pair, one query's pairs per call, after one warm-up call."""
    ce.score([q for q, _ in per_query[0]], [d for _, d in per_query[0]])
    start = time.perf_counter()
    out = [ce.score([q for q, _ in chunk], [d for _, d in chunk]) for chunk in per_query]
    return np.concatenate(out), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/cat/lce", help="a cross-encoder directory")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "scifact")
    parser.add_argument("--n-queries", type=int, default=4)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument(
        "--output", type=Path, default=ROOT / "eval" / "results" / "rerank_int8_agreement.md"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    per_query = make_pairs(args.data, args.n_queries, args.depth)
    n = sum(len(chunk) for chunk in per_query)
    ce = CrossEncoder.load(CrossEncoderConfig(model=args.model, device="cpu"))
    fp32, fp32_s = timed_scores(ce, per_query)
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        ce.model = torch.ao.quantization.quantize_dynamic(
            ce.model, {torch.nn.Linear}, dtype=torch.qint8
        )
    int8, int8_s = timed_scores(ce, per_query)
    rho = spearman(fp32, int8)
    max_diff = float(np.abs(fp32 - int8).max())

    lines = [
        "# Re-ranking with dynamic int8: agreement with fp32 and speed",
        "",
        f"Command: `python {' '.join(sys.argv)}`",
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. Machine: {cpu_model()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} "
        "threads), no GPU.",
        f"Model: `{args.model}` (max length {ce.max_length}). Pairs: {args.n_queries} SciFact "
        f"test queries x BM25 top {args.depth} = {n} pairs, one query per call. Baseline: "
        "dotcat fp32 on the same pairs in the same run.",
        "",
        "| scorer | pairs/s | ratio |",
        "| --- | ---: | ---: |",
        f"| dotcat fp32 | {n / fp32_s:.1f} | 1.00 |",
        f"| dotcat, Linear layers dynamic int8 | {n / int8_s:.1f} | {fp32_s / int8_s:.2f} |",
        "",
        f"int8 logits against fp32: Spearman {rho:.6f}, max |difference| {max_diff:.2f} "
        f"(fp32 logits range {fp32.min():.2f} to {fp32.max():.2f}).",
    ]
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
