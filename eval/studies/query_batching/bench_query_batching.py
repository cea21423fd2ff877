"""What micro-batching saves per query on this CPU, for each way dotcat can run the query encoder.

    python eval/studies/query_batching/bench_query_batching.py --data data/scifact

The server batches queries that arrive together, which raises 16 clients' throughput above one
client's only as far as a batch of 16 queries costs less than 16 single ones. This measures
exactly that, in one process, with the paths interleaved over
``--rounds``: SciFact test queries that fit ``--width`` tokens, padded to that width (as the
server pads them, so each query's vector is independent of its batch), encoded one per call and
16 per call, one intra-op thread, ms per query; tokenisation and pooling excluded.

Paths (all-MiniLM-L6-v2):

* ``ort-fp32``: ONNX Runtime, the fp32 export;
* ``ort-int8`` (**baseline**: dotcat's int8 query path, one query per call): ONNX Runtime,
  ``quantize_dynamic`` (per-channel int8 weights, one activation range per tensor);
* ``ort-int8-token``: the same int8 graph with each ``DynamicQuantizeLinear`` replaced by a
  symmetric per-token quantiser (``ReduceMax(|x|)`` over features, zero point 128), so a row's
  output no longer depends on its batch; run with basic graph optimisations;
* ``ort-int8-token-ext``: the same graph with ONNX Runtime's extended optimisations, shown for
  its cosines: their fusion into ``MatMulIntegerToFloat`` seems to take one activation scale
  per tensor, and the vectors come out wrong;
* ``ov-int8``: OpenVINO, int8 weights, activations quantised per token group
  (:mod:`dotcat.models.openvino_backend`, the re-ranker's int8 path), needs the ``openvino``
  extra;
* ``torch-fp32``, ``torch-bf16``: PyTorch as dotcat's ``BiEncoder`` runs it at ``fp32`` and
  ``bf16`` (autocast, linear weights stored in bf16); bf16 is emulated (slow) on CPUs without
  native bf16, and runs on AMX tiles where the CPU has them.

Also printed per path: the cosine of each query vector with ort-fp32's (mean, min), and the
largest difference between a query's vector alone and in a batch of 16.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

PATHS = (
    "ort-fp32",
    "ort-int8",
    "ort-int8-token",
    "ort-int8-token-ext",
    "ov-int8",
    "torch-fp32",
    "torch-bf16",
)
BASELINE = "ort-int8"
BATCH = 16


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = common.parser(__doc__, output=here / "query_batching.md", data=common.REQUIRED)
    parser.add_argument("--width", type=int, default=32, help="padded tokens per query")
    parser.add_argument("--queries", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=2.0, help="per path, batch size, round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS))
    args = parser.parse_args()

    model = _model_files()
    texts = _queries(args.data, model["tokenizer"], args.width, args.queries)
    feeds = _feeds(model["tokenizer"], texts, args.width)
    with tempfile.TemporaryDirectory() as tmp:
        model["tmp"] = Path(tmp)
        runners = {name: _runner(name, model) for name in _paths(args)}
        vectors = {name: _vectors(run, feeds) for name, run in runners.items()}
        timings: dict[str, dict[int, list[float]]] = {n: {1: [], BATCH: []} for n in runners}
        for _ in range(args.rounds):
            for name, run in runners.items():
                for size in (1, BATCH):
                    timings[name][size].append(_ms_per_query(run, feeds, size, args.seconds))
    rows = _rows(vectors, timings)
    lines = _report(args, rows, len(texts))
    print("\n".join(lines))
    common.write(args.output, lines)


def _paths(args: argparse.Namespace) -> list[str]:
    names = [p for p in args.paths.split(",") if p]
    unknown = set(names) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown paths {sorted(unknown)} ({', '.join(PATHS)})")
    if "ort-fp32" not in names:
        names.insert(0, "ort-fp32")  # the reference of the cosines
    return names


def _model_files() -> dict:
    """all-MiniLM-L6-v2's tokenizer, weights directory, fingerprint and ONNX exports."""
    from transformers import AutoTokenizer

    from dotcat.models import onnx_backend
    from dotcat.models.resolve import resolve_model, weights_fingerprint
    from dotcat.models.st_config import read_st_settings

    path = resolve_model("default")
    weights = read_st_settings(path).transformer_dir
    fingerprint = weights_fingerprint(path)
    return {
        "tokenizer": AutoTokenizer.from_pretrained(weights),
        "weights": weights,
        "fingerprint": fingerprint,
        "fp32": onnx_backend.find_or_export(weights, "encoder", "fp32", fingerprint),
        "int8": onnx_backend.find_or_export(weights, "encoder", "int8", fingerprint),
    }


def _queries(data: Path, tokenizer, width: int, n: int) -> list[str]:
    """The first ``n`` test queries (by id order of the file) of at most ``width`` tokens."""
    with gzip.open(data / "queries.jsonl.gz", "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    fits = [t for t in texts if len(tokenizer(t)["input_ids"]) <= width]
    if len(fits) < BATCH:
        raise SystemExit(f"only {len(fits)} queries fit {width} tokens")
    return fits[: n - n % BATCH]


def _feeds(tokenizer, texts: list[str], width: int) -> dict[str, np.ndarray]:
    encoded = tokenizer(texts, padding="max_length", max_length=width, return_tensors="np")
    names = ("input_ids", "attention_mask", "token_type_ids")
    return {k: encoded[k].astype(np.int64) for k in names}


def _runner(name: str, model: dict):
    if name.startswith("torch-"):
        return _torch(model["weights"], bf16=name == "torch-bf16")
    if name == "ov-int8":
        from dotcat.models import openvino_backend

        return openvino_backend.int8_runner(model["weights"], "encoder", model["fingerprint"], 1)
    if name.startswith("ort-int8-token"):
        token = model["tmp"] / "model_qint8_per_token.onnx"
        if not token.exists():
            per_token_quantiser(model["int8"], token)
        return _ort(token, basic=name == "ort-int8-token")
    return _ort(model["fp32"] if name == "ort-fp32" else model["int8"])


def _ort(path: Path, basic: bool = False):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if basic:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)[0]


def _torch(weights: Path, bf16: bool):
    """PyTorch on one thread, as ``BiEncoder`` runs the model at fp32 or bf16."""
    import torch
    from transformers import AutoModel

    from dotcat.models.runtime import autocast, store_linear_weights

    torch.set_num_threads(1)
    net = AutoModel.from_pretrained(weights).eval()
    dtype = torch.bfloat16 if bf16 else None
    store_linear_weights(net, dtype)
    cpu = torch.device("cpu")

    def run(feeds: dict[str, np.ndarray]) -> np.ndarray:
        with torch.inference_mode(), autocast(cpu, dtype):
            hidden = net(**{k: torch.from_numpy(v) for k, v in feeds.items()})[0]
        return hidden.float().numpy()

    return run


def per_token_quantiser(src: Path, out: Path) -> None:
    """Rewrite ``quantize_dynamic``'s graph: each ``DynamicQuantizeLinear`` (one uint8 range
    per tensor) becomes ``s = max(|x|) / 127`` over each token's features, ``q = round(x / s) +
    128`` as uint8 with zero point 128 (symmetric). The ``MatMulInteger`` after it is exact in
    int32 and its scale ``Mul`` broadcasts ``s`` (``[batch, tokens, 1]``) against the weights'
    per-channel scales, so nothing else changes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    graph.initializer.extend(
        numpy_helper.from_array(np.array(value, dtype), name)
        for name, value, dtype in (
            ("pt_qmax", 127.0, np.float32),
            ("pt_eps", 1e-8, np.float32),
            ("pt_offset", 128.0, np.float32),
            ("pt_zero_point", 128, np.uint8),
        )
    )
    nodes = []
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        x, (q, scale, zero_point), p = node.input[0], node.output, node.name
        nodes += [
            helper.make_node("Abs", [x], [p + "_abs"]),
            helper.make_node("ReduceMax", [p + "_abs"], [p + "_max"], axes=[-1], keepdims=1),
            helper.make_node("Max", [p + "_max", "pt_eps"], [p + "_max_eps"]),
            helper.make_node("Div", [p + "_max_eps", "pt_qmax"], [scale]),
            helper.make_node("Div", [x, scale], [p + "_scaled"]),
            helper.make_node("Round", [p + "_scaled"], [p + "_rounded"]),
            helper.make_node("Add", [p + "_rounded", "pt_offset"], [p + "_shifted"]),
            helper.make_node("Cast", [p + "_shifted"], [q], to=TensorProto.UINT8),
            helper.make_node("Identity", ["pt_zero_point"], [zero_point]),
        ]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]  # shapes of the replaced outputs changed
    onnx.checker.check_model(model)
    onnx.save(model, str(out))


def _vectors(run, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Mean-pooled, normalised query vectors, one query per call and 16 per call."""

    def embed(rows: slice) -> np.ndarray:
        part = {k: v[rows] for k, v in feeds.items()}
        hidden = np.asarray(run(part), dtype=np.float32)
        mask = part["attention_mask"][..., None]
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    n = len(feeds["input_ids"])
    return {
        "alone": np.concatenate([embed(slice(i, i + 1)) for i in range(n)]),
        "batched": np.concatenate([embed(slice(i, i + BATCH)) for i in range(0, n, BATCH)]),
    }


def _ms_per_query(run, feeds: dict[str, np.ndarray], size: int, seconds: float) -> float:
    n = len(feeds["input_ids"])
    calls = [{k: v[i : i + size] for k, v in feeds.items()} for i in range(0, n, size)]
    run(calls[0])  # warm
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for call in calls:
            run(call)
            done += len(call["input_ids"])
    return 1000 * (time.perf_counter() - start) / done


def _rows(vectors: dict, timings: dict) -> list[dict]:
    reference = vectors["ort-fp32"]["alone"]
    base = float(np.median(timings[BASELINE][1])) if BASELINE in timings else None
    rows = []
    for name, v in vectors.items():
        cosine = (v["alone"] * reference).sum(1)
        single = float(np.median(timings[name][1]))
        batched = float(np.median(timings[name][BATCH]))
        rows.append(
            {
                "path": name,
                "cos_mean": float(cosine.mean()),
                "cos_min": float(cosine.min()),
                "batch_diff": float(np.abs(v["alone"] - v["batched"]).max()),
                "single": single,
                "batched": batched,
                "saving": single / batched,
                "vs_base": base / batched if base else None,
            }
        )
    return rows


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("onnxruntime", "openvino"):
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{package} {version(package)}")
    return ", ".join(found)


def _report(args: argparse.Namespace, rows: list[dict], n: int) -> list[str]:
    lines = [
        *common.header(
            "Query encoding: one query per call against 16 per call",
            f"One intra-op thread per session; {_versions()}.",
        ),
        f"{n} SciFact test queries of at most {args.width} tokens, padded to {args.width}; "
        f"all-MiniLM-L6-v2; ms per query, median of {args.rounds} rounds of "
        f"{args.seconds:g} s (paths interleaved). Baseline: `{BASELINE}` one query per call "
        "(dotcat's int8 query path).",
        "",
        "| path | cos with fp32, mean | min | alone vs batched, max abs diff | ms/query, 1 per "
        "call | ms/query, 16 per call | 16 per call saves | 16 per call vs baseline |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        vs = f"{r['vs_base']:.2f}x" if r["vs_base"] else ""
        lines.append(
            f"| {r['path']} | {r['cos_mean']:.5f} | {r['cos_min']:.5f} | {r['batch_diff']:.1e} "
            f"| {r['single']:.2f} | {r['batched']:.2f} | {r['saving']:.2f}x | {vs} |"
        )
    return lines


if __name__ == "__main__":
    main()
