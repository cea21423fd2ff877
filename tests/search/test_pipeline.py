"""dotcat.search.pipeline: each first stage against its reference, re-ranking, concurrency,
the dev-chosen fusion recorded and followed, bad settings."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from dotcat.data import load_corpus
from dotcat.errors import DotcatError
from dotcat.index import IndexConfig, build_index
from dotcat.index.manifest import Manifest
from dotcat.models import EncoderConfig
from dotcat.search.dense import DenseRetriever
from dotcat.search.fusion import Fusion
from dotcat.search.lexical import bm25_search
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.search.reranker import Reranker
from dotcat.tuning import tune_fusion

QUERIES = {
    "q1": "which animals were domesticated from wolves",
    "q2": "how do cells make ATP",
    "q3": "hormone controlling blood sugar",
}


def _encoder(model) -> EncoderConfig:
    return EncoderConfig(model=str(model), device="cpu", precision="fp32")


def _pipeline(index, **settings) -> SearchPipeline:
    return SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32", **settings))


@pytest.mark.kernels
def test_dense_first_stage_is_the_dense_retriever(index):
    run = _pipeline(index, first_stage="dense").run(QUERIES, 5)
    reference = DenseRetriever(index, device="cpu", precision="fp32").batch_search(QUERIES, 5)
    assert run == reference


def test_bm25_first_stage_is_bm25_over_the_corpus(index, data):
    run = _pipeline(index, first_stage="bm25").run(QUERIES, 5)
    assert run == bm25_search(load_corpus(data), QUERIES, k=5, show_progress=False)


@pytest.mark.kernels
def test_hybrid_is_the_recorded_fusion_of_both(index):
    hybrid = _pipeline(index)
    assert hybrid.first_stage == "hybrid"  # auto: the index has BM25
    # Nothing chosen on dev yet (tune_fusion runs below): the dev rule's prior, linear 0.5.
    assert Manifest.read(index).fusion is None and hybrid.fusion == Fusion("linear", 0.5)
    dense = _pipeline(index, first_stage="dense").run(QUERIES, 100)
    bm25 = _pipeline(index, first_stage="bm25").run(QUERIES, 100)
    fused = hybrid.fusion.fuse_runs(dense, bm25)
    assert hybrid.run(QUERIES, 5) == {q: docs[:5] for q, docs in fused.items()}
    rrf = _pipeline(index, fusion="rrf").run(QUERIES, 5)
    assert rrf == {q: docs[:5] for q, docs in Fusion("rrf").fuse_runs(dense, bm25).items()}


@pytest.mark.kernels
@pytest.mark.parametrize("fusion", ["linear", "rrf"])
def test_asking_a_hybrid_for_more_results_never_reorders_the_first_ones(index, fusion):
    pipeline = _pipeline(index, fusion=fusion, fusion_depth=3)
    head, longer = pipeline.run(QUERIES, 3), pipeline.run(QUERIES, 20)
    assert {q: docs[:3] for q, docs in longer.items()} == head
    assert all(len(docs) == 20 for docs in longer.values())
    for docs in longer.values():  # a run file's order is its scores' (trec_eval sorts by them)
        assert [s for _, s in docs] == sorted((s for _, s in docs), reverse=True)


@pytest.mark.kernels
def test_index_without_bm25_is_dense_by_default_and_refuses_bm25(data, tiny_bert_dir, tmp_path):
    out = tmp_path / "dense_only"
    build_index(data, out, _encoder(tiny_bert_dir), IndexConfig(bm25=False), show_progress=False)
    assert _pipeline(out).first_stage == "dense"
    with pytest.raises(DotcatError, match="needs a BM25 index"):
        _pipeline(out, first_stage="hybrid")


@pytest.mark.kernels
def test_search_returns_hits_with_texts(index):
    pipeline = _pipeline(index, first_stage="dense")
    hits = pipeline.search(QUERIES["q2"], 3)
    assert [h.rank for h in hits] == [1, 2, 3]
    assert [(h.doc_id, h.score) for h in hits] == pipeline.run({"x": QUERIES["q2"]}, 3)["x"]
    for hit in hits:
        stored = pipeline.document(hit.doc_id)
        assert (hit.title, hit.text) == (stored.title, stored.text)
    many = pipeline.search_many(list(QUERIES.values()), 3)
    assert [[h.doc_id for h in hits] for hits in many] == [
        [d for d, _ in docs] for docs in pipeline.run(QUERIES, 3).values()
    ]


@pytest.mark.kernels
def test_reranking_through_the_pipeline(index, tiny_cat_dir):
    pipeline = _pipeline(index, rerank=str(tiny_cat_dir), depth=4)
    assert pipeline.reranker.alpha == 1.0 and pipeline.reranker.alpha_source == "plain"
    first = pipeline.run(QUERIES, 10, rerank=False)
    texts = pipeline.document_texts({d for docs in first.values() for d, _ in docs[:4]})
    expected = pipeline.reranker.rerank(first, QUERIES, texts, 4)
    assert pipeline.run(QUERIES, 10) == {q: docs[:10] for q, docs in expected.items()}
    assert pipeline.run(QUERIES, 10, depth=2) != pipeline.run(QUERIES, 10)  # depth per call
    with pytest.raises(DotcatError, match="no cross-encoder"):
        _pipeline(index).run(QUERIES, 5, rerank=True)


@pytest.mark.kernels
def test_the_recorded_interpolation_weight_is_the_default(tiny_cat_dir, tmp_path):
    import shutil

    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    model = tmp_path / "cat"
    shutil.copytree(tiny_cat_dir, model)
    record = {"max_length": 64, "interpolation_alpha": 0.3}
    (model / "dotcat_cross_encoder.json").write_text(
        json.dumps({**record, "interpolation_dev_scores": {"0.3": 0.5}})
    )
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(model), device="cpu"))
    assert ce.interpolation_alpha == 0.3
    assert Reranker(ce).alpha == 0.3 and Reranker(ce).alpha_source == "dev-chosen"
    assert Reranker(ce, interpolate=1).alpha == 1.0  # the plain logit, one flag away
    assert Reranker(ce, interpolate="0.6").alpha_source == "given"
    # Where dev chose nothing (train cat --no-check without a dev split: 0), none is claimed.
    (model / "dotcat_cross_encoder.json").write_text(json.dumps(record))
    assert Reranker(ce).alpha_source == "recorded without a dev choice or held-out check"
    check = {"interpolation_dev_scores": {"0.3": 0.5}, "heldout_check": {"shown_better": False}}
    (model / "dotcat_cross_encoder.json").write_text(json.dumps({**record, **check}))
    assert Reranker(ce).alpha_source == "held-out check showed no gain"


@pytest.mark.kernels
def test_concurrent_callers_get_what_a_lone_caller_gets(index):
    pipeline = _pipeline(index)
    texts = list(QUERIES.values()) * 8
    alone = [[h.doc_id for h in pipeline.search(t, 4)] for t in texts]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda t: [h.doc_id for h in pipeline.search(t, 4)], texts))
    assert together == alone


@pytest.mark.kernels
def test_tune_fusion_records_the_dev_choice_and_the_pipeline_follows_it(index, data):
    fusion = tune_fusion(index, data, device="cpu", precision="fp32")
    assert fusion is not None and fusion.dev["source"] == "10% of qrels/train.tsv (seed 42)"
    recorded = Manifest.read(index).fusion
    assert Fusion.from_json(recorded) == fusion and recorded["dev"]["scores"]
    assert _pipeline(index).fusion == fusion


def test_no_dev_queries_no_recorded_fusion(index, tmp_path):
    corpus_only = tmp_path / "c.jsonl"
    corpus_only.write_text('{"_id": "a", "text": "x"}\n')
    assert tune_fusion(index, corpus_only, device="cpu") is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"first_stage": "sparse"}, "first_stage must be one of auto, dense, bm25, hybrid"),
        ({"fusion": "max"}, "fusion must be one of auto, rrf, linear"),
        ({"depth": 0}, "depth must be >= 1"),
        ({"interpolate": "2"}, r"interpolate must be in \[0, 1\]"),
        ({"interpolate": "most"}, "interpolate must be 'auto' or a number"),
        ({"fusion_weight": 0.3}, "fusion_weight is the linear fusion's weight"),
        ({"fusion": "linear", "fusion_weight": 1.5}, r"fusion_weight must be in \[0, 1\]"),
    ],
)
def test_bad_settings(settings, message):
    with pytest.raises(DotcatError, match=message):
        PipelineConfig(**settings)


@pytest.mark.kernels
def test_bad_calls(index):
    pipeline = _pipeline(index)
    for k in (0, None, "3", 2.5, True):  # a DotcatError, not a TypeError from deep inside
        with pytest.raises(DotcatError, match=f"k must be a whole number >= 1, got {k!r}"):
            pipeline.run(QUERIES, k)
    with pytest.raises(DotcatError, match="empty"):
        pipeline.search("   ", 3)
    with pytest.raises(DotcatError, match="byte 0xE9 at character 6 is not UTF-8"):
        pipeline.search("heart\udce9 failure", 3)  # a Latin-1 byte of a command line
    with pytest.raises(DotcatError, match="lone surrogate U[+]D800 at character 5"):
        pipeline.search("pass\ud800word", 3)
    for query in (None, 42, b"pw", ["a"]):
        with pytest.raises(DotcatError, match="a query must be a str, got"):
            pipeline.search(query, 3)
    with pytest.raises(DotcatError, match="search_many takes a list of queries"):
        pipeline.search_many("insulin", 3)  # not eight one-letter queries
    with pytest.raises(DotcatError, match="a query must be a str, got int"):
        pipeline.run({"q1": 5}, 3)
    with pytest.raises(DotcatError, match=r"queries: a \{id: text\} mapping, got list"):
        pipeline.run(["insulin"], 3)
    for where in (123, None):
        with pytest.raises(DotcatError, match="an index is a directory"):
            SearchPipeline(where)
    # an int id: each side of the hybrid fused it apart from its text form, as two queries
    assert pipeline.run({1: "insulin"}, 3) == pipeline.run({"1": "insulin"}, 3)
    with pytest.raises(DotcatError, match="two ids are the same as text"):
        pipeline.run({1: "insulin", "1": "cats"}, 3)
    with pytest.raises(DotcatError, match="is given twice: its documents would be answered twice"):
        SearchPipeline([index, index])  # (each of its documents came twice)
    # a misspelled option was ignored: the pipeline's own choice answered in its place
    with pytest.raises(DotcatError, match="option 'firststage' .did you mean 'first_stage'?"):
        pipeline.search("insulin", 3, firststage="bm25")
    with pytest.raises(DotcatError, match="unknown option 'top_k'.*first_stage, rerank, depth"):
        pipeline.run(QUERIES, 3, top_k=5)


@pytest.mark.kernels
def test_one_thread_small_calls_reaches_a_dense_retriever_loaded_later(index):
    pipeline = _pipeline(index, first_stage="bm25")  # no dense retriever loaded yet
    pipeline.one_thread_small_calls()
    pipeline.search("insulin", 3, first_stage="dense")
    assert pipeline.encoder.single_query_threads == 1
    loaded = _pipeline(index, first_stage="dense")
    assert loaded.encoder.single_query_threads is None  # free cores decide
    loaded.one_thread_small_calls()
    assert loaded.encoder.single_query_threads == 1


@pytest.mark.kernels
def test_build_and_tune_builds_then_records_the_dev_fusion(data, tiny_bert_dir, tmp_path):
    """What `dotcat index` and `dotcat experiment` both do: the index, then its fusion chosen
    on the data's dev queries and recorded (a shard, or no BM25, is not tuned)."""
    from dotcat.tuning import build_and_tune

    out = tmp_path / "tuned"
    built = build_and_tune(data, out, _encoder(tiny_bert_dir), IndexConfig(bm25=True),
                           show_progress=False)  # fmt: skip
    assert built.manifest.documents["count"] == Manifest.read(out).documents["count"]
    assert built.fusion is not None and built.fusion.dev["source"]
    assert Manifest.read(out).fusion == built.fusion.to_json() and built.seconds > 0
    dense_only = build_and_tune(data, tmp_path / "dense", _encoder(tiny_bert_dir),
                                IndexConfig(bm25=False), show_progress=False)  # fmt: skip
    assert dense_only.fusion is None and Manifest.read(tmp_path / "dense").fusion is None


def test_an_interruption_after_the_swap_says_the_index_is_in_place(
    data, tiny_bert_dir, tmp_path, monkeypatch, caplog
):
    import dotcat.tuning

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(dotcat.tuning, "tune_fusion", interrupted)
    out = tmp_path / "built"
    with pytest.raises(KeyboardInterrupt):
        dotcat.tuning.build_and_tune(data, out, _encoder(tiny_bert_dir), show_progress=False)
    assert f"{out} is built and in place; interrupted before its hybrid fusion" in caplog.text
    assert _pipeline(out).run(QUERIES, 3)  # complete: it searches
