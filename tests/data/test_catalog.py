"""Datasets by name, downloaded for real from a local HTTP server (127.0.0.1) serving archives
made here: a good one, a truncated one, one with the wrong checksum, a 404, a server that
drops the connection or is busy; unpacked atomically, found again in the cache."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from tests.data.archive_server import QRELS, ArchiveServer, Served, beir_files, make_zip, md5

from dotcat.data import available_splits, load_corpus, load_qrels, load_queries
from dotcat.data.catalog import (
    BEIR,
    CATALOG_ENV,
    RECORD_NAME,
    URL_ENV,
    cached_dir,
    collections_root,
    fetch,
    resolve_data_path,
)
from dotcat.data.download import download
from dotcat.errors import DotcatError

GOOD = make_zip(beir_files())
NO_WAIT = (0.0, 0.0, 0.0)


@pytest.fixture()
def server():
    httpd = ArchiveServer()
    yield httpd
    httpd.close()


@pytest.fixture()
def entries(server, tmp_path, monkeypatch):
    """``entries(name=(path, served, md5))``: serve the files, list them in a catalogue file
    named by DOTCAT_DATASETS_CATALOG, the server's URL as DOTCAT_DATASETS_URL; the catalogue
    and a cache of the test's own in ``tmp_path/env``."""
    (tmp_path / "env").mkdir()
    catalog_file = tmp_path / "env" / "catalog.json"
    known: dict = {}
    monkeypatch.setenv("DOTCAT_CACHE", str(tmp_path / "env" / "cache"))  # this test's own
    monkeypatch.setenv(URL_ENV, server.url)
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # a proxy of the machine must not take it
    monkeypatch.setenv(CATALOG_ENV, str(catalog_file))

    def add(**items) -> None:
        for name, (file, served, checksum) in items.items():
            server.files[f"/{file}"] = served
            known[name.replace("__", "/")] = {"file": file, "md5": checksum}
        catalog_file.write_text(json.dumps(known))

    return add


def _leftovers(folder: Path) -> list[str]:
    """Hidden temporary folders or files left beside a target."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_get_downloads_checks_the_md5_and_writes_beir_layout(entries, server, tmp_path):
    entries(beir__tiny=("tiny.zip", Served(GOOD), md5(GOOD)))
    out = fetch("beir/tiny", tmp_path / "out")
    files = sorted(p.name for p in out.iterdir())
    assert files == ["corpus.jsonl", RECORD_NAME, "qrels", "queries.jsonl"]
    assert available_splits(out) == ["dev", "test"]
    assert load_qrels(out, "test") == {q: {d: r} for q, d, r in QRELS["test"]}
    record = json.loads((out / RECORD_NAME).read_text())
    assert record["md5"] == record["md5_published"] == md5(GOOD) and record["size"] == len(GOOD)
    assert server.requests == [("/tiny.zip", None)]
    assert not list((collections_root() / ".downloads").iterdir())  # the zip is gone
    assert _leftovers(tmp_path) == []


def test_a_name_is_fetched_once_into_the_cache_and_read_anywhere(entries, server):
    entries(beir__tiny=("tiny.zip", Served(GOOD), md5(GOOD)))
    assert list(load_queries("beir/tiny", split="test")) == ["q1", "q2", "q3"]
    assert len(load_corpus("beir/tiny")) == 6
    assert load_qrels("beir/tiny", "dev") == {"q4": {"d3": 1}}
    assert resolve_data_path("beir/tiny") == cached_dir("beir/tiny")
    assert len(server.requests) == 1  # downloaded once, then found in the cache


def test_an_existing_path_wins_over_a_name(entries, server, tmp_path, monkeypatch):
    entries(beir__tiny=("tiny.zip", Served(GOOD), md5(GOOD)))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "beir" / "tiny").mkdir(parents=True)
    assert resolve_data_path("beir/tiny") == Path("beir/tiny")
    assert server.requests == []


def test_a_wrong_checksum_is_refused_and_nothing_kept(entries, server, tmp_path):
    other = make_zip(beir_files(), top="other")
    entries(beir__tiny=("tiny.zip", Served(other), md5(GOOD)))
    with pytest.raises(DotcatError, match=rf"md5 {md5(other)}, expected {md5(GOOD)}.*removed"):
        load_queries("beir/tiny")
    assert not cached_dir("beir/tiny").exists()
    assert not list((collections_root() / ".downloads").iterdir())
    assert sorted(p.name for p in collections_root().iterdir()) == [".downloads", ".locks"]


def test_a_truncated_archive_fails_its_checksum_or_its_reading(entries, tmp_path):
    truncated = GOOD[: len(GOOD) // 2]
    entries(
        beir__tiny=("tiny.zip", Served(truncated), md5(GOOD)),
        beir__unsigned=("unsigned.zip", Served(truncated), None),
    )
    with pytest.raises(DotcatError, match="md5 .* expected"):
        fetch("beir/tiny", tmp_path / "a")
    with pytest.raises(DotcatError, match="cannot use beir/unsigned: unsigned.zip.part: not a "
                       "readable zip archive"):  # fmt: skip
        fetch("beir/unsigned", tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env"]
    assert not (collections_root() / "checksums.json").exists()  # a bad file is not trusted


def test_a_404_fails_at_once(entries, server, tmp_path):
    entries(beir__tiny=("tiny.zip", Served(status=404), md5(GOOD)))
    with pytest.raises(DotcatError, match=r"cannot download beir/tiny: http://127.0.0.1:\d+/tiny"
                       r".zip: HTTP 404"):  # fmt: skip
        fetch("beir/tiny", tmp_path / "out")
    assert len(server.requests) == 1 and not (tmp_path / "out").exists()


def test_a_dropped_connection_resumes_with_a_range_request(entries, server, tmp_path):
    entries(beir__tiny=("tiny.zip", Served(GOOD, drops=1, drop_after=1000), md5(GOOD)))
    fetch("beir/tiny", tmp_path / "out", retry_waits=NO_WAIT)
    assert server.requests == [("/tiny.zip", None), ("/tiny.zip", "bytes=1000-")]
    assert load_qrels(tmp_path / "out", "test")


def test_a_server_without_ranges_or_a_busy_one_is_asked_again(entries, server, tmp_path):
    entries(
        beir__tiny=("tiny.zip", Served(GOOD, drops=1, drop_after=1000, ranges=False), md5(GOOD)),
        beir__busy=("busy.zip", Served(GOOD, busy=2), md5(GOOD)),
    )
    fetch("beir/tiny", tmp_path / "a", retry_waits=NO_WAIT)  # the whole file again, then good
    fetch("beir/busy", tmp_path / "b", retry_waits=NO_WAIT)
    assert [r for r in server.requests if r[0] == "/busy.zip"] == [("/busy.zip", None)] * 3
    assert (tmp_path / "a" / RECORD_NAME).is_file() and (tmp_path / "b" / RECORD_NAME).is_file()


def test_a_transfer_that_always_breaks_keeps_its_part_to_resume(entries, server, tmp_path):
    served = Served(GOOD, drops=10, drop_after=300)
    entries(beir__tiny=("tiny.zip", served, md5(GOOD)))
    with pytest.raises(DotcatError, match="broke off 3 times.*run the same command again"):
        fetch("beir/tiny", tmp_path / "out", retry_waits=(0.0, 0.0))
    assert not (tmp_path / "out").exists()
    part = collections_root() / ".downloads" / "tiny.zip.part"
    assert part.stat().st_size == 3 * 300  # each attempt resumed where the last one stopped
    served.drops = 0
    fetch("beir/tiny", tmp_path / "out")
    assert server.requests[-1] == ("/tiny.zip", "bytes=900-") and not part.exists()


def test_no_network_says_how_to_fetch_elsewhere(entries, server, monkeypatch, tmp_path):
    entries(beir__tiny=("tiny.zip", Served(GOOD), md5(GOOD)))
    port = server.httpd.server_address[1]
    server.close()  # nothing listens there any more: connection refused
    monkeypatch.setenv(URL_ENV, f"http://127.0.0.1:{port}")
    with pytest.raises(DotcatError) as error:
        load_queries("beir/tiny")
    message = str(error.value)
    assert "\n" not in message and "no network" in message
    assert (
        "dotcat datasets get beir/tiny DIR" in message and str(cached_dir("beir/tiny")) in message
    )


def test_without_a_published_checksum_the_first_download_is_recorded(entries, server, tmp_path):
    entries(beir__unsigned=("unsigned.zip", Served(GOOD), None))
    fetch("beir/unsigned", tmp_path / "a")
    recorded = json.loads((collections_root() / "checksums.json").read_text())
    sha256 = hashlib.sha256(GOOD).hexdigest()
    assert recorded == {f"{server.url}/unsigned.zip": {"size": len(GOOD), "sha256": sha256}}
    changed = make_zip(beir_files(), top="tinx")
    assert len(changed) == len(GOOD)
    server.files["/unsigned.zip"].data = changed
    with pytest.raises(DotcatError, match="sha256 .* differs from its first download's"):
        fetch("beir/unsigned", tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_unknown_names_and_zips_of_several_datasets(entries, tmp_path):
    entries(beir__multi=("multi.zip", Served(make_zip({
        **{f"a/{k}": v for k, v in beir_files().items()},
        **{f"b/{k}": v for k, v in beir_files().items()},
    })), None))  # fmt: skip
    with pytest.raises(DotcatError, match="did you mean beir/nfcorpus"):
        load_queries("beir/nfcorpos")
    catalogue = json.loads(Path(tmp_path / "env" / "catalog.json").read_text())
    catalogue["beir/multi"]["subsets"] = ["a", "b"]
    (tmp_path / "env" / "catalog.json").write_text(json.dumps(catalogue))
    with pytest.raises(DotcatError, match="beir/multi holds several datasets: name one, e.g. "
                       r"beir/multi/a \(a, b\)"):  # fmt: skip
        load_queries("beir/multi")
    assert resolve_data_path("beir/multi/b") == cached_dir("beir/multi") / "b"
    assert load_qrels("beir/multi/a", "dev") == {"q4": {"d3": 1}}
    fetch("beir/multi/b", tmp_path / "b")  # one subset, copied from the cache
    assert available_splits(tmp_path / "b") == ["dev", "test"]


def test_bad_archives_leave_nothing(entries, tmp_path):
    slip = make_zip({"../evil.txt": b"x", "corpus.jsonl": b"{}\n"}, top=None)
    flat = make_zip(beir_files(qrels=False))
    corrupt = bytearray(GOOD)
    corrupt[GOOD.index(b"Mitochondria produce")] ^= 0x20  # a stored member's byte: CRC fails
    entries(
        beir__slip=("slip.zip", Served(slip), None),
        beir__flat=("flat.zip", Served(flat), None),
        beir__corrupt=("corrupt.zip", Served(bytes(corrupt)), None),
    )
    for name, problem in (
        ("slip", "member '../evil.txt' points outside the folder"),
        ("flat", "not a BEIR dataset: no qrels/<split>.tsv inside"),
        ("corrupt", "member tiny/corpus.jsonl is corrupt"),
    ):
        with pytest.raises(DotcatError, match=problem):
            fetch(f"beir/{name}", tmp_path / name)
        assert not (tmp_path / name).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env"]
    assert not (tmp_path.parent / "evil.txt").exists()


def test_the_catalogue_lists_beir_with_published_md5s():
    assert len(BEIR) == 15 and all(len(e.md5) == 32 for e in BEIR.values())
    assert BEIR["beir/scifact"].md5 == "5f7d1de60b170fc8027bb7898e2efca1"
    assert BEIR["beir/nfcorpus"].url.endswith("/thakur/BEIR/datasets/nfcorpus.zip")
    assert len(BEIR["beir/cqadupstack"].subsets) == 12


def test_download_of_a_file_url_checks_its_md5(tmp_path):
    source = tmp_path / "a.zip"
    source.write_bytes(GOOD)
    got = download(source.as_uri(), tmp_path / "a.part", md5=md5(GOOD))
    assert got.size == len(GOOD) and got.md5 == md5(GOOD)
    assert zipfile.ZipFile(got.path).testzip() is None


def test_a_complete_part_file_is_not_downloaded_again(entries, server, tmp_path):
    entries(beir__tiny=("tiny.zip", Served(GOOD), md5(GOOD)))
    part = collections_root() / ".downloads" / "tiny.zip.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(GOOD)  # as a run stopped between the download and the unpacking leaves it
    fetch("beir/tiny", tmp_path / "out")
    assert server.requests == [("/tiny.zip", f"bytes={len(GOOD)}-")]  # answered 416, whole
    assert load_qrels(tmp_path / "out", "test")
