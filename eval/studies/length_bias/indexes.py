"""The study's indexes: each collection built by today's rule and by the rule that splits more.

    python eval/studies/length_bias/indexes.py [--collections ...] [--variants ...]

Each index is built as ``dotcat index --split-over N`` builds it (:func:`dotcat.build_and_tune`:
BM25 beside it, the hybrid fusion chosen on the dev queries) under ``--work`` (default
``runs/length_bias``), once: a second run reuses it. Variants (the collection-level choice of
:meth:`dotcat.index.passages.Splitter.splits` unchanged: pylib is split whole either way):

- ``x16``: documents longer than 16 windows (4,096 tokens) split, each on its own (the rule
  before issue 68);
- ``x2``: documents longer than 2 windows (512 tokens) split.

Where the two rules split the same documents (pylib: every one) only ``x16`` is built.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common
from dotcat.options import PRECISIONS

FACTORS = {"x16": 16, "x2": 2}
#: The collections, and the mixed folder of ``mixed_folder.py``.
DATA = {**common.COLLECTIONS, "mixed": common.ROOT / "runs/length_bias/data/mixed"}
#: Collections split whole by the collection-level rule: one index serves both variants.
SPLIT_WHOLE = ("pylib",)


def index_dir(work: Path, name: str, variant: str) -> Path:
    """Where a variant's index of a collection lies (pylib's ``x2`` is its ``x16``)."""
    return work / name / ("x16" if name in SPLIT_WHOLE else variant)


def build(data: str | Path, out: Path, factor: int, precision: str = "auto") -> float:
    """Build (or reuse) one index with documents longer than ``factor`` windows split, the
    encoder at ``precision``; its build seconds."""
    import dotcat
    from dotcat.index.config import IndexConfig
    from dotcat.index.passages import PassageConfig
    from dotcat.models.config import EncoderConfig

    seconds = out / "seconds.txt"
    if (out / "manifest.json").is_file() and seconds.is_file():
        return float(seconds.read_text())
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    config = IndexConfig(passages=PassageConfig(split_over=factor))  # dotcat index --split-over
    dotcat.build_and_tune(data, out, EncoderConfig(model="default", precision=precision),
                          config=config, overwrite=True, show_progress=False)  # fmt: skip
    seconds.write_text(f"{time.perf_counter() - start:.1f}\n")
    return float(seconds.read_text())


def main() -> None:
    p = common.parser(__doc__, work="runs/length_bias")
    p.add_argument("--collections", nargs="+", default=list(DATA), choices=list(DATA))
    p.add_argument("--variants", nargs="+", default=list(FACTORS), choices=list(FACTORS))
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="the encoder's (the study's indexes: fp32)")  # fmt: skip
    args = p.parse_args()
    common.setup_logging()
    for name in args.collections:
        for variant in args.variants:
            out = index_dir(args.work, name, variant)
            seconds = build(DATA[name], out, FACTORS[variant], args.precision)
            from dotcat.index.manifest import Manifest

            manifest = Manifest.read(out)
            print(name, variant, f"{seconds:.0f} s", manifest.vector_count, "vectors", flush=True)


if __name__ == "__main__":
    main()
