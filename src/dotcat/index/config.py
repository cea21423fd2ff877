"""How to build and merge index directories: settings checked before any model or corpus loads.

:class:`IndexConfig` (:func:`dotcat.index.build.build_index`, ``dotcat index``),
:class:`MergeConfig` (:func:`dotcat.index.shards.merge_indexes`, ``dotcat merge``) and
:class:`BM25Config` (the BM25 index beside the dense one, and ``dotcat bm25``). Each field
carries its help text and, for a closed list, its choices (:mod:`dotcat.options`). What needs
the model or the corpus (the FAISS spec against the dimension and the corpus size, the target
path, an interrupted build's plan) is checked by :mod:`dotcat.index.preflight`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dotcat.errors import SettingError
from dotcat.index.passages import PassageConfig
from dotcat.options import (
    DEVICE_HELP,
    ON_DISK,
    Check,
    Settings,
    at_least,
    device_checks,
    setting,
    within,
)

#: bm25s' BM25 variants.
BM25_METHODS = ("lucene", "robertson", "atire")

#: FAISS search-time defaults an index records (IVF lists visited, HNSW's candidate list),
#: applied when the spec has the structure they control: IVF with FAISS's default nprobe=1
#: loses much recall; these are moderate, widely used settings.
DEFAULT_SEARCH_PARAMS = {"nprobe": 32, "efSearch": 128}


def shard_option(name: str, value: str | None) -> tuple[int, int] | None:
    """The command line's ``--shard I/N`` -> ``(I, N)`` with ``0 <= I < N``: shard I (0-based)
    of N (None: the whole corpus)."""
    if value is None:
        return None
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


def shard_range(n: int, shard: tuple[int, int] | None) -> tuple[int, int]:
    """Positions ``[start, stop)`` of shard ``(i, count)`` over ``n`` documents (None: all)."""
    if shard is None:
        return 0, n
    i, count = check_shard(shard)
    return i * n // count, (i + 1) * n // count


@dataclass(repr=False)
class IndexConfig(Settings):
    """How to build the FAISS side of an index (and the BM25 one beside it).

    Attributes:
        faiss_spec: a FAISS factory string; ``Flat`` is exact search.
        device: ``auto`` (GPU when faiss-gpu sees one), ``cpu`` or ``cuda``.
        search_params: search-time defaults stored in the manifest (``nprobe``, ``efSearch``).
        chunk_size: documents read and sorted by length for the encoder at a time (bounds
            memory); their vectors are saved in parts (:mod:`dotcat.index.chunks`).
        keep_vectors: keep ``vectors.npy`` in the index directory (to re-index with another
            FAISS spec without encoding again).
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
            ``PassageConfig(enabled=False)``: one vector per document, cut at the encoder's window.
    """

    faiss_spec: str = setting(
        "Flat",
        help="FAISS factory string, e.g. Flat (exact), HNSW32, IVF4096,Flat.",
        flags=("--faiss",),
    )
    device: str = setting("auto", help=DEVICE_HELP)
    search_params: dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_SEARCH_PARAMS),
        metadata={
            "help": "FAISS search-time defaults recorded in the index (nprobe, efSearch).",
            "cli": False,
        },
    )
    chunk_size: int = setting(
        8192, help="Documents per chunk: the unit read and encoded (saved every minute or so)."
    )
    keep_vectors: bool = setting(False, help="Keep vectors.npy in the index.")
    seed: int = setting(0, help="Seed of FAISS's training sample.")
    bm25: bool = setting(
        True,
        help="Also build a BM25 index inside (for BM25 and hybrid search); with a BEIR dir that "
        "has dev or train qrels, the hybrid fusion is chosen on its dev queries.",
    )
    shard: tuple[int, int] | None = setting(
        None,
        help="I/N: index only the I-th (0-based) of N equal parts of the corpus.",
        cli_type=str | None,
        parse=shard_option,
    )
    ray: str | None = setting(
        None,
        help="Encode on Ray: 'local' (this machine), 'auto', host:port or ray://host:10001 "
        "(needs pip install 'dotcat[ray]').",
        metavar="ADDRESS",
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
        None, help="FAISS spec of the merged index (default: the shards').", flags=("--faiss",)
    )
    on_disk: str = setting(
        "auto",
        help="IVF lists on disk: auto (when over half the free memory), yes, no.",
        choices=ON_DISK,
    )
    bm25: bool | None = setting(
        None,
        help="Build BM25 over the merged corpus (default: when a shard has one).",
        flags=("--bm25/--no-bm25",),
    )


@dataclass(frozen=True, repr=False)
class BM25Config(Settings):
    """BM25 settings. The defaults are Pyserini's for BEIR (k1=0.9, b=0.4, Lucene BM25).

    Attributes:
        k1: term-frequency saturation (larger: repeated terms count more).
        b: length normalisation, 0 (none) to 1 (full).
        stemmer: a PyStemmer (Snowball) algorithm, e.g. ``"english"`` (Porter2) or ``"porter"``
            (the Porter stemmer of Lucene's English analyzer, as Pyserini uses); ``None`` for
            no stemming.
        stopwords: a bm25s stop-word list name (``"en"``: NLTK's 179 English words; Lucene's
            default list has 33), a sequence of words, or ``None`` for none.
        method: bm25s' BM25 variant: ``"lucene"``, ``"robertson"`` or ``"atire"``.
    """

    k1: float = setting(0.9, help="BM25 k1 (Pyserini's BEIR default 0.9).")
    b: float = setting(0.4, help="BM25 b (Pyserini's BEIR default 0.4).")
    stemmer: str | None = setting(
        "english", help="Snowball stemmer (PyStemmer), or None.", cli=False
    )
    stopwords: str | Sequence[str] | None = setting(
        "en", help="bm25s stop-word list name, a list of words, or None.", cli=False
    )
    method: str = setting("lucene", help="bm25s' BM25 variant.", choices=BM25_METHODS, cli=False)

    def __post_init__(self) -> None:
        self.validate()

    def checks(self) -> list[Check]:
        return [at_least("k1", self.k1, 0), within("b", self.b, 0, 1), *self._analysis_checks()]

    def _analysis_checks(self) -> list[Check]:
        """The stemmer and the stop-word list, known to PyStemmer and bm25s (imported only
        when they are not the defaults)."""
        checks = []
        if self.stemmer not in (None, "english"):
            import Stemmer

            known = Stemmer.algorithms()
            why = f"unknown stemmer {self.stemmer!r}: use None or one of {known}"
            checks.append((self.stemmer in known, "stemmer", why))
        if isinstance(self.stopwords, str) and self.stopwords != "en":
            import bm25s

            try:
                bm25s.tokenization._infer_stopwords(self.stopwords)
            except ValueError:
                why = (
                    f"unknown stop-word list {self.stopwords!r}: use a language code such as "
                    "'en', a list of words, or None"
                )
                checks.append((False, "stopwords", why))
        return checks

    def to_dict(self) -> dict[str, Any]:
        """Every setting, JSON-ready (what a BM25 index records)."""
        d = asdict(self)
        if d["stopwords"] is not None and not isinstance(d["stopwords"], str):
            d["stopwords"] = list(d["stopwords"])
        return d
