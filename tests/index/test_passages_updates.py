"""Passages through add, delete, shards and merge: a document's passages go and come with it."""

from __future__ import annotations

import gzip
import json

import faiss
import numpy as np
import pytest

from dotcat.index import DenseIndex, IndexConfig, build_index, document_text
from dotcat.index.passages import PassageConfig, Splitter
from dotcat.index.shards import ShardSet, merge_indexes
from dotcat.index.updates import add_documents, delete_documents
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline

WINDOW = 32


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    config = EncoderConfig(
        model=str(tiny_bert_dir), max_length=WINDOW, similarity="cos", pooling="mean",
        precision="fp32", device="cpu",
    )  # fmt: skip
    return BiEncoder.load(config)


def doc(i: int, sentences: int) -> dict:
    text = " ".join(f"Part {j} of record {i} names token{i}q{j} here." for j in range(sentences))
    return {"_id": f"r{i}", "title": f"Record {i}", "text": text}


def write(path, docs) -> object:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    return path


def passages_of(index_dir) -> dict[str, list[tuple[int, int]]]:
    """doc id -> its passages' ``(start, stop)``, in FAISS id order."""
    index = DenseIndex(index_dir, device="cpu")
    ids = np.sort(_ids(index))
    out: dict[str, list[tuple[int, int]]] = {}
    for ref in index.locate(ids.tolist()).values():
        out.setdefault(ref.doc_id, []).append((ref.start, ref.stop))
    return out


def _ids(index: DenseIndex) -> np.ndarray:
    """The FAISS ids an index holds (an updated index maps them explicitly)."""
    base = faiss.downcast_index(index.index)
    if isinstance(base, faiss.IndexIDMap2):
        return faiss.vector_to_array(base.id_map)
    return np.arange(base.ntotal)


def exact_passage_query(encoder, d: dict, part: int) -> str:
    """The text one of ``d``'s passages is encoded from: its best match, cosine 1."""
    spans = Splitter.for_encoder(encoder, PassageConfig()).spans(d["title"], d["text"])
    start, stop = spans[part]
    return document_text(d["title"], d["text"][start:stop])


@pytest.mark.kernels
def test_add_and_delete_take_a_document_s_passages_with_it(encoder, tmp_path):
    base = [doc(i, 6 + i) for i in range(4)]
    index = tmp_path / "idx"
    build_index(write(tmp_path / "base.jsonl.gz", base), index, encoder,
                IndexConfig(device="cpu", bm25=True), show_progress=False)  # fmt: skip
    before = DenseIndex(index, device="cpu").manifest.passages["count"]

    new = doc(9, 14)
    add_documents(index, write(tmp_path / "new.jsonl.gz", [new]), device="cpu",
                  precision="fp32", show_progress=False)  # fmt: skip
    found = passages_of(index)
    spans = Splitter.for_encoder(encoder, PassageConfig()).spans(new["title"], new["text"])
    assert found["r9"] == spans and len(spans) > 3
    dense = DenseIndex(index, device="cpu")
    manifest = dense.manifest
    assert manifest.passages["count"] == before + len(spans) == len(dense)
    assert manifest.passages["next_pid"] == before + len(spans)
    assert manifest.documents["count"] == 5 and manifest.bm25["passages"] == len(dense)
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", first_stage="dense"))
    (hit, *_) = pipeline.search(exact_passage_query(encoder, new, 3), 2)
    assert hit.doc_id == "r9" and (hit.start, hit.stop) == spans[3]
    assert hit.score == pytest.approx(1.0, abs=1e-4)

    delete_documents(index, ["r9", "r1"])
    found = passages_of(index)
    assert sorted(found) == ["r0", "r2", "r3"]
    dense = DenseIndex(index, device="cpu")
    assert dense.manifest.passages["count"] == len(dense) == sum(map(len, found.values()))
    assert dense.manifest.passages["next_pid"] == before + len(spans)  # ids are never reused
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu"))
    for stage in ("dense", "bm25", "hybrid"):
        run = pipeline.run({"q": "token9q3 token1q2"}, 10, first_stage=stage)["q"]
        assert {"r9", "r1"}.isdisjoint(d for d, _ in run), stage


def test_an_upsert_replaces_every_passage(encoder, tmp_path):
    index = tmp_path / "idx"
    build_index([doc(0, 12), doc(1, 3)], index, encoder, IndexConfig(device="cpu"),
                show_progress=False)  # fmt: skip
    shorter = {**doc(0, 2), "_id": "r0"}
    add_documents(index, write(tmp_path / "u.jsonl.gz", [shorter]), upsert=True, device="cpu",
                  precision="fp32", show_progress=False)  # fmt: skip
    found = passages_of(index)
    assert found["r0"] == [(0, len(shorter["text"]))]  # one passage now, the old ones gone
    assert len(DenseIndex(index, device="cpu")) == 1 + len(found["r1"])


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, encoder):
    """A corpus of long and short documents, indexed whole and as shards 0/2 and 1/2."""
    root = tmp_path_factory.mktemp("passage_shards")
    corpus = write(root / "c.jsonl.gz", [doc(i, 1 + (i * 5) % 13) for i in range(21)])
    whole = root / "whole"
    build_index(corpus, whole, encoder, IndexConfig(device="cpu", bm25=True),
                show_progress=False)  # fmt: skip
    for i in range(2):
        config = IndexConfig(device="cpu", bm25=True, shard=(i, 2), chunk_size=16)
        build_index(corpus, root / "shards" / f"s{i}", encoder, config, show_progress=False)
    return root


@pytest.mark.kernels
def test_shards_split_by_documents_and_merge_into_the_whole_index(sharded):
    whole, folder = sharded / "whole", sharded / "shards"
    shard_docs = [set(passages_of(folder / f"s{i}")) for i in range(2)]
    assert not shard_docs[0] & shard_docs[1]  # no document in two shards
    # each shard holds its documents' passages whole, as the one-process index does
    reference = passages_of(whole)
    for i in range(2):
        assert passages_of(folder / f"s{i}") == {d: reference[d] for d in shard_docs[i]}

    merged = sharded / "merged"
    manifest = merge_indexes([folder / "s1", folder / "s0"], merged, show_progress=False)
    assert manifest.passages["count"] == DenseIndex(whole, device="cpu").manifest.vector_count
    assert manifest.passages["window"] == WINDOW and manifest.bm25["passages"]
    a, b = DenseIndex(whole, device="cpu"), DenseIndex(merged, device="cpu")
    assert a.locate(range(len(a))) == b.locate(range(len(b)))  # same ids, documents, offsets
    np.testing.assert_allclose(
        a.index.reconstruct_n(0, len(a)), b.index.reconstruct_n(0, len(b)), atol=1e-5
    )
    queries = {"q1": "token3q2 record", "q2": "token17q9", "q3": "part of record 8"}
    pipelines = [SearchPipeline(p, PipelineConfig(device="cpu")) for p in (whole, merged)]
    for stage in ("dense", "bm25", "hybrid"):
        one, two = (p.run(queries, 5, first_stage=stage) for p in pipelines)
        assert {q: [d for d, _ in one[q]] for q in queries} == {
            q: [d for d, _ in two[q]] for q in queries
        }


@pytest.mark.kernels
def test_shards_searched_unmerged_rank_as_the_whole_index(sharded, encoder):
    whole = DenseIndex(sharded / "whole", device="cpu")
    shards = ShardSet(sharded / "shards", device="cpu")
    assert len(shards) == len(whole) and shards.document_count == whole.document_count == 21
    assert shards.manifest.passages["count"] == len(whole)
    query = exact_passage_query(encoder, doc(12, 1 + (12 * 5) % 13), 2)
    runs = [
        SearchPipeline(path, PipelineConfig(device="cpu", first_stage="dense")).search(query, 5)
        for path in (sharded / "whole", sharded / "shards")
    ]
    assert [(h.doc_id, h.start, h.stop) for h in runs[0]] == [
        (h.doc_id, h.start, h.stop) for h in runs[1]
    ]
    assert runs[0][0].doc_id == "r12"


@pytest.mark.kernels
def test_split_over_two_ranks_by_lead_alike_whole_and_in_shards(encoder, tmp_path):
    """``split_over=2`` among short documents: ``auto`` is ``lead`` in one index and in its
    shards searched unmerged, whose sample of vectors is the same: the same documents,
    passages and scores, a later passage scored less the margin (MaxP: its cosine, 1)."""
    docs = [doc(i, 6 if i % 7 == 3 else 1) for i in range(21)]  # 3 of 21 past two windows
    corpus = write(tmp_path / "c.jsonl.gz", docs)
    passages = PassageConfig(split_over=2)
    build_index(corpus, tmp_path / "whole", encoder, IndexConfig(device="cpu", passages=passages),
                show_progress=False)  # fmt: skip
    for i in range(2):
        config = IndexConfig(device="cpu", shard=(i, 2), passages=passages)
        build_index(corpus, tmp_path / "shards" / f"s{i}", encoder, config, show_progress=False)
    query = exact_passage_query(encoder, docs[10], 2)
    hits = {}
    for name, aggregation in (("whole", "auto"), ("shards", "auto"), ("whole", "maxp")):
        config = PipelineConfig(device="cpu", precision="fp32", first_stage="dense",
                                aggregation=aggregation)  # fmt: skip
        hits[name, aggregation] = SearchPipeline(tmp_path / name, config).search(query, 3)
    whole, shards, maxp = hits["whole", "auto"], hits["shards", "auto"], hits["whole", "maxp"]
    assert [(h.doc_id, h.start) for h in whole] == [(h.doc_id, h.start) for h in shards]
    assert [h.score for h in whole] == pytest.approx([h.score for h in shards], abs=1e-5)
    assert whole[0].doc_id == maxp[0].doc_id == "r10" and whole[0].start > 0
    assert maxp[0].score == pytest.approx(1.0, abs=1e-4) and whole[0].score < maxp[0].score - 1e-3
