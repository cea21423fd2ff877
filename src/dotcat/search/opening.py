"""What a pipeline's stages are built from: one index directory, or a folder (or list) of shards.

:func:`open_stages` is where :class:`~dotcat.search.pipeline.SearchPipeline` starts: it checks
the settings against each index (:func:`~dotcat.search.config.check_pipeline`) before anything
loads, then opens one generation of one index under its reading lock
(:class:`~dotcat.search.stages.StageContext`), or the shards
(:class:`~dotcat.search.sharded.ShardedStages`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dotcat.errors import DotcatError, SettingError
from dotcat.index import layout
from dotcat.index.manifest import ENCODER_KEYS
from dotcat.index.shards import open_index, shard_dirs, shard_order
from dotcat.search.cluster import ClusterConfig, is_shard_folder
from dotcat.search.config import FUSION_SETTINGS, PRF_SIDES, check_pipeline
from dotcat.search.lexical import load_bm25
from dotcat.search.sharded import ShardedStages
from dotcat.search.stages import StageContext, entry

__all__ = ["open_stages", "reopen", "shard_paths"]


def shard_paths(index: str | Path | Sequence[str | Path]) -> list[Path]:
    """The shard directories of a folder of shards, or of a list of index directories, in
    shard order."""
    if isinstance(index, str | Path):
        return shard_dirs(Path(index), required=True)
    if not isinstance(index, Sequence) or not all(isinstance(p, str | Path) for p in index):
        raise DotcatError(f"an index is a directory (str or Path), got {index!r:.80}")
    paths = shard_order([Path(p) for p in index])
    if not paths:
        raise DotcatError("no shard index given")
    return paths


def open_stages(
    index: str | Path | Sequence[str | Path], config: Any, cluster: ClusterConfig | None = None
) -> StageContext:
    """What a pipeline's stages are built from: one index directory's
    (:class:`~dotcat.search.stages.StageContext`), or shards' (a folder of them, or a list:
    :class:`ShardedStages`), checked before anything loads.

    Raises:
        DotcatError: the settings, an index or a model named cannot work; ``cluster`` set to
            run on Ray for one index (Ray runs shards).
    """
    if isinstance(index, str | Path) and not is_shard_folder(index):
        check_pipeline(index, config)
        if cluster is not None and cluster.on_ray:
            raise DotcatError(f"{index}: one index, not a folder of shards; Ray runs shards")
        context = _open_one(Path(index), config)
    else:
        paths = shard_paths(index)
        for path in paths:
            check_pipeline(path, config)
        folder = Path(index) if isinstance(index, str | Path) else Path(os.path.commonpath(paths))
        context = ShardedStages(folder, paths, config, cluster or ClusterConfig())
    _check_sides(context, config)
    return context


def _open_one(index_dir: Path, config: Any) -> StageContext:
    """One generation of one index, opened whole under its reading lock."""
    layout.recover_for_reading(index_dir)
    with layout.reading(index_dir) as seen:
        opened = open_index(index_dir, device=config.device,
                            search_params=dict(config.search_params or {}))  # fmt: skip
        context = StageContext(index_dir, opened, load_bm25(index_dir, opened), config)
    context.generation_id = seen
    return context


def _check_sides(context: StageContext, config: Any) -> None:
    """Feedback rewrites one side (:data:`~dotcat.search.config.PRF_SIDES`), the fusion's
    settings fuse two: the first stage this index resolves must read them."""
    first_stage = context.resolve(config.first_stage)
    sides = entry(first_stage).sides
    missing = [s for s in PRF_SIDES[config.prf] if s not in sides]
    if missing:
        raise DotcatError(
            f"{context.index_dir}: prf {config.prf!r} rewrites the {' and '.join(missing)} "
            f"side, and this index's first stage is {first_stage!r}"
        )
    fusing = [name for name in FUSION_SETTINGS if name in config.to_json()]
    if fusing and len(sides) < 2:
        raise SettingError(fusing[0], f"{context.index_dir}: {fusing[0]} applies only to a first "
                           f"stage that fuses, and this index's is {first_stage!r}")  # fmt: skip


def reopen(old: StageContext, config: Any) -> StageContext | None:
    """The generation of ``old``'s index now in place, opened and its first stage built, if it
    is another (None: the same one, or shards).

    The loaded query encoder moves to the new generation where the index's encoder is the same.
    """
    if old.generation_id is None or layout.generation_id(old.index_dir) == old.generation_id:
        return None
    context = open_stages(old.index_dir, config)
    retriever = old.made("dense")
    same = all(context.manifest.encoder.get(k) == old.manifest.encoder.get(k) for k in ENCODER_KEYS)
    if retriever is not None and same:
        moved = copy.copy(retriever)
        moved.index = context.index
        context.shared("dense", lambda: moved)
    context.small_call_threads = old.small_call_threads
    context.stage(context.resolve(config.first_stage))  # built before the swap
    return context
