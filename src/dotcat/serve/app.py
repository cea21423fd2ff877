"""``dotcat serve``: the search pipeline over HTTP (FastAPI + uvicorn), and a web page.

Endpoints (described at ``/docs``, Swagger UI, and ``/redoc``, both served from local files,
so they work with no network):
``GET /search?q=&k=&rerank=&depth=&first_stage=&full_text=&filter=&facets=``,
``POST /search`` (one query or many), ``GET /documents/{id}``, ``GET /healthz``, ``GET /info``;
the search page at ``/``; with ``--writable``, ``PUT``/``DELETE /documents/{id}`` and ``POST
/documents``. The index served stays current (:mod:`dotcat.serve.live`). The request and
answer types are in :mod:`dotcat.serve.protocol`.

An answer's hits carry a snippet (:mod:`dotcat.serve.snippet`: at most 300 characters of the
text around the query's words, and where those words are in it), the document's fields, and
the whole text only when asked (``full_text``); an answer over ``max_answer_bytes`` is
refused, so a long document never makes every answer long. A ``filter`` keeps the search
within the documents whose fields match (:mod:`dotcat.search.filters`); ``facets`` counts the
few-valued fields over the query's top results (:mod:`dotcat.search.facets`).

What keeps it up under load and bad input:

* concurrent requests are micro-batched (:mod:`dotcat.serve.batcher`): one model call serves
  many, so throughput grows with concurrency, and only one call at a time uses the cores;
* a bounded queue: when it is full the excess gets 503 with ``Retry-After`` at once; every request
  has a time limit (504 past it); body size, URL length, query length, query count, ``k``, ``depth``
  and the answer's size are capped (the caps are in the OpenAPI schema and ``/info``);
* every refusal is a 4xx with ``{"error": "..."}`` in the request's own terms, never a 500 or
  a traceback, the HTTP layer's included (:mod:`dotcat.serve.refusals`); unknown fields and
  unknown query parameters are refused;
* loopback by default; any other address needs an API key (``X-API-Key`` or ``Authorization:
  Bearer``), compared in constant time; no endpoint reads a path from the request;
* one JSON access-log line per request (latency, status, k, stages, batch size) on the
  ``dotcat.serve.access`` logger.
"""

# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations as
# objects, and the POST body model is built per app (its caps come from the config).
import asyncio
import hmac
import os
import time
from collections import Counter
from contextlib import asynccontextmanager
from dataclasses import asdict
from importlib import resources
from pathlib import Path as FilePath
from typing import Annotated, Any

import torch
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.responses import FileResponse, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from dotcat.errors import DotcatError
from dotcat.options import SHOWN_K
from dotcat.search.facets import FACET_DEPTH
from dotcat.search.filters import MAX_FILTER_CHARS
from dotcat.serve.batcher import Job, MicroBatcher
from dotcat.serve.config import ServeConfig
from dotcat.serve.config import is_loopback as is_loopback
from dotcat.serve.judging import QueryLog, add_judging_routes, open_judgments
from dotcat.serve.live import Live, add_document_routes
from dotcat.serve.middleware import AccessLog, BodyLimit, PagePolicy, Utf8Query
from dotcat.serve.protocol import (
    CoverageOut,
    DocumentOut,
    EncoderInfo,
    FacetOut,
    FacetValue,
    FieldInfoOut,
    HealthOut,
    HitOut,
    IndexInfo,
    InfoOut,
    LimitsInfo,
    MultiSearchOut,
    PassageOut,
    ReplicaInfo,
    RerankerInfo,
    SearchAnswer,
    SearchOut,
    ServerInfo,
    ShardInfo,
    descriptions,
    error_responses,
    request_models,
)
from dotcat.serve.refusals import MAX_URL_BYTES, add_error_handlers
from dotcat.serve.snippet import SNIPPET_CHARS, TITLE_CHARS, hit_snippet, query_terms, shorten
from dotcat.version import __version__

DESCRIPTION = f"""
Search an index built by `dotcat index`: a BERT_DOT bi-encoder with FAISS, BM25, or both fused
(hybrid), optionally re-ranked by a BERT_CAT cross-encoder.

* **Answers** list hits best first, each with a **snippet** (at most {SNIPPET_CHARS}
  characters of its text, around the query's words) and, for a long document, the **passage**
  that matched (its text and offsets); ask `full_text=true` for whole texts, or
  `GET /documents/{{doc_id}}` for one document.
* **Errors** are JSON `{{"error": "..."}}` naming the parameter or field at fault.
* **Limits** (`GET /info`): results per query, query length, queries per request, body, URL
  and answer sizes, a request queue (503 with `Retry-After` when full) and a time limit (504).
* **Access**: a server on another address than loopback needs its API key, sent as
  `X-API-Key` or `Authorization: Bearer` ("Authorize" here).
"""


# -- the app ------------------------------------------------------------------------------


def create_app(pipeline: Any, config: ServeConfig | None = None) -> FastAPI:
    """The FastAPI app serving ``pipeline`` (a loaded :class:`SearchPipeline`)."""
    config = config or ServeConfig()
    config.check()
    service, live = SearchService(pipeline, config), Live(pipeline, config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.batcher.start()
        await live.start()
        yield
        await live.stop()
        await service.batcher.stop()

    app = FastAPIOffline(title="dotcat", version=__version__, description=DESCRIPTION,
                         lifespan=lifespan, docs_url="/docs", redoc_url="/redoc")  # fmt: skip
    app.state.service = service
    app.state.pipeline = pipeline
    app.state.retry_after = config.retry_after_s
    app.add_middleware(AccessLog)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes, timeout_s=config.timeout_s)
    app.add_middleware(Utf8Query)
    app.add_middleware(PagePolicy, paths=("/", "/docs", "/redoc", "/judge"))
    add_error_handlers(app, body_fields=service.SearchBody.model_fields)
    _add_search_routes(app, service)
    _add_index_routes(app, service)
    add_document_routes(app, service, live, Depends(only()))
    if config.judge:
        add_judging_routes(app, service, open_judgments(pipeline.index_dir, config.judgments))
    _add_page(app)
    return app


class SearchService:
    """What the routes share: the pipeline and its batcher, this server's request types and
    access check, and the answers built from hits.

    Attributes:
        Stage, Rerank, Text, SearchBody: the request types (:func:`request_models`).
        described: each search parameter's description, for the schema.
        auth: the API-key dependencies (none without a key).
    """

    def __init__(self, pipeline: Any, config: ServeConfig) -> None:
        self.pipeline, self.config = pipeline, config
        self.batcher = MicroBatcher(
            pipeline, config.max_batch, config.queue_size, config.batch_window_ms / 1000
        )
        self.stages: list[str] = pipeline.describe()["stages_available"]
        reranker = pipeline.reranker
        depth = reranker.depth if reranker is not None else None
        self.described = descriptions(config, pipeline.first_stage, depth, self.stages)
        self.Stage, self.Rerank, self.Text, self.SearchBody = request_models(
            config, self.stages, reranker is not None, self.described
        )
        self.auth = _key_check(config.api_key)
        self.query_log = QueryLog(config.query_log) if config.query_log else None

    def errors(self, *statuses: int) -> dict:
        """The OpenAPI error responses of an endpoint: ``statuses``, and 401 with a key."""
        return error_responses(*sorted({*statuses, *([401] if self.config.api_key else [])}))

    async def answer(self, request: Request, job: Job) -> list[list[Any]]:
        """The hits of ``job``'s queries, from the batcher, within the time limit."""
        pipeline = self.pipeline
        if job.first_stage is not None and job.first_stage not in self.stages:
            raise DotcatError(
                f"first stage {job.first_stage!r} is not available here ({sorted(self.stages)})"
            )
        if job.rerank and pipeline.reranker is None:
            raise DotcatError("this server has no re-ranker (start it with --rerank MODEL)")
        request.state.log = {
            "k": job.k,
            "queries": len(job.queries),
            "first_stage": job.first_stage or pipeline.first_stage,
            "rerank": bool(pipeline.reranker) if job.rerank is None else job.rerank,
            "filter": bool(job.filter),
        }
        if self.query_log is not None:
            self.query_log.add(job.queries)
        future = self.batcher.submit(job)
        timeout = self.config.timeout_s
        try:
            hits = await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            future.cancel()  # dropped if its batch has not started
            raise StarletteHTTPException(504, f"over the {timeout:g} s time limit") from None
        request.state.log["batch"] = job.batch_queries
        coverage = getattr(hits[0], "coverage", None) if hits else None
        if coverage is not None and not coverage.full:  # a shard did not answer in time
            request.state.log["coverage"] = round(coverage.share, 4)
        return hits

    def result(
        self, query: str, job: Job, hits: list[Any], took_ms: float, full_text: bool
    ) -> SearchOut:
        """One query's answer: its hits with snippets (and whole texts with ``full_text``),
        and the facets counted over all the hits searched for (``job.fetch``)."""
        reranked = bool(self.pipeline.reranker) if job.rerank is None else job.rerank
        terms = query_terms(query)
        facets = None
        if job.fetch:
            counted = self.pipeline.facets(hits)
            facets = [FacetOut(field=name, values=[FacetValue(value=v, count=c) for v, c in values])
                      for name, values in counted.items()]  # fmt: skip
        return SearchOut(
            query=query,
            k=job.k,
            first_stage=job.first_stage or self.pipeline.first_stage,
            reranked=reranked,
            took_ms=round(took_ms, 3),
            terms=terms,
            filter=job.filter if job.filter is not None else self.pipeline.config.filter,
            hits=[_hit_out(h, terms, full_text) for h in hits[: job.k]],
            facets=facets,
            coverage=_coverage_out(getattr(hits, "coverage", None)),
        )

    def respond(self, answer: BaseModel, full_text: bool) -> Response:
        """The answer serialised once, by pydantic (returned as a Response, FastAPI does not
        validate it a second time: it was built from the response model), within the cap."""
        body = answer.model_dump_json(exclude_none=True).encode()
        limit = self.config.max_answer_bytes
        if len(body) > limit:
            advice = "or without full_text " if full_text else ""
            raise DotcatError(
                f"the answer is {len(body)} bytes, over this server's limit of {limit}: ask "
                f"for fewer results (k) {advice}(GET /documents/{{doc_id}} gives one document)"
            )
        return Response(body, media_type="application/json")

    def info(self) -> InfoOut:
        """What a client needs to know of this server: no machine paths."""
        pipeline, config = self.pipeline, self.config
        described = pipeline.describe()
        encoder = described["encoder"]
        return InfoOut(
            version=__version__,
            index=IndexInfo(
                name=FilePath(pipeline.index_dir).resolve().name,
                documents=described["documents"],
                created=pipeline.manifest.created,
                faiss=str(pipeline.manifest.faiss.get("spec", "")),
                precision=encoder.get("precision") or "fp32",
                bm25="bm25" in self.stages,
                generation=pipeline.manifest.generation,
                made=pipeline.manifest.made or pipeline.manifest.created,
            ),
            encoder=EncoderInfo(
                name=public_name(encoder.get("name", "")),
                **{k: encoder[k] for k in ("fingerprint", "dim", "similarity", "pooling")},
            ),
            first_stage=described["first_stage"],
            first_stages=self.stages,
            fusion=described["fusion"]["description"],
            feedback=described["feedback"]["description"],
            reranker=_reranker_info(described["reranker"]),
            filter=described["filter"],
            fields=[
                FieldInfoOut(name=name, **asdict(f))
                for name, f in pipeline.index.field_kinds().items()
            ],
            auth=bool(config.api_key),
            writable=config.writable,
            watch=config.watch,
            limits=LimitsInfo(
                **{k: v for k, v in asdict(config).items() if k in LimitsInfo.model_fields},
                max_url_bytes=MAX_URL_BYTES,
                snippet_chars=SNIPPET_CHARS,
            ),
            server=ServerInfo(
                pid=os.getpid(),  # which worker answered (``--workers``)
                threads=torch.get_num_threads(),  # its share of the cores (``--workers``)
                batches=self.batcher.batches,
                queries=self.batcher.queries,
            ),
            shards=_shards_info(described.get("shards")),
        )


def _hit_out(hit: Any, terms: list[str], full_text: bool) -> HitOut:
    """A hit's answer: its snippet cut from the passage that matched, where there is one,
    with the query's words marked (``highlights``), and its fields."""
    cut, marks = hit_snippet(hit, terms)
    passage = None
    if hit.start is not None and hit.stop is not None:
        passage = PassageOut(start=hit.start, stop=hit.stop, text=hit.passage)
    return HitOut(
        rank=hit.rank, doc_id=hit.doc_id, score=hit.score, score_kind=hit.score_kind,
        title=hit.title if full_text else shorten(hit.title, TITLE_CHARS), snippet=cut,
        highlights=marks, passage=passage, fields=hit.fields,
        text=hit.text if full_text else None,
    )  # fmt: skip


def _coverage_out(coverage: Any) -> CoverageOut | None:
    """A search's coverage over shards (:class:`dotcat.search.sharded.Coverage`), or None."""
    if coverage is None:
        return None
    share = round(100 * coverage.share, 3)
    return CoverageOut(full=coverage.full, coverage=share, **asdict(coverage))


def _shards_info(status: list[dict[str, Any]] | None) -> list[ShardInfo] | None:
    """Each shard's state and replicas (:meth:`dotcat.search.sharded.ShardedStages.status`)."""
    if status is None:
        return None
    fields = set(ShardInfo.model_fields) - {"processes"}
    return [
        ShardInfo(
            **{k: s[k] for k in fields},
            processes=[ReplicaInfo(**{k: p[k] for k in ("pid", "node", "up")})
                       for p in s["processes"]],
        )
        for s in status
    ]  # fmt: skip


def _reranker_info(described: dict[str, Any] | None) -> RerankerInfo | None:
    if described is None:
        return None
    fields = ("fingerprint", "precision", "depth", "interpolation", "interpolation_source")
    return RerankerInfo(name=public_name(described["name"]), **{k: described[k] for k in fields})


def public_name(name: str) -> str:
    """A model's name for clients: a hub name as it is, a local folder by its own name (the
    machine's paths are nobody's business)."""
    path = FilePath(name).expanduser()
    if path.is_absolute() or name.startswith((".", "~")) or path.exists():
        return path.resolve().name or name
    return name


def _key_check(api_key: str | None) -> list:
    """The dependencies that require ``api_key`` (none without one): ``X-API-Key``, else
    ``Authorization: Bearer``, compared in constant time. As FastAPI security schemes, they
    are in the OpenAPI schema, and Swagger UI's "Authorize" sends them."""
    if not api_key:
        return []
    header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The API key.")
    bearer = HTTPBearer(auto_error=False, description="The API key as a bearer token.")

    def require_key(
        given: Annotated[str | None, Depends(header)],
        auth: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        token = given or (auth.credentials.strip() if auth else "")
        if not hmac.compare_digest(token.encode(), api_key.encode()):
            raise StarletteHTTPException(401, "missing or wrong API key")

    return [Depends(require_key)]


def only(*names: str):
    """A dependency refusing query parameters the endpoint does not know (a typo is not ignored)."""

    def check(request: Request) -> None:
        unknown = sorted(set(request.query_params) - set(names))
        if unknown:
            known = f" (known: {', '.join(names)})" if names else " (it takes none)"
            raise StarletteHTTPException(
                422, f"unknown query parameter(s): {', '.join(unknown)}{known}"
            )
        given = Counter(name for name, _ in request.query_params.multi_items())
        if twice := sorted(name for name, n in given.items() if n > 1):
            raise StarletteHTTPException(
                422, f"query parameter(s) given twice: {', '.join(twice)} (one value each; "
                "several queries: POST /search)",
            )  # fmt: skip

    return check


# -- routes -------------------------------------------------------------------------------

_GET_PARAMS = ("q", "k", "rerank", "depth", "first_stage", "full_text", "filter", "facets")


def _add_search_routes(app: FastAPI, svc: SearchService) -> None:
    c, d = svc.config, svc.described
    Stage, Rerank, Text, SearchBody = svc.Stage, svc.Rerank, svc.Text, svc.SearchBody  # noqa: N806

    @app.get("/search", tags=["search"], summary="Search with one query in the URL",
             description="The top `k` documents for the query `q`, best first, each with a "
             "snippet (and its whole text with `full_text=true`). Queries too long for a URL "
             f"(over {MAX_URL_BYTES} bytes encoded: 414) go by `POST /search`.",
             operation_id="search", response_model=SearchOut,
             response_description="The hits, best first",
             responses=svc.errors(400, 414, 422, 503, 504),
             dependencies=[*svc.auth, Depends(only(*_GET_PARAMS))])  # fmt: skip
    async def search_get(
        request: Request,
        q: Annotated[Text, Query(description=d["query"])],  # type: ignore[valid-type]
        k: Annotated[int, Query(ge=1, le=c.max_k, description=d["k"])] = min(SHOWN_K, c.max_k),
        rerank: Annotated[Rerank | None, Query(description=d["rerank"])] = None,  # type: ignore[valid-type]
        depth: Annotated[int | None, Query(ge=1, le=c.max_depth, description=d["depth"])] = None,
        first_stage: Annotated[Stage | None, Query(description=d["first_stage"])] = None,  # type: ignore[valid-type]
        full_text: Annotated[bool, Query(description=d["full_text"])] = False,
        filter: Annotated[
            str | None, Query(max_length=MAX_FILTER_CHARS, description=d["filter"])
        ] = None,
        facets: Annotated[bool, Query(description=d["facets"])] = False,
    ) -> SearchOut:
        start = time.perf_counter()
        job = Job([q], k, first_stage, rerank, depth, filter, FACET_DEPTH if facets else 0)
        (hits,) = await svc.answer(request, job)
        took = (time.perf_counter() - start) * 1000
        return svc.respond(svc.result(q, job, hits, took, full_text), full_text)

    @app.post("/search", tags=["search"], summary="Search with one query or many in a JSON body",
              description="`query` (one query: the answer is one result) or `queries` (several: "
              "the answer is `results`, in the same order), and the options of `GET /search`.",
              operation_id="search_many", response_model=SearchAnswer,
              response_description="The answer: one result, or `results` in the queries' order",
              responses=svc.errors(400, 413, 422, 503, 504),
              dependencies=[*svc.auth, Depends(only())])  # fmt: skip
    async def search_post(request: Request, body: SearchBody) -> SearchOut | MultiSearchOut:  # type: ignore[valid-type]
        start = time.perf_counter()
        texts = [body.query] if body.query is not None else list(body.queries)
        job = Job(texts, body.k, body.first_stage, body.rerank, body.depth, body.filter,
                  FACET_DEPTH if body.facets else 0)  # fmt: skip
        hits = await svc.answer(request, job)
        took = (time.perf_counter() - start) * 1000
        results = [
            svc.result(t, job, h, took, body.full_text) for t, h in zip(texts, hits, strict=True)
        ]
        if body.query is not None:
            return svc.respond(results[0], body.full_text)
        return svc.respond(MultiSearchOut(results=results, took_ms=round(took, 3)), body.full_text)


def _add_index_routes(app: FastAPI, svc: SearchService) -> None:
    pipeline = svc.pipeline

    @app.get("/documents/{doc_id:path}", tags=["documents"], summary="One document, whole",
             description="The title and whole text of a document of the index, by its id.",
             operation_id="document", response_model=DocumentOut,
             response_description="The document", responses=svc.errors(404, 422),
             dependencies=[*svc.auth, Depends(only())])  # fmt: skip
    def document(
        doc_id: Annotated[str, Path(description="The document's id, as in a hit's `doc_id`.")],
    ) -> DocumentOut:
        doc = pipeline.document(doc_id)
        if doc is None:
            raise StarletteHTTPException(404, f"no document with id {doc_id!r}")
        fields = pipeline.index.fields_of([doc.pos]).get(doc.pos, {})
        return DocumentOut(doc_id=doc.id, title=doc.title, text=doc.text, fields=fields)

    @app.get("/healthz", tags=["server"], summary="Is the server up?",
             description="Answers once the models and the index are loaded (the server binds "
             "its port only then). Open without the API key.",
             operation_id="healthz", response_model=HealthOut, response_description="Up",
             responses=error_responses(422), dependencies=[Depends(only())])  # fmt: skip
    def healthz() -> HealthOut:
        return HealthOut(status="ok")

    @app.head("/healthz", include_in_schema=False, dependencies=[Depends(only())])
    def healthz_head() -> Response:
        """As ``GET /healthz``, without the body (load balancers and ``curl -I`` ask so)."""
        return Response(status_code=200, media_type="application/json")

    @app.get("/info", tags=["server"], summary="What this server searches, and its limits",
             description="The index (name, documents, FAISS type, precision), the models (names "
             "and weight fingerprints), the first stages, the re-ranker, the limits of a "
             "request, and which server process answered.",
             operation_id="info", response_model=InfoOut,
             response_description="The server's description", responses=svc.errors(422),
             dependencies=[*svc.auth, Depends(only())])  # fmt: skip
    def info() -> InfoOut:
        return svc.info()


def _add_page(app: FastAPI) -> None:
    static = resources.files("dotcat.serve") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(str(static / "index.html"), media_type="text/html")
