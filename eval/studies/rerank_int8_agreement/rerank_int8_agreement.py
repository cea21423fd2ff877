"""Would dynamic int8 re-ranking pass the agreement bar? dotcat fp32 vs int8, same pairs, same run.

    python eval/studies/rerank_int8_agreement/rerank_int8_agreement.py [--model runs/cat/lce] \\
        [--n-queries 4] [--depth 20]

The pairs are those of ``eval/benchmarks/bench_rerank_throughput.py`` (SciFact test queries
with their BM25 top ``depth``), scored one query at a time by dotcat's ``CrossEncoder.score`` in
fp32 (the baseline), then again after ``torch.ao.quantization.quantize_dynamic`` turned every
``nn.Linear`` into int8. Reported: pairs/s of each, the ratio, and the Spearman correlation and
max absolute difference of the int8 logits against fp32 (the re-ranking bar is Spearman
>= 0.999). Writes ``rerank_int8_agreement.md`` beside this script.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common
from bench_rerank_throughput import make_pairs, spearman


def timed_scores(ce, per_query: list[list[tuple[str, str]]]) -> tuple[np.ndarray, float]:
    """Logits of every pair, one query's pairs per call, after one warm-up call."""
    ce.score([q for q, _ in per_query[0]], [d for _, d in per_query[0]])
    start = time.perf_counter()
    out = [ce.score([q for q, _ in chunk], [d for _, d in chunk]) for chunk in per_query]
    return np.concatenate(out), time.perf_counter() - start


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "rerank_int8_agreement.md", data=common.SCIFACT)
    parser.add_argument("--model", default="runs/cat/lce", help="a cross-encoder directory")
    parser.add_argument("--n-queries", type=int, default=4)
    parser.add_argument("--depth", type=int, default=20)
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
        *common.header("Re-ranking with dynamic int8: agreement with fp32 and speed", torch=True),
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
    print("\n".join(lines))
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
