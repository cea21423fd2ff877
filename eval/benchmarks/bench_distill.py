"""Contrastive vs distilled BERT_DOT: SciFact test, alone and re-ranked by the same BERT_CAT.

    python eval/benchmarks/bench_distill.py --model contrastive=runs/dot \\
        --model distilled=runs/distill --cat runs/cat-def [--data data/scifact] \\
        [--work runs/bench-distill] \\
        [--collection pydoc=runs/collections/pydoc --collection debian=runs/collections/debian] \\
        [--systems dense,hybrid,dense-cat,pipeline] [--output eval/benchmarks/results/distill.md] \\
        [--plot eval/benchmarks/results/distill.png] [--split dev] [--precision fp32]

Every number goes through the command line a user runs. For each model ``NAME=DIR`` (a
BERT_DOT directory; ``default`` for zero-shot all-MiniLM-L6-v2): ``dotcat index DATA --model
DIR --bm25`` (the hybrid fusion weight chosen on the data's dev split as usual), then
``dotcat search --queries DATA --split test -k 100`` four ways: the dense first stage, the
hybrid one, the dense top 100 re-ranked by ``--rerank CAT``, and ``--rerank CAT`` with no
other flag (the default pipeline: hybrid, depth 100, the re-ranker's dev-chosen
interpolation). nDCG@10, RR@10 and R@100 by ir-measures; ``p``: a paired t-test over queries
of nDCG@10 against the first model's same system.

``--split dev`` runs the same systems over the dev queries every training run held out (the
data's ``dev`` split, else the 10 % of train ``dotcat train`` carves): how recipes are compared
before any of them is run on test (no out-of-domain collections then).

``--precision`` builds every index at that precision (``dotcat index --precision``; searches
follow the index's): ``auto`` (the default, as a user gets it: int8 on CPUs with VNNI) or
``fp32``, the models' own figures without quantisation. Indexes and runs other than ``auto``'s
are kept apart in the work folder (``-fp32`` in their names).

Out of domain (``--collection NAME=BEIR_DIR``, collections no model trained on, built by
``eval/benchmarks/ood_collections.py``): each model's dense first stage, zero-shot, on the
test split.

Training costs and curves come from each model's ``dotcat_training.json`` (teacher scoring,
mining, training, dev evaluation); the plot shows loss and dev nDCG@10 per epoch.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import common
from bench_train_dot import plot

MEASURES = ("nDCG@10", "RR@10", "R@100")


def systems(cat: Path) -> dict[str, tuple[str, list[str]]]:
    """Each system compared: its key (``--systems``), label and ``dotcat search`` flags."""
    return {
        "dense": ("dense", ["--first-stage", "dense"]),
        "hybrid": ("hybrid", ["--first-stage", "hybrid"]),
        "dense-cat": ("dense + BERT_CAT", ["--first-stage", "dense", "--rerank", str(cat)]),
        "pipeline": ("default pipeline (hybrid + BERT_CAT, no flags)", ["--rerank", str(cat)]),
    }


def dotcat(*args: str) -> float:
    """Run the dotcat command line; its wall time in seconds."""
    return common.dotcat(*args)[1]


def build_index(
    model: str, data: Path, index: Path, bm25: bool, precision: str = "auto"
) -> float | None:
    """``dotcat index`` (seconds), or None when the index exists already."""
    if (index / "manifest.json").is_file():
        return None
    flags = ["--model", model, "--precision", precision, *(["--bm25"] if bm25 else [])]
    return dotcat("index", str(data), str(index), *flags)


def built_precision(args: argparse.Namespace, models: dict[str, str]) -> str:
    """``--precision`` and what the indexes recorded (``auto`` resolves per CPU)."""
    found = set()
    for name in models:
        manifest = args.work / f"index-{name}{tag(args)}" / "manifest.json"
        if manifest.is_file():
            found.add(json.loads(manifest.read_text())["encoder"]["precision"])
    return f"{args.precision} ({', '.join(sorted(found))} in the manifests)"


def tag(args: argparse.Namespace) -> str:
    """What the work folder's indexes and runs add to their names: ``-fp32``; none for auto."""
    return "" if args.precision == "auto" else f"-{args.precision}"


def search(index: Path, topics: list[str], flags: list[str], out: Path) -> float | None:
    """``dotcat search`` over the queries ``topics`` names into a TREC run (seconds; None:
    reused)."""
    if out.is_file():
        return None
    return dotcat("search", str(index), *topics, "-k", "100", *flags, "--output", str(out))


def topics_and_qrels(data: Path, split: str, work: Path) -> tuple[list[str], dict]:
    """The ``dotcat search`` options naming the split's queries, and its judgements.

    ``dev``: the held-out queries of every training run (:func:`find_dev_split`), written to a
    queries file in ``work`` (SciFact has no dev qrels of its own).
    """
    from dotcat.data import load_qrels
    from dotcat.data.splits import find_dev_split

    if split == "test":
        return ["--queries", str(data), "--split", "test"], load_qrels(data, "test")
    dev = find_dev_split(data)
    if dev is None:
        raise SystemExit(f"{data}: no dev split (neither qrels/dev.tsv nor qrels/train.tsv)")
    queries = work / "dev-queries.jsonl"  # JSON: any text survives (a TSV breaks on a tab)
    lines = (json.dumps({"_id": q, "text": text}) + "\n" for q, text in dev.queries.items())
    queries.write_text("".join(lines), encoding="utf-8")
    logging.info("dev: %d queries, %s", len(dev.queries), dev.source)
    return ["--queries", str(queries)], dev.qrels


def scores(run_file: Path, qrels: dict) -> tuple[dict[str, float], dict[str, float]]:
    """Aggregate measures and per-query nDCG@10 of a run file."""
    from dotcat.data import read_run
    from dotcat.evaluation import evaluate

    report = evaluate(read_run(run_file), qrels, measures=list(MEASURES))
    return report.aggregate, {q: v["nDCG@10"] for q, v in report.per_query.items()}


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.split("(")[0].strip()).strip("-")


def in_domain(args: argparse.Namespace, models: dict[str, str]) -> list[str]:
    """The in-domain table: every model x system, p against the first model."""
    from scipy.stats import ttest_rel

    topics, qrels = topics_and_qrels(args.data, args.split, args.work)
    suffix = ("" if args.split == "test" else f"-{args.split}") + tag(args)
    rows, baseline = [], {}
    for name, model in models.items():
        index = args.work / f"index-{name}{tag(args)}"
        seconds = build_index(model, args.data, index, bm25=True, precision=args.precision)
        if seconds is not None:
            logging.info("%s: indexed in %.0f s", name, seconds)
        for key, (system, flags) in systems(args.cat).items():
            if key not in args.systems:
                continue
            out = args.work / f"{name}-{slug(system)}{suffix}.trec"
            took = search(index, topics, flags, out)
            agg, per_query = scores(out, qrels)
            first = baseline.setdefault(system, (name, per_query))
            p = ""
            if first[0] != name:
                keys = sorted(first[1])
                test = ttest_rel([per_query[q] for q in keys], [first[1][q] for q in keys])
                p = f"{test.pvalue:.3f}"
            cells = " | ".join(f"{agg[m]:.4f}" for m in MEASURES)
            timing = f"{took:.0f} s" if took is not None else "reused"
            rows.append(f"| {name} | {system} | {cells} | {p} | {timing} |")
            print(rows[-1], flush=True)
    return rows


def out_of_domain(args: argparse.Namespace, models: dict[str, str]) -> list[str]:
    """Each model's dense first stage on collections it never trained on."""
    from dotcat.data import load_qrels

    rows = []
    for spec in args.collection:
        cname, data = spec.split("=", 1)
        qrels = load_qrels(Path(data), "test")
        for name, model in models.items():
            index = args.work / f"ood-{cname}-{name}{tag(args)}"
            build_index(model, Path(data), index, bm25=False, precision=args.precision)
            out = args.work / f"ood-{cname}-{name}-dense{tag(args)}.trec"
            topics = ["--queries", data, "--split", "test"]
            search(index, topics, ["--first-stage", "dense"], out)
            agg, _ = scores(out, qrels)
            cells = " | ".join(f"{agg[m]:.4f}" for m in MEASURES)
            rows.append(f"| {cname} | {name} | {cells} |")
            print(rows[-1], flush=True)
    return rows


def training_rows(models: dict[str, str]) -> tuple[list[str], dict[str, dict]]:
    """One line per trained model: what it cost and what dev chose."""
    rows, records = [], {}
    for name, model in models.items():
        path = common.training_record_path(model)
        if not path.is_file():
            continue
        record = records[name] = json.loads(path.read_text())
        t = record["timings"]
        hp = record["hyperparameters"]
        teacher = record.get("teacher", {})
        what = (
            f"distilled from {teacher.get('model')} (alpha {teacher.get('alpha')}, "
            f"{record['loss'].get('distill')}, InfoNCE weight "
            f"{record['loss'].get('contrastive_weight')}), student {hp['base']}"
            if record.get("kind") == "distill"
            else f"{record['loss']['name']} from {hp['base']}"
        )
        minutes = {k: v / 60 for k, v in t.items()}
        rows.append(
            f"| {name} | {what}; {hp['epochs']} epochs, batch {hp['batch_size']}, "
            f"{hp['n_negatives']} negatives{_negatives_from(record)}, lr {hp['lr']} | "
            f"{minutes.get('teacher_seconds', 0):.1f} | {minutes['mining_seconds']:.1f} | "
            f"{minutes['train_seconds']:.1f} | {minutes['eval_seconds']:.1f} | "
            f"{minutes['total_seconds']:.1f} | {record['best_epoch']} | "
            f"{record['best_dev_nDCG@10']:.4f} | {_recall(record)} |"
        )
    return rows, records


def _recall(record: dict) -> str:
    """The kept epoch's dev R@100 (runs recorded before it was measured: n/a)."""
    value = record.get("best_dev_R@100")
    return "n/a" if value is None else f"{value:.4f}"


def _negatives_from(record: dict) -> str:
    """`` (dense 0-30)``: where a run's hard negatives were mined, when it records it."""
    mined = record.get("negatives") or {}
    if not mined.get("method") or not mined.get("window"):
        return ""
    start, end = mined["window"]
    again = ", re-mined each epoch" if record["hyperparameters"].get("remine_each_epoch") else ""
    return f" ({mined['method']} {start}-{end}{again})"


def main() -> None:
    parser = common.parser(
        __doc__, output="distill.md", data=common.SCIFACT, work="runs/bench-distill"
    )
    parser.add_argument("--model", action="append", required=True, help="NAME=DIR (or default)")
    parser.add_argument("--cat", type=Path, required=True)
    parser.add_argument("--collection", action="append", default=[], help="NAME=BEIR_DIR")
    parser.add_argument(
        "--systems",
        default=",".join(systems(Path("CAT"))),
        help="comma-separated: dense, hybrid, dense-cat, pipeline (default: all four)",
    )
    parser.add_argument(
        "--split", choices=("test", "dev"), default="test", help="dev: compare recipes on dev"
    )
    parser.add_argument(
        "--precision", choices=("auto", "fp32"), default="auto", help="of every index built"
    )
    parser.add_argument("--plot", type=Path, default=common.RESULTS / "distill.png")
    args = parser.parse_args()
    if args.split == "dev" and args.collection:
        parser.error("--collection reports test figures; leave it out with --split dev")
    common.setup_logging()
    args.work.mkdir(parents=True, exist_ok=True)
    models = dict(spec.split("=", 1) for spec in args.model)
    args.systems = [name.strip() for name in args.systems.split(",") if name.strip()]

    started = time.perf_counter()
    table = in_domain(args, models)
    ood = out_of_domain(args, models) if args.collection else []
    train_table, records = training_rows(models)
    if records:
        plot(records, args.plot)
    lines = [
        *common.header(
            "Contrastive vs distilled BERT_DOT",
            f"Benchmark wall time {(time.perf_counter() - started) / 60:.0f} min.",
            f"Index precision: {built_precision(args, models)}.",
        ),
        f"## {args.data.name} {args.split} ({args.data}), re-ranker `{args.cat}`",
        "",
        f"Every row is a `dotcat search` run over the {args.split} queries (k = 100); p: "
        "paired t-test of nDCG@10 against the first model's same system; time: the search "
        "command's wall time (model loads included).",
        "",
        "| model | system | " + " | ".join(MEASURES) + " | p | time |",
        "| --- | --- | " + " | ".join("---:" for _ in MEASURES) + " | ---: | ---: |",
        *table,
    ]
    if train_table:
        lines += [
            "",
            "## Training (minutes, from each run's `dotcat_training.json`)",
            "",
            "| model | recipe | teacher scoring | mining | training | dev eval | total | "
            "best epoch | best dev nDCG@10 | its dev R@100 |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *train_table,
            "",
            f"![training loss and dev nDCG@10 per epoch]({args.plot.name})",
        ]
    if ood:
        lines += [
            "",
            "## Out of domain, dense first stage (no model trained on these collections)",
            "",
            "| collection | model | " + " | ".join(MEASURES) + " |",
            "| --- | --- | " + " | ".join("---:" for _ in MEASURES) + " |",
            *ood,
        ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
