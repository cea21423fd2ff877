"""dotcat serve under load: latency and throughput at 1-64 concurrent clients, quiet and loaded.

    python eval/bench_serve.py [--index indexes/scifact-minilm] [--rerank runs/cat] [--seconds 20]

Starts ``dotcat serve`` on 127.0.0.1 as a user would, then replays SciFact test queries
(``GET /search``, k=10) from 1, 4, 16 and 64 concurrent clients (threads with keep-alive
connections, in this process), each level for a fixed time; records throughput, p50/p95/p99
latency, errors, 503s and the server's peak RSS; each level quiet and with one competing
CPU-bound process. With ``--rerank``: the same with BERT_CAT re-ranking at depth 20 (1, 4, 16
clients). Also: 64 clients against a small queue (the excess must get 503 at once), the
server's SciFact test run against ``dotcat search --queries`` (must be identical), the
baseline of one ``dotcat search`` process per query (same queries, same run), the line-by-line
mode's second answer, and screenshots of the page. Writes ``eval/results/serve.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from machine import describe  # eval/machine.py; scripts run as python eval/NAME.py

DOTCAT = str(Path(sys.executable).with_name("dotcat"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``dotcat serve`` as a child process."""

    def __init__(self, index: Path, *options: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [DOTCAT, "-q", "serve", str(index), "--port", str(self.port), "--no-access-log"]
        self.process = subprocess.Popen([*command, *options], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"dotcat serve did not start: {self.process.stderr.read()}")
            time.sleep(0.2)

    def peak_rss_mib(self) -> float:
        """VmHWM: the most resident memory the server has used so far."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)


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


def load(url: str, queries: list[str], clients: int, seconds: float, params: dict) -> dict:
    """``clients`` threads asking queries in turn for ``seconds``; latencies and statuses."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    rejected: list[float] = []
    lock = threading.Lock()
    counter = iter(range(10**9))
    stop_at = time.perf_counter() + seconds

    def client() -> None:
        with httpx.Client(timeout=120) as http:
            while time.perf_counter() < stop_at:
                with lock:
                    query = queries[next(counter) % len(queries)]
                start = time.perf_counter()
                try:
                    status = http.get(f"{url}/search", params={"q": query, **params}).status_code
                except httpx.HTTPError:
                    status = -1
                elapsed = (time.perf_counter() - start) * 1000
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1
                    (latencies if status == 200 else rejected).append(elapsed)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    ok = sorted(latencies)
    pct = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))] if ok else float("nan")  # noqa: E731
    return {
        "clients": clients,
        "requests": sum(statuses.values()),
        "ok": statuses.get(200, 0),
        "throughput": statuses.get(200, 0) / wall,
        "p50": pct(0.50),
        "p95": pct(0.95),
        "p99": pct(0.99),
        "503": statuses.get(503, 0),
        "errors": sum(n for s, n in statuses.items() if s not in (200, 503)),
        "p99_503": sorted(rejected)[int(0.99 * (len(rejected) - 1))] if rejected else None,
    }


def server_run(url: str, topics: dict[str, str], k: int) -> dict[str, list[tuple[str, float]]]:
    """The server's answers to every query (``POST /search``, 64 at a time)."""
    run, qids = {}, list(topics)
    with httpx.Client(timeout=300) as http:
        for start in range(0, len(qids), 64):
            chunk = qids[start : start + 64]
            body = {"queries": [topics[q] for q in chunk], "k": k}
            answer = http.post(f"{url}/search", json=body).json()
            for qid, result in zip(chunk, answer["results"], strict=True):
                run[qid] = [(h["doc_id"], h["score"]) for h in result["hits"]]
    return run


def cold_start_baseline(index: Path, queries: list[str], extra: list[str]) -> list[float]:
    """Seconds of one ``dotcat search INDEX QUERY`` process per query (the pre-server way)."""
    times = []
    for query in queries:
        start = time.perf_counter()
        subprocess.run(
            [DOTCAT, "-q", "search", str(index), query, *extra], capture_output=True, check=True
        )
        times.append(time.perf_counter() - start)
    return times


def line_mode_second_answer(index: Path, queries: list[str]) -> float:
    """Milliseconds from writing the second query to reading its answer (models loaded once)."""
    process = subprocess.Popen(
        [DOTCAT, "-q", "search", str(index), "--json", "-k", "10"],
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


def row(mode: str, loaded: bool, r: dict, rss: float) -> str:
    return (
        f"| {mode} | {'loaded' if loaded else 'quiet'} | {r['clients']} | {r['requests']} | "
        f"{r['throughput']:.1f} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | "
        f"{r['errors']} | {r['503']} | {rss:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, default=Path("indexes/scifact-minilm"))
    parser.add_argument("--data", type=Path, default=Path("data/scifact"))
    parser.add_argument("--rerank", type=Path, default=None, help="a trained BERT_CAT")
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--baseline-queries", type=int, default=10)
    parser.add_argument("--output", type=Path, default=Path("eval/results/serve.md"))
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from dotcat.data import load_queries, read_run

    topics = load_queries(args.data, split="test")
    queries = list(topics.values())
    levels = [int(c) for c in args.clients.split(",")]
    rows, notes = [], []
    print(f"machine: {describe()}", flush=True)

    # 1. dense first stage (the index's default: hybrid when it has BM25), all levels.
    server = Server(args.index)
    try:
        # The server's test run against the CLI's, same settings.
        with tempfile.TemporaryDirectory() as tmp:
            cli_run = Path(tmp) / "cli.trec"
            subprocess.run(
                [
                    DOTCAT,
                    "-q",
                    "search",
                    str(args.index),
                    "--queries",
                    str(args.data),
                    "--split",
                    "test",
                    "--output",
                    str(cli_run),
                    "-k",
                    "100",
                ],  # fmt: skip
                check=True,
                capture_output=True,
            )
            expected = read_run(cli_run)
        served = server_run(server.url, topics, 100)
        same = all(
            dict(served[q]) == expected.get(q, {}) and len(served[q]) == len(expected.get(q, {}))
            for q in topics
        )
        notes.append(
            f"- The server's SciFact test run (300 queries, k=100, `POST /search`) against "
            f"`dotcat search --queries` with the same index and settings: "
            f"{'identical (every document id and score)' if same else 'DIFFERENT'}."
        )
        print(notes[-1], flush=True)
        stage = httpx.get(f"{server.url}/info").json()["pipeline"]["first_stage"]
        for loaded in (False, True):
            with Competitor(loaded):
                for clients in levels:
                    result = load(server.url, queries, clients, args.seconds, {"k": 10})
                    rows.append(row(stage, loaded, result, server.peak_rss_mib()))
                    print(rows[-1], flush=True)
        shots = screenshots(server.url, args.output.parent)
        notes.append(f"- Page screenshots: {', '.join(f'`{p.name}`' for p in shots)}.")
    finally:
        server.stop()

    # 2. 64 clients against a queue of 16: the excess gets 503 at once, memory stays bounded.
    server = Server(args.index, "--queue-size", "16", "--max-batch", "16")
    try:
        before = server.peak_rss_mib()
        full = load(server.url, queries, 64, args.seconds, {"k": 10})
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
        server = Server(args.index, "--rerank", str(args.rerank), "--depth", str(args.depth))
        try:
            for loaded in (False, True):
                with Competitor(loaded):
                    for clients in [c for c in levels if c <= 16]:
                        result = load(server.url, queries, clients, args.seconds, {"k": 10})
                        mode = f"{stage} + BERT_CAT@{args.depth}"
                        rows.append(row(mode, loaded, result, server.peak_rss_mib()))
                        print(rows[-1], flush=True)
        finally:
            server.stop()

    # 4. the pre-server baseline and the line-by-line mode.
    sample = queries[: args.baseline_queries]
    cold = cold_start_baseline(args.index, sample, ["-k", "10"])
    one_client = next(r for r in rows if "| quiet | 1 |" in r)
    p50_served = float(one_client.split("|")[6])
    notes.append(
        f"- Baseline, one `dotcat search INDEX QUERY` process per query ({len(sample)} "
        f"queries, same index and default settings, quiet): p50 {statistics.median(cold):.2f} s, "
        f"max {max(cold):.2f} s; the server answers one client at p50 {p50_served:.1f} ms: "
        f"{statistics.median(cold) * 1000 / p50_served:.0f}x faster."
    )
    second = line_mode_second_answer(args.index, queries)
    notes.append(
        f"- Line-by-line mode (`dotcat search INDEX` reading stdin, models loaded once): the "
        f"second query answered in {second:.1f} ms."
    )
    for note in notes[-2:]:
        print(note, flush=True)

    lines = [
        "# dotcat serve under load",
        "",
        f"Command: `python eval/bench_serve.py --index {args.index}"
        + (f" --rerank {args.rerank}" if args.rerank else "")
        + f" --seconds {args.seconds:g}`",
        f"Machine: {describe()}; `precision auto`; the load generator (Python threads with "
        "keep-alive connections) runs on the same 2 cores as the server.",
        "",
        f"`GET /search?q=...&k=10` with SciFact test queries in turn; each level runs "
        f"{args.seconds:g} s. *Loaded*: one other process spins on a core the whole level. "
        "Latencies are of 200 answers, client side; RSS is the server's peak so far (VmHWM).",
        "",
        "| first stage | CPU | clients | requests | answers/s | p50 ms | p95 ms | p99 ms | "
        "errors | 503 | peak RSS MiB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        *notes,
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    os.environ.setdefault("DOTCAT_QUIET", "1")
    main()
