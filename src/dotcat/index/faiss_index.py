"""FAISS indexes: build from a factory string, train, add, move to GPU, search.

Every index uses the inner-product metric: with cosine similarity the vectors are
L2-normalised first, so inner product *is* cosine, and BERT_DOT's ``dot`` is inner product.
A spec is any FAISS factory string (``Flat``, ``IVF4096,Flat``, ``HNSW32``, ``IVF1024,PQ64``);
see https://github.com/facebookresearch/faiss/wiki/The-index-factory.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import faiss
import numpy as np

from dotcat.errors import DotcatError
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

# Search-time parameters applied when the spec has the structure they control. IVF with
# faiss's default nprobe=1 loses much recall; these are moderate, widely used settings.
DEFAULT_SEARCH_PARAMS = {"nprobe": 32, "efSearch": 128}
MAX_TRAIN_VECTORS = 262_144  # k-means quality saturates long before this (256 per centroid x 1k)
ADD_CHUNK = 65_536


def gpu_available() -> bool:
    """True when this faiss build has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def resolve_faiss_device(device: str) -> str:
    """Map ``auto|cpu|cuda`` to where FAISS runs; ``cuda`` without faiss-gpu is an error."""
    if device == "auto":
        return "cuda" if gpu_available() else "cpu"
    if device == "cuda" and not gpu_available():
        raise DotcatError(
            "--device cuda: this faiss build has no GPU support or sees no GPU "
            "(install the `gpu` extra: pip install 'dotcat[gpu]')"
        )
    if device not in ("cpu", "cuda"):
        raise DotcatError(f"unknown device {device!r}; use auto, cpu or cuda")
    return device


def create_index(spec: str, dim: int) -> faiss.Index:
    """An empty inner-product FAISS index from a factory string, with a clear error if bad."""
    try:
        return faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise DotcatError(
            f"invalid FAISS spec {spec!r} for dimension {dim}: {_faiss_reason(e)}"
        ) from None


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
                needs.append(
                    TrainingNeed(
                        f"PCA to {transform.d_out} dimensions", transform.d_out, "fewer dimensions"
                    )
                )
        return needs + training_needs(base.index)
    ivf = faiss.try_extract_index_ivf(base)
    if ivf is not None:
        needs.append(TrainingNeed(f"IVF{ivf.nlist} (one centroid per list)", int(ivf.nlist), "IVF"))
    pq = getattr(base, "pq", None)
    if isinstance(pq, faiss.ProductQuantizer):
        needs.append(
            TrainingNeed(
                f"PQ{pq.M}x{pq.nbits} (2^{pq.nbits} = {pq.ksub} centroids per sub-vector)",
                int(pq.ksub),
                f"PQ{pq.M}x4 (16 centroids per sub-vector)" if pq.nbits > 4 else "fewer bits",
            )
        )
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
                f"vectors, the corpus has {n}; use {_smaller(need, n)}, or Flat"
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
        "may suffer, IVF%d would suit this corpus",
        spec,
        n,
        lists,
        MIN_POINTS_PER_LIST,
        _suggested_lists(n),
    )


def _suggested_lists(n: int) -> int:
    """The usual 4*sqrt(n) lists, but never fewer than 39 training points per list."""
    return max(1, min(int(4 * np.sqrt(n)), n // MIN_POINTS_PER_LIST))


def _smaller(need: TrainingNeed, n: int) -> str:
    """A setting that ``n`` vectors can train, for the error message."""
    if need.hint == "IVF":
        return f"IVF{_suggested_lists(n)} (about 4*sqrt(n) lists)"
    return need.hint


def to_gpu(index: faiss.Index) -> faiss.Index:
    """Copy an index to GPU 0 when that index type has a GPU implementation (else keep it)."""
    try:
        res = faiss.StandardGpuResources()
        gpu_index = faiss.index_cpu_to_gpu(res, 0, index)
        gpu_index.dotcat_gpu_resources = res  # keep the resources alive with the index
        return gpu_index
    except (RuntimeError, AttributeError) as e:  # e.g. HNSW has no GPU version
        logger.warning("FAISS index %s stays on CPU: %s", type(index).__name__, e)
        return index


def to_cpu(index: faiss.Index) -> faiss.Index:
    """A CPU copy of a (possibly GPU) index, for saving."""
    if hasattr(faiss, "index_gpu_to_cpu") and "Gpu" in type(index).__name__:
        return faiss.index_gpu_to_cpu(index)
    return index


def train_index(index: faiss.Index, vectors: np.ndarray, spec: str, seed: int = 0) -> None:
    """Train an index that needs it (IVF, PQ) on a seeded random sample of ``vectors``."""
    if index.is_trained:
        return
    n = vectors.shape[0]
    check_trainable(index, spec, n)
    rng = np.random.default_rng(seed)
    needed = max((need.vectors for need in training_needs(index)), default=0)
    take = min(n, max(MAX_TRAIN_VECTORS, needed))
    sample = np.sort(rng.choice(n, size=take, replace=False)) if take < n else np.arange(n)
    logger.info("training FAISS %s on %d vectors", spec, take)
    ivf = faiss.try_extract_index_ivf(faiss.downcast_index(index))
    if ivf is not None and hasattr(ivf, "cp"):
        # dotcat has already warned about thin lists in words; FAISS's C++ would say it again.
        ivf.cp.min_points_per_centroid = 1
    index.train(np.ascontiguousarray(vectors[sample], dtype=np.float32))


def add_vectors(index: faiss.Index, vectors: np.ndarray, show_progress: bool = True) -> None:
    """Add vectors in chunks (a memory-mapped array is read a chunk at a time)."""
    n = vectors.shape[0]
    with progress_bar(total=n, desc="adding to FAISS", unit="vec", enabled=show_progress) as bar:
        for start in range(0, n, ADD_CHUNK):
            chunk = np.ascontiguousarray(vectors[start : start + ADD_CHUNK], dtype=np.float32)
            index.add(chunk)
            bar.update(len(chunk))


def applicable_search_params(index: faiss.Index, params: dict[str, float]) -> dict[str, float]:
    """Keep the parameters this index understands (nprobe for IVF, efSearch for HNSW)."""
    base = faiss.downcast_index(index)
    kept: dict[str, float] = {}
    ivf = faiss.try_extract_index_ivf(base) if hasattr(faiss, "try_extract_index_ivf") else None
    if "nprobe" in params and ivf is not None:
        kept["nprobe"] = int(min(params["nprobe"], ivf.nlist))
    if "efSearch" in params and hasattr(base, "hnsw"):
        kept["efSearch"] = int(params["efSearch"])
    return kept


def set_search_params(index: faiss.Index, params: dict[str, float]) -> None:
    """Apply search-time parameters through faiss's ParameterSpace (CPU or GPU)."""
    if not params:
        return
    on_gpu = "Gpu" in type(index).__name__
    space = faiss.GpuParameterSpace() if on_gpu else faiss.ParameterSpace()
    for name, value in params.items():
        space.set_index_parameter(index, name, value)


# Below this many query x document products a search runs on one OpenMP thread. faiss-cpu and
# torch each ship their own OpenMP runtime; after a multi-threaded faiss call, faiss's idle
# threads spin and starve torch's: one query's encoding went from 19 ms to 500 ms on a 2-core
# machine. Small searches gain nothing from threads anyway.
SINGLE_THREAD_WORK = 50_000_000


@contextmanager
def _omp_threads(n: int) -> Iterator[None]:
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k by inner product: ``(scores, positions)``, each ``(n_queries, k)``; -1 pads."""
    if k < 1:
        raise DotcatError(f"k must be >= 1, got {k}")
    k = min(int(k), index.ntotal)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if queries.shape[0] * index.ntotal < SINGLE_THREAD_WORK:
        with _omp_threads(1):
            return index.search(queries, k)
    return index.search(queries, k)
