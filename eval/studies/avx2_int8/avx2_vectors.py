"""int8 on an AVX2-only CPU: which recipe's vectors are what a VNNI CPU computes, and how far
each moves from fp32's, with the kernels an AVX2-only CPU runs (``python-zen3``: qemu as a
Zen 3) against the native VNNI ones.

    python eval/studies/avx2_int8/avx2_vectors.py --save runs/avx2/native.npz
    .venv/bin/python-zen3 eval/studies/avx2_int8/avx2_vectors.py --save runs/avx2/zen3.npz
    python eval/studies/avx2_int8/avx2_vectors.py --compare runs/avx2/native.npz runs/avx2/zen3.npz

Texts: the first ``--docs`` documents of the ``faq`` collection and its first ``--queries``
test queries. Paths: ``bench_precision_pipeline.py``'s (``fp32``; ``ort-rr``: ONNX Runtime,
7-bit weights, dotcat's export for CPUs without VNNI; ``ort-u8s8``: 8-bit u8 x s8, dotcat's
VNNI export, which AVX2's ``vpmaddubsw`` can saturate; ``ort-u8u8``; ``int8-ov``: OpenVINO).
Reported per path: the mean and lowest cosine of its vectors with fp32's (the same CPU), and with
``--compare``, the largest difference between the two CPUs' vectors of the same path.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

PATHS = ("fp32", "ort-rr", "ort-u8s8", "ort-u8u8", "int8-ov")


def texts(n_docs: int, n_queries: int) -> tuple[list[str], list[str]]:
    from dotcat import load_queries
    from dotcat.data import load_corpus

    root = Path("runs/collections/faq")
    corpus = load_corpus(root)
    docs = [f"{t} {x}".strip() for t, x in zip(corpus["title"], corpus["text"], strict=True)]
    return docs[:n_docs], list(load_queries(root, split="test").values())[:n_queries]


def encode(work: Path, n_docs: int, n_queries: int) -> dict[str, np.ndarray]:
    import bench_precision_pipeline as bench

    docs, queries = texts(n_docs, n_queries)
    out = {}
    for path in PATHS:
        side = bench.path_sides(path)[0]
        encoder = bench.load_encoder(side, work)
        out[f"{path} documents"] = encoder.encode_documents(docs)
        out[f"{path} queries"] = encoder.encode_queries(queries)
        print(f"{path}: {encoder.precision} {encoder.backend} "
              f"{getattr(encoder.onnx, 'path', '')}", flush=True)  # fmt: skip
    return out


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def report(runs: dict[str, dict[str, np.ndarray]]) -> None:
    names = list(runs)
    print("| path | side | " + " | ".join(f"cos with fp32 ({n}): mean / min" for n in names)
          + (" | max abs diff between CPUs |" if len(names) == 2 else " |"))  # fmt: skip
    print("| --- | --- |" + " ---: |" * (len(names) + (len(names) == 2)))
    for path in PATHS:
        for side in ("documents", "queries"):
            key = f"{path} {side}"
            cells = []
            for n in names:
                c = cosines(runs[n][key], runs[n][f"fp32 {side}"])
                cells.append(f"{c.mean():.5f} / {c.min():.5f}")
            if len(names) == 2:
                diff = np.abs(runs[names[0]][key] - runs[names[1]][key]).max()
                cells.append(f"{diff:.2e}")
            print(f"| {path} | {side} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--compare", type=Path, nargs="+")
    parser.add_argument("--docs", type=int, default=48)
    parser.add_argument("--queries", type=int, default=48)
    parser.add_argument("--work", type=Path, default=Path("runs/precision_pipeline"))
    args = parser.parse_args()
    if args.compare:
        report({p.stem: dict(np.load(p)) for p in args.compare})
        return
    import torch

    from dotcat.models.runtime import cpu_kind

    print(f"kernels: {torch.backends.cpu.get_cpu_capability()}; CPU kind {cpu_kind()}", flush=True)
    vectors = encode(args.work, args.docs, args.queries)
    args.save.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.save, **vectors)
    report({args.save.stem: vectors})


if __name__ == "__main__":
    main()
