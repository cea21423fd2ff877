"""What the server says about itself: its OpenAPI schema (shown at /docs and /redoc) and /info."""

from __future__ import annotations

import json
import os

import httpx
import pytest
from tests.serve.conftest import live_server


@pytest.fixture(scope="module")
def spec(server) -> dict:
    return httpx.get(f"{server}/openapi.json").json()


def _operations(spec: dict):
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            yield f"{method.upper()} {path}", operation


def _resolve(spec: dict, schema: dict) -> dict:
    ref = schema.get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else schema


def test_every_endpoint_is_summarised_and_described_by_hand(spec):
    operations = dict(_operations(spec))
    assert set(operations) == {
        "GET /search", "POST /search", "GET /documents/{doc_id}", "GET /healthz", "GET /info",
        "PUT /documents/{doc_id}", "POST /documents", "DELETE /documents/{doc_id}",
    }  # fmt: skip
    for name, operation in operations.items():
        summary = operation.get("summary", "")
        # FastAPI's generated summaries are the function's name in title case ("Search Get")
        generated = operation["operationId"].replace("_", " ").title()
        assert summary and summary != generated and len(summary.split()) >= 2, name
        assert len(operation.get("description", "")) > 40, name
        assert operation["responses"]["200"]["description"] != "Successful Response", name


def test_every_parameter_and_field_is_described(spec):
    for name, operation in _operations(spec):
        for parameter in operation.get("parameters", []):
            assert parameter.get("description"), f"{name}: {parameter['name']}"
    for model, schema in spec["components"]["schemas"].items():
        assert schema.get("description"), model
        for field, prop in schema.get("properties", {}).items():
            described = prop.get("description") or _resolve(spec, prop).get("description")
            if "anyOf" in prop and not described:  # e.g. a model or null
                described = any(_resolve(spec, s).get("description") for s in prop["anyOf"])
            assert described, f"{model}.{field}"


def test_each_endpoint_lists_only_the_errors_it_can_answer(spec):
    errors = {
        name: sorted(int(s) for s in operation["responses"] if s != "200")
        for name, operation in _operations(spec)
    }
    assert errors == {
        "GET /search": [400, 414, 422, 503, 504],
        "POST /search": [400, 413, 422, 503, 504],
        "GET /documents/{doc_id}": [404, 422],
        "GET /healthz": [422],  # unknown query parameters only: no body, no key, no queue
        "GET /info": [422],
        "PUT /documents/{doc_id}": [403, 413, 422],  # a read-only server (not --writable)
        "POST /documents": [403, 413, 422],
        "DELETE /documents/{doc_id}": [403, 422],
    }
    for name, operation in _operations(spec):
        for status, response in operation["responses"].items():
            if status != "200":
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (name, status)


def test_the_answers_are_typed(spec):
    def answer(name: str) -> str:
        operation = dict(_operations(spec))[name]
        return operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]

    assert answer("GET /info").endswith("/InfoOut")
    assert answer("GET /healthz").endswith("/HealthOut")
    assert answer("GET /search").endswith("/SearchOut")
    assert answer("POST /search").endswith("/SearchAnswer")
    body = spec["components"]["schemas"]["SearchBody"]
    assert body["oneOf"] == [{"required": ["query"]}, {"required": ["queries"]}]
    assert body["additionalProperties"] is False


def test_a_server_with_a_key_lists_401_and_how_to_send_the_key(pipeline):
    with live_server(pipeline, api_key="k3y") as url:
        spec = httpx.get(f"{url}/openapi.json").json()  # the schema itself is open
    schemes = spec["components"]["securitySchemes"]
    assert {s["type"] for s in schemes.values()} == {"apiKey", "http"}
    for name, operation in _operations(spec):
        if name == "GET /healthz":
            assert "401" not in operation["responses"] and "security" not in operation
        else:
            assert "401" in operation["responses"], name
            assert len(operation["security"]) == 2, name  # either scheme will do


def test_info_tells_a_client_what_it_needs_and_no_machine_paths(reranking_pipeline, hybrid_index):
    with live_server(reranking_pipeline) as url:
        info = httpx.get(f"{url}/info").json()
    text = json.dumps(info)
    machine = str(hybrid_index.parent)
    assert machine not in text and os.path.expanduser("~") not in text
    assert not any(isinstance(v, str) and v.startswith("/") for v in _leaves(info)), text
    assert info["index"] == {
        "name": "index",
        "documents": 6,
        "created": reranking_pipeline.manifest.created,
        "faiss": "Flat",
        "precision": "fp32",
        "bm25": True,
        "generation": reranking_pipeline.manifest.generation,
        "made": reranking_pipeline.manifest.made or reranking_pipeline.manifest.created,
    }
    encoder = reranking_pipeline.manifest.encoder
    assert info["encoder"]["name"] == os.path.basename(encoder["name"])  # a folder: its name
    assert info["encoder"]["fingerprint"] == encoder["fingerprint"]
    reranker = info["reranker"]
    assert reranker["name"] == os.path.basename(reranking_pipeline.config.rerank)
    assert reranker["depth"] == 4 and reranker["precision"] == "fp32"
    assert info["first_stages"] == ["dense", "bm25", "hybrid"] and info["version"]


def _leaves(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def test_a_hub_name_stays_a_name():
    from dotcat.serve.app import public_name

    assert public_name("sentence-transformers/all-MiniLM-L6-v2") == (
        "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert public_name("/home/someone/models/my-cat") == "my-cat"
    assert public_name("~/models/my-cat/") == "my-cat"
