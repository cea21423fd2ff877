"""dotcat.data.pseudo: title and inverse-cloze pseudo-queries, written as a BEIR directory."""

from __future__ import annotations

import json

import pytest

from dotcat.data import load_corpus, load_qrels, load_queries
from dotcat.data.corpus import Document
from dotcat.data.pseudo import cut_sentence, pseudo_queries, split_sentences, write_pseudo_dataset

BODY = (
    "Insulin resistance rises with age in most adults. "
    "We measured fasting glucose in 300 volunteers over ten years of follow up. "
    "Those who exercised daily kept lower glucose levels than those who did not. "
    "The effect held after adjusting for weight, diet and smoking status."
)


def test_split_sentences_keeps_abbreviations_whole():
    assert split_sentences("Cells grow, e.g. the liver. Then 2 die! Why? ok") == [
        "Cells grow, e.g. the liver.",
        "Then 2 die!",
        "Why? ok",
    ]


def test_cut_sentence_removes_the_query_from_its_document_and_is_deterministic():
    doc = Document("d1", "", BODY)
    query, rest = cut_sentence(doc, seed=0)
    assert query in split_sentences(BODY) and query not in rest
    assert len(rest.split()) >= 20
    assert cut_sentence(doc, seed=0) == (query, rest)
    picks = {cut_sentence(doc, seed)[0] for seed in range(20)}
    assert len(picks) > 1  # the seed changes the draw
    assert cut_sentence(Document("d2", "", "One short sentence only here."), 0) is None
    # A sentence the text holds twice would stay in its positive: never cut.
    twice = "Cells make ATP in their mitochondria every day. "
    doc = Document("d3", "", twice + BODY + " " + twice)
    for seed in range(20):
        query, rest = cut_sentence(doc, seed)
        assert query != twice.strip() and query not in rest


def test_titles_first_then_sentences_duplicates_dropped_and_titles_removed():
    docs = [
        Document("a", "Exercise lowers fasting glucose", BODY),
        Document("b", "Hi", BODY.replace("Insulin", "Leptin")),  # title too short: a sentence
        Document("c", "Same title for two", BODY),
        Document("d", "same title, for TWO", BODY),  # the same text once normalised
        Document("e", "", "Too short."),
    ]
    pq = pseudo_queries(docs)
    by_doc = {doc: text for _, text, doc in pq.queries}
    assert by_doc["a"] == "Exercise lowers fasting glucose"
    assert "b" in by_doc and by_doc["b"] in split_sentences(docs[1].text)
    assert "c" not in by_doc and "d" not in by_doc and "e" not in by_doc
    assert (pq.from_titles, pq.from_sentences, pq.too_short, pq.duplicates) == (3, 1, 1, 2)
    assert [d.id for d in pq.documents] == ["a", "b", "c", "d", "e"]
    assert all(d.title == "" for d in pq.documents)
    assert by_doc["b"] not in pq.documents[1].text  # the cut sentence left its document


def test_sentences_first_when_preferred_titles_where_the_text_is_too_short():
    long_title = "Exercise lowers fasting glucose"
    docs = [
        Document("a", long_title, BODY),  # a sentence, although the title is usable
        Document("b", long_title + " in adults", "Too short to cut a sentence from it."),
        Document("c", "", "Too short."),
    ]
    pq = pseudo_queries(docs, prefer="sentence")
    by_doc = {doc: text for _, text, doc in pq.queries}
    assert by_doc["a"] in split_sentences(BODY) and by_doc["a"] not in pq.documents[0].text
    assert "b" not in by_doc  # its text is too short for a title query too (a bare positive)
    assert (pq.from_titles, pq.from_sentences, pq.too_short) == (0, 1, 2)
    with pytest.raises(ValueError, match="prefer"):
        pseudo_queries(docs, prefer="words")


def test_max_queries_draws_a_nested_subset():
    docs = [Document(f"d{i}", f"title number {i} about cells", BODY) for i in range(50)]
    small, large = pseudo_queries(docs, max_queries=10), pseudo_queries(docs, max_queries=30)
    assert len(small.queries) == 10 and len(large.queries) == 30
    assert set(small.queries) <= set(large.queries)
    assert pseudo_queries(docs, max_queries=10, seed=1).queries != small.queries


def test_written_dataset_loads_as_beir(tmp_path):
    docs = [Document(f"d{i}", f"title number {i} about cells", BODY) for i in range(5)]
    out = write_pseudo_dataset(pseudo_queries(docs), tmp_path / "pseudo")
    queries, qrels = load_queries(out), load_qrels(out, split="train")
    assert set(queries) == {f"pq-d{i}" for i in range(5)}
    assert qrels["pq-d3"] == {"d3": 1}
    assert queries["pq-d3"] == "title number 3 about cells"
    assert [d["title"] for d in load_corpus(out)] == [""] * 5
    assert json.loads((out / "pseudo.json").read_text())["queries"] == 5
