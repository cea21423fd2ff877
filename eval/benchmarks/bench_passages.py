"""Long documents as passages against documents cut at the window, on pylib and SciFact.

    python eval/benchmarks/bench_passages.py [--collections pylib scifact]

For each collection (``--built NAME``, built by ``ood_collections.py``; ``scifact`` is the
bundled ``data/scifact``), two indexes of the default encoder at ``auto`` precision, with BM25
beside them and the hybrid fusion chosen on the collection's dev queries:

* **passages**: ``dotcat index DATA INDEX --passages``, forced (the default splits pylib but
  not SciFact, whose documents are mostly under twice the window; docs/passages.md), with the
  default window (128 tokens, stride 32);
* **truncation**: ``dotcat index DATA INDEX --no-passages``: one vector per document, cut at
  256 tokens (the layout of indexes built before passages).

Each build runs under ``/usr/bin/time -v`` (wall time, peak RSS) and its size on disk is
summed. Then ``dotcat search`` ranks the test (and dev) queries with ``--first-stage dense``,
``bm25`` and ``auto`` (the hybrid), 100 results each, on both indexes; ``dotcat bm25`` ranks
them over whole documents (BM25 in memory, no index). ``dotcat eval --baseline`` compares each
passage run with its truncation run (and passage BM25 with whole-document BM25): the nDCG@10
difference, the paired t-test's p-value, the queries won, tied and lost.

Writes ``eval/benchmarks/results/passages.md``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import common

COLLECTIONS = ("pylib", "scifact")
SPLITS = ("test", "dev")
MEASURES = ("nDCG@10", "R@100")
DEPTH = 100
STAGES = (("dense", "dense"), ("bm25", "bm25"), ("hybrid", "auto"))


def data_dir(name: str, built: Path) -> Path:
    return common.SCIFACT if name == "scifact" else built / name


def timed(line: list[str], index: Path) -> dict:
    """Run a build under ``/usr/bin/time -v``: what it printed, wall seconds, peak RSS, the
    index's size and vector count."""
    if index.exists():
        shutil.rmtree(index)
    load = os.getloadavg()[0]
    print("$", " ".join(line[-4:]), flush=True)
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *line], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(line)} failed:\n{done.stderr[-3000:]}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    return {
        "printed": done.stdout.strip(),
        "wall": wall,
        "rss_mib": int(rss.group(1)) / 1024 if rss else float("nan"),
        "disk_mib": sum(p.stat().st_size for p in index.rglob("*") if p.is_file()) / 2**20,
        "vectors": manifest["faiss"]["ntotal"],
        "documents": manifest["documents"]["count"],
        "passages": manifest.get("passages"),
        "precision": manifest["encoder"].get("precision", "?"),
        "load": load,
    }


def build_both(data: Path, work: Path) -> dict[str, dict]:
    """The truncation index and the passage index (``dotcat index``), timed."""
    truncation = work / "truncation"
    passages = work / "passages"
    line = [*common.DOTCAT, "-q", "index", str(data)]
    return {
        "truncation": timed([*line, str(truncation), "--no-passages"], truncation),
        "passages": timed([*line, str(passages), "--passages"], passages),
    }


def search_all(data: Path, work: Path, split: str) -> dict[str, Path]:
    """Every run of one split: whole-document BM25, and each first stage on each index."""
    runs = {"bm25 documents": work / f"bm25-documents.{split}.trec"}
    common.dotcat("bm25", data, "--queries", data, "--split", split, "--output",
                  runs["bm25 documents"])  # fmt: skip
    for layout in ("truncation", "passages"):
        for system, stage in STAGES:
            path = work / f"{layout}-{system}.{split}.trec"
            common.dotcat(
                "search", work / layout, "--queries", data, "--split", split, "--first-stage",
                stage, "-k", DEPTH, "--output", path,
            )  # fmt: skip
            runs[f"{system} {layout}"] = path
    return runs


def compare(runs: dict[str, Path], data: Path, split: str, system: str, baseline: str) -> dict:
    """``dotcat eval SYSTEM BASELINE --baseline BASELINE --json``: both scores, and the
    system's difference, p-value and wins/ties/losses on each measure."""
    measures = [arg for m in MEASURES for arg in ("-m", m)]
    out, _ = common.dotcat(
        "eval", runs[system], runs[baseline], data, "--split", split, *measures,
        "--baseline", runs[baseline], "--json", capture=True,
    )  # fmt: skip
    reports = json.loads(out)
    mine, theirs = reports[runs[system].name], reports[runs[baseline].name]
    return {
        "system": mine["aggregate"],
        "baseline": theirs["aggregate"],
        "queries": mine["n_queries"],
        "vs": mine["vs_baseline"]["measures"],
    }


#: (row name, the passage run, the run it is compared with)
COMPARISONS = (
    ("dense", "dense passages", "dense truncation"),
    ("BM25 (index)", "bm25 passages", "bm25 truncation"),
    ("BM25: passages vs whole documents (`dotcat bm25`)", "bm25 passages", "bm25 documents"),
    ("hybrid", "hybrid passages", "hybrid truncation"),
)


def split_lines(split: str, results: dict) -> list[str]:
    lines = [
        f"{split} ({results['dense']['queries']} queries):",
        "",
        "| system | before | passages | diff | p (paired t) | wins / ties / losses | R@100 "
        "before | R@100 passages |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, _, _ in COMPARISONS:
        r = results[name]
        vs = r["vs"]["nDCG@10"]
        lines.append(
            f"| {name} | {r['baseline']['nDCG@10']:.4f} | {r['system']['nDCG@10']:.4f} | "
            f"{vs['diff']:+.4f} | {vs['pvalue']:.2g} | {vs['wins']} / {vs['ties']} / "
            f"{vs['losses']} | {r['baseline']['R@100']:.4f} | {r['system']['R@100']:.4f} |"
        )
    return lines + [""]


def build_lines(builds: dict) -> list[str]:
    lines = [
        "| index | vectors | wall | peak RSS | disk |",
        "| --- | --- | --- | --- | --- |",
    ]
    for layout, b in builds.items():
        lines.append(
            f"| {layout} | {b['vectors']} ({b['documents']} documents) | {b['wall']:.0f} s | "
            f"{b['rss_mib']:.0f} MiB | {b['disk_mib']:.1f} MiB |"
        )
    lines.append("")
    for layout, b in builds.items():
        lines.append(
            f"{layout}: precision {b['precision']}, load average {b['load']:.1f} at its start; "
            f"passages {json.dumps(b['passages'])}; it printed:"
        )
        lines += ["", *[f"    {line}" for line in b["printed"].splitlines()], ""]
    return lines


def main() -> None:
    parser = common.parser(__doc__, output="passages.md", work="runs/bench_passages")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--built", type=Path, default=Path("runs/collections"))
    args = parser.parse_args()
    sections = []
    for name in args.collections:
        data = data_dir(name, args.built)
        work = args.work / name
        work.mkdir(parents=True, exist_ok=True)
        builds = build_both(data, work)
        sections += [f"## {name}", "", f"Data: `{common.shown(data)}`.", ""]
        for split in SPLITS:
            if not (data / "qrels" / f"{split}.tsv").exists():
                continue
            runs = search_all(data, work, split)
            results = {n: compare(runs, data, split, a, b) for n, a, b in COMPARISONS}
            (work / f"results.{split}.json").write_text(json.dumps(results, indent=1))
            sections += split_lines(split, results)
        sections += build_lines(builds)
    lines = common.header(
        "Long documents as passages against documents cut at the window",
        "Precision: `auto` (what it chose is under each index).",
        torch=True,
    )
    lines += [
        "Commands per collection, as run: `/usr/bin/time -v dotcat index DATA passages "
        "--passages` (the default window, 128 tokens, stride 32); `/usr/bin/time -v dotcat "
        "index DATA truncation --no-passages`; "
        "`dotcat search INDEX --queries DATA --split S --first-stage dense|bm25|auto "
        f"-k {DEPTH} --output RUN` on each; `dotcat bm25 DATA --queries DATA --split S` (BM25 "
        "over whole documents); `dotcat eval RUN BASELINE DATA --split S -m nDCG@10 -m R@100 "
        "--baseline BASELINE --json` for each row (one comparison per call, so no correction "
        "across rows).",
        "",
        '"before" is the truncation index (the BM25-over-documents row: `dotcat bm25`). The '
        "dev rows of the hybrids are optimistic: their fusions are chosen on those queries.",
        "",
        *sections,
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
