"""Filters inside every first stage: a filtered search is the search of the admitted documents
alone (dense, BM25, their fusion, passages, feedback, re-ranking), and stays so through add,
delete, shards and merge."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from tests.rankings import ATOL, assert_same_ranking

from dotcat.index import IndexConfig, build_index
from dotcat.index.passages import PassageConfig
from dotcat.index.shards import merge_indexes
from dotcat.index.updates import add_documents, delete_documents
from dotcat.models import EncoderConfig
from dotcat.search.aggregation import to_run
from dotcat.search.hybrid import fuse_matches
from dotcat.search.pipeline import PipelineConfig, SearchPipeline

pytestmark = pytest.mark.kernels  # its results can depend on the CPU (Makefile: test-kernels)

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "river",
    "mountain",
    "forest",
    "desert",
    "ocean",
    "island",
    "valley",
    "glacier",
    "canyon",
]
QUERIES = {"q1": "river mountain forest", "q2": "glacier canyon valley", "q3": "alpha omega sigma"}
FILTERS = {
    'group = "a"': lambda d: d["group"] == "a",
    'group in ["b", "c"] and n >= 10': lambda d: d["group"] in "bc" and d["n"] >= 10,
    'tags contains "x" or updated < 2024-06-01': lambda d: (
        "x" in d["tags"] or d["updated"] < "2024-06-01"
    ),
    'not group = "a"': lambda d: d["group"] != "a",
}


def corpus(n: int = 60, prefix: str = "d", seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
        docs.append(
            {
                "id": f"{prefix}{i}",
                "title": rng.choice(WORDS),
                "text": text,
                "group": "abc"[i % 3],
                "n": i,
                "tags": rng.sample(["x", "y", "z"], rng.randint(0, 2)),
                "updated": f"2024-{1 + i % 12:02d}-15",
            }
        )
    return docs


def admitted_ids(docs: list[dict], filter: str) -> set[str]:
    return {d["id"] for d in docs if FILTERS[filter](d)}


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def docs():
    return corpus()


@pytest.fixture(scope="module")
def pipeline(docs, encoder, tmp_path_factory):
    out = tmp_path_factory.mktemp("filtered") / "index"
    build_index(docs, out, encoder, IndexConfig(device="cpu", bm25=True), show_progress=False)
    return SearchPipeline(out, PipelineConfig(device="cpu"))


def subset_of(run: dict, keep: set[str], k: int) -> dict:
    """The brute-force answer: the unfiltered ranking of every document, cut to the admitted."""
    return {q: [(d, s) for d, s in found if d in keep][:k] for q, found in run.items()}


@pytest.mark.parametrize("filter", list(FILTERS))
@pytest.mark.parametrize("stage", ["dense", "bm25"])
def test_a_filtered_first_stage_is_its_search_of_the_admitted_alone(pipeline, docs, stage, filter):
    keep = admitted_ids(docs, filter)
    every = pipeline.run(QUERIES, len(docs), first_stage=stage)
    expected = subset_of(every, keep, 10)
    found = pipeline.run(QUERIES, 10, first_stage=stage, filter=filter)
    for q in QUERIES:
        assert {d for d, _ in found[q]} <= keep
        if stage == "bm25":
            assert found[q] == expected[q]  # exact scores, ties by id
        else:
            assert_same_ranking(found[q], expected[q])
            assert len(found[q]) == min(10, len(keep))  # k came back


@pytest.mark.parametrize("filter", list(FILTERS))
def test_the_filtered_hybrid_fuses_the_filtered_sides(pipeline, filter):
    found = pipeline.matches(QUERIES, 10, first_stage="hybrid", filter=filter)
    depth = pipeline.config.fusion_depth
    dense = pipeline.matches(QUERIES, depth, first_stage="dense", filter=filter)
    bm25 = pipeline.matches(QUERIES, depth, first_stage="bm25", filter=filter)
    for q in QUERIES:
        fused = fuse_matches(pipeline.fusion, dense[q], bm25[q])[:10]
        assert [(m.doc_id, m.score) for m in found[q]] == [(m.doc_id, m.score) for m in fused]


def test_a_filter_of_two_documents_shows_no_hit_at_zero(pipeline):
    """The second of two admitted documents, the last of each list it is in, showed 0.0000
    (issue 64): now 1/3 (the ranking is min-max's: tests/search/test_fusion.py)."""
    lowest = 0
    for first in range(0, 20, 2):
        for text in QUERIES.values():
            where = f"n >= {first} and n < {first + 2}"
            hits = pipeline.search(text, k=10, first_stage="hybrid", filter=where)
            assert len(hits) == 2 and hits[0].score_kind == "fused", where
            assert hits[0].score >= hits[1].score >= 1 / 3 - 1e-9
            lowest += hits[1].score == pytest.approx(1 / 3)
    assert lowest  # some second hits were the last of every list they are in


def test_the_settings_filter_applies_unless_a_call_gives_its_own(pipeline, docs):
    config = PipelineConfig(device="cpu", filter='group = "a"')
    filtered = SearchPipeline(pipeline.index_dir, config)
    hits = filtered.search("river", k=5)
    assert {h.fields["group"] for h in hits} == {"a"}
    assert hits[0].fields["n"] == next(d["n"] for d in docs if d["id"] == hits[0].doc_id)
    other = filtered.search("river", k=5, filter='group = "b"')
    assert {h.fields["group"] for h in other} == {"b"}
    assert len(filtered.search("river", k=5, filter="")) == 5  # '' is no filter
    assert filtered.search("river", k=5, filter='group = "none"') == []


def test_feedback_reads_only_admitted_documents(pipeline, docs):
    keep = admitted_ids(docs, 'group = "a"')
    config = PipelineConfig(device="cpu", prf="both", fb_docs=3, rocchio_docs=3)
    prf = SearchPipeline(pipeline.index_dir, config)
    run = prf.run(QUERIES, 10, filter='group = "a"')
    assert all({d for d, _ in found} <= keep for found in run.values())
    stage = prf.stage("bm25")
    admitted = prf.stages.admitted('group = "a"')
    index, query = stage.bm25, QUERIES["q1"]
    ids = index.query_token_ids(query)
    counts = {t: ids.count(t) for t in ids}
    feedback = index.top(index.weighted_scores(counts), 3, admitted.document_mask)
    assert {index.doc_ids[row] for row, _ in feedback} <= keep
    lam = stage.rm3.params.original_query_weight
    expected = stage.rm3.relevance_model(feedback)
    expanded = stage.rm3.expand(query, admitted.document_mask)
    for term, weight in expected.items():
        original = counts.get(term, 0) / len(ids)
        assert expanded[term] == pytest.approx(lam * original + (1 - lam) * weight)


def test_a_reranker_sees_only_admitted_documents(pipeline, docs, tiny_cat_dir):
    keep = admitted_ids(docs, 'group = "a"')
    config = PipelineConfig(device="cpu", rerank=str(tiny_cat_dir), depth=30, interpolate=1.0)
    reranked = SearchPipeline(pipeline.index_dir, config)
    hits = reranked.search("river mountain", k=25, filter='group = "a"')
    assert {h.doc_id for h in hits} == keep  # all 20 admitted, nothing else
    assert hits[0].score_kind == "logit"
    deep = reranked.search("river mountain", k=25, depth=4, filter='group = "a"')
    assert [h.score_kind for h in deep] == ["logit"] * 4 + ["order"] * 16  # below: no logit


def test_passages_carry_their_documents_fields(encoder, tmp_path):
    docs = corpus(12)
    for doc in docs[:4]:
        doc["text"] = " ".join([doc["text"]] * 12)  # longer than the tiny model's window
    out = tmp_path / "passages"
    config = IndexConfig(device="cpu", bm25=True, passages=PassageConfig(enabled=True))
    manifest = build_index(docs, out, encoder, config, show_progress=False)
    assert manifest.passages["count"] > len(docs)
    pipeline = SearchPipeline(out, PipelineConfig(device="cpu"))
    keep = admitted_ids(docs, 'group = "a"')
    for stage in ("dense", "bm25", "hybrid"):
        every = pipeline.run(QUERIES, len(docs), first_stage=stage)
        found = pipeline.run(QUERIES, 3, first_stage=stage, filter='group = "a"')
        for q in QUERIES:
            assert {d for d, _ in found[q]} <= keep
            if stage != "hybrid":  # (a fusion's scores depend on both lists' depth)
                assert_same_ranking(found[q], subset_of(every, keep, 3)[q])
    hit = pipeline.search("river", k=1, filter='group = "a"')[0]
    assert hit.fields["group"] == "a" and hit.start is not None


def test_filters_survive_add_delete_shards_and_merge(docs, encoder, tmp_path, tiny_bert_dir):
    from tests.rankings import assert_same_runs

    from dotcat.cli.main import app  # noqa: F401 - the CLI's shard option is the library's

    whole = tmp_path / "whole"
    build_index(docs, whole, encoder, IndexConfig(device="cpu", bm25=True), show_progress=False)
    parts = tmp_path / "parts"
    for i in range(2):
        build_index(
            docs,
            parts / f"s{i}",
            encoder,
            IndexConfig(device="cpu", bm25=True, shard=(i, 2)),
            show_progress=False,
        )
    merged = tmp_path / "merged"
    merge_indexes([parts / "s0", parts / "s1"], merged, show_progress=False)
    filter = 'group in ["b", "c"] and n >= 10'
    keep = admitted_ids(docs, filter)
    runs = {}
    for name, path in (("whole", whole), ("parts", parts), ("merged", merged)):
        pipeline = SearchPipeline(path, PipelineConfig(device="cpu", first_stage="dense"))
        runs[name] = pipeline.run(QUERIES, 8, filter=filter)
        assert all({d for d, _ in found} <= keep for found in runs[name].values())
    assert_same_runs(runs["whole"], runs["parts"], ATOL)
    assert_same_runs(runs["whole"], runs["merged"], ATOL)

    more = corpus(9, prefix="new", seed=5)
    for doc in more:
        doc["group"] = "new"
    add_documents(whole, more, device="cpu", precision="fp32", show_progress=False)
    delete_documents(whole, ["d3", "d6"])
    after = SearchPipeline(whole, PipelineConfig(device="cpu"))
    added = after.run(QUERIES, 20, filter='group = "new"')
    assert all({d for d, _ in found} == {d["id"] for d in more} for found in added.values())
    gone = after.run(QUERIES, 60, filter='group = "a"')
    a_ids = admitted_ids(docs, 'group = "a"') - {"d3", "d6"}
    assert all({d for d, _ in found} == a_ids for found in gone.values())
    assert after.index.field_kinds()["group"].distinct_values == 4


def test_a_stage_that_cannot_filter_is_refused_with_a_filter(pipeline):
    from dotcat.errors import DotcatError
    from dotcat.search.aggregation import Match
    from dotcat.search.stages import REGISTRY, register_stage

    class Plain:
        name, score_kind, sides = "plain", "rank", ()

        def search(self, queries, k, *, show_progress=False):
            return {q: [Match("d0", 1.0, ())] for q in queries}

    register_stage("plain", lambda context: Plain())
    try:
        assert to_run(pipeline.matches({"q": "x"}, 1, first_stage="plain")) == {"q": [("d0", 1.0)]}
        with pytest.raises(DotcatError, match="cannot search within a filter"):
            pipeline.matches({"q": "x"}, 1, first_stage="plain", filter='group = "a"')
    finally:
        REGISTRY.pop("plain")


def build_shards_with_fields(root, encoder) -> tuple:
    """Three shards of a collection whose documents have fields, with passages (a few long
    documents split) and BM25, and their merge: ``(folder of shards, merged index,
    documents)``."""
    docs = corpus(48, seed=7)
    for i, doc in enumerate(docs):  # rare words (RM3 feeds back no word most documents hold)
        doc["text"] += f" {['quartz', 'basalt', 'granite', 'marble'][i % 4]}{doc['group']}"
    for doc in docs[::5]:
        doc["text"] = " ".join([doc["text"]] * 10)  # longer than the tiny model's window
    config = IndexConfig(device="cpu", bm25=True, passages=PassageConfig(enabled=True))
    for i in range(3):
        build_index(docs, root / "parts" / f"s{i}", encoder, replace(config, shard=(i, 3)),
                    show_progress=False)  # fmt: skip
    merge_indexes(sorted((root / "parts").iterdir()), root / "merged", show_progress=False)
    return root / "parts", root / "merged", docs


def assert_filters_as_merged(over_shards, over_merged, docs) -> None:
    """Every filter of :data:`FILTERS` searched over shards as over their merge: the same
    rankings (ties allowed), only admitted documents, k of them; the same fields and
    facets."""
    from tests.rankings import assert_same_runs

    assert over_shards.index.field_kinds() == over_merged.index.field_kinds()
    for filter in FILTERS:
        keep = admitted_ids(docs, filter)
        found = over_shards.run(QUERIES, 10, filter=filter)
        assert all({d for d, _ in hits} <= keep for hits in found.values())
        assert all(len(hits) == min(10, len(keep)) for hits in found.values())
        assert_same_runs(found, over_merged.run(QUERIES, 10, filter=filter), ATOL)
    hits = over_shards.search("river mountain", k=5, filter='group = "b"')
    fields = {h.doc_id: h.fields for h in over_merged.search("river mountain", k=5,
                                                             filter='group = "b"')}  # fmt: skip
    assert all(h.fields == fields[h.doc_id] for h in hits if h.doc_id in fields)
    assert {h.fields["group"] for h in hits} == {"b"}
    assert over_shards.facets(hits) == over_merged.facets(hits)
    assert over_shards.search("river", k=5, filter='group = "none"') == []


@pytest.fixture(scope="module")
def sharded(encoder, tmp_path_factory):
    return build_shards_with_fields(tmp_path_factory.mktemp("filtered_shards"), encoder)


@pytest.mark.parametrize(
    "settings",
    [{"first_stage": "dense"}, {"first_stage": "bm25"}, {"first_stage": "hybrid"},
     {"first_stage": "bm25", "prf": "rm3", "fb_docs": 3},
     {"first_stage": "hybrid", "prf": "both", "fb_docs": 3, "rocchio_docs": 3}],
    ids=["dense", "bm25", "hybrid", "bm25-rm3", "hybrid-prf"],
)  # fmt: skip
def test_a_filtered_search_over_shards_is_the_merged_indexs(sharded, settings):
    parts, merged, docs = sharded
    config = PipelineConfig(device="cpu", **settings)
    assert_filters_as_merged(SearchPipeline(parts, config), SearchPipeline(merged, config), docs)
