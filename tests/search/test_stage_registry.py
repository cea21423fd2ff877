"""A first stage added from outside dotcat: one module and one registry line.

The module below ranks every document by its id (no model, no BM25). It is registered once as
an entry point of the group ``dotcat.first_stages`` (a package's one line in its metadata)
for the command line run in another process, and once with ``register_stage`` in this
process; the pipeline, the command line, the server and experiments then offer it with no
edit of theirs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
from tests.serve.conftest import live_server

from dotcat.errors import DotcatError
from dotcat.search.pipeline import SearchPipeline
from dotcat.search.stages import REGISTRY, register_stage, stage_names

PLUGIN = '''
"""Every document, in id order: a first stage that reads no side of the index."""

from dotcat.search.aggregation import Match


class IdOrder:
    """Documents in id order (a test of the first-stage registry)."""

    name = "id_order"
    score_kind = "rank"
    sides = ()

    def __init__(self, ids):
        self.ids = ids

    @classmethod
    def create(cls, context):
        return cls(sorted(context.doc_ids()))

    def search(self, queries, k, *, show_progress=False):
        n = len(self.ids)
        top = [(d, float(n - i)) for i, d in enumerate(self.ids[:k])]
        return {q: [Match.whole(d, s) for d, s in top] for q in queries}
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    """A site folder holding the plugin module and its distribution's entry point."""
    site = tmp_path_factory.mktemp("site")
    (site / "id_order_stage.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    info = site / "id_order_stage-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: id-order-stage\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dotcat.first_stages]\nid_order = id_order_stage:IdOrder.create\n"
    )
    return site


@pytest.fixture
def registered(plugin, monkeypatch):
    """The stage registered in this process (``register_stage``), removed afterwards."""
    monkeypatch.syspath_prepend(str(plugin))
    register_stage("id_order", "id_order_stage:IdOrder.create", help="documents in id order")
    yield
    REGISTRY.pop("id_order", None)


def _ids(index) -> list[str]:
    from dotcat.index import DocStore, Manifest

    store = DocStore(Path(index) / Manifest.read(index).files["docstore"])
    try:
        return sorted(d for batch in store.iter_rows() for _, d, _, _ in batch)
    finally:
        store.close()


def test_python_searches_with_a_registered_stage(index, registered):
    assert "id_order" in stage_names()
    pipeline = SearchPipeline(index, first_stage="id_order", device="cpu", precision="fp32")
    hits = pipeline.search("anything at all", 5)
    assert [h.doc_id for h in hits] == _ids(index)[:5]
    assert {h.score_kind for h in hits} == {"rank"}
    assert "id_order" in pipeline.describe()["stages_available"]
    # the other stages of the same pipeline are untouched
    assert pipeline.search("insulin", 3, first_stage="bm25")[0].score_kind == "bm25"


def test_an_unknown_stage_is_one_line_naming_the_registered_ones(index):
    with pytest.raises(DotcatError, match="first_stage must be one of auto, dense, bm25, hybrid"):
        SearchPipeline(index, first_stage="id_order", device="cpu")


def test_the_command_line_offers_a_stage_registered_by_entry_point(index, plugin):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), *sys.path])}
    command = [sys.executable, "-c", "import sys; from dotcat.cli import app; sys.exit(app())"]
    shown = subprocess.run([*command, "search", "--help"], capture_output=True, text=True,
                           env=env, timeout=120, check=True)  # fmt: skip
    assert "id_order" in shown.stdout
    done = subprocess.run(
        [*command, "search", str(index), "a query", "--first-stage", "id_order", "-k", "4",
         "--json", "--device", "cpu"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)
    assert [h["doc_id"] for h in hits] == _ids(index)[:4]


@pytest.mark.kernels
def test_the_server_serves_a_registered_stage(index, registered):
    pipeline = SearchPipeline(index, device="cpu", precision="fp32")
    with live_server(pipeline) as url:
        info = json.load(urllib.request.urlopen(f"{url}/info", timeout=30))
        assert "id_order" in info["first_stages"]
        query = f"{url}/search?q=whatever&k=3&first_stage=id_order"
        answer = json.load(urllib.request.urlopen(query, timeout=30))
    assert answer["first_stage"] == "id_order"
    assert [h["doc_id"] for h in answer["hits"]] == _ids(index)[:3]


@pytest.mark.kernels
def test_an_experiment_runs_a_registered_stage(index, data, registered, tmp_path):
    from dotcat.experiment import parse_config, run_experiment

    config = parse_config(
        {
            "output": str(tmp_path / "report"),
            "baseline": "BM25",
            "k": 5,
            "device": "cpu",
            "precision": "fp32",
            "dataset": {"path": str(data), "split": "train"},
            "systems": [
                {"name": "BM25", "first_stage": "bm25"},
                {"name": "by id", "first_stage": "id_order", "index": str(index)},
            ],
        },
        "plugin.toml",
    )
    result = run_experiment(config)
    lines = Path(result.run_files["by id"]).read_text().splitlines()
    first_query = lines[0].split()[0]
    ranked = [line.split()[2] for line in lines if line.split()[0] == first_query]
    assert ranked == _ids(index)[:5]


@pytest.mark.kernels
def test_a_judging_pool_takes_a_registered_stage(index, registered, tmp_path):
    from dotcat.judging import JudgmentStore, PoolConfig, Topic, build_pool

    pipeline = SearchPipeline(index, device="cpu", precision="fp32")
    store = JudgmentStore(tmp_path / "j.sqlite", create=True)
    config = PoolConfig(pool_depth=3, systems=("id_order", "bm25"))
    build_pool(pipeline, store, [Topic("q1", "insulin and blood sugar")], config)
    ranked_by_id_order = sorted(
        (e for e in store.pooled("q1") if "id_order" in e.ranks), key=lambda e: e.ranks["id_order"]
    )
    assert [e.doc_id for e in ranked_by_id_order] == _ids(index)[:3]
    assert any("bm25" in e.ranks for e in store.pooled("q1"))
