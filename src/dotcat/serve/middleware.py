"""ASGI middleware of ``dotcat serve``: the body-size cap and time limit, UTF-8 query strings,
the access log, the pages' policy."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from typing import Any

access_log = logging.getLogger("dotcat.serve.access")

#: The most of a refused body read and dropped so that its client gets the answer (16 MiB).
DRAIN_BYTES = 16 * 2**20


class BodyLimit:
    """Refuse POST and PUT bodies over ``max_bytes`` with 413, whether declared or streamed, and
    bodies that do not arrive within ``timeout_s`` with 408.

    A declared ``Content-Length`` over the cap is refused before reading; otherwise the body
    is read here (it is small: the cap) and handed on whole, so a chunked upload that grows
    past the cap is refused too, with the same 413 rather than a parse error. The answer is
    sent at once, then the rest of a refused body (up to :data:`DRAIN_BYTES`) is read and
    dropped before the response ends: a client that sends its whole body before it reads
    (Python's urllib, any with ``Connection: close``) would otherwise find the connection
    reset, its 413 lost (a "lingering close", as web servers do). A client that
    sends less than it declared (or stalls) would hold the connection and a worker forever:
    the whole body must arrive within the request's time limit. Only POST and PUT routes read a
    body; the body of any other request is never read, so it is not checked.
    """

    def __init__(self, app: Any, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                await send_json(send, 400, {"error": "bad Content-Length"})
                return
            if too_big:
                await self._too_large(receive, send, int(declared))
                return
        messages, size = [], 0
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                error = f"the body did not arrive within {self.timeout_s:g} s (got {size} bytes" + (
                    f" of the {int(declared)} declared)" if declared is not None else ")"
                )
                # (and the connection closed: the rest of the body would be read as a request)
                await send_json(send, 408, {"error": error}, close=True)
                return
            messages.append(message)
            if message["type"] != "http.request":
                break  # a disconnect: let the app see it
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                more = message.get("more_body", False)
                await self._too_large(receive, send, DRAIN_BYTES if more else 0)
                return
            if not message.get("more_body", False):
                break
        replay = iter(messages)

        async def buffered() -> dict:
            return next(replay, None) or await receive()

        await self.app(scope, buffered, send)

    async def _too_large(self, receive: Any, send: Any, left: int) -> None:
        """413 now; then up to ``left`` bytes still coming (at most :data:`DRAIN_BYTES`,
        within the time limit) read and dropped before the response ends. More than that:
        the connection is closed."""
        error = {"error": f"body over {self.max_bytes} bytes"}
        await send_json(send, 413, error, close=left > DRAIN_BYTES, more_body=True)
        deadline = time.monotonic() + self.timeout_s
        while 0 < left <= DRAIN_BYTES:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                break
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
            left -= len(message.get("body", b""))
        await send({"type": "http.response.body", "body": b""})


class Utf8Query:
    """Refuse with 422 a query string whose percent-decoded bytes are not UTF-8, naming the
    parameter: decoded leniently (as Starlette does), ``q=%FF%FE`` would be searched as two
    replacement characters and answered with arbitrary documents."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        bad = _not_utf8(scope.get("query_string") or b"") if scope["type"] == "http" else None
        if bad is not None:
            error = f"{bad}: not valid UTF-8 (percent-encode the UTF-8 bytes of the text)"
            await send_json(send, 422, {"error": error})
            return
        await self.app(scope, receive, send)


def _not_utf8(raw: bytes) -> str | None:
    """The name of the first parameter whose name or value is not UTF-8 once decoded."""
    for pair in raw.split(b"&"):
        name, _, value = pair.partition(b"=")
        for part in (name, value):
            try:
                urllib.parse.unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                return urllib.parse.unquote(name.decode("latin-1"), errors="replace")[:40]
    return None


async def send_json(
    send: Any, status: int, body: dict, close: bool = False, more_body: bool = False
) -> None:
    """A whole JSON response, sent from ASGI middleware (``close``: then the connection;
    ``more_body``: the response is ended later, by an empty body)."""
    payload = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": more_body})


class AccessLog:
    """One JSON line per request: method, path, status, latency, and the search's details."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def capture(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            state = scope.get("state") or {}
            record = {
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": status,
                "ms": round((time.perf_counter() - start) * 1000, 2),
                "client": (scope.get("client") or ("", 0))[0],
                **(state.get("log") or {}),
            }
            access_log.info(json.dumps(record))


#: The pages' Content-Security-Policy: everything from this server (Swagger UI's and ReDoc's
#: inline start-up code and styles included), images also inline (``data:``), ReDoc's search
#: worker from a ``blob:``. Nothing from elsewhere: the browser does not even ask (ReDoc's
#: sidebar logo is on a CDN; blocked, it is left out), so the pages work with no network.
PAGE_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
)
_POLICY = PAGE_POLICY.encode()


class PagePolicy:
    """Send :data:`PAGE_POLICY` with the HTML pages at ``paths``."""

    def __init__(self, app: Any, paths: tuple[str, ...]) -> None:
        self.app = app
        self.paths = paths

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") not in self.paths:
            await self.app(scope, receive, send)
            return

        async def with_policy(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"content-security-policy", _POLICY)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_policy)
