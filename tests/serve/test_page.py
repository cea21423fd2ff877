"""The search page in real headless Chromium (Debian's `chromium`, driven by Playwright).

Skipped where no chromium is installed, unless ``DOTCAT_BROWSER_TESTS=required`` (CI sets it
after installing chromium, so the page is always tested there).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from urllib.parse import urlparse

import pytest
from tests.serve.conftest import LONG_DOC, live_server
from tests.timing import within

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
    hostile = {"_id": "x1", "title": "<script>alert(1)</script>", "text": HOSTILE}
    emoji = {"_id": "emoji", "title": "Emoji", "text": "Pizza 🍕 cats 🐱 👨‍👩‍👧 a zymogen here"}
    docs = [*TINY_DOCS, hostile, LONG_DOC, emoji]
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


def test_a_server_that_gives_fewer_than_ten_results_answers_the_page(browser, page_pipeline):
    """The page asked for its 10 whatever the server's --max-k: a 422 on every search."""
    with live_server(page_pipeline, max_k=3) as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector("#index-info:has-text('documents')")
        page.fill("#q", "insulin")
        page.keyboard.press("Enter")
        page.wait_for_selector(".hit")
        assert page.locator(".hit").count() == 3 and page.input_value("#k") == "3"


def test_keyboard_only(browser, page_pipeline):
    with live_server(page_pipeline) as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector("#index-info:has-text('documents')")
        page.locator("footer kbd").first.click()  # away from any field (mid-page: the filter)
        page.keyboard.press("/")  # focus the search box
        page.keyboard.type("insulin blood sugar")
        page.keyboard.press("Enter")
        page.wait_for_selector(".hit")
        page.keyboard.press("j")  # first result: the search left the box (no click needed)
        assert page.evaluate("document.activeElement.dataset.docId") == page.locator(
            ".hit"
        ).first.get_attribute("data-doc-id")
        page.keyboard.press("j")
        page.keyboard.press("k")
        assert page.evaluate("document.activeElement.querySelector('.rank').textContent") == "1."
        assert page.input_value("#q") == "insulin blood sugar"  # no j or k typed into it


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
        assert page.locator("#api-key").is_visible()
        assert "missing or wrong API key" in page.inner_text("#index-info")
        page.fill("#api-key", "k3y")
        page.fill("#q", "insulin")
        page.keyboard.press("Enter")
        page.wait_for_selector(".hit")
        assert page.locator(".hit").count() > 0
        # the header follows the key that works: the index, not the refusal
        page.wait_for_selector("#index-info:has-text('documents')")
        assert "API key" not in page.inner_text("#index-info")
        assert page.locator("#first-stage option[value='bm25']").count() == 1


def test_no_key_field_where_no_key_is_needed(browser, page_pipeline):
    with live_server(page_pipeline) as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector("#index-info:has-text('documents')")
        page.click("#options summary")
        assert page.locator("#k").is_visible()
        assert not page.locator("#api-key").is_visible()  # hidden wins over .option-row's flex


def test_the_address_keeps_every_option_and_brings_it_back(browser, page_pipeline, tiny_cat_dir):
    config = PipelineConfig(device="cpu", precision="fp32", rerank=str(tiny_cat_dir), depth=4)
    reranking = SearchPipeline(page_pipeline.index_dir, config)
    with live_server(reranking) as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector("#index-info:has-text('re-ranking')")
        page.click("#options summary")
        assert page.input_value("#depth") == "4" and page.is_checked("#rerank")
        page.fill("#k", "3")
        page.select_option("#first-stage", "bm25")
        page.fill("#depth", "5")
        page.fill("#q", "insulin glucose")
        page.keyboard.press("Enter")
        page.wait_for_selector("#status:has-text('results in')")
        for option in ("q=insulin+glucose", "k=3", "first_stage=bm25", "rerank=true", "depth=5"):
            assert option in page.url
        assert "bm25 + BERT_CAT" in page.inner_text("#status")
        expected = reranking.search("insulin glucose", 3, first_stage="bm25", depth=5)
        assert page.locator(".hit").evaluate_all("hs => hs.map(h => h.dataset.docId)") == [
            h.doc_id for h in expected
        ]

        bookmark = page.url.replace("rerank=true", "rerank=false")
        again = browser.new_page()
        again.goto(bookmark)
        again.wait_for_selector("#status:has-text('results in')")
        assert again.input_value("#k") == "3" and again.input_value("#first-stage") == "bm25"
        assert not again.is_checked("#rerank") and again.input_value("#depth") == "5"
        plain = reranking.search("insulin glucose", 3, first_stage="bm25", rerank=False)
        assert again.locator(".hit").evaluate_all("hs => hs.map(h => h.dataset.docId)") == [
            h.doc_id for h in plain
        ]
        assert "BERT_CAT" not in again.inner_text("#status")
        assert "rerank=false" in again.url and "depth" not in again.url


def test_a_hit_shows_a_snippet_and_its_whole_text_on_enter(browser, page_pipeline):
    whole = page_pipeline.document("long").text
    with live_server(page_pipeline) as url:
        page = browser.new_page()
        page.goto(url + "/?q=pyruvate%20dehydrogenase&first_stage=bm25")
        page.wait_for_selector(".hit[data-doc-id='long']")
        hit = page.locator(".hit[data-doc-id='long']")
        short = hit.locator(".snippet").inner_text()
        assert "Pyruvate dehydrogenase" in short and len(short) < 400
        assert {m.lower() for m in hit.locator("mark").all_inner_texts()} == {
            "pyruvate",
            "dehydrogenase",
        }
        hit.focus()
        page.keyboard.press("Enter")
        snippet = hit.locator(".snippet")
        _wait_until(lambda: len(snippet.inner_text()) > 5000)
        assert snippet.inner_text().strip() == whole.strip()
        page.keyboard.press("Enter")  # back to the snippet
        _wait_until(lambda: snippet.inner_text() == short)


def test_marks_fall_on_the_words_after_characters_beyond_utf16s_first_plane(browser, page_pipeline):
    with live_server(page_pipeline) as url:
        page = browser.new_page()
        page.goto(url + "/?q=zymogen&first_stage=bm25")
        page.wait_for_selector(".hit[data-doc-id='emoji']")
        marks = page.locator(".hit[data-doc-id='emoji'] mark").all_inner_texts()
        assert marks == ["zymogen"]  # (server offsets count code points; JS strings UTF-16)


def _wait_until(condition, seconds: float = 10) -> None:
    # (polled from here: a string predicate in the page is an eval, which its policy forbids)
    deadline = time.monotonic() + within(seconds)
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _offline(page) -> list[str]:
    """Abort every request that leaves this machine; the list of those tried."""
    tried: list[str] = []

    def route(request_route):
        host = urlparse(request_route.request.url).hostname
        if host == "127.0.0.1":
            request_route.continue_()
        else:
            tried.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    return tried


def test_the_api_docs_render_with_no_network(browser, page_pipeline):
    with live_server(page_pipeline) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        tried = _offline(page)
        page.goto(url + "/docs")
        page.wait_for_selector(".swagger-ui .opblock-summary", timeout=30_000)
        summaries = page.locator(".opblock-summary-description").all_inner_texts()
        assert "Search with one query in the URL" in summaries and len(summaries) == 8
        assert {"Write one document", "Delete one document"} <= set(summaries)  # 403 here
        assert "dotcat" in page.locator(".swagger-ui .info .title").inner_text()
        page.locator(".opblock-summary").first.click()  # GET /search, opened
        page.wait_for_selector(".parameters-container .parameter__name")
        described = page.locator(".parameters-container").inner_text()
        assert "How many results, 1 to 1000" in described and "full_text" in described
        # eval/benchmarks/results/serve_docs_offline.png
        shot = os.environ.get("DOTCAT_DOCS_SCREENSHOT")
        if shot:
            page.screenshot(path=shot, full_page=False)

        page.goto(url + "/redoc")
        page.wait_for_selector("h2:has-text('Search with one query in the URL')", timeout=30_000)
        assert page.locator("h1:has-text('dotcat')").count() == 1
        assert tried == []  # nothing from elsewhere was even asked for


def test_a_filter_and_a_facet_narrow_the_results(browser, tmp_path_factory, tiny_bert_dir):
    """Each hit shows its fields; the facets count the query's results; a click on a value
    adds it to the filter box and searches again within it; a bad filter says where."""
    from tests.serve.conftest import _build

    docs = [{"_id": f"t{i}", "title": f"Ticket {i}", "text": f"Printer jam number {i}.",
             "product": "billing" if i < 3 else "printing"} for i in range(8)]  # fmt: skip
    index = _build(tmp_path_factory.mktemp("page_fields"), docs, tiny_bert_dir)
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))
    with live_server(pipeline) as url:
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(url + "/?q=printer+jam")
        page.wait_for_selector(".hit")
        assert page.locator(".hit").count() == 8
        assert "product: billing" in page.locator(".hit .fields").first.inner_text() or (
            "product: printing" in page.locator(".hit .fields").first.inner_text()
        )
        billing = page.locator(".facet-value", has_text="billing")
        assert billing.inner_text().replace("\n", "") == "billing(3)"
        billing.click()
        page.wait_for_selector("#status:has-text('3 results in')")  # (the page's CSP: no eval)
        assert page.locator(".hit").count() == 3
        assert page.input_value("#filter") == 'product = "billing"'
        assert "filter=product" in page.url  # the filter is kept in the page's address
        page.fill("#filter", 'product = "billing" and (')
        page.keyboard.press("Enter")
        page.wait_for_selector("#status.error")
        assert "column" in page.inner_text("#status") and page.locator(".hit").count() == 0
