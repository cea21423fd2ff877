"""A real server on 127.0.0.1 (uvicorn in a thread, a free port) over a tiny hybrid index."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from dotcat.index import IndexConfig, build_index
from dotcat.models import EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.serve.app import ServeConfig, create_app


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
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=config.port, log_level="warning", access_log=False
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="session")
def hybrid_index(tmp_path_factory, tiny_bert_dir) -> Path:
    """The six-document tiny corpus, dense + BM25, fp32."""
    import gzip
    import json

    from tests.conftest import TINY_DOCS

    root = tmp_path_factory.mktemp("serve_index")
    corpus = root / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        for doc in TINY_DOCS:
            f.write(json.dumps(doc) + "\n")
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(corpus, root / "index", encoder, IndexConfig(bm25=True), show_progress=False)
    return root / "index"


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
