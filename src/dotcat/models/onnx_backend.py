"""The int8 path: a model exported to ONNX, its linear layers quantised, run by ONNX Runtime.

Why int8 and why ONNX Runtime (measured on SciFact): on a CPU without native bf16 (AVX2-only) fp32
matmuls already run near peak, so lower precision is the only way to go faster; PyTorch's own
dynamic int8 (``torch.ao.quantization.quantize_dynamic``) gave 1.37x and a re-ranker Spearman of
0.89 with fp32, while ONNX Runtime's int8 kernels (VNNI on AVX-512, u8s8 on AVX2) are faster and
per-channel weight scales keep the vectors close (cosine ~0.995 with fp32 on SciFact documents).

Recipe (Bondarenko et al., EMNLP 2021, "Understanding and Overcoming the Challenges of Efficient
Transformer Quantization"): the weights of every linear layer are quantised per output channel to
int8 once, at export; activations are quantised per call from their own range (dynamic: no
calibration set to choose, nothing fitted to one corpus). ``keep_fp32`` can leave units in fp32
(``KEEP_FP32``), or smooth a re-ranker's LayerNorm outputs first (:mod:`.smoothquant`, the AVX2
default). On CPUs without VNNI the weights use 7 bits (``reduce_range``): AVX2's u8 x s8
multiply-add (``vpmaddubsw``) saturates int16 sums of two 8-bit products.

Files are laid out as sentence-transformers (``backend="onnx"``) and Optimum look for them,
inside the directory that holds the transformer's weights::

    onnx/model.onnx                       fp32 export (inputs input_ids, attention_mask,
                                          token_type_ids; output last_hidden_state or logits)
    onnx/model.onnx_data                  its weights (ONNX external data: ONNX Runtime maps
                                          them, a session starts in 0.1 s, not 0.3 s)
    onnx/model_qint8_avx512_vnni.onnx     int8, for CPUs with VNNI
    onnx/model_qint8_avx2.onnx            int8, 7-bit weights, for AVX2 without VNNI
    onnx/dotcat_export.json               per file: the weights' fingerprint, the recipe

An export is never silently stale: each file records the sha256 of the weights it came from,
and a file whose record does not match is exported again. ``dotcat export`` writes beside the
weights; an export made on first use goes to ``$DOTCAT_CACHE/onnx/<fingerprint>/``
(:mod:`dotcat.models.export_files`).
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from dotcat.errors import DotcatError, first_line
from dotcat.files import writing
from dotcat.models import export_files, smoothquant
from dotcat.models.export_files import atomic_file, quiet_export, record
from dotcat.models.runtime import cpu_flags, quiet_transformers

logger = logging.getLogger(__name__)

ONNX_DIR = "onnx"
OPSET = 17
#: The fp32 export's weights file, beside it (``model.onnx_data``, Optimum's name).
DATA_SUFFIX = ".onnx_data"
#: What each kind of model outputs (Optimum's names: ``ORTModelForFeatureExtraction`` reads
#: ``last_hidden_state``, ``ORTModelForSequenceClassification`` reads ``logits``).
OUTPUTS = {"encoder": "last_hidden_state", "cross-encoder": "logits"}
#: What ``quantize_dynamic`` quantises: linear layers and embedding lookups.
QUANTISED_OPS = frozenset({"MatMul", "Gemm", "Gather"})
#: Units that ``keep_fp32`` can leave unquantised (regexes on ONNX node names).
KEEP_FP32 = {
    "none": (),
    # BERT's FFN output projection (``layer.N.output.dense``), not the attention's.
    "ffn_output": (r"layer\.\d+/output/dense/",),
    # The first three layers' FFNs and the embedding tables (their Gathers): the units whose
    # 7-bit int8 moves a re-ranker's logits most (eval/studies/rerank_avx2_layers).
    "first_ffns": (r"layer\.[0-2]/(intermediate|output)/dense/", r"_embeddings/Gather"),
    # The embedding tables; every linear layer int8, its LayerNorm-fed inputs smoothed first
    # (:mod:`dotcat.models.smoothquant`).
    "smoothed": (r"_embeddings/Gather",),
}
#: ONNX Runtime fusions left off (a session config entry, so sentence-transformers can pass the
#: same): in the int8 exports its fused SkipLayerNormalization (a scalar kernel) took 8x the Add
#: and LayerNormalization it replaces, 8-13% of a 256-token text's time on a Zen 4
#: (eval/studies/avx2_int8/skipln.md).
DISABLED_OPTIMIZERS = ("optimization.disable_specified_optimizers", "SkipLayerNormFusion")


def default_keep_fp32(kind: str, variant: str) -> str:
    """The recipe ``auto`` takes: every linear layer int8 (chosen on SciFact dev), but a
    cross-encoder's AVX2 export is ``smoothed``: with every unit at 7 bits as it is, a
    re-ranker kept 98.29% of fp32's nDCG@10, under the bar (docs/precision.md)."""
    return "smoothed" if (kind, variant) == ("cross-encoder", "avx2") else "none"


def int8_variant(flags: frozenset[str] | None = None) -> str:
    """``avx512_vnni`` where the CPU has VNNI (AVX-512 or AVX-VNNI), else ``avx2``."""
    if flags is None:
        flags = cpu_flags()
    return "avx512_vnni" if flags & {"avx512_vnni", "avx_vnni"} else "avx2"


def export_name(precision: str, variant: str | None = None) -> str:
    """The file name sentence-transformers uses for an export at this precision."""
    if precision == "fp32":
        return "model.onnx"
    if precision == "int8":
        return f"model_qint8_{variant or int8_variant()}.onnx"
    raise DotcatError(f"no ONNX export at precision {precision!r} (fp32 or int8)")


def find_or_export(weights_dir: Path, kind: str, precision: str, fingerprint: str) -> Path:
    """The current ONNX export of the model in ``weights_dir``, for this CPU and the default
    recipe; made first if missing or stale (its recorded fingerprint or recipe differs).

    Looks beside the weights (where ``dotcat export`` writes), then in the cache, where an
    export made on first use goes: a model directory is not written to behind the user's
    back (it may be a packaged model, or shared).
    """
    variant = int8_variant()
    name = export_name(precision, variant)
    recipe = _recipe(kind, precision, variant, default_keep_fp32(kind, variant), fingerprint)
    homes = [weights_dir / ONNX_DIR, cache_home(fingerprint)]
    companions = (DATA_SUFFIX,) if precision == "fp32" else ()  # fp32's weights beside it
    found = export_files.current_export(homes, name, recipe, *companions)
    if found is not None:
        return found
    return export(weights_dir, kind, precision, homes[1], fingerprint, variant=variant)


def cache_home(fingerprint: str) -> Path:
    """Where ONNX exports made on first use are cached: ``$DOTCAT_CACHE/onnx/<fingerprint>``."""
    return export_files.cache_home(ONNX_DIR, fingerprint)


def export(
    weights_dir: Path,
    kind: str,
    precision: str,
    home: Path,
    fingerprint: str,
    *,
    keep_fp32: str = "auto",
    variant: str | None = None,
) -> Path:
    """Export the model in ``weights_dir`` to ``home/<export_name>`` and record it.

    fp32: ``torch.onnx.export`` of the Hugging Face model, batch and sequence dynamic. int8:
    the fp32 export (made first if needed), quantised by ONNX Runtime's ``quantize_dynamic``
    (per-channel int8 weights, dynamic activations, the ``keep_fp32`` layers left in fp32;
    ``auto``: :func:`default_keep_fp32`).
    Files are written under temporary names and renamed, so a crash leaves no half file.
    """
    if kind not in OUTPUTS:
        raise DotcatError(f"unknown model kind {kind!r} (encoder or cross-encoder)")
    if keep_fp32 not in ("auto", *KEEP_FP32):
        raise DotcatError(f"unknown keep_fp32 {keep_fp32!r} (auto, {', '.join(KEEP_FP32)})")
    variant = variant or int8_variant()
    keep_fp32 = default_keep_fp32(kind, variant) if keep_fp32 == "auto" else keep_fp32
    home.mkdir(parents=True, exist_ok=True)
    name = export_name(precision, variant)
    fp32 = home / export_name("fp32")
    fp32_recipe = _recipe(kind, "fp32", variant, keep_fp32, fingerprint)
    if export_files.current_export([home], fp32.name, fp32_recipe, DATA_SUFFIX) is None:
        logger.info("exporting %s to ONNX: %s", weights_dir, fp32)
        _write_fp32(weights_dir, kind, fp32)
        record(home, fp32.name, fp32_recipe, DATA_SUFFIX)
    if precision == "fp32":
        return fp32
    target = home / name
    logger.info("quantising %s to int8 (%s, fp32 kept: %s): %s", fp32, variant, keep_fp32, target)
    with atomic_file(target) as tmp:
        _quantize(fp32, tmp, reduce_range=variant != "avx512_vnni", keep_fp32=keep_fp32,
                  weights_dir=weights_dir)  # fmt: skip
    record(home, name, _recipe(kind, precision, variant, keep_fp32, fingerprint))
    return target


def int8_runner(weights_dir: Path, kind: str, fingerprint: str) -> OnnxRunner:
    """The int8 :class:`OnnxRunner` of a model (its export made first if missing or stale)."""
    return OnnxRunner(find_or_export(weights_dir, kind, "int8", fingerprint))


class OnnxRunner:
    """One ONNX Runtime session on CPU, called like a model: feeds -> first output.

    One intra-op thread per session: dotcat's encoders already run batches in parallel worker
    threads (data parallel; ``InferenceSession.run`` releases the GIL and may be called from
    several threads at once), and one query is too small to split. Spinning is off, so a
    finished call leaves the core to the server's event loop. ``per_text``: each text of a
    batch in its own call (:meth:`one_by_one`, for int8), else the batch in one call.
    """

    def __init__(self, path: Path, per_text: bool = True) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry(*DISABLED_OPTIMIZERS)
        try:
            self.session = ort.InferenceSession(str(path), options, ["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own Fail/InvalidGraph types
            raise DotcatError(f"{path}: ONNX Runtime cannot load it ({first_line(e)}); remove "
                              f"{path.parent} to export it again") from None  # fmt: skip
        self.path = path
        self.per_text = per_text
        self.input_names = [i.name for i in self.session.get_inputs()]

    #: The runtime's name (``CrossEncoder.backend``).
    backend = "onnxruntime"
    #: Calls from several threads run at once (one thread each).
    concurrent = True

    def calls(self, batch: Mapping[str, Any]) -> list[dict[str, np.ndarray]]:
        """The feeds to run for a right-padded batch: one per text (:meth:`one_by_one`), or
        the batch whole (``per_text=False``)."""
        if self.per_text:
            return self.one_by_one(batch)
        return [{k: np.asarray(v) for k, v in batch.items()}]

    @staticmethod
    def one_by_one(batch: Mapping[str, Any]) -> list[dict[str, np.ndarray]]:
        """A right-padded batch (tensors or arrays with an ``attention_mask``) as one feed
        per row, cut to the row's own length.

        Dynamic int8 quantises each activation tensor with the range of the whole tensor, so
        in a batch a text's output would depend on its neighbours and on padding. One text per
        call makes every vector and logit a function of its text alone (a query's vector is
        the same in a batch or alone, an index built in any order the same); measured, it is
        also faster than padded batches (no work on padding).
        """
        arrays = {k: np.asarray(v) for k, v in batch.items()}
        lengths = arrays["attention_mask"].sum(axis=1)
        return [
            {k: v[row : row + 1, : int(n)] for k, v in arrays.items()}
            for row, n in enumerate(lengths)
        ]

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        """Run on ``feeds`` (see :func:`model_inputs`)."""
        return self.session.run(None, model_inputs(self.input_names, feeds))[0]


def model_inputs(names: list[str], feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The int64 arrays an exported model takes, by input name: extra keys in ``feeds`` are
    ignored, a missing ``token_type_ids`` is zeros (tokenizers without segments)."""
    inputs = {}
    for name in names:
        value = feeds.get(name)
        if value is None and name == "token_type_ids":
            value = np.zeros_like(feeds["input_ids"])
        inputs[name] = np.ascontiguousarray(value, dtype=np.int64)
    return inputs


# -- internals ------------------------------------------------------------------------------


def _recipe(kind: str, precision: str, variant: str, keep_fp32: str, fingerprint: str) -> dict:
    recipe = {"kind": kind, "precision": precision, "weights_sha256": fingerprint, "opset": OPSET}
    if precision == "int8":
        recipe |= {"variant": variant, "keep_fp32": keep_fp32, "per_channel": True}
    else:
        recipe["weights_file"] = Path(export_name("fp32")).with_suffix(DATA_SUFFIX).name
    return recipe


def _write_fp32(weights_dir: Path, kind: str, target: Path) -> None:
    """The fp32 export at ``target`` (:func:`_export_fp32`), its weights in the external data
    file beside it; both written in a temporary folder and renamed into place, the weights
    first, so a crash leaves an export whose record does not match (made again)."""
    import onnx  # only an export needs it

    data = target.with_suffix(DATA_SUFFIX)
    with writing(target), tempfile.TemporaryDirectory(prefix=".export-", dir=target.parent) as tmp:
        whole = Path(tmp) / "whole.onnx"
        _export_fp32(weights_dir, kind, whole)
        model = onnx.load(str(whole))
        onnx.save_model(model, str(Path(tmp) / target.name), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=data.name)  # fmt: skip
        export_files.shareable(Path(tmp) / data.name)
        os.replace(Path(tmp) / data.name, data)
        os.replace(Path(tmp) / target.name, target)


def _export_fp32(weights_dir: Path, kind: str, out: Path) -> None:
    # PyTorch and transformers take seconds to import; only an export (not a runner) needs them.
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    auto = AutoModel if kind == "encoder" else AutoModelForSequenceClassification
    with quiet_transformers():
        # The eager attention exports to plain MatMul/Softmax nodes every runtime has.
        model = auto.from_pretrained(weights_dir, attn_implementation="eager").eval()
        tokenizer = AutoTokenizer.from_pretrained(weights_dir)
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids")
             if n in tokenizer.model_input_names]  # fmt: skip
    sample = tokenizer(["a query", "a longer document text"], padding=True, return_tensors="pt")
    output = OUTPUTS[kind]

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            result = self.model(**dict(zip(names, inputs, strict=True)))
            return result.logits if kind == "cross-encoder" else result[0]

    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes[output] = {0: "batch"} if kind == "cross-encoder" else {0: "batch", 1: "sequence"}
    with torch.no_grad(), quiet_export():
        # dynamo=False: the TorchScript exporter, dynamic axes without onnxscript.
        torch.onnx.export(Wrapped(), tuple(sample[n] for n in names), str(out), input_names=names,
                          output_names=[output], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)  # fmt: skip


def _quantize(src: Path, out: Path, *, reduce_range: bool, keep_fp32: str,
              weights_dir: Path) -> None:  # fmt: skip
    # onnx and ONNX Runtime's quantiser take ~0.4 s to import; only an int8 export needs them.
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    patterns = [re.compile(p) for p in KEEP_FP32[keep_fp32]]
    graph = onnx.load(str(src), load_external_data=False).graph
    excluded = [
        node.name
        for node in graph.node
        if node.op_type in QUANTISED_OPS and any(p.search(node.name) for p in patterns)
    ]
    with quiet_export(), tempfile.TemporaryDirectory(prefix=".smooth-", dir=out.parent) as tmp:
        if keep_fp32 == "smoothed":
            src = smoothquant.smoothed(src, weights_dir, Path(tmp) / "smoothed.onnx")
        quantize_dynamic(
            str(src),
            str(out),
            per_channel=True,
            reduce_range=reduce_range,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=excluded,
        )
