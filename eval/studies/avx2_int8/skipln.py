"""Does turning off ONNX Runtime's SkipLayerNormalization fusion change dotcat's int8 outputs?

    python eval/studies/avx2_int8/skipln.py [--docs 300] [--cat runs/qkv/cat]

dotcat's :class:`~dotcat.models.onnx_backend.OnnxRunner` leaves the fusion off
(``DISABLED_OPTIMIZERS``): ONNX Runtime's CPU ``SkipLayerNormalization`` kernel is a scalar loop
(a serial float sum, a division per element), several times slower than the ``Add`` and
``LayerNormalization`` it replaces. Unfused, the same sums are added in another order, so
float rounding differs and, after dynamic int8 rounds the next layer's input, so can a few
int8 levels. Measured here: the default model's int8 vectors of the first ``--docs`` SciFact
documents (AVX2 export, 7-bit: the int32 sums an AVX2 CPU computes) with the fusion on and
off, each against PyTorch fp32 (cosine), and a cross-encoder's logits on 20 SciFact queries'
20 documents (``--cat``: its int8 AVX2 export, SmoothQuant; discordant pairs against fp32).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rerank_avx2_layers"))
from layers import discordant  # noqa: E402

from bench_precision_pipeline import PAIR_TOKENS, skipln_runner, speed_texts  # noqa: E402


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two matrices."""
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def timed(runs: dict, rounds: int = 5) -> dict[str, float]:
    """Seconds per call of each of ``runs``, the rounds interleaved (the order alternating)."""
    import time

    total = dict.fromkeys(runs, 0.0)
    for r in range(rounds):
        for label in list(runs)[:: 1 if r % 2 else -1]:
            start = time.perf_counter()
            runs[label]()
            total[label] += time.perf_counter() - start
    return {label: t / rounds for label, t in total.items()}


def main() -> None:
    from dotcat.models import EncoderConfig, onnx_backend
    from dotcat.models.bi_encoder import BiEncoder
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--cat", type=Path, default=Path("runs/qkv/cat"))
    args = parser.parse_args()
    onnx_backend.int8_variant = lambda flags=None: "avx2"  # the AVX2 export on any CPU
    texts, queries = speed_texts(args.docs)
    fp32 = BiEncoder.load(EncoderConfig(precision="fp32")).encode_documents(texts)
    encoder = BiEncoder.load(EncoderConfig(precision="int8", backend="onnxruntime"))
    off = encoder.encode_documents(texts)
    runners = {"fusion off (dotcat now)": encoder.onnx, "fusion on (before)": None}
    runners["fusion on (before)"] = encoder.onnx = skipln_runner(encoder.onnx.path)
    on = encoder.encode_documents(texts)
    print(f"# int8 with and without SkipLayerNormalization fusion ({args.docs} SciFact docs)\n")
    print("| int8 documents | mean cos with fp32 | lowest |\n| --- | ---: | ---: |")
    for label, got in (("fusion on (before)", on), ("fusion off (dotcat now)", off)):
        c = cosines(got, fp32)
        print(f"| {label} | {c.mean():.5f} | {c.min():.5f} |")
    print(f"\nfusion on against off: mean cos {cosines(on, off).mean():.5f}\n")
    config = dict(model=str(args.cat), max_length=PAIR_TOKENS)
    ref = CrossEncoder.load(CrossEncoderConfig(**config, precision="fp32"))
    cat = CrossEncoder.load(CrossEncoderConfig(**config, precision="int8", backend="onnxruntime"))
    groups = [(queries[i], texts[i * 20 : (i + 1) * 20]) for i in range(len(texts) // 20)]
    want = [np.asarray(ref.score_query(*g)) for g in groups]
    print("| int8 re-ranker | discordant pairs with fp32 | largest logit change |")
    print("| --- | ---: | ---: |")
    pairs = {
        "fusion off (dotcat now)": cat.onnx,
        "fusion on (before)": skipln_runner(cat.onnx.path),
    }
    for label, runner in pairs.items():
        cat.onnx = runner
        got = [np.asarray(cat.score_query(*g)) for g in groups]
        share = np.mean([discordant(a, b) for a, b in zip(got, want, strict=True)])
        largest = max(float(np.abs(a - b).max()) for a, b in zip(got, want, strict=True))
        print(f"| {label} | {share:.4f} | {largest:.4f} |")
    speed(encoder, runners, texts, cat, pairs, groups)


def speed(encoder, runners: dict, texts: list[str], cat, pairs: dict, groups: list) -> None:
    """Docs/s and pairs/s of the AVX2 exports, fusion on and off (this CPU's kernels)."""

    def encode(label: str):
        return lambda: [setattr(encoder, "onnx", runners[label]), encoder.encode_documents(texts)]

    def rerank(label: str):
        return lambda: [setattr(cat, "onnx", pairs[label])] + [cat.score_query(*g) for g in groups]

    docs = timed({label: encode(label) for label in runners})
    scored = timed({label: rerank(label) for label in pairs})
    n = sum(len(d) for _, d in groups)
    print("\n| AVX2 export | docs/s | pairs/s |\n| --- | ---: | ---: |")
    for label in runners:
        print(f"| {label} | {len(texts) / docs[label]:.1f} | {n / scored[label]:.1f} |")


if __name__ == "__main__":
    main()
