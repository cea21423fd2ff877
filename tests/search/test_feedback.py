"""dotcat.search.feedback: RM3 against a hand computation on a tiny corpus (every count, BM25
score and weight worked out below from the formulas), Rocchio against numpy over the index's
vectors, and feedback through the pipeline, the command line and bad settings."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from dotcat.errors import DotcatError, SettingError
from dotcat.index import IndexConfig, PassageConfig, build_index
from dotcat.index.bm25 import BM25Index
from dotcat.index.config import BM25Config
from dotcat.models import EncoderConfig
from dotcat.search.config import PipelineConfig
from dotcat.search.dense import DenseRetriever
from dotcat.search.feedback import RM3, RM3Expander, Rocchio, rocchio_search
from dotcat.search.pipeline import SearchPipeline

# Ten documents (N = 10): a term in one document has df/N = 0.1, the most a feedback term may
# have; "apple" (df 3) and "banana" (df 2) are query terms only. No stemming, no stop words,
# so the terms are the words.
DOCS = {
    "d0": "apple banana banana cherry cherry grape",
    "d1": "apple banana date date hazel hazel hazel iris",
    "d2": "apple elder elder fig",
    "d3": "kiwi lime",
    "d4": "mango nut",
    "d5": "olive pear",
    "d6": "quince rasp",
    "d7": "sloe tang",
    "d8": "ugli vanilla",
    "d9": "walnut yam",
}
CONFIG = BM25Config(k1=0.9, b=0.4, stemmer=None, stopwords=None, method="lucene")
QUERY = "apple banana"


def _bm25(term: str, doc: str) -> float:
    """Lucene BM25 by hand: idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl)),
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    words = {d: text.split() for d, text in DOCS.items()}
    n = len(words)
    df = sum(term in w for w in words.values())
    avgdl = sum(len(w) for w in words.values()) / n
    tf = words[doc].count(term)
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + CONFIG.k1 * (1 - CONFIG.b + CONFIG.b * len(words[doc]) / avgdl))


def _expected_rm3(fb_docs: int, fb_terms: int, lam: float) -> dict[str, float]:
    """RM3 by hand for QUERY (Anserini's Rm3Reranker, the module docstring's formulas)."""
    first = {d: _bm25("apple", d) + _bm25("banana", d) for d in DOCS}
    top = sorted(first, key=lambda d: -first[d])[:fb_docs]
    assert top == ["d0", "d1"][:fb_docs]  # d0 (banana twice) > d1 > d2 (apple only)
    # Eligible terms: df/N <= 0.1. d0: cherry 2, grape 1. d1: date 2, hazel 3, iris 1.
    # P(w|D) over each document's fb_terms most frequent eligible terms:
    #   fb_terms 2: d0: cherry 2/3, grape 1/3;  d1: hazel 3/5, date 2/5 (iris pruned)
    #   fb_terms 3: d0: cherry 2/3, grape 1/3;  d1: hazel 3/6, date 2/6, iris 1/6
    p = {
        2: {"d0": {"cherry": 2 / 3, "grape": 1 / 3}, "d1": {"hazel": 3 / 5, "date": 2 / 5}},
        3: {
            "d0": {"cherry": 2 / 3, "grape": 1 / 3},
            "d1": {"hazel": 3 / 6, "date": 2 / 6, "iris": 1 / 6},
        },
    }[fb_terms]
    rm1: dict[str, float] = {}
    for d in top:
        for w, pw in p[d].items():
            rm1[w] = rm1.get(w, 0.0) + pw * first[d]
    kept = dict(sorted(rm1.items(), key=lambda item: -item[1])[:fb_terms])
    total = sum(kept.values())
    rm1 = {w: v / total for w, v in kept.items()}
    original = {"apple": 0.5, "banana": 0.5}  # tf(w, q) / |q|
    terms = original.keys() | rm1.keys()
    return {w: lam * original.get(w, 0) + (1 - lam) * rm1.get(w, 0) for w in terms}


@pytest.fixture(scope="module")
def tiny_bm25() -> BM25Index:
    corpus = [{"id": d, "text": t} for d, t in DOCS.items()]
    return BM25Index.build(corpus, config=CONFIG, show_progress=False)


def test_counts_are_recovered_from_bm25s_scores(tiny_bm25):
    for row, doc in enumerate(DOCS):
        counts = tiny_bm25.term_frequencies(row)
        words = DOCS[doc].split()
        by_term = {tiny_bm25.vocabulary[t]: c for t, c in counts.items()}
        assert set(by_term) == set(words)
        # Up to one factor per document: compare with the document's own counts, scaled.
        scale = by_term[words[0]] / words.count(words[0])
        for w in words:
            assert by_term[w] == pytest.approx(words.count(w) * scale, rel=1e-5)


@pytest.mark.parametrize(("fb_docs", "fb_terms", "lam"), [(2, 2, 0.4), (2, 3, 0.5), (1, 2, 0.7)])
def test_rm3_weights_match_the_hand_computation(tiny_bm25, fb_docs, fb_terms, lam):
    expander = RM3Expander(tiny_bm25, RM3(fb_docs, fb_terms, lam))
    got = {tiny_bm25.vocabulary[t]: w for t, w in expander.expand(QUERY).items()}
    expected = _expected_rm3(fb_docs, fb_terms, lam)
    assert set(got) == set(expected)
    for w in expected:
        assert got[w] == pytest.approx(expected[w], rel=1e-5), w
    assert sum(got.values()) == pytest.approx(1.0)


def test_rm3_ranks_by_the_expanded_querys_bm25(tiny_bm25):
    weights = _expected_rm3(2, 2, 0.4)
    expected = {d: sum(w * _bm25(t, d) for t, w in weights.items()) for d in DOCS}
    expected = {d: s for d, s in expected.items() if s > 0}
    ranked = sorted(expected, key=lambda d: (-expected[d], d))
    hits = RM3Expander(tiny_bm25, RM3(2, 2, 0.4)).search_one(QUERY, 10)
    assert [d for d, _ in hits] == ranked  # d0, d1, d2: no near-ties (checked below)
    np.testing.assert_allclose([s for _, s in hits], [expected[d] for d in ranked], rtol=1e-5)
    assert min(np.diff(sorted(expected.values()))) > 1e-3
    # A query term can be a feedback term too: "kiwi" (zzz is unknown) finds d3 alone, whose
    # eligible terms are kiwi and lime (1 each): RM1 = {kiwi 1/2, lime 1/2}, so
    # q' = 0.4 * {kiwi 1} + 0.6 * RM1 = {kiwi 0.7, lime 0.3}.
    expected_d3 = 0.7 * _bm25("kiwi", "d3") + 0.3 * _bm25("lime", "d3")
    hits = RM3Expander(tiny_bm25, RM3(2, 2, 0.4)).search({"q": "kiwi zzz"}, 3)["q"]
    assert [d for d, _ in hits] == ["d3"]
    assert hits[0][1] == pytest.approx(expected_d3, rel=1e-5)


def test_rm3_with_no_indexed_term_finds_nothing(tiny_bm25):
    assert RM3Expander(tiny_bm25).search_one("zzz qqq", 5) == []


def test_bad_rm3_and_rocchio_settings_are_refused():
    with pytest.raises(DotcatError, match="fb_docs"):
        RM3(fb_docs=0)
    with pytest.raises(DotcatError, match="original_query_weight"):
        RM3(original_query_weight=1.5)
    with pytest.raises(DotcatError, match="docs"):
        Rocchio(docs=0)


# -- dense feedback and the pipeline -----------------------------------------------------------

QUERIES = {
    "q1": "which animals were domesticated from wolves",
    "q2": "how do cells make ATP",
    "q3": "hormone controlling blood sugar",
}


def _pipeline(index, **settings) -> SearchPipeline:
    return SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32", **settings))


@pytest.fixture(scope="module")
def doc_index(data, tiny_bert_dir, tmp_path_factory):
    """The search tests' corpus indexed one vector (and one BM25 row) per document."""
    out = tmp_path_factory.mktemp("feedback_index") / "index"
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(data, out, encoder, IndexConfig(bm25=True, passages=False), show_progress=False)
    return out


@pytest.mark.kernels
def test_rocchio_is_alpha_q_plus_beta_mean_of_the_top_documents(doc_index):
    retriever = DenseRetriever(doc_index, device="cpu", precision="fp32")
    params = Rocchio(docs=2, alpha=1.0, beta=0.7)
    run = rocchio_search(retriever, QUERIES, 4, params)
    n = len(retriever.index)
    vectors = retriever.index.vectors(np.arange(n))  # a Flat index: the stored vectors
    for qid, text in QUERIES.items():
        q = np.asarray(retriever.encoder.encode_queries([text]))[0]
        top = np.argsort(-(vectors @ q), kind="stable")[:2]
        expanded = params.alpha * q + params.beta * vectors[top].mean(axis=0)
        if retriever.encoder.similarity == "cos":
            expanded /= np.linalg.norm(expanded)
        scores = vectors @ expanded
        got = run[qid]
        np.testing.assert_allclose([s for _, s in got], np.sort(scores)[::-1][:4], atol=1e-4)
        ids = retriever.index.doc_ids(np.arange(n))
        for doc, score in got:  # each document's own score (ties may swap places)
            assert scores[[p for p in range(n) if ids[p] == doc][0]] == pytest.approx(
                score, abs=1e-4
            )


@pytest.mark.kernels
def test_feedback_through_the_pipeline(doc_index):
    index = doc_index
    bm25 = _pipeline(index, first_stage="bm25")
    rm3 = _pipeline(index, first_stage="bm25", prf="rm3", fb_docs=3, fb_terms=5)
    assert rm3.run(QUERIES, 5) == rm3.stage().rm3.search(QUERIES, 5)
    assert rm3.describe()["feedback"]["rm3"] == {
        "fb_docs": 3,
        "fb_terms": 5,
        "original_query_weight": 0.5,
    }
    assert rm3.run(QUERIES, 5) != bm25.run(QUERIES, 5)  # the expansion moved something
    dense = _pipeline(index, first_stage="dense", prf="rocchio")
    retriever = DenseRetriever(index, device="cpu", precision="fp32")
    assert dense.run(QUERIES, 5) == rocchio_search(retriever, QUERIES, 5, Rocchio())
    # Hybrid with both: each side rewritten, then the index's fusion.
    both = _pipeline(index, prf="both", fb_docs=3, fb_terms=5)
    fused = both.fusion.fuse_runs(dense.run(QUERIES, 100), rm3.run(QUERIES, 100))
    assert both.run(QUERIES, 5) == {q: docs[:5] for q, docs in fused.items()}


# Queries in the search tests' corpus's words (tests/training/toy.py).
WORDS = {"a": "insulin glucose mice", "b": "tumor chemotherapy patients"}


def _maxp(passages: dict[int, float], owner: dict[int, str]) -> dict[str, float]:
    """Each document's best passage score."""
    best: dict[str, float] = {}
    for pid, score in passages.items():
        best[owner[pid]] = max(best.get(owner[pid], -np.inf), score)
    return best


def _check_documents(run, expected: dict[str, dict[str, float]], k: int) -> None:
    """Each query's ranking: distinct documents, scored and ranked as ``expected`` (their
    best passages), ties allowed."""
    for qid, docs in run.items():
        ids = [d for d, _ in docs]
        assert len(ids) == len(set(ids)) == min(k, len(expected[qid]))
        top = sorted(expected[qid].values(), reverse=True)[:k]
        np.testing.assert_allclose([s for _, s in docs], top, atol=1e-4)
        for doc, score in docs:
            assert expected[qid][doc] == pytest.approx(score, abs=1e-4)


@pytest.fixture(scope="module")
def passage_index(data, tiny_bert_dir, tmp_path_factory):
    """The same corpus in passages of 8 tokens: most of its documents are longer."""
    out = tmp_path_factory.mktemp("feedback_passages") / "index"
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    config = IndexConfig(bm25=True, passages=PassageConfig(True, window=8, stride=2))
    build_index(data, out, encoder, config, show_progress=False)
    return out


@pytest.mark.kernels
def test_feedback_on_passages_ranks_documents(passage_index):
    """Over an index with passages (documents longer than the tiny encoder's window), RM3's
    feedback documents and Rocchio's feedback vectors are the top passages (BM25 rows, FAISS
    ids), and the rewritten query's passage scores rank documents by MaxP, as any query's."""
    rm3 = _pipeline(passage_index, first_stage="bm25", prf="rm3", fb_docs=3, fb_terms=5)
    n = rm3.manifest.passages["count"]
    assert n > rm3.index.document_count  # some documents were split
    assert len(rm3.bm25) == n  # BM25's statistics are the passages'
    owner = {pid: ref.doc_id for pid, ref in rm3.index.locate(list(range(n))).items()}
    # RM3: the expansion from the top passages' rows, its BM25 over every passage, MaxP.
    expected = {}
    for qid, text in WORDS.items():
        ids = rm3.bm25.query_token_ids(text)
        weights = rm3.stage().rm3.expand(text)
        if ids:  # q' = lambda * tf(w, q) / |q| + (1 - lambda) * RM1 over the top 3 passages
            first = rm3.bm25.top(rm3.bm25.weighted_scores(Counter(ids)), 3)
            model = rm3.stage().rm3.relevance_model(first)
            original = {t: c / len(ids) for t, c in Counter(ids).items()}
            assert weights == pytest.approx(
                {t: 0.5 * original.get(t, 0) + 0.5 * model.get(t, 0) for t in original | model}
            )
        rows = rm3.stage().rm3.search_expanded(weights, n)
        expected[qid] = _maxp({int(pid): s for pid, s in rows}, owner)
        assert len(rows) > len(expected[qid])  # some documents matched by several passages
    found = rm3.run(WORDS, 5)
    _check_documents(found, expected, 5)
    assert found != _pipeline(passage_index, first_stage="bm25").run(WORDS, 5)
    # Rocchio: q' from the top 3 passages' vectors, scored against every passage, MaxP.
    dense = _pipeline(passage_index, first_stage="dense", prf="rocchio", rocchio_docs=3)
    retriever = dense.stage("dense").retriever
    vectors = retriever.index.vectors(np.arange(n))  # a Flat index: the stored vectors
    expected = {}
    for qid, text in WORDS.items():
        q = np.asarray(retriever.encoder.encode_queries([text]))[0]
        top = np.argsort(-(vectors @ q), kind="stable")[:3]
        expanded = q + 0.5 * vectors[top].mean(axis=0)
        if retriever.encoder.similarity == "cos":
            expanded /= np.linalg.norm(expanded)
        expected[qid] = _maxp(dict(enumerate(vectors @ expanded)), owner)
    _check_documents(dense.run(WORDS, 5), expected, 5)
    # Hybrid with both: document rankings fused; hits carry the passage that matched.
    hits = _pipeline(passage_index, prf="both", fb_docs=3, fb_terms=5).search(WORDS["a"], k=5)
    assert len({h.doc_id for h in hits}) == len(hits) > 0
    assert all(h.start is not None and h.stop is not None for h in hits)


def test_feedback_needs_its_side(index, data, tiny_bert_dir, tmp_path):
    with pytest.raises(SettingError, match="prf 'rm3' rewrites the bm25 side"):
        PipelineConfig(first_stage="dense", prf="rm3")
    with pytest.raises(SettingError, match="prf 'rocchio' rewrites the dense side"):
        PipelineConfig(first_stage="bm25", prf="rocchio")
    with pytest.raises(SettingError, match="original_query_weight"):
        PipelineConfig(prf="rm3", original_query_weight=2)
    with pytest.raises(SettingError, match="prf 'both' rewrites the dense side"):
        PipelineConfig(first_stage="bm25", prf="both")  # a side the stage has not: refused
    PipelineConfig(first_stage="hybrid", prf="both")
    dense_only = tmp_path / "dense"
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(data, dense_only, encoder, IndexConfig(bm25=False), show_progress=False)
    with pytest.raises(DotcatError, match="first stage is 'dense'"):
        _pipeline(dense_only, prf="rm3")
    with pytest.raises(SettingError, match="fusion applies only to a first stage that fuses"):
        _pipeline(dense_only, fusion="rrf")  # the hybrid's settings, where no hybrid runs


def test_rm3_agrees_with_anserini_on_the_same_corpus():
    """Anserini 1.7.1's Rm3Reranker (Pyserini 1.6.0's jar) on DOCS, indexed with
    ``IndexCollection -storeDocvectors`` (Porter stemming, no stop word among DOCS) and
    searched with ``SearchCollection -bm25 -bm25.k1 0.9 -bm25.b 0.4 -rm3 -rm3.fbTerms 2
    -rm3.fbDocs 2 -rm3.originalQueryWeight 0.4 -rm3.outputQuery``; the weights and scores it
    logged and ranked (eval/studies/prf_settings/README.md) against ours on the same analysis."""
    corpus = [{"id": d, "text": t} for d, t in DOCS.items()]
    index = BM25Index.build(corpus, BM25Config(stemmer="porter", stopwords=None), False)
    expander = RM3Expander(index, RM3(fb_docs=2, fb_terms=2, original_query_weight=0.4))
    anserini = {
        "apple banana": (
            {"banana": 0.2, "cherri": 0.3585401, "appl": 0.2, "hazel": 0.2414599},
            [("d0", 0.7321), ("d1", 0.5404), ("d2", 0.1151)],
        ),
        "kiwi": ({"kiwi": 0.7, "lime": 0.3}, [("d3", 1.1289)]),
    }
    for query, (weights, ranking) in anserini.items():
        got = {index.vocabulary[t]: w for t, w in expander.expand(query).items()}
        assert got == pytest.approx(weights, abs=1e-6)
        hits = expander.search_one(query, 10)
        assert [d for d, _ in hits] == [d for d, _ in ranking]
        np.testing.assert_allclose([s for _, s in hits], [s for _, s in ranking], atol=1e-4)
