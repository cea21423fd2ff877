"""The toy training data of the training tests (and of ``eval/studies/training_parity``)."""

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


def make_titled_beir(root: Path) -> Path:
    """:func:`make_training_beir` with titles of 3+ words and texts of 20+ words, so every
    topical document gives a pseudo-query (for pre-training); the 8 filler documents (no
    title, one short text) give none."""
    make_training_beir(root)
    corpus = root / "corpus.jsonl.gz"
    with gzip.open(corpus, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    for doc in docs:
        if doc["title"]:
            doc["title"] += " study results"  # filler words: BM25 finds negatives
            doc["text"] = " ".join([doc["text"]] * 3)
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    return root


ADAPT_TOPICS = [
    "insulin", "neuron", "glacier", "volcano", "enzyme", "protein", "comet", "orbit", "cell",
    "virus", "bacteria", "ocean", "forest", "desert", "river", "magnet", "photon", "quartz",
]  # fmt: skip
ADAPT_WORDS = ["study", "shows", "effect", "of", "on", "the", "in", "a", "with", "model", "rate"]


def write_adapt_corpus(path: Path) -> Path:
    """A corpus for ``dotcat adapt``: 90 documents, 70 with titles, 14 untitled with several
    sentences, 6 too short for a pseudo-query."""
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(90):
            a, b = (
                ADAPT_TOPICS[i % len(ADAPT_TOPICS)],
                ADAPT_TOPICS[(i * 7 + 3) % len(ADAPT_TOPICS)],
            )
            body = " ".join(rng.choice(ADAPT_WORDS + [a, b]) for _ in range(30))
            if i < 70:
                doc = {"_id": f"d{i}", "title": f"{a} and {b} number {i}", "text": body + "."}
            elif i < 84:
                sentences = [
                    f"The {a} {w} was measured again in trial {i} of {b}."
                    for w in ("level", "rate", "effect")
                ]
                doc = {"_id": f"d{i}", "title": "", "text": " ".join([*sentences, body + "."])}
            else:
                doc = {"_id": f"d{i}", "title": "", "text": f"{a} {b}"}
            f.write(json.dumps(doc) + "\n")
    return path
