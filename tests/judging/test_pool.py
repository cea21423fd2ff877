"""Depth-k pools: the union of each system's top k, ranks kept, judged in priority order."""

from __future__ import annotations

import math

import pytest

from dotcat.data import write_run
from dotcat.errors import DotcatError
from dotcat.judging import JudgmentStore, PoolConfig, build_pool, pool_entries, read_topics
from dotcat.judging.pool import SystemRanking


def test_a_pool_is_the_union_of_each_systems_top_k_with_every_rank_kept():
    a = SystemRanking("a", {}, {"q": [("d1", None, None), ("d2", None, None), ("d3", 0, 9)]})
    b = SystemRanking("b", {}, {"q": [("d3", 4, 8), ("d4", None, None), ("d1", None, None)]})
    entries = pool_entries([a, b], "q", depth=2)
    assert {e.doc_id for e in entries} == {"d1", "d2", "d3", "d4"}  # top 2 of each, once
    by_id = {e.doc_id: e for e in entries}
    assert by_id["d1"].ranks == {"a": 1}  # b's rank 3 is below the depth
    assert by_id["d3"].ranks == {"b": 1} and (by_id["d3"].start, by_id["d3"].stop) == (4, 8)
    # Priority: nDCG's discount summed over systems; by hand: d1 1, d3 1, d2 and d4 1/log2(3).
    assert by_id["d2"].weight == pytest.approx(1 / math.log2(3))
    assert [e.doc_id for e in entries] == ["d1", "d3", "d2", "d4"]  # ties: best rank, then id


def test_a_document_several_systems_rank_high_comes_first():
    a = SystemRanking("a", {}, {"q": [("x", None, None), ("y", None, None)]})
    b = SystemRanking("b", {}, {"q": [("z", None, None), ("y", None, None)]})
    c = SystemRanking("c", {}, {"q": [("w", None, None), ("y", None, None)]})
    entries = pool_entries([a, b, c], "q", depth=2)
    assert entries[0].doc_id == "y"  # three times second: 3/log2(3) = 1.89 > 1
    assert entries[0].weight == pytest.approx(3 / math.log2(3))


def test_the_pool_holds_each_stages_top_k_and_its_provenance(judge_pipeline, pooled_store):
    store = pooled_store
    queries = {t.qid: t.text for t in store.topics()}
    assert list(queries) == ["q1", "q2", "q3"] and store.topic("q1").description
    for stage in ("dense", "bm25", "hybrid"):
        run = judge_pipeline.run(queries, 5, first_stage=stage)
        for qid, ranking in run.items():
            pooled = {e.doc_id: e.ranks for e in store.pooled(qid)}
            for rank, (doc, _) in enumerate(ranking, 1):
                assert pooled[doc][stage] == rank
    (pool,) = store.pools()
    assert pool["depth"] == 5 and set(pool["systems"]) == {"dense", "bm25", "hybrid"}
    assert pool["systems"]["hybrid"]["fusion"] and pool["topics"] == ["q1", "q2", "q3"]
    weights = [e.weight for e in store.pooled("q1")]
    assert weights == sorted(weights, reverse=True)


def test_pooling_a_run_later_adds_its_documents_and_keeps_the_judgements(
    tmp_path, judge_pipeline, pooled_store
):
    store = pooled_store
    first = store.pooled("q2")[0].doc_id
    store.judge("q2", first, "ann", 3)
    before = {e.doc_id for e in store.pooled("q2")}
    outside = next(d for d in [f"x{i:02d}" for i in range(24)] if d not in before)
    run = tmp_path / "mine.trec"
    write_run({"q2": [(outside, 2.0), (first, 1.0), ("not-in-index", 0.5)]}, run)
    summary = build_pool(
        judge_pipeline,
        store,
        store.topics(),
        PoolConfig(pool_depth=5, systems=(), runs=(str(run),)),
    )
    after = {e.doc_id: e for e in store.pooled("q2")}
    assert outside in after and "not-in-index" not in after
    assert after[outside].ranks == {"mine.trec": 1} and summary.new == 1
    assert after[first].ranks["mine.trec"] == 2 and len(after[first].ranks) > 1
    assert [j.grade for j in store.current("ann")] == [3]
    assert len(store.pools()) == 2


def test_a_stage_the_index_lacks_is_one_clear_error(judge_pipeline, tmp_path, topics_file):
    from dotcat.judging.pool import pool_stages

    assert pool_stages(judge_pipeline, ["auto"]) == ["dense", "bm25", "hybrid"]
    with pytest.raises(DotcatError, match="no queries"):
        store = JudgmentStore(tmp_path / "j.sqlite", create=True)
        build_pool(judge_pipeline, store, [], PoolConfig())
    with pytest.raises(DotcatError, match="pool_depth must be >= 1"):
        PoolConfig(pool_depth=0).validate()
    with pytest.raises(
        DotcatError, match="systems must be one of auto, dense, bm25, hybrid, got 'splade'"
    ):
        PoolConfig(systems=("splade",)).validate()
    assert read_topics(topics_file)[0].description == "Where dogs come from."


@pytest.mark.kernels
def test_a_reranker_is_pooled_as_a_system_of_its_own(judge_index, tiny_cat_dir, tmp_path):
    from dotcat.judging import Topic
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    config = PipelineConfig(device="cpu", precision="fp32", rerank=str(tiny_cat_dir), depth=6)
    pipeline = SearchPipeline(judge_index, config)
    store = JudgmentStore(tmp_path / "j.sqlite", judge_index, create=True)
    summary = build_pool(pipeline, store, [Topic("q", "blood sugar hormone")],
                         PoolConfig(pool_depth=3, systems=("bm25",)))  # fmt: skip
    assert summary.systems == ["bm25", "hybrid+rerank"]
    reranked = pipeline.run({"q": "blood sugar hormone"}, 3, rerank=True)["q"]
    pooled = {e.doc_id: e.ranks for e in store.pooled("q")}
    assert [pooled[d]["hybrid+rerank"] for d, _ in reranked] == [1, 2, 3]
    assert store.pools()[0]["systems"]["hybrid+rerank"]["reranker"]["depth"] == 6
