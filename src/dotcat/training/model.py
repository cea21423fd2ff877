"""The BERT_DOT encoder being trained: a Hugging Face transformer, pooling and a similarity.

``s(q, d) = f_sim(pool(BERT(q)), pool(BERT(d)))`` with one shared encoder for queries and
documents (the "siamese" network of Sentence-BERT, Reimers & Gurevych 2019, and the BERT_DOT
of DPR, Karpukhin et al. 2020), pooling ``cls`` (the ``[CLS]`` vector) or ``mean`` (the mean of
the non-padding token vectors), and ``f_sim`` the dot product or the cosine (the vectors are
then L2-normalised, so the dot product of the outputs *is* the cosine).

:class:`TrainableBiEncoder` is a plain ``nn.Module`` whose :meth:`~TrainableBiEncoder.forward`
returns embeddings with autograd, so the losses of :mod:`dotcat.losses`, GradCache and DDP can
be put around it. :meth:`~TrainableBiEncoder.save` writes a sentence-transformers directory
(the layout of its ``Transformer -> Pooling [-> Normalize]`` models), so the trained model loads
in ``sentence_transformers.SentenceTransformer`` and in
:class:`dotcat.models.bi_encoder.BiEncoder`, and ``dotcat index --model DIR`` takes it unchanged.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from torch import Tensor, nn
from transformers import AutoModel, AutoTokenizer

from dotcat.errors import DotcatError, first_line
from dotcat.files import move_into, writing
from dotcat.models import cls_pooling, mean_pooling, resolve_model
from dotcat.models.batching import CPU_MAX_BATCH_TOKENS, length_sorted_batches, pad_ids
from dotcat.models.loading import check_max_length, load_hf_model, max_positions
from dotcat.models.resolve import read_model_config
from dotcat.models.runtime import quiet_transformers
from dotcat.models.st_config import read_st_settings
from dotcat.options import POOLINGS, SIMILARITIES

logger = logging.getLogger(__name__)

DEFAULT_POOLING = "cls"
DEFAULT_SIMILARITY = "dot"
DEFAULT_MAX_LENGTH = 512

# The sentence-transformers files written by :meth:`TrainableBiEncoder.save` (besides the
# Hugging Face model and tokenizer files). The module types are the long-standing
# ``sentence_transformers.models.*`` names, which every sentence-transformers from 2.x on loads.
_MODULE_TYPES = {
    "transformer": "sentence_transformers.models.Transformer",
    "pooling": "sentence_transformers.models.Pooling",
    "normalize": "sentence_transformers.models.Normalize",
}
_ST_FILES = (
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling",
    "2_Normalize",
)


class TrainableBiEncoder(nn.Module):
    """BERT_DOT with autograd: tokenizer + transformer + pooling (+ L2 normalisation for cos).

    Args:
        model: a Hugging Face ``AutoModel`` (its ``last_hidden_state`` is pooled).
        pooling: ``"cls"`` or ``"mean"``.
        similarity: ``"cos"`` (outputs L2-normalised) or ``"dot"``.
        max_length: default truncation length in tokens (documents); also the
            ``max_seq_length`` written by :meth:`save`.
        name: where the weights came from (a hub name or a path), for the records.

    Use :meth:`from_pretrained` to load one. Forward: ``model(model.tokenize(texts))`` gives
    ``[len(texts), dim]`` float32 embeddings.

    References:
        - Reimers & Gurevych (2019), "Sentence-BERT: Sentence Embeddings using Siamese
          BERT-Networks", EMNLP, arXiv:1908.10084 (mean pooling, the saved layout).
        - Karpukhin et al. (2020), "Dense Passage Retrieval for Open-Domain Question
          Answering", EMNLP, arXiv:2004.04906 (the ``[CLS]`` bi-encoder, dot product).
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        pooling: str = DEFAULT_POOLING,
        similarity: str = DEFAULT_SIMILARITY,
        max_length: int = DEFAULT_MAX_LENGTH,
        name: str = "",
        *,
        query_prefix: str = "",
        document_prefix: str = "",
        lowercase: bool = False,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise DotcatError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if similarity not in SIMILARITIES:
            raise DotcatError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")
        if max_length < 2:
            raise DotcatError(f"max length must be >= 2, got {max_length}")
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.similarity = similarity
        self.max_length = int(max_length)
        self.name = name
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.lowercase = lowercase
        self.dim = int(model.config.hidden_size)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path = "default",
        *,
        pooling: str | None = None,
        similarity: str | None = None,
        max_length: int | None = None,
    ) -> TrainableBiEncoder:
        """Load a model directory or hub name (resolved by
        :func:`dotcat.models.resolve.resolve_model`).

        ``None`` settings come from the model's sentence-transformers files, read by
        :func:`dotcat.models.st_config.read_st_settings` exactly as
        :class:`dotcat.models.bi_encoder.BiEncoder` reads them (else ``cls``, ``dot``, min(512,
        positions)), as do the query/document prompts and lower-casing: a model trains with the
        settings it will be searched with. The weights are loaded in float32.

        Raises:
            DotcatError: a model or pooling dotcat cannot reproduce, or a ``max_length``
                beyond the model's position embeddings.
        """
        check_max_length(max_length, minimum=2)
        path = resolve_model(str(name_or_path))
        st = read_st_settings(path)
        read_model_config(path, st.transformer_dir)
        if pooling is None and st.pooling is None and st.pooling_error:
            raise DotcatError(f"{st.pooling_error}; pass an explicit pooling (cls or mean)")
        try:
            tokenizer = AutoTokenizer.from_pretrained(st.transformer_dir)
        except (OSError, ValueError) as e:
            raise DotcatError(f"{path}: cannot load its tokenizer ({first_line(e)})") from None
        # float32 whatever dtype the checkpoint was saved in (transformers 5 keeps the saved
        # one): Adam's updates of about lr * 1 = 2e-5 vanish in bf16's 8-bit mantissa.
        model = load_hf_model(AutoModel, st.transformer_dir, dtype=torch.float32)
        positions = max_positions(model.config)
        max_length = max_length or st.max_length or min(DEFAULT_MAX_LENGTH, positions)
        if not 2 <= max_length <= positions:
            raise DotcatError(
                f"max_length {max_length} is outside 2..{positions} (the model's positions)"
            )
        encoder = cls(
            model,
            tokenizer,
            pooling=pooling or st.pooling or DEFAULT_POOLING,
            similarity=similarity or st.similarity or DEFAULT_SIMILARITY,
            max_length=max_length,
            name=str(name_or_path),
            query_prefix=st.query_prompt or "",
            document_prefix=st.document_prompt or "",
            lowercase=st.lowercase,
        )
        logger.info("loaded %s from %s: %s pooling, %s similarity, max length %d, dim %d",
                    name_or_path, path, encoder.pooling, encoder.similarity, encoder.max_length,
                    encoder.dim)  # fmt: skip
        return encoder

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- embedding ----------------------------------------------------------------------------

    def tokenize(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, Tensor]:
        """Tokenize: pad to the longest text, truncate to ``max_length`` (default: the model's).

        Texts are taken as they are (see :meth:`query_texts` and :meth:`document_texts` for
        the model's prompts), lower-cased first if the model says ``do_lower_case``.
        """
        texts = [t.lower() for t in texts] if self.lowercase else list(texts)
        encoded = self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt",
                                 max_length=max_length or self.max_length)  # fmt: skip
        return dict(encoded)

    def forward(self, features: Mapping[str, Tensor]) -> Tensor:
        """``[batch, dim]`` float32 embeddings of tokenized texts, with autograd.

        Pooling is done in float32 (under bf16 autocast the hidden states are bf16; a mean over
        hundreds of tokens is better summed in float32), then L2-normalised for ``cos``.
        """
        device = self.device
        inputs = {k: v.to(device) for k, v in features.items()}
        hidden = self.model(**inputs).last_hidden_state.float()
        mask = inputs["attention_mask"]
        pooled = cls_pooling(hidden, mask) if self.pooling == "cls" else mean_pooling(hidden, mask)
        return F.normalize(pooled, p=2, dim=-1) if self.similarity == "cos" else pooled

    @torch.no_grad()
    def encode(
        self,
        texts: Sequence[str],
        max_length: int | None = None,
        batch_size: int = 64,
        bf16: bool = False,
        max_batch_tokens: int | None = None,
    ) -> np.ndarray:
        """Inference: ``[len(texts), dim]`` float32 array, in eval mode (no dropout).

        Texts are tokenized once, sorted by token count (longest first, so a batch holds
        texts of similar length and little padding) and batched with at most ``batch_size``
        texts and, on CPU, ``max_batch_tokens`` padded tokens (default 2048: the activations
        then stay in cache, 1.2x faster on a 2-core Zen 3 per ``dotcat.models.bi_encoder``);
        rows come back in input order. The module's train/eval mode is restored afterwards.
        """
        max_length = max_length or self.max_length
        if max_batch_tokens is None:
            max_batch_tokens = CPU_MAX_BATCH_TOKENS if self.device.type == "cpu" else 0
        was_training = self.training
        self.eval()
        try:
            out = np.zeros((len(texts), self.dim), dtype=np.float32)
            if not len(texts):
                return out
            lowered = [t.lower() for t in texts] if self.lowercase else list(texts)
            ids = self.tokenizer(
                lowered,
                truncation=True,
                max_length=max_length,
                padding=False,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]
            lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
            _, batches = length_sorted_batches(lengths, batch_size, max_batch_tokens)
            pad = self.tokenizer.pad_token_id or 0
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
                for idx in batches:
                    input_ids, mask = pad_ids([ids[i] for i in idx], int(lengths[idx[0]]), pad)
                    features = {
                        "input_ids": torch.from_numpy(input_ids),
                        "attention_mask": torch.from_numpy(mask),
                    }
                    out[idx] = self(features).float().cpu().numpy()
            return out
        finally:
            self.train(was_training)

    def query_texts(self, texts: Sequence[str]) -> list[str]:
        """``query_prefix + text``: what the model embeds for a query (its prompt, if any)."""
        return [self.query_prefix + t for t in texts]

    def document_texts(self, texts: Sequence[str]) -> list[str]:
        """``document_prefix + text``: what the model embeds for a document."""
        return [self.document_prefix + t for t in texts]

    def freeze_unused_parameters(self) -> list[str]:
        """Freeze (``requires_grad=False``) the parameters that never reach the embeddings.

        E.g. BERT's pooler (a dense layer over ``[CLS]`` for next-sentence prediction): it
        gets no gradient, and DDP without ``find_unused_parameters`` would wait for one
        forever. Found with one forward/backward pass on a two-word input in eval mode (no
        dropout, so no random numbers are used). The frozen weights are still saved.
        """
        was_training = self.training
        self.eval()
        try:
            with torch.enable_grad():
                self(self.tokenize(["a b", "c"], max_length=8)).sum().backward()
            unused = [n for n, p in self.named_parameters() if p.requires_grad and p.grad is None]
            for name, param in self.named_parameters():
                param.grad = None
                if name in unused:
                    param.requires_grad_(False)
        finally:
            self.train(was_training)
        if unused:
            logger.info("frozen %d parameters that do not reach the embeddings", len(unused))
        return unused

    # -- saving -------------------------------------------------------------------------------

    def save(self, out_dir: str | Path) -> Path:
        """Write a sentence-transformers model directory; returns ``out_dir``.

        Files: the Hugging Face weights (``model.safetensors``) and ``config.json``, the
        tokenizer files, ``modules.json`` (``0`` Transformer, ``1_Pooling``, and
        ``2_Normalize`` for cos), ``1_Pooling/config.json`` (the pooling mode),
        ``sentence_bert_config.json`` (``max_seq_length``) and
        ``config_sentence_transformers.json`` (``similarity_fn_name`` ``cosine`` or ``dot``).

        Atomic: everything is written into a temporary directory first. A new ``out_dir`` is
        that directory renamed; an existing one (a training run's output directory, which also
        holds checkpoints and records) gets each file moved in with ``os.replace`` (the
        weights last), so a crash never leaves a truncated file, only possibly the previous
        weights next to the new configuration files. Other files in ``out_dir`` are kept.
        """
        out_dir = Path(out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        parent = out_dir if out_dir.is_dir() else out_dir.parent
        tmp = parent / f".{out_dir.name}.saving-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        with writing(out_dir, remove=[tmp]):  # a full disk: one line, the old model kept
            self._write(tmp)
            if not out_dir.exists():
                os.replace(tmp, out_dir)
            else:
                _move_contents(tmp, out_dir)
                shutil.rmtree(tmp, ignore_errors=True)
        logger.info("saved model to %s", out_dir)
        return out_dir

    def _write(self, directory: Path) -> None:
        with quiet_transformers():
            self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        cos = self.similarity == "cos"
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": _MODULE_TYPES["transformer"]},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": _MODULE_TYPES["pooling"]},
        ]
        if cos:
            modules.append(
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": _MODULE_TYPES["normalize"]}
            )
            (directory / "2_Normalize").mkdir()
        (directory / "1_Pooling").mkdir()
        pooling = {
            "word_embedding_dimension": self.dim,
            "pooling_mode_cls_token": self.pooling == "cls",
            "pooling_mode_mean_tokens": self.pooling == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False,
            "include_prompt": True,
        }
        prefixes = {"query": self.query_prefix, "document": self.document_prefix}
        prompts = {name: prefix for name, prefix in prefixes.items() if prefix}
        versions = {"transformers": transformers.__version__, "pytorch": torch.__version__}
        # The installed version, read without importing the package (~7 s); not needed to write
        # the files, so a missing one is left out.
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions["sentence_transformers"] = importlib.metadata.version("sentence-transformers")
        files = {
            "modules.json": modules,
            "1_Pooling/config.json": pooling,
            "sentence_bert_config.json": {
                "max_seq_length": self.max_length,
                # What training did to its inputs, so every loader lower-cases as it did.
                "do_lower_case": self.lowercase,
            },
            "config_sentence_transformers.json": {
                "__version__": versions,
                "prompts": prompts,
                "default_prompt_name": None,
                "similarity_fn_name": "cosine" if cos else "dot",
            },
        }
        for name, content in files.items():
            with open(directory / name, "w", encoding="utf-8") as f:
                json.dump(content, f, indent=2)
                f.write("\n")


def _move_contents(src: Path, dst: Path) -> None:
    """Move ``src``'s files into ``dst`` (:func:`~dotcat.files.move_into`); drop stale ST dirs."""
    for stale in _ST_FILES:
        target = dst / stale
        if target.is_dir() and not (src / stale).exists():
            shutil.rmtree(target)
    move_into(src, dst)
