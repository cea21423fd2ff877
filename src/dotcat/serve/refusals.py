"""Every refusal of ``dotcat serve`` as JSON ``{"error": "..."}``, in the user's terms.

Three layers refuse requests, and each answers alike:

* the HTTP layer (uvicorn's httptools protocol) refuses what it cannot parse: a malformed
  request, and URLs too long to parse; :class:`JSONHttpProtocol` answers those in JSON (uvicorn's
  own answer is plain text) and refuses a URL over :data:`MAX_URL_BYTES` with 414 as soon as it
  grows past it, naming the limit;
* validation (FastAPI and pydantic): :func:`validation_message` says what was wrong with which
  field, in the request's own names (``queries[1]``), never the names of our models;
* the app's own refusals (:class:`dotcat.errors.DotcatError`, HTTP errors, a full queue, a
  crash): :func:`add_error_handlers`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from dotcat.errors import DiskFullError, DotcatError
from dotcat.search.config import control_character
from dotcat.serve.batcher import QueueFull
from dotcat.serve.protocol import NON_BLANK

logger = logging.getLogger(__name__)
access_log = logging.getLogger("dotcat.serve.access")

#: The longest URL served (path and query string, percent-encoded). A longest query
#: (``max_query_chars``, 2000 by default) takes at most 12 bytes a character once encoded
#: (4 UTF-8 bytes, each ``%XX``): 24,000 bytes; httptools cannot parse URLs over 64 KiB.
MAX_URL_BYTES = 32 * 1024
#: The most bytes of header fields (names and values) a request may carry: h11's and Node's
#: default (nginx's takes 8 KiB a line); httptools has no limit, and uvicorn sets none on it.
MAX_HEADER_BYTES = 16 * 1024

#: pydantic's error types, in the words a client of this API uses.
_MESSAGES = {
    "string_pattern_mismatch": "must hold a character other than white space",
    "string_type": "expected a string",
    "list_type": "expected a list of strings",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
}
#: A body that is missing, or not a JSON object.
_NOT_AN_OBJECT = ("missing", "model_attributes_type", "model_type", "dict_type")
_BODY = 'a JSON object: {"query": "..."} or {"queries": ["...", ...]}'


def validation_message(errors: Iterable[dict[str, Any]], fields: Iterable[str] = ()) -> str:
    """One line for pydantic's errors: ``where: what`` for each, ``;`` between them.

    Args:
        errors: ``RequestValidationError.errors()``.
        fields: the body's field names, listed when a body holds an unknown one (``POST
            /search``'s: the other bodies name their own fields in the API's schema).
    """
    problems = []
    for error in errors:
        kind, loc = error.get("type"), tuple(error.get("loc", ()))
        where = _where(loc)
        if kind == "json_invalid":
            problems.append("the body is not valid JSON")
        elif loc == ("body",) and kind in _NOT_AN_OBJECT:
            problems.append(f"the body must be {_BODY}")
        elif kind == "extra_forbidden":
            known = ", ".join(fields)
            problems.append(f"{where}: unknown field" + (f" (known: {known})" if known else ""))
        else:
            message = _MESSAGES.get(kind) or str(error.get("msg", "invalid"))
            if kind == "string_pattern_mismatch":
                message = _mismatch(error.get("input")) or message
            message = message.removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems) or "invalid request"


def _mismatch(value: Any) -> str | None:
    """What a failed text holds: a control character or a space inside an id; None: blank."""
    if not isinstance(value, str):
        return None
    if (control := control_character(value)) is not None:
        return f"holds a control character ({control})"
    spaced = re.search(NON_BLANK, value) is not None  # not blank: it failed NO_SPACE
    return "must hold no white space (an id is one column of a TREC run)" if spaced else None


def _where(loc: tuple) -> str:
    """``("body", "queries", 1)`` -> ``queries[1]``; ``("query", "k")`` -> ``k``."""
    parts = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def add_error_handlers(app: FastAPI, body_fields: Iterable[str] = ()) -> None:
    """Every error the app raises as ``{"error": "..."}``: 4xx for bad requests, 503 for a
    full queue, 500 (logged, no traceback to the client) for a crash."""
    fields = list(body_fields)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        searched = request.method == "POST" and request.url.path.endswith("/search")
        known = fields if searched else []  # (the other bodies' fields: the API's schema)
        return JSONResponse({"error": validation_message(exc.errors(), known)}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        unparsed = _unparsed_body(exc)
        if unparsed is not None:  # as `{oops`, which pydantic reports as invalid JSON
            return JSONResponse({"error": unparsed}, 422)
        headers = dict(exc.headers or {})
        if exc.status_code == 401:
            headers["WWW-Authenticate"] = "Bearer"
        if exc.status_code == 405:  # every method of the path, not the first route's only
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return JSONResponse({"error": str(exc.detail)}, exc.status_code, headers=headers)

    @app.exception_handler(DotcatError)
    async def refused(request: Request, exc: DotcatError) -> JSONResponse:  # no room: the server's
        return JSONResponse({"error": str(exc)}, 507 if isinstance(exc, DiskFullError) else 400)

    @app.exception_handler(QueueFull)
    async def full(request: Request, exc: QueueFull) -> JSONResponse:
        return JSONResponse(
            {"error": "the server is busy: queue full, retry later"},
            status_code=503,
            headers={"Retry-After": str(request.app.state.retry_after)},
        )

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse({"error": "internal error (logged on the server)"}, status_code=500)


def _unparsed_body(exc: StarletteHTTPException) -> str | None:
    """What was wrong with a body FastAPI could not parse (its 400 "There was an error
    parsing the body" says nothing of it); None for any other HTTP error."""
    if exc.status_code != 400 or exc.detail != "There was an error parsing the body":
        return None
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not valid UTF-8 (byte {cause.start}); JSON is UTF-8"
    if isinstance(cause, RecursionError):
        return "the body is not valid JSON here: nested too deeply"
    return "the body is not valid JSON"


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.routes:
        regex, route_methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and route_methods and regex.match(request.url.path):
            methods |= set(route_methods)
    return sorted(methods)


class _TooLarge(Exception):
    """Raised inside the parser's URL or header callback: the parser stops and reports an
    error (:meth:`JSONHttpProtocol.send_400_response` says which limit)."""


class JSONHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, whose own refusals are JSON like the app's.

    uvicorn answers a request its parser refuses with a plain-text 400 ("Invalid HTTP request
    received."); here it is ``{"error": ...}``, a URL is refused with 414 as soon as it grows
    past :data:`MAX_URL_BYTES` (before that, httptools' 64 KiB limit gave the plain 400), and
    header fields past :data:`MAX_HEADER_BYTES` with 431 (before, a 64 KiB header was read).
    These refusals never reach the app, so their access-log line is written here.
    """

    #: Seconds a refused connection stays open, reading and dropping what the client still
    #: sends: closing a socket with unread input resets the connection, and the client may
    #: lose the answer (a "lingering close", as web servers do).
    linger_s = 2.0

    def on_message_begin(self) -> None:
        self._started = time.perf_counter()
        self._header_bytes = 0
        super().on_message_begin()

    def data_received(self, data: bytes) -> None:
        if getattr(self, "_refused", False):
            return  # the rest of a refused request: dropped
        super().data_received(data)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            raise _TooLarge  # the parser stops here: data_received sends the 400 below

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise _TooLarge  # the parser stops here: data_received sends the 431 below

    def send_400_response(self, msg: str) -> None:
        url = getattr(self, "url", b"")
        if getattr(self, "_header_bytes", 0) > MAX_HEADER_BYTES:
            status = 431
            error = f"the header fields are over {MAX_HEADER_BYTES} bytes, this server's limit"
        elif len(url) > MAX_URL_BYTES:
            status = 414
            error = (f"the URL is over {MAX_URL_BYTES} bytes, this server's limit: send long "
                     "queries in the body of POST /search")  # fmt: skip
        else:
            status, error = 400, "invalid HTTP request (malformed request line or headers)"
        body = json.dumps({"error": error}).encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the answer, then end of stream: the client reads it all
            self.loop.call_later(self.linger_s, self.transport.close)
        else:
            self.transport.close()
        self._log(status, url)

    def _log(self, status: int, url: bytes) -> None:
        started = getattr(self, "_started", None)
        try:
            method = self.parser.get_method().decode("ascii", "replace")
        except Exception:  # the parser failed before the method was read
            method = None
        record = {
            "method": method,
            "path": url.split(b"?", 1)[0][:200].decode("ascii", "replace") or None,
            "status": status,
            "ms": round((time.perf_counter() - started) * 1000, 2) if started else 0.0,
            "client": (self.client or ("", 0))[0],
        }
        access_log.info(json.dumps(record))
