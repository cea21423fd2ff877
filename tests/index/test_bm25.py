"""dotcat.index.bm25 on tiny corpora: formula, analysis, k, ties, input forms, save/load."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from dotcat.errors import DotcatError
from dotcat.index.bm25 import BM25Index
from dotcat.index.bm25_global import updated
from dotcat.index.config import BM25Config

DOCS = [
    {"id": "d1", "title": "Cats", "text": "Cats are small domesticated carnivorous mammals."},
    {"id": "d2", "title": "Dogs", "text": "Dogs were domesticated from wolves long ago."},
    {"id": "d3", "title": "Photosynthesis", "text": "Plants turn light into chemical energy."},
    {"id": "d4", "title": "Mitochondria", "text": "Mitochondria produce ATP for the cell."},
    {"id": "d5", "title": "Exercise", "text": "She runs every morning before work."},
    {"id": "d6", "title": "Insulin", "text": "Insulin regulates blood glucose in mammals."},
]


@dataclass(frozen=True)
class Doc:  # the shape of dotcat.data.Document
    id: str
    title: str
    text: str


def _search(queries, k=10, config=None, docs=DOCS):
    index = BM25Index.build(docs, config=config or BM25Config(), show_progress=False)
    return index.search(queries, k=k, show_progress=False)


def test_obviously_relevant_document_ranks_first():
    run = _search({"q1": "animals domesticated from wolves", "q2": "how do cells make ATP"})
    assert run["q1"][0][0] == "d2"
    assert run["q2"][0][0] == "d4"
    assert all(s1 >= s2 for (_, s1), (_, s2) in zip(run["q1"], run["q1"][1:], strict=False))


def test_title_is_indexed():
    assert _search({"q": "photosynthesis"})["q"][0][0] == "d3"


def test_stemming_matches_word_forms():
    assert [d for d, _ in _search({"q": "running"})["q"]] == ["d5"]
    assert _search({"q": "running"}, config=BM25Config(stemmer=None))["q"] == []


def test_a_word_composed_or_decomposed_is_one_term(tmp_path):
    docs = [{"id": "nfd", "title": "", "text": "Re\u0301sume\u0301 of the cafe\u0301 owner"},
            {"id": "nfc", "title": "", "text": "A na\u00efve plan"}]  # fmt: skip
    queries = {"typed": "r\u00e9sum\u00e9", "cafe": "caf\u00e9", "naive": "nai\u0308ve"}
    run = _search(queries, docs=docs)
    assert [d for d, _ in run["typed"]] == ["nfd"] and [d for d, _ in run["cafe"]] == ["nfd"]
    assert [d for d, _ in run["naive"]] == ["nfc"]
    BM25Index.build(docs, show_progress=False).save(tmp_path / "bm25")  # a search without bm25s
    light = BM25Index.load(tmp_path / "bm25", mmap=True, search_only=True)
    assert [d for d, _ in light.search_one("naïve r\u00e9sum\u00e9", k=2)] == ["nfc", "nfd"]


WORLD = [
    {"id": "ja", "title": "", "text": "東京は日本の首都です。寿司とラーメンが有名です。"},
    {"id": "zh", "title": "", "text": "北京是中国的首都。长城非常有名。猫很可爱。"},
    {"id": "ko", "title": "", "text": "서울은 한국의 수도입니다."},
    {"id": "hi", "title": "", "text": "हिन्दी भाषा बहुत सुंदर है।"},
    {"id": "hi2", "title": "", "text": "बहू घर आई।"},  # "बह" once both words' broken piece
    {"id": "ar", "title": "", "text": "مُحَمَّدٌ رَسُولُ اللَّهِ"},
    {"id": "tr", "title": "İzmir", "text": "İzmir ve İstanbul büyük şehirlerdir."},
    {"id": "tr2", "title": "", "text": "Zmir is a made up word here."},
    {"id": "de", "title": "", "text": "Straße, pass\u00adword, ｆｕｌｌ ｗｉｄｔｈ, ﬁnancial."},
]  # fmt: skip


@pytest.mark.parametrize("search_only", [False, True])
def test_words_of_every_script_are_found_whole(tmp_path, search_only):
    BM25Index.build(WORLD, show_progress=False).save(tmp_path / "bm25")
    index = BM25Index.load(tmp_path / "bm25", search_only=search_only)
    expected = {"寿司": ["ja"], "東京": ["ja"], "ラーメン": ["ja"], "首都": ["ja", "zh"],
                "长城": ["zh"], "猫": ["zh"], "한국": ["ko"], "हिन्दी": ["hi"], "बहुत": ["hi"],
                "مُحَمَّدٌ": ["ar"], "izmir": ["tr"], "İstanbul": ["tr"], "strasse": ["de"],
                "password": ["de"], "full width": ["de"], "financial": ["de"]}  # fmt: skip
    for query, ids in expected.items():  # first (a CJK character also finds its other words)
        assert sorted(d for d, _ in index.search_one(query, k=10)[: len(ids)]) == ids, query
    assert [d for d, _ in index.search_one("बहुत İzmir", k=10)] == ["tr", "hi"]  # no hi2, tr2


def test_an_index_of_the_first_format_is_searched_with_its_own_words(tmp_path, monkeypatch, caplog):
    from dotcat.index import bm25

    made = bm25.make_tokenizer
    bm25._say_words_1.cache_clear()
    with monkeypatch.context() as m:  # an index built before words(): format 1
        m.setattr(bm25, "FORMAT_VERSION", 1)
        m.setattr(bm25, "make_tokenizer", lambda config, splitter=None: made(config, bm25.words_1))
        BM25Index.build(WORLD, show_progress=False).save(tmp_path / "bm25")
    for search_only in (False, True):
        old = BM25Index.load(tmp_path / "bm25", search_only=search_only)
        assert "tr" in {d for d, _ in old.search_one("İzmir", k=10)}  # its "zmir", as built
    assert "build the index again (--overwrite) to find them" in caplog.text  # said, once
    grown = updated(BM25Index.load(tmp_path / "bm25"), set(), [{"id": "x", "text": "İzmir"}])
    grown.save(tmp_path / "grown")  # an update keeps the words it was built with: format 1
    found = BM25Index.load(tmp_path / "grown", search_only=True).search_one("İzmir", k=10)
    assert {"tr", "x"} <= {d for d, _ in found}


def test_stop_words_are_ignored():
    run = _search({"plain": "wolves", "padded": "the wolves of and in", "stop": "the of and"})
    assert run["padded"] == run["plain"]
    assert run["stop"] == []
    no_stop = _search({"q": "the of"}, config=BM25Config(stopwords=None))
    assert {d for d, _ in no_stop["q"]} == {"d4"}  # "the cell"


def test_k_larger_than_corpus_returns_only_matching_documents():
    run = _search({"q": "mammals"}, k=100)
    assert {d for d, _ in run["q"]} == {"d1", "d6"}
    assert all(score > 0 for _, score in run["q"])
    assert len(_search({"q": "mammals"}, k=1)["q"]) == 1
    with pytest.raises(DotcatError, match="k must be"):
        _search({"q": "mammals"}, k=0)


def test_ties_are_broken_by_document_id():
    docs = [Doc(i, "", "identical twin text") for i in ("c", "a", "b")] + [Doc("z", "", "other")]
    run = _search({"q": "twin"}, docs=docs)
    assert [d for d, _ in run["q"]] == ["a", "b", "c"]
    assert len({s for _, s in run["q"]}) == 1
    # At the cut: among three equal scores, k=2 keeps the two smallest ids.
    assert [d for d, _ in _search({"q": "twin"}, k=2, docs=docs)["q"]] == ["a", "b"]


def test_lucene_bm25_score_by_hand():
    docs = [Doc("x", "", "apple apple banana"), Doc("y", "", "banana cherry"), Doc("w", "", "kiwi")]
    config = BM25Config(k1=1.2, b=0.75, stemmer=None, stopwords=None)
    run = _search({"q": "apple banana"}, config=config, docs=docs)
    n, avgdl = 3, (3 + 2 + 1) / 3

    def term(tf, df, dl):
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf / (tf + 1.2 * (1 - 0.75 + 0.75 * dl / avgdl))

    expected = {"x": term(2, 1, 3) + term(1, 2, 3), "y": term(1, 2, 2)}
    assert dict(run["q"]) == pytest.approx(expected, rel=1e-5)


def test_dataset_input(tmp_path):
    datasets = pytest.importorskip("datasets")
    cols = {k: [d[k] for d in DOCS] for k in ("id", "title", "text")}
    dataset = datasets.Dataset.from_dict(cols)
    assert _search({"q": "wolves"}, docs=dataset) == _search({"q": "wolves"})


def test_beir_style_dicts_and_missing_fields():
    docs = [{"_id": "a", "text": "solar panels"}, {"_id": "b", "title": "Solar", "text": None}]
    assert {d for d, _ in _search({"q": "solar"}, docs=docs)["q"]} == {"a", "b"}


def test_bad_corpora_and_configs():
    with pytest.raises(DotcatError, match="no documents"):
        _search({"q": "x"}, docs=[])
    with pytest.raises(DotcatError, match="repeated document ids, first: d1"):
        _search({"q": "x"}, docs=DOCS + DOCS[:1])
    with pytest.raises(DotcatError, match="no id"):
        _search({"q": "x"}, docs=[{"text": "no id"}])
    with pytest.raises(DotcatError, match="unknown stemmer 'klingon'"):
        BM25Config(stemmer="klingon")
    with pytest.raises(DotcatError, match="unknown stop-word list"):
        BM25Config(stopwords="xx")


def test_pair_scores_are_the_search_scores_of_the_named_documents():
    index = BM25Index.build(DOCS, show_progress=False)
    query = "domesticated mammals"
    ranked = dict(index.search_one(query, k=10))
    ids = ["d6", "d3", "d1", "d2"]  # in no particular order, one that does not match
    scores = index.pair_scores(query, ids)
    assert scores == pytest.approx([ranked.get(d, 0.0) for d in ids])
    assert scores[1] == 0.0 and min(scores[0], scores[2], scores[3]) > 0
    assert index.pair_scores("the of and", ["d1"]) == [0.0]  # stop words only
    with pytest.raises(KeyError):
        index.pair_scores(query, ["nope"])


def test_save_load_round_trip(tmp_path):
    queries = {"q1": "domesticated wolves", "q2": "running", "q3": "blood sugar insulin"}
    index = BM25Index.build(DOCS, show_progress=False)
    before = index.search(queries, show_progress=False)
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25")
    assert loaded.config == index.config
    assert loaded.search(queries, show_progress=False) == before
    with pytest.raises(DotcatError, match="already exists"):
        index.save(tmp_path / "bm25")
    with pytest.raises(DotcatError, match="not a dotcat BM25 index"):
        BM25Index.load(tmp_path)


#: Queries whose words reach every branch of the query tokenizer: indexed words, stop words,
#: unseen forms of indexed stems, unknown words, one-letter words, digits, case, punctuation.
ANALYSED = [
    "domesticated wolves", "The cats are running!", "Running runs ran", "ATP-producing cells",
    "blood sugar insulin", "a b c", "zzz unknownword", "", "Photosynthesis 2024 in mammals",
    "WHAT IS THE CELL'S ENERGY", "glucose, glucose and GLUCOSE", "éléphants über",
]  # fmt: skip


@pytest.mark.parametrize(
    "config",
    [BM25Config(), BM25Config(stopwords=None), BM25Config(stemmer=None),
     BM25Config(stopwords=["cats", "the"]), BM25Config(method="robertson")],
    ids=["default", "no-stopwords", "no-stemmer", "own-stopwords", "robertson"],
)  # fmt: skip
def test_a_search_reads_the_index_without_bm25s_and_scores_as_bm25s(tmp_path, config):
    index = BM25Index.build(DOCS, config=config, show_progress=False)
    index.save(tmp_path / "bm25")
    light = BM25Index.load(tmp_path / "bm25", mmap=True, search_only=True)
    full = BM25Index.load(tmp_path / "bm25", mmap=True)
    assert type(light._retriever).__name__ == "_SavedScores"  # bm25s not used
    for text in ANALYSED:
        assert light.query_token_ids(text) == full.query_token_ids(text), text
        assert light.search_one(text, k=10) == full.search_one(text, k=10)
    ids = light.query_token_ids("blood insulin mammals")
    got, want = light._retriever.get_scores_from_ids(ids), full._retriever.get_scores_from_ids(ids)
    assert got.dtype == want.dtype and (got == want).all()  # the same float32 sums
    assert light._retriever.vocab_dict == full._retriever.vocab_dict
    assert light.vocabulary == full.vocabulary
    assert light.term_frequencies(0) == full.term_frequencies(0)  # what RM3 reads


def test_another_stop_word_language_searches_with_bm25s(tmp_path):
    index = BM25Index.build(DOCS, config=BM25Config(stopwords="de"), show_progress=False)
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25", mmap=True, search_only=True)
    assert type(loaded._retriever).__name__ == "BM25"  # only bm25s knows its list
    assert loaded.search_one("domesticated wolves") == index.search_one("domesticated wolves")


def test_stop_words_read_without_bm25s_are_bm25s_lists():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dotcat.index.bm25 import bm25s_stopwords\n"
        "print(len(bm25s_stopwords('STOPWORDS_EN')), len(bm25s_stopwords('STOPWORDS_EN_PLUS')))\n"
        "assert 'bm25s' not in sys.modules and 'scipy' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_EN_PLUS

    assert done.stdout.split() == [str(len(STOPWORDS_EN)), str(len(STOPWORDS_EN_PLUS))]
    from dotcat.index.bm25 import bm25s_stopwords

    assert bm25s_stopwords("STOPWORDS_EN") == tuple(STOPWORDS_EN)
