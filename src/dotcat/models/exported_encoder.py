"""A bi-encoder run from an export of its weights, without PyTorch: the query side of a search.

``dotcat search INDEX "query"`` encodes one short query in milliseconds, and importing PyTorch
and transformers and loading the model took most of the command's ten seconds (an AVX2 Zen 3,
issue 66). :class:`ExportedEncoder` runs the same weights exported once: ONNX Runtime's fp32
export where the queries are fp32 (ONNX Runtime fuses its graph: attention, GELU, LayerNorm),
the int8 runner of the index's record where they are int8 (:mod:`.int8`); the text is
tokenized by ``tokenizers`` from the model's ``tokenizer.json`` (what transformers' fast
tokenizer runs), then pooled and normalised with NumPy. A query is padded as
:class:`~dotcat.models.bi_encoder.BiEncoder` pads it, so its vector is BiEncoder's: the same
token ids, and fp32 scores within 1e-5 of PyTorch's (tests/models/test_exported_encoder.py,
eval/benchmarks/results/cli_search.md).

A search's query encoder (:func:`dotcat.index.encoder.load_query_encoder`) is one wherever it
gives the vectors asked for (on a CPU, fp32 or int8, a model with a ``tokenizer.json``), and a
:class:`~dotcat.models.bi_encoder.BiEncoder` elsewhere (a GPU, bf16, a model without a fast
tokenizer). The export is made on first use (PyTorch loads once, for it); ``dotcat index``
makes it while it builds an index.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from dotcat.errors import DotcatError, first_line
from dotcat.models import onnx_backend
from dotcat.models.batching import (
    CPU_BATCH_SIZE,
    CPU_MAX_BATCH_TOKENS,
    MAX_AUTO_WORKERS,
    QUERY_PAD_MULTIPLE,
    length_sorted_batches,
    pad_ids,
)
from dotcat.models.config import EncoderConfig
from dotcat.models.int8 import int8_runner
from dotcat.models.resolve import model_dim, read_model_config, resolve_model, weights_fingerprint
from dotcat.models.runtime import available_cpus, runs_on_cpu
from dotcat.models.st_config import StSettings, or_prompt, read_st_settings
from dotcat.models.tokens import truncated

logger = logging.getLogger(__name__)

#: The precisions an exported runner gives as the index records them.
EXPORTED_PRECISIONS = ("fp32", "int8")
#: The tokenizer file ``tokenizers`` reads (a fast tokenizer's; a model may have none).
TOKENIZER_FILE = "tokenizer.json"


def try_load(config: EncoderConfig) -> tuple[ExportedEncoder | None, str]:
    """An :class:`ExportedEncoder` where it gives the vectors ``config`` asks for (see the
    module docstring), else None and why not."""
    if not config.fast:
        return None, "the reference path (fast=False)"
    if config.precision not in EXPORTED_PRECISIONS:
        return None, f"precision {config.precision}"
    if config.max_length is None:
        return None, "no max_length given"
    if not runs_on_cpu(config.device):
        return None, f"device {config.device} is a GPU"
    path = resolve_model(config.model)
    st = read_st_settings(path)
    if not (st.transformer_dir / TOKENIZER_FILE).is_file():
        return None, f"{st.transformer_dir} has no {TOKENIZER_FILE}"
    try:
        return ExportedEncoder.load(config, path, st), ""
    except (DotcatError, OSError) as e:  # e.g. an export that cannot be written
        return None, f"no export to run ({first_line(e)})"


class ExportedEncoder:
    """A BERT_DOT encoder over an exported runner (ONNX Runtime fp32, or an int8 runner):
    ``encode``, ``encode_queries`` and ``encode_documents`` as
    :class:`~dotcat.models.bi_encoder.BiEncoder` gives them, with its settings and record.

    Build with :meth:`load` (or :func:`try_load`).
    """

    def __init__(
        self,
        config: EncoderConfig,
        path: Path,
        runner: Any,
        tokenizer: Any,
        st: StSettings,
        *,
        dim: int,
        fingerprint: str,
    ) -> None:
        self.config, self.name, self.path = config, config.model, path
        self.runner, self.tokenizer = runner, tokenizer
        self.pooling, self.similarity = st.pooling_and_similarity(config.pooling, config.similarity)
        self.max_length = int(config.max_length)
        self.query_prefix = or_prompt(config.query_prefix, st.query_prompt)
        self.document_prefix = or_prompt(config.document_prefix, st.document_prompt)
        self.lowercase = st.lowercase
        self.dim, self.fingerprint = dim, fingerprint
        self.precision = config.precision
        self.batch_size = config.batch_size or CPU_BATCH_SIZE
        tokens = config.max_batch_tokens
        self.max_batch_tokens = CPU_MAX_BATCH_TOKENS if tokens is None else tokens
        self.workers = config.cpu_workers or min(available_cpus(), MAX_AUTO_WORKERS)
        #: Kept for the pipeline's setting (a runner's call already runs on one thread).
        self.single_query_threads: int | None = None
        self._added = tokenizer.num_special_tokens_to_add(False)
        self._pad_id = int((tokenizer.padding or {}).get("pad_id", 0))
        tokenizer.no_padding()
        tokenizer.no_truncation()  # truncated as transformers does it, in :meth:`_tokenize`

    @classmethod
    def load(
        cls, config: EncoderConfig, path: Path | None = None, st: StSettings | None = None
    ) -> ExportedEncoder:
        """The encoder ``config`` describes (``path``, ``st``: the resolved model and its
        settings, when the caller has them); its export made first if missing or stale.

        Raises:
            DotcatError: another precision than fp32 or int8, an unreadable tokenizer or
                export, or an export that cannot be made.
        """
        from tokenizers import Tokenizer

        config.validate()
        if config.precision not in EXPORTED_PRECISIONS or config.max_length is None:
            raise DotcatError(f"no exported encoder for {config}")
        path = path or resolve_model(config.model)
        st = st or read_st_settings(path)
        model_config = read_model_config(path, st.transformer_dir)
        fingerprint = weights_fingerprint(path)
        try:
            tokenizer = Tokenizer.from_file(str(st.transformer_dir / TOKENIZER_FILE))
        except Exception as e:  # tokenizers raises its own Exception for a bad file
            raise DotcatError(f"{path}: cannot load its tokenizer ({first_line(e)})") from None
        if config.precision == "int8":
            workers = config.cpu_workers or min(available_cpus(), MAX_AUTO_WORKERS)
            runner = int8_runner(st.transformer_dir, "encoder", fingerprint, config.backend,
                                 workers)  # fmt: skip
        else:
            export = onnx_backend.find_or_export(st.transformer_dir, "encoder", "fp32", fingerprint)
            runner = onnx_backend.OnnxRunner(export, per_text=False)  # a batch in one call
        dim = model_dim(model_config)  # (DistilBERT's config names it `dim`)
        encoder = cls(config, path, runner, tokenizer, st, dim=dim, fingerprint=fingerprint)
        logger.info("encoder %s: %s pooling, %s similarity, max_length %d, %s on %s",
                    config.model, encoder.pooling, encoder.similarity, encoder.max_length,
                    encoder.precision, encoder.backend)  # fmt: skip
        return encoder

    @property
    def backend(self) -> str:
        """What runs the model: ``onnxruntime`` or ``openvino``."""
        return self.runner.backend

    # -- encoding -------------------------------------------------------------------------

    def encode(self, texts: str | Sequence[str], pad_multiple: int = 1) -> np.ndarray:
        """Vectors of texts as they are (no prefix): one string gives a ``(dim,)`` vector, a
        sequence a float32 ``(len(texts), dim)`` array. Texts are sorted by length and batched
        as :class:`~dotcat.models.bi_encoder.BiEncoder` batches them (``pad_multiple``: each
        padded to a multiple of that many tokens); batches run on :attr:`workers` threads
        where the runner takes concurrent calls."""
        single = isinstance(texts, str)
        ids = self._tokenize([texts] if single else list(texts))
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        widths, jobs = length_sorted_batches(
            lengths, self.batch_size, self.max_batch_tokens, pad_multiple, self.max_length
        )
        out = np.empty((len(ids), self.dim), dtype=np.float32)

        def run(rows: np.ndarray) -> None:
            batch = pad_ids([ids[i] for i in rows], int(widths[rows].max()), self._pad_id)
            out[rows] = embed(self.runner, self.pooling, self.similarity, *batch)

        if len(jobs) > 1 and self.workers > 1 and self.runner.concurrent:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="dotcat-encode") as pool:
                list(pool.map(run, jobs))
        else:
            for rows in jobs:
                run(rows)
        return out[0] if single else out

    def encode_queries(self, texts: str | Sequence[str], **kwargs: Any) -> np.ndarray:
        """Queries' vectors: ``query_prefix + text``, padded to multiples of 8 tokens as
        :meth:`BiEncoder.encode_queries` pads them (a query's vector never depends on its
        batch)."""
        kwargs.setdefault("pad_multiple", QUERY_PAD_MULTIPLE)
        return self.encode(prefixed(self.query_prefix, texts), **kwargs)

    def encode_documents(self, texts: str | Sequence[str], **kwargs: Any) -> np.ndarray:
        """Documents' vectors: ``document_prefix + text``."""
        return self.encode(prefixed(self.document_prefix, texts), **kwargs)

    def query_tokens(self, text: str) -> int:
        """How many tokens the query ``text`` is (special tokens and prefix included), before
        the cut at :attr:`max_length`."""
        text = self.query_prefix + text
        text = text.lower() if self.lowercase else text
        return len(self.tokenizer.encode(text, add_special_tokens=False)) + self._added

    def manifest_entry(self) -> dict[str, Any]:
        """What an index records about the encoder that made its vectors (as BiEncoder's)."""
        return encoder_record(self, (self.precision, self.backend))

    def __repr__(self) -> str:
        return encoder_repr(self, precision=repr(self.precision), backend=repr(self.backend))

    def _tokenize(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each text, cut at :attr:`max_length` as transformers' tokenizer cuts:
        the text's own tokens truncated to leave room for the special tokens, which are added
        after (its post-processor); a long text is tokenized only as far as needed
        (:func:`dotcat.models.tokens.truncated`)."""
        if self.lowercase:
            texts = [t.lower() for t in texts]
        keep = self.max_length - self._added

        def tokenize(batch: list[str]) -> list[list[int]]:
            encodings = self.tokenizer.encode_batch(batch, add_special_tokens=False)
            for encoding in encodings:
                encoding.truncate(keep)
            return [self.tokenizer.post_process(e).ids for e in encodings]

        return [np.asarray(x, dtype=np.int32) for x in truncated(tokenize, texts, self.max_length)]


def embed(runner: Any, pooling: str, similarity: str, input_ids: Any, mask: Any) -> np.ndarray:
    """The vectors of a right-padded batch run by an exported ``runner`` (its ``calls`` feeds
    each text alone or the batch whole): the last hidden states pooled over the real tokens,
    L2-normalised for ``cos``, as :mod:`dotcat.models.pooling` pools in PyTorch."""
    calls = runner.calls({"input_ids": input_ids, "attention_mask": mask})
    rows = [_pool(pooling, runner(feeds), feeds["attention_mask"]) for feeds in calls]
    vectors = np.concatenate(rows).astype(np.float32, copy=False)
    if similarity == "cos":
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors


def _pool(pooling: str, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """cls: ``H[:, 0]``; mean: ``sum_t m_t H_t / max(sum_t m_t, 1e-9)``
    (:func:`dotcat.models.pooling.mean_pooling`)."""
    if pooling == "cls":
        return hidden[:, 0]
    weights = np.asarray(mask, dtype=hidden.dtype)[..., None]
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def encoder_record(encoder: Any, queries: tuple[str, str]) -> dict[str, Any]:
    """What an index records about the encoder that made its vectors, and the (precision,
    runtime) of the ``queries`` that search it under ``auto``."""
    return {
        "name": encoder.name,
        "path": str(encoder.path),
        "fingerprint": encoder.fingerprint,
        "pooling": encoder.pooling,
        "similarity": encoder.similarity,
        "normalize": encoder.similarity == "cos",
        "max_length": encoder.max_length,
        "dim": encoder.dim,
        "query_prefix": encoder.query_prefix,
        "document_prefix": encoder.document_prefix,
        # Text lower-cased (do_lower_case, or the tokenizer's normaliser): "A", "a" alike.
        "do_lower_case": bool(np.array_equal(*encoder._tokenize(["Lower Case", "lower case"]))),
        # bf16 and fp32 vectors agree to cosine >= 0.999: an index built at one is searched
        # at the other; int8 documents meet float queries and int8 ones of their runtime
        # (index.manifest.check_encoder).
        "precision": encoder.precision,
        # Two int8 runtimes give vectors that do not rank alike; older int8 indexes lack
        # the key and are ONNX Runtime's (index.manifest.check_encoder).
        "backend": encoder.backend,
        # What searches of an index built with this encoder run at under ``auto``.
        "queries": dict(zip(("precision", "backend"), queries, strict=True)),
    }


def encoder_repr(encoder: Any, **more: Any) -> str:
    """``Class('model', pooling=..., similarity=..., max_length=..., dim=..., more...)``."""
    shown = {"pooling": repr(encoder.pooling), "similarity": repr(encoder.similarity),
             "max_length": encoder.max_length, "dim": encoder.dim, **more}  # fmt: skip
    settings = ", ".join(f"{key}={value}" for key, value in shown.items())
    return f"{type(encoder).__name__}({encoder.name!r}, {settings})"


def prefixed(prefix: str, texts: str | Sequence[str]) -> str | Sequence[str]:
    """``prefix + text`` for one text or each of a sequence."""
    if isinstance(texts, str):
        return prefix + texts
    return [prefix + t for t in texts] if prefix else texts
