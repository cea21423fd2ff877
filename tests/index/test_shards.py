"""Shards: 2 shards merged, or searched unmerged, give the one-process index's ids, vectors and
results; incompatible or overlapping shards are refused."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest
from tests.rankings import assert_same_runs, assert_same_search
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.errors import DotcatError
from dotcat.index import DenseIndex, IndexConfig, build_index
from dotcat.index.shards import ShardSet, merge_indexes, open_index, shard_dirs
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline

pytestmark = pytest.mark.kernels  # its results can depend on the CPU (Makefile: test-kernels)


def _corpus(path: Path, n: int, prefix: str = "d") -> Path:
    """Every document a different text (no near-ties whose order is arbitrary)."""
    rng = np.random.default_rng(len(prefix) + n)
    vocabulary = [
        "cells",
        "energy",
        "insulin",
        "glucose",
        "wolves",
        "dogs",
        "vaccines",
        "immune",
        "light",
        "plants",
    ]
    vocabulary += [f"w{i}" for i in range(200)]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i in range(n):
            words = rng.choice(vocabulary, size=4 + i % 23)
            record = {"_id": f"{prefix}{i}", "title": f"t {i}", "text": " ".join(words)}
            f.write(json.dumps(record) + "\n")
    return path


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir) -> BiEncoder:
    config = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    return BiEncoder.load(config)


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder):
    """One corpus indexed whole, and as shards 0/2 and 1/2 in a folder."""
    root = tmp_path_factory.mktemp("shards")
    corpus = _corpus(root / "c.jsonl.gz", 301)
    whole = root / "whole"
    build_index(corpus, whole, encoder, IndexConfig(chunk_size=64), show_progress=False)
    for i in range(2):
        config = IndexConfig(chunk_size=64, shard=(i, 2))
        build_index(corpus, root / "parts" / f"s{i}", encoder, config, show_progress=False)
    return {"root": root, "corpus": corpus, "whole": whole, "parts": root / "parts"}


def _vectors(index_dir: Path) -> np.ndarray:
    index = faiss.read_index(str(index_dir / "index.faiss"))
    return index.reconstruct_n(0, index.ntotal)


def _queries(encoder) -> np.ndarray:
    return encoder.encode_queries(["insulin glucose", "wolves and dogs", "light for plants"])


def test_shards_split_the_corpus_in_two_contiguous_halves(built):
    first, second = (DenseIndex(built["parts"] / f"s{i}", device="cpu") for i in range(2))
    assert (first.manifest.shard, second.manifest.shard) == (
        {"index": 0, "of": 2, "start": 0, "stop": 150},
        {"index": 1, "of": 2, "start": 150, "stop": 301},
    )
    assert first.doc_ids([0, 149]) == {0: "d0", 149: "d149"}
    assert second.doc_ids([0, 150]) == {0: "d150", 150: "d300"}
    assert (built["parts"] / "s0" / "vectors.npy").is_file()  # kept for a merge


def test_flat_merge_is_the_one_process_index(built, encoder, tmp_path):
    merged = tmp_path / "merged"
    merge_indexes([built["parts"] / "s1", built["parts"] / "s0"], merged, show_progress=False)
    np.testing.assert_allclose(_vectors(merged), _vectors(built["whole"]), rtol=0, atol=1e-5)
    a, b = DenseIndex(built["whole"], device="cpu"), DenseIndex(merged, device="cpu")
    assert a.doc_ids(range(301)) == b.doc_ids(range(301))
    queries = _queries(encoder)
    assert_same_search(a.search(queries, 10), b.search(queries, 10))
    assert b.manifest.documents["count"] == 301 and len(b.manifest.documents["merged_from"]) == 2


def test_unmerged_shards_answer_as_the_merged_index(built, encoder):
    shards = open_index(built["parts"], device="cpu")
    assert isinstance(shards, ShardSet) and len(shards) == 301
    whole = DenseIndex(built["whole"], device="cpu")
    queries = _queries(encoder)
    s1, p1 = whole.search(queries, 12)
    s2, p2 = shards.search(queries, 12)
    assert_same_search((s1, p1), (s2, p2))
    assert shards.doc_ids(p1[0]) == whole.doc_ids(p1[0])
    docs = shards.documents([0, 150, 300])
    assert [docs[p].id for p in (0, 150, 300)] == ["d0", "d150", "d300"]
    config = PipelineConfig(device="cpu", precision="fp32")
    a = SearchPipeline(
        built["whole"], config.__class__(first_stage="dense", device="cpu", precision="fp32")
    )
    b = SearchPipeline(built["parts"], config)
    assert b.first_stage == "hybrid"  # BM25 with the collection's statistics (test_sharded)
    topics = {"q1": "insulin glucose", "q2": "vaccines immune"}
    assert_same_runs(a.run(topics, 20), b.run(topics, 20, first_stage="dense"))
    # Each shard gives its vectors back at the global positions (Rocchio's feedback reads them).
    positions = np.array([[0, 150, 300], [299, -1, 1]])
    np.testing.assert_allclose(shards.vectors(positions), whole.vectors(positions), atol=1e-6)


def test_ivf_merge_trains_once_and_adds_every_shard(built, encoder, tmp_path):
    merged = tmp_path / "ivf"
    merge_indexes(
        [built["parts"] / "s0", built["parts"] / "s1"], merged, "IVF4,Flat", show_progress=False
    )
    index = DenseIndex(merged, device="cpu", search_params={"nprobe": 4})  # every list
    whole = DenseIndex(built["whole"], device="cpu")
    queries = _queries(encoder)
    assert_same_search(index.search(queries, 10), whole.search(queries, 10))
    assert index.manifest.faiss["spec"] == "IVF4,Flat" and not index.manifest.faiss["on_disk"]


def test_on_disk_lists_give_the_same_results_and_travel_with_the_index(built, encoder, tmp_path):
    in_memory, on_disk = tmp_path / "mem", tmp_path / "disk"
    shards = [built["parts"] / "s0", built["parts"] / "s1"]
    merge_indexes(shards, in_memory, "IVF4,Flat", on_disk="no", show_progress=False)
    merge_indexes(shards, on_disk, "IVF4,Flat", on_disk="yes", show_progress=False)
    assert (on_disk / "index.ivfdata").is_file()
    moved = tmp_path / "elsewhere" / "disk"
    moved.parent.mkdir()
    on_disk.rename(moved)  # the lists are found beside the index, wherever it goes
    queries = _queries(encoder)
    a = DenseIndex(in_memory, device="cpu", search_params={"nprobe": 4}).search(queries, 10)
    b = DenseIndex(moved, device="cpu", search_params={"nprobe": 4}).search(queries, 10)
    assert_same_search(a, b)


def test_overlapping_or_incompatible_shards_are_refused(built, encoder, tiny_bert_dir, tmp_path):
    s0 = built["parts"] / "s0"
    with pytest.raises(DotcatError, match="s0 is given twice"):
        merge_indexes([s0, s0], tmp_path / "twice", show_progress=False)
    with pytest.raises(DotcatError, match="same shard number"):  # a copy of it
        merge_indexes([s0, shutil.copytree(s0, tmp_path / "copy")], tmp_path / "twice")
    overlap = tmp_path / "overlap"
    build_index(_corpus(tmp_path / "o.jsonl.gz", 20), overlap, encoder, show_progress=False)
    with pytest.raises(DotcatError, match="ids that an earlier shard holds too .*'d0'"):
        merge_indexes([s0, overlap], tmp_path / "bad", show_progress=False)
    other = BiEncoder.load(
        EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32", pooling="mean")
    )
    mean = tmp_path / "mean"
    build_index(_corpus(tmp_path / "m.jsonl.gz", 20, "m"), mean, other, show_progress=False)
    with pytest.raises(DotcatError, match="another encoder or settings .*pooling: 'cls' vs 'mean'"):
        merge_indexes([s0, mean], tmp_path / "bad2", show_progress=False)
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad2").exists()
    # Their merge beside them would answer every document twice; a merge over a shard is lost.
    parts = shutil.copytree(built["parts"], tmp_path / "parts")
    merge_indexes([parts / "s0", parts / "s1"], parts / "all", show_progress=False)
    with pytest.raises(DotcatError, match="all is a merge of shards: keep it out of a shard set"):
        shard_dirs(parts, required=True)
    with pytest.raises(DotcatError, match="s0 is one of the shards merged"):
        merge_indexes([parts / "s0", parts / "s1"], parts / "s0", overwrite=True)


def test_index_shard_and_merge_from_the_command_line(built, tiny_bert_dir, tmp_path):
    runner = CliRunner()
    for i in range(2):
        result = runner.invoke(
            app,
            [
                "-q",
                "index",
                str(built["corpus"]),
                str(tmp_path / "p" / f"s{i}"),
                "--model",
                str(tiny_bert_dir),
                "--shard",
                f"{i}/2",
                "--precision",
                "fp32",
                "--no-bm25",
            ],  # fmt: skip
        )
        assert result.exit_code == 0, result.output
    result = runner.invoke(
        app, ["merge", str(tmp_path / "p" / "s0"), str(tmp_path / "p" / "s1"), str(tmp_path / "m")]
    )
    assert result.exit_code == 0 and "merged 2 shards (301 documents)" in result.output
    half = runner.invoke(app, ["merge", str(tmp_path / "p" / "s1"), str(tmp_path / "half")])
    assert half.exit_code == 2 and "shard(s) 0/2 not given" in half.output  # once: 150 of 301
    assert not (tmp_path / "half").exists()
    np.testing.assert_allclose(_vectors(tmp_path / "m"), _vectors(built["whole"]), atol=1e-5)
    search = runner.invoke(
        app, ["search", str(tmp_path / "p"), "insulin glucose", "--json", "--precision", "fp32"]
    )
    assert search.exit_code == 0, search.output
    bad = runner.invoke(app, ["index", str(built["corpus"]), str(tmp_path / "x"), "--shard", "2/2"])
    assert bad.exit_code == 2 and "0 <= I < N" in bad.output


def test_shards_of_two_int8_runtimes_are_refused(built):
    from dataclasses import replace

    from dotcat.index.manifest import Manifest
    from dotcat.index.shards import check_compatible

    s0, s1 = built["parts"] / "s0", built["parts"] / "s1"
    a, b = Manifest.read(s0), Manifest.read(s1)

    def at(manifest, **entry):
        recorded = {k: v for k, v in manifest.encoder.items() if k != "backend"}
        return replace(manifest, encoder={**recorded, "precision": "int8", **entry})

    check_compatible([(s0, at(a, backend="openvino")), (s1, at(b, backend="openvino"))])
    # Manifests from before the key are ONNX Runtime's.
    check_compatible([(s0, at(a)), (s1, at(b, backend="onnxruntime"))])
    with pytest.raises(DotcatError, match="int8 runtime: 'onnxruntime' vs 'openvino'"):
        check_compatible([(s0, at(a)), (s1, at(b, backend="openvino"))])


def test_shards_of_which_one_has_bm25_merge_into_an_index_with_bm25(built, encoder, tmp_path):
    bare = tmp_path / "s1-bare"
    config = IndexConfig(chunk_size=64, shard=(1, 2), bm25=False)
    build_index(built["corpus"], bare, encoder, config, show_progress=False)
    merged = tmp_path / "merged"
    merge_indexes([built["parts"] / "s0", bare], merged, show_progress=False)
    pipeline = SearchPipeline(merged, PipelineConfig(device="cpu", precision="fp32"))
    whole = SearchPipeline(built["whole"], PipelineConfig(device="cpu", precision="fp32"))
    query = {"q": "insulin glucose"}
    assert pipeline.run(query, k=5, first_stage="bm25") == whole.run(query, 5, first_stage="bm25")
