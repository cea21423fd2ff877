"""Interpolate two BERT_DOTs' weights: ``(1 - lam) * start + lam * tuned`` (WiSE-FT).

    python eval/studies/distill_recall/weight_average.py runs/dot runs/distill runs/soup-0.5 \\
        --lam 0.5

Wortsman et al., "Robust fine-tuning of zero-shot models" (CVPR 2022): averaging a fine-tuned
model's weights with those it started from can keep the start's robustness with most of the
tuning's gain. Here it tests whether a distilled student (``train distill``) averaged with its
contrastive start keeps the start's recall; the output is a sentence-transformers directory
(the tuned model's files with the mixed ``model.safetensors``) that ``dotcat index`` and
``eval/benchmarks/bench_distill.py --split dev`` take like any other BERT_DOT.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

#: Files of a training run that are not part of the model.
RUN_FILES = ("checkpoints", "model.safetensors", "negatives.jsonl.gz")


def average(start: Path, tuned: Path, out: Path, lam: float) -> None:
    """Write ``out``: ``tuned``'s directory with its weights mixed with ``start``'s."""
    from safetensors.torch import load_file, save_file

    a, b = load_file(start / "model.safetensors"), load_file(tuned / "model.safetensors")
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in b):
        raise SystemExit(f"{start} and {tuned} are not the same architecture")
    mixed = {
        k: ((1 - lam) * a[k].float() + lam * v.float()).to(v.dtype) if v.is_floating_point() else v
        for k, v in b.items()
    }
    if out.exists():
        raise SystemExit(f"{out} exists: give a new directory (nothing is overwritten)")
    out.mkdir(parents=True)
    for item in tuned.iterdir():
        if item.name in RUN_FILES or item.name.startswith("teacher"):
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, out / item.name)
    save_file(mixed, out / "model.safetensors", metadata={"format": "pt"})


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("start", type=Path, help="the model training started from")
    parser.add_argument("tuned", type=Path, help="the trained model")
    parser.add_argument("out", type=Path)
    parser.add_argument("--lam", type=float, required=True, help="the tuned model's share")
    args = parser.parse_args()
    if not 0 <= args.lam <= 1:
        parser.error("--lam must be in [0, 1]")
    average(args.start, args.tuned, args.out, args.lam)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
