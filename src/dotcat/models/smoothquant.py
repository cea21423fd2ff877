"""SmoothQuant (Xiao et al., ICML 2023, eq. 4) before a cross-encoder's 7-bit int8 export.

ONNX Runtime's dynamic int8 quantises a MatMul's input with one scale per call; a few channels
of BERT's LayerNorm outputs are far larger than the rest (Bondarenko et al. 2021) and leave the
others few levels. Channel j is divided by ``s_j = max|X_j|^a / max|W_j|^(1-a)`` and row j of
the weight multiplied by it: ``(X diag(s)^-1)(diag(s) W) = X W``, and the per-channel weight
scales take the outliers. A ``Mul`` before the MatMul carries ``s`` (in post-LN BERT the input
also feeds a residual). Only the inputs a LayerNorm makes are smoothed, calibrated on random
tokens, so the export needs no corpus: so it kept the bar on six collections, where every input
smoothed from random tokens missed it (eval/studies/rerank_avx2_layers, smooth_ln_random_zen3.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ALPHA = 0.8  # chosen on dev pairs of five collections (smooth_ln_random_zen3.md)
PAIRS = 800
QUERY, DOC = 10, 230  # random token ids per calibration pair, past BERT's special and unused ones


def smoothed(fp32: Path, weights_dir: Path, out: Path) -> Path:
    """``out``: the fp32 graph ``fp32`` with its LayerNorm-fed inputs smoothed."""
    import onnx

    model = onnx.load(str(fp32))
    inputs = linear_inputs(model.graph, ln_only=True)
    if not inputs:  # no LayerNorm feeds a linear layer: nothing to smooth
        return fp32
    smooth(model.graph, inputs, maxima(model, list(inputs), _random_feeds(weights_dir, model)))
    onnx.save(model, str(out))
    return out


def linear_inputs(graph, ln_only: bool) -> dict[str, list]:
    """The linear layers (MatMuls with a weight) grouped by the tensor they read; ``ln_only``:
    only those a LayerNorm makes (Q/K/V, the FFN's first projection)."""
    weights = {t.name for t in graph.initializer}
    made_by = {o: n.op_type for n in graph.node for o in n.output}
    found: dict[str, list] = {}
    for node in (n for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights):
        if not ln_only or made_by.get(node.input[0]) == "LayerNormalization":
            found.setdefault(node.input[0], []).append(node)
    return found


def smooth(graph, inputs: dict[str, list], found: dict, alpha: float = ALPHA) -> None:
    """Each input X of ``inputs`` divided by ``s`` (a ``Mul`` before its MatMuls) and their
    weights' rows multiplied by it, ``found``: ``max|X_j|`` per input (eq. 4)."""
    import onnx
    from onnx import numpy_helper

    inits = {t.name: t for t in graph.initializer}
    nodes = list(graph.node)
    for i, (x, matmuls) in enumerate(inputs.items()):
        weights = [numpy_helper.to_array(inits[m.input[1]]) for m in matmuls]
        w_max = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        s = np.maximum(found[x], 1e-5) ** alpha / np.maximum(w_max, 1e-5) ** (1 - alpha)
        s = s.astype(np.float32)
        for m, w in zip(matmuls, weights, strict=True):
            inits[m.input[1]].CopyFrom(numpy_helper.from_array(w * s[:, None], m.input[1]))
            m.input[0] = f"{x}_smooth"
        graph.initializer.append(numpy_helper.from_array(1 / s, f"smooth_{i}"))
        mul = onnx.helper.make_node("Mul", [x, f"smooth_{i}"], [f"{x}_smooth"], f"Smooth_{i}")
        nodes.insert(nodes.index(matmuls[0]), mul)
    del graph.node[:]
    graph.node.extend(nodes)


def _random_feeds(weights_dir: Path, model) -> list[dict[str, np.ndarray]]:
    """:data:`PAIRS` pairs of random token ids laid out as a re-ranker's pairs, 50 a feed."""
    from transformers import AutoTokenizer

    from dotcat.models.tokens import PairTemplate

    template = PairTemplate(AutoTokenizer.from_pretrained(weights_dir))
    table = {t.name.split(".")[-2]: t.dims[0] for t in model.graph.initializer if "_emb" in t.name}
    doc = min(DOC, table["position_embeddings"] - QUERY - template.n_special)
    rng = np.random.default_rng(0)
    vocab = table["word_embeddings"]
    pairs = [template.build(*(rng.integers(1000, vocab, k).tolist() for k in (QUERY, doc)))
             for _ in range(PAIRS)]  # fmt: skip
    ids, types = (np.array([p[k] for p in pairs], dtype=np.int64) for k in (0, 1))
    feeds = {"input_ids": ids, "token_type_ids": types, "attention_mask": np.ones_like(ids)}
    return [{i.name: feeds[i.name][at : at + 50] for i in model.graph.input}
            for at in range(0, PAIRS, 50)]  # fmt: skip


def maxima(model, names: list[str], feeds: list[dict]) -> dict[str, np.ndarray]:
    """``max|X_j|`` per channel j of each tensor ``names`` over ``feeds``, one call a feed."""
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(n, 1, None) for n in names)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    found = {n: 0.0 for n in names}
    for feed in feeds:
        outs = session.run(names, feed)
        for n, x in zip(names, outs, strict=True):
            found[n] = np.maximum(found[n], np.abs(x.reshape(-1, x.shape[-1])).max(axis=0))
    return found
