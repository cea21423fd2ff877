"""Latency and throughput of 1, 2 and 4 shards on Ray against the one-process server.

    python eval/benchmarks/bench_shards_speed.py [--seconds 40] [--clients 1,16] [--rounds 4]

Runnable alone (it builds what it needs: SciFact as four shards and their merges, with the
default model), so that its figures can be taken again on a quiet machine. Four servers run
at once on 127.0.0.1, each as a user starts it:

* ``one process``: ``dotcat serve MERGED`` (the whole index, no Ray): the baseline;
* ``1 shard``: the same index as a folder of one shard, ``--ray ADDRESS``;
* ``2 shards``: two shards, each the merge of two of the four;
* ``4 shards``: the four shards of ``dotcat index --shard I/4``.

The shards run on a local Ray cluster of two nodes (one replica each, 0.5 CPU each). Load:
SciFact test queries, ``GET /search`` k=10 with the default (hybrid) first stage, from
``--clients`` keep-alive connections; every (server, clients) cell gets ``--seconds`` in all,
in ``--rounds`` slices taken in turn across the servers, so that a drift of the machine's
speed weighs on every server alike. Prints each cell's throughput, p50 and p99, and their
ratios to the one-process server in the same run; records ``uptime`` before and after, and
the CPU flags. Writes ``eval/benchmarks/results/shards_speed.md`` and ``shards_speed.json``
(the figures ``bench_shards_cost.py`` checks its model against).
"""

from __future__ import annotations

import json
import os

import common
import shards_common
from bench_serve import Server, Tally, load


def _one_shard_folder(merged) -> object:
    """A folder holding the merged index alone: a collection of one shard."""
    folder = shards_common.SHARDS / "cut" / "one"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "all"
    if not link.exists():
        os.symlink(os.path.relpath(merged, folder), link)
    return folder


def main() -> None:
    p = common.parser(__doc__, output="shards_speed.md", data=common.SCIFACT)
    p.add_argument("--seconds", type=float, default=40.0, help="per server and level")
    p.add_argument("--clients", default="1,16", help="concurrent clients (default 1,16)")
    p.add_argument("--rounds", type=int, default=4, help="slices per cell, taken in turn")
    args = p.parse_args()
    from dotcat.data import load_queries

    queries = list(load_queries(args.data, split="test").values())
    levels = [int(c) for c in args.clients.split(",")]
    built = shards_common.collection("cut", args.data)
    halves = shards_common.halves("cut")
    load_before = shards_common.uptime()
    servers: dict[str, Server] = {}
    with shards_common.two_nodes() as address:
        ray = ["--ray", address, "--replicas", "1", "--shard-cpus", "0.5"]
        try:
            servers["one process"] = Server(built["merged"])
            servers["1 shard"] = Server(_one_shard_folder(built["merged"]), *ray)
            servers["2 shards"] = Server(halves[0], halves[1], *ray)
            servers["4 shards"] = Server(built["parts"], *ray)
            tallies = {(n, c): Tally(c) for n in servers for c in levels}
            for _ in range(args.rounds):
                for c in levels:
                    for name, server in servers.items():
                        load(server.url, queries, tallies[name, c], args.seconds / args.rounds,
                             {"k": 10})  # fmt: skip
            rss = {name: server.peak_rss_mib() for name, server in servers.items()}
        finally:
            for server in servers.values():
                server.stop()
    load_after = shards_common.uptime()
    figures = {f"{n}|{c}": t.summary() for (n, c), t in tallies.items()}
    rows = []
    for c in levels:
        base = figures[f"one process|{c}"]
        for name in servers:
            r = figures[f"{name}|{c}"]
            rows.append(
                f"| {name} | {c} | {r['ok']} | {r['errors'] + r['503']} | {r['throughput']:.1f} "
                f"| {r['throughput'] / base['throughput']:.2f} | {r['p50']:.1f} | "
                f"{r['p50'] / base['p50']:.2f} | {r['p99']:.1f} | {r['p99'] / base['p99']:.2f} |"
            )
            print(rows[-1], flush=True)
    lines = common.header(
        "Latency and throughput: 1, 2 and 4 shards on Ray against one process (SciFact)",
        "Shards on a local Ray of two nodes (ray.cluster_utils.Cluster), one replica each, "
        "0.5 CPU each; every process on this one machine.",
        torch=True,
    )
    lines += [
        f"**Load**: this machine is shared with other jobs (several test suites and benchmarks "
        f"ran beside it): `{load_before}` before, `{load_after}` after. Compare the ratios, "
        "taken in the same run with interleaved slices, not the absolute figures; run it "
        "again on a quiet machine for those.",
        "",
        f"{args.seconds:g} s per cell in {args.rounds} slices; hybrid, k=10; answers/s and "
        "latency in ms (ratios to `one process` at the same clients). Peak RSS of the front "
        "process (MiB): " + ", ".join(f"{n} {v:.0f}" for n, v in rss.items()) + " (the "
        "shards' actors not counted).",
        "",
        "| server | clients | answers | errors | answers/s | ratio | p50 | ratio | p99 | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
    ]
    common.write(args.output, lines)
    record = {"load": [load_before, load_after], "machine": common.describe(), **figures}
    args.output.with_suffix(".json").write_text(json.dumps(record, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
