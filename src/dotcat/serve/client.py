"""A client for ``dotcat serve``: what ``dotcat search --server URL`` uses.

Standard library only (``urllib``), so asking a running server costs no torch import: the
answer comes in milliseconds, as from the web page.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from dotcat.data.download import TIMEOUT_ENV, network_timeout
from dotcat.errors import DotcatError
from dotcat.options import RUN_K
from dotcat.progress import progress_bar
from dotcat.search.hits import Hit
from dotcat.serve.config import API_KEY_ENV, API_KEY_RULE, API_KEY_TEXT
from dotcat.types import Run

logger = logging.getLogger(__name__)
#: How many times a batch refused with 503 (the server's queue full) is asked again.
BUSY_RETRIES = 5
#: The pipeline settings a request may set for itself; the others are the server's own.
PER_REQUEST = frozenset({"first_stage", "filter"})


class ServerClient:
    """Search a running ``dotcat serve``.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8080``.
        api_key: sent as ``X-API-Key`` (default: ``$DOTCAT_API_KEY``, if set).
        timeout: seconds to wait for an answer (default: ``DOTCAT_NETWORK_TIMEOUT``, else 30:
            :func:`dotcat.data.download.network_timeout`).
    """

    def __init__(self, url: str, api_key: str | None = None, timeout: float | None = None) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise DotcatError(f"--server {url!r}: expected a URL like http://127.0.0.1:8080")
        self.url = url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        if self.api_key and not API_KEY_TEXT.fullmatch(self.api_key):
            raise DotcatError(f"{API_KEY_ENV if api_key is None else 'api_key'}: {API_KEY_RULE}")
        self.timeout = timeout or network_timeout()

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
        full_text: bool = True,
        filter: str | None = None,
    ) -> list[Hit]:
        """The server's hits for one query (``GET /search``).

        Args:
            full_text: each hit's ``text`` is the document's whole text, as a local search
                gives it (with the matched passage's offsets); False: the server's snippet (a
                bounded excerpt around the query's words), a smaller answer.
            filter: only documents whose fields match (:mod:`dotcat.search.filters`; "": all).
        """
        options = {"full_text": "true" if full_text else None, "first_stage": first_stage or None,
                   "rerank": None if rerank is None else str(rerank).lower(), "depth": depth,
                   "filter": filter}  # fmt: skip
        params = {"q": query, "k": k, **{n: v for n, v in options.items() if v is not None}}
        answer = self._get("/search?" + urllib.parse.urlencode(params))
        return [_hit(h, full_text) for h in answer["hits"]]

    def info(self) -> dict[str, Any]:
        return self._get("/info")

    def run(
        self,
        queries: Mapping[str, str],
        k: int = RUN_K,
        *,
        first_stage: str | None = None,
        filter: str | None = None,
        show_progress: bool = True,
    ) -> Run:
        """A TREC run's content for ``{query_id: text}``, asked of the server by ``POST /search`` in
        batches its limits take (``/info``: queries per request, body size); a batch refused because
        the server's queue is full is asked again after its ``Retry-After``.

        Raises:
            DotcatError: ``k`` over the server's limit, a query it refuses (named), or the
                server out of reach.
        """
        limits = self.info()["limits"]
        if k > limits["max_k"]:
            raise DotcatError(f"k {k} is over this server's limit of {limits['max_k']}")
        ids = list(queries)
        run: Run = {}
        given = {"first_stage": first_stage or None, "filter": filter}
        options = {name: value for name, value in given.items() if value is not None}
        with progress_bar(total=len(ids), desc="searching", unit="query",
                          enabled=show_progress) as bar:  # fmt: skip
            for batch in _batches(ids, queries, limits, k):
                body = {"queries": [queries[q] for q in batch], "k": k, **options}
                answer = self._post_retrying("/search", body)
                for qid, result in zip(batch, answer["results"], strict=True):
                    run[qid] = [(h["doc_id"], float(h["score"])) for h in result["hits"]]
                bar.update(len(batch))
        return run

    def _get(self, path: str) -> dict[str, Any]:
        return self._ask(urllib.request.Request(self.url + path))

    def _post_retrying(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8")
        for attempt in range(BUSY_RETRIES + 1):
            request = urllib.request.Request(
                self.url + path, data=data, headers={"Content-Type": "application/json"}
            )
            try:
                return self._ask(request, busy=attempt < BUSY_RETRIES)
            except _Busy as e:
                logger.info("%s: queue full; asking again in %g s", self.url, e.wait)
                time.sleep(e.wait)
        raise AssertionError("unreachable")  # the last attempt raises or returns

    def _ask(self, request: urllib.request.Request, busy: bool = False) -> dict[str, Any]:
        request.add_header("Accept", "application/json")
        if self.api_key:
            request.add_header("X-API-Key", self.api_key)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            if e.code == 503 and busy:
                raise _Busy(float(e.headers.get("Retry-After") or 1)) from None
            raise DotcatError(f"{self.url}: {e.code} {_server_message(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                reason = f"no answer within {self.timeout:g} s; {TIMEOUT_ENV} sets the wait"
            raise DotcatError(f"{self.url}: cannot reach the server ({reason})") from None


class _Busy(Exception):
    """A 503: the server's queue is full; ask again after ``wait`` seconds."""

    def __init__(self, wait: float) -> None:
        super().__init__(wait)
        self.wait = min(max(wait, 0.1), 30.0)


def _batches(ids: list[str], queries: Mapping[str, str], limits: Mapping[str, int], k: int):
    """Query ids in batches of at most ``max_queries`` whose JSON body stays well under
    ``max_body_bytes`` (a query over ``max_query_chars`` is sent alone: the server names it),
    and whose answers (``k`` hits each: a snippet and ~512 bytes of ids, title and fields) stay
    well under ``max_answer_bytes`` (a run of 1,000 per query: a few queries a request)."""
    hit = limits.get("snippet_chars", 300) + 512
    most = max(1, min(limits["max_queries"], limits["max_answer_bytes"] // (2 * k * hit)))
    budget = limits["max_body_bytes"] // 2  # (escapes, the other fields)
    batch: list[str] = []
    size = 0
    for qid in ids:
        cost = len(json.dumps(queries[qid]).encode("utf-8")) + 2
        if batch and (len(batch) == most or size + cost > budget):
            yield batch
            batch, size = [], 0
        batch.append(qid)
        size += cost
    if batch:
        yield batch


def _hit(hit: dict[str, Any], full_text: bool) -> Hit:
    """A hit as a local search gives it: with ``full_text``, the whole text and where the
    passage that matched lies in it; else the snippet (and no offsets: they are the text's)."""
    text = hit["text"] if full_text else hit["snippet"]
    passage = (hit.get("passage") or {}) if full_text else {}
    return Hit(
        hit["rank"], hit["doc_id"], hit["score"], hit["title"], text, hit["score_kind"],
        passage.get("start"), passage.get("stop"), fields=hit.get("fields") or {},
    )  # fmt: skip


def _server_message(error: urllib.error.HTTPError) -> str:
    """The ``error`` text of a dotcat error body, else the HTTP reason."""
    try:
        body = json.loads(error.read().decode("utf-8"))
        return str(body.get("error") or body.get("detail") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)
