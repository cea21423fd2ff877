"""Shards as services on a real two-node Ray cluster: the merged index's answers, and faults.

One local cluster of two nodes (``ray.cluster_utils.Cluster``, four logical CPUs each) serves
the module. A collection indexed as three shards (with passages) is searched by Ray actors,
each shard with its replicas: through Python, through the HTTP front (a real server on
127.0.0.1) and through ``dotcat serve --ray ADDRESS``. A replica killed with SIGKILL under 16
concurrent clients fails no request when its shard has another replica; with one replica,
answers come within the budget, marked partial, until Ray has started it again.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from tests.rankings import assert_same_runs
from tests.search.collections import QUERIES, build_collection
from tests.serve.conftest import free_port, live_server
from tests.timing import within

ray = pytest.importorskip("ray")

from dotcat.search.cluster import ClusterConfig  # noqa: E402
from dotcat.search.pipeline import PipelineConfig, SearchPipeline  # noqa: E402

pytestmark = pytest.mark.ray
ATOL = 1e-5
CONFIG = PipelineConfig(device="cpu")
#: Seconds a search waits for the shards with one replica (a down shard is left out at once),
#: and with two (a killed replica's call fails after Ray sees it dead, ~2 s, then goes to the
#: other: loaded CI machines need room for both).
BUDGET = 3.0
REPLICATED_BUDGET = 15.0


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """Two Ray nodes on this machine; this process their driver."""
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOTCAT_CACHE", str(tmp_path_factory.getbasetemp() / "dotcat-cache"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False}
        )
        cluster.add_node(num_cpus=4)
        ray.init(address=cluster.address)
        try:
            yield cluster
        finally:
            ray.shutdown()
            cluster.shutdown()


@pytest.fixture(scope="module")
def collection(tmp_path_factory, tiny_bert_dir):
    return build_collection(tmp_path_factory.mktemp("ray_shards"), tiny_bert_dir, 3, True)


@pytest.fixture(scope="module")
def merged(collection):
    return SearchPipeline(collection["merged"], CONFIG)


def on_ray(local_ray, collection, replicas: int, budget: float = BUDGET) -> SearchPipeline:
    cluster = ClusterConfig(ray=local_ray.address, replicas=replicas, shard_cpus=0.5,
                            budget_s=budget)  # fmt: skip
    return SearchPipeline(collection["parts"], CONFIG, cluster=cluster)


@pytest.fixture(scope="module")
def replicated(local_ray, collection):
    """Each shard held by two actors."""
    pipeline = on_ray(local_ray, collection, replicas=2, budget=REPLICATED_BUDGET)
    yield pipeline
    pipeline.close()


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + within(seconds)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.2)


def all_up(pipeline) -> bool:
    return all(s["state"] == "ok" for s in pipeline.describe()["shards"])


def test_shards_on_two_nodes_answer_as_the_merged_index(replicated, merged):
    for stage in ("dense", "bm25", "hybrid"):
        one = merged.run(QUERIES, 30, first_stage=stage)
        assert_same_runs(one, replicated.run(QUERIES, 30, first_stage=stage), atol=ATOL)
    budget = replicated.stages.cluster
    replicated.stages.cluster = dataclasses.replace(budget, budget_s=None)  # wait: a run
    try:
        assert_same_runs(merged.run(QUERIES, 30), replicated.run(QUERIES, 30), atol=ATOL)
    finally:
        replicated.stages.cluster = budget
    status = replicated.describe()["shards"]
    nodes = {p["node"] for s in status for p in s["processes"]}
    assert len(nodes) == 2 and None not in nodes  # the replicas spread over both nodes
    assert [(s["shard"], s["replicas"], s["up"], s["state"]) for s in status] == [
        (f"s{i}", 2, 2, "ok") for i in range(3)
    ]


def test_shards_on_ray_filter_as_the_merged_index(local_ray, tmp_path, tiny_bert_dir):
    from tests.search.test_filtered_search import assert_filters_as_merged, build_shards_with_fields

    from dotcat.models import EncoderConfig

    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    parts, merged, docs = build_shards_with_fields(tmp_path, encoder)
    config = PipelineConfig(device="cpu", first_stage="hybrid", prf="both", fb_docs=3,
                            rocchio_docs=3)  # fmt: skip
    cluster = ClusterConfig(ray=local_ray.address, replicas=1, shard_cpus=0.5,
                            budget_s=REPLICATED_BUDGET)  # fmt: skip
    over_ray = SearchPipeline(parts, config, cluster=cluster)
    try:
        assert_filters_as_merged(over_ray, SearchPipeline(merged, config), docs)
    finally:
        over_ray.close()


def test_the_http_front_answers_as_the_merged_index(replicated, merged):
    texts = list(QUERIES.values())
    expected = merged.search_many(texts, 10)
    with live_server(replicated) as url:
        one = httpx.get(f"{url}/search", params={"q": texts[0], "k": 10}, timeout=30).json()
        many = httpx.post(f"{url}/search", json={"queries": texts}, timeout=30).json()
        info = httpx.get(f"{url}/info", timeout=30).json()
    assert one["coverage"] == {"full": True, "coverage": 100.0, "documents": 160, "total": 160,
                               "shards": 3, "answered": 3, "missing": []}  # fmt: skip
    for result, hits in zip([one, *many["results"]], [expected[0], *expected], strict=True):
        assert_same_runs(
            {"q": [(h["doc_id"], h["score"]) for h in result["hits"]]},
            {"q": [(h.doc_id, h.score) for h in hits]},
            atol=ATOL,
        )
    assert info["index"]["documents"] == 160
    assert [(s["shard"], s["state"]) for s in info["shards"]] == [("s0", "ok"), ("s1", "ok"),
                                                                  ("s2", "ok")]  # fmt: skip


def _run_clients(url: str, during, clients: int = 16) -> list[tuple[int, float, dict]]:
    """``clients`` concurrent clients asking while ``during(answers)`` runs: each answer's
    status, seconds and coverage."""
    answers: list[tuple[int, float, dict]] = []
    stop = threading.Event()
    texts = list(QUERIES.values())

    def client(i: int) -> None:
        with httpx.Client(timeout=60) as http:
            for j in range(10_000):
                if stop.is_set():
                    return
                start = time.monotonic()
                try:
                    r = http.get(f"{url}/search", params={"q": texts[(i + j) % len(texts)]})
                    coverage = r.json().get("coverage", {}) if r.status_code == 200 else {}
                    answers.append((r.status_code, time.monotonic() - start, coverage))
                except httpx.HTTPError:
                    answers.append((0, time.monotonic() - start, {}))

    with ThreadPoolExecutor(clients) as pool:
        for i in range(clients):
            pool.submit(client, i)
        try:
            time.sleep(1.0)
            during(answers)
        finally:
            stop.set()
    return answers


def test_a_killed_replica_fails_no_request_when_its_shard_has_another(replicated):
    with live_server(replicated) as url:
        victim = replicated.stages.group.pids()[1][0]

        def kill(answers) -> None:
            os.kill(victim, signal.SIGKILL)
            time.sleep(3.0)

        answers = _run_clients(url, kill)
    assert len(answers) > 32
    assert [a for a in answers if a[0] != 200] == []
    assert all(coverage["full"] for _, _, coverage in answers)
    wait_for(lambda: all_up(replicated), 60, "the killed replica's restart")
    assert victim not in replicated.stages.group.pids()[1]


def test_with_one_replica_answers_are_partial_while_its_shard_is_down(
    local_ray, collection, merged
):
    pipeline = on_ray(local_ray, collection, replicas=1)
    try:
        before = pipeline.run(QUERIES, 20)
        held = pipeline.describe()["shards"][2]["documents"]
        with live_server(pipeline) as url:
            victim = pipeline.stages.group.pids()[2][0]

            def kill(answers) -> None:
                os.kill(victim, signal.SIGKILL)
                partial = lambda: any(not c.get("full", True) for *_, c in answers)  # noqa: E731
                wait_for(partial, 30, "a partial answer")

            answers = _run_clients(url, kill)
        assert [a for a in answers if a[0] != 200] == []
        assert max(seconds for _, seconds, _ in answers) < BUDGET + within(5)
        down = [c for _, _, c in answers if not c["full"]]
        assert down and {tuple(c["missing"]) for c in down} == {("s2",)}
        assert all(c["documents"] == 160 - held and c["coverage"] < 100 for c in down)
        wait_for(lambda: all_up(pipeline), 60, "the shard's restart")
        hits = pipeline.search_many(["insulin glucose"], 5)[0]
        assert hits.coverage.full
        assert_same_runs(pipeline.run(QUERIES, 20), before, atol=ATOL)
        assert_same_runs(before, merged.run(QUERIES, 20), atol=ATOL)
    finally:
        pipeline.close()


@pytest.mark.parametrize("given", [True, False], ids=["--ray ADDRESS", "default: local"])
def test_dotcat_serve_runs_the_shards_on_the_cluster_it_is_given(local_ray, collection, given):
    """Without --ray, serve starts a Ray of its own, even where RAY_ADDRESS names another
    cluster (ray.init(num_cpus=...) joined that one, and failed: num_cpus is not allowed)."""
    port = free_port()
    command = [
        sys.executable, "-c", "import sys; from dotcat.cli import app; sys.exit(app())",
        "serve", str(collection["parts"]), "--port", str(port),
        *(["--ray", local_ray.address] if given else []),
        "--replicas", "1", "--shard-cpus", "0.5", "--device", "cpu", "--precision", "fp32",
    ]  # fmt: skip
    env = {**os.environ, "RAY_ADDRESS": local_ray.address}
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url) or server.poll() is not None, 120, "the server's start")
        assert server.poll() is None, server.stderr.read()
        found = httpx.get(f"{url}/search", params={"q": "insulin glucose", "k": 3}).json()
        assert found["coverage"]["full"] and len(found["hits"]) == 3
        info = httpx.get(f"{url}/info").json()
        assert [s["replicas"] for s in info["shards"]] == [1, 1, 1]
    finally:
        server.send_signal(signal.SIGTERM)
        status = server.wait(timeout=60)
    assert status == 0
    assert "3 shards x 1 on Ray at" in server.stderr.read()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
