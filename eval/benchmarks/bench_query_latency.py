"""One query's latency, quiet and with the CPU shared: the thread setting that holds up.

    python eval/benchmarks/bench_query_latency.py [--index indexes/scifact-minilm] [--queries 100]

Loads a dense index once, then times ``DenseRetriever.search`` on SciFact test queries one at
a time (encoding + FAISS + doc store), for each intra-op thread setting: 1 thread, every core
(PyTorch's default), and dotcat's own choice (``auto``). Each runs twice: on a quiet CPU and
with one competing CPU-bound process (a busy loop, started and stopped by this script).
Baseline: PyTorch's default (every core) on the quiet CPU, measured in the same run. Writes
``eval/benchmarks/results/query_latency.md`` (a section per run when the file exists).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

import common


@contextmanager
def competing_process(on: bool):
    """A CPU-bound busy loop in another process while the block runs (if ``on``)."""
    if not on:
        yield
        return
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(1.0)  # let it take its core
    try:
        yield
    finally:
        busy.kill()
        busy.wait()


def time_queries(retriever, texts: list[str], settings: list[str]) -> dict[str, list[float]]:
    """Milliseconds per ``search`` call for each intra-op thread setting.

    The settings take turns query by query (not one block after another), so a drift of the
    machine's speed during the run falls on all of them alike.
    """
    before = torch.get_num_threads()
    times: dict[str, list[float]] = {s: [] for s in settings}
    try:
        for text in texts[:5]:  # warm-up
            retriever.search(text, k=10)
        for text in texts:
            for setting in settings:
                retriever.encoder.single_query_threads = None if setting == "auto" else int(setting)
                start = time.perf_counter()
                retriever.search(text, k=10)
                times[setting].append((time.perf_counter() - start) * 1000)
    finally:
        retriever.encoder.single_query_threads = None
        torch.set_num_threads(before)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def main() -> None:
    parser = common.parser(__doc__, output="query_latency.md", data=common.SCIFACT)
    parser.add_argument("--index", type=Path, default=Path("indexes/scifact-minilm"))
    parser.add_argument("--queries", type=int, default=300, help="queries per setting")
    parser.add_argument("--precision", default="auto", help="query encoder: auto, fp32, bf16")
    args = parser.parse_args()

    from dotcat.data import load_queries
    from dotcat.search.dense import DenseRetriever

    texts = list(load_queries(args.data, split="test").values())[: args.queries]
    retriever = DenseRetriever(args.index, device="cpu", precision=args.precision)
    cores = torch.get_num_threads()
    settings = [("1", "1 thread"), (str(cores), f"{cores} threads (PyTorch default)")]
    settings.append(("auto", "dotcat default"))
    rows = []
    for loaded in (False, True):
        with competing_process(loaded):
            times = time_queries(retriever, texts, [threads for threads, _ in settings])
        for threads, label in settings:
            p50, p95 = statistics.median(times[threads]), percentile(times[threads], 0.95)
            rows.append((label, loaded, p50, p95))
            state = "loaded" if loaded else "quiet"
            print(f"{label:32} {state:6} p50 {p50:8.1f} ms  p95 {p95:8.1f} ms", flush=True)

    baseline = next(r for r in rows if r[0].endswith("(PyTorch default)") and not r[1])[2]
    lines = [
        *common.header(
            "One query's latency, quiet and with a competing CPU-bound process",
            f"Encoder precision {retriever.encoder.manifest_entry()['precision']}.",
            torch=True,
        ),
        f"`DenseRetriever.search(query, k=10)` on {args.index} (SciFact, 5,183 documents, "
        f"Flat), {len(texts)} SciFact test queries one at a time after 5 warm-up calls, the "
        "thread settings taking turns query by query: query encoding, FAISS search and "
        "doc-store lookup. *Loaded*: one other process spins on a core the whole time. "
        "Baseline for the ratio: PyTorch's default thread count on the quiet CPU, same run.",
        "",
        "| threads | CPU | p50 ms | p95 ms | p50 vs baseline |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for label, loaded, p50, p95 in rows:
        lines.append(
            f"| {label} | {'loaded' if loaded else 'quiet'} | {p50:.1f} | {p95:.1f} | "
            f"{p50 / baseline:.2f}x |"
        )
    if args.output.exists():  # one file, a section per run (e.g. per precision)
        section = [f"## Run: --precision {args.precision}", *lines[1:]]
        lines = [args.output.read_text().rstrip(), "", *section]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
