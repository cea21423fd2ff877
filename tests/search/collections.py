"""A small collection indexed as shards and as their merge, for the sharded-search tests.

Documents of varied lengths over a small vocabulary (so that BM25 scores tie now and then,
and every shard's statistics differ from the collection's), some with no title, some long
enough to make several passages of a 32-token window.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from dotcat.index import IndexConfig, build_index
from dotcat.index.passages import PassageConfig
from dotcat.index.shards import merge_indexes
from dotcat.models import EncoderConfig

VOCABULARY = [
    "protein", "cell", "gene", "cancer", "virus", "immune", "insulin", "glucose", "neuron",
    "brain", "heart", "lung", "kidney", "vitamin", "bone", "muscle", "drug", "trial",
    "placebo", "dose", "mouse", "patient", "therapy", "receptor", "enzyme", "running", "runs",
    "runner", "statin", "cholesterol", "artery", "blood", "pressure", "sleep", "memory",
]  # fmt: skip
QUERIES = {
    "q1": "insulin and glucose in the blood",
    "q2": "immune response to a virus",
    "q3": "bone density and vitamin",
    "q4": "running improves memory and sleep",
    "q5": "statin therapy lowers cholesterol in patients",
    "q6": "enzyme receptor gene",
    "q7": "zebra",  # no document has it
}
WINDOW = 32


def write_corpus(path: Path, n: int = 160, seed: int = 3) -> Path:
    rng = random.Random(seed)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i in range(n):
            words = [rng.choice(VOCABULARY) for _ in range(rng.choice((3, 8, 20, 60, 120)))]
            title = "" if i % 7 == 0 else f"{rng.choice(VOCABULARY).title()} study {i}"
            f.write(json.dumps({"_id": f"d{i}", "title": title, "text": " ".join(words)}) + "\n")
    return path


def encoder_config(model: Path) -> EncoderConfig:
    return EncoderConfig(
        model=str(model), max_length=WINDOW, similarity="cos", pooling="mean",
        precision="fp32", device="cpu",
    )  # fmt: skip


def build_collection(root: Path, model: Path, shards: int, passages: bool) -> dict[str, Path]:
    """``root/parts/s<i>`` (``--shard i/N``) and ``root/merged`` (``dotcat merge``)."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(root / "corpus.jsonl.gz")
    encoder = encoder_config(model)
    parts = root / "parts"
    for i in range(shards):
        config = IndexConfig(chunk_size=64, shard=(i, shards),
                             passages=PassageConfig(enabled=passages))  # fmt: skip
        build_index(corpus, parts / f"s{i}", encoder, config, show_progress=False)
    merged = root / "merged"
    merge_indexes(sorted(parts.iterdir()), merged, show_progress=False)
    return {"corpus": corpus, "parts": parts, "merged": merged}
