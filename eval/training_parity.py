"""Do two dotcat trees train the same models? A check for refactors of the training code.

    python eval/training_parity.py --old OLD_TREE --new . [--output eval/results/training_parity.md]

``OLD_TREE`` is a checkout of the code before the change (e.g. ``git worktree add /tmp/old
HEAD``). Each tree trains, in its own process (``PYTHONPATH=TREE/src``), ``train dot`` and
``train cat`` on the tests' toy BEIR data (``tests.training.test_trainer.make_training_beir``)
from the same tiny random BERT with the real tokenizer, in fp32 on the CPU; the script
compares a sha256 of the trained weights, the loss curves, the dev history and the chosen
interpolation weight. Identical digests mean the refactor changed no arithmetic and no order
of random draws.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import describe

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import hashlib, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])  # the tests package of this checkout (fixture helpers)
from safetensors.torch import load_file
from tests.conftest import save_tiny_bert
from tests.training.test_trainer import make_training_beir
from dotcat.training import DotTrainConfig, train_bi_encoder
from dotcat.training.cat_trainer import CatTrainConfig, train_cross_encoder

work = Path(sys.argv[1])
data = make_training_beir(work / "beir")
bert = save_tiny_bert(work / "bert")
common = dict(data=data, base=str(bert), epochs=2, batch_size=4, lr=1e-3, seed=7, bf16="off",
              device="cpu", show_progress=False)
dot = train_bi_encoder(DotTrainConfig(out_dir=work / "dot", pooling="mean", similarity="cos",
    window=(1, 10), n_negatives=1, max_length=32, query_max_length=16, dev_fraction=0.2,
    **common))
cat = train_cross_encoder(CatTrainConfig(out_dir=work / "cat", first_stages=("bm25",),
    depth=10, n_negatives=3, pairs_per_forward=8, max_length=48, dev_fraction=0.25, **common))

def summary(out):
    weights = load_file(str(out / "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(weights[name].float().numpy().tobytes())
    record = json.loads((out / "dotcat_training.json").read_text())
    return {"weights_sha256": digest.hexdigest(), "loss_curve": record["loss_curve"],
            "dev": [e["dev_nDCG@10"] for e in record["epochs"]],
            "alpha": record.get("interpolation", {}).get("alpha")}

print(json.dumps({"dot": summary(dot), "cat": summary(cat)}))
"""


def train_with(tree: Path) -> dict:
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        out = subprocess.run(
            [sys.executable, "-c", CHILD, work, str(ROOT)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            cwd=work,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def commit(tree: Path) -> str:
    """The tree's git commit (with ``+changes`` when its working tree differs)."""
    head = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--", "src"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head or 'unknown'}{' + uncommitted changes' if dirty else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, default=ROOT)
    parser.add_argument("--output", type=Path, default=ROOT / "eval/results/training_parity.md")
    args = parser.parse_args()
    old, new = train_with(args.old.resolve()), train_with(args.new.resolve())
    rows = []
    for kind in ("dot", "cat"):
        a, b = old[kind], new[kind]
        same = {key: a[key] == b[key] for key in a}
        rows.append(
            f"| {kind} | {a['weights_sha256'][:16]} | {b['weights_sha256'][:16]} | "
            + " | ".join("same" if same[k] else "DIFFERENT" for k in ("loss_curve", "dev", "alpha"))
            + " |"
        )
    lines = [
        "# Training parity: the same models from two trees of the training code",
        "",
        f"Command: `python eval/training_parity.py {' '.join(sys.argv[1:])}`",
        f"Machine: {describe()}; fp32 (bf16 off), CPU.",
        f"Old tree: {commit(args.old)}; new tree: {commit(args.new)}.",
        "",
        "| recipe | old weights sha256 | new weights sha256 | loss curve | dev nDCG@10 | alpha |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
    ]
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
