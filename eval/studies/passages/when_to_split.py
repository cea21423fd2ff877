"""When should an index split long documents? Passages against cut documents, on dev only.

    dotcat experiment eval/experiments/passages.toml      # builds the indexes (cached)
    python eval/studies/passages/when_to_split.py

For each of the five collections of ``eval/experiments/passages.toml``, the experiment's two
indexes of the default encoder (``passages = false``: one vector per document cut at 256
tokens; ``passages = true``: long documents split, window 256, stride 64) are searched with the
collection's **dev** queries (its ``dev`` split, or SciFact's 10% of ``train`` that ``dotcat
train`` holds out; test queries are never read): dense, BM25 and the hybrid (fusion chosen on
those dev queries for each pair, as ``dotcat index`` chooses it, so every hybrid figure is
alike optimistic), plus the two mixed hybrids (dense of one index, BM25 of the other). The
share of documents longer than the window says where long documents are the rule.

What it showed (``when_to_split.md``), with the lengths of ``lengths.md``, decided the default
of :class:`dotcat.index.PassageConfig` ``enabled``: split when at least half the documents are
more than twice the encoder's max length (first: longer than it; see the README).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

EXPERIMENT = Path("runs/experiments/passages/results.json")
DATA = {"scifact": "data/scifact"} | {
    name: f"runs/collections/{name}" for name in ("pylib", "faq", "pydoc", "debian")
}
COLUMNS = (
    "dense cut", "dense passages", "BM25 documents", "BM25 passages",
    "hybrid cut", "hybrid passages", "dense cut + BM25 passages", "dense passages + BM25 documents",
)  # fmt: skip


def index_paths(results: dict, dataset: str) -> tuple[str, str]:
    """The experiment's cut and passage indexes of a dataset."""
    systems = results["datasets"][dataset]["systems"]
    return tuple(systems[name]["stages"][0]["path"] for name in ("dense, cut", "dense, passages"))


def long_share(index: str) -> float:
    """The share of the index's documents split into more than one passage."""
    uri = f"file:{Path(index, 'docstore.sqlite').resolve()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        split = db.execute("SELECT COUNT(*) FROM passages WHERE part = 1").fetchone()[0]
        documents = db.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
    return split / documents


def study(name: str, cut: str, split: str) -> dict:
    """Dev nDCG@10 of every column for one collection."""
    from dotcat.data.splits import find_dev_split
    from dotcat.evaluation import evaluate
    from dotcat.search.fusion import choose_fusion
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    dev = find_dev_split(DATA[name])

    def ndcg(run) -> float:
        return float(evaluate(run, dev.qrels, measures=["nDCG@10"]).aggregate["nDCG@10"])

    def hybrid(dense, bm25) -> float:
        return ndcg(choose_fusion(dense, bm25, dev.qrels, dev.source).fuse_runs(dense, bm25))

    runs = {}
    for label, index in (("cut", cut), ("passages", split)):
        pipeline = SearchPipeline(index, PipelineConfig(first_stage="dense", precision="auto"))
        runs["dense " + label] = pipeline.run(dev.queries, 100, first_stage="dense")
        bm25 = "BM25 documents" if label == "cut" else "BM25 passages"
        runs[bm25] = pipeline.run(dev.queries, 100, first_stage="bm25")
    scores = {k: ndcg(v) for k, v in runs.items()}
    scores["hybrid cut"] = hybrid(runs["dense cut"], runs["BM25 documents"])
    scores["hybrid passages"] = hybrid(runs["dense passages"], runs["BM25 passages"])
    scores["dense cut + BM25 passages"] = hybrid(runs["dense cut"], runs["BM25 passages"])
    scores["dense passages + BM25 documents"] = hybrid(runs["dense passages"],
                                                       runs["BM25 documents"])  # fmt: skip
    return {"queries": len(dev.queries), "long": long_share(split), **scores}


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "when_to_split.md")
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT)
    args = parser.parse_args()
    results = json.loads(args.experiment.read_text())
    rows = {name: study(name, *index_paths(results, name)) for name in DATA}
    lines = common.header(
        "When to split long documents: passages against cut documents, dev nDCG@10",
        "Encoder: the default (all-MiniLM-L6-v2) at `auto` precision.",
        torch=True,
    )
    lines += [
        "Indexes: `eval/experiments/passages.toml`'s (`passages = false` / `true`; window 256, "
        "stride 64). Dev queries only; each hybrid's fusion chosen on them. *long*: documents "
        "split into more than one passage.",
        "",
        "| collection | dev queries | long | "
        + " | ".join(COLUMNS)
        + " | hybrid: passages - cut |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS) + " | ---: |",
    ]
    for name, row in rows.items():
        cells = " | ".join(f"{row[c]:.4f}" for c in COLUMNS)
        diff = row["hybrid passages"] - row["hybrid cut"]
        lines.append(f"| {name} | {row['queries']} | {row['long']:.0%} | {cells} | {diff:+.4f} |")
    lines.append("")
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
