"""Approximate search at scale: 1,000,000 x 384 synthetic vectors, IVF/HNSW against Flat.

The vectors are a seeded mixture of Gaussians on the unit sphere (clustered, like real
embeddings; uniform random vectors have no neighbourhood structure and would make any ANN
index look bad), and the queries come from the same mixture. Every index is built with
dotcat's own FAISS path (``dotcat.index.faiss_index``): create, train on a sample, add in
chunks, apply search parameters. Exact Flat search is the baseline, measured in the same run.

    python eval/benchmarks/bench_ann.py --n 1000000 --specs "IVF4096,Flat" "HNSW32" "IVF1024,PQ64"

Prints, per spec: build seconds, search ms/query, recall@10 against Flat, and the speed-up;
writes ``eval/benchmarks/results/ann_1m.md``.
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

import common
from dotcat.index import faiss_index


def synthetic_vectors(path: Path, n: int, means: np.ndarray, seed: int) -> np.ndarray:
    """Clustered unit vectors around ``means``, written chunk by chunk to a memory-mapped .npy."""
    rng = np.random.default_rng(seed)
    centres, dim = means.shape
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, dim))
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        x = means[rng.integers(0, centres, m)] + 0.6 * rng.standard_normal(
            (m, dim), dtype=np.float32
        )
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[start : start + m] = x
    out.flush()
    return out


def timed_search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """Positions and milliseconds per query (batch of queries, as a batch run does)."""
    faiss_index.search(index, queries[:10], k)  # warm-up
    start = time.perf_counter()
    _, positions = faiss_index.search(index, queries, k)
    return positions, (time.perf_counter() - start) * 1000 / len(queries)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of the exact top-k that the approximate top-k retrieves."""
    k = truth.shape[1]
    return float(np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth, strict=False)]))


def main() -> None:
    parser = common.parser(__doc__, output="ann_1m.md")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--centres", type=int, default=2000)
    parser.add_argument("--specs", nargs="+", default=["IVF4096,Flat", "HNSW32", "IVF1024,PQ64"])
    parser.add_argument("--nprobe", type=int, default=faiss_index.DEFAULT_SEARCH_PARAMS["nprobe"])
    parser.add_argument(
        "--ef-search", type=int, default=faiss_index.DEFAULT_SEARCH_PARAMS["efSearch"]
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        means = np.random.default_rng(args.seed).standard_normal((args.centres, args.dim))
        means = means.astype(np.float32)
        vectors = synthetic_vectors(Path(tmp) / "v.npy", args.n, means, args.seed + 1)
        # Queries: same mixture, independent noise (not copies of indexed vectors).
        queries = np.array(
            synthetic_vectors(Path(tmp) / "q.npy", args.queries, means, args.seed + 2)
        )
        print(
            f"data: {args.n} x {args.dim} vectors in {time.perf_counter() - t0:.1f} s", flush=True
        )

        rows = []
        flat = faiss_index.create_index("Flat", args.dim)
        t0 = time.perf_counter()
        faiss_index.add_vectors(flat, [vectors], len(vectors), show_progress=False)
        flat_build = time.perf_counter() - t0
        truth, flat_ms = timed_search(flat, queries, args.k)
        rows.append(("Flat (exact, baseline)", flat_build, flat_ms, 1.0, 1.0))
        print(f"Flat: build {flat_build:.1f} s, {flat_ms:.3f} ms/query", flush=True)
        del flat

        params = {"nprobe": args.nprobe, "efSearch": args.ef_search}
        for spec in args.specs:
            t0 = time.perf_counter()
            index = faiss_index.create_index(spec, args.dim)
            sample = faiss_index.training_rows(index, len(vectors), seed=args.seed)
            faiss_index.train_index(index, vectors[sample], spec)
            faiss_index.add_vectors(index, [vectors], len(vectors), show_progress=False)
            build = time.perf_counter() - t0
            applied = faiss_index.applicable_search_params(index, params)
            faiss_index.set_search_params(index, applied)
            found, ms = timed_search(index, queries, args.k)
            recall = recall_at_k(found, truth)
            label = f"{spec} ({', '.join(f'{k}={v}' for k, v in applied.items()) or 'defaults'})"
            rows.append((label, build, ms, recall, flat_ms / ms))
            print(
                f"{label}: build {build:.1f} s, {ms:.3f} ms/query, recall@{args.k} {recall:.4f}, "
                f"speed-up {flat_ms / ms:.1f}x",
                flush=True,
            )
            del index

    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    lines = [
        *common.header(
            f"FAISS at 1M scale: {args.n:,} x {args.dim} synthetic vectors",
            f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} OpenMP threads; "
            f"peak RSS {peak_gib:.1f} GiB.",
        ),
        f"Data: mixture of {args.centres} Gaussians on the unit sphere (seed {args.seed}); "
        f"{args.queries} queries from the same mixture; top-{args.k}; batch search.",
        "Baseline: exact `Flat` inner-product search in the same run.",
        "",
        f"| index | build s | search ms/query | recall@{args.k} vs Flat | speed-up vs Flat |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {r[0]} | {r[1]:.1f} | {r[2]:.3f} | {r[3]:.4f} | {r[4]:.1f}x |" for r in rows]
    print("\n".join(lines))
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
