"""The files people keep, from the command line: a mixed folder indexed in one command with a
dotcat.toml, --filter over its fields, the errors a filter can make, and what a hit prints."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tests.data.documents import minimal_pdf
from typer.testing import CliRunner

from dotcat.cli import app

runner = CliRunner()

TICKETS = (
    "ticket,subject,body,product,updated\n"
    "T-1,Refund please,I was charged twice and want a refund.,billing,2025-02-03\n"
    "T-2,Login broken,I cannot log in after the update.,accounts,2024-11-20\n"
    "T-3,Invoice copy,Please send a copy of my last invoice.,billing,2024-12-01\n"
)
FAQ = [
    {
        "key": "f1",
        "question": "How do I reset my password?",
        "answer": "Open Settings.",
        "updated": "2025-01-15",
        "tags": ["accounts"],
    },
    {
        "key": "f2",
        "question": "When is the office closed?",
        "answer": "On public holidays.",
        "updated": "2023-06-01",
        "tags": ["office", "hr"],
    },
]
RULES = """[files."faq.jsonl"]
id = "key"
title = "question"
text = "answer"

[files."tickets.csv"]
id = "ticket"
title = "subject"
text = "body"
"""
NOTE = "---\ntitle: Onboarding checklist\ntags: [hr, onboarding]\nupdated: 2025-03-01\n---\n"


def mixed_folder(root: Path, long_text: str = "") -> Path:
    """tickets.csv, faq.jsonl with its own fields, front-matter notes, a Latin-1 note, a PDF
    with a producer's title, a long text, and the dotcat.toml that says how to read them."""
    (root / "notes").mkdir(parents=True)
    (root / "projects" / "alpha").mkdir(parents=True)
    (root / "tickets.csv").write_text(TICKETS, encoding="utf-8")
    (root / "faq.jsonl").write_text("".join(json.dumps(r) + "\n" for r in FAQ), encoding="utf-8")
    (root / "dotcat.toml").write_text(RULES, encoding="utf-8")
    (root / "notes" / "onboarding.md").write_text(
        NOTE + "# Onboarding\n\nWelcome **new** colleague: read the *handbook* first.\n",
        encoding="utf-8",
    )
    (root / "projects" / "alpha" / "plan.md").write_text(
        "---\ntags: [roadmap]\nupdated: 2025-05-05\n---\nAlpha ships the **new** search.\n",
        encoding="utf-8",
    )
    (root / "notes" / "cafe.txt").write_bytes(
        "Le café près de la gare ouvre à neuf heures.".encode("latin-1")
    )
    (root / "report.pdf").write_bytes(
        minimal_pdf(["Quarterly report", "Revenue grew in the north."], "Enscript Output")
    )
    if long_text:
        (root / "history.txt").write_text(long_text, encoding="utf-8")
    return root


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def index(tmp_path_factory, tiny_bert_dir) -> Path:
    root = mixed_folder(tmp_path_factory.mktemp("mixed") / "docs")
    out = root.parent / "index"
    result = invoke(
        "-q", "index", root, out, "--model", tiny_bert_dir, "--device", "cpu", "--precision", "fp32"
    )
    assert result.exit_code == 0, result.output
    return out


EVERY = {
    "faq.jsonl#f1",
    "faq.jsonl#f2",
    "notes/cafe.txt",
    "notes/onboarding.md",
    "projects/alpha/plan.md",
    "report.pdf",
    "tickets.csv#T-1",
    "tickets.csv#T-2",
    "tickets.csv#T-3",
}


@pytest.mark.parametrize(
    ("filter", "expected"),
    [
        ('product = "billing"', {"tickets.csv#T-1", "tickets.csv#T-3"}),
        ('tags contains "hr"', {"faq.jsonl#f2", "notes/onboarding.md"}),
        ('path startswith "projects/"', {"projects/alpha/plan.md"}),
        (
            "updated >= 2025-01-01",
            {"tickets.csv#T-1", "faq.jsonl#f1", "notes/onboarding.md", "projects/alpha/plan.md"},
        ),
        ('product = "billing" and updated >= 2025-01-01', {"tickets.csv#T-1"}),
        (
            'extension in ["pdf", "txt"] or folder = "notes"',
            {"report.pdf", "notes/cafe.txt", "notes/onboarding.md"},
        ),
        ('not tags contains "hr"', EVERY - {"faq.jsonl#f2", "notes/onboarding.md"}),
    ],
)
@pytest.mark.parametrize("stage", ["dense", "bm25", "hybrid"])
def test_a_filter_returns_exactly_the_admitted_documents(index, filter, expected, stage):
    result = invoke(
        "search",
        index,
        "refund invoice password office handbook search",
        "-k",
        "20",
        "--json",
        "--filter",
        filter,
        "--first-stage",
        stage,
        "--device",
        "cpu",
    )
    assert result.exit_code == 0, result.output
    found = {h["doc_id"] for h in json.loads(result.stdout)}
    if stage == "bm25":  # BM25 returns only documents sharing a word with the query
        assert found <= expected and found
    else:
        assert found == expected


def test_the_mixed_folder_is_read_as_its_files_say(index):
    result = invoke(
        "search", index, "quarterly report revenue", "-k", "9", "--json", "--device", "cpu"
    )
    hits = {h["doc_id"]: h for h in json.loads(result.stdout)}
    assert set(hits) == EVERY  # one command, every file, ids of the documented PATH#ID shape
    assert hits["report.pdf"]["title"] == "Quarterly report"  # not "Enscript Output"
    note = hits["notes/onboarding.md"]
    assert note["title"] == "Onboarding checklist" and note["fields"]["tags"] == [
        "hr",
        "onboarding",
    ]
    assert "**" not in note["snippet"] and "---" not in note["snippet"]
    cafe = hits["notes/cafe.txt"]
    assert "café près" in cafe["snippet"] and cafe["fields"]["encoding"] == "cp1252"
    ticket = hits["tickets.csv#T-1"]["fields"]
    assert ticket["product"] == "billing" and ticket["updated"] == "2025-02-03"
    assert ticket["path"] == "tickets.csv" and isinstance(ticket["size"], int)


@pytest.mark.parametrize(
    ("filter", "column", "token"),
    [
        ('prodcut = "billing"', 1, "'prodcut'"),
        ('updated >= "soon"', 12, "'\"soon\"'"),
        ('product = "billing" and (tags', 30, "the end"),
        ("product = billing", 11, "'billing'"),
    ],
)
def test_a_bad_filter_is_one_line_pointing_at_the_token(index, filter, column, token):
    result = runner.invoke(app, ["search", str(index), "refund", "--filter", filter])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith(f"dotcat: error: --filter, column {column} at {token}: ")


def test_json_gives_a_snippet_with_highlights_and_text_only_on_request(index):
    result = invoke(
        "search", index, "refund", "-k", "1", "--json", "--device", "cpu", "--first-stage", "bm25"
    )
    (hit,) = json.loads(result.stdout)
    assert hit["doc_id"] == "tickets.csv#T-1" and "text" not in hit
    assert [hit["snippet"][a:b] for a, b in hit["highlights"]] == ["refund"]
    result = invoke(
        "search",
        index,
        "refund",
        "-k",
        "1",
        "--json",
        "--full-text",
        "--first-stage",
        "bm25",
        "--device",
        "cpu",
    )
    assert json.loads(result.stdout)[0]["text"] == "I was charged twice and want a refund."
    table = invoke("search", index, "refund", "-k", "1", "--first-stage", "bm25", "--device", "cpu")
    assert "I was charged twice and want a refund." in table.stdout


def test_queries_without_output_write_the_run_to_standard_output(index, tmp_path):
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\trefund\nq2\toffice holidays\n", encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "-q",
            "search",
            str(index),
            "--queries",
            str(queries),
            "-k",
            "2",
            "--filter",
            'product = "billing"',
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    assert lines and all(len(cols) == 6 and cols[1] == "Q0" for cols in lines)
    assert {cols[2] for cols in lines} <= {"tickets.csv#T-1", "tickets.csv#T-3"}


def test_fields_on_the_command_line_read_a_folder_without_dotcat_toml(tmp_path, tiny_bert_dir):
    root = mixed_folder(tmp_path / "docs")
    (root / "dotcat.toml").unlink()
    out = tmp_path / "index"
    refused = runner.invoke(
        app, ["-q", "index", str(root), str(out), "--model", str(tiny_bert_dir)]
    )
    assert refused.exit_code == 2 and "faq.jsonl" in refused.output  # ids named 'key' there
    result = invoke(
        "-q",
        "index",
        root,
        out,
        "--model",
        tiny_bert_dir,
        "--fields",
        "faq.jsonl:id=key,title=question,text=answer",
        "--fields",
        "tickets.csv:id=ticket,title=subject,text=body",
    )
    assert result.exit_code == 0, result.output
    found = invoke("search", out, "password", "-k", "9", "--json", "--filter", 'path = "faq.jsonl"')
    assert {h["doc_id"] for h in json.loads(found.stdout)} == {"faq.jsonl#f1", "faq.jsonl#f2"}


def test_eval_names_a_small_index_as_the_cause_of_a_short_run(tmp_path, caplog):
    run = tmp_path / "run.trec"
    run.write_text(
        "".join(f"q{q} Q0 d{d} {d + 1} {1 - d / 10} x\n" for q in range(3) for d in range(9))
    )
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q0 0 d1 1\nq1 0 d2 1\nq2 0 d3 1\n")
    with caplog.at_level(logging.WARNING, logger="dotcat"):
        result = invoke("eval", run, qrels)
    assert result.exit_code == 0, result.output
    said = caplog.text + result.output
    assert "every query ranks the same 9 documents" in said and "holds only 9" in said
    assert "search -k" not in said


def test_a_csv_number_is_kept_as_written_in_a_field_that_holds_words(tmp_path, tiny_bert_dir):
    rows = "id,text,version,price\na,notes,1.10,9.90\nb,notes,1.1,12.5\nc,notes,2.0-beta,3\n"
    (tmp_path / "v.csv").write_text(rows)
    out = tmp_path / "index"
    assert invoke("-q", "index", tmp_path / "v.csv", out, "--model", tiny_bert_dir).exit_code == 0
    for where, ids in (
        ('version = "1.10"', ["a"]),
        ('version = "1.1"', ["b"]),
        ("price > 9", ["a", "b"]),
    ):
        found = invoke("search", out, "notes", "--json", "--first-stage", "bm25", "--filter", where)
        hits = json.loads(found.stdout)
        assert sorted(h["doc_id"] for h in hits) == ids, (where, found.output)
    shown = {h["doc_id"]: h["fields"]["version"] for h in hits}
    assert shown == {"a": "1.10", "b": "1.1"}  # a text field's value, as written
