"""A served index that stays current: writes over HTTP (key, writable, durable before the
answer), generations made elsewhere picked up, a watched folder synced."""

from __future__ import annotations

import logging
import time
import unicodedata

import httpx
import pytest
from tests.serve.conftest import live_server
from tests.timing import within

from dotcat.index.updates import add_documents
from dotcat.models import EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.tuning import build_and_tune

KEY = "key-for-tests"
H = {"X-API-Key": KEY}


@pytest.fixture
def folder_index(tmp_path, tiny_bert_dir):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, topic in enumerate(["cats and dogs", "light and plants", "insulin and glucose"]):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\n{topic}\n")
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_and_tune(docs, tmp_path / "idx", encoder, show_progress=False)
    return docs, tmp_path / "idx"


def _pipeline(index) -> SearchPipeline:
    return SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))


def _ids(url: str, query: str, **params) -> list[str]:
    answer = httpx.get(f"{url}/search", params={"q": query, "k": 10, **params}, headers=H)
    assert answer.status_code == 200, answer.text
    return [hit["doc_id"] for hit in answer.json()["hits"]]


def _eventually(check, seconds: float = 30.0):
    deadline = time.monotonic() + within(seconds)
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError("not within the time allowed")


def test_writes_need_the_key_and_a_writable_server(folder_index):
    _, index = folder_index
    body = {"title": "t", "text": "some text"}
    with live_server(_pipeline(index), api_key=KEY) as url:
        refused = httpx.put(f"{url}/documents/x", json=body, headers=H)
        assert refused.status_code == 403 and "--writable" in refused.json()["error"]
        assert httpx.put(f"{url}/documents/x", json=body).status_code == 401
        assert httpx.delete(f"{url}/documents/n0.md", headers=H).status_code == 403
        assert httpx.get(f"{url}/info", headers=H).json()["writable"] is False
    with live_server(_pipeline(index), api_key=KEY, writable=True) as url:
        assert httpx.put(f"{url}/documents/x", json=body).status_code == 401
        assert httpx.post(f"{url}/documents", json={"documents": []}, headers=H).status_code == 422
        # A document's body is capped as a search's is (--max-body-bytes), key or not.
        big = {"title": "t", "text": "word " * 20_000}
        for headers in (H, {}):
            answer = httpx.put(f"{url}/documents/x", json=big, headers=headers)
            assert answer.status_code == 413 and "body over 65536" in answer.json()["error"]


def test_a_document_is_found_by_its_id_in_either_unicode_form(tmp_path, tiny_bert_dir):
    """A file named on macOS (NFD) was a 404 for the id as typed or linked (NFC)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / unicodedata.normalize("NFD", "café.md")).write_text("# Café\n\ncoffee notes\n")
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_and_tune(docs, tmp_path / "idx", encoder, show_progress=False)
    with live_server(_pipeline(tmp_path / "idx")) as url:
        for form in ("NFC", "NFD"):
            answer = httpx.get(f"{url}/documents/{unicodedata.normalize(form, 'café.md')}")
            assert answer.status_code == 200 and answer.json()["title"] == "Café", answer.text


def test_a_write_is_searchable_when_answered_and_a_delete_is_gone(folder_index):
    _, index = folder_index
    with live_server(_pipeline(index), api_key=KEY, writable=True) as url:
        before = httpx.get(f"{url}/info", headers=H).json()["index"]
        body = {"title": "Zebra", "text": "quokka zebra savanna", "fields": {"tag": "wild"}}
        answer = httpx.put(f"{url}/documents/web/zebra", json=body, headers=H, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"generation": before["generation"] + 1, "added": 1,
                                 "replaced": 0, "deleted": 0, "documents": 4}  # fmt: skip
        assert _ids(url, "quokka zebra", first_stage="bm25") == ["web/zebra"]
        assert _ids(url, "zebra", filter='tag = "wild"') == ["web/zebra"]
        info = httpx.get(f"{url}/info", headers=H).json()["index"]
        assert info["generation"] == before["generation"] + 1 and info["made"] > before["made"]
        many = {"documents": [{"doc_id": "web/zebra", "text": "kangaroo now"},
                              {"doc_id": "web/koala", "text": "koala eucalyptus"}]}  # fmt: skip
        answer = httpx.post(f"{url}/documents", json=many, headers=H, timeout=120)
        assert (answer.json()["added"], answer.json()["replaced"]) == (1, 1), answer.text
        assert _ids(url, "quokka", first_stage="bm25") == []
        assert _ids(url, "kangaroo", first_stage="bm25") == ["web/zebra"]
        gone = httpx.delete(f"{url}/documents/web/koala", headers=H, timeout=120)
        assert gone.status_code == 200 and gone.json()["deleted"] == 1
        assert _ids(url, "koala eucalyptus", first_stage="bm25") == []
        assert httpx.delete(f"{url}/documents/web/koala", headers=H).status_code == 404
        own = {"text": "x", "fields": {"title": "clash"}}
        assert httpx.put(f"{url}/documents/y", json=own, headers=H).status_code == 422
        refusals = {"a%00b": "control character (U+0000", "%E2%80%8B": "other than white",
                    "%20": "other than white", "a%20b": "must hold no white space"}  # fmt: skip
        for bad, why in refusals.items():  # control, zero-width, blank, space
            answer = httpx.put(f"{url}/documents/{bad}", json={"text": "x"}, headers=H)
            assert answer.status_code == 422 and "doc_id" in answer.json()["error"], answer.text
            assert why in answer.json()["error"], answer.text
        unknown = {"documents": [{"doc_id": "a", "text": "x", "body": "y"}]}
        answer = httpx.post(f"{url}/documents", json=unknown, headers=H).json()["error"]
        assert answer == "documents[0].body: unknown field", answer  # (it listed /search's)
        twice = {"documents": [{"doc_id": "a", "text": "x"}, {"doc_id": "a", "text": "y"}]}
        answer = httpx.post(f"{url}/documents", json=twice, headers=H)
        assert answer.json()["error"].startswith("documents[1].doc_id: "), answer.text  # no <list>
        listed = {"text": "ibis", "fields": {"sizes": [3, 4.5, "xl"]}}  # as a JSON Lines list
        assert httpx.put(f"{url}/documents/ibis", json=listed, headers=H).status_code == 200
        assert _ids(url, "ibis", filter='sizes contains "4.5"', first_stage="bm25") == ["ibis"]


def test_a_generation_made_elsewhere_is_served_without_a_restart(folder_index):
    _, index = folder_index
    with live_server(_pipeline(index)) as url:
        first = httpx.get(f"{url}/info").json()["index"]["generation"]
        add_documents(index, [{"_id": "added", "text": "wombat burrow"}], device="cpu",
                      show_progress=False)  # fmt: skip
        _eventually(lambda: httpx.get(f"{url}/info").json()["index"]["generation"] > first)
        assert _ids(url, "wombat burrow", first_stage="bm25") == ["added"]


def test_a_watched_folder_is_synced_when_its_files_change(folder_index):
    docs, index = folder_index
    with live_server(_pipeline(index), watch=True) as url:
        assert httpx.get(f"{url}/info").json()["watch"] is True
        (docs / "fresh.md").write_text("platypus river")
        (docs / "n0.md").unlink()
        _eventually(lambda: _ids(url, "platypus river", first_stage="bm25") == ["fresh.md"])
        assert "n0.md" not in _ids(url, "cats and dogs", first_stage="bm25")


def test_a_write_that_finds_no_room_is_507_and_the_index_answers_as_before(folder_index):
    import resource
    import signal

    _, index = folder_index
    with live_server(_pipeline(index), api_key=KEY, writable=True) as url:
        before = _ids(url, "cats", first_stage="bm25")
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it: EFBIG
        resource.setrlimit(
            resource.RLIMIT_FSIZE, ((index / "docstore.sqlite").stat().st_size // 2, hard)
        )
        try:
            answer = httpx.put(f"{url}/documents/z", json={"text": "cats"}, headers=H, timeout=120)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, ignored)
        assert answer.status_code == 507, answer.text  # the server's, not the client's fault
        assert _ids(url, "cats", first_stage="bm25") == before


def test_an_index_inside_its_watched_folder_does_not_sync_itself_again_and_again(
    tmp_path, tiny_bert_dir, caplog
):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nkoala\n")
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_and_tune(docs, docs / "idx", encoder, show_progress=False)
    level = caplog.at_level(logging.INFO, logger="dotcat.serve.live")
    with level, live_server(_pipeline(docs / "idx"), watch=True) as url:
        _eventually(lambda: "synced" in caplog.text)  # the watch's first sync
        time.sleep(within(3.0))  # nothing changes: its own writes are no change
        assert _ids(url, "koala", first_stage="bm25") == ["a.md"]
    syncs = [r.message for r in caplog.records if r.message.startswith("synced")]
    assert len(syncs) <= 2, syncs
