"""Dev splits: the held-out queries every dev-chosen setting of dotcat is chosen on.

A benchmark's test split is for reporting only. Settings (a training run's best epoch, a
re-ranker's interpolation weight, a hybrid index's fusion weight) are chosen on a dev split:
the data's own ``dev`` qrels when it has them, else a deterministic share of ``train`` carved
by :func:`split_dev`, with the same defaults as ``dotcat train`` (10 %, seed 42; a training
run's ``--seed`` does not change its dev split), so every stage holds out the same queries.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dotcat.data.catalog import resolve_data_path
from dotcat.data.qrels import available_splits, load_qrels
from dotcat.data.queries import load_queries
from dotcat.data.sources import CORPUS_FILE_NAMES
from dotcat.errors import DotcatError

logger = logging.getLogger(__name__)

#: The dev share ``dotcat train`` carves from train by default.
DEV_FRACTION = 0.1
#: The seed of that carving (every stage holds out the same queries).
DEV_SEED = 42


def unit_hash(*parts: object) -> float:
    """A number in [0, 1) from the sha256 of the parts (NUL-separated): stable across runs."""
    key = "\x00".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2.0**64


def split_dev(
    qids: Iterable[str], dev_fraction: float = 0.1, seed: int = 0, at_least: int = 0
) -> tuple[list[str], list[str]]:
    """Split query ids into ``(train_qids, dev_qids)`` deterministically.

    A query goes to dev when ``h(seed, qid) < dev_fraction``, with ``h`` the first 64 bits of
    ``sha256(f"{seed}\\0{qid}")`` as a number in [0, 1). The assignment of a query depends on its
    id and the seed only, so it is the same on every run and machine, and adding queries later
    never moves an existing query from train to dev or back. The dev share is ``dev_fraction``
    in expectation.

    Small sets: with ``dev_fraction > 0`` and at least two queries, dev is never empty (the
    query with the smallest hash is taken) and train is never empty (the one with the largest
    hash is kept); only in these corner cases does an assignment depend on the other ids.

    ``at_least``: where ``dev_fraction`` gives fewer dev queries than that and the set has
    twice as many queries, dev is the ``at_least`` queries of smallest hash instead (a superset
    of the fraction's: a choice that needs that many dev queries to tell points apart gets
    them, and train keeps at least as many).

    Args:
        qids: query ids (order is kept in both outputs; repeated ids are kept once).
        dev_fraction: share of queries for dev, in [0, 1); 0 gives an empty dev split.
        seed: changes the split.
        at_least: the dev queries wanted where the set is big enough (0: the fraction's).

    Raises:
        DotcatError: ``dev_fraction`` outside [0, 1).
    """
    if not 0.0 <= dev_fraction < 1.0:
        raise DotcatError(f"dev fraction must be in [0, 1), got {dev_fraction}")
    ids = list(dict.fromkeys(str(q) for q in qids))
    hashes = {qid: unit_hash(seed, qid) for qid in ids}
    dev = {qid for qid in ids if hashes[qid] < dev_fraction}
    if dev_fraction > 0 and len(dev) < at_least <= len(ids) // 2:
        dev = set(sorted(ids, key=hashes.__getitem__)[:at_least])
    if dev_fraction > 0 and len(ids) >= 2:
        if not dev:
            dev = {min(ids, key=hashes.__getitem__)}
        if len(dev) == len(ids):
            dev.discard(max(ids, key=hashes.__getitem__))
    train = [qid for qid in ids if qid not in dev]
    dev_ids = [qid for qid in ids if qid in dev]
    logger.info(
        "dev split: %d train and %d dev queries (fraction %.3g, seed %d)",
        len(train), len(dev_ids), dev_fraction, seed,
    )  # fmt: skip
    return train, dev_ids


@dataclass(frozen=True)
class DevSplit:
    """Held-out queries with their judgements, and where they came from."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    source: str  # e.g. "qrels/dev.tsv" or "10% of qrels/train.tsv (seed 42)"


def find_dev_split(
    data: str | Path, fraction: float = DEV_FRACTION, seed: int = DEV_SEED
) -> DevSplit | None:
    """The dev queries of a BEIR directory: its ``dev`` split, else the share of ``train``
    that ``dotcat train`` holds out (same fraction and seed); None without either."""
    data = resolve_data_path(data)
    if not data.is_dir() or not any((data / name).is_file() for name in CORPUS_FILE_NAMES):
        return None  # a corpus file, or a folder of files: no BEIR queries beside it
    splits = available_splits(data)
    if "dev" in splits:
        qrels = load_qrels(data, split="dev")
        source = "qrels/dev.tsv"
    elif "train" in splits:
        train = load_qrels(data, split="train")
        _, dev_ids = split_dev(list(train), fraction, seed)
        qrels = {q: train[q] for q in dev_ids}
        source = f"{fraction:.0%} of qrels/train.tsv (seed {seed})"
    else:
        return None
    queries = {q: t for q, t in load_queries(data).items() if q in qrels}
    qrels = {q: r for q, r in qrels.items() if q in queries}
    return DevSplit(queries, qrels, source) if queries else None
