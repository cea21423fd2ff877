"""BERT_DOT: the bi-encoder that turns queries and documents into vectors.

``s(q, d) = f_sim(E(q), E(d))`` with ``E(x) = pool(BERT(x))`` (DPR, Karpukhin et al. 2020;
Sentence-BERT, Reimers & Gurevych 2019) and f_sim the dot product or the cosine; with cosine
the vectors are L2-normalised, so an inner-product index ranks by cosine.

Encoding on CPU is GEMM-bound (about two thirds of the time in the Linear layers of a MiniLM,
fp32). What makes it fast here, each measured against ``SentenceTransformer.encode``:

* texts are tokenized once, sorted by token count and batched, so little is spent on padding,
  then each vector is written back to its text's row;
* on CPU a batch also holds at most ``max_batch_tokens`` padded tokens (2048 by default): a
  batch's activations then stay in cache (the FFN's ``tokens x 1536`` floats), which gave
  1.25x over 32 x 256-token batches on a quiet 2-core Zen 3;
* data-parallel CPU workers: one thread per core, each encoding its own batch with one
  intra-op thread, instead of every op split over all cores. Quiet, this keeps the 1.25x;
  when other processes share the cores it avoids each op's barrier waiting for a descheduled
  thread (1.3-1.5x over sentence-transformers there, where small batches alone lost 0.7x);
* on a GPU, 256 texts per pass (at most 65,536 padded tokens) instead of 32: small batches
  leave it waiting on kernel launches and autocast's casts (an H100, all-MiniLM-L6-v2, bf16:
  5,655 documents/s against 1,906 at 32 in one run);
* ``torch.inference_mode``, SDPA attention (the eager one was 1.3-1.6x slower);
* bf16 autocast only where the CPU has native bf16 (or on CUDA), see :mod:`.runtime`;
* int8 on CPUs with VNNI (``precision="int8"``, ``auto`` there): OpenVINO (per-token
  activation groups, a batch in one call) or ONNX Runtime (one text per call), see
  :mod:`.openvino_backend` and :mod:`.onnx_backend`.

Tried and left out (numbers in the benchmark notes): ``torch.compile`` (about 1.06x for 25-40 s
of compilation, and no sharing across worker threads), int8 dynamic quantization (vectors
off: mean cosine 0.92-0.996 < 0.999), fused oneDNN linear+GELU (no gain).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dotcat.errors import DotcatError, first_line
from dotcat.models.batching import (
    QUERY_PAD_MULTIPLE,
    WINDOW,
    default_batch,
    length_sorted_batches,
    pad_ids,
    run_jobs,
)
from dotcat.models.config import EncoderConfig, make_config
from dotcat.models.exported_encoder import embed, encoder_record, encoder_repr, prefixed
from dotcat.models.int8 import LoadedModel
from dotcat.models.loading import load_hf_model, max_positions, within_positions
from dotcat.models.pooling import l2_normalize, pool
from dotcat.models.resolve import read_model_config, resolve_model, weights_fingerprint
from dotcat.models.runtime import (
    auto_precision,
    autocast,
    free_threads,
    model_device,
    store_linear_weights,
)
from dotcat.models.st_config import or_prompt, read_st_settings
from dotcat.models.tokens import truncated
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

#: Texts per tokenizer call (its results are large Python objects; see ``_tokenize``).
TOKENIZE_SLICE = 512
#: A one-batch call with at most this many tokens (one query, a few short ones) runs on the cores
#: that are free right now (:func:`.runtime.free_threads`): when another process holds a core, each
#: op's OpenMP barrier would wait for a descheduled thread (one SciFact query: ~20 ms on one thread,
#: 126-1,180 ms p95 on two with the other core busy), while on an idle machine both cores shorten
#: it. Calls of several batches run data-parallel (a worker thread per core, one intra-op thread
#: each).
SMALL_CALL_TOKENS = 1024


class BiEncoder(LoadedModel):
    """A BERT_DOT encoder: transformers ``AutoModel`` + cls/mean pooling + dot/cos.

    Build with :meth:`load`. Vectors agree with ``sentence_transformers.SentenceTransformer``
    on the same model directory (mean cosine >= 0.999, checked in the tests and benchmark).
    """

    KIND = "encoder"

    def __init__(
        self,
        config: EncoderConfig,
        path: Path,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        pooling: str,
        similarity: str,
        max_length: int,
        fingerprint: str,
        device: torch.device,
        query_prefix: str = "",
        document_prefix: str = "",
        default_prompt: str = "",
        lowercase: bool = False,
    ) -> None:
        super().__init__(config, path, model, tokenizer, device, fingerprint=fingerprint,
                         max_length=max_length)  # fmt: skip
        self.pooling = pooling
        self.similarity = similarity
        self.dim = int(model.config.hidden_size)
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.default_prompt = default_prompt
        self.lowercase = lowercase
        # Inference only, always under this autocast: its linear weights cast once, not per call.
        store_linear_weights(model, self.autocast_dtype)
        texts, tokens = default_batch(device)
        #: texts per forward pass (``config.batch_size`` or the device's default)
        self.batch_size = config.batch_size or texts
        if config.max_batch_tokens is not None:
            tokens = config.max_batch_tokens
        self.max_batch_tokens = tokens if config.fast else 0
        #: intra-op threads of small calls (None: the free cores, see SMALL_CALL_TOKENS); the
        #: latency benchmark sets it to compare fixed settings.
        self.single_query_threads: int | None = None

    @classmethod
    def load(cls, config: EncoderConfig | str | None = None, **settings: Any) -> BiEncoder:
        """Resolve, load and set up the encoder that ``config`` describes.

        ``BiEncoder.load("sentence-transformers/all-MiniLM-L6-v2", device="cpu")``: a model
        (directory or hub name) and :class:`EncoderConfig` fields, or a whole config; None:
        the packaged default model.

        Defaults for None fields are read from the model's sentence-transformers files
        (modules.json, 1_Pooling/config.json, a Normalize module, sentence_bert_config.json,
        config_sentence_transformers.json); a plain Hugging Face directory gives cls, dot and
        min(512, max positions). all-MiniLM-L6-v2 gives mean, cos, 256.

        Raises:
            DotcatError: unresolvable model, unsupported pooling/similarity/modules, or a
                max_length beyond the model's position embeddings.
        """
        # transformers takes ~1 s to import; BM25-only search and index checks load no model.
        from transformers import AutoModel, AutoTokenizer

        config = make_config(EncoderConfig, config, settings)
        config.validate()
        path = resolve_model(config.model)
        st = read_st_settings(path)
        read_model_config(path, st.transformer_dir)
        pooling, similarity = st.pooling_and_similarity(config.pooling, config.similarity)

        device = model_device(config)
        try:
            tokenizer = AutoTokenizer.from_pretrained(st.transformer_dir)
        except (OSError, ValueError) as e:
            raise DotcatError(f"{path}: cannot load its tokenizer ({first_line(e)})") from None
        model = load_hf_model(AutoModel, st.transformer_dir)
        model.eval().requires_grad_(False).to(device)

        max_length = config.max_length or st.max_length or min(512, max_positions(model.config))
        max_length = within_positions(max_length, 2, model.config)
        encoder = cls(
            config, path, model, tokenizer, pooling=pooling, similarity=similarity,
            max_length=max_length, fingerprint=weights_fingerprint(path), device=device,
            query_prefix=or_prompt(config.query_prefix, st.query_prompt),
            document_prefix=or_prompt(config.document_prefix, st.document_prompt),
            default_prompt=st.default_prompt, lowercase=st.lowercase,
        )  # fmt: skip
        if encoder.int8:
            encoder.onnx = encoder._int8_runner(st.transformer_dir)
        logger.info("encoder %s: %s pooling, %s similarity, max_length %d, dim %d, %s, %s",
                    config.model, pooling, similarity, encoder.max_length, encoder.dim, device,
                    encoder.precision)  # fmt: skip
        return encoder

    # -- encoding -------------------------------------------------------------------------

    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        *,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        out: np.ndarray | None = None,
        progress: Any = None,
        pad_multiple: int = 1,
        prompt: str | None = None,
    ) -> Any:
        """Encode texts after ``prompt``, as ``SentenceTransformer.encode`` does (None: the
        model's ``default_prompt_name`` prompt, none if it names none).

        One string gives a ``(dim,)`` vector, a sequence a float32 ``(len(sentences), dim)``
        array (a tensor with ``convert_to_tensor``, a list of tensors with
        ``convert_to_numpy=False``). Texts are tokenized, sorted by token count, batched (at
        most ``batch_size`` texts and, on CPU, ``max_batch_tokens`` padded tokens per batch),
        encoded under ``torch.inference_mode`` and written back in the input order. Rows are
        L2-normalised when ``similarity == "cos"`` or ``normalize_embeddings``.

        Args:
            sentences: one text, or texts (a list, or any sequence that slices, like a
                datasets column).
            batch_size: overrides the encoder's (``config.batch_size`` or the device's).
            show_progress_bar: a tqdm bar over texts.
            normalize_embeddings: L2-normalise each vector (the dot product is then the cosine).
            convert_to_numpy, convert_to_tensor: the output's type, as sentence-transformers'.
            out: write into this ``(len(sentences), dim)`` float32 array (e.g. an
                ``np.memmap``) instead of a new one.
            progress: a caller's bar (see :func:`dotcat.progress.progress_bar`) to advance
                by each batch's texts, e.g. one bar over a whole corpus encoded in chunks.
            pad_multiple: pad each text to a multiple of this many tokens and batch texts of
                one width only, so each vector is the same whatever the batch (1: pad to the
                batch's longest, the cheapest; see :mod:`dotcat.models.batching`).
        """
        single = isinstance(sentences, str)
        sentences = prefixed(self.default_prompt if prompt is None else prompt, sentences)
        if single and out is not None:
            raise ValueError("out is for a sequence of texts, not one string")
        vectors = self._encode_all(
            [sentences] if single else sentences, batch_size, bool(show_progress_bar), out,
            progress, pad_multiple,
        )  # fmt: skip
        if normalize_embeddings:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        vectors = vectors[0] if single else vectors
        if convert_to_numpy and not convert_to_tensor:
            return vectors
        tensor = torch.from_numpy(vectors)  # where neither: a list of one tensor per text
        return tensor if convert_to_tensor or tensor.ndim == 1 else list(tensor)

    def _encode_all(
        self,
        texts: Sequence[str],
        batch_size: int | None,
        show_progress: bool,
        out: np.ndarray | None,
        progress: Any,
        pad_multiple: int,
    ) -> np.ndarray:
        """:meth:`encode` of a sequence into a float32 ``(len(texts), dim)`` array."""
        n = len(texts)
        if out is None:
            out = np.empty((n, self.dim), dtype=np.float32)
        elif out.shape != (n, self.dim) or out.dtype != np.float32:
            raise ValueError(f"out must be float32 {(n, self.dim)}, got {out.dtype} {out.shape}")
        batch_size = batch_size or self.batch_size
        workers = self._workers()
        bar_lock = threading.Lock()
        own = progress_bar(
            total=n, desc="encoding", unit="text", enabled=show_progress and progress is None
        )
        bar = progress if progress is not None else own
        with own:
            for start in range(0, n, WINDOW):
                window = list(texts[start : start + WINDOW])
                ids = self._tokenize(window)
                lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
                widths, jobs = length_sorted_batches(
                    lengths, batch_size, self.max_batch_tokens, pad_multiple, self.max_length
                )

                def run(
                    idx: np.ndarray,
                    ids: list[np.ndarray] = ids,
                    start: int = start,
                    widths: np.ndarray = widths,
                ) -> None:
                    input_ids, mask = self._collate([ids[i] for i in idx], int(widths[idx].max()))
                    out[start + idx] = self._embed(input_ids, mask)
                    with bar_lock:
                        bar.update(len(idx))

                if len(jobs) == 1 and self._is_small(int(widths.sum())):
                    threads = self.single_query_threads or free_threads(torch.get_num_threads())
                    run_jobs(jobs, run, 1, threads=threads)
                else:
                    run_jobs(jobs, run, workers)
        return out

    def encode_queries(self, texts: str | Sequence[str], **kwargs: Any) -> Any:
        """Encode queries: :meth:`encode` on ``query_prefix + text``, padded to multiples of
        :data:`QUERY_PAD_MULTIPLE` (a query's vector never depends on its batch)."""
        kwargs.setdefault("pad_multiple", QUERY_PAD_MULTIPLE)
        return self.encode(texts, prompt=self.query_prefix, **kwargs)

    #: sentence-transformers' name (``SentenceTransformer.encode_query``).
    encode_query = encode_queries

    def query_tokens(self, text: str) -> int:
        """How many tokens the query ``text`` is, special tokens and prefix included, before
        the cut at :attr:`max_length` that encoding makes."""
        text = self.query_prefix + text
        text = text.lower() if self.lowercase else text
        # verbose=False: counting is the point here, so no "sequence too long" warning from
        # transformers (the caller says it once, in dotcat's words).
        return len(self.tokenizer(text, verbose=False)["input_ids"])

    def encode_documents(self, texts: str | Sequence[str], **kwargs: Any) -> Any:
        """Encode documents: :meth:`encode` on ``document_prefix + text``."""
        return self.encode(texts, prompt=self.document_prefix, **kwargs)

    #: sentence-transformers' name (``SentenceTransformer.encode_document``).
    encode_document = encode_documents

    def manifest_entry(self) -> dict[str, Any]:
        """What an index records about the encoder that made its vectors."""
        return encoder_record(self, self.query_path())

    def query_path(self) -> tuple[str, str]:
        """(precision, runtime) of the queries that an index built by this encoder records,
        and that searches of it run at under ``auto``: for ``precision="auto"`` on CPU, the
        queries' entry of :data:`dotcat.models.runtime.AUTO_ENCODER` (on the documents' int8
        runtime); otherwise the documents' own (:attr:`precision`, :attr:`backend`)."""
        own = (self.precision, self.backend)
        if self.config.precision != "auto" or self.device.type != "cpu" or not self.config.fast:
            return own
        precision = auto_precision("encoder", self.device, "queries")
        # int8 queries meet int8 documents only (of their runtime): those are ``own``.
        return own if precision in (self.precision, "int8") else (precision, "torch")

    def __repr__(self) -> str:
        return encoder_repr(self, device=self.device, precision=repr(self.precision))

    # -- internals ------------------------------------------------------------------------

    def _tokenize(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each text as a compact int32 array, tokenized a slice at a time.

        A tokenizer's batch result keeps every token as a Python int and a Rust-side encoding object
        until it is dropped (for 8,192 documents of 300 tokens, about half a GB); slices of
        :data:`TOKENIZE_SLICE` texts keep that bounded. A long text is tokenized only as far as its
        first ``max_length`` tokens need (:func:`dotcat.models.tokens.truncated`): truncating, a
        tokenizer still reads all of a 50 MB document.
        """
        if self.lowercase:
            texts = [t.lower() for t in texts]

        def tokenize(batch: list[str]) -> list[list[int]]:
            return self.tokenizer(
                batch,
                truncation=True,
                max_length=self.max_length,
                padding=False,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]

        ids: list[np.ndarray] = []
        for start in range(0, len(texts), TOKENIZE_SLICE):
            window = texts[start : start + TOKENIZE_SLICE]
            got = truncated(tokenize, window, self.max_length)
            ids += [np.asarray(x, dtype=np.int32) for x in got]
        return ids

    def _collate(self, seqs: list[np.ndarray], width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-pad to ``width`` tokens: (input_ids, attention_mask)."""
        input_ids, mask = pad_ids(seqs, width, self._pad_id)
        return (
            torch.from_numpy(input_ids).to(self.device, non_blocking=True),
            torch.from_numpy(mask).to(self.device, non_blocking=True),
        )

    def _embed(self, input_ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        if self.onnx is not None:  # ONNX Runtime: one text per call; OpenVINO: a batch
            return embed(self.onnx, self.pooling, self.similarity, input_ids, mask)
        with autocast(self.device, self.autocast_dtype):
            output = self.model(input_ids=input_ids, attention_mask=mask)
        vectors = pool(self.pooling, output[0].float(), mask)
        if self.similarity == "cos":
            vectors = l2_normalize(vectors)
        return vectors.cpu().numpy()

    def _is_small(self, tokens: int) -> bool:
        """A call small enough for one intra-op thread (CPU, fast path, ``SMALL_CALL_TOKENS``)."""
        return self.device.type == "cpu" and self.config.fast and tokens <= SMALL_CALL_TOKENS
