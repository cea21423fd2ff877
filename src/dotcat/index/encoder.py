"""The encoder an index was built with, rebuilt from its manifest.

Queries (:class:`dotcat.search.dense.DenseRetriever`) and added documents
(:func:`dotcat.index.updates.add_documents`) must be encoded as the index's documents were:
same model, pooling, similarity, maximum length, prefixes and a precision that meets the
index's. The manifest records all of them; :func:`dotcat.index.manifest.check_encoder` then
refuses a loaded encoder whose weights or settings differ.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from dotcat.index.manifest import int8_runtime
from dotcat.models import EncoderConfig
from dotcat.models.exported_encoder import EXPORTED_PRECISIONS, try_load
from dotcat.models.resolve import ALIASES
from dotcat.models.runtime import autocast_rule, cpu_kind, runs_on_cpu

logger = logging.getLogger(__name__)


def encoder_config_from_manifest(
    encoder_entry: Mapping,
    model: str | None = None,
    device: str = "auto",
    precision: str = "auto",
    *,
    side: str = "queries",
) -> EncoderConfig:
    """The encoder config that reproduces the index's vectors for one ``side``: ``queries``
    (a search) or ``documents`` (added documents); ``auto`` precision: one that meets the
    index's, see :func:`_follow_index`.

    ``model`` overrides where the weights come from (e.g. a copy of the model elsewhere); the
    weights fingerprint is checked afterwards either way.
    """
    if model is None:
        model = recorded_path = encoder_entry.get("path")
        if not (recorded_path and Path(recorded_path).is_dir()):
            model = encoder_entry["name"]
            if recorded_path and model not in ALIASES:
                logger.warning("the index's model %s is gone: looking for %r (give where it is "
                               "now with --model DIR)", recorded_path, model)  # fmt: skip
    precision = _follow_index(precision, recorded_precision(encoder_entry, side), device)
    int8 = encoder_entry.get("precision") == precision == "int8"
    return EncoderConfig(
        model=str(model),
        pooling=encoder_entry["pooling"],
        similarity=encoder_entry["similarity"],
        max_length=encoder_entry["max_length"],
        # Prefixes change the vectors too (e.g. E5's "query: "); older manifests lack them.
        query_prefix=encoder_entry.get("query_prefix"),
        document_prefix=encoder_entry.get("document_prefix"),
        device=device,
        precision=precision,
        # int8 vectors are met by the runtime that made them (check_encoder refuses others).
        backend=int8_runtime(encoder_entry) if int8 else "auto",
    )


def load_query_encoder(config: EncoderConfig):
    """The encoder of a search's queries: an exported one where it gives the vectors ``config``
    asks for without PyTorch (:mod:`dotcat.models.exported_encoder`: a search from the shell
    then answers in a fraction of the time), else a :class:`~dotcat.models.bi_encoder.BiEncoder`."""
    return _exported_or_torch(config, "queries")


def load_document_encoder(config: EncoderConfig):
    """The encoder of documents added to an index (a sync, ``dotcat add``, an HTTP write): as
    :func:`load_query_encoder`, so a sync of a few files loads no PyTorch
    (eval/benchmarks/results/sync.md)."""
    return _exported_or_torch(config, "documents")


def _exported_or_torch(config: EncoderConfig, side: str):
    encoder, why = try_load(config)
    if encoder is not None:
        return encoder
    logger.info("%s encoder in PyTorch: %s", side, why)
    from dotcat.models.bi_encoder import BiEncoder  # PyTorch and transformers: seconds

    return BiEncoder.load(config)


def prepare_queries(encoder_entry: Mapping, device: str = "auto") -> None:
    """Make now what a search of an index with this encoder runs its queries on (the export
    of :func:`load_query_encoder`), so that its first search does not (``dotcat index``)."""
    encoder, why = try_load(encoder_config_from_manifest(encoder_entry, device=device))
    if encoder is None:
        logger.info("queries of this index run in PyTorch: %s", why)


def recorded_precision(encoder_entry: Mapping, side: str = "queries") -> str | None:
    """The precision an index records for one side: its documents' (``precision``), or the
    one its build chose for its queries (``queries``; indexes from before the choice was
    recorded searched at their documents' precision)."""
    queries = encoder_entry.get("queries") if side == "queries" else None
    return (queries or {}).get("precision") or encoder_entry.get("precision")


def _follow_index(requested: str, built: str | None, device: str) -> str:
    """``auto`` follows the index: on a CPU, the side's recorded precision where an export runs
    it without PyTorch (:data:`~dotcat.models.exported_encoder.EXPORTED_PRECISIONS`: fp32,
    int8); else the autocast rule of this machine (bf16 where native, else fp32: either meets
    fp32 and bf16 documents, see :func:`dotcat.index.manifest.precisions_compatible`).
    Manifests from before int8 record no precision: their vectors are fp32 or bf16."""
    if requested != "auto":
        return requested
    if built in EXPORTED_PRECISIONS and runs_on_cpu(device):
        return built
    return requested if built == "int8" else autocast_rule(device)


def describe_precision(encoder_entry: Mapping, requested: str = "auto") -> str:
    """One line on what an index's vectors were made at and what its searches run at, e.g.
    ``precision: documents int8 (openvino), queries int8 (openvino); auto on this CPU
    (vnni+bf16)``."""

    def side(precision: str | None, backend: str | None) -> str:
        return f"{precision} ({backend})" if precision == "int8" else str(precision)

    queries = encoder_entry.get("queries") or {}
    documents = side(encoder_entry.get("precision"), encoder_entry.get("backend"))
    searched = side(recorded_precision(encoder_entry), queries.get("backend"))
    why = f"auto on this CPU ({cpu_kind()})" if requested == "auto" else f"--precision {requested}"
    return f"precision: documents {documents}, queries {searched}; {why}"
