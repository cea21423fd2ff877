"""The search page in real headless Chromium (Debian's `chromium`, driven by Playwright).

Skipped where no chromium is installed, unless ``DOTCAT_BROWSER_TESTS=required`` (CI sets it
after installing chromium, so the page is always tested there).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest
from tests.serve.conftest import live_server

from dotcat.index import IndexConfig, build_index
from dotcat.models import EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-gpu",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOSTILE = "<img src=x onerror=\"document.title='pwned'\"> <b>bold?</b> insulin"


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("DOTCAT_BROWSER_TESTS") == "required":
            pytest.fail("DOTCAT_BROWSER_TESTS=required but no chromium is installed")
        pytest.skip("no chromium (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def page_pipeline(tmp_path_factory, tiny_bert_dir):
    """The tiny corpus plus a document whose text is HTML (it must show as text)."""
    from tests.conftest import TINY_DOCS

    root = tmp_path_factory.mktemp("page")
    corpus = root / "corpus.jsonl.gz"
    docs = [*TINY_DOCS, {"_id": "x1", "title": "<script>alert(1)</script>", "text": HOSTILE}]
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc) + "\n")
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(corpus, root / "index", encoder, IndexConfig(bm25=True), show_progress=False)
    return SearchPipeline(root / "index", PipelineConfig(device="cpu", precision="fp32"))


def test_type_a_query_and_read_the_results(browser, page_pipeline, tmp_path):
    expected = page_pipeline.search("how do cells make ATP", 10)
    with live_server(page_pipeline) as url:
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(url + "/")
        page.wait_for_selector("#index-info:has-text('documents')")
        page.fill("#q", "how do cells make ATP")
        page.keyboard.press("Enter")
        page.wait_for_selector(".hit")
        titles = page.locator(".hit .title").all_inner_texts()
        assert titles[0] == expected[0].title and len(titles) == len(expected)
        assert page.locator(".hit .rank").first.inner_text() == "1."
        status = page.inner_text("#status")
        assert f"{len(expected)} results in" in status and "ms on the server" in status
        marks = {m.lower() for m in page.locator(".hit mark").all_inner_texts()}
        assert {"cells", "atp"} & marks  # query terms highlighted
        assert "q=how+do+cells+make+ATP" in page.url  # a result page can be bookmarked
        page.screenshot(path=str(tmp_path / "page.png"))
        assert (tmp_path / "page.png").stat().st_size > 10_000


def test_keyboard_only(browser, page_pipeline):
    with live_server(page_pipeline) as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector("#index-info:has-text('documents')")
        page.locator("body").click()
        page.keyboard.press("/")  # focus the search box
        page.keyboard.type("insulin blood sugar")
        page.keyboard.press("Enter")
        page.wait_for_selector(".hit")
        page.locator("body").click(position={"x": 5, "y": 5})
        page.keyboard.press("j")  # first result
        assert page.evaluate("document.activeElement.dataset.docId") == page.locator(
            ".hit"
        ).first.get_attribute("data-doc-id")
        page.keyboard.press("j")
        page.keyboard.press("k")
        assert page.evaluate("document.activeElement.querySelector('.rank').textContent") == "1."


def test_document_text_is_never_markup(browser, page_pipeline):
    with live_server(page_pipeline) as url:
        page = browser.new_page()
        page.goto(url + "/?q=insulin%20bold")
        page.wait_for_selector(".hit[data-doc-id='x1']")
        hit = page.locator(".hit[data-doc-id='x1']")
        assert "<b>bold?</b>" in hit.locator(".snippet").inner_text()
        assert hit.locator(".title").inner_text() == "<script>alert(1)</script>"
        assert page.locator(".hit img, .hit b, .hit script").count() == 0
        assert page.title() == "dotcat search"  # the onerror never ran


def test_readable_on_a_phone(browser, page_pipeline):
    with live_server(page_pipeline) as url:
        page = browser.new_page(viewport={"width": 360, "height": 740})
        page.goto(url + "/?q=vaccines%20immune%20system")
        page.wait_for_selector(".hit")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0  # no sideways scrolling
        box = page.locator("#q").bounding_box()
        assert box["width"] > 150


def test_the_page_asks_for_an_api_key_when_the_server_wants_one(browser, page_pipeline):
    with live_server(page_pipeline, api_key="k3y") as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector("#key-row:not([hidden])")  # /info answered 401
        page.fill("#api-key", "k3y")
        page.fill("#q", "insulin")
        page.keyboard.press("Enter")
        page.wait_for_selector(".hit")
        assert page.locator(".hit").count() > 0
