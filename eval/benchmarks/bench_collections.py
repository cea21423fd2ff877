"""Today's first stages on every test collection, through the CLI as a user runs it.

    python eval/benchmarks/bench_collections.py [--collections pylib faq pydoc debian scifact]

For each collection (built first by ``ood_collections.py`` into ``runs/collections/NAME``;
``scifact`` is the bundled ``data/scifact``): ``dotcat bm25``; ``dotcat index`` with the
default encoder (all-MiniLM-L6-v2, packaged; documents cut at its 256-token window; BM25
beside it, the hybrid fusion chosen on the collection's dev queries), under ``/usr/bin/time
-v`` for its wall time and peak RSS, and the index's size on disk; ``dotcat search`` with
``--first-stage dense`` and with the default (hybrid), 100 results a query; ``dotcat eval``
nDCG@10 and R@100 on test and dev. Writes ``eval/benchmarks/results/collections.md``.

These are the truncation baseline: a document is what the encoder reads of its first 256
tokens. On ``pylib`` every answer lies beyond them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import common

COLLECTIONS = ("pylib", "faq", "pydoc", "debian", "scifact")
SPLITS = ("test", "dev")
MEASURES = ("nDCG@10", "R@100")
DEPTH = 100


def data_dir(name: str, root: Path) -> Path:
    """Where a collection lies; a missing one is built (``ood_collections.py``)."""
    if name == "scifact":
        return common.SCIFACT
    path = root / name
    if not (path / "corpus.jsonl").exists():
        builder = Path(__file__).with_name("ood_collections.py")
        subprocess.run([sys.executable, str(builder), name, str(path)], check=True)
    return path


def has_split(data: Path, split: str) -> bool:
    return (data / "qrels" / f"{split}.tsv").exists()


def timed_index(data: Path, index: Path) -> dict:
    """``dotcat index DATA INDEX`` from scratch under ``/usr/bin/time -v``: what it printed,
    its wall seconds, its peak RSS and the index's size."""
    if index.exists():
        shutil.rmtree(index)
    load = os.getloadavg()[0]
    line = ["/usr/bin/time", "-v", *common.DOTCAT, "-q", "index", str(data), str(index)]
    print("$ dotcat index", data, index, flush=True)
    started = time.perf_counter()
    done = subprocess.run(line, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"dotcat index {data} failed:\n{done.stderr[-3000:]}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    size = sum(p.stat().st_size for p in index.rglob("*") if p.is_file())
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    return {
        "printed": done.stdout.strip(),
        "wall": wall,
        "rss_mib": int(rss.group(1)) / 1024 if rss else float("nan"),
        "disk_mib": size / 2**20,
        "precision": manifest.get("encoder", {}).get("precision", "?"),
        "load": load,
    }


def runs_for(name: str, data: Path, work: Path) -> tuple[dict, dict]:
    """Every run of one collection; returns the index figures and, per split, run paths."""
    index = work / "index"
    runs: dict[str, dict[str, Path]] = {}
    for split in SPLITS:
        if not has_split(data, split):
            continue
        path = work / f"bm25.{split}.trec"
        common.dotcat("bm25", data, "--queries", data, "--split", split, "--output", path)
        runs[split] = {"BM25": path}
    figures = timed_index(data, index)
    for split in runs:
        for system, stage in (("dense", "dense"), ("hybrid (default)", "auto")):
            path = work / f"{stage}.{split}.trec"
            common.dotcat(
                "search", index, "--queries", data, "--split", split, "--first-stage", stage,
                "-k", DEPTH, "--output", path,
            )  # fmt: skip
            runs[split][system] = path
    return figures, runs


def evaluate(runs: dict[str, Path], data: Path, split: str) -> dict[str, dict[str, float]]:
    """nDCG@10 and R@100 of each run with ``dotcat eval --json``."""
    measures = [arg for m in MEASURES for arg in ("-m", m)]
    out, _ = common.dotcat(
        "eval", *runs.values(), data, "--split", split, *measures, "--json", capture=True
    )
    reports = json.loads(out)
    return {
        system: reports[path.name]["aggregate"] | {"queries": reports[path.name]["n_queries"]}
        for system, path in runs.items()
    }


def collection_lines(name: str, data: Path, figures: dict, scores: dict) -> list[str]:
    lines = [f"## {name}", "", f"Data: `{common.shown(data)}`.", ""]
    lines += ["| split | system | queries | nDCG@10 | R@100 |", "| --- | --- | --- | --- | --- |"]
    for split, systems in scores.items():
        for system, s in systems.items():
            lines.append(
                f"| {split} | {system} | {s['queries']} | {s['nDCG@10']:.4f} | {s['R@100']:.4f} |"
            )
    lines += [
        "",
        f"`dotcat index`: {figures['wall']:.1f} s wall (model load and the dev fusion choice "
        f"included), peak RSS {figures['rss_mib']:.0f} MiB, index {figures['disk_mib']:.1f} MiB "
        f"on disk, encoder precision {figures['precision']} (`auto`); load average "
        f"{figures['load']:.1f} when it started (the machine is shared). It printed:",
        "",
        *[f"    {line}" for line in figures["printed"].splitlines()],
        "",
    ]
    source = data / "SOURCE.md"
    if source.exists():  # what the collection holds: its build, statistics and checksums
        body = source.read_text(encoding="utf-8").splitlines()
        lines += [f"### {body[0].lstrip('# ')}", *body[1:], ""]
    return lines


def main() -> None:
    parser = common.parser(__doc__, output="collections.md", work="runs/bench_collections")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument(
        "--built", type=Path, default=Path("runs/collections"), help="built collections"
    )
    args = parser.parse_args()
    sections, summary = [], []
    for name in args.collections:
        data = data_dir(name, args.built)
        work = args.work / name
        work.mkdir(parents=True, exist_ok=True)
        figures, runs = runs_for(name, data, work)
        scores = {split: evaluate(paths, data, split) for split, paths in runs.items()}
        sections += collection_lines(name, data, figures, scores)
        test = scores["test"]
        summary.append(
            f"| {name} | "
            + " | ".join(f"{test[s]['nDCG@10']:.4f}" for s in ("BM25", "dense", "hybrid (default)"))
            + f" | {figures['wall']:.0f} s | {figures['rss_mib']:.0f} MiB |"
        )
    lines = common.header(
        "Test collections: BM25, dense and the default hybrid (documents cut at 256 tokens)",
        "Precision: `auto` (what it chose is under each collection).",
        torch=True,
    )
    lines += [
        "Each collection's `SOURCE.md` (in `runs/collections/NAME/`, written by "
        "`ood_collections.py`) says what it holds. Commands per collection, as run: "
        "`dotcat bm25 DATA --queries DATA --split S --output bm25.S.trec`; "
        "`/usr/bin/time -v dotcat index DATA INDEX`; "
        f"`dotcat search INDEX --queries DATA --split S --first-stage dense|auto -k {DEPTH} "
        "--output RUN`; `dotcat eval RUNS DATA --split S -m nDCG@10 -m R@100`.",
        "",
        "The dev rows of the hybrid are optimistic: its fusion is chosen on those queries.",
        "",
        "Test nDCG@10 (and the index build):",
        "",
        "| collection | BM25 | dense | hybrid (default) | index wall | peak RSS |",
        "| --- | --- | --- | --- | --- | --- |",
        *summary,
        "",
        *sections,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
