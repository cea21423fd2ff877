"""dotcat serve's HTTP API, against a real server on 127.0.0.1: answers, limits, errors."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import httpx
import pytest
from tests.serve.conftest import live_server, raw_request
from tests.timing import within

from dotcat.errors import DotcatError
from dotcat.serve.app import ServeConfig, is_loopback
from dotcat.serve.client import ServerClient
from dotcat.serve.refusals import MAX_URL_BYTES
from dotcat.serve.snippet import SNIPPET_CHARS, TITLE_CHARS

QUERIES = ["which animals were domesticated from wolves", "how do cells make ATP", "insulin"]


def _hits(answer: dict) -> list[tuple[str, float]]:
    return [(h["doc_id"], h["score"]) for h in answer["hits"]]


def _expected(pipeline, query: str, k: int, **options) -> list[tuple[str, float]]:
    return [(h.doc_id, h.score) for h in pipeline.search(query, k, **options)]


# -- answers --------------------------------------------------------------------------------


def test_get_search_answers_as_the_pipeline_does(server, pipeline):
    for query in QUERIES:
        answer = httpx.get(f"{server}/search", params={"q": query, "k": 4}).json()
        assert answer["query"] == query and answer["k"] == 4
        assert answer["first_stage"] == "hybrid" and answer["reranked"] is False
        assert _hits(answer) == _expected(pipeline, query, 4)
        assert [h["rank"] for h in answer["hits"]] == [1, 2, 3, 4]
        assert answer["took_ms"] > 0
    dense = httpx.get(f"{server}/search", params={"q": "insulin", "first_stage": "dense"}).json()
    assert dense["first_stage"] == "dense"
    assert _hits(dense) == _expected(pipeline, "insulin", 10, first_stage="dense")
    # every score says its scale, as the pipeline's hits do
    assert {h["score_kind"] for h in answer["hits"]} == {pipeline.score_kind()}
    assert {h["score_kind"] for h in dense["hits"]} == {pipeline.score_kind(first_stage="dense")}


def test_post_one_query_or_many(server, pipeline):
    one = httpx.post(f"{server}/search", json={"query": QUERIES[0], "k": 3}).json()
    assert _hits(one) == _expected(pipeline, QUERIES[0], 3)
    many = httpx.post(
        f"{server}/search", json={"queries": QUERIES, "k": 2, "first_stage": "bm25"}
    ).json()
    assert [r["query"] for r in many["results"]] == QUERIES
    for query, result in zip(QUERIES, many["results"], strict=True):
        assert _hits(result) == _expected(pipeline, query, 2, first_stage="bm25")


def test_documents_health_and_info(server, pipeline):
    doc = httpx.get(f"{server}/documents/d4").json()
    assert doc == {"doc_id": "d4", "title": "Mitochondria", "text": pipeline.document("d4").text,
                   "fields": {}}  # fmt: skip
    missing = httpx.get(f"{server}/documents/nope")
    assert missing.status_code == 404 and missing.json() == {"error": "no document with id 'nope'"}
    assert httpx.get(f"{server}/healthz").json() == {"status": "ok"}
    info = httpx.get(f"{server}/info").json()
    assert info["index"]["documents"] == 6 and info["first_stage"] == "hybrid"
    assert info["index"]["bm25"] and info["first_stages"] == ["dense", "bm25", "hybrid"]
    assert info["limits"]["max_k"] == ServeConfig().max_k and "api_key" not in info["limits"]
    assert info["server"]["pid"] == os.getpid()  # served in this process
    assert info["limits"]["workers"] == 1
    assert info["feedback"] == "none"
    page = httpx.get(f"{server}/")
    assert page.status_code == 200 and "<title>dotcat search</title>" in page.text
    assert httpx.get(f"{server}/static/app.js").status_code == 200


def test_reranking_is_on_by_default_and_per_request(reranking_pipeline):
    with live_server(reranking_pipeline) as url:
        on = httpx.get(f"{url}/search", params={"q": "insulin glucose", "k": 3}).json()
        assert on["reranked"] is True
        assert _hits(on) == _expected(reranking_pipeline, "insulin glucose", 3)
        off = httpx.get(f"{url}/search", params={"q": "insulin glucose", "rerank": "false"})
        assert off.json()["reranked"] is False
        expected = _expected(reranking_pipeline, "insulin glucose", 10, rerank=False)
        assert _hits(off.json()) == expected
        deep = httpx.get(f"{url}/search", params={"q": "insulin glucose", "depth": 6}).json()
        assert _hits(deep) == _expected(reranking_pipeline, "insulin glucose", 10, depth=6)


# -- bad requests: 4xx with a message, never a 500 ------------------------------------------


BAD_GETS = [
    ({"q": ""}, "q: String should have at least 1 character"),
    ({"q": "   "}, "q: must hold a character other than white space"),
    ({"q": "x" * 2001}, "q: String should have at most 2000 characters"),
    ({"q": "insulin", "k": "0"}, "k: Input should be greater than or equal to 1"),
    ({"q": "insulin", "k": "1001"}, "k: Input should be less than or equal to 1000"),
    ({"q": "insulin", "k": "ten"}, "k: expected an integer"),
    ({"q": "insulin", "kk": "3"}, "unknown query parameter(s): kk (known: q, k, rerank,"),
    ({"q": ["insulin", "cats"]}, "query parameter(s) given twice: q (one value each; several"),
    ({"q": "insulin", "k": ["3", "5"]}, "given twice: k"),  # (the last one was taken)
    ({"q": "insulin", "full_text": "maybe"}, "full_text: expected true or false"),
    ({"q": "insulin", "first_stage": "magic"}, "first_stage: Input should be"),
    ({"q": "insulin", "rerank": "true"}, "this server has no re-ranker"),
    ({"q": "\u200b \u2060"}, "q: must hold a character other than white space"),
    ({}, "q: Field required"),
]


@pytest.mark.parametrize(("params", "message"), BAD_GETS)
def test_bad_get_is_422_with_a_message(server, params, message):
    response = httpx.get(f"{server}/search", params=params)
    assert response.status_code == 422 and message in response.json()["error"], response.text


BAD_POSTS = [
    ({"queries": "statins"}, "queries: expected a list of strings"),
    ({"query": ["statins"]}, "query: expected a string"),
    ({"query": "x", "bogus": 1}, "bogus: unknown field (known: query, queries, k, first_stage,"),
    ({}, "give `query` (one query) or `queries` (a list of queries)"),
    ({"query": "x", "queries": ["y"]}, "give either `query` or `queries`, not both"),
    (["statins"], 'the body must be a JSON object: {"query": "..."} or {"queries"'),
    ({"queries": []}, "queries: List should have at least 1 item"),
    ({"queries": ["ok", "  "]}, "queries[1]: must hold a character other than white space"),
    ({"queries": ["q"] * 65}, "queries: List should have at most 64 items"),
    ({"query": "x", "k": True}, "k: expected an integer"),
    ({"query": "x", "k": "5"}, "k: expected an integer"),
    ({"query": "x", "depth": 0}, "depth: Input should be greater than or equal to 1"),
    ({"query": "x", "rerank": "yes"}, "rerank: expected true or false"),
    ({"query": "x", "full_text": 1}, "full_text: expected true or false"),
]


@pytest.mark.parametrize(("body", "message"), BAD_POSTS)
def test_bad_post_is_422_with_a_message(server, body, message):
    response = httpx.post(f"{server}/search", json=body)
    assert response.status_code == 422 and message in response.json()["error"], response.text
    # in the request's terms: never the names of the server's own models
    assert not re.search(r"Search(One|Many|Body)|Value error", response.text), response.text


def test_bodies_that_are_not_json_or_too_big(server):
    response = httpx.post(
        f"{server}/search", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422 and response.json()["error"] == "the body is not valid JSON"
    big = json.dumps({"query": "word " * 20_000}).encode()  # 100 kB > the 64 kiB cap
    response = httpx.post(
        f"{server}/search", content=big, headers={"content-type": "application/json"}
    )
    assert response.status_code == 413 and "body over 65536 bytes" in response.json()["error"]

    def chunks():  # no Content-Length: the cap holds on the bytes that arrive
        for _ in range(20):
            yield b" " * 8192

    streamed = httpx.post(
        f"{server}/search", content=chunks(), headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413


def test_405_lists_every_method_of_the_path(server):
    response = httpx.request("DELETE", f"{server}/search")
    assert response.status_code == 405 and response.headers["allow"] == "GET, POST"


# -- access control ------------------------------------------------------------------------


def test_an_api_key_is_required_and_checked(pipeline):
    with live_server(pipeline, api_key="s3cret-key") as url:
        assert httpx.get(f"{url}/search", params={"q": "insulin"}).status_code == 401
        wrong = httpx.get(f"{url}/search", params={"q": "insulin"}, headers={"x-api-key": "nope"})
        assert wrong.status_code == 401 and wrong.json()["error"] == "missing or wrong API key"
        assert wrong.headers["www-authenticate"] == "Bearer"
        right = {"x-api-key": "s3cret-key"}
        assert httpx.get(f"{url}/search", params={"q": "insulin"}, headers=right).status_code == 200
        bearer = {"authorization": "Bearer s3cret-key"}
        assert httpx.get(f"{url}/info", headers=bearer).status_code == 200
        assert httpx.post(f"{url}/search", json={"query": "x"}).status_code == 401
        assert httpx.get(f"{url}/documents/d1").status_code == 401
        assert httpx.get(f"{url}/healthz").status_code == 200  # liveness stays open
        assert httpx.get(f"{url}/").status_code == 200  # the page asks for the key itself


def test_beyond_loopback_only_with_a_key():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    with pytest.raises(DotcatError, match="needs an API key"):
        ServeConfig(host="0.0.0.0").check()
    ServeConfig(host="0.0.0.0", api_key="k").check()
    # A key an HTTP header cannot carry as typed locked every client out (curl sends UTF-8,
    # the server reads Latin-1; urllib failed with a traceback): refused, on both sides.
    for key in ("clé€", "two words"):
        with pytest.raises(DotcatError, match="api_key: only ASCII letters, digits and punct"):
            ServeConfig(api_key=key).check()
        with pytest.raises(DotcatError, match="api_key: only ASCII letters, digits and"):
            ServerClient("http://127.0.0.1:9", api_key=key)


# -- load: batching, a bounded queue, a time limit ------------------------------------------


class _Slow:
    """The pipeline, each model call taking ``delay`` seconds longer (counted)."""

    def __init__(self, inner, delay: float) -> None:
        self.inner, self.delay, self.calls = inner, delay, 0
        self.lock = threading.Lock()

    def search_many(self, *args, **kwargs):
        with self.lock:
            self.calls += 1
        time.sleep(self.delay)
        return self.inner.search_many(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _get_all(url: str, queries: list[str], workers: int) -> list[httpx.Response]:
    with ThreadPoolExecutor(workers) as pool:
        return list(
            pool.map(lambda q: httpx.get(f"{url}/search", params={"q": q}, timeout=30), queries)
        )


def test_concurrent_requests_share_model_calls(pipeline):
    slow = _Slow(pipeline, 0.3)
    queries = [f"{QUERIES[i % 3]} {i}" for i in range(12)]
    with live_server(slow) as url:
        responses = _get_all(url, queries, 12)
    assert all(r.status_code == 200 for r in responses)
    for query, response in zip(queries, responses, strict=True):
        assert response.json()["query"] == query
        assert _hits(response.json()) == _expected(pipeline, query, 10)
    assert slow.calls < len(queries)  # batched: fewer model calls than requests


def test_a_full_queue_answers_503_at_once_and_everyone_gets_a_response(pipeline):
    # Each accepted request takes 2 s; a refusal must not wait for any of them ("at once":
    # well under one model call, with room for a loaded machine).
    slow = _Slow(pipeline, 2.0)
    with live_server(slow, queue_size=2, max_batch=1) as url:
        started = time.perf_counter()

        def timed(q):
            t0 = time.perf_counter()
            r = httpx.get(f"{url}/search", params={"q": q}, timeout=60)
            return r, time.perf_counter() - t0

        with ThreadPoolExecutor(10) as pool:
            results = list(pool.map(timed, [f"insulin {i}" for i in range(10)]))
    statuses = [r.status_code for r, _ in results]
    assert set(statuses) <= {200, 503} and statuses.count(200) >= 1 and 503 in statuses
    for response, seconds in results:
        if response.status_code == 503:
            assert response.headers["retry-after"] == "1" and seconds < within(1.0)
            assert "queue full" in response.json()["error"]
    assert time.perf_counter() - started < within(30)


def test_over_the_time_limit_is_504(pipeline):
    with live_server(_Slow(pipeline, 1.5), timeout_s=0.3) as url:
        response = httpx.get(f"{url}/search", params={"q": "insulin"}, timeout=30)
    assert response.status_code == 504 and "time limit" in response.json()["error"]


def test_one_access_log_line_per_request(server, caplog):
    with caplog.at_level(logging.INFO, logger="dotcat.serve.access"):
        httpx.get(f"{server}/search", params={"q": "insulin", "k": 3})
        httpx.get(f"{server}/search", params={"q": ""})
    records = [
        json.loads(r.getMessage()) for r in caplog.records if r.name == "dotcat.serve.access"
    ]
    ok, bad = records[-2:]
    assert ok["status"] == 200 and ok["k"] == 3 and ok["first_stage"] == "hybrid"
    assert ok["batch"] >= 1 and ok["ms"] > 0 and ok["path"] == "/search"
    assert bad["status"] == 422 and bad["client"] == "127.0.0.1"


# -- the OpenAPI spec against the server ----------------------------------------------------


#: A filter is a string whose grammar no JSON schema states: a schema-valid one that does not
#: parse (or names no field) is /search's documented 400 naming the column and token, so there
#: (and only there) a 400 answers valid data; every other check stays as it is.
SEARCH_MAY_REFUSE_A_FILTER = """
[[operations]]
include-path = "/search"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx",
]
"""


@pytest.mark.parametrize("with_reranker", [False, True])
def test_schemathesis_finds_no_server_error_nor_schema_mismatch(
    pipeline, reranking_pipeline, with_reranker, tmp_path
):
    st = shutil.which("st", path=str(sys.prefix) + "/bin") or shutil.which("st")
    if st is None:
        pytest.skip("schemathesis is not installed")
    chosen = reranking_pipeline if with_reranker else pipeline
    (tmp_path / "schemathesis.toml").write_text(SEARCH_MAY_REFUSE_A_FILTER)
    with live_server(chosen) as url:
        done = subprocess.run(
            [
                st,
                "run",
                f"{url}/openapi.json",
                "--max-examples",
                "60",
                "--seed",
                "7",
                "--generation-database",
                "none",
            ],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stdout[-4000:]
    # Its summary is worded differently between versions ("No issues found", "N passed").
    summary = done.stdout[-2000:]
    assert "No issues found" in summary or re.search(r"[1-9]\d* passed", summary), summary
    assert not re.search(r"\d+ (failed|errored)", summary), done.stdout


def test_info_carries_the_serve_limits(pipeline):
    with live_server(pipeline, max_k=50) as url:
        info = httpx.get(f"{url}/info").json()
        config = asdict(ServeConfig(max_k=50))
        assert info["limits"] == {
            **{k: v for k, v in config.items() if k in info["limits"]},
            "max_url_bytes": MAX_URL_BYTES,
            "snippet_chars": SNIPPET_CHARS,
        }
        not_limits = {"host", "port", "api_key", "judge", "judgments", "query_log", "writable",
                      "watch"}  # fmt: skip
        assert set(config) - set(info["limits"]) == not_limits
        assert httpx.get(f"{url}/search", params={"q": "x", "k": 51}).status_code == 422


# -- snippets, whole texts on request, the answer's size ------------------------------------


def test_answers_carry_a_snippet_and_the_whole_text_on_request(long_pipeline):
    query = "pyruvate dehydrogenase"
    params = {"q": query, "k": 3, "first_stage": "bm25"}
    whole = long_pipeline.document("long")
    with live_server(long_pipeline) as url:
        short = httpx.get(f"{url}/search", params=params)
        full = httpx.get(f"{url}/search", params={**params, "full_text": "true"})
        posted = httpx.post(f"{url}/search", json={"queries": [query], "full_text": True, "k": 3,
                                                   "first_stage": "bm25"})  # fmt: skip
    answer = short.json()
    assert answer["terms"] == ["pyruvate", "dehydrogenase"]
    hit = answer["hits"][0]
    assert hit["doc_id"] == "long" and "text" not in hit
    # a bounded excerpt around the query's words, cut between words, marked where cut
    assert len(hit["snippet"]) <= SNIPPET_CHARS + 4
    assert "Pyruvate dehydrogenase links glycolysis" in hit["snippet"]
    assert hit["snippet"].startswith("… ") and hit["snippet"].endswith(" …")
    assert hit["snippet"][2:-2] in " ".join(whole.text.split())
    assert len(hit["title"]) <= TITLE_CHARS and hit["title"].endswith("…")
    # bounded by one passage (the encoder's window), not by the document
    assert len(short.content) < SNIPPET_CHARS + len(hit["passage"]["text"]) + 1_000
    assert len(short.content) < len(whole.text) / 4
    # a short text is its own snippet
    for other in answer["hits"][1:]:
        assert other["snippet"] == long_pipeline.document(other["doc_id"]).text
    # the whole text and title when asked, by GET or POST, with the same snippet
    for result in (full.json(), posted.json()["results"][0]):
        top = result["hits"][0]
        assert top["text"] == whole.text and top["title"] == whole.title
        assert top["snippet"] == hit["snippet"]
        assert [h["doc_id"] for h in result["hits"]] == [h["doc_id"] for h in answer["hits"]]


def test_a_long_document_s_hit_gives_the_passage_that_matched(long_pipeline):
    """The index splits the long document into passages: its hit carries the one that
    matched (its text, and where it lies in the document's text), the snippet cut from it;
    a short document is one passage, its whole text."""
    query = "pyruvate dehydrogenase glycolysis cells"
    whole = long_pipeline.document("long")
    with live_server(long_pipeline) as url:
        answer = httpx.get(f"{url}/search", params={"q": query, "k": 3, "first_stage": "bm25"})
    hits = {h["doc_id"]: h for h in answer.json()["hits"]}
    assert len(hits) > 1
    passage = hits["long"]["passage"]
    assert passage["text"] == whole.text[passage["start"] : passage["stop"]]
    assert 0 < passage["start"] < passage["stop"] < len(whole.text)
    assert "Pyruvate dehydrogenase links glycolysis" in passage["text"]
    assert hits["long"]["snippet"][2:-2] in " ".join(passage["text"].split())
    for doc_id, hit in hits.items():
        if doc_id != "long":
            text = long_pipeline.document(doc_id).text
            assert hit["passage"] == {"start": 0, "stop": len(text), "text": text}


def test_an_answer_over_the_size_cap_is_refused(long_pipeline):
    params = {"q": "pyruvate dehydrogenase", "k": 7, "first_stage": "bm25"}
    with live_server(long_pipeline, max_answer_bytes=8000) as url:
        snippets = httpx.get(f"{url}/search", params=params)
        whole = httpx.get(f"{url}/search", params={**params, "full_text": "true"})
        many = httpx.post(f"{url}/search", json={"queries": ["x y z"] * 20, "k": 7})
        document = httpx.get(f"{url}/documents/long")
    assert snippets.status_code == 200 and len(snippets.content) <= 8000
    assert whole.status_code == 400, whole.text
    error = whole.json()["error"]
    assert "over this server's limit of 8000" in error and "full_text" in error
    assert many.status_code == 400 and "fewer results (k)" in many.json()["error"]
    # one document, asked by its id, comes whole
    assert document.status_code == 200 and len(document.json()["text"]) > 8000


def test_a_run_through_the_client_asks_in_batches_whose_answers_fit(long_pipeline):
    queries = {f"q{i}": "pyruvate dehydrogenase" if i % 2 else "x y z" for i in range(20)}
    with live_server(long_pipeline, max_answer_bytes=8000) as url:
        run = ServerClient(url).run(queries, 7, first_stage="bm25", show_progress=False)
    assert run == long_pipeline.run(queries, 7, first_stage="bm25")  # once refused: 400


def test_the_client_gets_whole_texts_or_snippets(long_pipeline):
    from dotcat.serve.client import ServerClient

    with live_server(long_pipeline) as url:
        client = ServerClient(url)
        whole = client.search("pyruvate dehydrogenase", 2, first_stage="bm25")
        snippets = client.search("pyruvate dehydrogenase", 2, first_stage="bm25", full_text=False)
    expected = long_pipeline.search("pyruvate dehydrogenase", 2, first_stage="bm25")
    assert whole == expected  # the same Hits a local search gives
    assert [h.doc_id for h in snippets] == [h.doc_id for h in expected]
    assert len(snippets[0].text) <= SNIPPET_CHARS + 4 < len(expected[0].text)


# -- the HTTP layer's own refusals: JSON too ------------------------------------------------


def _raw_get(url: str, target: str) -> tuple[int, dict[str, str], bytes]:
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    return raw_request(url, request.encode())


@pytest.mark.parametrize("query_bytes", [40_000, 100_000, 1_000_000])
def test_a_url_too_long_is_a_json_414_naming_the_limit(server, query_bytes, caplog):
    # Before: a plain-text 400 "Invalid HTTP request received." from uvicorn over 64 KiB.
    with caplog.at_level(logging.INFO, logger="dotcat.serve.access"):
        status, headers, body = _raw_get(server, "/search?q=" + "x" * query_bytes)
    assert status == 414 and headers["content-type"] == "application/json", body[:200]
    error = json.loads(body)["error"]
    assert f"over {MAX_URL_BYTES} bytes" in error and "POST /search" in error
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name.endswith("access")]
    assert logged[-1]["status"] == 414 and logged[-1]["path"] == "/search"
    assert httpx.get(f"{server}/healthz").status_code == 200  # and the server goes on


def test_a_longest_query_fits_in_a_url(server):
    # 2000 characters of 4 UTF-8 bytes, percent-encoded: 24,000 bytes, under the URL limit
    query = "\U0001f600" * ServeConfig().max_query_chars
    response = httpx.get(f"{server}/search", params={"q": query, "k": 1})
    assert response.status_code == 200 and response.json()["query"] == query


def test_a_malformed_request_is_a_json_400(server):
    status, headers, body = raw_request(server, b"GET /search?q=x HTTP/1.1\r\nHost x\r\n\r\n")
    assert status == 400 and headers["content-type"] == "application/json"
    assert json.loads(body) == {"error": "invalid HTTP request (malformed request line or headers)"}


def test_a_server_with_feedback_answers_as_its_pipeline(hybrid_index):
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    config = PipelineConfig(device="cpu", precision="fp32", prf="both", fb_docs=3)
    pipeline = SearchPipeline(hybrid_index, config)
    with live_server(pipeline) as url:
        info = httpx.get(f"{url}/info").json()
        assert info["feedback"] == (
            "RM3 (3 docs, 10 terms, original weight 0.5) + Rocchio (3 docs, alpha 1, beta 0.5)"
        )
        for query in QUERIES:
            for stage in ("hybrid", "dense"):  # a request's first stage: that side's feedback
                params = {"q": query, "k": 4, "first_stage": stage}
                got = _hits(httpx.get(f"{url}/search", params=params).json())
                expected = _expected(pipeline, query, 4, first_stage=stage)
                assert [d for d, _ in got] == [d for d, _ in expected]
                assert [s for _, s in got] == pytest.approx([s for _, s in expected])
