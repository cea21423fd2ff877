"""The server with fields: filter (GET and POST, the server's default and a request's own),
facets, highlights, fields in hits, documents and /info; a bad filter is a 400 naming it."""

from __future__ import annotations

import json

import httpx
import pytest
from tests.serve.conftest import _build, live_server

from dotcat.search.pipeline import PipelineConfig, SearchPipeline

DOCS = [
    {"_id": f"d{i}", "title": f"Ticket {i}", "text": f"The printer jams on page {i} of the report.",
     "product": ["billing", "printing", "accounts"][i % 3], "tags": ["hr"] if i % 2 else [],
     "updated": f"2025-0{1 + i % 9}-01", "stars": i % 2 + 4}
    for i in range(12)
]  # fmt: skip


@pytest.fixture(scope="module")
def index(tmp_path_factory, tiny_bert_dir):
    return _build(tmp_path_factory.mktemp("fields_api"), DOCS, tiny_bert_dir)


@pytest.fixture(scope="module")
def url(index):
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))
    with live_server(pipeline) as base:
        yield base


def ids(answer: dict) -> set[str]:
    return {h["doc_id"] for h in answer["hits"]}


def test_get_and_post_filter_alike(url):
    every = {d["_id"] for d in DOCS}
    billing = {d["_id"] for d in DOCS if d["product"] == "billing"}
    got = httpx.get(f"{url}/search", params={"q": "printer", "k": 12,
                                             "filter": 'product = "billing"'}).json()  # fmt: skip
    assert ids(got) == billing and got["filter"] == 'product = "billing"'
    posted = httpx.post(f"{url}/search", json={"queries": ["printer", "report"], "k": 12,
                                               "filter": 'tags contains "hr"'}).json()  # fmt: skip
    odd = {d["_id"] for d in DOCS if d["tags"]}
    assert [ids(r) for r in posted["results"]] == [odd, odd]
    assert ids(httpx.get(f"{url}/search", params={"q": "printer", "k": 12}).json()) == every


def test_hits_carry_fields_and_highlights(url):
    hit = httpx.get(f"{url}/search", params={"q": "printer jams", "k": 1}).json()["hits"][0]
    source = next(d for d in DOCS if d["_id"] == hit["doc_id"])
    assert hit["fields"]["product"] == source["product"] and hit["fields"]["stars"] in (4, 5)
    assert [hit["snippet"][a:b].lower() for a, b in hit["highlights"]] == ["printer", "jams"]
    document = httpx.get(f"{url}/documents/{hit['doc_id']}").json()
    assert document["fields"]["updated"] == source["updated"]


def test_facets_count_the_few_valued_fields_over_the_top_results(url):
    answer = httpx.get(f"{url}/search", params={"q": "printer", "k": 3, "facets": "true",
                                                "filter": "stars = 5"}).json()  # fmt: skip
    assert len(answer["hits"]) == 3
    facets = {f["field"]: {v["value"]: v["count"] for v in f["values"]} for f in answer["facets"]}
    fives = [d for d in DOCS if d["stars"] == 5]  # counted over all of them, not only the 3
    assert facets["product"] == {p: sum(d["product"] == p for d in fives)
                                 for p in {d["product"] for d in fives}}  # fmt: skip
    assert facets["stars"] == {"5": len(fives)}
    assert "updated" not in facets  # a date: no facet
    assert "tags" not in facets  # one value in the whole index: nothing to narrow by
    assert "facets" not in httpx.get(f"{url}/search", params={"q": "printer"}).json()


def test_a_bad_filter_is_a_400_naming_the_column_and_token(url):
    for bad, words in [
        ('updated >= "soon"', "column 12 at '\"soon\"'"),
        ('prodcut = "x"', "no field 'prodcut'"),
        ("product = ", "column 11 at the end"),
    ]:
        answer = httpx.get(f"{url}/search", params={"q": "printer", "filter": bad})
        assert answer.status_code == 400 and words in answer.json()["error"], answer.text
    posted = httpx.post(f"{url}/search", json={"query": "printer", "filter": 7})
    assert posted.status_code == 422


def test_info_lists_the_fields(url):
    info = httpx.get(f"{url}/info").json()
    fields = {f["name"]: f for f in info["fields"]}
    assert fields["product"]["kind"] == "string" and fields["product"]["distinct_values"] == 3
    assert fields["updated"]["kind"] == "date" and fields["tags"]["kind"] == "list"
    assert fields["stars"]["kind"] == "number" and info["filter"] is None


def test_a_server_started_with_a_filter_keeps_within_it_unless_asked(index):
    config = PipelineConfig(device="cpu", precision="fp32", filter='product = "printing"')
    with live_server(SearchPipeline(index, config)) as base:
        answer = httpx.get(f"{base}/search", params={"q": "printer", "k": 12}).json()
        assert {h["fields"]["product"] for h in answer["hits"]} == {"printing"}
        other = httpx.get(f"{base}/search", params={"q": "printer", "k": 12, "filter": ""})
        assert len(other.json()["hits"]) == 12
        assert httpx.get(f"{base}/info").json()["filter"] == 'product = "printing"'
        # an empty filter is no filter through every door: the command line (the server's
        # default cleared), the client, a pipeline's settings
        from typer.testing import CliRunner

        from dotcat.cli import app
        from dotcat.serve.client import ServerClient

        args = ["search", "--server", base, "printer", "-k", "12", "--json"]
        every = {"billing", "printing", "accounts"}
        for given, products in (([], {"printing"}), (["--filter", ""], every)):
            done = CliRunner().invoke(app, args + given)
            assert done.exit_code == 0, done.output
            assert {h["fields"]["product"] for h in json.loads(done.stdout)} == products
        assert len(ServerClient(base).search("printer", k=12, filter="")) == 12
    assert SearchPipeline(index, config, filter="").describe()["filter"] is None
