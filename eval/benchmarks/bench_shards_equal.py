"""Sharded search equals the merged index: SciFact as four shards on a two-node Ray cluster.

    python eval/benchmarks/bench_shards_equal.py [--replicas 1]

SciFact indexed as four shards (``dotcat index --shard I/4``; once with documents cut at the
window, once with passages of 128 tokens) and their ``dotcat merge``. The four shards are
served by Ray actors on a local cluster of two nodes (``ray.cluster_utils.Cluster``); the 300
test queries are searched with BM25, dense and hybrid (and the hybrid with both feedbacks,
RM3 and Rocchio, on the cut collection) three ways: from Python (``SearchPipeline`` over the
shards), over HTTP (``dotcat serve PARTS --ray ADDRESS``, ``POST /search``, 64 queries a
request) and with ``dotcat search PARTS --ray ADDRESS --queries``. Each run, 100 results a
query, is compared with the merged index's run searched in one process: the same ranking
(ties within 1e-5 in either order), the same ids in the same order, the largest score
difference, and nDCG@10 of both. Writes ``eval/benchmarks/results/shards_equal.md``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import common
import shards_common
from bench_serve import Server, server_run

STAGES = ("bm25", "dense", "hybrid")
K = 100


def main() -> None:
    p = common.parser(__doc__, output="shards_equal.md", data=common.SCIFACT)
    p.add_argument("--replicas", type=int, default=1, help="actors per shard (default 1)")
    args = p.parse_args()
    common.setup_logging()
    import ray

    from dotcat.data import load_qrels, load_queries, ranked, read_run
    from dotcat.evaluation.metrics import evaluate
    from dotcat.search.cluster import ClusterConfig
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    topics = load_queries(args.data, split="test")
    qrels = load_qrels(args.data, split="test")
    ndcg = lambda run: evaluate(run, qrels, ["nDCG@10"]).aggregate["nDCG@10"]  # noqa: E731
    built = {kind: shards_common.collection(kind, args.data) for kind in shards_common.KINDS}
    rows = []
    load = [shards_common.uptime()]
    with shards_common.two_nodes() as address, tempfile.TemporaryDirectory() as tmp:
        ray.init(address=address)
        cluster = ClusterConfig(ray=address, replicas=args.replicas, shard_cpus=0.5,
                                budget_s=60)  # fmt: skip
        on_ray = ["--ray", address, "--replicas", str(args.replicas), "--shard-cpus", "0.5"]
        for kind, paths in built.items():
            cases = [(stage, "none") for stage in STAGES]
            if kind == "cut":
                cases.append(("hybrid", "both"))
            for stage, prf in cases:
                config = PipelineConfig(prf=prf)
                merged = SearchPipeline(paths["merged"], config)
                start = time.perf_counter()
                reference = merged.run(topics, K, first_stage=stage)
                one_seconds = time.perf_counter() - start
                shards = SearchPipeline(paths["parts"], config, cluster=cluster)
                start = time.perf_counter()
                runs = {"Python": shards.run(topics, K, first_stage=stage)}
                seconds = {"Python": time.perf_counter() - start}
                shards.close()
                prf_flags = ["--prf", prf] if prf != "none" else []
                server = Server(paths["parts"], *on_ray, *prf_flags, "--budget", "60",
                                "--timeout", "120")  # fmt: skip
                start = time.perf_counter()
                runs["HTTP"] = server_run(server.url, topics, K, stage)
                seconds["HTTP"] = time.perf_counter() - start
                server.stop()
                out = Path(tmp) / f"{kind}-{stage}-{prf}.trec"
                _, seconds["dotcat search"] = common.dotcat(
                    "search", paths["parts"], "--queries", args.data, "--split", "test",
                    "--output", out, "--first-stage", stage, *prf_flags, *on_ray,
                )  # fmt: skip
                runs["dotcat search"] = ranked(read_run(out))
                base = ndcg(reference)
                for path, run in runs.items():
                    agree = shards_common.agreement(reference, run)
                    rows.append(
                        f"| {kind} | {stage}{'' if prf == 'none' else ' + ' + prf} | {path} | "
                        f"{agree['same']}/{agree['queries']} | {agree['exact']}/{agree['queries']}"
                        f" | {agree['max_diff']:.2e} | {base:.4f} | {ndcg(run):.4f} | "
                        f"{seconds[path]:.1f} ({one_seconds:.1f}) |"
                    )
                    print(rows[-1], flush=True)
        load.append(shards_common.uptime())
    lines = common.header(
        "Sharded search against the merged index (SciFact, 4 shards, 2 Ray nodes)",
        f"Ray nodes: two on this machine (ray.cluster_utils.Cluster), {args.replicas} "
        "replica(s) a shard, 0.5 CPU each.",
        torch=True,
    )
    lines += [
        f"Load while it ran (the machine is shared with other jobs): `{load[0]}`; at the end "
        f"`{load[-1]}`. Times are not the point here (bench_shards_speed.py measures them).",
        "",
        "Each row: the 300 test queries, 100 results each, searched over the four shards, "
        "against the merged index's run in one process. *same*: queries with the same ranking "
        "(ties within 1e-5 in either order) and scores within 1e-5; *exact*: the same ids in "
        "the same order (a `dotcat search` run is read back from its file, ties sorted by "
        "document id, hence fewer exact); *max diff*: the largest score difference; nDCG@10 of "
        "the merged index and of the shards; seconds for the 300 queries (the merged index's in "
        "brackets; the HTTP and `dotcat search` rows include their process's start).",
        "",
        "| collection | first stage | path | same | exact | max diff | nDCG@10 merged | "
        "nDCG@10 shards | seconds (merged) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
