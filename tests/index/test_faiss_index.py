"""The FAISS wrapper: specs, training sample, search parameters, CPU/GPU placement."""

from __future__ import annotations

import logging

import faiss
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
    faiss_index.add_vectors(index, [x], len(x), show_progress=False)
    scores, positions = faiss_index.search(index, q, k=5)
    expected = np.argsort(-(q @ x.T), axis=1)[:, :5]
    np.testing.assert_array_equal(positions, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(q @ x.T, expected, axis=1), rtol=1e-5)


def test_k_larger_than_index_is_capped():
    index = faiss_index.create_index("Flat", 8)
    faiss_index.add_vectors(
        index, [_unit_vectors(3, 8)], len(_unit_vectors(3, 8)), show_progress=False
    )
    scores, positions = faiss_index.search(index, _unit_vectors(1, 8), k=100)
    assert positions.shape == (1, 3) and (positions >= 0).all()


def test_ivf_recall_with_default_nprobe():
    x = _unit_vectors(4000, 16)
    index = faiss_index.create_index("IVF16,Flat", 16)
    faiss_index.train_index(index, x, "IVF16,Flat")  # the whole array as the sample
    faiss_index.add_vectors(index, [x], len(x), show_progress=False)
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


def test_training_sample_is_seeded_and_does_not_grow_with_the_corpus(monkeypatch):
    index = faiss_index.create_index("IVF4,Flat", 4)
    small = faiss_index.training_rows(index, 10_000, seed=3)
    assert np.array_equal(small, np.arange(10_000))  # a small corpus trains on all of it
    a = faiss_index.training_rows(index, 5_000_000, seed=3)
    assert np.array_equal(a, faiss_index.training_rows(index, 5_000_000, seed=3))
    assert not np.array_equal(a, faiss_index.training_rows(index, 5_000_000, seed=4))
    assert len(a) == faiss_index.MIN_TRAIN_VECTORS and np.all(np.diff(a) > 0)  # 4 lists
    many = faiss_index.create_index("IVF8192,Flat", 4)
    assert len(faiss_index.training_rows(many, 5_000_000)) == faiss_index.MAX_TRAIN_VECTORS
    assert len(faiss_index.training_rows(faiss_index.create_index("Flat", 4), 100)) == 0


def test_device_resolution_on_this_machine(caplog):
    assert faiss_index.resolve_faiss_device("cpu") == "cpu"
    if faiss_index.gpu_available():
        assert faiss_index.resolve_faiss_device("auto") == "cuda"
        assert faiss_index.resolve_faiss_device("cuda") == "cuda"
    else:
        assert faiss_index.resolve_faiss_device("auto") == "cpu"
        # cuda asks for the models on the GPU: a CPU-only faiss searches on the CPU, and says so
        faiss_index._warn_cpu_faiss.cache_clear()
        with caplog.at_level(logging.WARNING, logger="dotcat.index.faiss_index"):
            assert faiss_index.resolve_faiss_device("cuda") == "cpu"
        assert "FAISS runs on the CPU" in caplog.text
    with pytest.raises(DotcatError, match="unknown device"):
        faiss_index.resolve_faiss_device("tpu")


@pytest.mark.skipif(not faiss_index.gpu_available(), reason="needs faiss-gpu and a GPU")
def test_gpu_flat_matches_cpu_flat():
    x = _unit_vectors(2000, 32)
    q = _unit_vectors(20, 32, seed=5)
    cpu = faiss_index.create_index("Flat", 32)
    faiss_index.add_vectors(cpu, [x], len(x), show_progress=False)
    gpu = faiss_index.to_gpu(faiss_index.create_index("Flat", 32))
    faiss_index.add_vectors(gpu, [x], len(x), show_progress=False)
    cpu_scores, cpu_pos = faiss_index.search(cpu, q, 10)
    gpu_scores, gpu_pos = faiss_index.search(gpu, q, 10)
    np.testing.assert_array_equal(cpu_pos, gpu_pos)
    np.testing.assert_allclose(cpu_scores, gpu_scores, rtol=1e-4)
    back = faiss_index.to_cpu(gpu)
    assert back.ntotal == 2000 and "Gpu" not in type(back).__name__


# (spec, vectors it needs, train FAISS at the limit too). FAISS spends ~6 s training any
# 8-bit PQ whatever the point count, so one 8-bit PQ spec is trained, the others only read.
NEEDS = [
    ("Flat", 0, False),
    ("HNSW32", 0, False),
    ("IVF16,Flat", 16, True),
    ("IVF16,SQ8", 16, True),
    ("PQ8", 256, True),
    ("PQ8x4", 16, True),
    ("IVF16,PQ8", 256, False),
    ("IVF64,PQ8x4fs", 64, True),
    ("HNSW32,PQ8", 256, False),
    ("OPQ8,IVF16,PQ8", 256, False),
    ("PCA16,IVF8,Flat", 16, True),
    ("RQ2x6", 64, True),
]


@pytest.mark.parametrize(("spec", "needed", "train"), NEEDS)
def test_training_needs_agree_with_faiss_itself(spec, needed, train):
    """Our reading of a spec's needs, checked by training FAISS at the limit and below it
    (the index as FAISS's factory makes it: HNSW32,PQ8 is L2 only, refused by a build)."""
    index = faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT)
    needs = faiss_index.training_needs(index)
    assert max((n.vectors for n in needs), default=0) == needed
    if needed == 0:
        return
    with pytest.raises(DotcatError, match=f"needs at least {needed} training vectors"):
        faiss_index.check_trainable(index, spec, needed - 1)
    if not train:
        return
    faiss_index.create_index(spec, 32).train(_unit_vectors(needed, 32))  # enough
    with pytest.raises(RuntimeError):
        faiss_index.create_index(spec, 32).train(_unit_vectors(needed - 1, 32))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("IDMap,Flat", "dotcat numbers the vectors itself"),
        ("IDMap2,Flat", "dotcat numbers the vectors itself"),
        ("IVF4,Flat,IDMap", "dotcat numbers the vectors itself"),
        ("NSG32,Flat", "an NSG graph is built in one go and never added to"),
        ("HNSW32,PQ8", "with the L2 metric only, and dotcat ranks by inner product"),
        ("HNSW32_PQ8", "with the L2 metric only, and dotcat ranks by inner product"),
    ],
)
def test_specs_the_factory_takes_but_a_build_cannot_use_are_refused(spec, message):
    """Before, each failed after the encoding (IDMap: "add does not make sense with
    IndexIDMap"; NSG: on its second block) or ranked by L2 distances read as scores."""
    with pytest.raises(DotcatError, match=f"invalid FAISS spec '{spec}' for dimension 32: "):
        faiss_index.create_index(spec, 32)
    with pytest.raises(DotcatError, match=message):
        faiss_index.create_index(spec, 32)
    assert faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT) is not None


def test_faiss_errors_lose_their_cpp_location():
    with pytest.raises(DotcatError) as info:
        faiss_index.create_index("PQ7", 32)
    message = str(info.value)
    assert message.startswith("invalid FAISS spec 'PQ7' for dimension 32: The dimension")
    assert ".cpp" not in message and "Error in" not in message


def test_a_sharded_faiss_index_searches_like_one_index():
    """What several GPUs get (an IndexShards, here of CPU sub-indexes): the same answers
    through dotcat's search, ties and padding included."""
    x = _unit_vectors(500, 16, seed=5)
    x[10] = x[400]  # an exact tie across the two halves
    whole = faiss_index.create_index("Flat", 16)
    whole.add(x)
    shards = faiss.IndexShards(16, True, True)  # threaded, successive ids
    halves = [faiss_index.create_index("Flat", 16) for _ in range(2)]
    halves[0].add(x[:250])
    halves[1].add(x[250:])
    for half in halves:
        shards.add_shard(half)
    queries = np.concatenate([x[[10, 7, 333]], _unit_vectors(4, 16, seed=9)])
    for k in (1, 10, 600):
        a_scores, a_pos = faiss_index.search(whole, queries, k)
        b_scores, b_pos = faiss_index.search(shards, queries, k)
        np.testing.assert_array_equal(a_pos, b_pos)
        np.testing.assert_allclose(a_scores, b_scores, rtol=0, atol=1e-6)
    assert faiss_index.search(whole, queries[:1], 2)[1][0].tolist() == [10, 400]  # ties: position


@pytest.mark.parametrize("spec", ["Flat", "HNSW8", "IVF4,Flat"])
def test_reconstruct_gives_the_stored_vectors_back(spec):
    vectors = _unit_vectors(200, 16)
    index = faiss_index.create_index(spec, 16)
    if not index.is_trained:
        index.train(vectors)
    index.add(vectors)
    positions = np.array([[5, 0, -1], [199, 42, 7]])
    got = faiss_index.reconstruct(index, positions)
    assert got.shape == (2, 3, 16)
    np.testing.assert_allclose(got[0, 2], 0.0)  # FAISS's padding
    np.testing.assert_allclose(got[0, :2], vectors[[5, 0]], atol=1e-6)
    np.testing.assert_allclose(got[1], vectors[[199, 42, 7]], atol=1e-6)
    ids = faiss.IndexIDMap2(faiss.IndexFlatIP(16))
    ids.add_with_ids(vectors[:3], np.array([10, 20, 30]))
    np.testing.assert_allclose(faiss_index.reconstruct(ids, np.array([30, 10])), vectors[[2, 0]])
