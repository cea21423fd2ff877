"""Snippets: bounded excerpts around the query's words."""

from __future__ import annotations

import time
import unicodedata

from tests.timing import within

from dotcat.serve.snippet import (
    SCAN_CHARS,
    SNIPPET_CHARS,
    highlights,
    query_terms,
    shorten,
    snippet,
)

FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 40
PASSAGE = "Mitochondria make ATP in cells by oxidative phosphorylation."


def test_query_terms_leave_out_stop_words_and_repeats():
    assert query_terms("How do cells make ATP, and why do CELLS?") == ["cells", "make", "atp"]
    assert query_terms("the of a") == []
    assert query_terms("DNA-repair x 2a") == ["dna", "repair", "2a"]


def test_a_short_text_is_its_own_snippet():
    assert snippet("Insulin regulates  blood\nglucose.", ["insulin"]) == (
        "Insulin regulates blood glucose."
    )


def test_the_window_holds_the_query_words_and_is_bounded():
    text = FILLER + PASSAGE + " " + FILLER
    found = snippet(text, query_terms("how do cells make ATP"))
    assert PASSAGE in found
    assert found.startswith("… ") and found.endswith(" …")
    assert len(found) <= SNIPPET_CHARS + 4
    body = found[2:-2]
    assert body in text and text[text.index(body) - 1] == " "  # begins on a word
    assert text[text.index(body) + len(body)] == " "  # ends on one


def test_the_window_with_more_distinct_words_wins():
    text = "cells " + FILLER + "cells make ATP together here. " + FILLER
    found = snippet(text, ["cells", "make", "atp"])
    assert "cells make ATP together" in found and found.startswith("… ")


def test_no_query_word_gives_the_start():
    text = FILLER + PASSAGE
    found = snippet(text, ["insulin"])
    assert found.startswith("Lorem ipsum dolor") and found.endswith(" …")
    assert len(found) <= SNIPPET_CHARS + 2
    assert snippet(text, []) == found


def test_long_terms_match_words_they_begin_short_ones_whole_words():
    text = FILLER + "The dnase cuts. " + FILLER + "Cellular DNA repair. " + FILLER
    assert "Cellular DNA repair" in snippet(text, ["dna"])  # not "dnase"
    assert "Cellular DNA repair" in snippet(text, ["cell", "repair"])  # "cell": "Cellular"


def test_one_long_word_is_cut_and_a_huge_text_costs_little():
    assert snippet("x" * 1000, ["y"]) == "x" * SNIPPET_CHARS + " …"
    huge = ("word " * 2_000_000) + PASSAGE  # 10 MB: the passage is past the scanned part
    started = time.perf_counter()
    found = snippet(huge, ["mitochondria"])
    assert time.perf_counter() - started < within(1.0)
    assert found.startswith("word word") and len(huge) > SCAN_CHARS


def test_shorten():
    assert shorten("Short title", 20) == "Short title"
    cut = shorten("A title that goes on and on " * 10, 50)
    assert len(cut) <= 50 and cut.endswith("…") and cut.startswith("A title that goes")


def test_letters_whose_lower_case_is_longer_keep_the_window_in_place():
    text = "İİİİ " * 50 + FILLER + PASSAGE + " " + FILLER  # "İ".lower() is two characters
    found = snippet(text, ["mitochondria"])
    assert PASSAGE in found


def test_words_of_every_script_are_highlighted_whole():
    def marked(text: str, query: str) -> list[str]:
        return [text[a:b] for a, b in highlights(text, query_terms(query))]

    ja = "東京は日本の首都です。寿司とラーメンが有名です。"
    assert marked(ja, "寿司とラーメン 首都") == ["首都", "寿司とラーメン"]  # no spaces: pairs
    nfd = unicodedata.normalize("NFD", "Le résumé du café décaféiné")
    assert marked(nfd, "café") == marked(nfd, "cafe") == [nfd[15:20]]  # the accent in, once
    assert marked("İstanbul'da", "İstanbul") == marked("İstanbul'da", "istanbul") == ["İstanbul"]
    assert marked("हिन्दी भाषा बहुत सुंदर है", "बहुत") == ["बहुत"]  # its vowel signs in


def test_a_cut_inside_one_long_word_never_splits_what_shows_as_one_character():
    accents, family = "e\u0301" * 400, "\U0001f468\u200d\U0001f469\u200d\U0001f467" * 100
    for text in (accents + "cafe" + accents, family + " word " + family):
        for width in (199, 200, 201):
            found = snippet(text, ["cafe", "word"], width).strip("… ")
            assert not unicodedata.combining(found[0]) and found[0] != "\u200d"
            assert found[-1] not in "e\u200d"  # "e" without its accent, a half emoji
        assert shorten(text, 201)[-2] not in "e\u200d"
