"""An index built and tuned: what ``dotcat index`` runs (:func:`build_and_tune`).

:func:`dotcat.index.build.build_index` writes the index directory (FAISS, BM25, documents);
:func:`tune_fusion` then chooses its hybrid fusion on the data's dev queries and records it in
the manifest, so a hybrid search of the index fuses as its data prefers. On an index built from
the same folder (or corpus file) it brings the index up to date instead
(:func:`dotcat.index.sync.sync_index`), the fusion chosen when it was built kept. The tuning
needs the search pipeline (dense and BM25 runs of the dev queries), so it sits above
:mod:`dotcat.search`, beside the training that also uses it; the experiment runner and the
command line call it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotcat.data.sources import open_source
from dotcat.data.splits import find_dev_split
from dotcat.index import build_index
from dotcat.index.config import IndexConfig
from dotcat.index.manifest import Manifest, built_from, update_manifest
from dotcat.index.sync import SyncResult, given_settings, record_files, sync_index
from dotcat.models import BiEncoder
from dotcat.models.config import EncoderConfig
from dotcat.options import FUSION_DEPTH
from dotcat.search.config import PipelineConfig
from dotcat.search.fusion import Fusion, choose_fusion
from dotcat.search.pipeline import SearchPipeline

__all__ = ["BuiltIndex", "build_and_tune", "tune_fusion"]

logger = logging.getLogger(__name__)


def tune_fusion(
    index_dir: str | Path, data: str | Path, *, device: str = "auto", precision: str = "auto"
) -> Fusion | None:
    """Choose an index's hybrid fusion on the data's dev queries, and record it in the index.

    The dev queries are the data's ``dev`` split, else the share of ``train`` that ``dotcat
    train`` holds out (:func:`dotcat.data.splits.find_dev_split`); the test split is never
    used. Both first stages fetch :data:`FUSION_DEPTH` candidates per dev query and
    :func:`dotcat.search.fusion.choose_fusion` picks RRF or a linear weight by nDCG@10 with
    the paired one-standard-error rule (:mod:`dotcat.evaluation.choice`).

    Returns:
        The recorded fusion, or None when the data has no dev queries (the default, linear
        0.5, stays) or the index has no BM25 side.
    """
    dev = find_dev_split(data)
    if dev is None:
        return None
    config = PipelineConfig(first_stage="dense", device=device, precision=precision)
    pipeline = SearchPipeline(index_dir, config)
    if pipeline.bm25 is None:
        return None
    dense = pipeline.run(dev.queries, FUSION_DEPTH, first_stage="dense")
    sparse = pipeline.run(dev.queries, FUSION_DEPTH, first_stage="bm25")
    fusion = choose_fusion(dense, sparse, dev.qrels, dev.source)
    update_manifest(index_dir, lambda manifest: setattr(manifest, "fusion", fusion.to_json()))
    return fusion


@dataclass(frozen=True)
class BuiltIndex:
    """What :func:`build_and_tune` made: the index's manifest, and the hybrid fusion chosen on
    the data's dev queries (None: no BM25 side, a shard, or no dev queries: linear 0.5 stays);
    ``sync``: what a sync did, where the index was brought up to date instead of built."""

    manifest: Any
    fusion: Fusion | None
    seconds: float
    sync: SyncResult | None = None

    def __repr__(self) -> str:
        manifest = self.manifest
        fusion = self.fusion.describe() if self.fusion else None
        return (
            f"BuiltIndex(documents={manifest.documents['count']}, "
            f"encoder={manifest.encoder.get('name')!r}, bm25={bool(manifest.bm25)}, "
            f"fusion={fusion!r}, seconds={self.seconds:.1f})"
        )


def build_and_tune(
    corpus: Any,
    index_dir: str | Path,
    encoder: Any = None,
    config: IndexConfig | None = None,
    *,
    overwrite: bool = False,
    fresh: bool = False,
    corpus_options: Any = None,
    show_progress: bool = True,
) -> BuiltIndex:
    """Build an index (:func:`dotcat.index.build.build_index`) and, with BM25 inside, choose its
    hybrid fusion on the data's dev queries (:func:`tune_fusion`): what ``dotcat index`` and
    ``dotcat experiment`` do, so that a hybrid search of the index runs the fusion its data
    prefers. A shard is not tuned: its merge is (``dotcat merge`` then this fusion choice).

    ``dotcat.build_and_tune("my-docs/", "my-index")`` indexes a folder with the packaged
    default model, BM25 beside it (:class:`IndexConfig`'s defaults are the command line's).

    Args:
        corpus: what :func:`dotcat.index.build.build_index` reads (a path, or documents in Python).
        encoder: a model name or directory, an :class:`EncoderConfig`, or a loaded
            :class:`~dotcat.models.bi_encoder.BiEncoder`; None: the packaged default model.
        config, overwrite, fresh, corpus_options, show_progress: as
            :func:`dotcat.index.build.build_index`.
    """
    if not overwrite and built_from(corpus, index_dir):
        loaded = encoder if isinstance(encoder, BiEncoder) else None
        settings = given_settings(config, None if loaded else encoder)
        if isinstance(encoder, str):
            settings["model"] = encoder
        done = sync_index(corpus, index_dir, settings=settings, corpus_options=corpus_options,
                          encoder=loaded, show_progress=show_progress)  # fmt: skip
        manifest = Manifest.read(index_dir)
        fusion = Fusion.from_json(manifest.fusion) if manifest.fusion else None
        return BuiltIndex(manifest, fusion, done.seconds, done)
    config = config or IndexConfig()
    if encoder is None or isinstance(encoder, str):
        encoder = EncoderConfig(model=encoder or "default", device=config.device)
    start = time.perf_counter()
    # The folder walked before the build: a file changed while it is read is read again by
    # the next sync (record_files).
    source = open_source(corpus, corpus_options) if isinstance(corpus, (str, Path)) else None
    manifest = build_index(
        corpus, index_dir, encoder, config, overwrite=overwrite, show_progress=show_progress,
        fresh=fresh, corpus_options=corpus_options,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    fusion = Fusion.from_json(manifest.fusion) if manifest.fusion else None  # (unread text)
    try:
        if config.shard is None:
            record_files(index_dir, source, corpus_options)
        if config.bm25 and config.shard is None and isinstance(corpus, (str, Path)):
            settings = getattr(encoder, "config", encoder)  # a loaded encoder's EncoderConfig
            tuned = tune_fusion(index_dir, corpus, device=settings.device,
                                precision=settings.precision)  # fmt: skip
            if tuned is not None:  # as tune_fusion recorded it in the index
                fusion, manifest.fusion = tuned, tuned.to_json()
    except KeyboardInterrupt:
        logger.warning("%s is built and in place; interrupted before its hybrid fusion was "
                       "chosen on dev queries (build it again to choose one)",
                       index_dir)  # fmt: skip
        raise
    return BuiltIndex(manifest, fusion, seconds)
