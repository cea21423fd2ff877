"""An index that stays current while it is served: new generations picked up, the folder it
was built from followed, documents written over HTTP.

* **Generations** (:mod:`dotcat.index.layout`): every :data:`POLL_S` the server looks at the index's
  manifest (one ``stat``); when another generation is in place (``dotcat add``, ``delete``, a sync,
  ``merge --overwrite``, ``calibrate``, a write here) it opens it beside the one it serves and swaps
  to it between two calls (:meth:`dotcat.search.pipeline.SearchPipeline.reload`): the old one
  answers until the new one is ready, and no call sees two.
* **--watch**: the folder (or corpus file) the index was built from is watched
  (``watchfiles``: inotify on Linux, changes gathered over :data:`DEBOUNCE_MS`); once the
  watch is on, and then after each batch of changes, a sync
  (:func:`dotcat.index.sync.sync_index`) runs in a worker thread, and the server moves to the
  generation it made. (The first sync catches what changed while no server watched.)
* **--writable**: ``PUT /documents/{id}``, ``POST /documents`` (several in one generation) and
  ``DELETE /documents/{id}``, behind the API key (a writable server needs one); each write
  is one generation, answered once it is on disk (fsynced and swapped in: it survives kill
  -9) and served. Writes and syncs take turns: one at a time in the server, and across
  processes the index's writer lock, waited for up to :data:`WRITE_WAIT_S` (then 503). A
  server not started writable answers a write 403.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.
import asyncio
import logging
import threading
from dataclasses import asdict
from pathlib import Path as FilePath
from typing import Annotated, Any

import watchfiles
from fastapi import Depends, FastAPI, Path
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from dotcat.data.records import DEFAULT_ID_FIELDS, DEFAULT_TEXT_FIELDS, DEFAULT_TITLE_FIELDS
from dotcat.data.sources import CorpusOptions
from dotcat.errors import DataFormatError, DotcatError
from dotcat.files import PROBE
from dotcat.index.encoder import load_document_encoder
from dotcat.index.layout import IndexBusy, generation_id
from dotcat.index.sync import sync_index
from dotcat.index.updates import add_documents, delete_documents, document_config
from dotcat.serve.protocol import DocumentIn, DocumentsIn, IdentifiedDocument, WriteOut

logger = logging.getLogger(__name__)

#: Seconds between two looks at the index's manifest.
POLL_S = 0.5
#: Milliseconds over which a folder's changes are gathered into one sync.
DEBOUNCE_MS = 500
#: Seconds a write waits for another process writing the index (then 503).
WRITE_WAIT_S = 30.0
DONE = "Done: on disk and served"
#: Field names a document's own id, title and text take (a field may not be named so).
_RESERVED = {*DEFAULT_ID_FIELDS, *DEFAULT_TITLE_FIELDS, *DEFAULT_TEXT_FIELDS}


class Live:
    """What keeps a server's index current (see the module docstring)."""

    def __init__(self, pipeline: Any, config: Any) -> None:
        self.pipeline, self.config = pipeline, config
        self.index_dir = FilePath(pipeline.index_dir)
        self._write = threading.Lock()  # one writer (write or sync) of this server at a time
        self._reload = threading.Lock()
        self._encoder: Any = None
        self._failed: tuple[int, ...] | None = None  # a generation that could not be opened
        self._tasks: list[asyncio.Task] = []
        self._stop: asyncio.Event | None = None

    async def start(self) -> None:
        """Follow the index's generations (one index, not shards) and, with ``watch``, its
        folder."""
        if self.pipeline.stages.generation_id is None:
            return
        self._stop = asyncio.Event()
        self._tasks.append(asyncio.create_task(self._follow()))
        if self.config.watch or self.config.writable:  # the first write need not wait for it
            self._tasks.append(asyncio.create_task(asyncio.to_thread(self._load_encoder)))
        if self.config.watch:
            self._tasks.append(asyncio.create_task(self._watch()))

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def reload(self) -> bool:
        """Move to the generation in place if it is new (one reload at a time); one that
        cannot be opened is logged once, and the old one kept."""
        with self._reload:
            seen = generation_id(self.index_dir)
            try:
                return self.pipeline.reload()
            except Exception as e:  # noqa: BLE001 - whatever it is, the old one answers on
                if seen != self._failed:
                    logger.error("%s: kept the generation served: %s", self.index_dir, e)
                self._failed = seen
                return False

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            seen = generation_id(self.index_dir)
            if seen not in (self.pipeline.stages.generation_id, self._failed):
                await asyncio.to_thread(self.reload)

    async def _watch(self) -> None:
        """Sync after each batch of changes to the folder (or corpus file) it was built from."""
        entry = self.pipeline.manifest.corpus
        corpus = watched_corpus(entry, self.index_dir)
        options = CorpusOptions(**entry.get("options", {}))
        where = corpus if corpus.is_dir() else corpus.parent
        index = self.index_dir.resolve()

        usual = watchfiles.DefaultFilter()  # .git, editors' swap files...

        def wanted(change: watchfiles.Change, path: str) -> bool:
            p = FilePath(path)
            if index == p or index in p.parents or p.name.startswith((f".{index.name}.", PROBE)):
                return False  # the index's own writes (an index kept inside its folder)
            return (corpus.is_dir() or p == corpus) and usual(change, path)

        logger.info("%s: following %s", self.index_dir, corpus)
        first = True  # once the watch is on: a sync for what changed while none watched
        async for changes in watchfiles.awatch(where, watch_filter=wanted, debounce=DEBOUNCE_MS,
                                               stop_event=self._stop, yield_on_timeout=True,
                                               rust_timeout=1000):  # fmt: skip
            if not changes and not first:
                continue
            first = False
            try:
                await asyncio.to_thread(self._sync, corpus, options)
            except Exception as e:  # noqa: BLE001 - a bad file, a busy index: the next change
                logger.error("%s: sync failed: %s", self.index_dir, e)  # tries again

    def _sync(self, corpus: FilePath, options: CorpusOptions) -> None:
        with self._write:
            done = sync_index(corpus, self.index_dir, corpus_options=options,
                              encoder=self.encoder(), show_progress=False,
                              wait=WRITE_WAIT_S)  # fmt: skip
        self.reload()
        logger.info("%s", done.line(corpus, self.index_dir))

    def _load_encoder(self) -> None:
        with self._write:
            self.encoder()

    def encoder(self) -> Any:
        """The index's document encoder, loaded once (as the server starts) and kept."""
        if self._encoder is None:
            runtime = {"device": self.pipeline.config.device}
            self._encoder = load_document_encoder(document_config(self.pipeline.manifest, runtime))
        return self._encoder

    async def write(self, documents: list[IdentifiedDocument], delete: str | None) -> WriteOut:
        """Write ``documents`` (or delete the document ``delete``) in one generation, answered
        once it is on disk and served."""
        return await asyncio.to_thread(self._write_now, documents, delete)

    def _write_now(self, documents: list[IdentifiedDocument], delete: str | None) -> WriteOut:
        try:
            with self._write:
                if delete is not None:
                    done = delete_documents(self.index_dir, [delete], missing_ok=True,
                                            wait=WRITE_WAIT_S)  # fmt: skip
                    if not done.deleted:
                        raise StarletteHTTPException(404, f"no document with id {delete!r}")
                else:
                    records = [_record(d) for d in documents]
                    done = add_documents(self.index_dir, records, upsert=True,
                                         encoder=self.encoder(), show_progress=False,
                                         wait=WRITE_WAIT_S)  # fmt: skip
        except IndexBusy as e:
            raise StarletteHTTPException(503, str(e), {"Retry-After": "5"}) from None
        except DataFormatError as e:  # a document, named in the request's terms
            if e.path != "<list>" or e.line is None:
                raise
            field = {"_id": ".doc_id", "title": ".title", "text": ".text", None: ""}.get(
                e.field, f".fields.{e.field}")  # fmt: skip
            raise DotcatError(f"documents[{e.line - 1}]{field}: {e.problem}") from None
        self.reload()
        return WriteOut(generation=self.pipeline.manifest.generation, **asdict(done))


def watched_corpus(entry: dict[str, Any], index_dir: FilePath) -> FilePath:
    """The folder (or corpus file) a watch follows: the one the index was built from (its
    manifest's ``corpus`` ``entry``); an index built otherwise, or from what is gone, refused."""
    if entry.get("kind") not in ("folder", "file"):
        raise DotcatError(
            f"watch: {index_dir} was built from {entry.get('path')!r} ({entry.get('kind')}), "
            "not a folder or a corpus file: there is nothing to follow"
        )
    if not FilePath(entry["path"]).exists():
        raise DotcatError(f"watch: {entry['path']}, which {index_dir} was built from, is gone")
    return FilePath(entry["path"])


def _record(document: IdentifiedDocument) -> dict[str, Any]:
    """A document as a record (:func:`dotcat.data.records.record_from_mapping` reads it)."""
    taken = sorted(_RESERVED & set(document.fields))
    if taken:
        raise StarletteHTTPException(
            422, f"fields: {', '.join(taken)} is the document's own (doc_id, title, text)"
        )
    return {"_id": document.doc_id, "title": document.title, "text": document.text,
            **document.fields}  # fmt: skip


def add_document_routes(app: FastAPI, svc: Any, live: Live, no_parameters: Any) -> None:
    """``PUT /documents/{doc_id}``, ``POST /documents``, ``DELETE /documents/{doc_id}``:
    behind the API key, refused (403) on a server not started writable; ``no_parameters``:
    the dependency refusing query parameters."""

    def writable() -> None:
        if not svc.config.writable:
            raise StarletteHTTPException(
                403, "this server is read-only: start it with --writable (and an API key) to "
                "write documents",
            )  # fmt: skip

    deps = [*svc.auth, Depends(writable), no_parameters]
    doc_id_path = Path(description="The document's id (new: added; held: replaced).")
    # What each can answer: a read-only server refuses every write before reading it.
    writes = svc.config.writable
    answers = svc.errors(400, 413, 422, 503, 507) if writes else svc.errors(403, 413, 422)
    deletes = svc.errors(400, 404, 422, 503, 507) if writes else svc.errors(403, 422)

    shared = {"tags": ["documents"], "response_model": WriteOut, "response_description": DONE,
              "dependencies": deps}  # fmt: skip
    searchable = "answered once it is on disk and searchable"

    @app.put("/documents/{doc_id:path}", summary="Write one document", responses=answers,
             description=f"Add the document (or replace the one with this id); {searchable}.",
             operation_id="put_document", **shared)  # fmt: skip
    async def put_document(doc_id: Annotated[str, doc_id_path], body: DocumentIn) -> WriteOut:
        try:  # (checked here: a pattern on a path parameter trips schema-driven clients)
            document = IdentifiedDocument(doc_id=doc_id, **body.model_dump())
        except ValidationError as e:  # a control character or a blank id: 422, not 500
            raise RequestValidationError(e.errors()) from None
        return await live.write([document], None)

    @app.post("/documents", summary="Write several documents", responses=answers,
              description=f"Add (or replace) the documents in one generation; {searchable}.",
              operation_id="post_documents", **shared)  # fmt: skip
    async def post_documents(body: DocumentsIn) -> WriteOut:
        return await live.write(body.documents, None)

    @app.delete("/documents/{doc_id:path}", summary="Delete one document", responses=deletes,
                description="Delete the document; answered once it is gone from disk and from "
                "the answers.", operation_id="delete_document", **shared)  # fmt: skip
    async def delete_document(
        doc_id: Annotated[str, Path(description="The document's id.")],
    ) -> WriteOut:
        return await live.write([], doc_id)
