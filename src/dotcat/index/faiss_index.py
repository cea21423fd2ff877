"""FAISS indexes: build from a factory string, train, add, move to GPU, search.

Every index uses the inner-product metric: with cosine similarity the vectors are
L2-normalised first, so inner product *is* cosine, and BERT_DOT's ``dot`` is inner product.
A spec is any FAISS factory string (``Flat``, ``IVF4096,Flat``, ``HNSW32``, ``IVF1024,PQ64``);
see https://github.com/facebookresearch/faiss/wiki/The-index-factory.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

import faiss
import numpy as np
from tqdm.auto import tqdm

from dotcat.errors import DotcatError

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
        first = str(e).strip().splitlines()[-1] if str(e).strip() else str(e)
        raise DotcatError(f"invalid FAISS spec {spec!r} for dimension {dim}: {first}") from None


def _required_training_points(spec: str) -> int:
    """Points k-means needs: one per IVF centroid, 256 per PQ/SQ codebook, at the least."""
    match = re.search(r"IVF(\d+)", spec)
    needed = int(match.group(1)) if match else 0
    if re.search(r"PQ\d+", spec):
        needed = max(needed, 256)
    return needed


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
    needed = _required_training_points(spec)
    if n < needed:
        raise DotcatError(
            f"FAISS spec {spec!r} needs at least {needed} vectors to train, "
            f"the corpus has {n}; use a smaller list count (about 4*sqrt(n) = "
            f"IVF{max(1, int(4 * np.sqrt(n)))}) or Flat"
        )
    rng = np.random.default_rng(seed)
    take = min(n, MAX_TRAIN_VECTORS)
    sample = np.sort(rng.choice(n, size=take, replace=False)) if take < n else np.arange(n)
    logger.info("training FAISS %s on %d vectors", spec, take)
    index.train(np.ascontiguousarray(vectors[sample], dtype=np.float32))


def add_vectors(index: faiss.Index, vectors: np.ndarray, show_progress: bool = True) -> None:
    """Add vectors in chunks (a memory-mapped array is read a chunk at a time)."""
    n = vectors.shape[0]
    with tqdm(total=n, desc="adding to FAISS", unit="vec", disable=not show_progress) as bar:
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
    k = max(1, min(int(k), index.ntotal))
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if queries.shape[0] * index.ntotal < SINGLE_THREAD_WORK:
        with _omp_threads(1):
            return index.search(queries, k)
    return index.search(queries, k)
