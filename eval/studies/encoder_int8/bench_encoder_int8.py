"""The bi-encoder's int8 runtimes side by side: OpenVINO against ONNX Runtime, fp32 and bf16.

    python eval/studies/encoder_int8/bench_encoder_int8.py --data data/scifact

For each path, all-MiniLM-L6-v2 (zero-shot) as dotcat's ``BiEncoder`` runs it, in one process:
the whole corpus encoded as ``dotcat index`` encodes it (docs/s: indexing throughput), the dev
queries (the 10% of train that ``dotcat train`` holds out) and the test queries encoded, exact
inner-product search, nDCG@10 and R@100 with ir-measures, and their retention against fp32
(the 99.5% bar of ``eval/benchmarks/results/precision.md``). Also: the mean and least cosine
of each path's document vectors with fp32's, and whether a query's vector is the same alone
and in a batch of 16 (the server micro-batches queries). Baseline for speed: ``int8-ort``, ONNX
Runtime's int8 (the encoder's ``auto`` int8 runtime).

Paths: ``fp32``, ``bf16`` (PyTorch; bf16 emulated where the CPU has no native bf16),
``int8-ort`` (ONNX Runtime, one text per call), ``int8-ov`` (OpenVINO, per-token activation
groups, batches in one call).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common
from bench_precision import MEASURES, Data, _figures, _search

PATHS = {
    "fp32": {"precision": "fp32"},
    "bf16": {"precision": "bf16"},
    "int8-ort": {"precision": "int8", "backend": "onnxruntime"},
    "int8-ov": {"precision": "int8", "backend": "openvino"},
}
BASELINE = "int8-ort"


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "encoder_int8.md", data=common.REQUIRED)
    parser.add_argument("--paths", default=",".join(PATHS))
    args = parser.parse_args()
    names = [p for p in args.paths.split(",") if p]
    if "fp32" not in names:
        names.insert(0, "fp32")  # the reference of retention and cosines
    unknown = set(names) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown paths {sorted(unknown)} ({', '.join(PATHS)})")
    data = Data(args.data)
    rows = {name: measure(name, data) for name in names}
    lines = report(args, data, rows)
    print("\n".join(lines))
    common.write(args.output, lines)


def measure(name: str, data: Data) -> dict:
    """Speed, quality and batch independence of one path."""
    from dotcat.evaluation import evaluate
    from dotcat.models.bi_encoder import BiEncoder, EncoderConfig

    encoder = BiEncoder.load(EncoderConfig(model="default", **PATHS[name]))
    encoder.encode_documents(data.texts[:64])  # warm: exports, compiled kernels
    start = time.perf_counter()
    docs = encoder.encode_documents(data.texts, show_progress_bar=True)
    row: dict = {"docs_per_s": len(data.texts) / (time.perf_counter() - start), "docs": docs}
    for split, (queries, qrels) in data.splits.items():
        vectors = encoder.encode_queries(list(queries.values()))
        run = _search(docs, vectors, list(queries), data.doc_ids)
        row[split] = _figures(evaluate(run, qrels, list(MEASURES)))
    texts = list(data.splits["test"][0].values())[:16]
    alone = np.concatenate([encoder.encode_queries([t]) for t in texts])
    row["batch_diff"] = float(np.abs(alone - encoder.encode_queries(texts)).max())
    row["backend"] = encoder.backend
    print(name, {k: v for k, v in row.items() if k != "docs"}, flush=True)
    return row


def report(args: argparse.Namespace, data: Data, rows: dict) -> list[str]:
    ref = rows["fp32"]
    base = rows.get(BASELINE, {}).get("docs_per_s")
    lines = [
        *common.header("The bi-encoder's int8 runtimes: OpenVINO against ONNX Runtime"),
        f"all-MiniLM-L6-v2 zero-shot; {len(data.texts)} documents (max length 256, dotcat's "
        f"batching), dev queries ({data.dev_source}) and test queries; exact search. Paths run one "
        f"after the other (not interleaved). Speed baseline: `{BASELINE}`.",
        "",
        "| path | runtime | docs/s | vs baseline | doc cos with fp32, mean / min | query alone vs "
        "batch of 16, max abs diff | dev nDCG@10 | dev R@100 | test nDCG@10 | test R@100 | "
        "retention nDCG@10 dev / test | retention R@100 dev / test |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in rows.items():
        cos = (r["docs"] * ref["docs"]).sum(1) / (
            np.linalg.norm(r["docs"], axis=1) * np.linalg.norm(ref["docs"], axis=1)
        )
        keep = {
            m: " / ".join(f"{r[s][m] / ref[s][m]:.2%}" for s in ("dev", "test")) for m in MEASURES
        }
        vs = f"{r['docs_per_s'] / base:.2f}x" if base else ""
        lines.append(
            f"| {name} | {r['backend']} | {r['docs_per_s']:.1f} | {vs} | {cos.mean():.5f} / "
            f"{cos.min():.5f} | {r['batch_diff']:.1e} | {r['dev']['nDCG@10']:.4f} | "
            f"{r['dev']['R@100']:.4f} | {r['test']['nDCG@10']:.4f} | {r['test']['R@100']:.4f} | "
            f"{keep['nDCG@10']} | {keep['R@100']} |"
        )
    return lines


if __name__ == "__main__":
    main()
