"""What the sharded-search benchmarks share: SciFact as shards, a two-node Ray, comparisons.

``runs/shards/{cut,passages}/parts/s0..s3`` are SciFact indexed as four shards (``dotcat index
--shard I/4``, documents cut at the encoder's window, or split into passages of 128 tokens),
``runs/shards/KIND/merged`` their ``dotcat merge``; ``runs/shards/cut/halves/{a,b}`` two
shards made of two each (``dotcat merge``). Built once, with the default model, then reused.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import common

SHARDS = common.ROOT / "runs" / "shards"
KINDS = {"cut": "--no-passages", "passages": "--passages"}


def collection(kind: str, data: Path = common.SCIFACT, shards: int = 4) -> dict[str, Path]:
    """SciFact (``data``) as ``shards`` shards of ``kind`` and their merge, built if missing."""
    root = SHARDS / kind
    parts = [root / "parts" / f"s{i}" for i in range(shards)]
    for i, part in enumerate(parts):
        if not (part / "manifest.json").is_file():
            common.dotcat("index", data, part, "--shard", f"{i}/{shards}", KINDS[kind])
    merged = root / "merged"
    if not (merged / "manifest.json").is_file():
        common.dotcat("merge", *parts, merged)
    return {"parts": root / "parts", "merged": merged, "shards": parts}


def halves(kind: str = "cut") -> list[Path]:
    """Two shards of SciFact, each the merge of two of the four."""
    built = collection(kind)
    out = []
    for name, pair in (("a", built["shards"][:2]), ("b", built["shards"][2:])):
        target = SHARDS / kind / "halves" / name
        if not (target / "manifest.json").is_file():
            common.dotcat("merge", *pair, target)
        out.append(target)
    return out


@contextlib.contextmanager
def two_nodes(cpus: int = 4) -> Iterator[str]:
    """A Ray cluster of two nodes on this machine (``ray.cluster_utils.Cluster``), each with
    ``cpus`` logical CPUs; yields its address. Its workers see this checkout's ``src/``."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": cpus, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=cpus)
    try:
        yield cluster.address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def agreement(
    a: Mapping[str, Sequence[tuple[str, float]]],
    b: Mapping[str, Sequence[tuple[str, float]]],
    atol: float = 1e-5,
) -> dict:
    """How two runs agree, query by query: ``same`` (the same ranking, ties within ``atol``
    in either order, scores within ``atol`` position by position; as tests/rankings.py
    judges), ``exact`` (the same ids in the same order), the largest score difference."""
    same = exact = 0
    largest = 0.0
    for qid in a:
        x, y = list(a[qid]), list(b.get(qid, []))
        exact += [d for d, _ in x] == [d for d, _ in y]
        diffs = [abs(s - t) for (_, s), (_, t) in zip(x, y, strict=False)]
        largest = max([largest, *diffs])
        same += len(x) == len(y) and all(d <= atol for d in diffs) and _clear_agree(x, y, atol)
    return {"queries": len(a), "same": same, "exact": exact, "max_diff": largest}


def _clear_agree(x, y, atol: float) -> bool:
    """Every document ranked clear of the cut (above the last score by more than ``atol``)
    is in both lists with the same score."""
    if not x:
        return True
    cut = max(x[-1][1], y[-1][1]) + atol
    for this, other in ((x, y), (y, x)):
        found = dict(other)
        for doc, score in this:
            if score > cut and (doc not in found or abs(found[doc] - score) > atol):
                return False
    return True


def uptime() -> str:
    """``uptime``'s line: the machine's load while the figures were taken."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
