"""dotcat serve under load: latency and throughput at 1-64 concurrent clients, quiet and loaded.

    python eval/benchmarks/bench_serve.py [--index indexes/scifact-minilm] [--rerank runs/cat] \\
        [--seconds 20]

Starts ``dotcat serve`` on 127.0.0.1 as a user would, then replays SciFact test queries
(``GET /search``, k=10) from 1, 4, 16 and 64 concurrent clients (keep-alive connections
from one asyncio client in this process), each level for a fixed time, for each first stage
(dense, then hybrid); records throughput, p50/p95/p99 latency, errors, 503s and the server's
peak RSS; each level quiet and with one competing CPU-bound process. With ``--rerank``: the
first stage with BERT_CAT re-ranking at depth 20 (1, 4, 16 clients). Also: 64 clients
against a small queue (the excess must get 503 at once), the server's SciFact test run
against ``dotcat search --queries`` (must be identical), the baseline of one ``dotcat
search`` process per query (same queries, same run), the line-by-line mode's second answer,
and screenshots of the page (beside ``--output``). Writes
``eval/benchmarks/results/serve.md``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import httpx

import common
from common import DOTCAT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``dotcat serve`` as a child process; its stderr to ``log`` (a long run's warnings
    would fill a pipe nobody reads), else kept to say why it did not start."""

    def __init__(self, index: Path, *options: str, log: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [*DOTCAT, "-q", "serve", str(index), "--port", str(self.port), "--no-access-log"]
        self.log = open(log, "w") if log else subprocess.PIPE  # noqa: SIM115 - until stop()
        self.process = subprocess.Popen([*command, *options], stderr=self.log, text=True)
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                why = Path(log).read_text() if log else self.process.stderr.read()
                raise SystemExit(f"dotcat serve did not start: {why}")
            time.sleep(0.2)

    def peak_rss_mib(self) -> float:
        """VmHWM: the most resident memory the server has used so far (with ``--workers``,
        summed over the supervisor and its worker processes)."""
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return sum(_peak_rss_kib(p) for p in [pid, *map(int, children)]) / 1024

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)
        if self.log is not subprocess.PIPE:
            self.log.close()


def _peak_rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:  # ended meanwhile
        pass
    return 0


class Competitor:
    """One CPU-bound process spinning on a core while the block runs."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __enter__(self):
        if self.on:
            self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        if self.on:
            self.process.kill()
            self.process.wait()


async def _client(
    host: str, port: int, requests: list[bytes], first: int, stop_at: float, record
) -> None:
    """One keep-alive connection asking ``requests`` in turn until ``stop_at``.

    A minimal HTTP/1.1 client (status line, headers, a Content-Length body): a Python client
    library costs about a millisecond of CPU per request, which on 2 cores shared with the
    server would be measured as the server's slowness.
    """
    reader = writer = None
    i = first
    while time.perf_counter() < stop_at:
        request = requests[i % len(requests)]
        i += 1
        start = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            status, close = await asyncio.wait_for(_read_response(reader), 120)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            status, close = -1, True
        record(status, (time.perf_counter() - start) * 1000)
        if close and writer is not None:
            writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, whether the server closes the connection); the body is read and dropped."""
    status = int((await reader.readline()).split()[1])
    length, close = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            close = value.strip().lower() == b"close"
    await reader.readexactly(length)
    return status, close


@dataclass
class Tally:
    """What one level's clients saw, summed over its rounds."""

    clients: int
    wall: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # of 200 answers, ms
    rejected: list[float] = field(default_factory=list)  # of 503 answers, ms

    def record(self, status: int, ms: float) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status in (200, 503):
            (self.latencies if status == 200 else self.rejected).append(ms)

    def summary(self) -> dict:
        ok = sorted(self.latencies)
        pct = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))] if ok else float("nan")  # noqa: E731
        rejected = sorted(self.rejected)
        return {
            "clients": self.clients,
            "requests": sum(self.statuses.values()),
            "ok": self.statuses.get(200, 0),
            "throughput": self.statuses.get(200, 0) / self.wall,
            "p50": pct(0.50),
            "p95": pct(0.95),
            "p99": pct(0.99),
            "503": self.statuses.get(503, 0),
            "errors": sum(n for s, n in self.statuses.items() if s not in (200, 503)),
            "p99_503": rejected[int(0.99 * (len(rejected) - 1))] if rejected else None,
        }


def load(url: str, queries: list[str], tally: Tally, seconds: float, params: dict) -> None:
    """``tally.clients`` concurrent connections asking queries in turn for ``seconds``."""
    host, port = url.removeprefix("http://").split(":")
    head = f"HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    requests = [f"GET /search?{urlencode({'q': q, **params})} {head}".encode() for q in queries]

    async def crowd() -> float:
        stop_at = time.perf_counter() + seconds
        began = time.perf_counter()
        # Clients start at different queries (7 apart), as different users would.
        clients = (
            _client(host, int(port), requests, 7 * c, stop_at, tally.record)
            for c in range(tally.clients)
        )
        await asyncio.gather(*clients)
        return time.perf_counter() - began

    tally.wall += asyncio.run(crowd())


def levels_in_rounds(
    url: str, queries: list[str], levels: list[int], seconds: float, rounds: int, params: dict
) -> list[dict]:
    """Every level for ``seconds`` in all, run as ``rounds`` interleaved slices (1, 4, 16, 64,
    1, 4, ...), so a drift of the machine's speed (other tenants, clocks) during the block
    weighs on every level alike and the ratios between levels stay fair."""
    tallies = [Tally(clients) for clients in levels]
    for _ in range(rounds):
        for tally in tallies:
            load(url, queries, tally, seconds / rounds, params)
    return [t.summary() for t in tallies]


def server_run(
    url: str, topics: dict[str, str], k: int, stage: str
) -> dict[str, list[tuple[str, float]]]:
    """The server's answers to every query (``POST /search``, 64 at a time)."""
    run, qids = {}, list(topics)
    with httpx.Client(timeout=300) as http:
        for start in range(0, len(qids), 64):
            chunk = qids[start : start + 64]
            body = {"queries": [topics[q] for q in chunk], "k": k, "first_stage": stage}
            answer = http.post(f"{url}/search", json=body).json()
            for qid, result in zip(chunk, answer["results"], strict=True):
                run[qid] = [(h["doc_id"], h["score"]) for h in result["hits"]]
    return run


def identity_note(url: str, index: Path, data: Path, topics: dict[str, str], stage: str) -> str:
    """Whether the server's test run equals ``dotcat search --queries``'s (same settings)."""
    from dotcat.data import read_run

    with tempfile.TemporaryDirectory() as tmp:
        cli_run = Path(tmp) / "cli.trec"
        command = [*DOTCAT, "-q", "search", str(index), "--queries", str(data), "--split", "test"]
        command += ["--output", str(cli_run), "-k", "100", "--first-stage", stage]
        subprocess.run(command, check=True, capture_output=True)
        expected = read_run(cli_run)
    served = server_run(url, topics, 100, stage)
    same = all(
        dict(served[q]) == expected.get(q, {}) and len(served[q]) == len(expected.get(q, {}))
        for q in topics
    )
    return (
        f"- The server's SciFact test run ({len(topics)} queries, k=100, first stage {stage}, "
        f"`POST /search`) against `dotcat search --queries` with the same index and settings: "
        f"{'identical (every document id and score)' if same else 'DIFFERENT'}."
    )


def cold_start_baseline(index: Path, queries: list[str], extra: list[str]) -> list[float]:
    """Seconds of one ``dotcat search INDEX QUERY`` process per query (the pre-server way)."""
    times = []
    for query in queries:
        start = time.perf_counter()
        subprocess.run(
            [*DOTCAT, "-q", "search", str(index), query, *extra], capture_output=True, check=True
        )
        times.append(time.perf_counter() - start)
    return times


def line_mode_second_answer(index: Path, queries: list[str]) -> float:
    """Milliseconds from writing the second query to reading its answer (models loaded once)."""
    process = subprocess.Popen(
        [*DOTCAT, "-q", "search", str(index), "--json", "-k", "10"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    process.stdin.write(queries[0] + "\n")
    process.stdin.flush()
    process.stdout.readline()  # the first answer (after the model load)
    start = time.perf_counter()
    process.stdin.write(queries[1] + "\n")
    process.stdin.flush()
    json.loads(process.stdout.readline())
    elapsed = (time.perf_counter() - start) * 1000
    process.stdin.close()
    process.wait(timeout=60)
    return elapsed


def screenshots(url: str, out_dir: Path) -> list[Path]:
    """The page with a query, desktop and phone width, in Debian's chromium."""
    from playwright.sync_api import sync_playwright

    saved = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"],
        )
        for name, size in (("serve_page.png", (1100, 900)), ("serve_page_phone.png", (390, 844))):
            page = browser.new_page(viewport={"width": size[0], "height": size[1]})
            page.goto(f"{url}/?q=statins%20reduce%20cardiovascular%20risk")
            page.wait_for_selector(".hit")
            page.screenshot(path=str(out_dir / name))
            saved.append(out_dir / name)
        browser.close()
    return saved


def scaling_note(rows: list[str], stage: str) -> str:
    """Answers/s at each level over one client's, quiet (the acceptance: 16 clients >= 3x)."""
    rate = {}
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == stage and cells[1] == "quiet":
            rate[int(cells[2])] = float(cells[4])
    ratios = ", ".join(f"{c} clients {rate[c] / rate[1]:.2f}x" for c in sorted(rate) if c > 1)
    return f"- Throughput against one client ({stage}, quiet): {ratios}."


def row(mode: str, loaded: bool, r: dict, rss: float) -> str:
    return (
        f"| {mode} | {'loaded' if loaded else 'quiet'} | {r['clients']} | {r['requests']} | "
        f"{r['throughput']:.1f} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | "
        f"{r['errors']} | {r['503']} | {rss:.0f} |"
    )


def main() -> None:
    parser = common.parser(__doc__, output="serve.md", data=common.SCIFACT)
    parser.add_argument("--index", type=Path, default=Path("indexes/scifact-minilm"))
    parser.add_argument("--rerank", type=Path, default=None, help="a trained BERT_CAT")
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved slices per level")
    parser.add_argument("--first-stages", default="dense,hybrid", help="the first is re-ranked")
    parser.add_argument("--baseline-queries", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1, help="dotcat serve --workers")
    args = parser.parse_args()
    if args.baseline_queries < 1:
        parser.error("--baseline-queries must be >= 1 (the baseline is part of the benchmark)")

    from dotcat.data import load_queries

    topics = load_queries(args.data, split="test")
    queries = list(topics.values())
    levels = [int(c) for c in args.clients.split(",")]
    stages = args.first_stages.split(",")
    rows, notes = [], []
    print(f"machine: {common.describe()}", flush=True)

    # 1. each first stage (dense: the acceptance's "warm dense query"; hybrid: the index's
    # default when it has BM25), every level, quiet and loaded.
    workers = ["--workers", str(args.workers)]
    server = Server(args.index, *workers)
    try:
        for stage in stages:
            notes.append(identity_note(server.url, args.index, args.data, topics, stage))
            print(notes[-1], flush=True)
        for stage in stages:
            for loaded in (False, True):
                with Competitor(loaded):
                    params = {"k": 10, "first_stage": stage}
                    results = levels_in_rounds(
                        server.url, queries, levels, args.seconds, args.rounds, params
                    )
                for result in results:
                    rows.append(row(stage, loaded, result, server.peak_rss_mib()))
                    print(rows[-1], flush=True)
        shots = screenshots(server.url, args.output.parent)
        notes.append(f"- Page screenshots: {', '.join(f'`{p.name}`' for p in shots)}.")
    finally:
        server.stop()
    stage = stages[0]

    # 2. 64 clients against a queue of 16: the excess gets 503 at once, memory stays bounded.
    server = Server(args.index, "--queue-size", "16", "--max-batch", "16", *workers)
    try:
        before = server.peak_rss_mib()
        (full,) = levels_in_rounds(
            server.url, queries, [64], args.seconds, 1, {"k": 10, "first_stage": stage}
        )
        after = server.peak_rss_mib()
        rows.append(row(f"{stage}, queue 16", False, full, after))
        print(rows[-1], flush=True)
        answered = full["ok"] + full["503"] + full["errors"]
        notes.append(
            f"- 64 clients against a queue of 16 (`--queue-size 16 --max-batch 16`), "
            f"{args.seconds:g} s: {full['requests']} requests, {full['ok']} answered 200, "
            f"{full['503']} refused with 503 (p99 of a 503: {full['p99_503'] or 0:.1f} ms), "
            f"{full['errors']} other errors; every request got a response ({answered} of "
            f"{full['requests']}); peak RSS {before:.0f} MiB before, {after:.0f} MiB after."
        )
        print(notes[-1], flush=True)
    finally:
        server.stop()

    # 3. with BERT_CAT re-ranking at depth 20.
    if args.rerank is not None:
        reranking = ["--rerank", str(args.rerank), "--depth", str(args.depth), *workers]
        server = Server(args.index, *reranking)
        try:
            for loaded in (False, True):
                with Competitor(loaded):
                    few = [c for c in levels if c <= 16]
                    params = {"k": 10, "first_stage": stage}
                    results = levels_in_rounds(server.url, queries, few, args.seconds, 1, params)
                for result in results:
                    mode = f"{stage} + BERT_CAT@{args.depth}"
                    rows.append(row(mode, loaded, result, server.peak_rss_mib()))
                    print(rows[-1], flush=True)
        finally:
            server.stop()

    # 4. the pre-server baseline and the line-by-line mode.
    sample = queries[: args.baseline_queries]
    cold = cold_start_baseline(args.index, sample, ["-k", "10", "--first-stage", stages[0]])
    one_client = next(r for r in rows if r.startswith(f"| {stages[0]} | quiet | 1 |"))
    p50_served = float(one_client.split("|")[6])
    for stage in stages:
        notes.append(scaling_note(rows, stage))
    notes.append(
        f"- Baseline, one `dotcat search INDEX QUERY --first-stage {stages[0]}` process per "
        f"query ({len(sample)} queries, same index, quiet): p50 {statistics.median(cold):.2f} s, "
        f"max {max(cold):.2f} s; the server answers one client at p50 {p50_served:.1f} ms: "
        f"{statistics.median(cold) * 1000 / p50_served:.0f}x faster."
    )
    second = line_mode_second_answer(args.index, queries)
    notes.append(
        f"- Line-by-line mode (`dotcat search INDEX` reading stdin, models loaded once): the "
        f"second query answered in {second:.1f} ms."
    )
    for note in notes[-2 - len(stages) :]:
        print(note, flush=True)

    lines = [
        *common.header(
            "dotcat serve under load",
            "`precision auto`; server defaults (`--batch-window-ms 5`, `--max-batch 64`, "
            "`--queue-size 64`"
            + (f", per worker; `--workers {args.workers}`" if args.workers != 1 else "")
            + "); the load generator (one asyncio process, one keep-alive HTTP/1.1 connection "
            "per client) runs on the same cores as the server.",
        ),
        f"`GET /search?q=...&k=10&first_stage=...` with SciFact test queries in turn (the "
        "answers carry each hit's title and text); each level runs "
        f"{args.seconds:g} s in all, as {args.rounds} slices interleaved with the other levels "
        "(1, 4, 16, 64, 1, 4, ...: a drift of the machine's speed weighs on every level alike; "
        "re-ranking: one slice). *Loaded*: one other process spins on a core the whole block. "
        "Latencies are of 200 answers, client side; RSS is the server's peak so far (VmHWM).",
        "",
        "| first stage | CPU | clients | requests | answers/s | p50 ms | p95 ms | p99 ms | "
        "errors | 503 | peak RSS MiB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        *notes,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    os.environ.setdefault("DOTCAT_QUIET", "1")
    main()
