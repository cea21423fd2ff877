"""One exported model's time a call with ONNX Runtime's SkipLayerNormalization fusion on and off.

    python eval/studies/avx2_int8/skipln_calls.py MODEL.onnx [TOKENS]

One text of ``TOKENS`` random token ids (default 256) a call, one thread, spinning off (as
dotcat's ``OnnxRunner``); 6 rounds of 15 calls, the order alternating. Prints the largest
output difference between the two sessions and the mean ms a call (skipln.md holds runs).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import onnxruntime as ort


def session(path: str, disabled: list[str]) -> ort.InferenceSession:
    """A one-thread CPU session with ``disabled`` graph optimisers."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = ["CPUExecutionProvider"]
    return ort.InferenceSession(path, options, providers, disabled_optimizers=disabled)


def main() -> None:
    path, tokens = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 256
    sessions = {"on": session(path, []), "off": session(path, ["SkipLayerNormFusion"])}
    names = {i.name for i in sessions["on"].get_inputs()}
    ids = np.random.default_rng(0).integers(1000, 30000, (1, tokens))
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    feeds = {k: v.astype(np.int64) for k, v in feeds.items() if k in names}
    outs = {k: s.run(None, feeds)[0] for k, s in sessions.items()}
    print(f"largest |on - off|: {float(np.abs(outs['on'] - outs['off']).max()):.6f}")
    total = dict.fromkeys(sessions, 0.0)
    for r in range(6):
        for label in list(sessions)[:: 1 if r % 2 else -1]:
            start = time.perf_counter()
            for _ in range(15):
                sessions[label].run(None, feeds)
            total[label] += time.perf_counter() - start
    print({label: f"{t / 90 * 1000:.1f} ms" for label, t in total.items()})


if __name__ == "__main__":
    main()
