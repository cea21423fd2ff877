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
   on it with its defaults, held-out check included (k-fold under 100 judged queries, else the
   dev split: where it shows no gain the output folder holds the base model, the trained one in
   ``dot/trained``), the index rebuilt from the zero-shot one with ``--model dot`` (what the
   check kept); ``dotcat train cat`` behind it (negatives from the trained index and BM25, as
   the training docs' recipe; its check records weight 0 where it shows no gain).
5. The test split searched with the default pipeline before (zero-shot hybrid) and after (the
   trained hybrid, then re-ranked by the trained BERT_CAT at the default depth and its recorded
   weight: the pipeline the defaults give), evaluated by ``dotcat eval`` against the zero-shot
   hybrid: nDCG@10, each difference with its interval from the same paired test that marks
   it significant (Holm over the systems). Where a check kept a model out, the pipeline
   without the check is searched too (the trained weights indexed, the BERT_CAT at the weight
   it chose): what the check protected from, or cost (``--no-unchecked``: not). Where
   ``train dot`` kept the base model, the zero-shot index stands for the index built with it
   (the same vectors).
"""

from __future__ import annotations

import argparse
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


def trained(model: Path) -> bool:
    """Whether ``model`` holds a finished training run whose held-out check is done (or off)."""
    from dotcat.files import read_json_or_none

    record = read_json_or_none(common.training_record_path(model)) or {}
    checked = "heldout_check" in record or not record.get("hyperparameters", {}).get("check")
    return common.training_finished(model) and checked


def step(work: Path, name: str, done: Path, *args: str) -> float:
    """``dotcat ARGS`` unless ``done`` is there (a second run reuses it); its wall seconds.

    A training record is there only once its run finished: an interrupted ``train`` leaves its
    record (``status: running``) and a best-so-far model, which a rerun must not take as done
    (nor a finished run whose held-out check was interrupted: ``--resume`` runs the check).
    """
    training = done == common.training_record_path(done.parent)
    if done.exists() and (not training or trained(done.parent)):
        print(f"reusing {common.shown(done)}", flush=True)
        return float("nan")
    if training and done.exists():
        args = (*args, "--resume" if common.training_finished(done.parent) else "--overwrite")
    return common.dotcat(*args)[1]


def run_collection(name: str, data: Path, split: str, args) -> dict:
    work = args.work / name
    work.mkdir(parents=True, exist_ok=True)
    index, store = work / "index", work / "judgments.sqlite"
    times = {}
    from dotcat.data import find_corpus_file
    from dotcat.files import read_json_or_none

    corpus = find_corpus_file(data)  # the corpus file alone: no qrels beside it
    times["index"] = step(work, name, index, "index", corpus, index)
    chosen = sample_queries(data, split, args.queries, args.seed, work / "train-queries.tsv")
    times["pool"] = step(work, name, store, "judge", "pool", index, "--queries",
                         work / "train-queries.tsv", "--pool-depth", str(args.depth),
                         "--judgments", store)  # fmt: skip
    counts = judge(index, store, data, split, chosen)
    judged = work / "judged"
    step(work, name, judged, "judge", "export", index, judged, "--split", "train",
         "--judgments", store)  # fmt: skip
    dot, dot_index, cat = work / "dot", work / "index-dot", work / "cat"
    dot_record, cat_record_file = common.training_record_path(dot), common.training_record_path(cat)
    times["train dot"] = step(work, name, dot_record, "train", "dot", judged, dot)
    record = json.loads(dot_record.read_text())
    dot_check = record.get("heldout_check") or {}
    if dot_check.get("kept") == "base" and not dot_index.exists():
        # dot holds the base model: the zero-shot index is what indexing with it gives.
        dot_index.symlink_to(index.resolve(), target_is_directory=True)
    times["index dot"] = step(work, name, dot_index, "index", index, dot_index, "--model", dot)
    runs = {
        "zero-shot hybrid": ("search", index),
        "trained hybrid": ("search", dot_index),
    }
    cat_record, cat_check = {}, {}
    if not args.no_cat:
        times["train cat"] = step(work, name, cat_record_file, "train", "cat",
                                  judged, cat, "--first-stage", dot_index, "--first-stage",
                                  "bm25")  # fmt: skip
        cat_record = json.loads(cat_record_file.read_text())
        cat_check = cat_record.get("heldout_check") or {}
        runs["trained hybrid + BERT_CAT"] = ("search", dot_index, "--rerank", cat)
    runs["zero-shot dense"] = ("search", index, "--first-stage", "dense")
    runs["trained dense"] = ("search", dot_index, "--first-stage", "dense")
    # What the checks kept out: the trained weights indexed, the BERT_CAT at its chosen weight
    # (searched last: re-ranking the test split is the longest step).
    unchecked_index = dot_index
    if dot_check.get("kept") == "base" and args.unchecked:
        unchecked_index = work / "index-dot-unchecked"
        times["index dot (unchecked)"] = step(
            work, name, unchecked_index, "index", index, unchecked_index, "--model", dot / "trained"
        )
        runs["unchecked trained hybrid"] = ("search", unchecked_index)
    choice = (cat_record.get("interpolation") or {}).get("choice") or {}
    weight = choice.get("chosen")
    if (
        cat_check
        and not cat_check.get("shown_better")
        and weight not in (None, "0.0")
        and args.unchecked
    ):
        runs[f"unchecked + BERT_CAT (weight {weight})"] = (
            "search", unchecked_index, "--rerank", cat, "--interpolate", weight,
        )  # fmt: skip
    files = {}
    for label, command in runs.items():
        slug = "".join(c if c.isalnum() or c in ".-" else "-" for c in label.replace("+", "plus"))
        out = work / (slug + ".trec")
        started = time.perf_counter()
        if not out.exists():
            common.dotcat(*command, "--queries", data, "--split", "test", "--output", out)
        times[f"search: {label}"] = time.perf_counter() - started
        files[label] = out
    evaluated = [data, "--split", "test", "--baseline", files["zero-shot hybrid"].name,
                 "-m", "nDCG@10", "-m", "R@100"]  # fmt: skip
    report, _ = common.dotcat("eval", *files.values(), *evaluated, "--json", capture=True)
    table, _ = common.dotcat("eval", *files.values(), *evaluated, capture=True)
    (work / "eval.json").write_text(report)
    return {"name": name, "data": data, "split": split, "counts": counts, "times": times,
            "files": {k: v.name for k, v in files.items()}, "eval": json.loads(report),
            "table": table, "dot_split": record.get("split"), "cat_split": cat_record.get("split"),
            "dot_check": dot_check, "cat_check": cat_check,
            "cat_alpha": read_json_or_none(cat / "dotcat_cross_encoder.json") or {}}  # fmt: skip


def rows(result: dict) -> list[str]:
    ev, files = result["eval"], result["files"]
    lines = [
        "| system | nDCG@10 | diff [interval] | p (Holm) | R@100 |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for label, file in files.items():
        entry = ev[file]
        agg = entry["aggregate"]
        vs = (entry.get("vs_baseline") or {}).get("measures", {}).get("nDCG@10")
        if vs:
            low, high = (f"{v:+.4f}" if v is not None else "inf" for v in (vs["low"], vs["high"]))
            mark = " (significant)" if vs["significant"] else ""
            diff, p = f"{vs['diff']:+.4f} [{low}, {high}]{mark}", f"{vs['pvalue_holm']:.2g}"
        else:
            diff, p = "baseline", ""
        lines.append(f"| {label} | {agg['nDCG@10']:.4f} | {diff} | {p} | {agg['R@100']:.4f} |")
    return lines


def check_line(what: str, check: dict) -> str:
    """A training run's held-out verdict, as its record holds it."""
    if not check:
        return f"{what}: no held-out check recorded"
    low, high = (f"{v:+.4f}" if v is not None else "inf" for v in (check["low"], check["high"]))
    verdict = "shown better" if check["shown_better"] else "not shown better"
    kept = {k: v for k, v in check.items() if k in ("kept", "interpolation_alpha")}
    return (f"{what}: {check['measure']} {check['trained']:.4f} against {check['first']:.4f}, "
            f"{check['diff']:+.4f} [{low}, {high}] over {check['queries']} held-out queries "
            f"({check['method']}): {verdict}; kept {kept}")  # fmt: skip


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
    p.add_argument(
        "--unchecked",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also search what a check kept out (the trained weights indexed, the BERT_CAT at "
        "its chosen weight): an index build and a re-ranking of the test split more",
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
            check_line("train dot, held-out check", r["dot_check"]), "",
            check_line("train cat, held-out check", r["cat_check"]), "",
            f"train dot split: {r['dot_split']}; train cat split: {r['cat_split']}; "
            f"cat record's weight: {r['cat_alpha'].get('interpolation_alpha')}", "",
            "Times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in r["times"].items()), "",
            "`dotcat eval` as printed:", "", "```", r["table"].rstrip(), "```", "",
        ]  # fmt: skip
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
