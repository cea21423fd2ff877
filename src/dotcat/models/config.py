"""How to build an encoder, a cross-encoder or an export: settings checked without torch.

:class:`EncoderConfig` (BERT_DOT, :class:`dotcat.models.bi_encoder.BiEncoder`),
:class:`CrossEncoderConfig` (BERT_CAT, :class:`dotcat.models.cross_encoder.CrossEncoder`) and
:class:`ExportConfig` (``dotcat export``). Each field carries its help text and, for a closed list,
its choices (:mod:`dotcat.options`); :meth:`~dotcat.options.Settings.validate` refuses a value that
cannot work before any model loads. The models call it again when they load.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

from dotcat.options import (
    DEVICE_HELP,
    EXPORT_PRECISIONS,
    INT8_BACKEND_HELP,
    INT8_BACKENDS,
    INT8_VARIANTS,
    KEEP_FP32,
    POOLINGS,
    PRECISION_HELP,
    PRECISIONS,
    SIMILARITIES,
    Applies,
    Check,
    Settings,
    at_least,
    device_checks,
    int8_runtime_applies,
    precision_checks,
    setting,
)

_C = TypeVar("_C")

MODEL_HELP = "A local model directory, a hub name, or 'default' (all-MiniLM-L6-v2, packaged)."


@dataclass(repr=False)
class EncoderConfig(Settings):
    """How to build a :class:`~dotcat.models.bi_encoder.BiEncoder`. None fields come from the
    model's files.

    Attributes:
        model: local directory or hub name (``default`` = all-MiniLM-L6-v2, packaged).
        pooling: ``cls`` or ``mean``; None: the model's sentence-transformers Pooling, else cls.
        similarity: ``dot`` or ``cos`` (vectors L2-normalised); None: ``cos`` if the model has
            a Normalize module, else its ``similarity_fn_name``, else ``dot``.
        max_length: tokens per text, truncated beyond; None: the model's ``max_seq_length``,
            else min(512, its position embeddings).
        batch_size: most texts per forward pass; None: 32 on CPU, 256 on a GPU
            (:func:`dotcat.models.batching.default_batch`).
        device: ``auto`` (cuda if available, else cpu), ``cpu``, ``cuda``, ``cuda:N``.
        query_prefix, document_prefix: text put before each query / document (e.g. E5's
            ``"query: "``); None: the model's sentence-transformers prompts, else empty.
        fast: speed tricks that keep the vectors (token-budget batches and data-parallel
            workers on CPU, autocast per ``precision``); False gives the plain reference path:
            fixed-size batches, one at a time, fp32.
        max_batch_tokens: padded tokens per forward pass; None: 2048 on CPU, 65,536 on a GPU;
            0: no cap.
        precision: ``auto`` (per CPU kind, :data:`dotcat.models.runtime.AUTO_ENCODER`: int8
            on CPUs with VNNI where OpenVINO is installed, int8 documents on ONNX Runtime on
            AVX2-only CPUs, else bf16 where native, fp16 on older GPUs, else fp32), ``int8``,
            ``fp32``, ``bf16``, ``fp16``: the autocast dtype, or the int8 runtime; pooling and
            outputs stay fp32. An index also records the precision its queries run at under
            ``auto`` (:meth:`BiEncoder.query_path`).
        backend: the int8 runtime: ``auto`` (OpenVINO where installed, else ONNX Runtime;
            ONNX Runtime on AVX2-only CPUs, :func:`dotcat.models.runtime.int8_runtimes`),
            ``onnxruntime``, ``openvino``; an index records which one made its vectors.
        cpu_workers: batches encoded at once on CPU, each by its own thread with one
            intra-op thread (data parallel: no barrier between cores inside an op, robust when
            other processes share the cores); None: one per intra-op thread (at most 8, then
            several threads each) when ``fast``;
            1: one batch at a time over all threads (PyTorch's usual intra-op parallelism).
        num_threads: intra-op threads; None: every core this process may use.
    """

    #: The settings that shape the vectors (an index built with other values is another
    #: index); the others change how fast they are made, not what they are.
    VECTOR_SETTINGS: ClassVar[tuple[str, ...]] = (
        "pooling", "similarity", "max_length", "query_prefix", "document_prefix",
    )  # fmt: skip

    model: str = setting("default", help=MODEL_HELP)
    pooling: str | None = setting(
        None, help="cls or mean (default: the model's own).", choices=POOLINGS
    )
    similarity: str | None = setting(
        None, help="dot or cos (default: the model's own).", choices=SIMILARITIES
    )
    max_length: int | None = setting(
        None, help="Tokens per text, cut beyond (default: the model's own, at most 512)."
    )
    batch_size: int | None = setting(
        None, help="Texts per forward pass (default: 32 on CPU, 256 on a GPU)."
    )
    device: str = setting("auto", help=DEVICE_HELP)
    query_prefix: str | None = setting(None, help="Text put before each query.")
    document_prefix: str | None = setting(None, help="Text put before each document.")
    fast: bool = setting(True, help="Speed tricks that keep the vectors (False: reference path).")
    max_batch_tokens: int | None = setting(None, help="Padded tokens per forward pass (0: no cap).")
    precision: str = setting("auto", help=PRECISION_HELP, choices=PRECISIONS)
    backend: str = setting(
        "auto",
        help="The encoder's int8 runtime: auto (onnxruntime on AVX2-only CPUs, else openvino where "
        "installed), onnxruntime or openvino; an index records it, and its queries follow it.",
        choices=INT8_BACKENDS,
        flags=("--int8-backend",),
    )
    cpu_workers: int | None = setting(None, help="Batches encoded at once on CPU.")
    num_threads: int | None = setting(None, help="Intra-op threads (default: every core).")

    def checks(self) -> list[Check]:
        return _model_checks(self, shortest=2)

    def applies(self) -> list[Applies]:
        return [int8_runtime_applies("backend", self.precision)]


@dataclass(repr=False)
class CrossEncoderConfig(Settings):
    """How to build a :class:`~dotcat.models.cross_encoder.CrossEncoder`.

    Attributes:
        model: a trained cross-encoder directory (dotcat's or sentence-transformers'), a hub
            name, or, to start training, any BERT checkpoint (``default`` = all-MiniLM-L6-v2,
            packaged); a checkpoint without a classification head gets a new one.
        max_length: tokens per pair, special tokens included; None: what the model directory
            records (its tokenizer's ``model_max_length``), else 256.
        batch_size: most pairs per forward pass.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N``.
        fast: token-budget batches, worker threads and autocast per ``precision``; False:
            fixed-size batches, one at a time, fp32 (the reference path).
        max_batch_tokens: padded tokens per forward pass; None: 2048 on CPU, no cap on GPU.
        precision: ``auto`` (int8 on CPUs with VNNI where OpenVINO is installed, else bf16
            where native, fp16 on older GPUs, else fp32), ``fp32``, ``bf16``, ``fp16``, ``int8``.
        backend: the int8 runtime: ``auto`` (OpenVINO where installed, else ONNX Runtime),
            ``openvino``, ``onnxruntime``; other precisions run in PyTorch.
        cpu_workers: pairs batches scored at once on CPU, one thread each; None: one per
            intra-op thread.
        num_threads: intra-op threads; None: every core this process may use.
    """

    model: str = setting("default", help="A BERT_CAT cross-encoder: directory or hub name.")
    max_length: int | None = setting(
        None, help="Tokens per pair (default: the model's record, else 256)."
    )
    batch_size: int = setting(32, help="Most (query, document) pairs per forward pass.")
    device: str = setting("auto", help=DEVICE_HELP)
    fast: bool = setting(True, help="Speed tricks that keep the scores (False: reference path).")
    max_batch_tokens: int | None = setting(None, help="Padded tokens per forward pass.")
    precision: str = setting("auto", help=PRECISION_HELP, choices=PRECISIONS)
    backend: str = setting("auto", help=INT8_BACKEND_HELP, choices=INT8_BACKENDS)
    cpu_workers: int | None = setting(None, help="Pair batches scored at once on CPU.")
    num_threads: int | None = setting(None, help="Intra-op threads (default: every core).")

    def checks(self) -> list[Check]:
        return _model_checks(self, shortest=8)

    def applies(self) -> list[Applies]:
        return [int8_runtime_applies("backend", self.precision)]


@dataclass(frozen=True, repr=False)
class ExportConfig(Settings):
    """``dotcat export``: a model exported beside its weights (:mod:`.onnx_backend`)."""

    precision: str = setting(
        "int8", help="int8 (per-channel weights) or fp32.", choices=EXPORT_PRECISIONS
    )
    keep_fp32: str = setting(
        "auto",
        help="Units left in fp32 under int8: none, ffn_output, first_ffns (layers 0-2's FFNs and "
        "the embeddings), smoothed (the embeddings; LayerNorm outputs smoothed: SmoothQuant); "
        "auto: smoothed for a cross-encoder's avx2 export, else none.",
        choices=KEEP_FP32,
    )
    variant: str | None = setting(
        None,
        help="int8 kernels: avx512_vnni or avx2 (7-bit weights); default: this CPU's.",
        choices=INT8_VARIANTS,
    )
    backend: str = setting(
        "auto",
        help="int8 runtime: auto (a cross-encoder: openvino where installed, onnxruntime on "
        "AVX2-only CPUs; an encoder: onnxruntime), onnxruntime or openvino.",
        choices=INT8_BACKENDS,
    )

    def applies(self) -> list[Applies]:
        int8 = self.precision == "int8"
        return [(("variant", "backend"), int8, "applies only with precision int8")]


def _model_checks(config: EncoderConfig | CrossEncoderConfig, shortest: int) -> list[Check]:
    """The checks both models' settings make (``shortest``: the least ``max_length``)."""
    return [
        at_least("max_length", config.max_length, shortest),
        at_least("batch_size", config.batch_size, 1),
        at_least("max_batch_tokens", config.max_batch_tokens, 0),
        at_least("cpu_workers", config.cpu_workers, 1),
        at_least("num_threads", config.num_threads, 1),
        *device_checks("device", config.device),
        *precision_checks("precision", config.precision, config.device),
    ]


def make_config(kind: type[_C], config: _C | str | None, settings: dict[str, Any]) -> _C:
    """A ``kind`` config (:class:`EncoderConfig`, :class:`CrossEncoderConfig`) from a whole
    config, a model name or None (the default model), with ``settings`` fields over it: what
    ``BiEncoder.load("model", device="cpu")`` takes, as sentence-transformers' constructors."""
    if config is None or isinstance(config, str):
        return kind(**({"model": config} if config else {}), **settings)
    return replace(config, **settings) if settings else config
