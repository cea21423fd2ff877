"""Train BERT_DOT on SciFact train, then compare BM25, zero-shot and trained models on test.

    python eval/benchmarks/bench_train_dot.py             # all four systems, default settings
    python eval/benchmarks/bench_train_dot.py --systems contrastive --epochs 3 --batch-size 32
    # smoke test (tiny settings, outputs under /tmp):
    python eval/benchmarks/bench_train_dot.py --base /path/to/tiny-bert --max-train-queries 20 \\
        --epochs 1 --output /tmp/train_dot.md --plot /tmp/train_dot.png \\
        --runs-dir /tmp/train_dot_runs --index-dir /tmp/train_dot_indexes

Systems (``--systems``, comma-separated):

- ``bm25``: :func:`dotcat.search.lexical.bm25_search` (bm25s, k1=0.9, b=0.4);
- ``zero-shot``: the base model, indexed with :func:`dotcat.index.build_index`;
- ``contrastive``: :func:`dotcat.training.run.train` with InfoNCE (in-batch + BM25 hard
  negatives, temperature), then indexed;
- ``triplet``: the same with the triplet margin loss.

Every dense system is searched with :class:`dotcat.search.dense.DenseRetriever`
(``batch_search``, k=100) over a flat FAISS index of the whole corpus and scored with
:func:`dotcat.evaluation.evaluate` (ir-measures): nDCG@10, RR@10, R@100 on the test split.
Model selection uses only the dev split carved out of train (``--dev-fraction``).

Writes a Markdown table (``--output``, default ``eval/benchmarks/results/train_dot.md``) with
training time and examples/s, and a plot of the training loss and dev nDCG@10 per epoch
(``--plot``, default ``eval/benchmarks/results/train_dot.png``). Trained models go to
``--runs-dir`` (default ``runs/train_dot/<system>``), indexes to ``--index-dir`` (default
``indexes/``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import common

MEASURES = ("nDCG@10", "RR@10", "R@100")
SYSTEMS = ("bm25", "zero-shot", "contrastive", "triplet")


def subset_qrels(data: Path, split: str, max_queries: int, out: Path) -> Path:
    """The first ``max_queries`` judged queries of a split's qrels, written as a qrels file."""
    from dotcat.data import load_qrels

    qrels = load_qrels(data, split)
    kept = list(qrels)[:max_queries]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid in kept:
            for doc, rel in qrels[qid].items():
                f.write(f"{qid}\t{doc}\t{rel}\n")
    return out


def evaluate_dense(model: str, data: Path, index_dir: Path, queries, qrels, k: int = 100):
    """Index the corpus with ``model``, batch-search the queries, evaluate; (report, seconds)."""
    from dotcat.evaluation import evaluate
    from dotcat.index import IndexConfig, build_index
    from dotcat.models import EncoderConfig
    from dotcat.search.dense import DenseRetriever

    start = time.perf_counter()
    build_index(
        data,
        index_dir,
        EncoderConfig(model=model, device="cpu"),
        IndexConfig(faiss_spec="Flat", device="cpu"),
        overwrite=True,
    )
    index_seconds = time.perf_counter() - start
    run = DenseRetriever(index_dir, device="cpu").batch_search(queries, k=k)
    return evaluate(run, qrels, measures=MEASURES), index_seconds


def search_existing(model: str, index_dir: Path, queries, qrels, k: int = 100):
    """Search an index built earlier; refused unless it was built with ``model``."""
    from dotcat.evaluation import evaluate
    from dotcat.search.dense import DenseRetriever

    retriever = DenseRetriever(index_dir, model=model, device="cpu")
    return evaluate(retriever.batch_search(queries, k=k), qrels, measures=MEASURES)


def train(system: str, args: argparse.Namespace, qrels_file: Path | None) -> Path:
    from dotcat.training.config import DotConfig
    from dotcat.training.run import train as train_dot

    config = DotConfig(
        data=args.data,
        out_dir=args.runs_dir / system,
        qrels=qrels_file,
        base=args.base,
        loss=system,
        negatives=args.negatives,
        n_negatives=args.n_negatives,
        window=(args.window_start, args.window_end),
        epochs=args.epochs,
        batch_size=args.batch_size,
        grad_accum_steps=args.grad_accum_steps,
        cache_chunk_size=args.cache_chunk_size,
        lr=args.lr,
        warmup_ratio=args.warmup_ratio,
        # each loss's own setting (the other does not apply to it)
        **({"margin": args.margin} if system == "triplet" else {"temperature": args.temperature}),
        max_length=args.max_length,
        query_max_length=args.query_max_length,
        dev_fraction=args.dev_fraction,
        dev_max_docs=args.dev_max_docs,
        seed=args.seed,
        bf16=args.bf16,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        overwrite=not args.resume,
    )
    return train_dot(config)


def plot(records: dict[str, dict], path: Path) -> None:
    """Training loss (per epoch, and per step faintly) and dev nDCG@10 per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_dev) = plt.subplots(1, 2, figsize=(10, 4))
    for name, record in records.items():
        epochs = record["epochs"]
        steps_per_epoch = max(e.get("steps", 0) for e in epochs) or 1
        curve = record["loss_curve"]
        (line,) = ax_loss.plot(
            [e["epoch"] for e in epochs[1:]],
            [e["train_loss"] for e in epochs[1:]],
            marker="o",
            label=f"{name} (epoch mean)",
        )
        ax_loss.plot(
            [s / steps_per_epoch for s, _ in curve],
            [v for _, v in curve],
            color=line.get_color(),
            alpha=0.25,
            linewidth=0.8,
        )
        ax_dev.plot(
            [e["epoch"] for e in epochs],
            [e["dev_nDCG@10"] for e in epochs],
            marker="o",
            color=line.get_color(),
            label=name,
        )
    ax_loss.set(xlabel="epoch", ylabel="training loss (log scale)", title="Training loss")
    ax_loss.set_yscale("log")  # InfoNCE and triplet losses differ by orders of magnitude
    ax_dev.set(xlabel="epoch (0 = base model)", ylabel="dev nDCG@10", title="Dev nDCG@10")
    for ax in (ax_loss, ax_dev):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = common.parser(__doc__, output="train_dot.md", data=common.SCIFACT)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--base", default="default")
    parser.add_argument("--max-train-queries", type=int, default=None, help="smoke tests")
    parser.add_argument("--negatives", default="bm25", choices=("bm25", "dense", "none"))
    parser.add_argument("--n-negatives", type=int, default=1)
    parser.add_argument("--window-start", type=int, default=10)
    parser.add_argument("--window-end", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--grad-accum-steps", type=int, default=1)
    parser.add_argument("--cache-chunk-size", type=int, default=None)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--warmup-ratio", type=float, default=0.1)
    parser.add_argument("--temperature", type=float, default=0.05)
    parser.add_argument("--margin", type=float, default=0.1)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--query-max-length", type=int, default=64)
    parser.add_argument("--dev-fraction", type=float, default=0.1)
    parser.add_argument("--dev-max-docs", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--bf16", default="auto", choices=("auto", "on", "off"))
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help="continue interrupted trainings")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/train_dot"))
    parser.add_argument("--index-dir", type=Path, default=Path("indexes"))
    parser.add_argument(
        "--zero-shot-index",
        type=Path,
        default=None,
        help="an existing index of the base model (e.g. from `make scifact`) to search instead "
        "of building one; its manifest is checked against --base",
    )
    parser.add_argument("--plot", type=Path, default=common.RESULTS / "train_dot.png")
    args = parser.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        sys.exit(f"unknown systems {unknown}; choose from {SYSTEMS}")
    common.setup_logging()

    from dotcat.data import load_corpus, load_qrels, load_queries
    from dotcat.evaluation import evaluate
    from dotcat.search.lexical import bm25_search

    test_queries = load_queries(args.data, split="test")
    test_qrels = load_qrels(args.data, "test")
    qrels_file = None
    if args.max_train_queries:
        qrels_file = subset_qrels(
            args.data, "train", args.max_train_queries, args.runs_dir / "train-subset.tsv"
        )

    rows: list[tuple[str, dict, str]] = []
    records: dict[str, dict] = {}
    for system in systems:
        if system == "bm25":
            start = time.perf_counter()
            run = bm25_search(load_corpus(args.data), test_queries, k=100)
            report = evaluate(run, test_qrels, measures=MEASURES)
            rows.append(("BM25 (bm25s, k1=0.9, b=0.4)", report.aggregate, "no training"))
            print(f"bm25: {report.aggregate} ({time.perf_counter() - start:.1f} s)", flush=True)
            continue
        if system == "zero-shot":
            if args.zero_shot_index:
                report = search_existing(args.base, args.zero_shot_index, test_queries, test_qrels)
                seconds = 0.0
            else:
                index = args.index_dir / "scifact-dot-zero-shot"
                report, seconds = evaluate_dense(
                    args.base, args.data, index, test_queries, test_qrels
                )
            rows.append((f"BERT_DOT zero-shot ({args.base})", report.aggregate, "no training"))
            print(f"zero-shot: {report.aggregate} (index {seconds:.0f} s)", flush=True)
            continue
        out = train(system, args, qrels_file)
        record = json.loads(common.training_record_path(out).read_text())
        records[system] = record
        index = args.index_dir / f"scifact-dot-{system}"
        report, seconds = evaluate_dense(str(out), args.data, index, test_queries, test_qrels)
        loss = record["loss"]
        knob = (
            f"temperature {loss['temperature']}"
            if system == "contrastive"
            else f"margin {loss['margin']}"
        )
        timing = record["timings"]
        notes = (
            f"{knob}; {timing['train_seconds']:.0f} s training + {timing['eval_seconds']:.0f} s "
            f"dev eval + {timing['mining_seconds']:.0f} s mining "
            f"({timing['total_seconds']:.0f} s total), {record['examples_per_second']:.1f} "
            f"examples/s, best epoch {record['best_epoch']} of {len(record['epochs']) - 1}"
        )
        rows.append((f"BERT_DOT {system}-trained", report.aggregate, notes))
        print(f"{system}: {report.aggregate}; {notes}", flush=True)

    if records:
        plot(records, args.plot)

    lines = [
        *common.header("SciFact: BERT_DOT trained by dotcat vs BM25 and zero-shot", torch=True),
        f"Test split: {len(test_queries)} queries; measures by ir-measures; dense systems "
        "searched exactly (FAISS Flat) over the whole corpus, k=100.",
    ]
    if records:
        first = next(iter(records.values()))
        hp = first["hyperparameters"]
        lines += [
            f"Training: base {hp['base']}, {first['split']['train_queries']} train / "
            f"{first['split']['dev_queries']} dev queries ({first['split']['train_examples']} "
            f"examples), {hp['epochs']} epochs, batch {hp['batch_size']}, lr {hp['lr']}, "
            f"warm-up {hp['warmup_ratio']}, {hp['n_negatives']} {hp['negatives']} negative(s) "
            f"from ranks {hp['window']}, max length {hp['max_length']} (queries "
            f"{hp['query_max_length']}), bf16 {first['bf16']}, seed {hp['seed']}; the best "
            "epoch on dev nDCG@10 is kept.",
        ]
    lines += [
        "",
        "| system | " + " | ".join(MEASURES) + " | training |",
        "| --- | " + " | ".join("---:" for _ in MEASURES) + " | --- |",
    ]
    for name, scores, notes in rows:
        lines.append(
            f"| {name} | " + " | ".join(f"{scores[m]:.4f}" for m in MEASURES) + f" | {notes} |"
        )
    if records:
        lines += ["", "Dev nDCG@10 per epoch (epoch 0 = base model) and training loss:", ""]
        for name, record in records.items():
            per_epoch = ", ".join(
                f"{e['epoch']}: {e['dev_nDCG@10']:.4f}"
                + (f" (loss {e['train_loss']:.4f})" if e["train_loss"] is not None else "")
                for e in record["epochs"]
                if e["dev_nDCG@10"] is not None
            )
            lines.append(f"- {name}: {per_epoch}")
        lines += ["", f"![training loss and dev nDCG@10 per epoch]({args.plot.name})"]
    print("\n".join(lines))
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
