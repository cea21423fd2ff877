"""``dotcat serve``: the search pipeline over HTTP (FastAPI + uvicorn), and a web page.

Endpoints (OpenAPI at ``/docs``): ``GET /search?q=&k=&rerank=&depth=&first_stage=``,
``POST /search`` (one query or many), ``GET /documents/{id}``, ``GET /healthz``, ``GET /info``;
the search page at ``/``.

What keeps it up under load and bad input:

* concurrent requests are micro-batched (:mod:`dotcat.serve.batcher`): one model call serves
  many, so throughput grows with concurrency, and only one call at a time uses the cores;
* a bounded queue: when it is full the excess gets 503 with ``Retry-After`` at once; every
  request has a time limit (504 past it); body size, query length, query count, ``k`` and
  ``depth`` are capped (the caps are in the OpenAPI schema);
* every bad request is a 4xx with ``{"error": "..."}``, never a 500 or a traceback; unknown
  fields and unknown query parameters are refused;
* loopback by default; any other address needs an API key (``X-API-Key`` or ``Authorization:
  Bearer``), compared in constant time; no endpoint reads a path from the request;
* one JSON access-log line per request (latency, status, k, stages, batch size) on the
  ``dotcat.serve.access`` logger.
"""

# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations as
# objects, and the POST body model is built per app (its caps come from the config).
import asyncio
import hmac
import json
import logging
import os
import time
from contextlib import asynccontextmanager
from dataclasses import asdict
from importlib import resources
from typing import Annotated, Any, Literal

import torch
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    WithJsonSchema,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from dotcat import __version__
from dotcat.errors import DotcatError
from dotcat.serve.batcher import Job, MicroBatcher, QueueFull
from dotcat.serve.config import API_KEY_ENV as API_KEY_ENV
from dotcat.serve.config import ServeConfig
from dotcat.serve.config import is_loopback as is_loopback

logger = logging.getLogger(__name__)
access_log = logging.getLogger("dotcat.serve.access")

# A query must hold a character Python does not strip: regex \S (Unicode White_Space, as the
# schema's validators read it) leaves out \x1c-\x1f, which str.strip() removes.
_NON_BLANK = r"[^\s\x1c-\x1f]"


# -- the protocol -------------------------------------------------------------------------


class HitOut(BaseModel):
    rank: int
    doc_id: str
    score: float
    title: str
    text: str


class SearchOut(BaseModel):
    query: str
    k: int
    first_stage: str
    reranked: bool
    took_ms: float
    hits: list[HitOut]


class MultiSearchOut(BaseModel):
    results: list[SearchOut]
    took_ms: float


class DocumentOut(BaseModel):
    doc_id: str
    title: str
    text: str


class ErrorOut(BaseModel):
    error: str


def _json_int(value: Any) -> Any:
    """Integers as JSON Schema has them: no booleans, no numeric strings."""
    if isinstance(value, bool | str):
        raise ValueError("Input should be a valid integer")
    return value


_JSON_INT = BeforeValidator(_json_int)


def _refuse_rerank(value: bool) -> bool:
    if value:
        raise ValueError("this server has no re-ranker (start it with --rerank MODEL)")
    return value


#: ``rerank`` on a server without a re-ranker: a boolean that can only be false (parsed from
#: "false" like any boolean; a plain Literal[False] would refuse the query-string form).
_NoRerank = Annotated[
    bool, AfterValidator(_refuse_rerank), WithJsonSchema({"type": "boolean", "enum": [False]})
]


def _request_models(config: ServeConfig, stages: list[str], reranker: bool):
    """This server's request types: the caps, its first stages and whether it re-ranks are in
    the schema, so a request the schema allows is one the server serves.

    Returns:
        ``(Stage, Rerank, SearchOne, SearchMany)``: the first-stage and re-rank parameter
        types and the two POST bodies (one ``query``, or ``queries``).
    """
    Stage = Literal.__getitem__(tuple(stages))  # noqa: N806 - a type
    Rerank = bool if reranker else _NoRerank  # noqa: N806 - a type
    Text = Annotated[  # noqa: N806 - a type
        str, StringConstraints(min_length=1, max_length=config.max_query_chars, pattern=_NON_BLANK)
    ]

    class Options(BaseModel):
        # JSON has real types: `"depth": true` or `"k": "5"` is an error, not 1 or 5 (but
        # 5.0 is the integer 5, as JSON Schema says).
        model_config = ConfigDict(extra="forbid")
        # (Field before the validator, inside the Optional: that keeps minimum/maximum in
        # the schema and never compares None with a bound.)
        k: Annotated[int, Field(ge=1, le=config.max_k), _JSON_INT] = 10
        first_stage: Stage | None = None  # type: ignore[valid-type]
        rerank: Annotated[Rerank, Strict()] | None = None  # type: ignore[valid-type]
        depth: Annotated[int, Field(ge=1, le=config.max_depth), _JSON_INT] | None = None

    class SearchOne(Options):
        """One query: the answer is one result."""

        query: Text

    class SearchMany(Options):
        """Several queries: the answer is ``results``, in the same order."""

        queries: list[Text] = Field(min_length=1, max_length=config.max_queries)

    return Stage, Rerank, SearchOne, SearchMany


_ERRORS = {
    400: {"model": ErrorOut, "description": "A request the index or pipeline cannot serve"},
    401: {"model": ErrorOut, "description": "Missing or wrong API key"},
    413: {"model": ErrorOut, "description": "Body too large"},
    422: {"model": ErrorOut, "description": "Invalid parameters"},
    503: {"model": ErrorOut, "description": "Queue full: retry after Retry-After seconds"},
    504: {"model": ErrorOut, "description": "Over the per-request time limit"},
}


# -- the app ------------------------------------------------------------------------------


def create_app(pipeline: Any, config: ServeConfig | None = None) -> FastAPI:
    """The FastAPI app serving ``pipeline`` (a loaded :class:`SearchPipeline`)."""
    config = config or ServeConfig()
    config.check()
    batcher = MicroBatcher(
        pipeline, config.max_batch, config.queue_size, config.batch_window_ms / 1000
    )
    stages = pipeline.describe()["stages_available"]
    Stage, Rerank, SearchOne, SearchMany = _request_models(  # noqa: N806 - types
        config, stages, pipeline.reranker is not None
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(
        title="dotcat",
        version=__version__,
        description="Neural search: BERT_DOT + FAISS (+ BM25 hybrid), BERT_CAT re-ranking.",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.batcher = batcher
    app.state.pipeline = pipeline
    app.state.retry_after = config.retry_after_s
    app.add_middleware(_AccessLog)
    app.add_middleware(_BodyLimit, max_bytes=config.max_body_bytes)
    _add_error_handlers(app)

    def require_key(request: Request) -> None:
        if not config.api_key:
            return
        given = request.headers.get("x-api-key", "")
        auth = request.headers.get("authorization", "")
        if not given and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if not hmac.compare_digest(given.encode(), config.api_key.encode()):
            raise StarletteHTTPException(401, "missing or wrong API key")

    def only(*names: str):
        """Refuse query parameters the endpoint does not know (a typo is not ignored)."""

        def check(request: Request) -> None:
            unknown = sorted(set(request.query_params) - set(names))
            if unknown:
                raise StarletteHTTPException(422, f"unknown query parameter(s): {unknown}")

        return check

    async def answer(request: Request, job: Job) -> list[list[Any]]:
        if job.first_stage is not None and job.first_stage not in stages:
            raise DotcatError(
                f"first stage {job.first_stage!r} is not available here ({sorted(stages)})"
            )
        if job.rerank and pipeline.reranker is None:
            raise DotcatError("this server has no re-ranker (start it with --rerank MODEL)")
        request.state.log = {
            "k": job.k,
            "queries": len(job.queries),
            "first_stage": job.first_stage or pipeline.first_stage,
            "rerank": bool(pipeline.reranker) if job.rerank is None else job.rerank,
        }
        future = batcher.submit(job)
        try:
            hits = await asyncio.wait_for(asyncio.shield(future), config.timeout_s)
        except TimeoutError:
            future.cancel()  # dropped if its batch has not started
            raise StarletteHTTPException(
                504, f"over the {config.timeout_s:g} s time limit"
            ) from None
        request.state.log["batch"] = job.batch_queries
        return hits

    def to_out(query: str, job: Job, hits: list[Any], took_ms: float) -> SearchOut:
        reranked = bool(pipeline.reranker) if job.rerank is None else job.rerank
        return SearchOut(
            query=query,
            k=job.k,
            first_stage=job.first_stage or pipeline.first_stage,
            reranked=reranked,
            took_ms=round(took_ms, 3),
            hits=[HitOut(**asdict(h)) for h in hits],
        )

    @app.get(
        "/search",
        response_model=SearchOut,
        responses=_ERRORS,
        dependencies=[
            Depends(require_key),
            Depends(only("q", "k", "rerank", "depth", "first_stage")),
        ],
    )
    async def search_get(
        request: Request,
        q: Annotated[
            str, Query(min_length=1, max_length=config.max_query_chars, pattern=_NON_BLANK)
        ],
        k: Annotated[int, Query(ge=1, le=config.max_k)] = 10,
        rerank: Annotated[Rerank | None, Query()] = None,  # type: ignore[valid-type]
        depth: Annotated[int | None, Query(ge=1, le=config.max_depth)] = None,
        first_stage: Annotated[Stage | None, Query()] = None,  # type: ignore[valid-type]
    ) -> SearchOut:
        """The top ``k`` documents for the query ``q``."""
        start = time.perf_counter()
        job = Job([q], k, first_stage, rerank, depth)
        (hits,) = await answer(request, job)
        return _answer(to_out(q, job, hits, (time.perf_counter() - start) * 1000))

    @app.post(
        "/search",
        response_model=SearchOut | MultiSearchOut,
        responses=_ERRORS,
        dependencies=[Depends(require_key), Depends(only())],
    )
    async def search_post(
        request: Request,
        body: SearchOne | SearchMany,  # type: ignore[valid-type]
    ) -> SearchOut | MultiSearchOut:
        """One query (``query``: a result) or several (``queries``: ``results``, in order)."""
        start = time.perf_counter()
        one = isinstance(body, SearchOne)
        texts = [body.query] if one else list(body.queries)
        job = Job(texts, body.k, body.first_stage, body.rerank, body.depth)
        hits = await answer(request, job)
        took = (time.perf_counter() - start) * 1000
        results = [to_out(t, job, h, took) for t, h in zip(texts, hits, strict=True)]
        if one:
            return _answer(results[0])
        return _answer(MultiSearchOut(results=results, took_ms=round(took, 3)))

    @app.get(
        "/documents/{doc_id:path}",
        response_model=DocumentOut,
        responses={404: {"model": ErrorOut, "description": "No such document"}, **_ERRORS},
        dependencies=[Depends(require_key), Depends(only())],
    )
    def document(doc_id: str) -> DocumentOut:
        """A document of the index, by id."""
        doc = pipeline.document(doc_id)
        if doc is None:
            raise StarletteHTTPException(404, f"no document with id {doc_id!r}")
        return DocumentOut(doc_id=doc.id, title=doc.title, text=doc.text)

    @app.get("/healthz", dependencies=[Depends(only())], responses=_ERRORS)
    def healthz() -> dict[str, str]:
        """Liveness: the models and the index are loaded (the server binds only after)."""
        return {"status": "ok"}

    @app.get("/info", dependencies=[Depends(require_key), Depends(only())], responses=_ERRORS)
    def info() -> dict[str, Any]:
        """The index manifest, the pipeline's stages and models, counts and limits."""
        limits = {k: v for k, v in asdict(config).items() if k not in ("api_key", "host", "port")}
        return {
            "dotcat_version": __version__,
            "pipeline": pipeline.describe(),
            "manifest": asdict(pipeline.manifest),
            "limits": limits,
            "batches": {"served": batcher.batches, "queries": batcher.queries},
            "auth": bool(config.api_key),
            "pid": os.getpid(),  # which worker answered (``--workers``)
            "threads": torch.get_num_threads(),  # its share of the cores (``--workers``)
        }

    static = resources.files("dotcat.serve") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(str(static / "index.html"), media_type="text/html")

    return app


def _answer(answer: BaseModel) -> Response:
    """The answer serialised once, by pydantic: returned as a Response, FastAPI does not
    validate it against the response model a second time (it was built from that model)."""
    return Response(answer.model_dump_json(), media_type="application/json")


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as ``{"error": "..."}``: 4xx for bad requests, never a traceback."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            if error.get("type") == "json_invalid":
                problems.append("the body is not valid JSON")
                continue
            where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body", "query"))
            problems.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
        return JSONResponse({"error": "; ".join(problems) or "invalid request"}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 401:
            headers["WWW-Authenticate"] = "Bearer"
        if exc.status_code == 405:  # every method of the path, not the first route's only
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return JSONResponse(
            {"error": str(exc.detail)}, status_code=exc.status_code, headers=headers
        )

    @app.exception_handler(DotcatError)
    async def refused(request: Request, exc: DotcatError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=400)

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


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.routes:
        regex, route_methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and route_methods and regex.match(request.url.path):
            methods |= set(route_methods)
    return sorted(methods)


class _BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, whether declared or streamed.

    A declared ``Content-Length`` over the cap is refused before reading; otherwise the body
    is read here (it is small: the cap) and handed on whole, so a chunked upload that grows
    past the cap is refused too, with the same 413 rather than a parse error.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                await _json(send, 400, {"error": "bad Content-Length"})
                return
            if too_big:
                await _json(send, 413, {"error": f"body over {self.max_bytes} bytes"})
                return
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # a disconnect: let the app see it
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _json(send, 413, {"error": f"body over {self.max_bytes} bytes"})
                return
            if not message.get("more_body", False):
                break
        replay = iter(messages)

        async def buffered() -> dict:
            return next(replay, None) or await receive()

        await self.app(scope, buffered, send)


async def _json(send: Any, status: int, body: dict) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class _AccessLog:
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
