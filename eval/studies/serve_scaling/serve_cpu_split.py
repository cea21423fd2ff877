"""Where a served query's CPU goes: one client against many, on this machine's cores.

    python eval/studies/serve_scaling/serve_cpu_split.py --index indexes/scifact-minilm-int8 \\
        [--seconds 8] [--rounds 2]

Starts ``dotcat serve`` on 127.0.0.1 (as ``eval/benchmarks/bench_serve.py`` does, with its load
generator: SciFact test queries, ``GET /search``, k=10, dense) and runs 1 and 16 clients in
interleaved slices. For each level it prints answers/s (and the ratio to one client, the
baseline, same run), the server's CPU milliseconds per answer (from ``/proc/PID/stat``), the
load generator's, the machine's idle share (``/proc/stat``) and the mean micro-batch (queries
per model call, from ``/info``; not with ``--workers``, where each worker counts its own).
Read together they say whether many clients are bounded by
the cores (idle near 0) or by the way the server uses them (idle left while answers wait).
Nothing else should run on the machine meanwhile.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import resource
import shlex
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common
from bench_serve import Server, Tally, load


def machine_ticks() -> list[int]:
    """The first line of /proc/stat: user nice system idle iowait irq softirq steal ..."""
    with open("/proc/stat", encoding="ascii") as f:
        return [int(x) for x in f.readline().split()[1:]]


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(pid: int) -> float:
    """CPU of the server: its process and, with ``--workers``, its worker processes (children
    of the supervisor; a worker that ended meanwhile is not counted)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0.0
    for process in [pid, *map(int, children)]:
        with contextlib.suppress(OSError):  # ended meanwhile
            total += process_cpu_seconds(process)
    return total


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def batches(url: str) -> tuple[int, int]:
    server = httpx.get(f"{url}/info", timeout=10).json()["server"]
    return server["batches"], server["queries"]


def measure(server: Server, queries: list[str], clients: int, seconds: float) -> dict:
    tally = Tally(clients)
    before = (
        machine_ticks(),
        server_cpu_seconds(server.process.pid),
        own_cpu_seconds(),
        batches(server.url),
    )
    load(server.url, queries, tally, seconds, {"k": 10, "first_stage": "dense"})
    ticks = [b - a for a, b in zip(before[0], machine_ticks(), strict=True)]
    calls, batched = (b - a for a, b in zip(before[3], batches(server.url), strict=True))
    ok = max(1, tally.summary()["ok"])
    return {
        "answers": tally.summary()["ok"],
        "wall": tally.wall,
        "server_ms": (server_cpu_seconds(server.process.pid) - before[1]) * 1000 / ok,
        "client_ms": (own_cpu_seconds() - before[2]) * 1000 / ok,
        "idle": ticks[3] / sum(ticks),
        "batch": batched / max(1, calls),
        "p50": tally.summary()["p50"],
    }


def main() -> None:
    parser = common.parser(__doc__, data=common.SCIFACT)
    parser.add_argument("--index", type=Path, default=Path("indexes/scifact-minilm-int8"))
    parser.add_argument("--seconds", type=float, default=8.0, help="per slice")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path, help="a results file (default: print only)")
    parser.add_argument("--serve-options", default="", help='e.g. "--batch-window-ms 0"')
    args = parser.parse_args()
    options = shlex.split(args.serve_options)
    # /info's batch counts are one worker's, whichever answers: no mean batch with workers
    several = "--workers" in options and options[options.index("--workers") + 1] != "1"
    with gzip.open(args.data / "queries.jsonl.gz", "rt", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f][:300]
    server = Server(args.index, *options)
    sums: dict[int, dict] = {}
    try:
        for _ in range(args.rounds):
            for clients in (1, 16):
                r = measure(server, queries, clients, args.seconds)
                total = sums.setdefault(clients, {"answers": 0, "wall": 0.0, "rows": []})
                total["answers"] += r["answers"]
                total["wall"] += r["wall"]
                total["rows"].append(r)
    finally:
        server.stop()
    base = sums[1]["answers"] / sums[1]["wall"]
    lines = [
        *common.header(
            "`dotcat serve`: where a served query's CPU goes, 1 and 16 clients",
            f"Index {args.index}; serve options {args.serve_options or 'defaults'}; "
            f"{args.rounds} x {args.seconds:g} s per level.",
        ),
        "| clients | answers/s | vs 1 client | p50 ms | server CPU ms/answer "
        "| load generator CPU ms/answer | machine idle | queries per model call |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for clients, total in sums.items():
        rate = total["answers"] / total["wall"]
        mean = _means(total["rows"])
        lines.append(
            f"| {clients} | {rate:.1f} | {rate / base:.2f}x | {mean('p50'):.1f} "
            f"| {mean('server_ms'):.2f} | {mean('client_ms'):.2f} | {mean('idle'):.0%} | "
            + ("n/a |" if several else f"{mean('batch'):.1f} |")
        )
    print("\n".join(lines), flush=True)
    if args.output:
        common.write(args.output, lines)


def _means(rows: list[dict]):
    return lambda key: sum(r[key] for r in rows) / len(rows)


if __name__ == "__main__":
    main()
