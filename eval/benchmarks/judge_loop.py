"""Does judging pay? index -> pool -> judge -> train dot -> train cat -> search better.

    python eval/benchmarks/judge_loop.py [--collection scifact=data/scifact:train] \\
        [--collection pylib=runs/collections/pylib:dev] [--queries 50] [--depth 10] \\
        [--work runs/judge-loop] [--output eval/benchmarks/results/judge_loop.md]

For each collection ``NAME=DATA:SPLIT`` (a BEIR directory; SPLIT: where the training queries
are drawn from, never ``test``), as a user with their own documents would:

1. ``dotcat index DATA/corpus.jsonl``: the corpus alone, no labels beside it (so no dev
   queries choose its fusion: the hybrid fuses by the default, linear 0.5; by RRF when
   ``judge_loop.md`` was first recorded),
   with the default model: the zero-shot pipeline.
2. ``--queries`` queries drawn from SPLIT (seeded), pooled with ``dotcat judge pool`` at
   ``--depth`` over the index's three first stages (dense, BM25, hybrid).
3. The pool judged by a simulated assessor (:func:`dotcat.judging.assess_pool`): a pooled
   document's grade is its SPLIT qrels grade, 0 where the qrels do not name it. Nothing else
   of the labels is used: a relevant document outside the pool stays unknown. The number of
   judgements is what a person would have made.
4. ``dotcat judge export`` (BEIR layout, the judged queries as ``train``); ``dotcat train dot``
   on it (defaults: a dev split of the judged queries held out when there are enough), the
   index rebuilt from the zero-shot one with the trained model; ``dotcat train cat`` behind it
   (negatives from the trained index and BM25, as the training docs' recipe).
5. The test split searched with the default pipeline before (zero-shot hybrid) and after
   (trained hybrid, then re-ranked by the trained BERT_CAT at the default depth and
   interpolation), evaluated by ``dotcat eval`` against the zero-shot hybrid: nDCG@10, paired
   t-test p (Holm over the systems), bootstrap 95% intervals of the differences.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import common

DEFAULT_COLLECTIONS = ("scifact=data/scifact:train", "pylib=runs/collections/pylib:dev")


def parse_collection(text: str) -> tuple[str, Path, str]:
    name, rest = text.split("=", 1)
    data, split = rest.rsplit(":", 1)
    return name, Path(data), split


def sample_queries(data: Path, split: str, n: int, seed: int, out: Path) -> dict[str, str]:
    """``n`` judged queries of ``split`` drawn with ``seed``, written as a TSV queries file."""
    from dotcat.data import load_queries

    queries = load_queries(data, split=split)
    chosen = sorted(random.Random(seed).sample(sorted(queries), n))
    out.write_text("".join(f"{q}\t{queries[q]}\n" for q in chosen), encoding="utf-8")
    return {q: queries[q] for q in chosen}


def judge(index: Path, store: Path, data: Path, split: str, chosen: dict) -> dict:
    """The pool judged from ``split``'s qrels (of the chosen queries only); its counts."""
    from dotcat.data import load_qrels
    from dotcat.judging import JudgmentStore, assess_pool

    qrels = load_qrels(data, split)
    with JudgmentStore(store, index) as opened:
        if not opened.assessors():
            assess_pool(opened, {q: qrels.get(q, {}) for q in chosen}, "simulated")
        judged = opened.current("simulated")
        sizes = opened.pool_sizes()
    relevant_in_pool = sum(1 for j in judged if j.grade)
    relevant_all = sum(1 for q in chosen for g in qrels.get(q, {}).values() if g > 0)
    with_positive = len({j.qid for j in judged if j.grade})
    return {"judgements": len(judged), "relevant_found": relevant_in_pool,
            "relevant_all": relevant_all, "queries_with_positive": with_positive,
            "pool_min": min(sizes.values()), "pool_max": max(sizes.values()),
            "pool_mean": sum(sizes.values()) / len(sizes)}  # fmt: skip


def step(work: Path, name: str, done: Path, *args: str) -> float:
    """``dotcat ARGS`` unless ``done`` is there (a second run reuses it); its wall seconds.

    A training record is there only once its run finished: an interrupted ``train`` leaves its
    record (``status: running``) and a best-so-far model, which a rerun must not take as done.
    """
    training = done == common.training_record_path(done.parent)
    if done.exists() and (not training or common.training_finished(done.parent)):
        print(f"reusing {common.shown(done)}", flush=True)
        return float("nan")
    if training and done.exists():
        args = (*args, "--overwrite")
    return common.dotcat(*args)[1]


def run_collection(name: str, data: Path, split: str, args) -> dict:
    work = args.work / name
    work.mkdir(parents=True, exist_ok=True)
    index, store = work / "index", work / "judgments.sqlite"
    times = {}
    from dotcat.data import find_corpus_file

    corpus = find_corpus_file(data)  # the corpus file alone: no qrels beside it
    times["index"] = step(work, name, index, "index", corpus, index)
    chosen = sample_queries(data, split, args.queries, args.seed, work / "train-queries.tsv")
    times["pool"] = step(work, name, store, "judge", "pool", index, "--queries",
                         work / "train-queries.tsv", "--pool-depth", str(args.depth),
                         "--judgments", store)  # fmt: skip
    counts = judge(index, store, data, split, chosen)
    judged = work / "judged"
    step(
        work,
        name,
        judged,
        "judge",
        "export",
        index,
        judged,
        "--split",
        "train",
        "--judgments",
        store,
    )
    dot, dot_index, cat = work / "dot", work / "index-dot", work / "cat"
    dot_record, cat_record_file = common.training_record_path(dot), common.training_record_path(cat)
    times["train dot"] = step(work, name, dot_record, "train", "dot", judged, dot)
    times["index dot"] = step(work, name, dot_index, "index", index, dot_index, "--model", dot)
    if not args.no_cat:
        times["train cat"] = step(work, name, cat_record_file, "train", "cat",
                                  judged, cat, "--first-stage", dot_index, "--first-stage",
                                  "bm25")  # fmt: skip
    runs = {
        "zero-shot hybrid": ("search", index),
        "trained hybrid": ("search", dot_index),
        "trained hybrid + BERT_CAT": ("search", dot_index, "--rerank", cat),
        "zero-shot dense": ("search", index, "--first-stage", "dense"),
        "trained dense": ("search", dot_index, "--first-stage", "dense"),
    }
    if args.no_cat:
        del runs["trained hybrid + BERT_CAT"]
    files = {}
    for label, command in runs.items():
        out = work / (label.replace(" ", "-").replace("+", "plus") + ".trec")
        started = time.perf_counter()
        if not out.exists():
            common.dotcat(*command, "--queries", data, "--split", "test", "--output", out)
        times[f"search: {label}"] = time.perf_counter() - started
        files[label] = out
    report, _ = common.dotcat("eval", *files.values(), data, "--split", "test", "--baseline",
                              files["zero-shot hybrid"].name, "-m", "nDCG@10", "-m", "R@100",
                              "--json", capture=True)  # fmt: skip
    table, _ = common.dotcat("eval", *files.values(), data, "--split", "test", "--baseline",
                             files["zero-shot hybrid"].name, "-m", "nDCG@10", "-m", "R@100",
                             capture=True)  # fmt: skip
    record = json.loads(dot_record.read_text())
    cat_record = {} if args.no_cat else json.loads(cat_record_file.read_text())
    return {"name": name, "data": data, "split": split, "counts": counts, "times": times,
            "files": {k: v.name for k, v in files.items()}, "eval": json.loads(report),
            "table": table, "dot_split": record.get("split"), "cat_split": cat_record.get("split"),
            "cat_alpha": cat_record.get("interpolation")}  # fmt: skip


def rows(result: dict) -> list[str]:
    ev, files = result["eval"], result["files"]
    lines = [
        "| system | nDCG@10 | diff [95% CI] | p (Holm) | R@100 |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for label, file in files.items():
        entry = ev[file]
        agg = entry["aggregate"]
        vs = entry.get("vs_baseline") or {}
        ci = (entry.get("intervals") or {}).get("vs_baseline") or {}
        if vs:
            d = ci["nDCG@10"]
            diff = f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
            p = f"{vs['measures']['nDCG@10']['pvalue_holm']:.2g}"
        else:
            diff, p = "baseline", ""
        lines.append(f"| {label} | {agg['nDCG@10']:.4f} | {diff} | {p} | {agg['R@100']:.4f} |")
    return lines


def main() -> None:
    p = common.parser(__doc__, output="judge_loop.md", work="runs/judge-loop")
    p.add_argument("--collection", action="append", help="NAME=DATA:SPLIT (repeat)")
    p.add_argument("--queries", type=int, default=50, help="training queries judged")
    p.add_argument("--depth", type=int, default=10, help="pool depth")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-cat",
        action="store_true",
        help="stop after train dot (no BERT_CAT trained or searched): the loop's first half",
    )
    args = p.parse_args()
    common.setup_logging()
    results = [run_collection(*parse_collection(c), args)
               for c in args.collection or DEFAULT_COLLECTIONS]  # fmt: skip
    lines = common.header(
        "The loop pays: judgements of a pool train dot and cat",
        f"Load average at the end: {os.getloadavg()[0]:.1f} (a shared machine: times are "
        "under load).", *(["BERT_CAT left out (--no-cat)."] if args.no_cat else []), torch=True,
    )  # fmt: skip
    for r in results:
        c = r["counts"]
        lines += [
            f"## {r['name']} ({common.shown(r['data'])}; {args.queries} queries of "
            f"`{r['split']}` judged; test split reported)", "",
            f"Pool at depth {args.depth} over dense, BM25 and hybrid: {c['judgements']} "
            f"judgements ({c['pool_mean']:.1f} a query, {c['pool_min']}-{c['pool_max']}); "
            f"{c['relevant_found']} of the {c['relevant_all']} relevant documents the qrels "
            f"name are in the pool; {c['queries_with_positive']} queries have a positive.", "",
            *rows(r), "",
            f"train dot split: {r['dot_split']}; train cat split: {r['cat_split']}; "
            f"interpolation chosen: {r['cat_alpha']}", "",
            "Times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in r["times"].items()), "",
            "`dotcat eval` as printed:", "", "```", r["table"].rstrip(), "```", "",
        ]  # fmt: skip
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
