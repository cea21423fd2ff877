"""An index that stays current: a 5,000-file folder synced in seconds, and served while it changes.

    python eval/benchmarks/bench_sync.py [--work runs/bench_sync] [--files 5000] \\
        [--rounds 100] [--clients 8]

Part 1, a sync against a rebuild. SciFact's first ``--files`` documents are written as Markdown
files (``# title``, then the text) and indexed once (``dotcat index FOLDER INDEX``, the
defaults: BM25 + dense, hybrid). Then 1 file is edited, 10 added (the next SciFact documents),
10 removed and 1 renamed, and the same command syncs the index: its wall time (the process,
imports and model load included) and the sync's own (its summary line). A fresh build of the
changed folder is timed in the same run: the rebuild the sync spares. Both indexes then answer
SciFact's test queries (dense, BM25, hybrid; k=100): the same documents, scores within 1e-5.
One more change (1 edited, 1 added, 1 removed) is synced in this process with each part
timed: what a generation costs.

Part 2, serving while the folder changes. ``dotcat serve INDEX --watch`` over the synced
index; ``--clients`` clients ask the test queries (hybrid, k=10; bench_serve's load tool) for
30 s with the folder quiet, then during ``--rounds`` rounds of changes (a file added, edited,
then removed, in turn), each round waiting until its change is searchable. Reported: failed
requests, p50/p99 latency quiet and during the syncs, and each change's delay from the
publication of the generation that holds it (``/info``'s ``made``) to its first answer.

Writes ``eval/benchmarks/results/sync.md``. Intermediate folders and indexes go to ``--work``;
a second run reuses the first build if the folder is the same.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import resource
import shutil
import statistics
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx

import common
from bench_serve import Server, Tally, load

STAGES = ("dense", "bm25", "hybrid")
TOLERANCE = 1e-5


def scifact_documents(data: Path) -> list[dict]:
    with gzip.open(data / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write_file(folder: Path, doc: dict, name: str | None = None) -> Path:
    path = folder / (name or f"{doc['_id']}.md")
    path.write_text(f"# {doc['title']}\n\n{doc['text']}\n", encoding="utf-8")
    return path


def timed(*args) -> tuple[str, float, float]:
    """``dotcat ARGS``: its first output line, the command's wall seconds and its CPU seconds
    (user + system: what other tenants of the machine do not inflate)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out, seconds = common.dotcat(*args, capture=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return out.strip().splitlines()[0], seconds, cpu


def change_folder(folder: Path, docs: list[dict], n: int) -> str:
    """1 edited, 10 added, 10 removed, 1 renamed."""
    edited = docs[0]
    write_file(folder, {**edited, "text": edited["text"] + " Edited: a sentence added."})
    for doc in docs[n : n + 10]:
        write_file(folder, doc)
    for doc in docs[1:11]:
        (folder / f"{doc['_id']}.md").unlink()
    renamed = docs[11]["_id"]
    (folder / f"{renamed}.md").rename(folder / f"renamed-{renamed}.md")
    return "1 edited, 10 added, 10 removed, 1 renamed"


def compare(synced: Path, fresh: Path, topics: dict[str, str]) -> list[str]:
    """Rows of the comparison table: per first stage, the queries whose top 100 are the same
    documents (ranked alike, ties allowed), and the largest score difference."""
    from dotcat.search.pipeline import SearchPipeline

    a, b = SearchPipeline(synced), SearchPipeline(fresh)
    rows = []
    for stage in STAGES:
        mine = a.run(topics, k=100, first_stage=stage)
        theirs = b.run(topics, k=100, first_stage=stage)
        same, worst, ranked = 0, 0.0, 0
        for qid in topics:
            x, y = dict(mine[qid]), dict(theirs[qid])
            common_ids = x.keys() & y.keys()
            worst = max([worst, *(abs(x[i] - y[i]) for i in common_ids)])
            # A document only one side has must sit at that side's cut, tied within tolerance.
            cut_x = min(x.values(), default=0.0)
            cut_y = min(y.values(), default=0.0)
            only = [x[i] - cut_x for i in x.keys() - y.keys()]
            only += [y[i] - cut_y for i in y.keys() - x.keys()]
            same += all(abs(d) <= TOLERANCE for d in only)
            order = [i for i, _ in mine[qid] if i in common_ids]
            other = [i for i, _ in theirs[qid] if i in common_ids]
            ranked += order == other or _tied_alike(order, other, x)
        rows.append(
            f"| {stage} | {same}/{len(topics)} | {ranked}/{len(topics)} | {worst:.2e} | "
            f"{'yes' if worst <= TOLERANCE and same == len(topics) else 'no'} |"
        )
    return rows


def _tied_alike(a: list[str], b: list[str], scores: dict[str, float]) -> bool:
    """Two orders of the same documents that differ only among scores within the tolerance."""
    return all(abs(scores[x] - scores[y]) <= TOLERANCE for x, y in zip(a, b, strict=True))


def breakdown(folder: Path, index: Path, docs: list[dict], n: int) -> list[str]:
    """One more change synced in this process, each part of the sync timed."""
    import dotcat.index.layout as layout
    import dotcat.index.sync as sync
    import dotcat.index.updates as updates
    from dotcat.index.encoder import load_document_encoder

    spent: dict[str, float] = {}

    def clock(owner, name: str, label: str) -> None:
        real = getattr(owner, name)

        def timed_call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - start

        setattr(owner, name, timed_call)

    parts = [
        (sync, "open_source", "walk the folder (stat every file)"),
        (sync, "_compare", "compare: read the changed files, diff with the doc store"),
        (layout, "copy_for_update", "make the next generation (links + doc store copy)"),
        (updates, "_add", "encode and add the new documents (doc store, FAISS)"),
        (updates, "_finish", "write the FAISS index"),
        (updates, "_update_bm25", "BM25: rows dropped and added, scored again, saved"),
        (layout, "fsync_tree", "fsync the generation"),
        (layout, "swap_into_place", "swap it in, remove the old one"),
    ]
    for owner, name, label in parts:
        clock(owner, name, label)
    load_start = time.perf_counter()
    manifest = updates.Manifest.read(index)
    encoder = load_document_encoder(updates.document_config(manifest, {}))
    loading = time.perf_counter() - load_start
    write_file(folder, {**docs[0], "text": docs[0]["text"] + " Edited twice."})
    write_file(folder, docs[n + 10])
    (folder / f"{docs[12]['_id']}.md").unlink()
    start = time.perf_counter()
    result = sync.sync_index(folder, index, encoder=encoder, show_progress=False)
    total = time.perf_counter() - start
    rows = [f"| {label} | {spent.get(label, 0.0):.3f} |" for _, _, label in parts]
    rows.append(f"| **the sync, in all** ({result.added} added, {result.changed} changed, "
                f"{result.removed} removed) | {total:.3f} |")  # fmt: skip
    rows.append(f"| (loading the encoder, before: the command pays it) | {loading:.3f} |")
    sizes = {p.name: p.stat().st_size for p in index.rglob("*") if p.is_file()}
    copied = sizes.get("docstore.sqlite", 0)
    rows.append(
        f"| written per generation: doc store copy {copied / 2**20:.1f} MiB, FAISS "
        f"{sizes.get('index.faiss', 0) / 2**20:.1f} MiB, BM25 "
        f"{sum(s for p, s in sizes.items() if p.endswith('.npy')) / 2**20:.1f} MiB | |"
    )
    return rows


def served_rounds(url: str, folder: Path, rounds: int) -> list[dict]:
    """``rounds`` changes (add, edit, remove in turn), each waited for until searchable."""
    live = folder / "live"
    live.mkdir(exist_ok=True)
    out = []
    with httpx.Client(timeout=60) as http:
        info = lambda: http.get(f"{url}/info").json()["index"]  # noqa: E731
        for i in range(rounds):
            kind = ("add", "edit", "remove")[i % 3]
            path = live / f"r{i - i % 3}.md"
            token = f"zq{i}x" if kind != "remove" else f"zq{i - 1}x"
            generation = info()["generation"]
            changed = time.time()
            if kind == "remove":
                path.unlink()
            else:
                path.write_text(f"# Live {i}\n\nA {kind} of round {i}: {token} words.\n")
            deadline, made = time.monotonic() + 120, None
            while time.monotonic() < deadline:
                now = info()
                if now["generation"] > generation:
                    params = {"q": token, "k": 1, "first_stage": "bm25"}
                    hits = http.get(f"{url}/search", params=params).json()["hits"]
                    found = bool(hits) and hits[0]["doc_id"] == f"live/{path.name}"
                    if found != (kind == "remove"):
                        made = datetime.fromisoformat(now["made"]).timestamp()
                        break
                time.sleep(0.02)
            seen = time.time()
            if made is None:
                raise SystemExit(f"round {i} ({kind}): not searchable within 120 s")
            out.append({"kind": kind, "delay": seen - made, "whole": seen - changed})
    return out


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    p = common.parser(__doc__, output="sync.md", data=common.SCIFACT, work="runs/bench_sync")
    p.add_argument("--files", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--clients", type=int, default=8)
    args = p.parse_args()
    common.setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    from dotcat.data import load_queries

    docs = scifact_documents(args.data)
    topics = load_queries(args.data, split="test")
    folder, index, fresh = args.work / "files", args.work / "index", args.work / "fresh"
    shutil.rmtree(args.work, ignore_errors=True)
    folder.mkdir(parents=True)
    for doc in docs[: args.files]:
        write_file(folder, doc)
    load_before = os.getloadavg()[0]
    built, built_s, built_cpu = timed("index", folder, index)
    what = change_folder(folder, docs, args.files)
    synced, sync_s, sync_cpu = timed("index", folder, index)
    sync_own = float(synced.split(" in ", 1)[1].split(" s", 1)[0])
    rebuilt, rebuild_s, rebuild_cpu = timed("index", folder, fresh)
    load_after = os.getloadavg()[0]
    rows = compare(index, fresh, topics)
    parts = breakdown(folder, index, docs, args.files)

    server = Server(index, "--watch", log=args.work / "serve.log")
    try:
        params = {"k": 10}
        queries = list(topics.values())
        quiet = Tally(args.clients)
        load(server.url, queries, quiet, 30.0, params)
        busy, stop = Tally(args.clients), threading.Event()

        def keep_loading() -> None:
            while not stop.is_set():
                load(server.url, queries, busy, 5.0, params)

        crowd = threading.Thread(target=keep_loading)
        crowd.start()
        try:
            changes = served_rounds(server.url, folder, args.rounds)
        finally:
            stop.set()
            crowd.join()
    finally:
        server.stop()
    q, b = quiet.summary(), busy.summary()
    delays = [c["delay"] for c in changes]
    wholes = [c["whole"] for c in changes]

    lines = common.header(
        "Sync: an index kept current",
        f"{args.files} SciFact documents as Markdown files; `dotcat index` defaults (BM25 + "
        f"dense, {os.cpu_count()} cores).",
        torch=True,
    )
    lines += [
        "## A sync against a rebuild, same run",
        "",
        f"Change: {what}.",
        "",
        f"Load average (1 min) before the first build {load_before:.1f}, after the rebuild "
        f"{load_after:.1f} (the machine is shared: CPU seconds are what others do not "
        "inflate).",
        "",
        "| step | wall s (command) | CPU s (user + system) | what it printed |",
        "| --- | --- | --- | --- |",
        f"| first build | {built_s:.1f} | {built_cpu:.1f} | {built} |",
        f"| **sync** | **{sync_s:.1f}** | **{sync_cpu:.1f}** | {synced} |",
        f"| fresh build of the changed folder | {rebuild_s:.1f} | {rebuild_cpu:.1f} | {rebuilt} |",
        "",
        f"The sync took {sync_s:.1f} s as a command, {sync_own:.1f} s of it its own (the "
        f"summary line's: walking, reading, encoding, publishing, the model's load; the rest "
        f"is Python's imports), against {rebuild_s:.1f} s for the rebuild "
        f"({rebuild_s / sync_s:.0f}x); in CPU time {sync_cpu:.1f} s against {rebuild_cpu:.1f} "
        "s.",
        "",
        f"Searching the synced index against the fresh build, {len(topics)} test queries, "
        "k=100 (a document in one top 100 only must sit at its cut, tied within 1e-5):",
        "",
        "| first stage | same documents | same order (ties allowed) | largest score difference "
        "| equal to 1e-5 |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
        "## What a generation costs (one more change, synced in this process)",
        "",
        "| part | seconds |",
        "| --- | --- |",
        *parts,
        "",
        f"## Served while the folder changes: `dotcat serve --watch`, {args.clients} clients",
        "",
        f"{args.rounds} rounds of changes (a file added, edited, removed in turn); each round "
        "waits until its change is searchable.",
        "",
        "| phase | requests | failed | answers/s | p50 ms | p99 ms |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| quiet, 30 s | {q['requests']} | {q['errors'] + q['503']} | {q['throughput']:.1f} | "
        f"{q['p50']:.1f} | {q['p99']:.1f} |",
        f"| during the {args.rounds} syncs | {b['requests']} | {b['errors'] + b['503']} | "
        f"{b['throughput']:.1f} | {b['p50']:.1f} | {b['p99']:.1f} |",
        "",
        "| delay | median s | p99 s | max s |",
        "| --- | --- | --- | --- |",
        f"| generation published -> the change answered | {statistics.median(delays):.2f} | "
        f"{quantile(delays, 0.99):.2f} | {max(delays):.2f} |",
        f"| file written -> the change answered (watch debounce + sync + swap) | "
        f"{statistics.median(wholes):.2f} | {quantile(wholes, 0.99):.2f} | {max(wholes):.2f} |",
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
