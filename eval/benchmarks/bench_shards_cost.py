"""The cost model of sharded search, measured: memory per shard, fan-out, merge, search time.

    python eval/benchmarks/bench_shards_cost.py [--sizes 20000,80000]

Measures on this machine what docs/scale.md's model is made of:

1. **Memory per vector** of the FAISS index kinds a shard may hold (``Flat``,
   ``IVF1024,PQ48``, ``HNSW32``): the serialized index over ``--sizes`` synthetic 384-d
   vectors (a mixture of Gaussians, as bench_ann.py), and one query's search time on one
   thread (nprobe 32, efSearch 128, as dotcat's defaults).
2. **BM25 memory and time per row**: the score matrix, its term counts and ids of SciFact's
   shards (bytes per row, cut and passages), and one query's BM25 time over synthetic
   SciFact-like corpora of ``--bm25-sizes`` documents (synthetic.py).
3. **A shard actor's memory**: the resident set of each SciFact shard's Ray actor, and of an
   actor holding nothing (Python, Ray, FAISS, NumPy imported).
4. **Fan-out**: one call to N shard actors and back (``describe``, a few bytes), N = 1, 2, 4
   (8 with two replicas), on a two-node local Ray; and one dense and one BM25 round of a
   query (top 100) over 1, 2 and 4 of the SciFact shards.
5. **Merge**: the k-way merge of N shards' top-100 lists, N up to 1024.

Then the model's prediction of the one-client p50 of 1, 2 and 4 shards is set against what
bench_shards_speed.py measured (its ``shards_speed.json``, if there). Writes
``eval/benchmarks/results/shards_cost.md`` and ``shards_cost.json``.
"""

from __future__ import annotations

import functools
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import common
import shards_common

SPECS = ("Flat", "IVF1024,PQ48", "HNSW32")
DIM = 384


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _median_ms(call, calls: list[tuple], repeat: int) -> tuple[float, float]:
    """Median and 99th percentile, in ms, of ``call(*args)`` for ``repeat`` arguments taken
    in turn from ``calls`` (after one call not counted)."""
    call(*calls[0])
    times = []
    for i in range(repeat):
        args = calls[i % len(calls)]
        start = time.perf_counter()
        call(*args)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]


def faiss_costs(sizes: list[int]) -> list[dict]:
    """Bytes per vector and one query's ms, per index kind and size (one thread)."""
    import faiss

    from bench_ann import synthetic_vectors
    from dotcat.index import faiss_index

    rows = []
    means = np.random.default_rng(0).standard_normal((500, DIM)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        queries = np.asarray(synthetic_vectors(Path(tmp) / "q.npy", 200, means, 1))
        for n in sizes:
            vectors = np.asarray(synthetic_vectors(Path(tmp) / f"v{n}.npy", n, means, 0))
            for spec in SPECS:
                index = faiss_index.create_index(spec, DIM)
                faiss_index.train_index(index, vectors[: min(n, 65_536)], spec)
                index.add(vectors)
                params = {"IVF": {"nprobe": 32}, "HNS": {"efSearch": 128}}.get(spec[:3], {})
                faiss_index.set_search_params(index, params)
                size = len(faiss.serialize_index(index))
                faiss.omp_set_num_threads(1)
                asked = [(queries[i : i + 1], 100) for i in range(len(queries))]
                p50, _ = _median_ms(index.search, asked, 200)
                faiss.omp_set_num_threads(0)
                rows.append({"spec": spec, "n": n, "bytes_per_vector": size / n, "ms": p50})
                print(rows[-1], flush=True)
    return rows


def bm25_costs(sizes: list[int], shards: dict[str, list[Path]]) -> dict:
    """BM25 bytes per row (SciFact's shards: the matrix's data and ids, the term counts), the
    doc store's bytes per row (its SQLite file), and one query's ms over synthetic corpora of
    ``sizes`` documents."""
    from dotcat.data import load_queries
    from dotcat.index.bm25 import BM25Index
    from synthetic import write_corpus

    per_row, docstore = {}, {}
    for kind, paths in shards.items():
        rows = nbytes = 0
        docstore[kind] = sum((path / "docstore.sqlite").stat().st_size for path in paths)
        for path in paths:
            folder = path / "bm25"
            files = [f for f in folder.glob("*.npy") if "indptr" not in f.name]
            nbytes += sum(f.stat().st_size for f in files)
            rows += len(json.loads((folder / "doc_ids.json").read_text()))
        per_row[kind] = nbytes / rows
        docstore[kind] /= rows
    queries = list(load_queries(common.SCIFACT, split="test").values())
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            corpus = write_corpus(Path(tmp) / f"c{n}.jsonl", n)
            with open(corpus, encoding="utf-8") as f:
                index = BM25Index.build([json.loads(line) for line in f], show_progress=False)
            p50, _ = _median_ms(index.search_one, [(q, 100) for q in queries], 100)
            times.append({"n": n, "ms": p50})
            print(times[-1], flush=True)
    return {"bytes_per_row": per_row, "docstore_bytes_per_row": docstore, "search": times}


def ray_costs(address: str, parts: Path, data: Path) -> dict:
    """Actors' memory, the fan-out of a trivial call, a dense and a BM25 round."""
    import ray

    from dotcat.data import load_queries
    from dotcat.search.cluster import ClusterConfig
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    ray.init(address=address)

    @ray.remote(num_cpus=0)
    class Empty:
        def pid(self) -> int:
            import faiss  # noqa: F401  (what a shard's process imports)

            import dotcat.search.shard  # noqa: F401

            return __import__("os").getpid()

    empty = Empty.remote()
    time.sleep(1)
    empty_rss = _rss_mib(ray.get(empty.pid.remote()))
    out: dict = {"empty_actor_mib": empty_rss}
    for replicas in (1, 2):
        cluster = ClusterConfig(ray=address, replicas=replicas, shard_cpus=0.5, budget_s=60)
        pipeline = SearchPipeline(parts, PipelineConfig(), cluster=cluster)
        group = pipeline.stages.group
        if replicas == 1:
            out["shard_actor_mib"] = [_rss_mib(p[0]) for p in group.pids()]
            query = list(load_queries(data, split="test").values())[0]
            vector = pipeline.encoder.encode_queries([query])
            for name, args in (("dense", (vector, 100)), ("bm25", ([query], 100))):
                out[f"{name}_round_ms"] = {
                    n: _median_ms(
                        functools.partial(group.call, only=dict.fromkeys(range(n), args)),
                        [(name,)],
                        100,
                    )
                    for n in (1, 2, 4)
                }
            out["encode_ms"] = _median_ms(pipeline.encoder.encode_queries, [([query],)], 50)
            asked = [([q], 10) for q in list(load_queries(data, split="test").values())[:50]]
            out["pipeline_ms"] = _median_ms(pipeline.search_many, asked, 100)
        fan = {}
        for n in (1, 2, 4):
            only = {s: () for s in range(n)}
            fan[n] = _median_ms(functools.partial(group.call, only=only), [("describe",)], 200)
        if replicas == 2:  # eight actors: every shard's two replicas asked at once
            actors = [r.actor for rs in group.replicas for r in rs]
            fan[8] = _median_ms(_ask_all, [(ray, actors)], 200)
        out[f"fanout_ms_{replicas}"] = fan
        pipeline.close()
    ray.kill(empty)
    return out


def _ask_all(ray, actors) -> None:
    ray.get([actor.describe.remote() for actor in actors])


def merge_costs() -> dict:
    """The k-way merge of N lists of 100 matches (µs)."""
    from dotcat.index.docstore import PassageRef
    from dotcat.search.aggregation import Match
    from dotcat.search.fan_out import dense_key, merge

    rng = np.random.default_rng(0)
    out = {}
    for n in (4, 16, 64, 256, 1024):
        answers = [
            [Match(f"d{s}-{i}", float(x), ((PassageRef(i, f"d{s}-{i}"), float(x)),))
             for i, x in enumerate(sorted(rng.random(100), reverse=True))]
            for s in range(n)
        ]  # fmt: skip
        ms, _ = _median_ms(merge, [(answers, 100, dense_key)], 50)
        out[n] = ms * 1000
    return out


def local_costs(merged: Path, shard: Path, data: Path) -> dict:
    """One query's dense (FAISS Flat) and BM25 search, top 100 (a hybrid's depth), in this
    process, over the whole index and over one of its four shards (ms, median); and one
    query's search through the pipeline over the whole index (hybrid, k=10: ``pipeline_ms``,
    as ``ray_costs`` measures it over the four shards on Ray)."""
    from dotcat.data import load_queries
    from dotcat.index.dense_index import DenseIndex
    from dotcat.search.lexical import load_bm25
    from dotcat.search.pipeline import SearchPipeline

    queries = list(load_queries(data, split="test").values())
    pipeline = SearchPipeline(merged)
    vectors = pipeline.encoder.encode_queries(queries)
    asked = [([q], 10) for q in queries[:50]]
    out: dict = {"pipeline_ms": _median_ms(pipeline.search_many, asked, 100)}
    for name, path in (("whole", merged), ("shard", shard)):
        index = DenseIndex(path, device="cpu")
        bm25 = load_bm25(path, index)
        out[name] = {
            "rows": len(index),
            "dense": _median_ms(index.search, [(v[None], 100) for v in vectors], 200)[0],
            "bm25": _median_ms(bm25.search_one, [(q, 100) for q in queries], 200)[0],
        }
        print(name, out[name], flush=True)
    return out


def predict(costs: dict, speed: dict | None) -> list[str]:
    """The model's one-client p50 of 1, 2 and 4 shards, against bench_shards_speed.py's.

    One process answers a query with a search of the whole index (dense and BM25) in its own
    thread; N shards answer it with three fan-outs (dense, BM25, the documents' texts), each
    shard searching n/N rows, the N searches of a round sharing this machine's 2 cores, two
    rounds each bringing back N lists of 100 matches, and two merges::

        p50(N) = p50(one) - s(n) + ceil(N / 2) * s(n / N) + 3 f(N) + 2 N r + 2 m(N)

    with s(x) the dense + BM25 search of x rows (linear between the two measured sizes),
    f(N) a fan-out of a trivial call to N actors, r one shard's answer of 100 matches (the
    slope over N of a dense or BM25 round's time beyond f(N): ``shards_model.answer_ms``),
    m(N) the merge of N lists.
    """
    from shards_model import answer_ms

    if speed is None:
        return ["(no shards_speed.json: run bench_shards_speed.py first for this check)"]
    local, fan = costs["local"], costs["ray"]["fanout_ms_1"]
    whole, shard = local["whole"], local["shard"]
    r = answer_ms(costs)

    def search(rows: float) -> float:
        slope = (whole["dense"] + whole["bm25"] - shard["dense"] - shard["bm25"]) / (
            whole["rows"] - shard["rows"]
        )
        return shard["dense"] + shard["bm25"] + slope * (rows - shard["rows"])

    one = speed["one process|1"]["p50"]
    lines = [
        f"r = {r:.2f} ms.",
        "",
        "| shards | s(n/N) ms | f(N) ms | predicted p50 ms | measured p50 ms | error |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    inside = (
        costs["local"]["pipeline_ms"][0] - search(whole["rows"]) + 2 * search(whole["rows"] / 4)
    )
    inside += 3 * fan["4"][0] + 2 * 4 * r + 2 * costs["merge_us"]["4"] / 1000
    lines[1:1] = [
        "",
        f"In this process, through `SearchPipeline.search_many` (no HTTP), one query: the "
        f"merged index {costs['local']['pipeline_ms'][0]:.1f} ms, the four shards on Ray "
        f"{costs['ray']['pipeline_ms'][0]:.1f} ms, the model {inside:.1f} ms.",
        "",
        "Through `dotcat serve` (bench_shards_speed.py, one client, p50):",
    ]
    for n in (1, 2, 4):
        part = search(whole["rows"] / n)
        merge_ms = costs["merge_us"]["4"] / 1000
        predicted = one - search(whole["rows"]) + -(-n // 2) * part + 3 * fan[str(n)][0]
        predicted += 2 * n * r + 2 * merge_ms
        measured = speed[f"{n} shard{'s' if n > 1 else ''}|1"]["p50"]
        lines.append(f"| {n} | {part:.2f} | {fan[str(n)][0]:.2f} | {predicted:.1f} | "
                     f"{measured:.1f} | {(predicted - measured) / measured:+.0%} |")  # fmt: skip
    return lines


def main() -> None:
    p = common.parser(__doc__, output="shards_cost.md", data=common.SCIFACT)
    p.add_argument("--sizes", default="20000,80000", help="synthetic vectors per index")
    p.add_argument("--bm25-sizes", default="10000,40000", help="synthetic BM25 documents")
    args = p.parse_args()
    load = [shards_common.uptime()]
    cut = shards_common.collection("cut", args.data)
    passages = shards_common.collection("passages", args.data)
    costs: dict = {"machine": common.describe()}
    costs["merge_us"] = merge_costs()
    print(costs["merge_us"], flush=True)
    with shards_common.two_nodes() as address:
        costs["ray"] = ray_costs(address, cut["parts"], args.data)
    print(costs["ray"], flush=True)
    costs["bm25"] = bm25_costs([int(s) for s in args.bm25_sizes.split(",")],
                               {"cut": cut["shards"], "passages": passages["shards"]})  # fmt: skip
    costs["local"] = local_costs(cut["merged"], cut["shards"][0], args.data)
    costs["faiss"] = faiss_costs([int(s) for s in args.sizes.split(",")])
    load.append(shards_common.uptime())
    costs["load"] = load
    speed_file = args.output.with_name("shards_speed.json")
    speed = json.loads(speed_file.read_text()) if speed_file.is_file() else None
    costs["check"] = predict(json.loads(json.dumps(costs)), speed)
    args.output.with_suffix(".json").write_text(json.dumps(costs, indent=2), encoding="utf-8")
    lines = common.header("The cost model's parts, measured (docs/scale.md)", torch=True)
    lines += [
        f"Load: `{load[0]}` at the start, `{load[-1]}` at the end (a shared machine).", "",
        "The model's one-client p50 against bench_shards_speed.py's "
        f"({speed['load'][0] if speed else 'not run'}):", "", *costs["check"], "",
        "Every figure measured (ms are medians unless a pair: [median, p99]):", "",
        "```json", json.dumps({k: v for k, v in costs.items() if k != "check"}, indent=2), "```",
    ]  # fmt: skip
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
