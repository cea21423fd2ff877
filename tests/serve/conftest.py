"""A real server on 127.0.0.1 (uvicorn in a thread, a free port) over a tiny hybrid index."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.timing import within

from dotcat.index import IndexConfig, build_index
from dotcat.index.passages import PassageConfig
from dotcat.models import EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.serve.app import ServeConfig, create_app
from dotcat.serve.server import uvicorn_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(pipeline, **settings):
    """Serve ``pipeline`` on 127.0.0.1 until the block ends; yields the base URL."""
    import uvicorn

    config = ServeConfig(host="127.0.0.1", port=free_port(), **settings)
    app = create_app(pipeline, config)
    server = uvicorn.Server(uvicorn_config(app, config))  # the settings `dotcat serve` uses
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + within(30)
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def raw_request(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is (no client library refusing it first); status, headers, body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(request)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, body


#: A document whose words of interest sit in the middle of ~20,000 characters, with a long title.
LONG_DOC = {
    "_id": "long",
    "title": "Metabolism " + "of cells and organisms " * 12,
    "text": "Filler words about nothing in particular. " * 240
    + "Pyruvate dehydrogenase links glycolysis to the citric acid cycle. "
    + "More filler text follows here. " * 240,
}


def _build(root: Path, docs: list[dict], model_dir: Path, passages: bool | None = None) -> Path:
    """A dense + BM25 fp32 index of ``docs`` in ``root / "index"`` (``passages``: split
    long documents, as :class:`~dotcat.index.PassageConfig` ``enabled``)."""
    import gzip
    import json

    corpus = root / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc) + "\n")
    encoder = EncoderConfig(model=str(model_dir), device="cpu", precision="fp32")
    config = IndexConfig(bm25=True, passages=PassageConfig(passages))
    build_index(corpus, root / "index", encoder, config, show_progress=False)
    return root / "index"


@pytest.fixture(scope="session")
def hybrid_index(tmp_path_factory, tiny_bert_dir) -> Path:
    """The six-document tiny corpus, dense + BM25, fp32."""
    from tests.conftest import TINY_DOCS

    return _build(tmp_path_factory.mktemp("serve_index"), TINY_DOCS, tiny_bert_dir)


@pytest.fixture(scope="session")
def long_pipeline(tmp_path_factory, tiny_bert_dir) -> SearchPipeline:
    """The tiny corpus and :data:`LONG_DOC`."""
    from tests.conftest import TINY_DOCS

    docs = [*TINY_DOCS, LONG_DOC]  # one long document among short ones: split it all the same
    index = _build(tmp_path_factory.mktemp("serve_long"), docs, tiny_bert_dir, passages=True)
    return SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))


@pytest.fixture(scope="session")
def pipeline(hybrid_index) -> SearchPipeline:
    return SearchPipeline(hybrid_index, PipelineConfig(device="cpu", precision="fp32"))


@pytest.fixture(scope="session")
def reranking_pipeline(hybrid_index, tiny_cat_dir) -> SearchPipeline:
    config = PipelineConfig(device="cpu", precision="fp32", rerank=str(tiny_cat_dir), depth=4)
    return SearchPipeline(hybrid_index, config)


@pytest.fixture(scope="session")
def server(pipeline):
    with live_server(pipeline) as url:
        yield url
