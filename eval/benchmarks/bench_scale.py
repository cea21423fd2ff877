"""Indexing at scale: memory and speed from 10k to 1M documents, resume, shards, Ray, updates.

    python eval/benchmarks/bench_scale.py [--sizes 10000,100000,1000000] [--work /tmp/dotcat-scale]

Everything goes through the ``dotcat`` command line, each run a fresh process timed with
GNU time (wall seconds, peak RSS), on a synthetic SciFact-like corpus and a tiny random BERT
(``eval/benchmarks/synthetic.py``: 2 layers, 128 units, the real tokenizer, 128 tokens):

1. ``dotcat index`` at each size with an IVF spec (``--faiss IVF1024,PQ16 --no-bm25``):
   docs/s, peak RSS, index and work-folder disk; the baseline for ratios is the 100k run.
2. kill -9 at about half the chunks of the 100k build, then the same command: chunks kept,
   chunks encoded again, and the result against an uninterrupted build (ids and vectors).
3. 2 shards (``--shard 0/2``, ``1/2``) + ``dotcat merge`` against one process (100k), with
   the IVF/PQ spec and with exact search (Flat).
4. ``--ray local --ray-workers 2`` against one process (100k).
5. SciFact with all-MiniLM-L6-v2: the first 4,183 documents indexed, the last 1,000 added with
   ``dotcat add``: test nDCG@10 against the one-shot index; ``dotcat delete`` of a test
   query's relevant documents; a kill -9 during ``dotcat add``.

Writes ``eval/benchmarks/results/scale.md`` and ``scale.png`` beside it.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np

import common
from common import DOTCAT
from synthetic import write_corpus, write_tiny_model

SPEC = "IVF1024,PQ16"


def run(args: list[str], env: dict | None = None, check: bool = True) -> dict:
    """One ``dotcat`` process under GNU time: wall seconds, peak RSS (MiB), output."""
    stats = Path(os.environ.get("TMPDIR", "/tmp")) / f"dotcat-time-{os.getpid()}.txt"
    command = ["/usr/bin/time", "-f", "%e %M", "-o", str(stats), *DOTCAT, "-q", *map(str, args)]
    print("$ dotcat", " ".join(map(str, args)), flush=True)
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if check and done.returncode != 0:
        raise SystemExit(f"dotcat {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")
    wall, rss_kb = stats.read_text().split()[-2:]
    return {"seconds": float(wall), "rss_mib": int(rss_kb) / 1024, "stdout": done.stdout,
            "stderr": done.stderr, "code": done.returncode}  # fmt: skip


def disk_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def index_args(corpus: Path, out: Path, model: Path, *extra: str, spec: str = SPEC) -> list[str]:
    return ["index", corpus, out, "--model", model, "--faiss", spec, "--no-bm25",
            "--overwrite", "--fresh", *extra]  # fmt: skip


def vectors_and_ids(index: Path) -> tuple[np.ndarray, list[str]]:
    """The kept vectors and the doc store's ids, in position order."""
    from dotcat.index.docstore import DocStore

    store = DocStore(index / "docstore.sqlite")
    ids = [row[1] for rows in store.iter_rows() for row in rows]
    store.close()
    return np.load(index / "vectors.npy", mmap_mode="r"), ids


def same_index(a: Path, b: Path) -> str:
    (va, ia), (vb, ib) = vectors_and_ids(a), vectors_and_ids(b)
    if ia != ib:
        return "different ids"
    gap = float(np.max(np.abs(np.asarray(va) - np.asarray(vb)))) if len(va) else 0.0
    return f"same ids, vectors within {gap:.1e}"


def sizes_table(args, model: Path, work: Path) -> tuple[list[str], dict[int, dict]]:
    rows, by_size = [], {}
    for n in args.sizes:
        corpus = work / f"corpus-{n}.jsonl"
        if not corpus.exists():
            write_corpus(corpus, n)
        run(["eval", "--help"])  # warm the page cache for the interpreter
        out = work / f"index-{n}"
        # a cold corpus cache: the run reads and converts the corpus as a first build does
        cache = work / f"cache-{n}"
        shutil.rmtree(cache, ignore_errors=True)
        result = run(index_args(corpus, out, model), env={"DOTCAT_CACHE": str(cache)})
        by_size[n] = {**result, "docs_s": n / result["seconds"], "disk": disk_mib(out)}
        rows.append(
            f"| {n:,} | {result['seconds']:.0f} | {n / result['seconds']:.0f} | "
            f"{result['rss_mib']:.0f} | {disk_mib(out):.0f} | {disk_mib(cache):.0f} |"
        )
        print(rows[-1], flush=True)
    return rows, by_size


def kill_and_resume(args, model: Path, work: Path, n: int) -> list[str]:
    corpus = work / f"corpus-{n}.jsonl"
    whole, resumed = work / "whole-kept", work / "resumed"
    run(index_args(corpus, whole, model, "--keep-vectors"))
    command = [*DOTCAT, "-q", *map(str, index_args(corpus, resumed, model, "--keep-vectors"))]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    log = resumed.with_name(f".{resumed.name}.building") / "chunks.jsonl"
    chunks = -(-n // 8192)
    while process.poll() is None:
        done = len(log.read_text().splitlines()) if log.exists() else 0
        if done >= chunks // 2:
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.2)
    process.wait()
    kept = len(log.read_text().splitlines()) if log.exists() else 0
    args_resume = index_args(corpus, resumed, model, "--keep-vectors")
    args_resume.remove("--fresh")
    result = run(args_resume)
    verified = next((x for x in result["stderr"].splitlines() if "already encoded" in x), "")
    return [
        f"- kill -9 of `dotcat index` ({n:,} documents, {chunks} chunks of 8,192) once "
        f'{kept} chunks were logged; the same command again: "{verified.split(": ", 1)[-1]}", '
        f"so {chunks - kept} chunks encoded after the kill (the one in progress at the kill "
        f"included), {result['seconds']:.0f} s; against an uninterrupted build: "
        f"{same_index(whole, resumed)}."
    ]


def top_lists(trec: Path) -> dict[str, list[str]]:
    lists: dict[str, list[str]] = {}
    for line in trec.read_text().splitlines():
        qid, _, doc, *_ = line.split()
        lists.setdefault(qid, []).append(doc)
    return lists


def overlap(a: dict[str, list[str]], b: dict[str, list[str]]) -> float:
    """Mean share of ``a``'s top-k that ``b`` also returns."""
    return float(np.mean([len(set(a[q]) & set(b.get(q, []))) / len(a[q]) for q in a]))


def shard_searches(work: Path, one: Path, merged: Path, folder: Path, tag: str) -> dict:
    """50 queries, top 10, through one process's index, the merged one and the shard folder."""
    queries = work / "queries.tsv"
    queries.write_text("".join(f"q{i}\tcells energy insulin {i}\n" for i in range(50)))
    lists = {}
    for name, index in (("one process", one), ("merged", merged), ("shard folder", folder)):
        out = work / f"run-{tag}-{name.replace(' ', '-')}.trec"
        run(["search", index, "--queries", queries, "--output", out, "-k", "10", "--nprobe", "64"])
        lists[name] = top_lists(out)
    return lists


def shards_and_merge(args, model: Path, work: Path, n: int) -> list[str]:
    """2 shards + merge against one process, with the IVF/PQ spec and with exact search.

    Vectors agree to ~1e-5 (a document's batch, hence its padding, differs between a shard
    and the whole corpus), so exact (Flat) search must give the same lists; IVF/PQ indexes
    train their quantizers (k-means) on those slightly different vectors, and k-means is not
    stable under such changes, so their lists are compared by overlap.
    """
    corpus = work / f"corpus-{n}.jsonl"
    notes = []
    for spec in (SPEC, "Flat"):
        tag = spec.replace(",", "-")
        one = work / ("whole-kept" if spec == SPEC else f"whole-{tag}")
        if spec != SPEC:
            run(index_args(corpus, one, model, "--keep-vectors", spec=spec))
        folder = work / f"shards-{tag}"
        parts = [folder / f"s{i}" for i in range(2)]
        timings = [
            run(index_args(corpus, p, model, "--shard", f"{i}/2", spec=spec))
            for i, p in enumerate(parts)
        ]
        merged = work / f"merged-{tag}"
        merge = run(["merge", *parts, merged, "--overwrite"])
        # the merged index keeps no vectors.npy: compare through the shards' kept vectors
        from_shards = np.concatenate([np.load(p / "vectors.npy") for p in parts])
        gap = float(np.max(np.abs(from_shards - np.load(one / "vectors.npy"))))
        lists = shard_searches(work, one, merged, folder, tag)
        base = lists["one process"]
        same = all(lists[name] == base for name in ("merged", "shard folder"))
        notes.append(
            f"- `{spec}`, 2 shards of {n:,} (`--shard 0/2`, `1/2`, one after the other): "
            f"{timings[0]['seconds']:.0f} s + {timings[1]['seconds']:.0f} s, peak RSS "
            f"{max(t['rss_mib'] for t in timings):.0f} MiB; `dotcat merge`: "
            f"{merge['seconds']:.0f} s; shard vectors against one process: within {gap:.1e}; "
            f"50 queries, top 10 (nprobe 64): the merged index and the shard folder searched "
            f"unmerged give {'the same lists as one process' if same else 'other lists'} "
            f"(overlap@10 with one process: merged {overlap(base, lists['merged']):.3f}, "
            f"folder {overlap(base, lists['shard folder']):.3f})."
        )
    return notes


def ray_vs_one_process(args, model: Path, work: Path, n: int, one: dict) -> list[str]:
    corpus = work / f"corpus-{n}.jsonl"
    out = work / "ray"
    result = run(
        index_args(corpus, out, model, "--keep-vectors", "--ray", "local", "--ray-workers", "2")
    )
    return [
        f"- Ray, 2 local workers (`--ray local --ray-workers 2`, {n:,} documents): "
        f"{result['seconds']:.0f} s ({n / result['seconds']:.0f} docs/s) against "
        f"{one['seconds']:.0f} s in one process; driver peak RSS {result['rss_mib']:.0f} MiB; "
        f"against the one-process build: {same_index(work / 'whole-kept', out)}."
    ]


def scifact_updates(work: Path) -> list[str]:
    data = Path("data/scifact")
    with gzip.open(data / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    head, tail = work / "scifact-head.jsonl", work / "scifact-tail.jsonl"
    head.write_text("\n".join(lines[:4183]) + "\n")
    tail.write_text("\n".join(lines[4183:]) + "\n")
    one, grown = work / "scifact-one", work / "scifact-grown"
    run(["index", data, one, "--no-bm25", "--overwrite", "--fresh"])
    run(["index", head, grown, "--no-bm25", "--overwrite", "--fresh"])
    added = run(["add", grown, tail])
    scores = {}
    for name, index in (("one-shot", one), ("grown", grown)):
        out = work / f"scifact-{name}.trec"
        run(["search", index, "--queries", data, "--split", "test", "--output", out, "-k", "100"])
        report = run(["eval", out, data, "--split", "test", "--json"])
        scores[name] = json.loads(report["stdout"])[out.name]["aggregate"]["nDCG@10"]
    # delete the relevant documents of one test query: they leave its results
    qrels = [x.split("\t") for x in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    query, relevant = qrels[0][0], [d for q, d, _ in qrels if q == qrels[0][0]]
    with gzip.open(data / "queries.jsonl.gz", "rt", encoding="utf-8") as f:
        text = next(q["text"] for q in map(json.loads, f) if q["_id"] == query)
    before = json.loads(run(["search", grown, text, "-k", "100", "--json"])["stdout"])
    run(["delete", grown, *relevant])
    after = json.loads(run(["search", grown, text, "-k", "100", "--json"])["stdout"])
    found_before = [h["doc_id"] for h in before if h["doc_id"] in relevant]
    found_after = [h["doc_id"] for h in after if h["doc_id"] in relevant]
    # kill -9 during an add: the index stays searchable and whole
    again = work / "scifact-again.jsonl"
    again.write_text(
        "\n".join(x.replace('"_id": "', '"_id": "again-') for x in lines[:2000]) + "\n"
    )
    manifest = (grown / "manifest.json").read_bytes()
    process = subprocess.Popen(
        [*DOTCAT, "-q", "add", str(grown), str(again)], stderr=subprocess.DEVNULL
    )
    time.sleep(25)
    process.send_signal(signal.SIGKILL)
    process.wait()
    intact = (grown / "manifest.json").read_bytes() == manifest
    searchable = run(["search", grown, text, "-k", "3"], check=False)["code"] == 0
    return [
        f"- SciFact (all-MiniLM-L6-v2, dense first stage): one-shot index test nDCG@10 "
        f"{scores['one-shot']:.4f}; the first 4,183 documents indexed, the last 1,000 added with "
        f"`dotcat add` ({added['seconds']:.0f} s): {scores['grown']:.4f}.",
        f"- `dotcat delete` of test query {query}'s {len(relevant)} relevant document(s) "
        f"({', '.join(relevant)}): in its top 100 before: {found_before or 'none'}; after: "
        f"{found_after or 'none'}.",
        f"- kill -9 25 s into `dotcat add` of 2,000 documents: the manifest "
        f"{'unchanged' if intact else 'CHANGED'}, the index "
        f"{'searchable' if searchable else 'NOT searchable'}.",
    ]


def plot(by_size: dict[int, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(by_size)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(sizes, [by_size[n]["rss_mib"] for n in sizes], marker="o")
    a.set(
        xscale="log", xlabel="documents", ylabel="peak RSS (MiB)", title="Memory of `dotcat index`"
    )
    a.set_ylim(bottom=0)
    b.plot(sizes, [by_size[n]["docs_s"] for n in sizes], marker="o", color="tab:green")
    b.set(xscale="log", xlabel="documents", ylabel="documents / s", title="Throughput (end to end)")
    b.set_ylim(bottom=0)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.suptitle(f"tiny BERT (2 layers, 128 units), {SPEC}, 2 cores")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    parser = common.parser(__doc__, output="scale.md", work="/tmp/dotcat-scale")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument(
        "--conditions", default="nothing else running", help="what else ran (for the record)"
    )
    parser.add_argument("--skip", default="", help="comma list: sizes,resume,shards,ray,scifact")
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ["DOTCAT_CACHE"] = str(args.work / "cache")
    model = args.work / "tiny-bert"
    if not model.exists():
        write_tiny_model(model)
    mid = 100_000 if 100_000 in args.sizes else args.sizes[0]

    # each part's lines are kept in WORK/parts.json, so a rerun with --skip still reports them
    saved = args.work / "parts.json"
    parts = json.loads(saved.read_text()) if saved.exists() else {}

    def part(name: str, measure) -> None:
        if name not in skip:
            parts[name] = measure()
            saved.write_text(json.dumps(parts, indent=1))

    def sizes() -> dict:
        rows, by_size = sizes_table(args, model, args.work)
        plot(by_size, args.output.with_suffix(".png"))
        return {"rows": rows, "by_size": by_size}

    part("sizes", sizes)
    by_size = {int(n): v for n, v in parts.get("sizes", {}).get("by_size", {}).items()}
    rows, notes = parts.get("sizes", {}).get("rows", []), []
    if 1_000_000 in by_size and 100_000 in by_size:
        big, base = by_size[1_000_000], by_size[100_000]
        notes.append(
            f"- 1M against 100k: peak RSS {big['rss_mib']:.0f} vs {base['rss_mib']:.0f} MiB "
            f"({big['rss_mib'] / base['rss_mib']:.2f}x); {big['docs_s']:.0f} vs "
            f"{base['docs_s']:.0f} docs/s ({big['docs_s'] / base['docs_s']:.2f}x)."
        )
    one = by_size.get(mid, {"seconds": float("nan")})
    part("resume", lambda: kill_and_resume(args, model, args.work, mid))
    part("shards", lambda: shards_and_merge(args, model, args.work, mid))
    part("ray", lambda: ray_vs_one_process(args, model, args.work, mid, one))
    part("scifact", lambda: scifact_updates(args.work))
    for name in ("resume", "shards", "ray", "scifact"):
        notes += parts.get(name, [])
    for note in notes:
        print(note, flush=True)

    lines = [
        *common.header(
            "Indexing at scale",
            "Every figure is one `dotcat` process under GNU time (wall seconds, peak RSS); "
            f"{args.conditions}.",
        ),
        "Synthetic SciFact-like corpus (`eval/benchmarks/synthetic.py`: SciFact's lengths and "
        f"word frequencies, ~1.5 KB per document), tiny random BERT (2 layers, 128 units, real "
        f"tokenizer, 128 tokens), `dotcat index CORPUS OUT --faiss {SPEC} --no-bm25`: corpus "
        f"reading and conversion (a cold corpus cache per size: the last column), doc store, "
        f"encoding, FAISS training and adding, all included.",
        "",
        "| documents | seconds | docs/s | peak RSS MiB | index MiB | corpus cache MiB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        *notes,
        "",
        "Why IVF/PQ shards answer differently and Flat ones do not: a shard encodes each "
        "document in another batch than the whole corpus does, so its vectors differ in the "
        "sixth decimal (padding); exact search is unmoved, but `dotcat merge` and each shard "
        "train their k-means quantizers again, on those vectors, and k-means is not stable "
        "under such changes. With the tiny random model every score lies within ~0.01 of the "
        "others, so PQ's error reorders the top 10. Ray encodes the same batches as one "
        "process (identical vectors) and so gives the same index.",
        "",
        "![memory and throughput against corpus size](scale.png)",
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
