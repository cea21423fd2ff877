"""The FAISS wrapper: specs, training sample, search parameters, CPU/GPU placement."""

from __future__ import annotations

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.index import faiss_index


def _unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_is_exact_inner_product():
    x = _unit_vectors(500, 16)
    q = _unit_vectors(5, 16, seed=1)
    index = faiss_index.create_index("Flat", 16)
    faiss_index.add_vectors(index, x, show_progress=False)
    scores, positions = faiss_index.search(index, q, k=5)
    expected = np.argsort(-(q @ x.T), axis=1)[:, :5]
    np.testing.assert_array_equal(positions, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(q @ x.T, expected, axis=1), rtol=1e-5)


def test_k_larger_than_index_is_capped():
    index = faiss_index.create_index("Flat", 8)
    faiss_index.add_vectors(index, _unit_vectors(3, 8), show_progress=False)
    scores, positions = faiss_index.search(index, _unit_vectors(1, 8), k=100)
    assert positions.shape == (1, 3) and (positions >= 0).all()


def test_ivf_recall_with_default_nprobe():
    x = _unit_vectors(4000, 16)
    index = faiss_index.create_index("IVF16,Flat", 16)
    faiss_index.train_index(index, x, "IVF16,Flat")
    faiss_index.add_vectors(index, x, show_progress=False)
    params = faiss_index.applicable_search_params(index, faiss_index.DEFAULT_SEARCH_PARAMS)
    assert params == {"nprobe": 16}  # capped at nlist; efSearch dropped (not HNSW)
    faiss_index.set_search_params(index, params)
    _, positions = faiss_index.search(index, x[:50], k=1)
    assert (positions[:, 0] == np.arange(50)).all()  # nprobe == nlist: exhaustive


def test_hnsw_params():
    index = faiss_index.create_index("HNSW8", 8)
    assert faiss_index.applicable_search_params(index, {"nprobe": 8, "efSearch": 64}) == {
        "efSearch": 64
    }


def test_training_sample_is_capped_and_seeded(monkeypatch):
    monkeypatch.setattr(faiss_index, "MAX_TRAIN_VECTORS", 300)
    seen = []

    class Recorder:
        is_trained = False

        def train(self, sample):
            seen.append(sample.copy())

    x = _unit_vectors(1000, 4)
    faiss_index.train_index(Recorder(), x, "IVF4,Flat", seed=3)
    faiss_index.train_index(Recorder(), x, "IVF4,Flat", seed=3)
    assert seen[0].shape == (300, 4)
    np.testing.assert_array_equal(seen[0], seen[1])


def test_device_resolution_on_this_machine():
    if faiss_index.gpu_available():
        assert faiss_index.resolve_faiss_device("auto") == "cuda"
    else:
        assert faiss_index.resolve_faiss_device("auto") == "cpu"
        with pytest.raises(DotcatError, match="no GPU support"):
            faiss_index.resolve_faiss_device("cuda")
    with pytest.raises(DotcatError, match="unknown device"):
        faiss_index.resolve_faiss_device("tpu")


@pytest.mark.skipif(not faiss_index.gpu_available(), reason="needs faiss-gpu and a GPU")
def test_gpu_flat_matches_cpu_flat():
    x = _unit_vectors(2000, 32)
    q = _unit_vectors(20, 32, seed=5)
    cpu = faiss_index.create_index("Flat", 32)
    faiss_index.add_vectors(cpu, x, show_progress=False)
    gpu = faiss_index.to_gpu(faiss_index.create_index("Flat", 32))
    faiss_index.add_vectors(gpu, x, show_progress=False)
    cpu_scores, cpu_pos = faiss_index.search(cpu, q, 10)
    gpu_scores, gpu_pos = faiss_index.search(gpu, q, 10)
    np.testing.assert_array_equal(cpu_pos, gpu_pos)
    np.testing.assert_allclose(cpu_scores, gpu_scores, rtol=1e-4)
    back = faiss_index.to_cpu(gpu)
    assert back.ntotal == 2000 and "Gpu" not in type(back).__name__
