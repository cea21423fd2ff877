"""Requests past the server's limits get their JSON 4xx, whatever the client (issue 64).

A body over the cap was answered 413 and the connection closed with the body unread: curl
read the 413, Python's urllib (which sends ``Connection: close`` and its whole body before it
reads) found the connection reset. A 64 KB header was accepted.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import httpx
import pytest
import requests

from dotcat.serve.refusals import MAX_HEADER_BYTES

_JSON = {"content-type": "application/json"}


def _post_httpx(url: str, body: bytes) -> tuple[int, str]:
    response = httpx.post(url, content=body, headers=_JSON, timeout=60)
    return response.status_code, response.text


def _post_requests(url: str, body: bytes) -> tuple[int, str]:
    response = requests.post(url, data=body, headers=_JSON, timeout=60)
    return response.status_code, response.text


def _post_urllib(url: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, headers=_JSON)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("post", [_post_httpx, _post_requests, _post_urllib])
@pytest.mark.parametrize("depth", [100_000, 5_000_000])
def test_a_deeply_nested_body_over_the_cap_is_a_413_every_client_reads(server, post, depth):
    """100,000 levels (200 kB) as the issue sent; 5,000,000 (10 MB) outgrow the socket
    buffers, so the client is still sending when the server has answered."""
    status, text = post(f"{server}/search", b"[" * depth + b"]" * depth)
    assert status == 413 and json.loads(text) == {"error": "body over 65536 bytes"}
    assert httpx.get(f"{server}/healthz", timeout=30).status_code == 200  # still serving


def test_header_fields_over_the_limit_are_a_431(server):
    big = httpx.get(f"{server}/healthz", headers={"x-big": "a" * 65_536}, timeout=30)
    assert big.status_code == 431 and big.headers["content-type"] == "application/json"
    assert big.json() == {
        "error": f"the header fields are over {MAX_HEADER_BYTES} bytes, this server's limit"
    }
    several = {f"x-h{i}": "b" * 2_000 for i in range(9)}  # 18 kB in all, each line short
    assert httpx.get(f"{server}/healthz", headers=several, timeout=30).status_code == 431
    fine = httpx.get(f"{server}/healthz", headers={"x-some": "c" * 12_000}, timeout=30)
    assert fine.status_code == 200


def test_a_request_without_k_under_a_max_k_below_ten_gets_max_k(pipeline):
    """The default k (10) was never checked against --max-k 5: six hits came back."""
    from tests.serve.conftest import live_server

    with live_server(pipeline, max_k=5) as url:
        got = httpx.get(f"{url}/search", params={"q": "insulin"})
        posted = httpx.post(f"{url}/search", json={"queries": ["insulin"]})
    assert got.status_code == 200 and len(got.json()["hits"]) == 5, got.text
    assert posted.status_code == 200 and len(posted.json()["results"][0]["hits"]) == 5


@pytest.mark.parametrize("cap", ["max_query_chars", "max_body_bytes", "max_answer_bytes"])
def test_a_cap_under_one_is_refused(cap):
    from dotcat.errors import DotcatError
    from dotcat.serve.config import ServeConfig

    with pytest.raises(DotcatError, match=f"{cap} must be >= 1, got 0"):
        ServeConfig(**{cap: 0}).check()
