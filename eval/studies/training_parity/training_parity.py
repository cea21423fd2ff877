"""Do two dotcat trees train the same models? A check for refactors of the training code.

    python eval/studies/training_parity/training_parity.py --old OLD_TREE --new . [--output FILE]

``OLD_TREE`` is a checkout of the code before the change (e.g. ``git worktree add /tmp/old
HEAD``). Each tree trains, in its own process (``PYTHONPATH=TREE/src``), on the tests' toy BEIR
data (``make_training_beir``) from the same tiny random BERT with the real tokenizer, in fp32 on
the CPU with one thread:

- ``dot``: ``train dot`` (InfoNCE, BM25 negatives);
- ``cat``: ``train cat`` (LCE over BM25 pools, dev-chosen interpolation weight);
- ``cat-pretrain``: ``train cat`` with its label-free pre-training step first
  (``make_titled_beir``);
- ``distill``: ``train distill`` taught by the ``cat`` model just trained (its recorded
  interpolation weight, dense negatives of the student);
- ``distill-bm25``: ``train distill --teacher bm25`` (the lexical teacher);
- ``adapt``: ``dotcat adapt`` on the tests' 90-document corpus (``write_adapt_corpus``:
  pseudo-queries, BM25 + dense negatives, contrastive training), capped by ``max_queries`` so
  the time budget plays no part.

The script compares a sha256 of the trained weights, the loss curves, the dev history and the
chosen interpolation weight. Identical digests mean the refactor changed no arithmetic and no
order of random draws. The child tries each tree's entry points by their current names first
and falls back to the names before the recipes owned their parts (``train_bi_encoder``,
``train_cross_encoder``, ``train_distilled``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
from common import ROOT, describe  # noqa: E402

SCRIPT = "eval/studies/training_parity/training_parity.py"
RUNS = ("dot", "cat", "cat-pretrain", "distill", "distill-bm25", "adapt")

CHILD = r"""
import hashlib, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])  # the tests package of this checkout (fixture helpers)
import torch
from safetensors.torch import load_file
from tests.conftest import save_tiny_bert
from tests.training.toy import make_titled_beir, make_training_beir, write_adapt_corpus
from dotcat.training.adapt import AdaptConfig, adapt

try:  # one entry point, one config module
    from dotcat.training.config import CatConfig, DistillConfig, DotConfig
    from dotcat.training.run import train
    train_dot = train_cat = train_distill = train
except ImportError:  # the tree before: one entry point per recipe
    from dotcat.training import DotTrainConfig as DotConfig, train_bi_encoder as train_dot
    from dotcat.training.cat_trainer import CatTrainConfig as CatConfig
    from dotcat.training.cat_trainer import train_cross_encoder as train_cat
    from dotcat.training.recipes.distill import DistillConfig, train_distilled as train_distill

torch.set_num_threads(1)
work = Path(sys.argv[1])
data = make_training_beir(work / "beir")
bert = save_tiny_bert(work / "bert")
common = dict(data=data, base=str(bert), epochs=2, batch_size=4, lr=1e-3, seed=7, bf16="off",
              device="cpu", show_progress=False)
dot = dict(pooling="mean", similarity="cos", window=(1, 10), n_negatives=1, max_length=32,
           query_max_length=16, dev_fraction=0.2)
cat = dict(first_stages=("bm25",), depth=10, n_negatives=3, pairs_per_forward=8, max_length=48,
           dev_fraction=0.25)
out = {}
out["dot"] = train_dot(DotConfig(out_dir=work / "dot", **dot, **common))
out["cat"] = train_cat(CatConfig(out_dir=work / "cat", **cat, **common))
pre = {**common, "data": make_titled_beir(work / "titled"), "epochs": 1}
out["cat-pretrain"] = train_cat(CatConfig(out_dir=work / "cat-pretrain", **cat, loss="bce",
                                          pretrain_queries=12, **pre))
student = dict(dot, window=(0, 10), n_negatives=2, cache_chunk_size=3, teacher_precision="fp32")
out["distill"] = train_distill(DistillConfig(out_dir=work / "distill", teacher=str(out["cat"]),
                                             **student, **common))
out["distill-bm25"] = train_distill(DistillConfig(out_dir=work / "distill-bm25", teacher="bm25",
                                                  **student, **common))
corpus = write_adapt_corpus(work / "adapt.jsonl")
out["adapt"] = adapt(AdaptConfig(corpus=corpus, out_dir=work / "adapt", model=str(bert),
                                 budget_minutes=30, max_queries=64, batch_size=8,
                                 cache_chunk=None, max_length=48, query_max_length=16, lr=1e-3,
                                 bf16="off", device="cpu", show_progress=False))


def summary(out):
    weights = load_file(str(out / "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(weights[name].float().numpy().tobytes())
    record = json.loads((out / "dotcat_training.json").read_text())
    return {"weights_sha256": digest.hexdigest(), "loss_curve": record["loss_curve"],
            "dev": [e["dev_nDCG@10"] for e in record["epochs"]],
            "alpha": record.get("interpolation", {}).get("alpha")}

print(json.dumps({name: summary(Path(path)) for name, path in out.items()}))
"""


def train_with(tree: Path) -> dict:
    with tempfile.TemporaryDirectory() as work:
        env = {
            **os.environ,
            "PYTHONPATH": str(tree / "src"),
            "DOTCAT_CACHE": str(Path(work) / "cache"),
            "HF_HUB_OFFLINE": "1",
        }
        out = subprocess.run(
            [sys.executable, "-c", CHILD, work, str(ROOT)],
            env=env,
            capture_output=True,
            text=True,
            cwd=work,
        )
    if out.returncode:
        raise SystemExit(f"{tree}: training failed\n{out.stderr[-4000:]}")
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
    here = Path(__file__).resolve().parent
    parser.add_argument("--output", type=Path, default=here / "training_parity.md")
    args = parser.parse_args()
    old, new = train_with(args.old.resolve()), train_with(args.new.resolve())
    rows = []
    for kind in RUNS:
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
        f"Command: `python {SCRIPT} {' '.join(sys.argv[1:])}`",
        f"Machine: {describe()}; fp32 (bf16 off), CPU, one thread.",
        f"Old tree: {commit(args.old)}; new tree: {commit(args.new)}.",
        "",
        "| run | old weights sha256 | new weights sha256 | loss curve | dev nDCG@10 | alpha |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
    ]
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
