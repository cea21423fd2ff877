"""SmoothQuant before the AVX2 cross-encoder export: the smoothed fp32 graph computes what the
original does (the scales move between input and weight, eq. 4 of Xiao et al. 2023), and only
the inputs a LayerNorm makes are smoothed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from dotcat.models import onnx_backend as ob
from dotcat.models import smoothquant
from dotcat.models.resolve import weights_fingerprint


def test_the_smoothed_graph_gives_the_original_logits_with_its_outliers_moved(
    tiny_cat_dir, tmp_path
):
    fp32 = ob.export(
        tiny_cat_dir, "cross-encoder", "fp32", tmp_path, weights_fingerprint(tiny_cat_dir)
    )
    out = smoothquant.smoothed(fp32, tiny_cat_dir, tmp_path / "smoothed.onnx")
    before, after = onnx.load(str(fp32)).graph, onnx.load(str(out)).graph
    made_by = {o: n.op_type for n in after.node for o in n.output}
    muls = [n for n in after.node if n.name.startswith("Smooth_")]
    # two layers: the embeddings' LayerNorm, layer 0's two and layer 1's after attention (its
    # last LayerNorm feeds the pooler through a Gather, not a linear layer directly)
    assert len(muls) == 4 and all(made_by[m.input[0]] == "LayerNormalization" for m in muls)
    smoothed_inputs = {m.output[0] for m in muls}
    fed = [n for n in after.node if n.op_type == "MatMul" and n.input[0] in smoothed_inputs]
    assert len(fed) == 2 * 3 + 2  # Q, K, V of two layers and the FFN's first projection of two
    weights = {t.name: numpy_helper.to_array(t) for t in before.initializer}
    moved = [numpy_helper.to_array(t) for t in after.initializer if t.name == fed[0].input[1]]
    assert not np.allclose(moved[0], weights[fed[0].input[1]])  # the weights took the scales
    rng = np.random.default_rng(1)
    ids = rng.integers(1000, 30000, (4, 40))
    ids[:, 0], ids[:, -1] = 101, 102
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    logits = [ort.InferenceSession(str(p)).run(None, feeds)[0] for p in (fp32, out)]
    assert np.allclose(*logits, rtol=1e-4, atol=1e-5)
    assert np.ptp(logits[0]) > 0.01  # pairs the tiny model tells apart


def test_a_graph_without_layernorm_inputs_is_left_as_it_is(tmp_path):
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2])
    w = numpy_helper.from_array(np.ones((4, 2), dtype=np.float32), "w")
    node = onnx.helper.make_node("MatMul", ["x", "w"], ["y"])
    path = tmp_path / "plain.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph([node], "g", [x], [y], [w])), path)
    assert smoothquant.smoothed(path, tmp_path / "no-tokenizer", tmp_path / "s.onnx") == path
