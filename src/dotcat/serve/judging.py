"""The judging page and its API (``dotcat serve INDEX --judge``): pooled documents graded by
keyboard, each grade saved before the page moves on.

``GET /judge`` is the page (``static/judge.html``); its API, under ``/judge/api``:

- ``GET state?assessor=``: the scale, the assessors, every query with its pool size and what
  this assessor judged or skipped of it;
- ``GET topic?qid=&assessor=``: a query, its description, its terms (highlighted) and its
  pooled documents in judging order with this assessor's grades;
- ``GET document?qid=&doc_id=``: the document whole, and the passage to read first
  (the one the pooled systems matched, else the window with the most query terms);
- ``POST judgments`` ``{qid, doc_id, assessor, grade, client, seq}`` (grade null: skip):
  saved durably (:class:`dotcat.judging.store.JudgmentStore`) before the answer, which is the
  row that stands. ``client`` and ``seq`` (optional; the page sends them) name the request,
  which makes it idempotent: a repeated or late one is answered with what is stored and never
  lands on another document (:meth:`~dotcat.judging.store.JudgmentStore.judge`);
- ``POST undo`` ``{assessor, client, seq}``: that assessor's latest judgement withdrawn, and
  named (a repeated request withdraws no other);
- ``POST topics`` ``{text, description}``: a query typed in the page, pooled at once over the
  server's systems (:func:`dotcat.judging.pool.build_pool`);
- ``GET agreement``: Cohen's kappa for each pair of assessors.

The routes take the server's API key like every other; refusals are ``{"error": ...}``.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations as objects.
import threading
from importlib import resources
from typing import Annotated, Any, get_type_hints

from fastapi import FastAPI, Query
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException

from dotcat.judging.agreement import assessor_agreement
from dotcat.judging.config import PoolConfig
from dotcat.judging.store import Judgment, JudgmentStore, Topic, now
from dotcat.judging.topics import log_record
from dotcat.serve.snippet import TITLE_CHARS, best_window, query_terms, shorten

#: The passage marked on a document that has no pooled passage: about one encoder window.
WINDOW_CHARS = 1200
_ASSESSOR = Query(min_length=1, max_length=100, description="The assessor's name.")
_QID = Annotated[str, Query(min_length=1, description="The query's id.")]
_DOC = Annotated[str, Query(min_length=1, description="The pooled document's id.")]
_CLIENT = "Who sends (a page load's random id): with seq, names the request."
_SEQ = "The client's request number, rising; a repeated or late request changes nothing."


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a grade "2" or true is refused


class JudgmentIn(_In):
    """One grade (or a skip) by one assessor."""

    qid: str = Field(min_length=1, description="The query's id.")
    doc_id: str = Field(min_length=1, description="The pooled document's id.")
    assessor: str = Field(min_length=1, max_length=100, description="Who grades.")
    grade: int | None = Field(description="A grade of the scale (`GET state`); null: skip.")
    client: str | None = Field(None, min_length=1, max_length=100, description=_CLIENT)
    seq: int | None = Field(None, ge=0, description=_SEQ)


class UndoIn(_In):
    assessor: str = Field(min_length=1, max_length=100, description="Whose last judgement.")
    client: str | None = Field(None, min_length=1, max_length=100, description=_CLIENT)
    seq: int | None = Field(None, ge=0, description=_SEQ)


class TopicIn(_In):
    text: str = Field(min_length=1, max_length=2000, description="The query.")
    description: str = Field("", max_length=4000, description="What an answer must hold.")


class TopicState(BaseModel):
    qid: str
    text: str
    description: str
    source: str
    pooled: int
    judged: int
    skipped: int


class StateOut(BaseModel):
    scale: dict[str, str] = Field(description="grade -> what it means")
    order: str
    assessors: list[str]
    topics: list[TopicState]


class PooledOut(BaseModel):
    doc_id: str
    title: str
    grade: int | None = Field(description="This assessor's grade; null: not graded.")
    skipped: bool
    ranks: dict[str, int] = Field(description="system -> its rank of the document")


class TopicOut(BaseModel):
    qid: str
    text: str
    description: str
    terms: list[str]
    docs: list[PooledOut]


class SpanOut(BaseModel):
    start: int
    stop: int
    pooled: bool = Field(description="true: the passage a system matched; false: the window "
                                     "with the most query terms")  # fmt: skip


class JudgedDocumentOut(BaseModel):
    qid: str
    doc_id: str
    title: str
    text: str
    passage: SpanOut
    ranks: dict[str, int]


def _judgment_out() -> type[BaseModel]:
    """A stored row (:class:`Judgment`'s fields, less its source), then its query's progress
    for its assessor, now."""
    kinds = {**get_type_hints(Judgment), "judged": int, "skipped": int, "pooled": int}
    del kinds["source"]
    described = {"client": "The request that stored this row (null: none named).",
                 "judged": "This assessor's judged documents of the query, now."}  # fmt: skip
    fields = {n: (kind, Field(description=described.get(n))) for n, kind in kinds.items()}
    return create_model("JudgmentOut", **fields)


JudgmentOut = _judgment_out()


class AgreementOut(BaseModel):
    pairs: list[dict[str, Any]]


def add_judging_routes(app: FastAPI, svc: Any, store: JudgmentStore) -> None:
    """The judging page and API over ``store`` (see the module docstring)."""
    pipeline, deps = svc.pipeline, [*svc.auth]

    @app.get("/judge", include_in_schema=False)
    def judge_page() -> FileResponse:
        static = resources.files("dotcat.serve") / "static"
        return FileResponse(str(static / "judge.html"), media_type="text/html")

    @app.get("/judge/api/state", tags=["judging"], response_model=StateOut,
             summary="The queries to judge and one assessor's progress",
             responses=svc.errors(422), dependencies=deps)  # fmt: skip
    def state(assessor: Annotated[str | None, _ASSESSOR] = None) -> StateOut:
        progress = store.progress(assessor)
        topics = [
            TopicState(**t.__dict__, pooled=p.pooled, judged=p.judged, skipped=p.skipped)
            for t in store.topics()
            for p in [progress[t.qid]]
        ]
        scale = {str(k): v for k, v in store.scale.items()}
        return StateOut(scale=scale, order=store.order, assessors=store.assessors(), topics=topics)

    @app.get("/judge/api/topic", tags=["judging"], response_model=TopicOut,
             summary="A query and its pooled documents, in judging order",
             responses=svc.errors(404, 422), dependencies=deps)  # fmt: skip
    def topic(qid: _QID, assessor: Annotated[str | None, _ASSESSOR] = None) -> TopicOut:
        found = _topic(store, qid)
        mine = {j.doc_id: j.grade for j in store.current(assessor, qid)} if assessor else {}
        entries = store.pooled(qid)
        stored = pipeline.index.store.by_ids([e.doc_id for e in entries])
        titles = {doc_id: doc.title for doc_id, doc in stored.items()}
        docs = [
            PooledOut(
                doc_id=e.doc_id,
                title=shorten(titles.get(e.doc_id, ""), TITLE_CHARS),
                grade=mine.get(e.doc_id),
                skipped=e.doc_id in mine and mine[e.doc_id] is None,
                ranks=e.ranks,
            )  # fmt: skip
            for e in entries
        ]
        terms = query_terms(found.text)
        return TopicOut(qid=qid, text=found.text, description=found.description, terms=terms,
                        docs=docs)  # fmt: skip

    @app.get("/judge/api/document", tags=["judging"],
             response_model=JudgedDocumentOut, summary="A pooled document, whole",
             responses=svc.errors(404, 422), dependencies=deps)  # fmt: skip
    def document(qid: _QID, doc_id: _DOC) -> JudgedDocumentOut:
        found = _topic(store, qid)
        entry = store.pooled_entry(qid, doc_id)
        if entry is None:
            raise StarletteHTTPException(404, f"document {doc_id!r} is not pooled for {qid!r}")
        doc = pipeline.document(doc_id)
        if doc is None:
            raise StarletteHTTPException(
                404, f"document {doc_id!r} is no longer in the index (deleted since it was pooled)"
            )
        if entry.start is not None and entry.stop is not None:
            span = SpanOut(start=entry.start, stop=entry.stop, pooled=True)
        else:
            start, stop = best_window(doc.text, query_terms(found.text), WINDOW_CHARS)
            span = SpanOut(start=start, stop=stop, pooled=False)
        return JudgedDocumentOut(qid=qid, doc_id=doc_id, title=doc.title, text=doc.text,
                                 passage=span, ranks=entry.ranks)  # fmt: skip

    @app.post("/judge/api/judgments", tags=["judging"], response_model=JudgmentOut,
              summary="Save a grade (or a skip), durably", responses=svc.errors(400, 422),
              dependencies=deps)  # fmt: skip
    def judge(body: JudgmentIn) -> JudgmentOut:
        return _answer(store, store.judge(body.qid, body.doc_id, body.assessor, body.grade,
                                          client=body.client, seq=body.seq))  # fmt: skip

    @app.post("/judge/api/undo", tags=["judging"], response_model=JudgmentOut,
              summary="Withdraw the assessor's latest judgement",
              responses=svc.errors(404, 422), dependencies=deps)  # fmt: skip
    def undo(body: UndoIn) -> JudgmentOut:
        undone = store.undo(body.assessor, client=body.client, seq=body.seq)
        if undone is None:
            said = f"nothing to undo: {body.assessor!r} judged nothing before it (on this page)"
            raise StarletteHTTPException(404, said)
        return _answer(store, undone)

    _add_topic_routes(app, svc, store, deps)


def _answer(store: JudgmentStore, row: Judgment) -> JudgmentOut:
    """``row`` and its query's progress for its assessor, now."""
    progress = store.progress(row.assessor)[row.qid]
    return JudgmentOut(**row.__dict__, judged=progress.judged, skipped=progress.skipped,
                       pooled=progress.pooled)  # fmt: skip


def _topic(store: JudgmentStore, qid: str) -> Topic:
    found = store.topic(qid)
    if found is None:
        raise StarletteHTTPException(404, f"unknown query id {qid!r}")
    return found


def _add_topic_routes(app: FastAPI, svc: Any, store: JudgmentStore, deps: list) -> None:
    pipeline = svc.pipeline

    @app.post("/judge/api/topics", tags=["judging"], response_model=TopicState,
              summary="Add a query typed in the page, and pool it now",
              responses=svc.errors(400, 422), dependencies=deps)  # fmt: skip
    def add_topic(body: TopicIn) -> TopicState:
        from dotcat.judging.pool import build_pool

        text = body.text.strip()
        if not text:
            raise StarletteHTTPException(422, "text: must hold a character other than white space")
        existing = next((t for t in store.topics() if t.text == text), None)
        topic = existing or Topic(store.new_topic_id(), text, body.description.strip(), "page")
        build_pool(pipeline, store, [topic], _pool_config(store))
        p = store.progress(None)[topic.qid]
        return TopicState(**topic.__dict__, pooled=p.pooled, judged=0, skipped=0)

    @app.get("/judge/api/agreement", tags=["judging"], response_model=AgreementOut,
             summary="Cohen's kappa for each pair of assessors", responses=svc.errors(422),
             dependencies=deps)  # fmt: skip
    def kappa() -> AgreementOut:
        return AgreementOut(pairs=[a.to_json() for a in assessor_agreement(store)])


def _pool_config(store: JudgmentStore) -> PoolConfig:
    """A typed query is pooled as the store's last pool was (its depth and order), over the
    server's own first stages (and its re-ranker, when it has one)."""
    pools = store.pools()
    last = pools[-1] if pools else {}
    return PoolConfig(pool_depth=int(last.get("depth", PoolConfig().pool_depth)),
                      order=last.get("order", store.order))  # fmt: skip


def open_judgments(index_dir: Any, judgments: str | None) -> JudgmentStore:
    """The judgements file the page saves to: ``judgments``, else beside the index (made if
    it is not there yet: queries can be typed in the page)."""
    from dotcat.judging.config import StoreConfig

    return JudgmentStore(StoreConfig(judgments).path(index_dir), index_dir, create=True)


class QueryLog:
    """The opt-in query log (``--query-log FILE``): each query asked, one JSON line
    (:func:`dotcat.judging.topics.log_record`), appended and flushed as it comes, from any
    thread; ``dotcat judge pool --query-log FILE`` pools its distinct queries."""

    def __init__(self, path: str) -> None:
        from pathlib import Path as FilePath

        self.path = FilePath(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open

    def add(self, queries: list[str]) -> None:
        time = now()
        lines = "".join(log_record(q, time) for q in queries)
        with self._lock:
            self._file.write(lines)
            self._file.flush()
