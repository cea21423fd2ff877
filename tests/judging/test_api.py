"""The judging API of `dotcat serve --judge` (a real server on 127.0.0.1), and the opt-in
query log that `dotcat judge pool --query-log` pools."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from tests.serve.conftest import live_server
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.judging import JudgmentStore, read_query_log


@pytest.fixture()
def served(judge_pipeline, pooled_store, tmp_path):
    log = tmp_path / "queries.log"
    with live_server(judge_pipeline, judge=True, judgments=str(pooled_store.path),
                     query_log=str(log)) as url:  # fmt: skip
        yield url, pooled_store, log


def test_the_state_a_topic_and_a_document(served):
    url, store, _ = served
    state = httpx.get(f"{url}/judge/api/state", params={"assessor": "ann"}).json()
    assert state["scale"]["0"] == "not relevant" and len(state["scale"]) == 4
    assert [t["qid"] for t in state["topics"]] == ["q1", "q2", "q3"]
    topic = httpx.get(f"{url}/judge/api/topic", params={"qid": "q1", "assessor": "ann"}).json()
    assert topic["description"] == "Where dogs come from." and "wolves" in topic["terms"]
    assert [d["doc_id"] for d in topic["docs"]] == [e.doc_id for e in store.pooled("q1")]
    doc_id = topic["docs"][0]["doc_id"]
    doc = httpx.get(f"{url}/judge/api/document", params={"qid": "q1", "doc_id": doc_id}).json()
    stored = store.pooled_entry("q1", doc_id)
    assert doc["doc_id"] == doc_id and doc["ranks"] == stored.ranks
    assert 0 <= doc["passage"]["start"] < doc["passage"]["stop"] <= len(doc["text"])
    page = httpx.get(f"{url}/judge")
    assert page.status_code == 200 and "dotcat judging" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]


def test_grades_undo_and_the_assessors_agreement(served):
    url, store, _ = served
    docs = [e.doc_id for e in store.pooled("q2")][:4]
    for assessor, grades in (("ann", [0, 1, 2, 3]), ("bob", [0, 1, 2, 2])):
        for doc, grade in zip(docs, grades, strict=True):
            answer = httpx.post(f"{url}/judge/api/judgments", json={
                "qid": "q2", "doc_id": doc, "assessor": assessor, "grade": grade})  # fmt: skip
            assert answer.status_code == 200, answer.text
    assert answer.json()["judged"] == 4 and answer.json()["pooled"] == len(store.pooled("q2"))
    (pair,) = httpx.get(f"{url}/judge/api/agreement").json()["pairs"]
    assert (pair["first"], pair["second"], pair["documents"]) == ("ann", "bob", 4)
    undone = httpx.post(f"{url}/judge/api/undo", json={"assessor": "bob"}).json()
    assert (undone["doc_id"], undone["grade"]) == (docs[3], 2)
    assert {(j.doc_id, j.grade) for j in store.current("bob")} == set(
        zip(docs[:3], [0, 1, 2], strict=True)
    )


def test_a_repeated_or_late_grade_request_changes_nothing(served):
    """The page's requests name its client and a number: the answer is the row that stands,
    the same for a repeat (eight at once among them), the newer one for a late request; the
    number used again for another document is refused."""
    url, store, _ = served
    a, b = (e.doc_id for e in store.pooled("q1")[:2])

    def post(doc, grade, seq):
        body = {"qid": "q1", "doc_id": doc, "assessor": "ann", "grade": grade,
                "client": "c0ffee", "seq": seq}  # fmt: skip
        return httpx.post(f"{url}/judge/api/judgments", json=body)

    with ThreadPoolExecutor(8) as pool:
        answers = [r.json() for r in pool.map(lambda _: post(a, 2, 1), range(8))]
    first = answers[0]
    assert (first["doc_id"], first["grade"], first["seq"], first["client"]) == (a, 2, 1, "c0ffee")
    assert first["judged"] == 1 and all(answer == first for answer in answers)
    newer = post(a, 0, 3).json()
    late = post(a, 3, 2).json()
    assert (late["id"], late["grade"], late["seq"]) == (newer["id"], 0, 3)
    clash = post(b, 1, 3)
    assert clash.status_code == 400
    assert "request 3 of client 'c0ffee' was saved for another judgement" in clash.json()["error"]
    assert [(j.doc_id, j.grade) for j in store.log()] == [(a, 2), (a, 0)]
    undo = {"assessor": "ann", "client": "c0ffee", "seq": 4}
    undone = [httpx.post(f"{url}/judge/api/undo", json=undo).json() for _ in range(2)]
    assert undone[0] == undone[1] and undone[0]["id"] == newer["id"]  # one row withdrawn
    assert [(j.doc_id, j.grade) for j in store.current("ann")] == [(a, 2)]
    graded_b = post(b, 1, 6).json()  # an undo sent before it (seq 5) arrives late:
    late_undo = httpx.post(f"{url}/judge/api/undo", json={**undo, "seq": 5}).json()
    assert late_undo["id"] != graded_b["id"] and late_undo["doc_id"] == a  # not the newer grade
    other = httpx.post(f"{url}/judge/api/undo", json={**undo, "client": "another", "seq": 9})
    assert other.status_code == 404  # another page's undo withdraws none of this page's grades
    assert [(j.doc_id, j.grade) for j in store.current("ann")] == [(b, 1)]
    bad = httpx.post(f"{url}/judge/api/judgments", json={"qid": "q1", "doc_id": a,
                     "assessor": "ann", "grade": 1, "client": "c0ffee", "seq": -1})  # fmt: skip
    assert bad.status_code == 422 and "seq" in bad.json()["error"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"qid": "q1", "doc_id": "DOC", "assessor": "ann", "grade": 4}, 400,
         "grade 4 is outside the scale 0-3"),
        ({"qid": "q9", "doc_id": "DOC", "assessor": "ann", "grade": 1}, 400,
         "unknown query id 'q9'"),
        ({"qid": "q1", "doc_id": "nope", "assessor": "ann", "grade": 1}, 400,
         "document 'nope' is not in the pool of query 'q1'"),
        ({"qid": "q1", "doc_id": "DOC", "assessor": "ann", "grade": "two"}, 422, "grade"),
        ({"qid": "q1", "doc_id": "DOC", "assessor": "ann", "grade": "2"}, 422, "grade"),
        ({"qid": "q1", "doc_id": "DOC", "assessor": "ann", "grade": True}, 422, "grade"),
        ({"qid": "q1", "doc_id": "DOC", "assessor": "ann", "grade": 1.0}, 422, "grade"),
        ({"qid": 1, "doc_id": "DOC", "assessor": "ann", "grade": 1}, 422, "qid"),
        ({"qid": "q1", "doc_id": "DOC", "assessor": "ann"}, 422, "grade"),
    ],
)  # fmt: skip
def test_bad_judgements_are_refused_with_one_line(served, body, status, message):
    url, store, _ = served
    body = {k: store.pooled("q1")[0].doc_id if v == "DOC" else v for k, v in body.items()}
    answer = httpx.post(f"{url}/judge/api/judgments", json=body)
    assert answer.status_code == status and message in answer.json()["error"]
    assert store.log() == []


def test_a_typed_query_is_pooled_at_once(served, judge_pipeline):
    url, store, _ = served
    added = httpx.post(
        f"{url}/judge/api/topics",
        json={"text": "plants turn light into energy", "description": "photosynthesis"},
    ).json()
    assert added["qid"] == "page-1" and added["pooled"] > 0
    pooled = {e.doc_id for e in store.pooled("page-1")}
    top = judge_pipeline.run({"t": "plants turn light into energy"}, 5, first_stage="hybrid")
    assert {d for d, _ in top["t"]} <= pooled  # pooled as the store's pool was: depth 5
    again = httpx.post(f"{url}/judge/api/topics", json={"text": "plants turn light into energy"})
    assert again.json()["qid"] == "page-1"  # the same text: the same query
    assert httpx.post(f"{url}/judge/api/topics", json={"text": "  "}).status_code == 422


@pytest.mark.kernels
def test_the_query_log_is_pooled_by_judge_pool(served, judge_index, tmp_path):
    url, _, log = served
    for q in ("insulin and blood sugar", "wolves", "Insulin  and blood sugar", "wolves"):
        assert httpx.get(f"{url}/search", params={"q": q, "k": 3}).status_code == 200
    assert httpx.post(f"{url}/search", json={"queries": ["cells energy", "wolves"]}).is_success
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["query"] for r in records][:2] == ["insulin and blood sugar", "wolves"]
    topics = read_query_log(log)
    assert [t.text for t in topics] == ["wolves", "insulin and blood sugar", "cells energy"]
    result = CliRunner().invoke(app, ["judge", "pool", str(judge_index), "--query-log", str(log),
                                      "--max-queries", "2", "--judgments",
                                      str(tmp_path / "log.sqlite"), "--pool-depth", "2",
                                      "--device", "cpu", "--precision", "fp32"])  # fmt: skip
    assert result.exit_code == 0, result.output
    with JudgmentStore(tmp_path / "log.sqlite") as store:
        assert [t.text for t in store.topics()] == ["wolves", "insulin and blood sugar"]
        assert all(t.qid.startswith("log-") for t in store.topics())
