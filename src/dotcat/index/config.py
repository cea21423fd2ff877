"""How to build and merge index directories: settings checked before any model or corpus loads.

:class:`IndexConfig` (:func:`dotcat.index.build_index`, ``dotcat index``) and
:class:`MergeConfig` (:func:`dotcat.index.shards.merge_indexes`, ``dotcat merge``). Each field
carries its help text and, for a closed list, its choices (:mod:`dotcat.options`). What needs
the model or the corpus (the FAISS spec against the dimension and the corpus size, the target
path, an interrupted build's plan) is checked by :mod:`dotcat.index.preflight`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dotcat.errors import SettingError
from dotcat.index.passages import PassageConfig
from dotcat.options import DEVICE_HELP, ON_DISK, Check, Settings, at_least, device_checks, setting

#: FAISS search-time defaults an index records (IVF lists visited, HNSW's candidate list),
#: applied when the spec has the structure they control: IVF with FAISS's default nprobe=1
#: loses much recall; these are moderate, widely used settings.
DEFAULT_SEARCH_PARAMS = {"nprobe": 32, "efSearch": 128}


def parse_shard(value: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``: shard I (0-based) of N."""
    try:
        i, n = (int(part) for part in value.split("/"))
    except ValueError:
        raise SettingError("shard", f"shard {value!r}: expected I/N, e.g. 0/4") from None
    return check_shard((i, n))


def check_shard(shard: tuple[int, int]) -> tuple[int, int]:
    """A shard ``(i, n)`` with ``0 <= i < n``, else a one-line error."""
    i, n = shard
    if n < 1 or not 0 <= i < n:
        raise SettingError("shard", f"shard {i}/{n}: expected I/N with 0 <= I < N")
    return i, n


@dataclass(repr=False)
class IndexConfig(Settings):
    """How to build the FAISS side of an index (and the BM25 one beside it).

    Attributes:
        faiss_spec: a FAISS factory string; ``Flat`` is exact search.
        device: ``auto`` (GPU when faiss-gpu sees one), ``cpu`` or ``cuda``.
        search_params: search-time defaults stored in the manifest (``nprobe``, ``efSearch``).
        chunk_size: documents handed to the encoder at a time (bounds memory).
        keep_vectors: keep ``vectors.npy`` in the index directory (to re-index with another
            FAISS spec without encoding again).
        seed: seed of the training sample.
        bm25: also build a BM25 index (bm25s, memory-mapped at search time) into the index
            directory, so BM25 and hybrid search run from it without the corpus (the
            default, as ``dotcat index``: hybrid search is the safer first stage).
        shard: ``(i, n)``: index only shard ``i`` of ``n`` (0-based), the ``i``-th of ``n``
            contiguous, equal position ranges of the corpus (see :mod:`dotcat.index.shards`).
        ray: encode on a Ray cluster (:mod:`dotcat.index.ray_encoding`): ``"local"`` starts
            one on this machine, else a Ray address (``"auto"``, ``"ray://host:10001"``).
        ray_workers: encoder actors on Ray (None: one per GPU, else one per CPU).
        passages: how long documents are split into passages
            (:class:`~dotcat.index.passages.PassageConfig`); ``False`` is short for
            ``PassageConfig(enabled=False)``: one vector per document, cut at the encoder's
            window.
    """

    faiss_spec: str = setting(
        "Flat", help="FAISS factory string, e.g. Flat (exact), HNSW32, IVF4096,Flat."
    )
    device: str = setting("auto", help=DEVICE_HELP)
    search_params: dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_SEARCH_PARAMS),
        metadata={"help": "FAISS search-time defaults recorded in the index (nprobe, efSearch)."},
    )
    chunk_size: int = setting(8192, help="Documents per chunk: the unit saved to disk and resumed.")
    keep_vectors: bool = setting(False, help="Keep vectors.npy in the index.")
    seed: int = setting(0, help="Seed of FAISS's training sample.")
    bm25: bool = setting(
        True,
        help="Also build a BM25 index inside (for BM25 and hybrid search); with a BEIR dir that "
        "has dev or train qrels, the hybrid fusion is chosen on its dev queries.",
    )
    shard: tuple[int, int] | None = setting(
        None, help="I/N: index only the I-th (0-based) of N equal parts of the corpus."
    )
    ray: str | None = setting(
        None,
        help="Encode on Ray: 'local' (this machine), 'auto', host:port or ray://host:10001 "
        "(needs pip install 'dotcat[ray]').",
    )
    ray_workers: int | None = setting(
        None, help="Encoder actors on Ray (default: one per GPU, else one per CPU)."
    )

    passages: PassageConfig = field(
        default_factory=PassageConfig,
        metadata={"help": "How long documents are split into passages (False: not split)."},
    )

    def __post_init__(self) -> None:
        if isinstance(self.passages, bool):
            self.passages = PassageConfig(enabled=self.passages)

    def checks(self) -> list[Check]:
        return [
            (bool(self.faiss_spec.strip()), "faiss_spec", "faiss_spec is empty; e.g. Flat"),
            at_least("chunk_size", self.chunk_size, 1),
            at_least("ray_workers", self.ray_workers, 1),
            *device_checks("device", self.device),
        ]

    def validate(self) -> None:
        super().validate()
        if self.shard is not None:
            check_shard(self.shard)


@dataclass(frozen=True, repr=False)
class MergeConfig(Settings):
    """How shard indexes are merged into one (:func:`dotcat.index.shards.merge_indexes`)."""

    faiss_spec: str | None = setting(
        None, help="FAISS spec of the merged index (default: the shards')."
    )
    on_disk: str = setting(
        "auto",
        help="IVF lists on disk: auto (when over half the free memory), yes, no.",
        choices=ON_DISK,
    )
    bm25: bool | None = setting(
        None, help="Build BM25 over the merged corpus (default: as the shards)."
    )
