"""What the filtered search's exact path pays for scores that do not depend on the admitted set.

    python eval/benchmarks/bench_exact_scores.py            # ~1 min

A filtered search that admits at most ``EXACT_LIMIT`` vectors (and the completion of a short
selector search) compares the query with every admitted vector. It used to compute
``queries @ vectors.T`` in float32, whose BLAS summation order follows the matrix's shape, so a
document's score moved by an ulp with the set admitted around it; it now sums each pair in
float64 and rounds once (:func:`dotcat.index.filtered.inner_products`). Random unit vectors of
the default model's width (384), admitted sets of 64 to ``EXACT_LIMIT`` vectors and one above
it, one query a call (what ``dotcat search`` and the server do) and 32: the median time of the
float32 product (the old path, the baseline) and of ``inner_products``, interleaved in the
same run, and of the whole ``search_admitted`` call with each (the float32 product patched in
for the baseline); and over the sets, the share of (query, vector) pairs whose float32 score
differs from one set to another, for both.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import common

DIM, TOTAL, ROUNDS = 384, 20_000, 30


def median_ms(call, *args, rounds: int = ROUNDS) -> float:
    """The median wall time of ``call(*args)``, in milliseconds."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def float32(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """The exact path's product before: float32 BLAS."""
    return queries @ vectors.T


def unstable_share(product, x: np.ndarray, queries: np.ndarray, sizes, rng) -> float:
    """The share of (query, vector 0..99) pairs whose score differs between admitted sets."""
    seen: dict[tuple[int, int], set[float]] = {}
    for size in sizes:
        ids = np.sort(np.concatenate([np.arange(100), rng.choice(np.arange(100, TOTAL), size)]))
        scores = product(queries, x[ids])
        for q in range(len(queries)):
            for j in range(100):
                seen.setdefault((q, j), set()).add(float(scores[q, j]))
    return sum(len(s) > 1 for s in seen.values()) / len(seen)


def main() -> None:
    import faiss

    from dotcat.index import filtered
    from dotcat.index.filtered import EXACT_LIMIT, Admitted, inner_products, search_admitted

    args = common.parser(__doc__, output="exact_scores.md").parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((TOTAL, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(DIM)
    index.add(x)
    every = np.arange(TOTAL, dtype=np.int64)

    rows = []
    for n_queries in (1, 32):
        queries = x[rng.choice(TOTAL, n_queries)] + 0.01
        for size in (64, 512, EXACT_LIMIT, 8 * EXACT_LIMIT):
            ids = np.sort(rng.choice(TOTAL, size, replace=False))
            vectors = x[ids]
            admitted = Admitted.of(ids, every, every, TOTAL)
            old = new = whole_old = whole_new = 0.0
            for _ in range(3):  # interleaved: the machine's state is shared by both
                old += median_ms(float32, queries, vectors) / 3
                new += median_ms(inner_products, queries, vectors) / 3
                filtered.inner_products = float32  # the whole call as it was
                whole_old += median_ms(search_admitted, index, queries, 100, admitted) / 3
                filtered.inner_products = inner_products
                whole_new += median_ms(search_admitted, index, queries, 100, admitted) / 3
            figures = (
                f"{old:.3f} | {new:.3f} | {new / old:.2f}x | {whole_old:.3f} | {whole_new:.3f}"
            )
            rows.append(f"| {n_queries} | {size:,} | {figures} |")
    sizes = (16, 100, 400, 1500)
    queries = x[rng.choice(TOTAL, 8)] + 0.01
    shares = {
        name: unstable_share(product, x, queries, sizes, np.random.default_rng(1))
        for name, product in (("float32 product", float32), ("inner_products", inner_products))
    }
    lines = [
        *common.header("Filtered search, exact path: float64-summed scores against float32 BLAS"),
        f"Random unit vectors, dimension {DIM}; `EXACT_LIMIT` {EXACT_LIMIT}; median of {ROUNDS} "
        "calls, three interleaved rounds averaged; `search_admitted` with k = 100 (vectors read "
        "back from a flat index, top-k, ties ordered), before with the float32 product. "
        "Above `EXACT_LIMIT` a flat index is searched by FAISS's selector, not this path (both "
        "whole-call columns then time the selector); that row's product is what the completion "
        "of short searches and the GPU fallback compute.",
        "",
        "| queries a call | admitted vectors | float32 product, ms (before) | `inner_products`, ms "
        "| ratio | whole `search_admitted` before, ms | after, ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"Scores that differ with the admitted set (8 queries, the same 100 vectors inside sets "
        f"of {', '.join(str(100 + s) for s in sizes)}): "
        + "; ".join(f"{name} {share:.1%} of pairs" for name, share in shares.items())
        + ".",
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
