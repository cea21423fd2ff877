"""Is a pool of three systems enough to rank many? Depth-k pools judged against the full qrels.

    python eval/benchmarks/judge_pooling.py [--collection scifact=data/scifact] \\
        [--collection pylib=runs/collections/pylib] [--depths 5 10 20] \\
        [--loop-work runs/judge-loop] [--work runs/judge-pooling] \\
        [--output eval/benchmarks/results/judge_pooling.md]

For each collection ``NAME=DATA`` (a BEIR directory; its ``test`` split), with the zero-shot
index ``judge_loop.py`` built (``LOOP_WORK/NAME/index``: the corpus alone, the default model)
and, where it has run, its trained BERT_DOT index and BERT_CAT:

1. Every system below ranks the test queries (``dotcat search``/``dotcat bm25``, top 100).
   Pooled: the index's dense, BM25 and hybrid first stages. Not pooled: BM25 with Robertson's
   k1 1.2 / b 0.75 and with RM3, dense with Rocchio, the linear hybrid, the first passage
   only (an index with passages) or a passage index (one without; ``--no-new-index`` leaves
   it out), the dense-heavy linear hybrid (weight 0.8), the trained dense and
   hybrid, the trained hybrid and BM25 re-ranked by the trained BERT_CAT.
2. For each depth: ``dotcat judge pool --pool-depth D`` over the test queries (the three
   pooled stages), every pooled document judged from the full qrels
   (:func:`dotcat.judging.assess_pool`: a document the qrels do not name is 0), the
   judgements read back as qrels (:func:`dotcat.judging.judged_qrels`).
3. Each system's nDCG@10 with the full qrels and with the pool's (unjudged = not relevant, as
   TREC counts them; and the condensed list, ``nDCG(judged_only=True)@10``, which ignores
   them); Kendall's tau (tau-b, :func:`scipy.stats.kendalltau`) between the systems' orders.
   Voorhees ("Variations in relevance judgments...", IP&M 2000) and later pooling studies
   take tau >= 0.9 as "the same ranking", 0.8 as a noticeable change.
"""

from __future__ import annotations

import os
from pathlib import Path

import common

DEFAULT_COLLECTIONS = ("scifact=data/scifact", "pylib=runs/collections/pylib")
POOLED = ("bm25", "dense", "hybrid")


def search(out: Path, *args) -> Path:
    """A test-split run of ``dotcat ARGS`` (written once)."""
    if not out.exists():
        common.dotcat(*args, "--output", out)
    return out


def systems(name: str, data: Path, args) -> dict[str, tuple[Path, bool]]:
    """label -> (run file, pooled?) for every system there is a model for."""
    from dotcat.data import find_corpus_file
    from dotcat.index.manifest import Manifest

    loop = args.loop_work / name
    index, work = loop / "index", args.work / name
    work.mkdir(parents=True, exist_ok=True)
    test = ("--queries", data, "--split", "test", "-k", "100")
    out: dict[str, tuple[Path, bool]] = {}
    for stage in POOLED:
        out[stage] = (search(work / f"{stage}.trec", "search", index, *test, "--first-stage",
                             stage), True)  # fmt: skip
    corpus = find_corpus_file(data)
    others = {
        "BM25 k1 1.2 b 0.75": ("bm25", corpus, *test, "--k1", "1.2", "--b", "0.75"),
        "BM25 + RM3": ("search", index, *test, "--first-stage", "bm25", "--prf", "rm3"),
        "dense + Rocchio": ("search", index, *test, "--first-stage", "dense", "--prf", "rocchio"),
        "hybrid, linear 0.5": ("search", index, *test, "--fusion", "linear", "--fusion-weight",
                               "0.5"),
        "hybrid, linear 0.8": ("search", index, *test, "--fusion", "linear", "--fusion-weight",
                               "0.8"),
    }  # fmt: skip
    if Manifest.read(index).passages:
        others["hybrid, first passage only"] = ("search", index, *test, "--aggregation", "firstp")
    elif not args.no_new_index:
        passages = work / "index-passages"
        if not passages.exists():
            common.dotcat("index", index, passages, "--passages")
        others["dense over passages"] = ("search", passages, *test, "--first-stage", "dense")
    dot, cat = loop / "index-dot", loop / "cat"
    if dot.exists():
        others["trained dense"] = ("search", dot, *test, "--first-stage", "dense")
        others["trained hybrid"] = ("search", dot, *test)
    if dot.exists() and common.training_finished(cat):
        others["trained hybrid + BERT_CAT"] = ("search", dot, *test, "--rerank", cat)
        others["BM25 + BERT_CAT"] = ("search", index, *test, "--first-stage", "bm25",
                                     "--rerank", cat)  # fmt: skip
    for label, command in others.items():
        slug = label.replace(" ", "-").replace(",", "").replace("+", "plus")
        out[label] = (search(work / f"{slug}.trec", *command), False)
    return out


def pool_qrels(name: str, data: Path, depth: int, args) -> tuple[dict, dict]:
    """The test queries pooled at ``depth`` and judged from the full qrels: the pool's qrels
    and its counts."""
    from dotcat.data import load_qrels
    from dotcat.judging import JudgmentStore, assess_pool, judged_qrels

    index = args.loop_work / name / "index"
    store = args.work / name / f"pool-{depth}.sqlite"
    if not store.exists():
        common.dotcat("judge", "pool", index, "--queries", data, "--split", "test",
                      "--pool-depth", str(depth), "--judgments", store)  # fmt: skip
    full = load_qrels(data, "test")
    with JudgmentStore(store, index) as opened:
        if not opened.assessors():
            assess_pool(opened, full, "full qrels")
        sizes = opened.pool_sizes()
        qrels = judged_qrels(opened)
    found = sum(1 for q, docs in qrels.items() for g in docs.values() if g > 0)
    relevant = sum(1 for docs in full.values() for g in docs.values() if g > 0)
    counts = {"judgements": sum(sizes.values()), "per_query": sum(sizes.values()) / len(sizes),
              "min": min(sizes.values()), "max": max(sizes.values()), "relevant_found": found,
              "relevant": relevant}  # fmt: skip
    return qrels, counts


def score(runs: dict[str, Path], qrels: dict, measure: str) -> dict[str, float]:
    from dotcat.data import read_run
    from dotcat.evaluation import evaluate

    return {label: evaluate(read_run(path), qrels, [measure]).aggregate[measure]
            for label, path in runs.items()}  # fmt: skip


def tau(a: dict[str, float], b: dict[str, float]) -> float:
    from scipy.stats import kendalltau

    labels = sorted(a)
    return float(kendalltau([a[x] for x in labels], [b[x] for x in labels]).statistic)


def collection_lines(name: str, data: Path, args) -> list[str]:
    from dotcat.data import load_qrels, read_run
    from dotcat.evaluation.judged import judged_at

    found = systems(name, data, args)
    runs = {label: path for label, (path, _) in found.items()}
    full_qrels = load_qrels(data, "test")
    full = score(runs, full_qrels, "nDCG@10")
    per_depth = {}
    for depth in args.depths:
        qrels, counts = pool_qrels(name, data, depth, args)
        pooled = score(runs, qrels, "nDCG@10")
        condensed = score(runs, qrels, "nDCG(judged_only=True)@10")
        judged = {label: judged_at(read_run(path), qrels) for label, path in runs.items()}
        per_depth[depth] = (counts, pooled, condensed, judged)
    lines = [f"## {name} ({common.shown(data)}, test split: {len(full_qrels)} queries, "
             f"{len(runs)} systems, {sum(p for _, p in found.values())} pooled)", "",
             "| depth | judgements | per query (min-max) | relevant in the pool | tau nDCG@10 "
             "| tau condensed nDCG@10 |", "| ---: | ---: | --- | --- | ---: | ---: |"]  # fmt: skip
    for depth, (counts, pooled, condensed, _) in per_depth.items():
        lines.append(
            f"| {depth} | {counts['judgements']} | {counts['per_query']:.1f} ({counts['min']}-"
            f"{counts['max']}) | {counts['relevant_found']} of {counts['relevant']} | "
            f"{tau(full, pooled):.3f} | {tau(full, condensed):.3f} |"
        )
    head = " | ".join(f"depth {d}: nDCG@10 / condensed / judged@10" for d in per_depth)
    lines += ["", f"| system | pooled | full qrels nDCG@10 | {head} |",
              "| --- | --- | ---: |" + " --- |" * len(per_depth)]  # fmt: skip
    for label in sorted(runs, key=lambda x: -full[x]):
        cells = " | ".join(f"{p[label]:.4f} / {c[label]:.4f} / {j[label]:.2f}"
                           for _, p, c, j in per_depth.values())  # fmt: skip
        lines.append(f"| {label} | {'yes' if found[label][1] else ''} | {full[label]:.4f} | "
                     f"{cells} |")  # fmt: skip
    return [*lines, ""]


def main() -> None:
    p = common.parser(__doc__, output="judge_pooling.md", work="runs/judge-pooling")
    p.add_argument("--collection", action="append", help="NAME=DATA (repeat)")
    p.add_argument("--depths", type=int, nargs="+", default=[5, 10, 20])
    p.add_argument("--loop-work", type=Path, default=Path("runs/judge-loop"))
    p.add_argument(
        "--no-new-index",
        action="store_true",
        help="leave out the systems that need an index built here (a passage index); the "
        "trained ones are in where judge_loop.py built them",
    )
    args = p.parse_args()
    common.setup_logging()
    lines = common.header(
        "Pooling is sound: three systems' depth-k pools rank many systems",
        f"Load average at the end: {os.getloadavg()[0]:.1f} (a shared machine).",
        *(["Passage index systems left out (--no-new-index)."] if args.no_new_index else []),
    )
    for text in args.collection or DEFAULT_COLLECTIONS:
        name, data = text.split("=", 1)
        lines += collection_lines(name, Path(data), args)
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
