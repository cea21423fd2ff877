"""FAISS indexes: build from a factory string, train, add, move to GPU, search.

Every index uses the inner-product metric: with cosine similarity the vectors are
L2-normalised first, so inner product *is* cosine, and BERT_DOT's ``dot`` is inner product.
A spec is any FAISS factory string (``Flat``, ``IVF4096,Flat``, ``HNSW32``, ``IVF1024,PQ64``);
see https://github.com/facebookresearch/faiss/wiki/The-index-factory.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import faiss
import numpy as np

from dotcat.errors import DotcatError
from dotcat.files import writing
from dotcat.index.config import DEFAULT_SEARCH_PARAMS as DEFAULT_SEARCH_PARAMS
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

MAX_TRAIN_VECTORS = 262_144  # k-means quality saturates long before this (256 per centroid x 1k)
MIN_TRAIN_VECTORS = 65_536
TRAIN_PER_CENTROID = 64
ADD_CHUNK = 65_536


def gpu_available() -> bool:
    """True when this faiss build has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def resolve_faiss_device(device: str) -> str:
    """Map ``auto|cpu|cuda`` to where FAISS runs.

    ``--device`` names where the models run; FAISS follows it to the GPU only where this faiss
    build can. ``cuda`` with a CPU-only faiss (faiss-cpu beside a CUDA PyTorch: faiss-gpu
    wheels exist for fewer CUDA versions than PyTorch's) encodes on the GPU and searches on
    the CPU, with a warning, rather than refusing the GPU the encoder could use.
    """
    if device not in ("auto", "cpu", "cuda"):
        raise DotcatError(f"unknown device {device!r}; use auto, cpu or cuda")
    if device == "cpu":
        return "cpu"
    if gpu_available():
        return "cuda"
    if device == "cuda":
        _warn_cpu_faiss()
    return "cpu"


@functools.cache
def _warn_cpu_faiss() -> None:
    logger.warning(
        "device cuda: this faiss build has no GPU support or sees no GPU, so FAISS runs on "
        "the CPU (the models still use the GPU); for GPU indexes: pip install 'dotcat[gpu]'"
    )


def create_index(spec: str, dim: int) -> faiss.Index:
    """An empty inner-product FAISS index from a factory string, with a clear error if bad.

    The factory accepts strings a build cannot use, which would fail only after the encoding
    (hours, for a big corpus): these are refused here, before any encoding:

    * an ID map (``IDMap,Flat``): a build adds vectors by position (``add``, which an ID map
      refuses); ``dotcat add`` wraps an index in its own ID map when it first updates it;
    * an index the factory made with another metric (``HNSW32_PQ8`` is L2 whatever it is
      asked): its scores would not be the inner products the manifest records;
    * NSG, whose graph is built by one ``add`` and never added to (a build adds block by
      block, an update adds later);
    * a trained index that cannot take vectors (an ``add`` of no rows is tried).
    """
    try:
        index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise DotcatError(
            f"invalid FAISS spec {spec!r} for dimension {dim}: {_faiss_reason(e)}"
        ) from None
    problem = _unusable(index, dim)
    if problem:
        raise DotcatError(f"invalid FAISS spec {spec!r} for dimension {dim}: {problem}")
    return index


def _unusable(index: faiss.Index, dim: int) -> str | None:
    """Why a build cannot use this empty index (see :func:`create_index`), or None."""
    if isinstance(faiss.downcast_index(index), (faiss.IndexIDMap, faiss.IndexIDMap2)):
        return (
            "dotcat numbers the vectors itself (and adds its own ID map on the first update); "
            "leave IDMap out"
        )
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        return (
            "FAISS builds this index type with the L2 metric only, and dotcat ranks by inner "
            "product; use another index type"
        )
    if isinstance(faiss.downcast_index(index), faiss.IndexNSG):
        return (
            "an NSG graph is built in one go and never added to, and dotcat adds vectors block "
            "by block (and on updates); use HNSW (e.g. HNSW32)"
        )
    if index.is_trained:
        try:
            index.add(np.zeros((0, dim), dtype=np.float32))
        except RuntimeError as e:
            return f"it cannot take vectors ({_faiss_reason(e)})"
    return None


def _faiss_reason(error: BaseException) -> str:
    """FAISS's C++ error without its source location: "Error in f() at x.cpp:64: Error: ..."."""
    text = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    text = re.sub(r"^Error in .*? at \S+:\d+: ", "", text)
    return re.sub(r"^Error: '.*?' failed: ", "", text)


@dataclass(frozen=True)
class TrainingNeed:
    """One part of an index that trains on vectors, and the fewest vectors it can train on."""

    part: str
    vectors: int
    hint: str = "a smaller setting"  # what would train on fewer vectors


def training_needs(index: faiss.Index) -> list[TrainingNeed]:
    """What an untrained index must learn, read from the index FAISS built (not the string).

    IVF learns one centroid per list; a product quantizer 2^nbits centroids per sub-vector
    (PQ8: 256; ``x4``/fast-scan: 16); a residual quantizer 2^nbits per stage; OPQ's rotation
    trains a 256-centroid PQ; PCA to ``d_out`` dimensions needs ``d_out`` vectors.
    """
    base = faiss.downcast_index(index)
    needs: list[TrainingNeed] = []
    if isinstance(base, faiss.IndexPreTransform):
        for i in range(base.chain.size()):
            transform = faiss.downcast_VectorTransform(base.chain.at(i))
            if isinstance(transform, faiss.OPQMatrix):
                needs.append(TrainingNeed(f"OPQ{transform.M}'s rotation (a 256-centroid PQ)", 256))
            elif isinstance(transform, faiss.PCAMatrix):
                part = f"PCA to {transform.d_out} dimensions"
                needs.append(TrainingNeed(part, transform.d_out, "fewer dimensions"))
        return needs + training_needs(base.index)
    ivf = faiss.try_extract_index_ivf(base)
    if ivf is not None:
        needs.append(TrainingNeed(f"IVF{ivf.nlist} (one centroid per list)", int(ivf.nlist), "IVF"))
    pq = getattr(base, "pq", None)
    if isinstance(pq, faiss.ProductQuantizer):
        part = f"PQ{pq.M}x{pq.nbits} (2^{pq.nbits} = {pq.ksub} centroids per sub-vector)"
        hint = f"PQ{pq.M}x4 (16 centroids per sub-vector)" if pq.nbits > 4 else "fewer bits"
        needs.append(TrainingNeed(part, int(pq.ksub), hint))
    rq = getattr(base, "rq", None)
    if rq is not None and hasattr(rq, "nbits"):
        bits = max(rq.nbits.at(i) for i in range(rq.nbits.size()))
        needs.append(TrainingNeed(f"a residual quantizer (2^{bits} centroids per stage)", 2**bits))
    storage = getattr(base, "storage", None)
    if storage is not None:
        needs += training_needs(storage)
    return needs


def check_trainable(index: faiss.Index, spec: str, n: int) -> None:
    """Refuse, before any encoding, a spec that ``n`` vectors cannot train; warn if thin.

    Raises:
        DotcatError: naming the part of the spec that needs more vectors than the corpus has
            (IVF's list count, or PQ's 2^nbits centroids), with a spec that would fit.
    """
    for need in training_needs(index):
        if n < need.vectors:
            raise DotcatError(
                f"FAISS spec {spec!r}: {need.part} needs at least {need.vectors} training "
                f"vectors, the corpus has {n}; use {_smaller(need, n)}"
            )
        if need.hint == "IVF" and n < MIN_POINTS_PER_LIST * need.vectors:
            _warn_thin_lists(spec, n, need.vectors)


#: Training points per IVF list below which FAISS's k-means warns (``min_points_per_centroid``).
MIN_POINTS_PER_LIST = 39


@functools.cache
def _warn_thin_lists(spec: str, n: int, lists: int) -> None:
    """Once per process and spec: a build checks its spec before and after encoding."""
    logger.warning(
        "FAISS spec %r: %d vectors for %d lists is thin (FAISS asks for %d per list); recall "
        "may suffer; %s would suit this corpus",
        spec, n, lists, MIN_POINTS_PER_LIST, _ivf_suggestion(n),
    )  # fmt: skip


def _ivf_suggestion(n: int) -> str:
    """The IVF setting ``n`` vectors train well, with the rule that gave it; Flat when they
    are too few for two lists (one list is Flat with extra steps)."""
    lists = max(1, min(int(4 * np.sqrt(n)), n // MIN_POINTS_PER_LIST))  # 4 sqrt(n), not fewer
    if lists < 2:
        return f"Flat ({n} vectors are too few for IVF lists of {MIN_POINTS_PER_LIST} or more)"
    if lists < int(4 * np.sqrt(n)):
        return f"IVF{lists} (one list per {MIN_POINTS_PER_LIST} vectors)"
    return f"IVF{lists} (about 4*sqrt(n) lists)"


def _smaller(need: TrainingNeed, n: int) -> str:
    """What ``n`` vectors can train instead, for the error message."""
    if need.hint == "IVF":
        suggestion = _ivf_suggestion(n)
        return suggestion if suggestion.startswith("Flat") else f"{suggestion}, or Flat"
    return f"{need.hint}, or Flat"


@functools.cache
def _gpu_resources():
    """One set of GPU resources per process, alive as long as the process (FAISS needs them
    alive as long as any GPU index made with them)."""
    return faiss.StandardGpuResources()


def to_gpu(index: faiss.Index) -> faiss.Index:
    """Copy an index to the GPUs when that index type has a GPU implementation (else keep it).

    One GPU: a copy on GPU 0. Several: the vectors split over all of them (FAISS's
    ``index_cpu_to_all_gpus`` with ``shard=True``: an ``IndexShards`` that searches every GPU
    and merges the top-k), so an index larger than one GPU's memory still fits.
    """
    try:
        if faiss.get_num_gpus() > 1:
            options = faiss.GpuMultipleClonerOptions()
            options.shard = True
            return faiss.index_cpu_to_all_gpus(index, co=options)
        return faiss.index_cpu_to_gpu(_gpu_resources(), 0, index)
    except (RuntimeError, AttributeError) as e:  # e.g. HNSW has no GPU version
        logger.warning("FAISS index %s stays on CPU: %s", type(index).__name__, e)
        return index


def to_cpu(index: faiss.Index) -> faiss.Index:
    """A CPU copy of a (possibly GPU) index, for saving."""
    if hasattr(faiss, "index_gpu_to_cpu") and "Gpu" in type(index).__name__:
        return faiss.index_gpu_to_cpu(index)
    return index


def write_index(index: faiss.Index, path: str | os.PathLike) -> None:
    """Write ``index`` (a CPU copy, if it is on GPUs) to ``path`` through a Python file,
    synced to disk.

    FAISS's own file writer buffers, and reports a failed last flush only as a line on stderr
    ("close error"): on a full disk the file could end short of its last block while the write
    seemed to succeed. Through Python every failed write raises (ENOSPC, EFBIG...).
    """
    with writing(path), open(path, "wb") as f:  # a full disk: DiskFullError naming ``path``
        faiss.write_index(to_cpu(index), faiss.PyCallbackIOWriter(f.write))
        f.flush()
        os.fsync(f.fileno())


def read_index(path: str | os.PathLike, flags: int = 0) -> faiss.Index:
    """The FAISS index in the file ``path``, as every reader and writer of an index opens it:
    a damaged or cut file is one error naming it, never FAISS's C++ trace."""
    try:
        return faiss.read_index(str(path), flags)
    except RuntimeError as e:
        raise DotcatError(f"{path}: cannot read FAISS index ({e})") from None


def training_rows(index: faiss.Index, n: int, seed: int = 0) -> np.ndarray:
    """Sorted positions of a seeded sample of ``n`` vectors to train ``index`` on (empty when
    it needs no training).

    The sample has 64 vectors per centroid of the largest quantizer (at least 65,536, at most
    262,144): k-means quality saturates well before that, and a sample whose size does not
    grow with the corpus keeps a build's memory flat from 100k to millions of documents.
    """
    if index.is_trained:
        return np.empty(0, dtype=np.int64)
    needed = max((need.vectors for need in training_needs(index)), default=0)
    take = min(n, max(MIN_TRAIN_VECTORS, min(MAX_TRAIN_VECTORS, TRAIN_PER_CENTROID * needed)))
    if take >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, size=take, replace=False))


def train_index(index: faiss.Index, sample: np.ndarray, spec: str) -> None:
    """Train an index that needs it (IVF, PQ) on the given sample of vectors."""
    if index.is_trained:
        return
    logger.info("training FAISS %s on %d vectors", spec, len(sample))
    ivf = faiss.try_extract_index_ivf(faiss.downcast_index(index))
    if ivf is not None and hasattr(ivf, "cp"):
        # dotcat has already warned about thin lists in words; FAISS's C++ would say it again.
        ivf.cp.min_points_per_centroid = 1
    index.train(np.ascontiguousarray(sample, dtype=np.float32))


def add_vectors(
    index: faiss.Index, blocks: Iterable[np.ndarray], total: int, show_progress: bool = True
) -> None:
    """Add vectors block by block (the caller reads them from disk a block at a time)."""
    with progress_bar(
        total=total, desc="adding to FAISS", unit="vec", enabled=show_progress
    ) as bar:
        for block in blocks:
            for start in range(0, len(block), ADD_CHUNK):
                chunk = np.ascontiguousarray(block[start : start + ADD_CHUNK], dtype=np.float32)
                index.add(chunk)
                bar.update(len(chunk))


def applicable_search_params(index: faiss.Index, params: dict[str, float]) -> dict[str, float]:
    """Keep the parameters this index understands (nprobe for IVF, efSearch for HNSW)."""
    base = faiss.downcast_index(index)
    if isinstance(base, faiss.IndexIDMap):  # an updated index: the parameters are inside
        base = faiss.downcast_index(base.index)
    kept: dict[str, float] = {}
    ivf = faiss.try_extract_index_ivf(base) if hasattr(faiss, "try_extract_index_ivf") else None
    if "nprobe" in params and ivf is not None:
        kept["nprobe"] = int(min(params["nprobe"], ivf.nlist))
    if "efSearch" in params and hasattr(base, "hnsw"):
        kept["efSearch"] = int(params["efSearch"])
    return kept


def manifest_entry(index: faiss.Index, spec: str, params: dict, built_on: str) -> dict:
    """The manifest's ``faiss`` entry of an index built from ``spec`` on ``built_on``."""
    params = applicable_search_params(index, params)
    return {"spec": spec, "metric": "inner_product", "ntotal": int(index.ntotal),
            "search_params": params, "built_on": built_on}  # fmt: skip


def set_search_params(index: faiss.Index, params: dict[str, float]) -> None:
    """Apply search-time parameters through faiss's ParameterSpace (CPU or GPU)."""
    if not params:
        return
    space = faiss.GpuParameterSpace() if "Gpu" in type(index).__name__ else faiss.ParameterSpace()
    for name, value in params.items():
        space.set_index_parameter(index, name, value)


# Below this many query x document products a search runs on one OpenMP thread. faiss-cpu and
# torch each ship their own OpenMP runtime; after a multi-threaded faiss call, faiss's idle
# threads spin and starve torch's: one query's encoding went from 19 ms to 500 ms on a 2-core
# machine. Small searches gain nothing from threads anyway.
SINGLE_THREAD_WORK = 50_000_000
#: Extra results fetched past k so that ties at the cut are settled by position.
TIE_MARGIN = 8


@contextmanager
def _omp_threads(n: int) -> Iterator[None]:
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k by inner product: ``(scores, positions)``, each ``(n_queries, k)``; -1 pads.

    Equal scores are ordered by position (FAISS leaves their order to its heap), so the same
    query gives the same list from one index and from its shards searched unmerged.
    """
    if k < 1:
        raise DotcatError(f"k must be >= 1, got {k}")
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if index.ntotal == 0:  # every document deleted: nothing to find
        return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
    k = min(int(k), index.ntotal)
    # A few more than k, so that a tie at the cut is settled by position too, not by which
    # of the tied vectors FAISS's heap happened to keep.
    fetch = min(k + TIE_MARGIN, index.ntotal)
    small = queries.shape[0] * index.ntotal < SINGLE_THREAD_WORK
    with _omp_threads(1) if small else nullcontext():
        scores, positions = index.search(queries, fetch)
    scores, positions = order_ties(scores, positions)
    return scores[:, :k], positions[:, :k]


def order_ties(scores: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row sorted by score, best first, then position; FAISS's -1 padding last."""
    keys = np.where(positions >= 0, -scores.astype(np.float64), np.inf)
    order = np.lexsort((np.where(positions >= 0, positions, np.iinfo(np.int64).max), keys), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(positions, order, axis=1)


def reconstruct(index: faiss.Index, positions: np.ndarray) -> np.ndarray:
    """The stored vectors at FAISS positions, shaped ``positions.shape + (dim,)``; zeros where a
    position is -1 (FAISS's padding).

    Exact for flat and HNSW indexes (and ID maps over them); for IVF the inverted lists are
    given a direct map on first use (a hash table: a few bytes per vector); for compressed
    codes (PQ, SQ) it is the decoded, approximate vector.
    """
    positions = np.asarray(positions, dtype=np.int64)
    flat = positions.ravel()
    out = np.zeros((flat.size, index.d), dtype=np.float32)
    valid = flat >= 0
    if valid.any():
        ids = flat[valid]
        try:
            out[valid] = index.reconstruct_batch(ids)
        except RuntimeError as e:
            ivf = faiss.try_extract_index_ivf(index)
            if ivf is None:
                raise DotcatError(f"this FAISS index cannot give its vectors back ({e})") from None
            ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
            out[valid] = index.reconstruct_batch(ids)
    return out.reshape(*positions.shape, index.d)
