"""The judging page in real headless Chromium, by keyboard only, over `dotcat serve --judge`
run as a user runs it: 20 documents graded, the server killed (SIGKILL) midway and started
again, and every grade the page said was saved found in the judgements file."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from tests.serve.conftest import free_port
from tests.serve.test_page import CHROMIUM_ARGS, _chromium
from tests.timing import within

from dotcat.judging import JudgmentStore

_DOTCAT = "import sys; from dotcat.cli import app; sys.exit(app())"
SAVED = re.compile(r"Saved: (\S+) graded (\d)\.")


class Server:
    """`dotcat serve INDEX --judge` on a given port, as a process."""

    def __init__(self, index, store, port: int) -> None:
        command = [sys.executable, "-c", _DOTCAT, "serve", str(index), "--judge",
                   "--judgments", str(store), "--port", str(port), "--device", "cpu",
                   "--precision", "fp32"]  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + within(300)  # a loaded machine: slow, not hung
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("dotcat serve --judge did not start")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def _grade(page, key: str, saved: dict) -> None:
    """Press ``key`` on the document shown; wait until the page says it is saved."""
    page.wait_for_selector("#doc[aria-busy='false']")
    qid = page.locator("#topic").input_value()
    doc = page.inner_text("#doc-id").removeprefix("id ")
    before = page.inner_text("#status")
    page.keyboard.press(key)
    page.wait_for_function(
        "([before]) => document.querySelector('#status').textContent !== before"
        " && !document.querySelector('#status').textContent.startsWith('Saving')",
        arg=[before],
    )
    page.wait_for_selector("#doc[aria-busy='false']")
    match = SAVED.match(page.inner_text("#status"))
    assert match and match[1] == doc, page.inner_text("#status")
    saved[(qid, doc)] = int(match[2])


def _start(page, url: str) -> None:
    """Open the page, type the assessor's name, Enter: the first document to judge shows."""
    page.goto(f"{url}/judge")
    page.wait_for_selector("#assessor:focus")
    page.keyboard.type("ann")
    page.keyboard.press("Enter")
    page.wait_for_selector("#doc-title:not(:empty)")
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    assert page.locator("#doc-text mark").count() > 0  # the query's terms highlighted
    assert page.locator("#doc-text .passage").count() == 1


def _first_ten(page, saved: dict) -> None:
    """Eight grades, a skip undone, a look back and forth, a grade, the next query, a grade."""
    for i in range(8):
        _grade(page, str(i % 4), saved)
    page.keyboard.press("s")
    page.wait_for_selector("#status:has-text('skipped')")
    page.wait_for_selector("#doc[aria-busy='false']")  # the next document shown: keys count
    page.keyboard.press("u")
    page.wait_for_selector("#status:has-text('Undone')")
    page.keyboard.press("n")
    page.keyboard.press("p")
    _grade(page, "2", saved)
    page.keyboard.press("]")  # the next query
    page.wait_for_function("() => document.querySelector('#topic').value === 'q2'")
    page.wait_for_selector("#doc-title:not(:empty)")
    _grade(page, "1", saved)
    assert len(saved) == 10


def test_twenty_documents_by_keyboard_survive_a_killed_server(
    browser, judge_index, judge_pipeline, topics_file, tmp_path
):
    from dotcat.judging import PoolConfig, build_pool, read_topics

    store_path = tmp_path / "judgments.sqlite"
    with JudgmentStore(store_path, judge_index, create=True) as store:
        build_pool(judge_pipeline, store, read_topics(topics_file), PoolConfig(pool_depth=8))
        assert sum(store.pool_sizes().values()) >= 20
    port = free_port()
    server = Server(judge_index, store_path, port)
    saved: dict[tuple[str, str], int] = {}
    try:
        page = browser.new_page(viewport={"width": 390, "height": 844})  # a phone
        _start(page, server.url)
        _first_ten(page, saved)
        server.kill()  # midway: SIGKILL, nothing flushed on the way out
        page.keyboard.press("3")
        page.wait_for_selector("#status:has-text('Not saved')")
        server = Server(judge_index, store_path, port)  # started again, same port
        page.reload()
        page.wait_for_selector("#doc-title:not(:empty)")
        while len(saved) < 20:
            if "Every document of this query is judged" in page.inner_text("#status"):
                page.keyboard.press("]")
                page.wait_for_selector("#doc-title:not(:empty)")
            _grade(page, str(len(saved) % 4), saved)
        assert page.inner_text("#overall").startswith("ann: 20 of")
    finally:
        server.stop()
    with JudgmentStore(store_path) as store:
        found = {(j.qid, j.doc_id): j.grade for j in store.current("ann")}
        times = [j.time for j in store.current("ann")]
    assert found == saved
    assert len(times) == 20 and times == sorted(times)
