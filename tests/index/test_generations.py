"""Crash safety of a sync and of an HTTP write: kill -9 at every step of making and publishing
a generation leaves the index searchable at the old generation or the new one, the next run
finishes the job, and a write the server acknowledged survives kill -9.

Real processes forked from one warm interpreter (:mod:`tests.forks`), each stopped by SIGKILL
before or after a function of the write (copying the generation, updating BM25, fsyncing it,
the swap, removing the old one)."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from tests.forks import WARM, Zygote
from tests.serve.conftest import free_port
from tests.timing import within

from dotcat.index.manifest import Manifest
from dotcat.models import EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.tuning import build_and_tune

#: Where a write is killed: each step of making and publishing a generation, and whether the
#: index is then at the old generation or the new one.
STEPS = [
    ("dotcat.index.layout:copy_for_update", "after", "old"),
    ("dotcat.index.updates:_update_bm25", "after", "old"),
    ("dotcat.index.layout:fsync_tree", "after", "old"),
    ("dotcat.index.layout:_exchange", "after", "new"),
    ("dotcat.index.layout:_remove_old", "after", "new"),
]
KEY = "key-for-tests"


@pytest.fixture(scope="module")
def base(tmp_path_factory, tiny_bert_dir):
    """A folder of notes and its index, then the folder changed (one edited, one added, one
    removed): what a sync has to do."""
    root = tmp_path_factory.mktemp("generations")
    docs = root / "docs"
    docs.mkdir()
    for i in range(8):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\nwords about topic {i} and cells\n")
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_and_tune(docs, root / "idx", encoder, show_progress=False)
    (docs / "n1.md").write_text("# Note 1\n\nnow about wolves\n")
    (docs / "new.md").write_text("a new note on glucose")
    (docs / "n2.md").unlink()
    return root


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    warm = (*WARM, "dotcat.index.sync", "dotcat.serve.app", "dotcat.serve.server")
    with Zygote(tmp_path_factory.mktemp("zygote"), warm) as forks:
        yield forks


def _env(root: Path) -> dict[str, str]:
    return {"DOTCAT_CACHE": str(root / "cache"), "HF_HUB_OFFLINE": "1"}


def _state(index: Path) -> tuple[int, list[str]]:
    """The generation an index is at, and its documents, opened as a search opens it."""
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))
    pipeline.search("wolves", k=3)  # searchable
    return pipeline.manifest.generation, sorted(pipeline.index.store.all_ids())


def _beside(index: Path) -> list[str]:
    return sorted(p.name for p in index.parent.iterdir() if p.name.startswith(f".{index.name}."))


OLD = ["n0.md", "n1.md", "n2.md", "n3.md", "n4.md", "n5.md", "n6.md", "n7.md"]
NEW = sorted([*(n for n in OLD if n != "n2.md"), "new.md"])


@pytest.mark.parametrize(("at", "when", "left"), STEPS, ids=[s[0].split(":")[1] for s in STEPS])
def test_a_sync_killed_at_any_step_leaves_one_generation_and_the_next_finishes(
    base, zygote, tmp_path, at, when, left
):
    index = tmp_path / "idx"
    shutil.copytree(base / "idx", index)
    args = ["-q", "index", str(base / "docs"), str(index)]
    stop = {"at": at, "when": when, "signal": "SIGKILL"}
    done = zygote.run(args, tmp_path, env=_env(base), stop=stop)
    assert done.code == -9, done.stderr
    generation, ids = _state(index)
    assert (generation, ids) == ((1, OLD) if left == "old" else (2, NEW))
    again = zygote.run(args, tmp_path, env=_env(base))
    assert again.code == 0, again.stderr
    assert _state(index) == (2, NEW)
    assert _beside(index) == []


class _Server:
    """``dotcat serve --writable`` in a forked child (its run waits in a thread)."""

    def __init__(self, zygote: Zygote, root: Path, index: Path, work: Path, stop=None) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        port = self.url.rsplit(":", 1)[1]
        args = ["-q", "serve", str(index), "--port", port, "--writable", "--no-access-log"]
        env = {**_env(root), "DOTCAT_API_KEY": KEY}
        self.done = None
        self.thread = threading.Thread(
            target=lambda: setattr(self, "done", zygote.run(args, work, env=env, stop=stop))
        )
        self.thread.start()
        deadline = time.monotonic() + within(120)
        while time.monotonic() < deadline and self.thread.is_alive():
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"the server did not start: {self.done}")

    def put(self, doc_id: str, text: str) -> httpx.Response:
        body = {"title": doc_id, "text": text}
        headers = {"X-API-Key": KEY}
        return httpx.put(f"{self.url}/documents/{doc_id}", json=body, headers=headers, timeout=120)

    def wait(self) -> int:
        self.thread.join(timeout=within(120))
        return self.done.code


#: An HTTP write makes its generation as a sync does (:class:`dotcat.index.updates.Generation`):
#: the last step before the swap, and the swap.
HTTP_STEPS = [STEPS[2], STEPS[3]]


@pytest.mark.parametrize(
    ("at", "when", "left"), HTTP_STEPS, ids=[s[0].split(":")[1] for s in HTTP_STEPS]
)
def test_an_http_write_killed_before_or_in_the_swap_leaves_one_generation(
    base, zygote, tmp_path, at, when, left
):
    index = tmp_path / "idx"
    shutil.copytree(base / "idx", index)
    server = _Server(zygote, base, index, tmp_path, {"at": at, "when": when, "signal": "SIGKILL"})
    with pytest.raises(httpx.HTTPError):  # the server dies in the write: no answer
        server.put("web", "a page about wolves")
    assert server.wait() == -9
    generation, ids = _state(index)
    assert (generation, ids) == ((1, OLD) if left == "old" else (2, sorted([*OLD, "web"])))


def test_an_acknowledged_http_write_survives_kill_9(base, zygote, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(base / "idx", index)
    server = _Server(zygote, base, index, tmp_path)
    answer = server.put("web", "a page about wolves")
    assert answer.status_code == 200 and answer.json()["generation"] == 2, answer.text
    pid = httpx.get(f"{server.url}/info", headers={"X-API-Key": KEY}).json()["server"]["pid"]
    os.kill(pid, signal.SIGKILL)
    assert server.wait() == -9
    assert _state(index) == (2, sorted([*OLD, "web"]))
    assert Manifest.read(index).updates[-1]["op"] == "add"
