"""The toy training data of the training tests (and of ``eval/training_parity.py``)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

TOPICS = [
    ("insulin", "glucose"),
    ("neuron", "synapse"),
    ("tumor", "chemotherapy"),
    ("virus", "antibody"),
    ("bone", "calcium"),
    ("liver", "bile"),
    ("lung", "oxygen"),
    ("kidney", "urine"),
    ("heart", "artery"),
    ("skin", "melanin"),
    ("muscle", "fiber"),
    ("gene", "mutation"),
    ("protein", "folding"),
    ("sleep", "melatonin"),
    ("vaccine", "immunity"),
    ("diet", "obesity"),
]
FILLER = ["study", "patients", "effect", "cells", "trial", "risk", "mice", "levels", "results"]


def make_training_beir(root: Path, seed: int = 0) -> Path:
    """A learnable toy BEIR dir: each query names its document's two topic words.

    Documents share filler words, so BM25 ranks other documents below the relevant one and
    there are negatives to mine; two extra documents per topic-free filler make the corpus
    bigger than a batch.
    """
    rng = random.Random(seed)
    (root / "qrels").mkdir(parents=True)
    docs, queries, qrels = [], [], []
    for i, (a, b) in enumerate(TOPICS):
        words = [a, b, a, *rng.sample(FILLER, 4)]
        rng.shuffle(words)
        docs.append({"_id": f"d{i}", "title": f"{a} {b}", "text": " ".join(words)})
        queries.append({"_id": f"q{i}", "text": f"{rng.choice(FILLER)} {a} {b}"})
        qrels.append((f"q{i}", f"d{i}"))
    for j in range(8):
        docs.append({"_id": f"x{j}", "title": "", "text": " ".join(rng.sample(FILLER, 5))})
    with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    with open(root / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(q) + "\n" for q in queries)
    with open(root / "qrels" / "train.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t1\n" for q, d in qrels)
    return root
