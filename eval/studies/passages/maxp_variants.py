"""Two answers to MaxP's length bias that were tried and not kept, on dev only.

    dotcat experiment eval/experiments/passages_window.toml   # builds the 128/32 indexes
    python eval/studies/passages/maxp_variants.py

On the default's indexes of SciFact and pylib (passages of 128 tokens, stride 32; the
experiment's cache), with each collection's dev queries (never a test split):

- **baseline**: what ``dotcat search`` does: dense and BM25 each rank documents by their best
  passage (MaxP), then the two document rankings are fused (fusion chosen on these queries);
- **length penalty**: a document's dense score is its best passage's minus ``g * ln(n)``, ``n``
  its passages (the expected best of ``n`` noisy scores grows with ``n``), for a few ``g``;
  then fused with BM25 as the baseline is;
- **passage-level fusion**: the two sides' min-max normalised passage scores (top 1,000 each)
  fused per passage (``w * dense + (1 - w) * BM25``), then MaxP, for every ``w`` of the grid.

Dense passage scores are exact (every passage vector read back from the Flat index). Writes
``maxp_variants.md`` beside this script.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

EXPERIMENT = Path("runs/experiments/passages_window/results.json")
DATA = {"scifact": "data/scifact", "pylib": "runs/collections/pylib"}
SYSTEM = "dense, passages 128/32"
PENALTIES = (0.01, 0.02, 0.04)
TOP_PASSAGES = 1000
K = 100


def _minmax(scores: dict) -> dict:
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    return {k: (v - low) / span if span > 0 else 0.0 for k, v in scores.items()}


def _passages(index: str) -> tuple[np.ndarray, dict[int, str]]:
    """Each passage's document position (by FAISS id), and each position's document id."""
    with sqlite3.connect(
        f"file:{Path(index, 'docstore.sqlite').resolve()}?mode=ro", uri=True
    ) as db:
        ids = dict(db.execute("SELECT pos, id FROM docs"))
        rows = db.execute("SELECT pid, pos FROM passages ORDER BY pid").fetchall()
    assert [pid for pid, _ in rows] == list(range(len(rows))), "passage ids are not 0..n-1"
    return np.array([pos for _, pos in rows]), ids


def study(name: str, index: str) -> dict[str, float]:
    """Dev nDCG@10 of every variant on one collection."""
    import faiss

    from dotcat.data.splits import find_dev_split
    from dotcat.evaluation import evaluate
    from dotcat.search.fusion import WEIGHTS, choose_fusion
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    dev = find_dev_split(DATA[name])
    qids = list(dev.queries)

    def ndcg(run) -> float:
        return float(evaluate(run, dev.qrels, measures=["nDCG@10"]).aggregate["nDCG@10"])

    def fused(dense, bm25) -> tuple[float, str]:
        fusion = choose_fusion(dense, bm25, dev.qrels, dev.source)
        return ndcg(fusion.fuse_runs(dense, bm25)), fusion.describe()

    pipeline = SearchPipeline(index, PipelineConfig(first_stage="dense", precision="auto"))
    queries = pipeline.encoder.encode_queries([dev.queries[q] for q in qids])
    flat = faiss.read_index(str(Path(index, "index.faiss")))
    scores = np.asarray(queries, dtype=np.float32) @ flat.reconstruct_n(0, flat.ntotal).T
    doc_of, doc_ids = _passages(index)
    counts = np.bincount(doc_of, minlength=max(doc_ids) + 1)
    order = np.argsort(doc_of, kind="stable")
    best = np.maximum.reduceat(scores[:, order], np.r_[0, np.cumsum(counts)][:-1], axis=1)
    bm25 = pipeline.run(dev.queries, K, first_stage="bm25")
    out = {}
    baseline = pipeline.run(dev.queries, K, first_stage="dense")
    out["baseline: dense"] = ndcg(baseline)
    out["baseline: hybrid"], _ = fused(baseline, bm25)
    for g in PENALTIES:
        penalised = best - g * np.log(counts)[None, :]
        run = {}
        for i, q in enumerate(qids):
            top = np.argsort(-penalised[i])[:K]
            run[q] = [(doc_ids[int(d)], float(penalised[i, d])) for d in top]
        out[f"length penalty {g:g}: dense"] = ndcg(run)
        out[f"length penalty {g:g}: hybrid"], _ = fused(run, bm25)
    dense_p, bm25_p = {}, {}
    for i, q in enumerate(qids):
        top = np.argpartition(-scores[i], min(TOP_PASSAGES, scores.shape[1] - 1))[:TOP_PASSAGES]
        dense_p[q] = _minmax({int(p): float(scores[i, p]) for p in top})
        rows = pipeline.bm25.search_one(dev.queries[q], TOP_PASSAGES)
        bm25_p[q] = _minmax({int(p): float(s) for p, s in rows})
    for w in WEIGHTS:
        run = {}
        for q in qids:
            docs: dict[str, float] = {}
            for p in {**dense_p[q], **bm25_p[q]}:
                s = w * dense_p[q].get(p, 0.0) + (1 - w) * bm25_p[q].get(p, 0.0)
                doc = doc_ids[int(doc_of[p])]
                docs[doc] = max(s, docs.get(doc, -1.0))
            run[q] = sorted(docs.items(), key=lambda x: -x[1])[:K]
        out[f"passage-level fusion, dense weight {w:g}"] = ndcg(run)
    return out


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "maxp_variants.md")
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT)
    args = parser.parse_args()
    results = json.loads(args.experiment.read_text())
    rows = {
        name: study(name, results["datasets"][name]["systems"][SYSTEM]["stages"][0]["path"])
        for name in DATA
    }
    lines = common.header(
        "MaxP's length bias: a length penalty and passage-level fusion, dev nDCG@10",
        "Encoder: the default (all-MiniLM-L6-v2) at `auto` precision.",
        torch=True,
    )
    lines += [
        f"Indexes: `{SYSTEM}` of `eval/experiments/passages_window.toml` (the default's "
        "window). Dev queries only; every hybrid's fusion chosen on them (the baseline's too).",
        "",
        "| variant | " + " | ".join(rows) + " |",
        "| --- | " + " | ".join("---:" for _ in rows) + " |",
    ]
    for variant in next(iter(rows.values())):
        lines.append(
            f"| {variant} | " + " | ".join(f"{r[variant]:.4f}" for r in rows.values()) + " |"
        )
    common.write(args.output, lines + [""])


if __name__ == "__main__":
    main()
