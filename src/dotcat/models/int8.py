"""The int8 path's entry points: a model's int8 runner (:class:`LoadedModel`, what the
PyTorch models share of it), and ``dotcat export``.

Two runtimes run models at int8 on CPU, each from its own export of the weights: ONNX Runtime
(:mod:`dotcat.models.onnx_backend`) and OpenVINO (:mod:`dotcat.models.openvino_backend`,
an optional extra). Which one runs a model kind follows
:func:`dotcat.models.runtime.int8_backend` (``auto``: the runtime measured best for the kind,
when installed). This module picks the runtime; the backends make and run their files.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from dotcat.errors import DotcatError
from dotcat.models import onnx_backend, openvino_backend
from dotcat.models.batching import cpu_workers
from dotcat.models.resolve import read_model_config, resolve_model, weights_fingerprint
from dotcat.models.runtime import choose_precision, int8_backend, precision_name
from dotcat.models.st_config import read_st_settings


def int8_runner(weights_dir: Path, kind: str, fingerprint: str, backend: str, workers: int) -> Any:
    """The int8 runner of the weights in ``weights_dir`` (a model ``kind``: ``encoder`` or
    ``cross-encoder``) on the runtime ``backend`` resolves to; its export is made first if
    missing or stale. ``workers``: the threads that call it (OpenVINO sizes its stream by them)."""
    if int8_backend(kind, backend) == "openvino":
        return openvino_backend.int8_runner(weights_dir, kind, fingerprint, workers)
    return onnx_backend.int8_runner(weights_dir, kind, fingerprint)


class LoadedModel:
    """What BiEncoder and CrossEncoder share: a Hugging Face model loaded in PyTorch, run under
    the autocast ``autocast_dtype``, or at int8 by its runner ``onnx`` (None: PyTorch runs it);
    ``KIND`` is ``encoder`` or ``cross-encoder`` (:func:`dotcat.models.runtime.choose_precision`).
    """

    KIND: str

    def __init__(
        self, config: Any, path: Path, model: Any, tokenizer: Any, device: Any, *,
        fingerprint: str, max_length: int, auto_int8: bool = True,
    ) -> None:  # fmt: skip
        self.config, self.name, self.path = config, config.model, path
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.fingerprint, self.max_length = fingerprint, max_length
        self.int8, self.autocast_dtype = choose_precision(
            config.precision, self.KIND, device, config.fast, auto_int8=auto_int8
        )
        #: the int8 runner (OpenVINO or ONNX Runtime), set by ``load`` for int8.
        self.onnx: Any = None
        self._pad_id = int(tokenizer.pad_token_id or 0)

    @property
    def precision(self) -> str:
        """``int8`` (see :attr:`backend`), else the autocast precision: ``fp32``, ``bf16``,
        ``fp16``."""
        return "int8" if self.onnx is not None else precision_name(self.autocast_dtype)

    @property
    def backend(self) -> str:
        """What runs the model: ``torch``, or the int8 runtime (``openvino``, ``onnxruntime``)."""
        return "torch" if self.onnx is None else self.onnx.backend

    def _int8_runner(self, weights_dir: Path) -> Any:
        """The int8 runner of the weights in ``weights_dir``, on the runtime ``config.backend``
        resolves to (:func:`dotcat.models.runtime.int8_backend`)."""
        return int8_runner(
            weights_dir, self.KIND, self.fingerprint, self.config.backend, self._workers()
        )

    def _workers(self) -> int:
        """Batches run at once on CPU, each by one thread (see ``EncoderConfig``)."""
        return cpu_workers(self.device, self.config.fast, self.config.cpu_workers)


def export_model(
    model: str,
    precision: str = "int8",
    *,
    keep_fp32: str = "auto",
    variant: str | None = None,
    backend: str = "auto",
) -> tuple[str, Path]:
    """``dotcat export``: export a local model beside its weights; returns (kind, file).

    The kind follows the model: a single-logit ``*ForSequenceClassification`` is a
    cross-encoder (sentence-transformers' ``CrossEncoder``), anything else an encoder whose
    transformer directory receives ``onnx/`` (where ``SentenceTransformer`` looks). int8 is
    exported for the runtime ``backend`` resolves to for that kind
    (:func:`dotcat.models.runtime.int8_backend`): OpenVINO's goes to ``openvino/``.
    """
    path = resolve_model(model)
    transformer_dir = read_st_settings(path).transformer_dir
    config = read_model_config(path, transformer_dir)
    architectures = config.get("architectures") or []
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        kind, weights_dir = "cross-encoder", path
        # (transformers leaves out id2label for its default, 2 labels)
        if len(config.get("id2label") or range(config.get("num_labels", 2))) != 1:
            raise DotcatError(f"{path} is a classifier with several labels, not a re-ranker")
    else:
        kind, weights_dir = "encoder", transformer_dir
    fingerprint = weights_fingerprint(path)
    if not os.access(weights_dir, os.W_OK):
        raise DotcatError(f"{weights_dir} cannot be written; copy the model somewhere writable")
    # auto: an encoder's ONNX file, which sentence-transformers loads (the option's help)
    auto_onnx = (kind, backend) == ("encoder", "auto")
    openvino = precision == "int8" and not auto_onnx and int8_backend(kind, backend) == "openvino"
    if keep_fp32 != "auto" and (precision != "int8" or openvino):
        what = "an fp32 export" if precision != "int8" else "OpenVINO's int8"
        raise DotcatError(f"--keep-fp32 {keep_fp32}: ONNX Runtime's int8 only, not {what}")
    home = weights_dir / (openvino_backend.OPENVINO_DIR if openvino else onnx_backend.ONNX_DIR)
    made_home = not home.exists()
    try:
        if openvino:
            return kind, openvino_backend.export(weights_dir, kind, home, fingerprint)
        return kind, onnx_backend.export(
            weights_dir, kind, precision, home, fingerprint, keep_fp32=keep_fp32, variant=variant
        )
    except BaseException:
        if made_home:  # a failed first export (a full disk...) leaves the model as it was
            with contextlib.suppress(OSError):
                home.rmdir()
        raise
