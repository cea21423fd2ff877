"""OpenVINO int8 re-ranker: one stream of two threads against two streams of one, per hidden size.

    python eval/studies/openvino_streams/openvino_streams.py --data data/scifact

Why ``OpenVinoRunner`` compiles one stream: on an Intel Xeon with AMX, two streams with int8
weights and bf16 precision returned logits unrelated to fp32's for hidden sizes that are not
a multiple of 64. For each hidden size, a random BERT cross-encoder (4 layers, seed 0) is
exported as dotcat exports it (int8 weights, OpenVINO); SciFact pairs (test queries, the
first documents, 256 tokens) are scored by the compiled model under each configuration from
two caller threads at once (as dotcat's two workers call it), and compared with PyTorch fp32:
largest |difference| over the logits' spread, Spearman, over ``--repeats`` fresh compilations
(the worst is reported). Speed: pairs/s of the MiniLM-size model (hidden 384) per
configuration, the configurations interleaved over ``--rounds``; baseline: two streams.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

CONFIGS = {"two streams of one thread": ("2", "2"), "one stream of two threads": ("1", "2")}
BASELINE = "two streams of one thread"
HIDDEN = (32, 100, 312, 384)  # 384: all-MiniLM-L6-v2's; 312: TinyBERT's


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "openvino_streams.md", data=common.SCIFACT)
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(common.ROOT))  # tests.conftest: the tiny BERT builder
    pairs = _pairs(args.data, args.pairs)
    rows, speed = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for hidden in HIDDEN:
            model = _model(Path(tmp) / f"h{hidden}", hidden)
            feeds, fp32 = _reference(model, pairs)
            path = _int8_export(model)
            for name, (streams, threads) in CONFIGS.items():
                worst = max(
                    _agreement(_scores(_compile(path, streams, threads), feeds), fp32)
                    for _ in range(args.repeats)
                )
                rows.append((hidden, name, *worst))
                print(hidden, name, worst, flush=True)
            if hidden == 384:
                speed = _speed(path, feeds, args.rounds)
    lines = _report(args, rows, speed, len(pairs))
    print("\n".join(lines))
    common.write(args.output, lines)


def _pairs(data: Path, n: int) -> list[tuple[str, str]]:
    with gzip.open(data / "queries.jsonl.gz", "rt", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f][:n]
    with gzip.open(data / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = []
        for line in f:
            doc = json.loads(line)
            docs.append(f"{doc['title']} {doc['text']}")
            if len(docs) == n:
                break
    return list(zip(queries, docs, strict=True))


def _model(out: Path, hidden: int) -> Path:
    from tests.conftest import save_tiny_bert

    return save_tiny_bert(
        out,
        "cat",
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=4,
        num_attention_heads=2 if hidden % 12 else 12,
        initializer_range=0.05,
    )


def _reference(model: Path, pairs) -> tuple[dict, np.ndarray]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokens = AutoTokenizer.from_pretrained(model)(
        [q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation=True,
        max_length=256, return_tensors="np",
    )  # fmt: skip
    net = AutoModelForSequenceClassification.from_pretrained(model).eval()
    with torch.inference_mode():
        logits = net(**{k: torch.from_numpy(v) for k, v in tokens.items()}).logits
    return dict(tokens), logits.reshape(-1).numpy()


def _int8_export(model: Path) -> Path:
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    config = CrossEncoderConfig(model=str(model), precision="int8", backend="openvino")
    return CrossEncoder.load(config).onnx.path


def _compile(path: Path, streams: str, threads: str):
    import openvino as ov

    from dotcat.models.runtime import detect_native_bf16

    config = {
        "INFERENCE_PRECISION_HINT": "bf16" if detect_native_bf16() else "f32",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": "128",
        "NUM_STREAMS": streams,
        "INFERENCE_NUM_THREADS": threads,
        "ENABLE_CPU_PINNING": "NO",
    }
    return ov.Core().compile_model(str(path), "CPU", config)


def _scores(compiled, feeds: dict) -> np.ndarray:
    """Both halves of the pairs scored at once from two threads, one request each."""
    names = [p.get_any_name() for p in compiled.inputs]
    half = len(feeds["input_ids"]) // 2
    parts = [slice(0, half), slice(half, None)]

    def run(rows: slice) -> np.ndarray:
        request = compiled.create_infer_request()
        out = request.infer({k: feeds[k][rows] for k in names})[compiled.outputs[0]]
        return np.array(out).reshape(-1)

    with ThreadPoolExecutor(2) as pool:
        return np.concatenate(list(pool.map(run, parts)))


def _agreement(scores: np.ndarray, fp32: np.ndarray) -> tuple[float, float]:
    from scipy.stats import spearmanr

    off = float(np.abs(scores - fp32).max() / np.ptp(fp32))
    return off, float(spearmanr(scores, fp32).statistic)


def _speed(path: Path, feeds: dict, rounds: int) -> dict[str, float]:
    compiled = {name: _compile(path, *cfg) for name, cfg in CONFIGS.items()}
    for c in compiled.values():
        _scores(c, feeds)  # warm
    seconds = dict.fromkeys(compiled, 0.0)
    for _ in range(rounds):
        for name, c in compiled.items():
            start = time.perf_counter()
            _scores(c, feeds)
            seconds[name] += time.perf_counter() - start
    return {name: rounds * len(feeds["input_ids"]) / s for name, s in seconds.items()}


def _report(args, rows, speed: dict, n: int) -> list[str]:
    lines = [
        *common.header("OpenVINO int8 re-ranker: one stream against two, per hidden size"),
        f"{n} SciFact pairs, random 4-layer BERT cross-encoders (seed 0), int8 weights as dotcat "
        "exports them, scored from two threads at once; |diff| is the largest difference from "
        f"PyTorch fp32 over the fp32 logits' spread, worst of {args.repeats} compilations.",
        "",
        "| hidden size | configuration | max abs diff / spread | Spearman with fp32 |",
        "| ---: | --- | ---: | ---: |",
    ]
    lines += [f"| {h} | {name} | {off:.3f} | {rho:.4f} |" for h, name, off, rho in rows]
    if speed:
        lines += ["", "Speed, hidden 384 (MiniLM-size), pairs/s, baseline two streams:", ""]
        lines += ["| configuration | pairs/s | vs baseline |", "| --- | ---: | ---: |"]
        lines += [
            f"| {name} | {rate:.1f} | {rate / speed[BASELINE]:.2f}x |"
            for name, rate in speed.items()
        ]
    return lines


if __name__ == "__main__":
    main()
