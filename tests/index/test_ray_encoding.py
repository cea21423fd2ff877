"""Encoding on Ray (``IndexConfig(ray=...)``): the same index as one process, resumes, shards.

A real local Ray (two CPUs) is started once for the module; every build spins up its own
pool of encoder actors on it.
"""

from __future__ import annotations

import json
import random
import sys
import time

import numpy as np
import pytest
from tests.timing import within

ray = pytest.importorskip("ray")

from dotcat.data import CorpusOptions  # noqa: E402
from dotcat.errors import DotcatError  # noqa: E402
from dotcat.index import DenseIndex, IndexConfig, build_index, ray_encoding  # noqa: E402
from dotcat.index.chunks import ChunkStore  # noqa: E402
from dotcat.models import BiEncoder, EncoderConfig  # noqa: E402

# Ray Data's own context copy sets its deprecated fields (Ray 2.60); nothing of ours.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")

N_DOCS = 300
CHUNK = 50  # six chunks
VOCABULARY = (
    "protein cell gene cancer virus immune insulin glucose neuron brain heart lung kidney "
    "vitamin bone muscle drug trial placebo dose mouse patient therapy receptor enzyme"
)
QUERIES = ["insulin and glucose", "immune response to a virus", "bone density", "brain neuron"]


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A local Ray with two CPUs for the whole module; its workers see the tests' cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOTCAT_CACHE", str(tmp_path_factory.getbasetemp() / "dotcat-cache"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        ray.init(address="local", num_cpus=2, include_dashboard=False)  # not a cluster found here
        try:
            yield
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """300 JSON Lines documents of varied lengths, a few title-only or without a title."""
    rng, words = random.Random(7), VOCABULARY.split()
    path = tmp_path_factory.mktemp("ray_corpus") / "corpus.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(N_DOCS):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
            title = f"{rng.choice(words).title()} study {i}"
            if i % 37 == 5:
                text = ""  # title-only
            elif i % 11 == 0:
                title = ""
            f.write(json.dumps({"_id": f"doc{i}", "title": title, "text": text}))
            f.write("\n")
    return path


@pytest.fixture(scope="module")
def encoder_config(tiny_bert_dir):
    return EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def reference(corpus, encoder_config, tmp_path_factory):
    """The whole corpus indexed in this process, without Ray."""
    out = tmp_path_factory.mktemp("reference") / "idx"
    build_index(corpus, out, encoder_config, IndexConfig(chunk_size=CHUNK), show_progress=False)
    return out


def contents(index_dir) -> tuple[list[str], np.ndarray]:
    """``(document ids in position order, the vectors read back from FAISS)``."""
    index = DenseIndex(index_dir, device="cpu")
    ids = index.doc_ids(range(len(index)))
    return [ids[p] for p in range(len(index))], index.index.reconstruct_n(0, len(index))


def assert_same_index(built, expected) -> None:
    ids, vectors = contents(built)
    want_ids, want_vectors = contents(expected)
    assert ids == want_ids
    np.testing.assert_allclose(vectors, want_vectors, atol=1e-5)


def ray_config(**kwargs) -> IndexConfig:
    return IndexConfig(chunk_size=CHUNK, ray="local", ray_workers=2, **kwargs)


def log_chunks_encoded_by_actors(monkeypatch, log) -> None:
    """Make every actor append the chunk numbers it is given to ``log``.

    The subclass is local, so Ray pickles it by value into the actor processes.
    """

    class CountingEncoder(ray_encoding._ChunkEncoder):
        def __call__(self, batch):
            with open(log, "a", encoding="utf-8") as f:
                f.writelines(f"{int(c)}\n" for c in batch["chunk"])
            return super().__call__(batch)

    monkeypatch.setattr(ray_encoding, "_ChunkEncoder", CountingEncoder)


def encoded(log) -> list[int]:
    return sorted(int(line) for line in log.read_text().split()) if log.exists() else []


def test_ray_build_equals_the_one_process_build(
    local_ray, corpus, encoder_config, reference, tmp_path, monkeypatch
):
    log = tmp_path / "encoded.txt"
    log_chunks_encoded_by_actors(monkeypatch, log)
    out = tmp_path / "idx"
    manifest = build_index(corpus, out, encoder_config, ray_config(), show_progress=False)
    assert manifest.documents["count"] == N_DOCS
    assert encoded(log) == list(range(N_DOCS // CHUNK))  # each chunk once, on the actors
    assert_same_index(out, reference)

    queries = BiEncoder.load(encoder_config).encode_queries(QUERIES)
    scores, positions = DenseIndex(out, device="cpu").search(queries, k=10)
    want_scores, want_positions = DenseIndex(reference, device="cpu").search(queries, k=10)
    np.testing.assert_array_equal(positions, want_positions)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)


def test_an_interrupted_build_resumes_on_ray_encoding_only_the_missing_chunks(
    local_ray, corpus, encoder_config, reference, tmp_path, monkeypatch
):
    out = tmp_path / "idx"
    real_write = ChunkStore.write

    def write_two_then_stop(store, chunk, vectors, offset=0):
        if len(store.finished(verify=False)) == 2:
            raise KeyboardInterrupt  # the user presses Ctrl-C in the third chunk
        real_write(store, chunk, vectors, offset)

    monkeypatch.setattr(ChunkStore, "write", write_two_then_stop)
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, out, encoder_config, IndexConfig(chunk_size=CHUNK), show_progress=False)
    log_lines = (tmp_path / ".idx.building" / "chunks.jsonl").read_text().splitlines()
    assert [json.loads(line)["chunk"] for line in log_lines] == [0, 1]

    written = []
    monkeypatch.setattr(
        ChunkStore, "write", lambda s, c, v, o=0: written.append(c) or real_write(s, c, v, o)
    )
    log = tmp_path / "encoded.txt"
    log_chunks_encoded_by_actors(monkeypatch, log)
    build_index(corpus, out, encoder_config, ray_config(), show_progress=False)
    assert encoded(log) == [2, 3, 4, 5]
    assert sorted(written) == [2, 3, 4, 5]
    assert_same_index(out, reference)


def test_a_shard_encoded_on_ray_equals_the_same_shard_encoded_locally(
    local_ray, corpus, encoder_config, tmp_path
):
    shard = (1, 2)  # corpus rows 150..300: three chunks, none starting at row 0
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    config = IndexConfig(chunk_size=CHUNK, shard=shard)
    build_index(corpus, local, encoder_config, config, show_progress=False)
    manifest = build_index(corpus, on_ray, encoder_config, ray_config(shard=shard), False, False)
    assert manifest.shard == {"index": 1, "of": 2, "start": 150, "stop": 300}
    ids, _ = contents(on_ray)
    assert ids[0] == "doc150" and ids[-1] == "doc299"
    assert_same_index(on_ray, local)


@pytest.mark.parametrize("kind", ["folder", "python"])
def test_ray_actors_read_a_folder_or_python_documents_as_the_driver_does(
    kind, local_ray, encoder_config, tmp_path
):
    """The actors get the source and its options: the same rows, so the same index."""
    words = VOCABULARY.split()
    rows = [{"key": f"r{i}", "body": " ".join(words[i : i + 5])} for i in range(12)]
    if kind == "folder":
        corpus = tmp_path / "docs"
        (corpus / "notes").mkdir(parents=True)
        for i in range(5):
            (corpus / "notes" / f"n{i}.md").write_text(f"# Note {i}\n\n{words[-i]} {words[i]}")
        (corpus / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        corpus = rows
    options = CorpusOptions(id_field="key", text_field="body")
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    build_index(corpus, local, encoder_config, IndexConfig(chunk_size=4), False,
                corpus_options=options)  # fmt: skip
    config = IndexConfig(chunk_size=4, ray="local", ray_workers=2)
    build_index(corpus, on_ray, encoder_config, config, False, corpus_options=options)
    assert_same_index(on_ray, local)
    ids, _ = contents(on_ray)
    assert len(ids) == (17 if kind == "folder" else 12)


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_an_unreachable_address_is_one_clear_error_and_fast(
    address, corpus, encoder_config, tmp_path, monkeypatch
):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process

    def no_init(*args, **kwargs):
        raise AssertionError("ray.init must not be tried on an address nobody answers at")

    monkeypatch.setattr(ray, "init", no_init)
    config = IndexConfig(chunk_size=CHUNK, ray=address)
    began = time.monotonic()
    with pytest.raises(DotcatError, match=rf"cannot reach a Ray cluster at '{address}'") as err:
        build_index(corpus, tmp_path / "idx", encoder_config, config, show_progress=False)
    assert time.monotonic() - began < within(30)
    assert "\n" not in str(err.value)


def test_without_ray_installed_the_error_says_how_to_install_it(
    corpus, encoder_config, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    monkeypatch.setitem(sys.modules, "ray.data", None)
    with pytest.raises(DotcatError, match=r"pip install 'dotcat\[ray\]'"):
        build_index(corpus, tmp_path / "idx", encoder_config, ray_config(), show_progress=False)


class FakeRay:
    """Just ``cluster_resources()``, for the sizing rules."""

    def __init__(self, **resources: float) -> None:
        self.resources = resources

    def cluster_resources(self) -> dict[str, float]:
        return dict(self.resources)


def test_actors_are_one_per_gpu_else_one_per_cpu_and_single_threaded_on_cpu(encoder_config):
    gpu_cluster, cpu_cluster = FakeRay(CPU=32.0, GPU=4.0), FakeRay(CPU=6.0)
    auto = EncoderConfig(model=encoder_config.model)  # device "auto"
    assert ray_encoding._use_gpu(gpu_cluster, auto) and not ray_encoding._use_gpu(cpu_cluster, auto)
    assert not ray_encoding._use_gpu(gpu_cluster, encoder_config)  # device="cpu" is kept
    assert ray_encoding._worker_count(gpu_cluster, None, use_gpu=True) == 4
    assert ray_encoding._worker_count(cpu_cluster, None, use_gpu=False) == 6
    assert ray_encoding._worker_count(cpu_cluster, 3, use_gpu=False) == 3
    with pytest.raises(DotcatError, match="no GPU"):
        ray_encoding._use_gpu(cpu_cluster, EncoderConfig(device="cuda"))
    with pytest.raises(DotcatError, match="--ray-workers 0"):
        ray_encoding._worker_count(cpu_cluster, 0, use_gpu=False)

    on_cpu = ray_encoding._actor_config(auto, use_gpu=False)
    assert (on_cpu.device, on_cpu.num_threads, on_cpu.cpu_workers) == ("cpu", 1, 1)
    on_gpu = ray_encoding._actor_config(auto, use_gpu=True)
    assert (on_gpu.device, on_gpu.num_threads, on_gpu.cpu_workers) == ("cuda", None, None)
    assert on_cpu.model == on_gpu.model == auto.model  # already absolute


@pytest.mark.ray
def test_passages_encoded_on_ray_equal_the_one_process_build(
    local_ray, corpus, tmp_path, tiny_bert_dir
):
    """An encoder of 16 tokens splits most documents: the actors cut each chunk's passages
    out of the documents they read, at the offsets the driver's doc store gives."""
    config = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32", max_length=16)
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    build_index(corpus, local, config, IndexConfig(chunk_size=CHUNK), show_progress=False)
    manifest = build_index(corpus, on_ray, config, ray_config(), show_progress=False)
    assert manifest.passages["count"] > 2 * N_DOCS and manifest.documents["count"] == N_DOCS
    a, b = DenseIndex(local, device="cpu"), DenseIndex(on_ray, device="cpu")
    assert a.locate(range(len(a))) == b.locate(range(len(b)))
    np.testing.assert_allclose(
        a.index.reconstruct_n(0, len(a)), b.index.reconstruct_n(0, len(b)), atol=1e-5
    )
