"""Pseudo-relevance feedback's settings chosen on dev queries only (never a test split).

For each collection of ``eval/experiments/feedback.toml``, the index that experiment built
(found in its cache by the corpus's sha256) is searched with the dev queries (a collection's
``dev`` split; SciFact: the 10% of train that ``dotcat train`` holds out) under a small grid
of RM3 settings (BM25 first stage) and Rocchio settings (dense first stage); nDCG@10 per
collection and the unweighted mean. The setting with the best mean is the one the
experiment's "+RM3" / "+Rocchio" systems run.

    python eval/studies/prf_settings/prf_dev.py runs/experiments/feedback/cache > out.md
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "src"))

from dotcat.data import find_corpus_file  # noqa: E402
from dotcat.data.splits import find_dev_split  # noqa: E402
from dotcat.evaluation.metrics import evaluate  # noqa: E402
from dotcat.search.pipeline import SearchPipeline  # noqa: E402

COLLECTIONS = {
    "scifact": "data/scifact",
    "pylib": "runs/collections/pylib",
    "faq": "runs/collections/faq",
    "pydoc": "runs/collections/pydoc",
    "debian": "runs/collections/debian",
}
RM3_GRID = [
    {"fb_docs": d, "fb_terms": t, "original_query_weight": w}
    for d, t, w in itertools.product((5, 10), (10, 20), (0.5, 0.7))
]
ROCCHIO_GRID = [
    {"rocchio_docs": d, "rocchio_beta": b}
    for d, b in itertools.product((1, 3, 5), (0.25, 0.5, 1.0))
]


SETTINGS: dict[str, dict] = {}


def _label(kind: str, settings: dict) -> str:
    label = f"{kind} " + ", ".join(f"{k} {v}" for k, v in settings.items())
    SETTINGS[label] = settings
    return label


def _mean(cells: dict[str, float]) -> float:
    return sum(cells.values()) / len(cells)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def index_of(cache: Path, corpus: Path) -> Path:
    digest = sha256(corpus)
    for record in sorted((cache / "indexes").glob("*.json")):
        if json.loads(record.read_text())["depends_on"]["corpus"] == digest:
            return record.with_suffix("")
    raise SystemExit(f"no index of {corpus} in {cache}: run the experiment first")


def ndcg(pipeline: SearchPipeline, stage: str, dev) -> float:
    run = pipeline.run(dev.queries, 100, first_stage=stage)
    return evaluate(run, dev.qrels, ["nDCG@10"]).aggregate["nDCG@10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", type=Path)
    args = parser.parse_args()
    rows: dict[str, dict[str, float]] = {}
    for name, data in COLLECTIONS.items():
        dev = find_dev_split(ROOT / data)
        index = index_of(args.cache, find_corpus_file(ROOT / data))
        print(
            f"{name}: {len(dev.queries)} dev queries ({dev.source}), index {index.name[:12]}",
            file=sys.stderr,
        )
        cells = {"bm25": ("bm25", {}), "dense": ("dense", {})}
        cells |= {_label("rm3", s): ("bm25", {"prf": "rm3", **s}) for s in RM3_GRID}
        cells |= {_label("rocchio", s): ("dense", {"prf": "rocchio", **s}) for s in ROCCHIO_GRID}
        for label, (stage, settings) in cells.items():
            pipeline = SearchPipeline(index, first_stage=stage, **settings)
            rows.setdefault(label, {})[name] = ndcg(pipeline, stage, dev)
    names = list(COLLECTIONS)
    best = {
        kind: max((label for label in rows if label.startswith(kind)), key=lambda r: _mean(rows[r]))
        for kind in ("rm3", "rocchio")
    }
    for name, data in COLLECTIONS.items():  # the hybrid with the settings chosen above
        dev = find_dev_split(ROOT / data)
        index = index_of(args.cache, find_corpus_file(ROOT / data))
        for prf in ("none", "rm3", "rocchio", "both"):
            settings = {"prf": prf}
            for kind in ("rm3", "rocchio"):
                if prf in (kind, "both"):
                    settings |= SETTINGS[best[kind]]
            pipeline = SearchPipeline(index, first_stage="hybrid", **settings)
            rows.setdefault(f"hybrid, prf {prf}", {})[name] = ndcg(pipeline, "hybrid", dev)
    print("| setting (dev nDCG@10) | " + " | ".join(names) + " | mean |")
    print("| --- |" + " ---: |" * (len(names) + 1))
    for label, cells in rows.items():
        mean = _mean(cells)
        print(f"| {label} | " + " | ".join(f"{cells[n]:.4f}" for n in names) + f" | {mean:.4f} |")


if __name__ == "__main__":
    main()
