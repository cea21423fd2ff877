"""Compare the TREC runs of two folders: identical bytes, or the same rankings with scores
within a tolerance (documents of equal score may swap places).

    python eval/studies/pipeline_parts/compare_runs.py BEFORE AFTER [--tol 1e-6]

Every ``*.trec`` under BEFORE is compared with the file of the same relative path under AFTER;
the exit status is 1 when any differs or is missing.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path


def read(path: Path) -> dict[str, list[tuple[str, float]]]:
    run: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        qid, _, doc, _, score, *_ = line.split()
        run[qid].append((doc, float(score)))
    return run


def difference(a: dict, b: dict, tol: float) -> str | None:
    """Why two runs differ beyond ``tol`` (None: the same rankings)."""
    if a.keys() != b.keys():
        return f"queries differ ({len(a)} against {len(b)})"
    for qid in a:
        x, y = a[qid], b[qid]
        if len(x) != len(y):
            return f"{qid}: {len(x)} against {len(y)} results"
        for (_, s1), (_, s2) in zip(x, y, strict=True):
            if abs(s1 - s2) > tol:
                return f"{qid}: score {s1} against {s2}"
        if Counter(d for d, _ in x) != Counter(d for d, _ in y):
            return f"{qid}: other documents"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tol", type=float, default=1e-6)
    args = parser.parse_args()
    runs = sorted(args.before.rglob("*.trec"))
    different = 0
    for path in runs:
        name = path.relative_to(args.before)
        other = args.after / name
        if not other.exists():
            print("MISSING", name)
            different += 1
        elif path.read_bytes() == other.read_bytes():
            print("identical", name)
        elif why := difference(read(path), read(other), args.tol):
            print("DIFFERENT", name, why)
            different += 1
        else:
            print(f"same rankings, scores within {args.tol}:", name)
    print(f"{len(runs)} runs, {different} different")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
