"""Where one int8 text's time goes in ONNX Runtime, per operator and per node, fusion on.

    python eval/studies/avx2_int8/skipln_profile.py MODEL.onnx [TOKENS]

One text of ``TOKENS`` random token ids (default 256) a call, one thread, as dotcat's runner
but with ONNX Runtime's default fusions (SkipLayerNormalization on); 5 warm-up calls, then 40
profiled (``SessionOptions.enable_profiling``). Prints ms a call, each operator type's share of
the kernel time, and the mean us of each SkipLayerNormalization, LayerNormalization, Add and
MatMul node and each int8 linear layer (skipln.md holds a run).
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort


def main() -> None:
    path, tokens = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 256
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_profiling = True
    session = ort.InferenceSession(path, options, ["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    ids = np.random.default_rng(0).integers(1000, 30000, (1, tokens))
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    feeds = {k: v.astype(np.int64) for k, v in feeds.items() if k in names}
    for _ in range(5):
        session.run(None, feeds)
    start = time.perf_counter()
    for _ in range(40):
        session.run(None, feeds)
    print(f"{path}: {(time.perf_counter() - start) / 40 * 1000:.1f} ms a call")
    profile = Path(session.end_profiling())
    events = [e for e in json.loads(profile.read_text()) if e.get("cat") == "Node"]
    profile.unlink()
    kernels = [e for e in events if e["name"].endswith("_kernel_time")]
    by_op = collections.Counter()
    by_node = collections.defaultdict(list)
    for e in kernels:
        by_op[e["args"]["op_name"]] += e["dur"]
        by_node[(e["args"]["op_name"], e["name"][: -len("_kernel_time")])].append(e["dur"])
    total = sum(by_op.values())
    print("\n| operator | share of kernel time |\n| --- | ---: |")
    for op, dur in by_op.most_common(12):
        print(f"| {op} | {100 * dur / total:.1f}% |")
    shown = {
        "SkipLayerNormalization",
        "LayerNormalization",
        "Add",
        "MatMul",
        "FusedMatMul",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
    }
    print("\n| node | mean us |\n| --- | ---: |")
    for (op, node), durs in sorted(by_node.items()):
        if op in shown:
            print(f"| {op} `{node}` | {np.mean(durs):.0f} |")


if __name__ == "__main__":
    main()
