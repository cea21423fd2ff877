"""Faults under load: a shard replica killed (SIGKILL) or stuck (SIGSTOP) while 16 clients ask.

    python eval/benchmarks/bench_shards_faults.py [--seconds 30] [--budget 5]

SciFact as four shards (documents cut at the window) served by ``dotcat serve PARTS --ray
ADDRESS`` on a local Ray cluster of two nodes, everything on 127.0.0.1. 16 clients ask the
test queries (``GET /search``, k=10, hybrid) without pause for ``--seconds``; after a fifth of
it one replica of shard s1 is hurt:

* **2 replicas, SIGKILL**: its calls go to the other replica; no request may fail;
* **1 replica, SIGKILL**: the shard is down until Ray has started its actor again: every
  answer must come within the budget (``--budget``) with ``coverage.full`` false and s1 named
  missing, and full again once Ray has restarted it;
* **1 replica, SIGSTOP** (a stuck process, resumed with SIGCONT after 8 s): a search waits
  for it at most the budget, then answers without it; never a hang.

Records answers, failures (any status but 200, or no answer), partial answers (the times
given are when those requests began, relative to the fault), latency (p50, p99, max) before
and after the fault, and when /info (polled every 0.25 s) first shows the shard down and
then every shard whole again. Writes ``eval/benchmarks/results/shards_faults.md``.
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

import common
import shards_common
from bench_serve import Server

CLIENTS = 16
SHARD = 1


def _replica_pid(url: str, shard: int) -> int:
    info = httpx.get(f"{url}/info", timeout=30).json()
    return info["shards"][shard]["processes"][0]["pid"]


def _whole(url: str) -> bool:
    try:
        info = httpx.get(f"{url}/info", timeout=5).json()
    except httpx.HTTPError:
        return False
    return all(s["state"] == "ok" for s in info["shards"])


def run_scenario(url: str, queries: list[str], seconds: float, hurt) -> dict:
    """16 clients for ``seconds``; ``hurt()`` at a fifth of it. Every answer's (start, status,
    seconds, full coverage)."""
    answers: list[tuple[float, int, float, bool]] = []
    stop = threading.Event()
    began = time.monotonic()

    def client(i: int) -> None:
        with httpx.Client(timeout=120) as http:
            j = i * 7
            while not stop.is_set():
                start = time.monotonic()
                try:
                    r = http.get(f"{url}/search", params={"q": queries[j % len(queries)]})
                    full = r.status_code == 200 and r.json()["coverage"]["full"]
                    answers.append((start - began, r.status_code, time.monotonic() - start, full))
                except httpx.HTTPError:
                    answers.append((start - began, 0, time.monotonic() - start, False))
                j += 1

    hurt_at = down_at = whole_at = None
    with ThreadPoolExecutor(CLIENTS) as pool:
        for i in range(CLIENTS):
            pool.submit(client, i)
        time.sleep(seconds / 5)
        hurt_at = time.monotonic() - began
        hurt()
        while time.monotonic() - began < seconds:
            time.sleep(0.25)
            whole = _whole(url)
            if down_at is None and not whole:
                down_at = time.monotonic() - began
            elif down_at is not None and whole_at is None and whole:
                whole_at = time.monotonic() - began
        stop.set()
    return {"answers": answers, "hurt_at": hurt_at, "down_at": down_at, "whole_at": whole_at}


def summary(name: str, result: dict) -> tuple[list[str], str]:
    answers, hurt_at = result["answers"], result["hurt_at"]
    failed = sum(1 for _, status, _, _ in answers if status != 200)
    partial = [a for a in answers if a[1] == 200 and not a[3]]
    first = min((a[0] for a in partial), default=None)
    last = max((a[0] + a[2] for a in partial), default=None)
    rows = []
    for label, chosen in (
        ("before", [a for a in answers if a[0] < hurt_at]),
        ("after the fault", [a for a in answers if a[0] >= hurt_at]),
        ("partial answers", partial),
    ):
        ms = sorted(1000 * a[2] for a in chosen) or [float("nan")]
        p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
        rows.append(f"| {name} | {label} | {len(chosen)} | {statistics.median(ms):.0f} | "
                    f"{p99:.0f} | {max(ms):.0f} |")  # fmt: skip
    down, whole = result["down_at"], result["whole_at"]
    note = (
        f"- **{name}**: {len(answers)} answers, **{failed} failed**, {len(partial)} partial"
        + (
            f" (from {first - hurt_at:+.1f} s to {last - hurt_at:+.1f} s after the fault)"
            if partial
            else ""
        )  # fmt: skip
        + _info_note(hurt_at, down, whole)
    )
    return rows, note


def _info_note(hurt_at: float, down: float | None, whole: float | None) -> str:
    """What /info (polled every 0.25 s) said of the shards after the fault."""
    if down is None:
        return "; /info never showed a shard down (polled every 0.25 s)."
    note = f"; /info showed it down {down - hurt_at:.1f} s after the fault"
    if whole is None:
        return note + ", not whole again by the end of the run."
    return note + f", whole again {whole - hurt_at:.1f} s after it."


def main() -> None:
    p = common.parser(__doc__, output="shards_faults.md", data=common.SCIFACT)
    p.add_argument("--seconds", type=float, default=30.0, help="each scenario (default 30)")
    p.add_argument("--budget", type=float, default=5.0, help="dotcat serve --budget (default 5)")
    args = p.parse_args()
    common.setup_logging()
    from dotcat.data import load_queries

    queries = list(load_queries(args.data, split="test").values())
    parts = shards_common.collection("cut", args.data)["parts"]
    load = [shards_common.uptime()]
    rows, notes = [], []
    with shards_common.two_nodes() as address:
        for replicas, sig in ((2, signal.SIGKILL), (1, signal.SIGKILL), (1, signal.SIGSTOP)):
            name = f"{replicas} replica{'s' if replicas > 1 else ''}, {sig.name}"
            server = Server(parts, "--ray", address, "--replicas", str(replicas),
                            "--shard-cpus", "0.5", "--budget", str(args.budget))  # fmt: skip
            pid = _replica_pid(server.url, SHARD)

            def hurt(pid=pid, sig=sig) -> None:
                os.kill(pid, sig)
                if sig == signal.SIGSTOP:
                    threading.Timer(8.0, os.kill, (pid, signal.SIGCONT)).start()

            result = run_scenario(server.url, queries, args.seconds, hurt)
            server.stop()
            these, note = summary(name, result)
            rows += these
            notes.append(note)
            print(note, flush=True)
        load.append(shards_common.uptime())
    lines = common.header(
        "Faults under load: a shard replica killed or stuck (SciFact, 4 shards, 2 Ray nodes)",
        f"{CLIENTS} clients on 127.0.0.1, hybrid, k=10; `--budget {args.budget:g}`; the "
        f"replica of shard s{SHARD} hurt after {args.seconds / 5:.0f} s of {args.seconds:.0f}.",
    )
    lines += [
        f"Load: `{load[0]}` at the start, `{load[-1]}` at the end (a shared machine: the "
        "latencies are this machine's under that load).",
        "",
        *notes,
        "",
        "| scenario | answers | count | p50 ms | p99 ms | max ms |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        *rows,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
