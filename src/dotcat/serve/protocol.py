"""The HTTP protocol of ``dotcat serve``: what a request may hold and what an answer holds.

Pydantic models, from which FastAPI writes the OpenAPI schema (``/openapi.json``, shown at
``/docs`` and ``/redoc``): every field described, every cap in the schema. The request types
are built per server (:func:`request_models`): its caps, its first stages and whether it has a
re-ranker are in them, so a request the schema allows is one the server serves.
"""

# No `from __future__ import annotations`: pydantic and FastAPI read these annotations as
# objects, some of them built at run time (the caps come from the server's config).
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    Strict,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from dotcat.options import DEPTH_HELP, SHOWN_K
from dotcat.search.config import CONTROL_CLASS, INVISIBLE_CLASS
from dotcat.search.facets import FACET_DEPTH
from dotcat.search.filters import MAX_FILTER_CHARS
from dotcat.search.stages import entry
from dotcat.serve.snippet import PREFIX_CHARS, SNIPPET_CHARS, TITLE_CHARS

# A query must hold a visible character that Python does not strip: regex \S (Unicode
# White_Space, as the schema's validators read it) leaves out \x1c-\x1f, which str.strip()
# removes, and zero-width ones (INVISIBLE_CLASS) show nothing.
# A query holds no control character either (dotcat.search.config.CONTROL): said in the
# schema's pattern, so that a client (or a schema-driven test) knows the rule.
NON_BLANK = rf"^[^{CONTROL_CLASS}]*[^\s{CONTROL_CLASS}{INVISIBLE_CLASS}][^{CONTROL_CLASS}]*$"
NO_SPACE = NON_BLANK.replace("[^", "[^\\s")  # an id: a TREC run's column holds no white space


# -- answers ------------------------------------------------------------------------------


class PassageOut(BaseModel):
    """The passage of a document that matched the query (an index built with passages)."""

    start: int = Field(description="Its first character in the document's text (0-based).")
    stop: int = Field(description="One past its last character: it is `text[start:stop]`.")
    text: str = Field(
        description="Its text: at most one encoder window of the document (a few hundred words)."
    )


class HitOut(BaseModel):
    """One result: a document, and the passage of it that matched."""

    rank: int = Field(description="1 for the best match.")
    doc_id: str = Field(description="The document's id; `GET /documents/{doc_id}` gives it.")
    score: float = Field(
        description="The ranking score: higher is better; its scale depends on the stage "
        "that ranked last (BM25, dense similarity, fusion or cross-encoder): see `score_kind`."
    )
    score_kind: str = Field(
        description="The score's scale: bm25, cosine or dot (the bi-encoder), rrf (reciprocal "
        "rank fusion), fused (the linear fusion, in [0, 1]), logit (the cross-encoder's) or "
        "interpolated (the cross-encoder's mixed with the first stage's, in [0, 1]); bm25-sum, "
        "cosine-sum or dot-sum: a document's best passages' scores summed (aggregation sum); "
        "order: below the re-ranked depth, a score that only keeps the first stage's order."
    )
    title: str = Field(
        description=f"The document's title ('' if none); over {TITLE_CHARS} characters it is "
        "cut with '…' unless `full_text` was asked."
    )
    snippet: str = Field(
        description=f"At most {SNIPPET_CHARS} characters of the text around the query's words "
        "(or its start), cut between words; '…' marks a cut. Taken from the passage that "
        "matched, where there is one."
    )
    highlights: list[tuple[int, int]] = Field(
        default_factory=list,
        description="Where the query's words are in `snippet`: [start, stop) character "
        "offsets of each word matched, in order (`snippet[start:stop]`).",
    )
    passage: PassageOut | None = Field(
        None,
        description="The passage that matched, where the document's text is in it (an index "
        "built with passages: a long document is searched passage by passage); absent for an "
        "index that searches documents whole.",
    )
    fields: dict[str, Any] = Field(
        default_factory=dict,
        description="The document's fields (record columns, front matter, path, folder, "
        "extension, size, mtime...): text, numbers, dates (ISO 8601 text), lists of text.",
    )
    text: str | None = Field(
        None, description="The whole text: only when the request asked for `full_text`."
    )


class FacetValue(BaseModel):
    """One value of a facet and how many results hold it."""

    value: str = Field(description="The value (as text).")
    count: int = Field(description="How many of the results counted hold it.")


class FacetOut(BaseModel):
    """A field with few distinct values, counted over a query's results."""

    field: str = Field(description='The field\'s name (`field = "value"` filters by it).')
    values: list[FacetValue] = Field(description="Its values, most frequent first.")


class CoverageOut(BaseModel):
    """How much of the collection a search over shards covered (as Vespa reports coverage)."""

    full: bool = Field(description="Whether every shard answered: the answer is complete.")
    coverage: float = Field(
        description="The share of the collection's documents searched, in percent (100: all)."
    )
    documents: int = Field(description="Documents in the shards that answered.")
    total: int = Field(description="Documents in the collection.")
    shards: int = Field(description="Shards of the collection.")
    answered: int = Field(description="Shards that answered within the time budget.")
    missing: list[str] = Field(
        description="Shards left out: none of their replicas answered in time."
    )


class SearchOut(BaseModel):
    """The answer to one query."""

    query: str = Field(description="The query, as given.")
    k: int = Field(description="How many results were asked for.")
    first_stage: str = Field(description="The first stage that ran: dense, bm25 or hybrid.")
    reranked: bool = Field(description="Whether the cross-encoder re-ranked the results.")
    took_ms: float = Field(description="Time on the server, queueing included, in ms.")
    terms: list[str] = Field(
        description="The query's words the snippets are cut around (stop words left out); "
        f"one of {PREFIX_CHARS} or more characters matches the words it begins."
    )
    filter: str | None = Field(None, description="The filter the results are within.")
    hits: list[HitOut] = Field(description="The results, best first (at most `k`).")
    facets: list[FacetOut] | None = Field(
        None,
        description="With `facets`: the fields with few distinct values, counted over the "
        f"query's top {FACET_DEPTH} results (within its filter).",
    )
    coverage: CoverageOut | None = Field(
        None,
        description="A server over shards: how much of the collection was searched (`full` "
        "false: some shard did not answer in time, and its documents are missing); absent "
        "over one index.",
    )


class MultiSearchOut(BaseModel):
    """The answer to several queries (`queries`)."""

    results: list[SearchOut] = Field(description="One result per query, in the same order.")
    took_ms: float = Field(description="Time on the server for all of them, in ms.")


class DocumentOut(BaseModel):
    """A document of the index."""

    doc_id: str = Field(description="The document's id.")
    title: str = Field(description="Its title ('' if none).")
    text: str = Field(description="Its whole text.")
    fields: dict[str, Any] = Field(default_factory=dict, description="Its fields.")


class SearchAnswer(RootModel[SearchOut | MultiSearchOut]):
    """One result for `query`, or `results` for `queries`."""


class ErrorOut(BaseModel):
    """Every error's body."""

    error: str = Field(description="What was wrong, in one line.")


class HealthOut(BaseModel):
    """The server is up."""

    status: Literal["ok"] = Field(description="Always ok: the server answers once loaded.")


class IndexInfo(BaseModel):
    """The index searched."""

    name: str = Field(description="The index directory's name.")
    documents: int = Field(description="How many documents it holds.")
    created: str = Field(description="When it was built (ISO 8601), '' if not recorded.")
    faiss: str = Field(description="The FAISS index type (e.g. Flat, HNSW32, IVF1024,PQ64).")
    precision: str = Field(description="The precision its vectors were encoded at.")
    bm25: bool = Field(description="Whether it has a BM25 index (bm25 and hybrid first stages).")
    generation: int = Field(1, description="The generation served (1: as built; each update "
                            "makes the next, and the server moves to it).")  # fmt: skip
    made: str = Field("", description="When that generation was made (ISO 8601).")


class EncoderInfo(BaseModel):
    """The bi-encoder that made the index's vectors and encodes the queries."""

    name: str = Field(description="The BERT_DOT bi-encoder: a hub name, or a folder's name.")
    fingerprint: str = Field(description="SHA-256 of its weights.")
    dim: int = Field(description="Vector dimension.")
    similarity: str = Field(description="dot or cos.")
    pooling: str = Field(description="cls or mean.")


class RerankerInfo(BaseModel):
    """The cross-encoder that re-ranks."""

    name: str = Field(description="The BERT_CAT cross-encoder: a hub name, or a folder's name.")
    fingerprint: str = Field(description="SHA-256 of its weights.")
    precision: str = Field(description="The precision it runs at (fp32, bf16, fp16, int8).")
    depth: int = Field(description="How many first-stage results it re-ranks by default.")
    interpolation: float = Field(
        description="Its weight in the final score (1: the plain cross-encoder score)."
    )
    interpolation_source: str = Field(
        description="Its source: given, corpus-chosen, dev-chosen, plain, or why a record holds it."
    )


class FieldInfoOut(BaseModel):
    """A field of the index's documents: what a filter can compare."""

    name: str = Field(description="Its name, as a filter writes it.")
    kind: str = Field(description="string, number, date or list (of strings).")
    documents: int = Field(description="How many documents have it.")
    distinct_values: int = Field(description="How many distinct values it takes.")


class LimitsInfo(BaseModel):
    """What a request may ask, and how long it may wait."""

    max_k: int = Field(description="Most results per query.")
    max_depth: int = Field(description="Most results re-ranked per query.")
    max_query_chars: int = Field(description="Longest query, in characters.")
    max_queries: int = Field(description="Most queries in one POST.")
    max_body_bytes: int = Field(description="Largest POST or PUT body (413 beyond).")
    max_url_bytes: int = Field(description="Longest URL (414 beyond): long queries go by POST.")
    max_answer_bytes: int = Field(description="Largest answer (400 beyond).")
    snippet_chars: int = Field(description="Most characters of text in a hit's snippet.")
    queue_size: int = Field(description="Most requests waiting (503 with Retry-After beyond).")
    timeout_s: float = Field(description="Time limit of one request, in seconds (504 beyond).")
    retry_after_s: int = Field(description="The Retry-After of a 503, in seconds.")
    max_batch: int = Field(description="Most queries in one model call.")
    batch_window_ms: float = Field(description="Most time a batch waits for more requests.")
    workers: int = Field(description="Server processes sharing the port.")


class ServerInfo(BaseModel):
    """The server process that answered."""

    pid: int = Field(description="The process that answered (one of `workers`).")
    threads: int = Field(description="Its compute threads.")
    batches: int = Field(description="Model calls it has made.")
    queries: int = Field(description="Queries those calls answered.")


class ReplicaInfo(BaseModel):
    """One process holding a shard."""

    pid: int | None = Field(description="Its process id on its node (as last seen).")
    node: str | None = Field(description="The Ray node it runs on (null: in this process).")
    up: bool = Field(description="Whether searches ask it now.")


class ShardInfo(BaseModel):
    """One shard of the collection, and its replicas (a server over shards)."""

    shard: str = Field(description="The shard's name (its directory's).")
    documents: int = Field(description="Documents it holds.")
    replicas: int = Field(description="Processes that hold it (Ray actors).")
    up: int = Field(description="Replicas answering now.")
    state: Literal["ok", "degraded", "down"] = Field(
        description="ok: every replica answers; degraded: some do; down: none does (answers "
        "leave the shard out and say so in their coverage, until Ray has restarted one)."
    )
    processes: list[ReplicaInfo] = Field(description="Its replicas.")


class InfoOut(BaseModel):
    """What this server searches and how (no paths of its machine)."""

    version: str = Field(description="The dotcat version of the server.")
    index: IndexInfo
    encoder: EncoderInfo
    first_stage: str = Field(description="The default first stage.")
    first_stages: list[str] = Field(description="The first stages a request may ask for.")
    fusion: str = Field(description="How hybrid fuses dense and BM25 (e.g. RRF (k=60)).")
    feedback: str = Field(
        description="Pseudo-relevance feedback on each side: none, or e.g. RM3 (10 docs, 10 "
        "terms, original weight 0.5) + Rocchio (3 docs, alpha 1, beta 0.5)."
    )
    reranker: RerankerInfo | None = Field(description="The cross-encoder; null if none.")
    filter: str | None = Field(
        None, description="The filter every search is within, unless it gives its own."
    )
    fields: list[FieldInfoOut] = Field(
        default_factory=list, description="The documents' fields, by name (for `filter`)."
    )
    auth: bool = Field(description="Whether requests need the API key.")
    writable: bool = Field(False, description="Whether documents may be written (/documents).")
    watch: bool = Field(False, description="Whether the index follows the folder it was built "
                        "from (synced when its files change).")  # fmt: skip
    limits: LimitsInfo
    server: ServerInfo
    shards: list[ShardInfo] | None = Field(
        None, description="A server over shards: each shard's state; null over one index."
    )


#: What a document's field may hold (:mod:`dotcat.data.metadata`: text, a number, a date
#: written in ISO 8601, a list of strings; nested objects flatten into dotted names).
FieldValue = str | int | float | bool | list[Any] | dict[str, Any] | None  # a list as in JSONL


class DocumentIn(BaseModel):
    """A document to write (``PUT /documents/{doc_id}``): its title, text and fields."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field("", description="Its title ('' if none).")
    text: str = Field("", description="Its text: a title or a text is needed.")
    fields: dict[str, FieldValue] = Field(
        default_factory=dict, description="Its fields (filters and facets read them)."
    )


class IdentifiedDocument(DocumentIn):
    """A document to write with its id (``POST /documents``)."""

    doc_id: str = Field(min_length=1, pattern=NO_SPACE, description="The document's id.")


class DocumentsIn(BaseModel):
    """Documents to write in one generation (``POST /documents``): new ids are added, the
    ids the index holds replaced."""

    model_config = ConfigDict(extra="forbid")
    documents: list[IdentifiedDocument] = Field(min_length=1, description="The documents.")


class WriteOut(BaseModel):
    """A write, done: on disk (fsynced and published) and served."""

    generation: int = Field(description="The generation the write made (now served).")
    added: int = Field(description="Documents added.")
    replaced: int = Field(description="Documents replaced.")
    deleted: int = Field(description="Documents deleted.")
    documents: int = Field(description="Documents the index holds now.")


# -- errors, by status ----------------------------------------------------------------------

ERRORS: dict[int, str] = {
    400: "A request this server cannot serve, or an answer over its size limit",
    401: "Missing or wrong API key (send X-API-Key or Authorization: Bearer)",
    403: "A write to a server not started writable (--writable)",
    404: "No document with that id",
    413: "Body over the size limit",
    414: "URL over the size limit (send long queries with POST /search)",
    422: "Invalid parameters or body: the error names the field",
    503: "Queue full, or the index busy with another writer: retry after Retry-After seconds",
    504: "Over the per-request time limit",
    507: "No room on the server's disk for the write: the index is as it was",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of these error statuses (each a JSON ``{"error": ...}``)."""
    return {s: {"model": ErrorOut, "description": ERRORS[s]} for s in statuses}


# -- requests -------------------------------------------------------------------------------


def descriptions(
    config: Any, default_stage: str, default_depth: int | None, stages: list[str] | None = None
) -> dict[str, str]:
    """The search parameters' descriptions, shared by ``GET /search`` and ``POST /search``:
    ``config``'s caps (a :class:`ServeConfig`), the server's default first stage, its
    re-ranking depth (None: no re-ranker) and the first stages it serves (each described by
    its registry entry, :mod:`dotcat.search.stages`)."""
    reranker = default_depth is not None
    listed = ", ".join(
        f"{name} ({entry(name).help})" if entry(name).help else name
        for name in stages or [default_stage]
    )
    return {
        "query": f"The query text: 1 to {config.max_query_chars} characters, not only spaces.",
        "k": f"How many results, 1 to {config.max_k}; default {min(SHOWN_K, config.max_k)}.",
        "first_stage": f"The first stage: {listed}; default {default_stage}.",
        "rerank": (
            "Re-rank the top `depth` results with the BERT_CAT cross-encoder; default true."
            if reranker
            else "Only false here: this server has no cross-encoder (start it with --rerank)."
        ),
        "depth": f"{DEPTH_HELP} 1 to {config.max_depth}; "
        + (f"default {default_depth}." if reranker else "used only with a re-ranker."),
        "full_text": "Also return each hit's whole text (`text`); default false: a snippet of "
        f"at most {SNIPPET_CHARS} characters. An answer over {config.max_answer_bytes} bytes is "
        "refused (400); `GET /documents/{doc_id}` gives one document whole.",
        "filter": "Only documents whose fields match this expression, applied inside the "
        'first stage: e.g. `product = "billing" and updated >= 2025-01-01`, `tags contains '
        '"hr"`, `path startswith "notes/"`, `in`, `not`, parentheses (the fields: `GET '
        f"/info`); at most {MAX_FILTER_CHARS} characters. An error names the column and "
        "the token at fault (400).",
        "facets": "Also count, over the query's top "
        f"{FACET_DEPTH} results, the values of the fields with few distinct values "
        "(`facets`); default false.",
    }


def _json_int(value: Any) -> Any:
    """Integers as JSON Schema has them: no booleans, no numeric strings."""
    if isinstance(value, bool | str):
        raise ValueError("expected an integer")
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


def request_models(config: Any, stages: list[str], reranker: bool, described: dict[str, str]):
    """This server's request types: ``config``'s caps (a :class:`ServeConfig`), its first
    stages, whether it re-ranks, and the parameters' descriptions (:func:`descriptions`).

    Returns:
        ``(Stage, Rerank, Text, SearchBody)``: the first-stage, re-rank and query-text types
        (for ``GET /search``'s parameters) and the ``POST /search`` body.
    """
    Stage = Literal.__getitem__(tuple(stages))  # noqa: N806 - a type
    Rerank = bool if reranker else _NoRerank  # noqa: N806 - a type
    Text = Annotated[  # noqa: N806 - a type
        str, StringConstraints(min_length=1, max_length=config.max_query_chars, pattern=NON_BLANK)
    ]

    class SearchBody(BaseModel):
        """One query (`query`: the answer is one result) or several (`queries`: the answer
        is `results`, in the same order), and the options for all of them."""

        # JSON has real types: `"depth": true` or `"k": "5"` is an error, not 1 or 5 (but
        # 5.0 is the integer 5, as JSON Schema says). Exactly one of query and queries.
        model_config = ConfigDict(
            extra="forbid",
            json_schema_extra={"oneOf": [{"required": ["query"]}, {"required": ["queries"]}]},
        )
        # (query and queries default to None without being Optional: null is no query.)
        query: Text = Field(None, description=described["query"])  # type: ignore[assignment]
        queries: list[Text] = Field(  # type: ignore[assignment]
            None,
            min_length=1,
            max_length=config.max_queries,
            description=f"Several queries (1 to {config.max_queries}), each as `query`.",
        )
        # (Field before the validator, inside the Optional: that keeps minimum/maximum in
        # the schema and never compares None with a bound.)
        k: Annotated[int, Field(ge=1, le=config.max_k), _JSON_INT] = Field(
            min(SHOWN_K, config.max_k), description=described["k"]
        )
        first_stage: Stage | None = Field(None, description=described["first_stage"])  # type: ignore[valid-type]
        rerank: Annotated[Rerank, Strict()] | None = Field(  # type: ignore[valid-type]
            None, description=described["rerank"]
        )
        depth: Annotated[int, Field(ge=1, le=config.max_depth), _JSON_INT] | None = Field(
            None, description=described["depth"]
        )
        full_text: Annotated[bool, Strict()] = Field(False, description=described["full_text"])
        filter: Annotated[str, StringConstraints(max_length=MAX_FILTER_CHARS)] | None = Field(
            None, description=described["filter"]
        )
        facets: Annotated[bool, Strict()] = Field(False, description=described["facets"])

        @model_validator(mode="after")
        def _one_of(self) -> "SearchBody":
            if self.query is None and self.queries is None:
                raise ValueError("give `query` (one query) or `queries` (a list of queries)")
            if self.query is not None and self.queries is not None:
                raise ValueError("give either `query` or `queries`, not both")
            return self

    return Stage, Rerank, Text, SearchBody
