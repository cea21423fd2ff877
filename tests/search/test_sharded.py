"""Shards searched as one index, in this process: the merged index's answers, every stage.

A small collection is indexed as three shards (``--shard I/3``) and merged (``dotcat merge``);
the pipeline over the folder of shards fans every search out to them and merges what they
answer. Dense, BM25 (scored with the collection's statistics), hybrid, feedback (RM3 and
Rocchio over the collection's top documents), passages and re-ranking give the merged index's
rankings, from Python and from ``dotcat search``. (The same on a Ray cluster: test_ray_shards.)
"""

from __future__ import annotations

import functools
import gzip
import json
import shutil
from pathlib import Path

import pytest
from tests.rankings import assert_same_runs
from tests.search.collections import QUERIES, build_collection, encoder_config
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data import ranked, read_run
from dotcat.errors import DotcatError
from dotcat.index import IndexConfig, build_index
from dotcat.index.docstore import PassageRef
from dotcat.index.manifest import Manifest
from dotcat.index.passages import PassageConfig
from dotcat.index.shard_updates import home_shard, owners
from dotcat.search.aggregation import Match
from dotcat.search.cluster import ClusterConfig
from dotcat.search.fan_out import bm25_key, dense_key, merge
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.search.stages import REGISTRY, register_stage

#: Scores of the sharded search and of the merged index (the acceptance's tolerance).
ATOL = 1e-5
#: Each first stage, with every feedback that applies to it.
CASES = [
    ("dense", "none"), ("dense", "rocchio"), ("bm25", "none"), ("bm25", "rm3"),
    ("hybrid", "none"), ("hybrid", "both"),
]  # fmt: skip


@pytest.fixture(scope="module", params=["cut", "passages"])
def collection(request, tmp_path_factory, tiny_bert_dir):
    root = tmp_path_factory.mktemp(f"sharded_{request.param}")
    return build_collection(root, tiny_bert_dir, 3, passages=request.param == "passages")


@functools.cache
def pipeline(index, prf: str = "none", **settings) -> SearchPipeline:
    return SearchPipeline(index, PipelineConfig(device="cpu", prf=prf, **settings))


@pytest.mark.kernels
@pytest.mark.parametrize(("stage", "prf"), CASES)
def test_shards_rank_as_their_merged_index(collection, stage, prf):
    merged, shards = pipeline(collection["merged"], prf), pipeline(collection["parts"], prf)
    assert shards.first_stage == "hybrid" and len(shards.index) == len(merged.index)
    one = merged.run(QUERIES, 30, first_stage=stage)
    assert_same_runs(one, shards.run(QUERIES, 30, first_stage=stage), atol=ATOL)
    assert one["q7"] == [] or stage != "bm25"  # a word no shard holds matches nothing


@pytest.mark.kernels
def test_linear_fusion_and_re_ranking_follow_the_merge(collection, tiny_cat_dir):
    settings = {"fusion": "linear", "fusion_weight": 0.3, "rerank": str(tiny_cat_dir),
                "depth": 12, "rerank_passages": 2}  # fmt: skip
    merged = pipeline(collection["merged"], **settings)
    shards = pipeline(collection["parts"], **settings)
    assert_same_runs(merged.run(QUERIES, 20), shards.run(QUERIES, 20), atol=ATOL)


@pytest.mark.kernels
def test_hits_come_with_their_texts_passages_and_coverage(collection):
    merged, shards = pipeline(collection["merged"]), pipeline(collection["parts"])
    texts = list(QUERIES.values())
    one, many = merged.search_many(texts, 5), shards.search_many(texts, 5)
    for a, b in zip(one, many, strict=True):
        assert [(h.doc_id, h.title, h.text, h.start, h.stop) for h in a] == [
            (h.doc_id, h.title, h.text, h.start, h.stop) for h in b
        ]
        assert b.coverage.full and b.coverage.share == 1.0 and b.coverage.shards == 3
        assert getattr(a, "coverage", None) is None  # one index: a plain list
    assert shards.document("d100") == merged.document("d100")
    assert shards.document("nope") is None
    status = shards.describe()["shards"]
    assert [s["shard"] for s in status] == ["s0", "s1", "s2"]
    assert sum(s["documents"] for s in status) == 160 and {s["state"] for s in status} == {"ok"}


@pytest.mark.kernels
def test_dotcat_search_over_a_folder_of_shards_writes_the_merged_index_s_run(collection, tmp_path):
    topics = tmp_path / "queries.tsv"
    topics.write_text("".join(f"{q}\t{t}\n" for q, t in QUERIES.items()), encoding="utf-8")
    runs = {}
    for name in ("merged", "parts"):
        out = tmp_path / f"{name}.trec"
        args = ["search", str(collection[name]), "--queries", str(topics), "--output", str(out)]
        result = CliRunner().invoke(app, [*args, "--device", "cpu"])
        assert result.exit_code == 0, result.output
        runs[name] = ranked(read_run(out))
    assert_same_runs(runs["merged"], runs["parts"], atol=ATOL)
    one = CliRunner().invoke(app, ["search", str(collection["parts"]), "insulin", "--json"])
    assert one.exit_code == 0 and '"doc_id"' in one.output


def test_what_only_shards_take_is_refused_elsewhere(collection, tmp_path):
    runner = CliRunner()
    single = runner.invoke(app, ["search", str(collection["merged"]), "q", "--ray", "local"])
    assert single.exit_code == 2 and "--ray does not apply with one index" in single.output
    local = runner.invoke(app, ["search", str(collection["parts"]), "q", "--replicas", "2"])
    assert local.exit_code == 2 and "--replicas applies only on Ray" in local.output
    budget = runner.invoke(app, ["serve", str(collection["parts"]), "--budget", "40"])
    assert budget.exit_code == 2 and "--budget 40 must be below the server's timeout 30" in (
        budget.output
    )
    with pytest.raises(DotcatError, match="one index, not a folder of shards"):
        SearchPipeline(collection["merged"], cluster=ClusterConfig(ray="local"))


class ByNumber:
    """Documents by the number in their id, highest first: a registered stage whose scores
    mean the same in every shard (as BM25's do in the collection's statistics)."""

    name, score_kind, sides = "by_number", "rank", ()

    def __init__(self, ids):
        self.ids = sorted(ids, key=lambda d: -int(d[1:]))

    @classmethod
    def create(cls, context):
        return cls(context.doc_ids())

    def search(self, queries, k, *, show_progress=False):
        return {q: [Match.whole(d, float(d[1:])) for d in self.ids[:k]] for q in queries}


def test_a_registered_stage_is_fanned_out_over_shards(collection):
    """Built on each shard as on one index, merged by score: the merged index's ranking; a
    registered stage that reads BM25 is refused, with why."""
    register_stage("by_number", ByNumber.create, help="a test stage")
    register_stage("lexical_plugin", ByNumber.create, sides=("bm25",), help="a test stage")
    try:
        merged, shards = pipeline(collection["merged"]), pipeline(collection["parts"])
        assert "by_number" in shards.describe()["stages_available"]
        one = merged.search("insulin", k=7, first_stage="by_number")
        many = shards.search("insulin", k=7, first_stage="by_number")
        top = [f"d{i}" for i in range(159, 152, -1)]
        assert [h.doc_id for h in many] == [h.doc_id for h in one] == top
        assert [h.score for h in many] == [h.score for h in one]
        with pytest.raises(DotcatError, match="reads BM25, which a folder of shards"):
            shards.search("insulin", first_stage="lexical_plugin")
    finally:
        del REGISTRY["by_number"], REGISTRY["lexical_plugin"]


@pytest.mark.kernels
def test_add_and_delete_go_to_the_shard_that_owns_each_document(collection, tmp_path):
    parts = tmp_path / "parts"
    shutil.copytree(collection["parts"], parts)
    new = [
        {"_id": "n1", "title": "Zebra study", "text": "zebra insulin glucose " * 4, "lab": "z"},
        {"_id": "n2", "title": "", "text": "zebra statin therapy for patients"},
        {"_id": "d5", "title": "Replaced", "text": "zebra bone vitamin"},
    ]
    added = tmp_path / "new.jsonl"
    added.write_text("".join(json.dumps(d) + "\n" for d in new), encoding="utf-8")
    runner, device = CliRunner(), ["--device", "cpu", "--precision", "fp32"]
    refused = runner.invoke(app, ["add", str(parts), str(added), *device])
    assert refused.exit_code == 2 and "'d5'" in refused.output and "--upsert" in refused.output
    done = runner.invoke(app, ["add", str(parts), str(added), "--upsert", *device])
    assert done.exit_code == 0, done.output
    assert "added 2 and replaced 1 documents" in done.output
    gone = runner.invoke(app, ["delete", str(parts), "d100", "d101"])
    assert gone.exit_code == 0 and "deleted 2 documents" in gone.output
    paths = sorted(parts.iterdir())
    held = owners(paths, ["n1", "n2", "d5", "d100", "d101"])
    assert held == {"n1": home_shard("n1", 3), "n2": home_shard("n2", 3), "d5": 0}
    refused = runner.invoke(app, ["merge", *map(str, paths), str(tmp_path / "merged")])
    assert refused.exit_code == 2 and "was changed since it was built" in refused.output
    # The updated shards rank as one index of the same documents (not fused: where BM25 ties,
    # the order of its ids, numbered otherwise there, moves RRF's ranks).
    with gzip.open(collection["corpus"], "rt", encoding="utf-8") as f:
        documents = [json.loads(line) for line in f]
    final = [d for d in documents if d["_id"] not in {"d5", "d100", "d101"}] + new
    whole = tmp_path / "whole"
    passages = PassageConfig(enabled=bool(Manifest.read(paths[0]).passages))
    build_index(final, whole, encoder_config(Path(Manifest.read(paths[0]).encoder["name"])),
                IndexConfig(passages=passages), show_progress=False)  # fmt: skip
    queries = {**QUERIES, "z": "zebra insulin"}
    for stage in ("dense", "bm25"):
        one = pipeline(whole).run(queries, 30, first_stage=stage)
        assert_same_runs(one, pipeline(parts).run(queries, 30, first_stage=stage), atol=ATOL)
    filtered = pipeline(parts).run({"z": "zebra"}, 10, first_stage="dense", filter='lab = "z"')
    assert [d for d, _ in filtered["z"]] == ["n1"]  # an added document's fields, filtered


def test_the_merge_keeps_each_document_s_shard_and_orders_ties_as_one_index():
    def match(doc: str, score: float, pid: int, passage: bool = False) -> Match:
        ref = PassageRef(pid, doc, 0, 0, 5 if passage else None)
        return Match(doc, score, ((ref, score),))

    answers = [[match("a", 0.9, 3), match("b", 0.5, 7)], None, [match("c", 0.9, 1)]]
    merged = merge(answers, 3, dense_key)  # FAISS: equal scores by id, and ids rise by shard
    assert [(shard, m.doc_id) for shard, m in merged] == [(0, "a"), (2, "c"), (0, "b")]
    passages = [[match("a", 0.9, 12, True)], [match("b", 0.9, 5, True)]]
    key = bm25_key([0, 100])  # BM25: by name, the passages' collection ids as strings
    assert [m.doc_id for _, m in merge(passages, 2, key)] == ["b", "a"]  # "105" < "12"
