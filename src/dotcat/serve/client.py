"""A client for ``dotcat serve``: what ``dotcat search --server URL`` uses.

Standard library only (``urllib``), so asking a running server costs no torch import: the
answer comes in milliseconds, as from the web page.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from dotcat.errors import DotcatError
from dotcat.search.hits import Hit

API_KEY_ENV = "DOTCAT_API_KEY"
#: The pipeline settings a request may set for itself; the others are the server's own.
PER_REQUEST = frozenset({"first_stage", "filter"})


class ServerClient:
    """Search a running ``dotcat serve``.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8080``.
        api_key: sent as ``X-API-Key`` (default: ``$DOTCAT_API_KEY``, if set).
        timeout: seconds to wait for an answer.
    """

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise DotcatError(f"--server {url!r}: expected a URL like http://127.0.0.1:8080")
        self.url = url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self.timeout = timeout

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
            filter: only documents whose fields match (:mod:`dotcat.search.filters`).
        """
        params: dict[str, Any] = {"q": query, "k": k}
        if full_text:
            params["full_text"] = "true"
        if first_stage:
            params["first_stage"] = first_stage
        if rerank is not None:
            params["rerank"] = "true" if rerank else "false"
        if depth is not None:
            params["depth"] = depth
        if filter:
            params["filter"] = filter
        answer = self._get("/search?" + urllib.parse.urlencode(params))
        return [_hit(h, full_text) for h in answer["hits"]]

    def info(self) -> dict[str, Any]:
        return self._get("/info")

    def _get(self, path: str) -> dict[str, Any]:
        request = urllib.request.Request(self.url + path, headers={"Accept": "application/json"})
        if self.api_key:
            request.add_header("X-API-Key", self.api_key)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            raise DotcatError(f"{self.url}: {e.code} {_server_message(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise DotcatError(f"{self.url}: cannot reach the server ({reason})") from None


def _hit(hit: dict[str, Any], full_text: bool) -> Hit:
    """A hit as a local search gives it: with ``full_text``, the whole text and where the
    passage that matched lies in it; else the snippet (and no offsets: they are the text's)."""
    kind, fields = hit["score_kind"], hit.get("fields") or {}
    if not full_text:
        return Hit(hit["rank"], hit["doc_id"], hit["score"], hit["title"], hit["snippet"], kind,
                   fields=fields)  # fmt: skip
    passage = hit.get("passage") or {}
    return Hit(
        hit["rank"], hit["doc_id"], hit["score"], hit["title"], hit["text"], kind,
        passage.get("start"), passage.get("stop"), fields=fields,
    )  # fmt: skip


def _server_message(error: urllib.error.HTTPError) -> str:
    """The ``error`` text of a dotcat error body, else the HTTP reason."""
    try:
        body = json.loads(error.read().decode("utf-8"))
        return str(body.get("error") or body.get("detail") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)
