"""Re-ranking throughput: dotcat's CrossEncoder.score against sentence-transformers, same run.

    python eval/benchmarks/bench_rerank_throughput.py [--model runs/cat/lce] [--n-queries 10]
        [--depth 50] [--max-length 256] [--batch-size 32] [--rounds 3] [--precisions auto,bf16]

The pairs are what re-ranking scores: SciFact test queries with their BM25 top ``depth``
documents (``title + " " + text``). Both sides load the same cross-encoder directory with the
same max length; ``sentence_transformers.CrossEncoder.predict(pairs, batch_size)`` (identity
activation: logits) and ``dotcat.models.cross_encoder.CrossEncoder.score`` are warmed up, then
timed on the same pairs, one query's pairs at a time as re-ranking does, alternating which goes
first each round (the machine may be shared). dotcat runs once per ``--precisions`` entry
(``auto``: what this CPU gets by default; ``int8`` runs on the re-ranker's default int8
runtime). Reported: pairs/s of each, the ratio, and the Spearman correlation and max absolute
difference of dotcat's scores against sentence-transformers' fp32 scores. Writes
``eval/benchmarks/results/rerank_throughput.md``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

import common


def make_pairs(data: Path, n_queries: int, depth: int) -> list[list[tuple[str, str]]]:
    """Per query, its BM25 top-``depth`` (query, document text) pairs."""
    from dotcat.data import load_corpus, load_queries
    from dotcat.search.lexical import bm25_search
    from dotcat.search.reranker import corpus_texts

    queries = dict(list(load_queries(data, split="test").items())[:n_queries])
    corpus = load_corpus(data)
    run = bm25_search(corpus, queries, k=depth)
    texts = corpus_texts(corpus, {d for docs in run.values() for d, _ in docs})
    return [[(queries[q], texts[d]) for d, _ in docs] for q, docs in run.items()]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def main() -> None:
    parser = common.parser(__doc__, output="rerank_throughput.md", data=common.SCIFACT)
    parser.add_argument("--model", default="runs/cat/lce", help="a cross-encoder directory")
    parser.add_argument("--n-queries", type=int, default=10)
    parser.add_argument("--depth", type=int, default=50)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precisions", default="auto", help="dotcat precisions, comma-separated")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda, for both sides")
    parser.add_argument(
        "--dotcat-batch-size",
        type=int,
        default=32,
        help="dotcat's pairs per pass (sentence-transformers gets --batch-size)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from sentence_transformers import CrossEncoder as STCrossEncoder

    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    per_query = make_pairs(args.data, args.n_queries, args.depth)
    pairs = [p for chunk in per_query for p in chunk]
    n = len(pairs)
    ours = {
        p: CrossEncoder.load(
            CrossEncoderConfig(
                model=args.model,
                max_length=args.max_length,
                device=args.device,
                precision=p,
                batch_size=args.dotcat_batch_size,
            )
        )
        for p in args.precisions.split(",")
    }
    theirs = STCrossEncoder(args.model, device=args.device, max_length=args.max_length)
    identity = torch.nn.Identity()

    def run_st() -> np.ndarray:
        return np.concatenate(
            [
                theirs.predict(
                    chunk,
                    batch_size=args.batch_size,
                    activation_fn=identity,
                    show_progress_bar=False,
                )
                for chunk in per_query
            ]
        )

    def dotcat_runner(model):
        def run() -> np.ndarray:
            return np.concatenate(
                [model.score([q for q, _ in chunk], [d for _, d in chunk]) for chunk in per_query]
            )

        return run

    names = {p: f"dotcat {m.precision} ({m.backend})" for p, m in ours.items()}
    runners = [("sentence-transformers", run_st)]
    runners += [(names[p], dotcat_runner(m)) for p, m in ours.items()]
    for _, fn in runners:  # warm-up on one query's pairs each
        fn()

    times = dict.fromkeys((name for name, _ in runners), 0.0)
    scores: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        order = runners[r % len(runners) :] + runners[: r % len(runners)]
        for name, fn in order:
            start = time.perf_counter()
            scores[name] = fn()
            times[name] += time.perf_counter() - start
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))

    st_rate = n * args.rounds / times["sentence-transformers"]
    lines = [
        *common.header(
            "Re-ranking throughput: dotcat vs sentence-transformers CrossEncoder.predict",
            torch=True,
        ),
        f"Model: `{args.model}` (max length {args.max_length} tokens per pair; "
        f"sentence-transformers fp32). Pairs: {args.n_queries} SciFact test queries x BM25 top "
        f"{args.depth} = {n} pairs, scored one query at a time, {args.rounds} rounds rotating "
        f"the order; sentence-transformers with `batch_size={args.batch_size}`, dotcat with "
        f"{args.dotcat_batch_size} pairs per pass; device {args.device}.",
        "",
        "| scorer | pairs/s | ratio | Spearman vs ST fp32 | max abs diff |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| sentence-transformers `CrossEncoder.predict` | {st_rate:.1f} | 1.00 | 1 | 0 |",
    ]
    for name in names.values():
        rate = n * args.rounds / times[name]
        rho = spearman(scores[name], scores["sentence-transformers"])
        diff = float(np.abs(scores[name] - scores["sentence-transformers"]).max())
        lines.append(
            f"| {name} `CrossEncoder.score` | {rate:.1f} | {rate / st_rate:.2f} | {rho:.6f} "
            f"| {diff:.2e} |"
        )
    print("\n".join(lines))
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
