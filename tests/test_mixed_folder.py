"""Issue 51's acceptance, with the real default model: a mixed folder (tickets.csv, faq.jsonl with
its own fields, front-matter notes, a Latin-1 note, a PDF, a long text) indexed in ONE `dotcat
index` command with a dotcat.toml; filters over product, tags, path and updated return exactly
the admitted documents; the long text's last section is found by dense search."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from tests.test_cli_filters import mixed_folder

_DOTCAT = "import sys; from dotcat.cli import app; sys.exit(app())"
TOPICS = [
    "The quarterly budget review covered travel costs, software licences and office rent.",
    "Meeting notes: the team agreed to move the release planning to Thursday mornings.",
    "The printer on the third floor was replaced after repeated paper jams last spring.",
    "Hiring update: two engineers joined the platform group and one left for a startup.",
    "The parking garage will be repainted, so cars must use the north entrance for a week.",
    "Security training is mandatory for everyone who handles customer data or invoices.",
    "The cafeteria menu now lists allergens beside each dish, after many requests.",
]
LAST = (
    "Sourdough corner. Feed the sourdough starter twice a day with equal weights of rye flour "
    "and water, keep it at room temperature, and bake when it has doubled and smells sour."
)


def long_text(words: int = 5000) -> str:
    """About ``words`` words of office history, and a last section on something else."""
    rng = random.Random(0)
    body: list[str] = []
    while sum(len(s.split()) for s in body) < words:
        body.append(rng.choice(TOPICS))
    paragraphs = [" ".join(body[i : i + 6]) for i in range(0, len(body), 6)]
    return "\n\n".join([*paragraphs, LAST]) + "\n"


def dotcat(*args) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", _DOTCAT, *map(str, args)], capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def search(index, query: str, *options: str) -> list[dict]:
    return json.loads(dotcat("search", index, query, "-k", "20", "--json", *options).stdout)


@pytest.mark.slow
def test_the_mixed_folder_in_one_command_filtered_and_its_long_text_found(tmp_path):
    text = long_text()
    root = mixed_folder(tmp_path / "docs", long_text=text)
    index = tmp_path / "index"
    built = dotcat("index", root, index)
    assert "indexed 10 documents" in built.stdout
    admitted = {
        'product = "billing"': {"tickets.csv#T-1", "tickets.csv#T-3"},
        'tags contains "hr"': {"faq.jsonl#f2", "notes/onboarding.md"},
        'path startswith "projects/"': {"projects/alpha/plan.md"},
        "updated >= 2025-01-01 and updated < 2025-04-01": {
            "tickets.csv#T-1", "faq.jsonl#f1", "notes/onboarding.md"},
    }  # fmt: skip
    for filter, expected in admitted.items():
        hits = search(index, "what should I do", "--filter", filter)
        assert {h["doc_id"] for h in hits} == expected, filter
    hits = search(index, "how often should I feed my sourdough starter", "--first-stage", "dense")
    assert hits[0]["doc_id"] == "history.txt"
    passage = hits[0]["passage"]
    assert passage["start"] > len(text) // 2  # past the first window: the last section
    assert "Sourdough" in passage["text"] and "sourdough" in hits[0]["snippet"].lower()
