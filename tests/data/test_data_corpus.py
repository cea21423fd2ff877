"""iter_corpus / find_corpus_file: every format, empty documents, every bad input."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging

import pytest

from dotcat.data import CorpusStats, Document, find_corpus_file, iter_corpus
from dotcat.errors import DataFormatError


def jsonl(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


# ---------------------------------------------------------------- formats


def test_beir_dir_gzipped_corpus(tiny_beir_dir):
    docs = list(iter_corpus(tiny_beir_dir))
    assert [d.id for d in docs] == ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert docs[0] == Document("d1", "Cats", "Cats are small domesticated carnivorous mammals.")
    assert find_corpus_file(tiny_beir_dir).name == "corpus.jsonl.gz"


def test_beir_dir_plain_corpus(tmp_path, write):
    write("beir/corpus.jsonl", jsonl({"_id": "a", "title": "T", "text": "x"}))
    assert find_corpus_file(tmp_path / "beir") == tmp_path / "beir" / "corpus.jsonl"
    assert list(iter_corpus(tmp_path / "beir")) == [Document("a", "T", "x")]


def test_jsonl_field_variants(write, gz):
    path = write(
        f"c.jsonl{gz}",
        jsonl(
            {"_id": "a", "title": "A", "text": "alpha"},
            {"id": "b", "contents": "beta"},  # Pyserini style, no title
            {"_id": 7, "title": None, "text": "seven"},  # integer id, null title
            {"_id": "c", "id": "c", "text": "same id twice is fine"},
        ),
    )
    assert list(iter_corpus(path)) == [
        Document("a", "A", "alpha"),
        Document("b", "", "beta"),
        Document("7", "", "seven"),
        Document("c", "", "same id twice is fine"),
    ]


@pytest.mark.parametrize("name", ["c.tsv", "c.tsv.gz"])
def test_tsv_two_and_three_columns(write, name):
    two = write("two_" + name, "a\talpha text\nb\tbeta text\n")
    three = write("three_" + name, "id\ttitle\ttext\na\tA\talpha\n\nb\t\tbeta\n")  # header
    assert list(iter_corpus(two)) == [
        Document("a", "", "alpha text"),
        Document("b", "", "beta text"),
    ]
    assert list(iter_corpus(three)) == [Document("a", "A", "alpha"), Document("b", "", "beta")]


def test_unknown_suffix_is_sniffed(write):
    assert list(iter_corpus(write("corpus.data", jsonl({"_id": "a", "text": "x"})))) == [
        Document("a", "", "x")
    ]
    assert list(iter_corpus(write("corpus.other", "a\tx\n"))) == [Document("a", "", "x")]


def test_blank_lines_bom_and_crlf(write):
    content = "\ufeff" + json.dumps({"_id": "a", "text": "x"}) + "\r\n\r\n   \n"
    content += json.dumps({"_id": "b", "text": "y"}) + "\r\n"
    stats = CorpusStats()
    assert [d.id for d in iter_corpus(write("c.jsonl", content), stats=stats)] == ["a", "b"]
    assert stats.records == 2 and stats.documents == 2


def test_unicode_text_survives(write):
    path = write("c.jsonl.gz", jsonl({"_id": "é", "text": "naïve café – 東京 \u2028 line"}))
    assert list(iter_corpus(path))[0].text == "naïve café – 東京 \u2028 line"


# ---------------------------------------------------------------- empty documents


def test_empty_documents_title_only_and_skipped(write, caplog, gz):
    path = write(
        f"c.jsonl{gz}",
        jsonl(
            {"_id": "a", "title": "A", "text": "alpha"},
            {"_id": "b", "title": "Only a title", "text": ""},
            {"_id": "c", "title": "", "text": "   "},
            {"_id": "d", "text": ""},
            {"_id": "e", "title": "E", "text": "  "},
        ),
    )
    stats = CorpusStats()
    with caplog.at_level(logging.WARNING, logger="dotcat.data"):
        docs = list(iter_corpus(path, stats=stats))
    assert [d.id for d in docs] == ["a", "b", "e"]
    assert docs[1] == Document("b", "Only a title", "")
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()  # the file's bytes, gzipped or not
    assert stats == CorpusStats(
        path=str(path),
        kind="file",
        records=5,
        documents=3,
        title_only=2,
        skipped_empty=2,
        sha256=sha256,
    )
    text = caplog.text
    assert "2 document(s) have no text and are indexed on their title only" in text
    assert "skipped 2 record(s) with neither title nor text (first at line 3)" in text


def test_stats_are_reset_on_reuse(write):
    path = write("c.tsv", "a\tx\n")
    stats = CorpusStats(records=99, documents=99)
    list(iter_corpus(path, stats=stats))
    assert (stats.records, stats.documents) == (1, 1)


# ---------------------------------------------------------------- bad input


def test_malformed_json(write, assert_error, gz):
    path = write(f"c.jsonl{gz}", jsonl({"_id": "a", "text": "x"}, '{"_id": "b", "text": "y"'))
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 2, "malformed JSON", "Expecting ',' delimiter")


@pytest.mark.parametrize("name", ["c.jsonl", "c.json"])
def test_a_cut_emoji_escape_is_named_not_a_traceback(write, assert_error, name):
    whole, cut = '{"_id": "a", "text": "ok \\ud83d\\ude00"}', '{"_id": "b", "text": "cut \\uD83D"}'
    path = write(name, f"{whole}\n{cut}\n" if name.endswith("l") else f"[{whole},\n{cut}]")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 2, "a \\u escape of half a character (U+D83D)")


@pytest.mark.parametrize(("line", "found"), [('["a", "b"]', "array"), ('"text"', "string")])
def test_not_an_object(write, assert_error, line, found):
    path = write("c.jsonl", jsonl({"_id": "a", "text": "x"}, line))
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 2, f"expected a JSON object, found {found}")


def test_missing_id(write, assert_error, gz):
    path = write(f"c.jsonl{gz}", jsonl({"_id": "a", "text": "x"}, "", {"title": "t", "text": "y"}))
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 3, "missing id", field="_id")


@pytest.mark.parametrize(
    ("record", "problem", "field"),
    [
        ({"_id": None, "text": "x"}, "id must be a string or an integer, found null", "_id"),
        ({"id": "", "text": "x"}, "empty id", "id"),
        ({"_id": "a b", "text": "x"}, "contains whitespace", "_id"),
        ({"_id": "a", "id": "b", "text": "x"}, "disagree", "_id"),
        ({"_id": "a", "title": "t"}, "missing field (expected 'text' or 'contents')", "text"),
        ({"_id": "a", "text": ["x"]}, "expected a string, found array", "text"),
        ({"_id": "a", "text": "x", "contents": "y"}, "both present and differ", "text"),
    ],
)
def test_bad_fields(write, assert_error, record, problem, field):
    path = write("c.jsonl", jsonl(record))
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 1, problem, field=field)


def test_duplicate_id_names_first_few(write, assert_error, gz):
    records = [{"_id": f"d{i}", "text": "x"} for i in range(10)]
    records += [{"_id": f"d{i}", "text": "again"} for i in (3, 1, 4, 1, 5, 9, 2, 6)]
    path = write(f"c.jsonl{gz}", jsonl(*records))
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(
        e,
        path,
        11,
        "duplicate id 'd3' (first at line 4)",
        "7 ids occur more than once: 'd3', 'd1', 'd4', 'd5', 'd9' and 2 more",
        field="_id",
    )


def test_single_duplicate_tsv(write, assert_error):
    path = write("c.tsv", "a\tx\nb\ty\na\tz\n")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 3, "duplicate id 'a' (first at line 1)", field="id")
    assert "occur more than once" not in str(e.value)


def test_invalid_utf8(write, assert_error, gz):
    first = jsonl({"_id": "a", "text": "x"}).encode()
    bad = b'{"_id": "b", "text": "caf\xe9"}\n'
    path = write(f"c.jsonl{gz}", first + bad)
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    at = bad.index(b"\xe9")  # 0-based offsets, in the line and in the (decompressed) file
    assert_error(
        e,
        path,
        2,
        f"invalid UTF-8: byte 0xe9 at offset {at} in the line",
        f"(offset {len(first) + at} in the",
        "invalid continuation byte",
    )


def test_tsv_wrong_column_count(write, assert_error, gz):
    path = write(f"c.tsv{gz}", "a\tA\talpha\nb\tbeta\n")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 2, "expected 3 tab-separated columns (id, title, text) as on line 1")
    path = write("four.tsv", "a\tb\tc\td\n")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 1, "expected 2 tab-separated columns (id, text) or 3", "found 4")


def test_corrupt_and_truncated_gzip(write, tmp_path, assert_error):
    path = write("bad.jsonl.gz", b"")
    path.write_bytes(b"this is not gzip data\n")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, None, "cannot read gzip data", "Not a gzipped file")

    whole = gzip.compress(jsonl(*({"_id": str(i), "text": "x" * 50} for i in range(200))).encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataFormatError, match="cannot read gzip data"):
        list(iter_corpus(cut))


def test_missing_paths(tmp_path, assert_error, write):
    with pytest.raises(DataFormatError) as e:
        find_corpus_file(tmp_path / "nope.jsonl")
    assert_error(e, tmp_path / "nope.jsonl", None, "no such file or directory")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(DataFormatError) as e:
        find_corpus_file(tmp_path / "empty_dir")
    assert_error(e, tmp_path / "empty_dir", None, "corpus.jsonl or corpus.jsonl.gz")
    write("both/corpus.jsonl", "")
    write("both/corpus.jsonl.gz", "")
    with pytest.raises(DataFormatError) as e:
        find_corpus_file(tmp_path / "both")
    assert_error(e, tmp_path / "both", None, "both corpus.jsonl and corpus.jsonl.gz exist")
