"""dotcat.search.reranker: candidates, fusion maths, tail order, refusals."""

from __future__ import annotations

import datasets
import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.search.aggregation import Match
from dotcat.search.reranker import (
    Candidates,
    Reranker,
    corpus_texts,
    fuse,
    minmax,
    ranked,
    rerank,
    score_candidates,
)

pytestmark = pytest.mark.kernels  # its results can depend on the CPU (Makefile: test-kernels)


@pytest.fixture(scope="module")
def trained_tiny(tiny_bert_dir, tmp_path_factory):
    """The tiny BERT with a (random) head, saved: a cross-encoder dotcat accepts."""
    out = tmp_path_factory.mktemp("tiny_ce")
    CrossEncoder.load(CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu")).save(out)
    return CrossEncoder.load(CrossEncoderConfig(model=str(out), device="cpu", precision="fp32"))


def test_ranked_sorts_maps_and_lists_with_id_ties():
    # Ties as trec_eval ranks them: the larger id first.
    assert ranked({"q": {"a": 1.0, "b": 1.0, "c": 2.0}}) == {
        "q": [("c", 2.0), ("b", 1.0), ("a", 1.0)]
    }
    assert ranked({"q": [("x", 0.1), ("y", 0.5)]}) == {"q": [("y", 0.5), ("x", 0.1)]}


def test_minmax_and_constant_scores():
    np.testing.assert_allclose(minmax(np.array([2.0, 4.0, 3.0])), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(minmax(np.array([5.0, 5.0])), [0.0, 0.0])


def test_fuse_orders_head_by_logits_keeps_tail_below_in_first_stage_order():
    c = Candidates(
        docs=["a", "b", "c", "d", "e"],
        first=np.array([5.0, 4.0, 3.0, 2.0, 1.0]),
        cat=np.array([-1.0, 3.0, 0.5]),  # head = a, b, c
    )
    run = fuse({"q": c})["q"]
    assert [d for d, _ in run] == ["b", "c", "a", "d", "e"]
    assert [s for _, s in run[:3]] == [3.0, 0.5, -1.0]
    assert run[3][1] < run[2][1] and run[4][1] < run[3][1]
    # alpha 0: the first stage's order; alpha 0.5 by hand
    assert [d for d, _ in fuse({"q": c}, 0.0)["q"]] == ["a", "b", "c", "d", "e"]
    mixed = dict(fuse({"q": c}, 0.5)["q"])
    # norm(cat) = [0, 1, 0.375], norm(first head) = [1, 0.5, 0]
    assert mixed["a"] == pytest.approx(0.5) and mixed["b"] == pytest.approx(0.75)
    assert mixed["c"] == pytest.approx(0.1875)
    with pytest.raises(DotcatError, match=r"\[0, 1\]"):
        fuse({"q": c}, 1.5)


def test_score_candidates_matches_direct_scores_and_depth(trained_tiny):
    run = {"q1": [("d1", 3.0), ("d2", 2.0), ("d3", 1.0)], "q2": [("d3", 1.0)]}
    queries = {"q1": "cats and dogs", "q2": "plants"}
    texts = {"d1": "Cats are mammals", "d2": "Dogs bark loudly at night", "d3": "Plants grow"}
    cands = score_candidates(run, queries, texts, trained_tiny, depth=2)
    assert len(cands["q1"].cat) == 2 and len(cands["q2"].cat) == 1
    direct = trained_tiny.score(["cats and dogs"] * 2, [texts["d1"], texts["d2"]])
    np.testing.assert_allclose(cands["q1"].cat, direct, atol=1e-6)
    out = rerank(run, queries, texts, trained_tiny, depth=2)
    assert out["q1"][2][0] == "d3"  # below the depth: stays last
    assert {d for d, _ in out["q1"][:2]} == {"d1", "d2"}


def test_refusals(trained_tiny, tiny_bert_dir):
    run = {"q1": [("d1", 1.0)]}
    with pytest.raises(DotcatError, match="not in the corpus"):
        score_candidates(run, {"q1": "x"}, {}, trained_tiny)
    with pytest.raises(DotcatError, match="no text"):
        score_candidates(run, {}, {"d1": "t"}, trained_tiny)
    with pytest.raises(DotcatError, match="depth"):
        score_candidates(run, {"q1": "x"}, {"d1": "t"}, trained_tiny, depth=0)
    untrained = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu"))
    with pytest.raises(DotcatError, match="not a cross-encoder"):
        rerank(run, {"q1": "x"}, {"d1": "t"}, untrained)


def test_corpus_texts_from_dataset_and_iterable(tiny_beir_dir, tiny_docs):
    from dotcat.data import load_corpus

    want = {"d1", "d4"}
    from_ds = corpus_texts(load_corpus(tiny_beir_dir), want)
    from_list = corpus_texts(tiny_docs, want)
    assert from_ds == from_list
    assert from_ds["d1"] == "Cats Cats are small domesticated carnivorous mammals."
    untitled = datasets.Dataset.from_list([{"id": 7, "text": "no title column"}])
    assert corpus_texts(untitled, {"7"}) == {"7": "no title column"}  # (a KeyError before)
    with pytest.raises(DotcatError, match="corpus document #1 has no id"):  # (#2 before)
        corpus_texts([{"text": "first"}], {"x"})


def test_a_depth_that_cuts_through_tied_scores_reranks_the_documents_read(trained_tiny):
    """The head's texts are fetched for the documents the cross-encoder re-ranks: where depth
    cuts through tied first-stage scores (duplicates), both take ties as :func:`ranked` does
    (it said "1 run documents are not in the corpus: c" when `dotcat search --depth` did)."""
    found = {"q": [Match("a", 1.0, ()), Match("b", 0.5, ()), Match("c", 0.5, ())]}
    read = []

    def texts(head, depth):
        read.extend(m.doc_id for m in head["q"][:depth])
        return {("q", d): [f"text of {d}"] for d in read}

    reranked = Reranker(trained_tiny, depth=2).rerank_matches(found, {"q": "x"}, 2, texts)
    assert read == ["a", "c"] and {m.doc_id for m in reranked["q"][:2]} == {"a", "c"}
    assert reranked["q"][2].doc_id == "b"
