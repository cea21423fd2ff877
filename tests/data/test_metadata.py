"""Fields beyond id, title and text: typed, flattened, from records, front matter, files;
per-file rules (dotcat.toml, --fields); encodings; Markdown and reStructuredText as text."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from tests.data.documents import minimal_pdf

from dotcat.data import iter_corpus
from dotcat.data.encodings import decode
from dotcat.data.extract import Unreadable, extract
from dotcat.data.markup import front_matter, markdown_text, rst_text
from dotcat.data.metadata import cell_value, parse_date, record_fields
from dotcat.data.rules import Rules, parse_fields_option
from dotcat.data.sources import CorpusOptions, CorpusStats
from dotcat.errors import DataFormatError, DotcatError, SettingError
from dotcat.index.fields import field_rows


def test_record_fields_are_flattened_and_typed():
    obj = {
        "_id": "1",
        "text": "body",
        "title": "t",
        "n": 3,
        "x": 1.5,
        "ok": True,
        "none": None,
        "empty": " ",
        "meta": {"owner": "it", "tags": ["hr", 7], "deep": {"a": "b"}},
        "authors": [{"name": "Ada", "n": 1}, {"name": "Alan"}],
        "when": dt.date(2025, 1, 2),
    }
    fields = record_fields(obj, ("_id", "id", "title", "text", "contents"))
    assert fields == {
        "n": 3,
        "x": 1.5,
        "ok": "true",
        "meta.owner": "it",
        "meta.tags": ["hr", "7"],
        "meta.deep.a": "b",
        "authors.name": ["Ada", "Alan"],
        "authors.n": ["1"],
        "when": "2025-01-02",
    }


def test_csv_cells_become_numbers_only_when_written_as_numbers():
    assert cell_value("42") == 42 and cell_value("-1.5") == -1.5 and cell_value("1e3") == 1000.0
    assert cell_value("0042") == "0042" and cell_value("T-1") == "T-1"
    assert cell_value("nan") == "nan"


@pytest.mark.parametrize(
    ("text", "seconds", "whole"),
    [
        ("1970-01-02", 86_400.0, True),
        ("1970-01-01T01:00:00Z", 3600.0, False),
        ("1970-01-01 02:00+01:00", 3600.0, False),
        ("1970-01-01T00:00:01.5", 1.5, False),
    ],
)
def test_dates_parse_to_utc_seconds(text, seconds, whole):
    assert parse_date(text) == pytest.approx((seconds, whole))


@pytest.mark.parametrize("text", ["2025-02-30", "2025-1-1", "soon", "2025-01-01T25:00"])
def test_what_is_not_a_date(text):
    assert parse_date(text) is None


def test_front_matter_yaml_toml_and_rst_fields():
    yaml_doc = "---\ntitle: Plan\ntags: [hr, onboarding]\nupdated: 2025-03-01\n---\n# Head\n"
    matter, body = front_matter(yaml_doc, "markdown")
    assert matter == {"title": "Plan", "tags": ["hr", "onboarding"], "updated": "2025-03-01"}
    assert body == "# Head\n"
    # Values as written (YAML 1.2's core types), not YAML 1.1's octal, base 60 and "no" = false.
    found = extract(b"---\nticket: 0042\ntime: 12:30\nversion: 1.10\ncountry: no\nn: 7\nx: ~\n"
                    b"draft: true\nmeta: {w: 2.5}\n---\nA note.\n", "markdown", "x")  # fmt: skip
    assert found.fields == {"ticket": "0042", "time": "12:30", "version": 1.1, "country": "no",
                            "n": 7, "draft": "true", "meta.w": 2.5,
                            "encoding": "utf-8"}  # fmt: skip
    assert field_rows(0, found.fields)[2][2] == "1.10"  # stored as written


def test_a_notes_own_path_or_size_does_not_hide_where_its_file_is(tmp_path):
    (tmp_path / "blog").mkdir()
    (tmp_path / "blog" / "post.md").write_text(
        '---\npath: "/blog/first"\nsize: large\n---\nBody.\n'
    )
    (doc,) = iter_corpus(tmp_path)
    assert doc.fields["path"] == "blog/post.md" and doc.fields["folder"] == "blog"
    assert isinstance(doc.fields["size"], int)  # a number field for every file still
    assert (doc.fields["meta.path"], doc.fields["meta.size"]) == ("/blog/first", "large")
    matter, body = front_matter('+++\ntitle = "T"\nweight = 3\n+++\ntext\n', "markdown")
    assert matter == {"title": "T", "weight": 3} and body == "text\n"
    matter, body = front_matter("Title\n=====\n\n:date: 2025-01-02\n:tags: a, b\n\nBody.\n", "rst")
    assert matter == {"date": "2025-01-02", "tags": ["a", "b"]}
    assert "Body." in body and ":date:" not in body
    broken = "---\ntitle: [unclosed\n---\ntext\n"
    assert front_matter(broken, "markdown") == ({}, "text\n")  # no fields, and no prose


def test_markdown_breaks_strikes_and_comparisons_keep_their_words_apart():
    _, text = markdown_text("Use x<br>y, ~~old~~ new.\n\n| h |\n|---|\n| one<br/>two |\n")
    assert text == "Use x y, old new.\n\nh\none two"
    assert markdown_text("<div>\nif a < b and c > d then stop\n</div>\n")[1] == (
        "if a < b and c > d then stop"
    )


def test_markdown_and_rst_lose_their_markup_but_not_their_words():
    title, text = markdown_text(
        "# Onboarding\n\nWelcome **new** colleague, see [the wiki](http://x/y).\n\n"
        "- item *one*\n- item two\n\n```\n# not a heading\n```\n"
    )
    assert title == "Onboarding"
    assert text == (
        "Onboarding\n\nWelcome new colleague, see the wiki.\n\nitem one\nitem two\n\n"
        "# not a heading"
    )
    title, text = rst_text(
        "Notes\n=====\n\nSee :func:`os.path.join`, ``x = 1`` and `docs <http://x>`_ for "
        "__init__.\n\n.. note::\n\n   Mind **this**.\n"
    )
    assert title == "Notes"
    assert "See os.path.join, x = 1 and docs for __init__." in text
    assert "Mind this." in text and ".." not in text and "http" not in text


def test_a_readmes_html_blocks_give_their_words():
    title, text = markdown_text(
        '<p align="center">\n  <b>Fastwidget</b> renders sparkline charts &amp; tables.\n</p>\n\n'
        "<!-- a note to self -->\n\n<details><summary>More</summary>About walruses.</details>"
        "\n\n<div><script>track(1)</script><style>p {}</style></div>\n\n## Usage\n\nCall it.\n"
    )
    assert title == "Usage"
    assert text == (
        "Fastwidget renders sparkline charts & tables.\n\nMore About walruses.\n\nUsage\n\nCall it."
    )


def test_a_pdf_with_a_generic_producer_title_takes_its_first_line():
    found = extract(
        minimal_pdf(["Quarterly report", "Revenue grew."], "Enscript Output"), "pdf", "report"
    )
    assert found.title == "Quarterly report"
    assert found.fields["pages"] == 1
    kept = extract(minimal_pdf(["Body"], "Annual plan"), "pdf", "x")
    assert kept.title == "Annual plan"
    named = extract(minimal_pdf(["Body"], "Microsoft Word - plan.docx"), "pdf", "x")
    assert named.title == "Body"


def test_an_html_fragment_gives_its_text_and_no_library_errors(caplog):
    found = extract(b"<p>Fragment about <b>wolverines</b></p>\n", "html", "x")
    assert (found.title, found.text) == ("x", "Fragment about wolverines")  # was "no text"
    assert not [r for r in caplog.records if r.name.startswith("trafilatura")]


def test_a_pages_title_element_is_its_title_with_or_without_a_main_element():
    page = "<html><head><title>Kiwi field guide</title></head><body>{}</body></html>"
    body = "<h1>Birds</h1><p>Notes on flightless birds of the islands, seen at night.</p>"
    for wrapped in (body, f"<main>{body}</main>"):  # trafilatura's, then the main element's
        found = extract(page.format(wrapped).encode(), "html", "x")
        assert found.title == "Kiwi field guide" and "flightless birds" in found.text
    untitled = extract(f"<html><body>{body}</body></html>".encode(), "html", "x")
    assert untitled.title == "Birds"  # no <title>: trafilatura's, its one <h1>


def test_html_meta_becomes_fields():
    pytest.importorskip("trafilatura")
    page = (
        '<html lang="en"><head><title>T</title><meta name="author" content="Ada">'
        '<meta name="keywords" content="a, b"><meta property="article:published_time" '
        'content="2025-01-02T10:00:00Z"></head><body><main><p>Text here.</p></main></body></html>'
    )
    found = extract(page.encode(), "html", "page")
    assert found.fields == {
        "lang": "en",
        "author": "Ada",
        "keywords": ["a", "b"],
        "date": "2025-01-02T10:00:00Z",
        "encoding": "utf-8",  # as a text file's: what the page was read in
    }


def test_text_in_another_encoding_is_detected_or_given():
    latin = "Résumé: le café ouvre à neuf heures, près de la gare.".encode("latin-1")
    text, used, guess = decode(latin)
    assert "café" in text and used == "cp1252" and guess
    assert decode(latin, "cp1252") == (latin.decode("cp1252"), "cp1252", "")
    assert decode("é".encode("utf-16"))[0] == "é"  # a byte-order mark says it
    assert decode(b"plain", forced="latin-1") == ("plain", "iso8859-1", "")


def test_fields_option_parses_and_refuses_in_one_line():
    rule = parse_fields_option("data/faq.jsonl:id=key,title=question,text=answer")
    assert (rule.pattern, rule.id, rule.title, rule.text) == (
        "data/faq.jsonl",
        "key",
        "question",
        "answer",
    )
    for bad, words in [
        ("id=key", "GLOB:key=value"),
        ("faq.jsonl:idd=key", "unknown key 'idd'"),
        ("faq.jsonl:id=key,title", "not key=value"),
        ("faq.jsonl:encoding=klingon", "not an encoding"),
    ]:
        with pytest.raises(SettingError, match=words):
            parse_fields_option(bad)
    with pytest.raises(SettingError, match="--fields"):
        CorpusOptions(file_rules=("nothing",))


def _mixed(root):
    (root / "notes").mkdir(parents=True)
    (root / "tickets.csv").write_text(
        "ticket,subject,body,product,updated\nT-1,Refund,Charged twice.,billing,2025-02-03\n"
        "T-2,Login,Cannot log in.,accounts,2024-11-20\n",
        encoding="utf-8",
    )
    (root / "faq.jsonl").write_text(
        json.dumps({"key": "f1", "question": "Reset?", "answer": "Settings.", "tags": ["hr"]})
        + "\n",
        encoding="utf-8",
    )
    (root / "notes" / "cafe.txt").write_bytes("Le café, près de la gare.".encode("latin-1"))
    plan = "---\ntitle: Plan\ntags: [hr]\n---\n# Plan\n\nThe **plan**.\n"
    (root / "notes" / "plan.md").write_text(plan, encoding="utf-8")
    return root


def test_a_mixed_folder_reads_in_one_go_with_dotcat_toml(tmp_path, caplog):
    root = _mixed(tmp_path / "docs")
    rules = (
        '[files."faq.jsonl"]\nid = "key"\ntitle = "question"\ntext = "answer"\n\n'
        '[files."*.csv"]\nid = "ticket"\ntitle = "subject"\ntext = "body"\n\n'
        '[files."note/*.txt"]\nencoding = "latin-1"\n'  # a misspelt folder: said, not silent
    )
    (root / "dotcat.toml").write_text(rules, encoding="utf-8")
    docs = {d.id: d for d in iter_corpus(root, options=CorpusOptions(file_rules=("*.rst:id=x",)))}
    said = [r.getMessage() for r in caplog.records if "matches no file" in r.getMessage()]
    assert said == [
        f"--fields: the rule for '*.rst' matches no file in {root}",
        f"{root / 'dotcat.toml'}: the rule for 'note/*.txt' matches no file in {root}",
    ]
    assert sorted(docs) == [
        "faq.jsonl#f1",
        "notes/cafe.txt",
        "notes/plan.md",
        "tickets.csv#T-1",
        "tickets.csv#T-2",
    ]
    ticket = docs["tickets.csv#T-1"]
    assert (ticket.title, ticket.text) == ("Refund", "Charged twice.")
    assert ticket.fields["product"] == "billing" and ticket.fields["updated"] == "2025-02-03"
    assert ticket.fields["path"] == "tickets.csv" and ticket.fields["extension"] == "csv"
    assert docs["faq.jsonl#f1"].fields["tags"] == ["hr"]
    assert "key" not in docs["faq.jsonl#f1"].fields  # the id is no field
    cafe = docs["notes/cafe.txt"]
    assert cafe.text == "Le café, près de la gare." and cafe.fields["encoding"] != "utf-8"
    plan = docs["notes/plan.md"]
    assert (plan.title, plan.text) == ("Plan", "Plan\n\nThe plan.")
    assert plan.fields["tags"] == ["hr"] and plan.fields["folder"] == "notes"


def test_the_command_line_rules_come_before_the_folders(tmp_path):
    root = _mixed(tmp_path / "docs")
    (root / "dotcat.toml").write_text('[files."faq.jsonl"]\nid = "nope"\n', encoding="utf-8")
    options = CorpusOptions(
        file_rules=(
            "faq.jsonl:id=key,title=question,text=answer",
            "*.csv:id=ticket,title=subject,text=body",
        )
    )
    assert "faq.jsonl#f1" in {d.id for d in iter_corpus(root, options=options)}
    assert Rules.of([], root).for_file("faq.jsonl").id == "nope"


def test_a_bad_dotcat_toml_is_one_line_naming_it(tmp_path):
    root = _mixed(tmp_path / "docs")
    (root / "dotcat.toml").write_text('[files."faq.jsonl"]\nidd = "key"\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"dotcat\.toml.*unknown key 'idd'"):
        list(iter_corpus(root))
    (root / "dotcat.toml").write_text("files = 3\n[other]\n", encoding="utf-8")
    with pytest.raises(DotcatError, match="unknown table 'other'"):
        list(iter_corpus(root))


def test_a_latin1_csv_is_read_in_its_encoding(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "t.csv").write_bytes("id,text,city\n1,Un café,Besançon\n".encode("latin-1"))
    (doc,) = iter_corpus(root)
    assert doc.text == "Un café" and doc.fields["city"] == "Besançon"
    assert doc.fields["encoding"] != "utf-8"
    given = iter_corpus(root, options=CorpusOptions(encoding="latin-1"))
    assert next(given).fields["encoding"] == "iso8859-1"


def test_parquet_columns_keep_their_types(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "id": ["a"],
            "text": ["x"],
            "stars": [4],
            "price": [1.5],
            "when": [dt.datetime(2025, 1, 2, 3, 4, 5)],
            "tags": [["p", "q"]],
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    (tmp_path / "d.parquet").write_bytes(buffer.getvalue())
    (doc,) = iter_corpus(tmp_path / "d.parquet")
    assert doc.fields == {
        "stars": 4,
        "price": 1.5,
        "when": "2025-01-02T03:04:05Z",
        "tags": ["p", "q"],
    }


CREME = "Crème brûlée, a dessert of custard under caramel."


def _page(text: str, head: str = "", main: bool = True) -> str:
    body = f"<main><p>{text}</p></main>" if main else f"<div><p>{text}</p></div>"
    return f"<html><head>{head}<title>Dessert</title></head><body>{body}</body></html>"


@pytest.mark.parametrize("main", [True, False])  # read by lxml, or by trafilatura
def test_html_without_a_charset_is_read_as_a_text_file_is(main):
    pytest.importorskip("trafilatura")
    data = _page(CREME, main=main).encode("cp1252")
    found = extract(data, "html", "page")
    assert CREME in found.text and found.fields["encoding"] == "cp1252" and found.guess
    given = extract(data, "html", "page", encoding="cp1252")  # --encoding
    assert CREME in given.text and given.fields["encoding"] == "cp1252" and not given.guess
    forced = extract(data, "html", "page", forced="latin-1")  # a rule for the file
    assert CREME in forced.text and forced.fields["encoding"] == "iso8859-1"


def test_a_declared_charset_wins_unless_it_cannot_be_right():
    pytest.importorskip("trafilatura")
    polish = "Zażółć gęślą jaźń, powiedział Paweł."  # a guess reads it as iso8859-10
    data = _page(polish, '<meta charset="iso-8859-2">').encode("iso8859-2")
    found = extract(data, "html", "page")
    assert polish in found.text and found.fields["encoding"] == "iso8859-2" and not found.guess
    assert extract(data, "html", "page", forced="cp1252").fields["encoding"] == "cp1252"
    wrong = _page(CREME, '<meta charset="utf-8">').encode("cp1252")  # read as a guess
    found = extract(wrong, "html", "page")
    assert CREME in found.text and found.guess and found.fields["encoding"] == "cp1252"


def test_encoding_option_and_rule_apply_to_html_in_a_folder(tmp_path):
    pytest.importorskip("trafilatura")
    (tmp_path / "main.html").write_bytes(_page(CREME).encode("cp1252"))
    (tmp_path / "other.htm").write_bytes(_page(CREME, main=False).encode("cp1252"))
    for options in (
        CorpusOptions(encoding="cp1252"),
        CorpusOptions(file_rules=("*:encoding=cp1252",)),
    ):
        docs = list(iter_corpus(tmp_path, options=options))
        assert [CREME in d.text and d.fields["encoding"] == "cp1252" for d in docs] == [True, True]


@pytest.mark.parametrize("bom", ["utf-16", "utf-32"])
def test_a_file_with_a_utf16_or_utf32_bom_is_read_by_it(tmp_path, bom):
    (tmp_path / "note.txt").write_bytes("Penguin colonies à Noël.\n".encode(bom))
    (tmp_path / "guide.md").write_bytes("# Guide\n\nPenguins **dive**.\n".encode(bom))
    (tmp_path / "faq.jsonl").write_bytes('{"_id": "f1", "text": "Pingüino"}\n'.encode(bom))
    (tmp_path / "blob.txt").write_bytes(bytes(range(256)) * 8)  # binary: still refused
    stats = CorpusStats()
    docs = {d.id: d for d in iter_corpus(tmp_path, stats)}
    assert docs["note.txt"].text == "Penguin colonies à Noël.\n"
    assert (docs["guide.md"].title, docs["guide.md"].text) == ("Guide", "Guide\n\nPenguins dive.")
    assert docs["faq.jsonl#f1"].text == "Pingüino"
    assert {d.fields["encoding"] for d in docs.values()} == {bom}
    assert "blob.txt" not in docs and stats.unreadable_named == ["blob.txt (binary)"]
    given = CorpusOptions(encoding="utf-16")  # --encoding utf-16
    assert {d.id for d in iter_corpus(tmp_path, options=given)} == set(docs)
    with pytest.raises(Unreadable, match="binary"):
        extract(bytes(range(256)) * 8, "text", "blob", forced="cp1252")
