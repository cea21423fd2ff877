"""Filtered search on SciFact: exact where it must be, and what it costs against post-filtering.

    python eval/benchmarks/bench_filters.py                  # ~15 min on a quiet 2-core machine

SciFact's 5,183 abstracts, each given a synthetic field ``bucket`` (a hash of its id, 0-999),
indexed once with the default model (a Flat index that keeps its vectors, BM25 beside it,
documents whole) and turned into IVF256,Flat and HNSW32 indexes from the same vectors
(``dotcat merge --faiss``); the filters ``bucket < 500``, ``bucket < 50`` and ``bucket < 5``
admit 50%, 5% and 0.5% of the documents. The 300 test queries, each encoded once:

- **exactness** (the real code path, ``SearchPipeline.run(..., filter=F)``): Flat dense and
  BM25 recall@100 against the exact answer on the subset (every document's score, the
  admitted ones ranked); the filtered hybrid against the fusion of the filtered dense and
  BM25 rankings (the share of queries whose 100 results are identical);
- **IVF and HNSW recall@10** against the exact subset answer, per selectivity, as shipped
  (an admitted set of at most ``EXACT_LIMIT`` vectors is compared exactly) and through the
  FAISS selector alone (``EXACT_LIMIT`` 0: the widened ``nprobe`` / ``efSearch``, and the
  exact completion of a query left short); the unfiltered recall@10 for reference;
- **latency per query** (one query a call, vectors given, the first stage only): unfiltered,
  filtered, and post-filtered (the unfiltered top 1,000, the admitted kept), with how often
  post-filtering returns fewer than k = 10; BM25 likewise (its score arrays masked against
  its top 1,000 filtered); and the filter's one-time cost (the SQL query that finds the
  admitted documents, cached per filter after that).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

import common

FILTERS = {"50%": "bucket < 500", "5%": "bucket < 50", "0.5%": "bucket < 5"}
STRUCTURES = {"Flat": None, "IVF256,Flat": "IVF256,Flat", "HNSW32": "HNSW32"}
K, DEPTH, POST = 10, 100, 1000


def bucket(doc_id: str) -> int:
    return int(hashlib.sha1(doc_id.encode()).hexdigest(), 16) % 1000


def build(data: Path, work: Path, limit: int | None) -> dict[str, Path]:
    """The Flat index (vectors kept) and the IVF and HNSW ones made from its vectors."""
    from dotcat.data import load_corpus
    from dotcat.index import IndexConfig, build_index
    from dotcat.index.passages import PassageConfig
    from dotcat.index.shards import merge_indexes
    from dotcat.models import EncoderConfig

    paths = {name: work / name.replace(",", "_") for name in STRUCTURES}
    if not (paths["Flat"] / "manifest.json").is_file():
        corpus = load_corpus(data)
        n = len(corpus) if limit is None else min(limit, len(corpus))
        docs = [{"_id": corpus[i]["id"], "title": corpus[i]["title"], "text": corpus[i]["text"],
                 "bucket": bucket(corpus[i]["id"])} for i in range(n)]  # fmt: skip
        config = IndexConfig(bm25=True, keep_vectors=True, passages=PassageConfig(enabled=False))
        shutil.rmtree(paths["Flat"], ignore_errors=True)
        build_index(docs, paths["Flat"], EncoderConfig(model="default"), config, overwrite=True,
                    show_progress=False)  # fmt: skip
    for name, spec in STRUCTURES.items():
        if spec and not (paths[name] / "manifest.json").is_file():
            merge_indexes([paths["Flat"]], paths[name], spec, bm25=False, overwrite=True,
                          show_progress=False)  # fmt: skip
    return paths


def exact_dense(vectors: np.ndarray, queries: np.ndarray, ids: np.ndarray, doc_ids, k: int):
    """Each query's top-k document ids among the admitted rows ``ids`` (vectors' rows)."""
    scores = queries @ vectors[ids].T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return [[doc_ids[ids[j]] for j in row] for row in top]


def recall(found: list[list[str]], expected: list[list[str]]) -> float:
    return statistics.fmean(
        len(set(f) & set(e)) / len(e) if e else 1.0 for f, e in zip(found, expected, strict=True)
    )


def exactness(paths: dict, topics: dict, vectors: np.ndarray) -> tuple[list[str], dict]:
    """Flat dense, BM25 and hybrid, filtered, against the exact subset answers."""
    from dotcat.search.hybrid import fuse_matches
    from dotcat.search.pipeline import SearchPipeline

    pipeline = SearchPipeline(paths["Flat"])
    encoded = pipeline.encoder.encode_queries(list(topics.values()))
    doc_ids = pipeline.index.store.ids(range(len(vectors)))
    bm25 = pipeline.bm25
    rows = [
        "| filter | admitted | dense R@100 | BM25 R@100 | hybrid = fused | "
        "post-filter top 1,000 short of 100 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    admitted_of = {}
    for label, text in FILTERS.items():
        admitted = admitted_of[label] = pipeline.admitted(text)
        keep = {doc_ids[int(p)] for p in admitted.positions}
        dense = pipeline.run(topics, DEPTH, first_stage="dense", filter=text)
        sparse = pipeline.run(topics, DEPTH, first_stage="bm25", filter=text)
        exact = exact_dense(vectors, encoded, admitted.ids, doc_ids, DEPTH)
        dense_recall = recall([[d for d, _ in dense[q]] for q in topics], exact)
        bm25_exact = []
        for query in topics.values():
            ids = bm25.query_token_ids(query)
            scores = bm25._retriever.get_scores_from_ids(ids) if ids else np.zeros(len(bm25))
            ranked = np.lexsort((bm25._id_rank, -scores))  # BM25's order: score, then id
            order = [r for r in ranked if scores[r] > 0 and bm25.doc_ids[r] in keep][:DEPTH]
            bm25_exact.append([bm25.doc_ids[r] for r in order])
        bm25_recall = recall([[d for d, _ in sparse[q]] for q in topics], bm25_exact)
        hybrid = pipeline.matches(topics, DEPTH, first_stage="hybrid", filter=text)
        d_m = pipeline.matches(topics, DEPTH, first_stage="dense", filter=text)
        s_m = pipeline.matches(topics, DEPTH, first_stage="bm25", filter=text)
        same = statistics.fmean(
            [(m.doc_id, m.score) for m in hybrid[q]]
            == [(m.doc_id, m.score) for m in fuse_matches(pipeline.fusion, d_m[q], s_m[q])[:DEPTH]]
            for q in topics
        )
        unfiltered = pipeline.run(topics, POST, first_stage="dense")
        short = statistics.fmean(sum(d in keep for d, _ in unfiltered[q]) < DEPTH for q in topics)
        rows.append(f"| `{text}` ({label}) | {admitted.documents} | {dense_recall:.4f} | "
                    f"{bm25_recall:.4f} | {same:.0%} | {short:.0%} |")  # fmt: skip
    return rows, {"encoded": encoded, "doc_ids": doc_ids, "admitted": admitted_of}


def ann_recall(paths: dict, vectors: np.ndarray, shared: dict) -> list[str]:
    """IVF and HNSW recall@10 against the exact subset answer, as shipped and selector-only."""
    from dotcat.index import filtered
    from dotcat.index.dense_index import DenseIndex

    encoded, doc_ids = shared["encoded"], shared["doc_ids"]
    every = np.arange(len(vectors), dtype=np.int64)
    rows = [
        "| index | search params | unfiltered R@10 | filter | R@10 as shipped | "
        "R@10 selector only |",
        "| --- | --- | ---: | --- | ---: | ---: |",
    ]
    for name in ("IVF256,Flat", "HNSW32"):
        index = DenseIndex(paths[name], device="cpu")
        base = recall(_ids(index, encoded, K, None, doc_ids),
                      exact_dense(vectors, encoded, every, doc_ids, K))  # fmt: skip
        for label, admitted in shared["admitted"].items():
            expected = exact_dense(vectors, encoded, admitted.ids, doc_ids, K)
            shipped = recall(_ids(index, encoded, K, admitted, doc_ids), expected)
            limit, filtered.EXACT_LIMIT = filtered.EXACT_LIMIT, 0
            try:
                selector = recall(_ids(index, encoded, K, admitted, doc_ids), expected)
            finally:
                filtered.EXACT_LIMIT = limit
            rows.append(f"| {name} | {index.search_params} | {base:.4f} | {label} | "
                        f"{shipped:.4f} | {selector:.4f} |")  # fmt: skip
    return rows


def _ids(index, encoded, k, admitted, doc_ids) -> list[list[str]]:
    _, found = index.search(encoded, k, admitted) if admitted is not None else index.search(
        encoded, k)  # fmt: skip
    return [[doc_ids[int(i)] for i in row if i >= 0] for row in found]


def _per_query(fn, queries: np.ndarray, repeats: int = 1) -> float:
    """Median seconds of ``fn(one query)`` over the queries (single-query calls)."""
    times = []
    for _ in range(repeats):
        for row in queries:
            start = time.perf_counter()
            fn(row[None, :])
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def latency(paths: dict, shared: dict, topics: dict) -> list[str]:
    """Per-query latency of each structure: unfiltered, filtered, post-filtered from 1,000."""
    from dotcat.index.dense_index import DenseIndex
    from dotcat.search.pipeline import SearchPipeline

    encoded = shared["encoded"]
    rows = ["| first stage | filter | unfiltered ms | filtered ms | filtered / unfiltered | "
            "post-filtered ms | post / filtered | post-filter short of 10 |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name in STRUCTURES:
        index = DenseIndex(paths[name], device="cpu")
        plain = _per_query(lambda q, index=index: index.search(q, K), encoded)
        for label, admitted in shared["admitted"].items():
            within = _per_query(lambda q, a=admitted, index=index: index.search(q, K, a), encoded)
            keep = np.zeros(index.manifest.next_vector_id, dtype=bool)
            keep[admitted.ids] = True

            def post(q, index=index, keep=keep):
                _, ids = index.search(q, POST)
                return [i for i in ids[0] if i >= 0 and keep[i]][:K]

            post_ms = _per_query(post, encoded)
            short = statistics.fmean(len(post(q[None, :])) < K for q in encoded)
            rows.append(_latency_row(f"dense {name}", label, plain, within, post_ms, short))
    pipeline = SearchPipeline(paths["Flat"], first_stage="bm25")
    bm25 = pipeline.bm25
    texts = list(topics.values())
    plain = _per_text(lambda t: bm25.search_one(t, K), texts)
    for label, admitted in shared["admitted"].items():
        mask = admitted.document_mask
        within = _per_text(lambda t, m=mask: bm25.search_one(t, K, m), texts)
        keep = set(bm25.doc_ids[i] for i in np.flatnonzero(mask))

        def post(t, keep=keep):
            return [d for d, _ in bm25.search_one(t, POST) if d in keep][:K]

        post_ms = _per_text(post, texts)
        short = statistics.fmean(len(post(t)) < K for t in texts)
        rows.append(_latency_row("BM25", label, plain, within, post_ms, short))
    return rows


def _per_text(fn, texts: list[str]) -> float:
    times = []
    for text in texts:
        start = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _latency_row(what, label, plain, within, post, short) -> str:
    return (
        f"| {what} | {label} | {1000 * plain:.3f} | {1000 * within:.3f} | {within / plain:.2f}x "
        f"| {1000 * post:.3f} | {post / within:.2f}x | {short:.0%} |"
    )


def filter_cost(paths: dict) -> list[str]:
    """The one-time cost of each filter: parse, check, SQL, the admitted sets."""
    from dotcat.index.dense_index import DenseIndex
    from dotcat.search.filters import parse_filter

    index = DenseIndex(paths["Flat"], device="cpu")
    kinds = index.field_kinds()
    rows = ["| filter | admitted | once (ms, median of 5) |", "| --- | ---: | ---: |"]
    for label, text in FILTERS.items():
        times = []
        for _ in range(5):
            start = time.perf_counter()
            sql, params = parse_filter(text).sql(kinds)
            admitted = index.admit(sql, params)
            times.append(time.perf_counter() - start)
        rows.append(f"| `{text}` ({label}) | {admitted.documents} | "
                    f"{1000 * statistics.median(times):.1f} |")  # fmt: skip
    return rows


def main() -> None:
    p = common.parser(__doc__, output="filters.md", data=common.SCIFACT, work="runs/bench_filters")
    p.add_argument("--limit", type=int, default=None, help="index only the first N documents")
    args = p.parse_args()
    common.setup_logging()
    from dotcat.data import load_queries

    load = os.getloadavg()[0]
    paths = build(args.data, args.work, args.limit)
    vectors = np.load(paths["Flat"] / "vectors.npy")
    topics = load_queries(args.data, split="test")
    exact_rows, shared = exactness(paths, topics, vectors)
    ann_rows = ann_recall(paths, vectors, shared)
    latency_rows = latency(paths, shared, topics)
    cost_rows = filter_cost(paths)
    after = os.getloadavg()[0]
    lines = common.header(
        "Filtered search: exactness, ANN recall and latency against post-filtering",
        f"Load average {load:.1f} at the start, {after:.1f} at the end (a shared machine: the "
        "ratios, measured side by side, hold better than the milliseconds).",
        torch=True,
    )
    lines += [
        f"SciFact ({len(vectors)} documents, {len(topics)} test queries), the default model, "
        "a synthetic field `bucket` (hash of the id, 0-999). Exact subset answers: every "
        "admitted document scored (dense: the index's own vectors; BM25: bm25s' scores). "
        f"EXACT_LIMIT: {_exact_limit()} vectors.",
        "",
        "## Exactness (Flat dense, BM25, hybrid; through `SearchPipeline.run`)",
        "",
        *exact_rows,
        "",
        "## IVF and HNSW recall@10 against the exact subset answer",
        "",
        *ann_rows,
        "",
        "## Latency per query (the first stage alone, query vectors given)",
        "",
        *latency_rows,
        "",
        "## What a filter costs once (then cached by the pipeline)",
        "",
        *cost_rows,
    ]
    common.write(args.output, lines)


def _exact_limit() -> int:
    from dotcat.index.filtered import EXACT_LIMIT

    return EXACT_LIMIT


if __name__ == "__main__":
    main()
