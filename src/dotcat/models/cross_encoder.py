"""BERT_CAT: the cross-encoder that reads a query and a document together (monoBERT).

``p(relevant | q, d) = sigmoid(BERT([CLS] q [SEP] d [SEP])[CLS] . W_o)`` (Nogueira & Cho 2019,
"Passage Re-ranking with BERT"); the logit ``BERT(...)[CLS] . W_o`` is the ranking score. As in
monoBERT and ``transformers``' ``BertForSequenceClassification``, the [CLS] vector goes through
BERT's pooler (dense + tanh) before the linear head ``W_o``; the model is a
``AutoModelForSequenceClassification`` with one label, so a saved BERT_CAT is a plain Hugging
Face directory that ``sentence_transformers.CrossEncoder`` loads and scores identically (its
``predict`` applies the sigmoid; dotcat returns logits, the same ranking).

Truncation cuts the document first, never the query first (:func:`pair_lengths`): a claim or
question is short and every token of it matters, a long document's head usually carries it.

Scoring is fast on CPU the way :mod:`.bi_encoder` is (measured against sentence-transformers'
``CrossEncoder.predict`` on the same pairs): every distinct query and document is tokenized
once (a re-ranked run repeats each query ``depth`` times), pairs are sorted by length and packed in
token-budget batches, worker threads each run their own batch, ``torch.inference_mode``, bf16/fp16
autocast only where native.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dotcat.errors import DotcatError, first_line
from dotcat.files import move_into, writing
from dotcat.models.batching import (
    CPU_MAX_BATCH_TOKENS,
    WINDOW,
    length_sorted_batches,
    pad_ids,
    run_jobs,
)
from dotcat.models.config import CrossEncoderConfig, make_config
from dotcat.models.int8 import LoadedModel
from dotcat.models.loading import load_hf_model, max_positions, within_positions
from dotcat.models.resolve import read_model_config, resolve_model, weights_fingerprint
from dotcat.models.runtime import autocast, model_device, quiet_transformers
from dotcat.models.st_config import CAT_RECORD, read_cat_record, recorded_interpolation
from dotcat.models.tokens import PairTemplate, truncated
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

#: Default max length of a (query, document) pair when the model does not record one.
DEFAULT_MAX_LENGTH = 256
#: Calls with at most this many pairs are split evenly over the workers (one query's re-ranking).
SMALL_CALL = 64
#: Pairs are padded to a multiple of this many tokens and batched by width, so a pair's logit
#: does not depend on the pairs it is batched with (see :mod:`.batching`).
PAIR_PAD_MULTIPLE = 32


def pair_lengths(query_len: int, doc_len: int, budget: int) -> tuple[int, int]:
    """Tokens kept of the query and of the document when a pair must fit ``budget`` tokens.

    The document is cut first. The query is cut only when, whole, it would leave the document
    less than half the budget; then the document keeps up to half and the query the rest.

    >>> pair_lengths(10, 500, 253)
    (10, 243)
    >>> pair_lengths(400, 500, 253)
    (127, 126)
    """
    if budget < 2:
        raise ValueError(f"a pair needs at least 2 tokens of budget, got {budget}")
    if query_len + doc_len <= budget:
        return query_len, doc_len
    doc_keep = max(budget - query_len, min(doc_len, budget // 2))
    return budget - doc_keep, doc_keep


class CrossEncoder(LoadedModel):
    """A BERT_CAT re-ranker: ``AutoModelForSequenceClassification`` with one logit.

    Build with :meth:`load`; score with :meth:`score` (logits, higher = more relevant).
    ``model`` is a plain ``torch.nn.Module``: training calls it on :meth:`collate` output.
    """

    KIND = "cross-encoder"

    def __init__(
        self,
        config: CrossEncoderConfig,
        path: Path,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        max_length: int,
        device: torch.device,
        trained_head: bool,
    ) -> None:
        # A new head is for training: ``auto`` keeps to the autocast rule for it.
        super().__init__(config, path, model, tokenizer, device, max_length=max_length,
                         fingerprint=weights_fingerprint(path), auto_int8=trained_head)  # fmt: skip
        self.trained_head = trained_head
        self.template = PairTemplate(tokenizer)
        tokens = config.max_batch_tokens
        if tokens is None:
            tokens = CPU_MAX_BATCH_TOKENS if device.type == "cpu" else 0
        self.max_batch_tokens = tokens if config.fast else 0

    @classmethod
    def load(
        cls, config: CrossEncoderConfig | str | None = None, *, seed: int = 0, **settings: Any
    ) -> CrossEncoder:
        """Resolve and load a cross-encoder (or a BERT checkpoint to start one from).

        ``CrossEncoder.load("my-reranker", device="cpu")``: a model (directory or hub name) and
        :class:`CrossEncoderConfig` fields, or a whole config.

        A checkpoint whose ``config.json`` has no single-label sequence-classification head
        (e.g. all-MiniLM-L6-v2, a bi-encoder) gets a new linear head initialised with ``seed``
        and ``trained_head`` is False: fine for training, refused by :meth:`require_trained`.

        Raises:
            DotcatError: unresolvable or unloadable model, a multi-label head, or a max_length
                beyond the model's position embeddings.
        """
        # transformers takes ~1 s to import; a search without re-ranking loads no cross-encoder.
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        config = make_config(CrossEncoderConfig, config, settings)
        config.validate()
        path = resolve_model(config.model)
        read_model_config(path)
        device = model_device(config)
        try:
            model_config = AutoConfig.from_pretrained(path)
            tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise DotcatError(
                f"{path}: cannot load its config or tokenizer ({first_line(e)})"
            ) from None
        architectures = getattr(model_config, "architectures", None) or []
        trained_head = any(a.endswith("ForSequenceClassification") for a in architectures)
        if trained_head and model_config.num_labels != 1:
            raise DotcatError(
                f"{path} is a classifier with {model_config.num_labels} labels; a re-ranker "
                "needs one relevance logit"
            )
        torch.manual_seed(seed)  # the new head (and pooler, if absent) start the same each run
        model = load_hf_model(AutoModelForSequenceClassification, path, num_labels=1)
        model.eval().requires_grad_(False).to(device)

        positions = max_positions(model.config)
        max_length = config.max_length or _recorded_max_length(
            path, tokenizer, positions, trained_head
        )
        max_length = within_positions(max_length, 8, model.config)
        encoder = cls(config, path, model, tokenizer, max_length=max_length, device=device,
                      trained_head=trained_head)  # fmt: skip
        if encoder.int8:
            # The export is of the saved weights: a new, untrained head would not be in it.
            encoder.require_trained()
            encoder.onnx = encoder._int8_runner(path)
        logger.info(
            "cross-encoder %s: max_length %d, %s, %s (%s)%s",
            config.model, encoder.max_length, device, encoder.precision, encoder.backend,
            "" if trained_head else ", new classification head (untrained)",
        )  # fmt: skip
        return encoder

    @property
    def interpolation_alpha(self) -> float | None:
        """The weight of the cross-encoder in ``alpha * cat + (1 - alpha) * first`` that
        ``dotcat train cat`` chose on dev and recorded (None: none recorded)."""
        return recorded_interpolation(read_cat_record(self.path), self.path)

    def require_trained(self) -> None:
        """Refuse to re-rank with a head nobody trained (random scores)."""
        if not self.trained_head:
            raise DotcatError(
                f"{self.path} is not a cross-encoder (no sequence-classification head); train "
                "one with `dotcat train cat` or pass a sentence-transformers CrossEncoder"
            )

    # -- tokenization -----------------------------------------------------------------------

    def _pairs(self, queries: Sequence[str], documents: Sequence[str]) -> list[tuple]:
        """Each ``(queries[i], documents[i])``'s ``(input_ids, token_type_ids)``, cut by
        :func:`pair_lengths`."""
        q_ids, d_ids = self._tokenize_unique(queries), self._tokenize_unique(documents)
        budget = self.max_length - self.template.n_special
        pairs = []
        for q, d in zip(q_ids, d_ids, strict=True):
            lq, ld = pair_lengths(len(q), len(d), budget)
            pairs.append(self.template.build(q[:lq], d[:ld]))
        return pairs

    def collate(
        self, pairs: Sequence[tuple[list[int], list[int]]], width: int | None = None
    ) -> dict[str, torch.Tensor]:
        """Right-padded ``input_ids``, ``token_type_ids``, ``attention_mask`` on the device
        (to ``width`` tokens; default: the longest pair)."""
        width = width or max(len(ids) for ids, _ in pairs)
        input_ids, mask = pad_ids([ids for ids, _ in pairs], width, self._pad_id)
        types, _ = pad_ids([tt for _, tt in pairs], width, 0)
        return {
            "input_ids": torch.from_numpy(input_ids).to(self.device),
            "token_type_ids": torch.from_numpy(types).to(self.device),
            "attention_mask": torch.from_numpy(mask).to(self.device),
        }

    def features(self, queries: Sequence[str], documents: Sequence[str]) -> dict[str, torch.Tensor]:
        """Model inputs for ``(queries[i], documents[i])`` pairs (training uses this)."""
        return self.collate(self._pairs(queries, documents))

    def logits(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[n]`` relevance logits, with autograd when the caller allows it."""
        return self.model(**features).logits.squeeze(-1)

    # -- scoring ----------------------------------------------------------------------------

    def score(
        self,
        queries: Sequence[str],
        documents: Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
    ) -> np.ndarray:
        """float32 logits of the pairs ``(queries[i], documents[i])``; higher = more relevant.

        ``sigmoid(logit)`` is p(relevant). Pairs are cut by :func:`pair_lengths`, sorted by
        length, batched (``batch_size`` pairs and, on CPU, ``max_batch_tokens`` padded tokens
        at most) and scored under ``torch.inference_mode``; outputs are in input order.
        """
        if isinstance(queries, str) or isinstance(documents, str):
            raise TypeError("score() takes sequences of queries and documents, not strings")
        n = len(queries)
        if len(documents) != n:
            raise ValueError(f"{n} queries but {len(documents)} documents")
        out = np.empty(n, dtype=np.float32)
        batch_size = batch_size or self.config.batch_size
        workers = self._workers()
        lock = threading.Lock()
        self.model.eval()
        with progress_bar(total=n, desc="re-ranking", unit="pair", enabled=show_progress) as bar:
            for start in range(0, n, WINDOW):
                stop = min(n, start + WINDOW)
                pairs = self._pairs(queries[start:stop], documents[start:stop])
                lengths = np.fromiter((len(p[0]) for p in pairs), dtype=np.int64, count=len(pairs))
                widths, jobs = length_sorted_batches(
                    lengths, batch_size, self.max_batch_tokens, PAIR_PAD_MULTIPLE, self.max_length
                )
                if len(pairs) <= SMALL_CALL and self._concurrent_calls():
                    # One query at a small depth: every worker gets a share of each width
                    # (latency), not whole batches that leave a worker waiting for the rest.
                    # Not for a runtime whose calls take turns (OpenVINO): it would only add calls.
                    jobs = [
                        part for job in jobs for part in np.array_split(job, workers) if len(part)
                    ]

                def run(
                    idx: np.ndarray, pairs: list = pairs, start: int = start, widths=widths
                ) -> None:
                    features = self.collate([pairs[i] for i in idx], int(widths[idx].max()))
                    out[start + idx] = self._logits_numpy(features)
                    with lock:
                        bar.update(len(idx))

                run_jobs(jobs, run, workers)
        return out

    def score_query(self, query: str, documents: Sequence[str], **kwargs: Any) -> np.ndarray:
        """Logits of one query against each document."""
        return self.score([query] * len(documents), documents, **kwargs)

    def predict(
        self,
        pairs: Sequence[tuple[str, str]] | tuple[str, str],
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        activation_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> Any:
        """Scores of ``(query, document)`` pairs, as ``sentence_transformers.CrossEncoder.
        predict`` gives them: a float32 array, one score for one pair.

        The score is the logit (dotcat's scale everywhere, ``score_kind`` ``logit``);
        ``activation_fn=torch.nn.Sigmoid()`` gives p(relevant), what sentence-transformers
        returns for a model that records no activation of its own. The order is the same.

        Raises:
            DotcatError: the model has no trained head (a bi-encoder checkpoint).
        """
        self.require_trained()
        single = len(pairs) == 2 and all(isinstance(x, str) for x in pairs)
        listed = [pairs] if single else pairs
        scores = self.score(
            [q for q, _ in listed], [d for _, d in listed], batch_size=batch_size,
            show_progress=bool(show_progress_bar),
        )  # fmt: skip
        if activation_fn is not None:
            scores = activation_fn(torch.from_numpy(scores)).numpy()
        return scores[0] if single else scores

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        return_documents: bool = False,
        batch_size: int | None = None,
        show_progress_bar: bool | None = None,
        activation_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> list[dict[str, Any]]:
        """Re-rank your own candidates for one query, as ``sentence_transformers.CrossEncoder.
        rank`` does: ``[{"corpus_id": i, "score": s}]`` (with ``"text"`` when
        ``return_documents``), best first, ties in the documents' order, the top ``top_k``.

        ``corpus_id`` is the document's position in ``documents``; scores as :meth:`predict`.
        """
        scores = self.predict(
            [(query, d) for d in documents], batch_size, show_progress_bar, activation_fn
        )
        order = np.argsort(-scores, kind="stable")[:top_k]
        results = [{"corpus_id": int(i), "score": float(scores[i])} for i in order]
        if return_documents:
            for result in results:
                result["text"] = documents[result["corpus_id"]]
        return results

    # -- saving -----------------------------------------------------------------------------

    def save(self, out_dir: str | Path) -> Path:
        """Write a Hugging Face sequence-classification directory (safetensors + tokenizer).

        The tokenizer records ``model_max_length = max_length``, which both dotcat and
        ``sentence_transformers.CrossEncoder`` read back as the pair length. Written into a
        temporary folder inside ``out_dir`` first, then moved in, the weights last: a crash or
        a full disk leaves the model that was there whole.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".saving-", dir=out))
        with writing(out, remove=[tmp]):
            with quiet_transformers():
                self.model.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.model_max_length = self.max_length
            self.tokenizer.save_pretrained(tmp)
            (tmp / CAT_RECORD).write_text(
                json.dumps({"max_length": self.max_length, "base": self.name}, indent=2) + "\n"
            )
            move_into(tmp, out)
            tmp.rmdir()
        return out

    def describe(self) -> dict[str, Any]:
        """What a run or a training record notes about this cross-encoder."""
        return {
            "name": self.name,
            "path": str(self.path),
            "fingerprint": self.fingerprint,
            "max_length": self.max_length,
            "precision": self.precision,
            "backend": self.backend,
        }

    def __repr__(self) -> str:
        return (
            f"CrossEncoder({self.name!r}, max_length={self.max_length}, device={self.device}"
            f", precision={self.precision!r})"
        )

    # -- internals --------------------------------------------------------------------------

    def _logits_numpy(self, features: dict[str, torch.Tensor]) -> np.ndarray:
        """float32 logits of one inference batch, by ONNX Runtime (int8) or PyTorch."""
        if self.onnx is not None:
            logits = [self.onnx(feeds) for feeds in self.onnx.calls(features)]
            return np.concatenate(logits).reshape(-1).astype(np.float32, copy=False)
        with autocast(self.device, self.autocast_dtype):
            logits = self.logits(features)
        return logits.float().cpu().numpy()

    def _tokenize_unique(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, no special tokens, at most ``max_length`` (pairs are cut
        later, and never use more); each distinct text tokenized once (a run repeats its query
        per document), a long one only that far (:func:`dotcat.models.tokens.truncated`)."""

        def tokenize(batch: list[str]) -> list[list[int]]:
            return self.tokenizer(
                batch,
                add_special_tokens=False,
                truncation=True,
                max_length=self.max_length,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]

        texts = list(texts)
        unique = list(dict.fromkeys(texts))
        got = truncated(tokenize, unique, self.max_length) if unique else []
        ids = dict(zip(unique, got, strict=True))
        return [list(ids[t]) for t in texts]

    def _concurrent_calls(self) -> bool:
        """Whether batches given to several worker threads are scored at the same time."""
        return self.onnx is None or self.onnx.concurrent


def _recorded_max_length(path: Path, tokenizer: Any, positions: int, trained_head: bool) -> int:
    """The pair length a cross-encoder directory records; for a base checkpoint, the default.

    dotcat records it in ``dotcat_cross_encoder.json``; sentence-transformers in the
    tokenizer's ``model_max_length`` (which it also uses). A checkpoint made for retrieval
    records its *passage* length there (all-MiniLM-L6-v2: 512), not a pair length, so a new
    re-ranker starts from :data:`DEFAULT_MAX_LENGTH` unless told otherwise.
    """
    record = read_cat_record(path)
    if record:
        try:
            return int(record["max_length"])
        except (ValueError, KeyError, TypeError) as e:
            raise DotcatError(f"{path / CAT_RECORD}: max_length: unreadable ({e})") from e
    recorded = getattr(tokenizer, "model_max_length", None)
    if trained_head and isinstance(recorded, int) and 8 <= recorded <= positions:
        return recorded
    return min(DEFAULT_MAX_LENGTH, positions)
