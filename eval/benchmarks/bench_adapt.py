"""``dotcat adapt`` on a corpus alone, judged on its test queries beside BM25 and zero-shot.

    python eval/benchmarks/bench_adapt.py --data data/scifact --name scifact \\
        [--budget-minutes 45] [--work runs/adapt] \\
        [--output eval/benchmarks/results/adapt_scifact.md]

Everything goes through the CLI as a user would run it: ``dotcat adapt`` on the corpus only
(its queries and qrels are never read); ``dotcat index`` of the corpus with the zero-shot and
the adapted model, each with BM25 fused as an index without dev queries fuses (a dev-chosen
fusion would read labels; RRF when ``adapt_*.md`` were recorded, linear 0.5 now);
``dotcat search`` over the test queries (dense and hybrid); ``dotcat bm25``; ``dotcat eval
--baseline`` against zero-shot dense. Steps that already have their output are not run again
(delete the work folder to start over).
"""

from __future__ import annotations

import json
from pathlib import Path

import common

LABELS = ("zero-shot", "adapted")


def run(command: list[str], output: Path) -> float:
    """``dotcat COMMAND`` unless ``output`` exists; its wall seconds (0 when skipped)."""
    if output.exists():
        print(f"skip (exists): {output}", flush=True)
        return 0.0
    return common.dotcat(*command, quiet=False)[1]


def main() -> None:
    parser = common.parser(__doc__, data=common.REQUIRED, work="runs/adapt")
    parser.add_argument("--name", required=True)
    parser.add_argument("--budget-minutes", type=float, default=45.0)
    parser.add_argument("--prefer", default="title", help="pseudo-queries: title or sentence")
    parser.add_argument("--teacher", default=None, help="a BERT_CAT labelling the pseudo pairs")
    parser.add_argument("--teacher-alpha", default=None, help="its share (default: its record)")
    parser.add_argument("--output", type=Path, help="default: results/adapt_NAME.md")
    args = parser.parse_args()
    from dotcat.data import find_corpus_file

    work = args.work / args.name
    work.mkdir(parents=True, exist_ok=True)
    output = args.output or common.RESULTS / f"adapt_{args.name}.md"
    print(f"machine: {common.describe()}", flush=True)

    model = work / "model"
    seconds = {"adapt": run(_adapt(args, model), model / "dotcat_adapt.json")}
    runs = {}
    for label, encoder in zip(LABELS, ("default", str(model)), strict=True):
        index = work / f"index-{label}"
        # The corpus file, not the BEIR dir: from a dir with train qrels `dotcat index` would
        # choose the hybrid fusion on their dev share (labels); without, the default fusion.
        command = ["-q", "index", str(find_corpus_file(args.data)), str(index)]
        command += ["--model", encoder]
        seconds[f"index {label}"] = run(command, index / "manifest.json")
        for stage in ("dense", "hybrid"):
            out = work / f"{label}-{stage}.trec"
            command = ["-q", "search", str(index), "--queries", str(args.data)]
            command += [
                "--split",
                "test",
                "-k",
                "100",
                "--first-stage",
                stage,
                "--output",
                str(out),
            ]
            run(command, out)
            runs[f"{label} {stage}"] = out
    bm25 = work / "bm25.trec"
    command = ["-q", "bm25", str(args.data), "--queries", str(args.data)]
    run([*command, "--split", "test", "-k", "100", "--output", str(bm25)], bm25)
    runs = {"BM25": bm25, **runs}
    table = _evaluate(list(runs.values()), args.data, runs["zero-shot dense"])
    dev = _dev_figures(args.data, {label: work / f"index-{label}" for label in LABELS})
    _write(output, args, model, table, seconds, dev)
    print(table, flush=True)


def _adapt(args, model: Path) -> list[str]:
    command = ["adapt", str(args.data), str(model)]
    command += ["--budget-minutes", f"{args.budget_minutes:g}", "--prefer", args.prefer]
    if args.teacher:
        command += ["--teacher", args.teacher]
    if args.teacher_alpha is not None:
        command += ["--teacher-alpha", args.teacher_alpha]
    if (model / "dotcat_adapt.json").exists() or (model / "adapt").exists():
        command.append("--resume")
    return command


def _evaluate(runs: list[Path], data: Path, baseline: Path) -> str:
    command = ["eval", *map(str, runs), str(data), "--split", "test"]
    command += ["-m", "nDCG@10", "-m", "RR@10", "-m", "R@100", "--baseline", str(baseline)]
    return common.dotcat(*command, capture=True, quiet=False)[0]


def _dev_figures(data: Path, indexes: dict[str, Path]) -> str | None:
    """Dense nDCG@10 of each index on the data's dev queries (its dev split, else the 10% of
    train that `dotcat train` holds out): what adaptation settings are chosen on."""
    from dotcat.data.splits import find_dev_split
    from dotcat.evaluation import evaluate
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    dev = find_dev_split(data)
    if dev is None:
        return None
    figures = []
    for label, index in indexes.items():
        pipeline = SearchPipeline(index, PipelineConfig(first_stage="dense"))
        report = evaluate(pipeline.run(dev.queries, 100), dev.qrels, ["nDCG@10", "R@100"])
        figures.append(
            f"{label} nDCG@10 {report.aggregate['nDCG@10']:.4f}, "
            f"R@100 {report.aggregate['R@100']:.4f}"
        )
    return f"dev ({dev.source}, {len(dev.queries)} queries), dense: " + "; ".join(figures)


def _write(output: Path, args, model: Path, table: str, seconds: dict, dev: str | None) -> None:
    record = json.loads((model / "dotcat_adapt.json").read_text())
    steps = record["steps"]
    pseudo, plan = steps["pseudo_queries"]["result"], steps["plan"]["result"]
    rates = steps["calibration"]["result"]
    lines = [
        *common.header(f"`dotcat adapt` on {args.name}: no labels, its corpus only"),
        "Test queries; the adaptation read only the corpus. Baseline of the paired tests: "
        "zero-shot all-MiniLM-L6-v2, dense.",
        "",
        table.strip(),
        "",
        "## The adaptation",
        "",
        f"- Pseudo-queries: {pseudo['queries']} ({pseudo['from_titles']} titles, "
        f"{pseudo['from_sentences']} cut sentences; {pseudo['too_short']} documents too short, "
        f"{pseudo['duplicates']} duplicates dropped) from {pseudo['documents']} documents.",
        f"- Calibration: {rates['examples_per_second']:.2f} training examples/s, "
        f"{rates['documents_per_second']:.1f} documents/s encoded (bf16 {rates['bf16']}).",
        f"- Plan: {plan['queries']} of {plan['of']} pseudo-queries, dense negatives "
        f"{plan['dense_negatives']}"
        + (f" ({plan['why_no_dense']})" if "why_no_dense" in plan else "")
        + ".",
        "- Seconds per step: "
        + ", ".join(f"{name} {step['seconds']:.0f}" for name, step in steps.items())
        + f"; whole run {record['elapsed_seconds'] / 60:.1f} min (budget "
        f"{args.budget_minutes:g} min).",
        f"- Model selection figures, {dev}." if dev else "- No dev queries in the data.",
        "- Wall seconds of the CLI steps this run: "
        + (
            ", ".join(f"{k} {v:.0f}" for k, v in seconds.items() if v)
            or "none (every output existed: a re-run that only evaluated)"
        )
        + ".",
    ]
    common.write(output, lines)


if __name__ == "__main__":
    main()
