"""Long documents as passages: splitting, the index's passages, and indexes built without them."""

from __future__ import annotations

import json
import re
import sqlite3

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.index import DenseIndex, IndexConfig, build_index, document_text
from dotcat.index.passages import SPLIT_FACTOR, PassageConfig, Splitter, token_spans
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.options import AGGREGATION
from dotcat.search.aggregation import resolve
from dotcat.search.pipeline import PipelineConfig, SearchPipeline

WINDOW = 32


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    """The tiny BERT reading 32 tokens: a few sentences make a long document."""
    config = EncoderConfig(
        model=str(tiny_bert_dir), max_length=WINDOW, similarity="cos", pooling="mean",
        precision="fp32", device="cpu",
    )  # fmt: skip
    return BiEncoder.load(config)


def long_text(doc: int, sentences: int = 12) -> str:
    return " ".join(f"Sentence {j} of doc {doc} speaks of item{doc}x{j}." for j in range(sentences))


def long_docs(n: int = 4) -> list[dict]:
    docs = [{"id": f"d{i}", "title": f"Doc {i}", "text": long_text(i)} for i in range(n)]
    return docs + [{"id": "short", "title": "Short", "text": "Fits in one window."}]


# -- windows ------------------------------------------------------------------------------


def offsets_of(words: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """A text of words separated by one space, and each word's characters (one token each)."""
    text, offsets = "", []
    for word in words:
        if text:
            text += " "
        offsets.append((len(text), len(text) + len(word)))
        text += word
    return text, offsets


def test_windows_with_a_stride_cover_every_token_and_overlap_by_the_stride():
    text, offsets = offsets_of([f"w{i}" for i in range(25)])
    assert token_spans(offsets, text, 10, 0, False) == [(0, 10), (10, 20), (20, 25)]
    assert token_spans(offsets, text, 10, 3, False) == [(0, 10), (7, 17), (14, 24), (21, 25)]
    assert token_spans(offsets, text, 30, 5, False) == [(0, 25)]
    assert token_spans([], "", 10, 0, False) == [(0, 0)]


def test_a_cut_moves_back_to_a_sentence_end_in_the_last_fifth_only():
    words = [f"w{i}" for i in range(30)]
    words[8] += "."  # a sentence ends after token 8: inside the last 20% of a 10-token window
    words[3] += "."  # one far from the cut: never used
    text, offsets = offsets_of(words)
    assert token_spans(offsets, text, 10, 0, True)[0] == (0, 9)
    assert token_spans(offsets, text, 10, 0, False)[0] == (0, 10)
    words[8] = "w8"  # only the far one is left: the cut stays at the window's end
    text, offsets = offsets_of(words)
    assert token_spans(offsets, text, 10, 0, True)[0] == (0, 10)


def test_a_line_break_ends_a_sentence_too():
    text, offsets = offsets_of([f"w{i}" for i in range(20)])
    at = offsets[9][0] - 1  # the space before token 9 becomes a line break
    text = text[:at] + "\n" + text[at + 1 :]
    assert token_spans(offsets, text, 10, 0, True)[0] == (0, 9)


def test_a_cut_inside_a_word_moves_to_the_word_s_start():
    # "alpha" "##beta" "##gamma" as three adjacent tokens: no cut between them.
    text = "one two three alphabetagamma four five"
    offsets = [(0, 3), (4, 7), (8, 13), (14, 19), (19, 23), (23, 28), (29, 33), (34, 38)]
    assert token_spans(offsets, text, 5, 0, False) == [(0, 3), (3, 8)]


def test_settings_are_checked():
    with pytest.raises(DotcatError, match="stride"):
        PassageConfig(window=64, stride=40)
    with pytest.raises(DotcatError, match="window must be >= 8"):
        PassageConfig(window=4)
    with pytest.raises(DotcatError, match="longer than the encoder"):
        PassageConfig(window=512).resolved(256)
    assert PassageConfig(window=256).resolved(256).stride == 64  # a quarter of the window
    assert PassageConfig.from_manifest(None) == PassageConfig(enabled=False)


# -- the splitter, with a real tokenizer --------------------------------------------------


def test_passages_fit_the_window_and_their_offsets_point_at_their_text(encoder):
    splitter = Splitter.for_encoder(encoder, PassageConfig(stride=8))
    title, text = "A title", long_text(7, sentences=20)
    spans = splitter.spans(title, text)
    assert len(spans) > 5 and spans[0][0] == 0
    for (a, b), (c, _) in zip(spans, spans[1:], strict=False):
        assert c < b  # consecutive passages overlap (stride 8)
        assert c > a  # and move on
    covered = np.zeros(len(text), dtype=bool)
    for a, b in spans:
        covered[a:b] = True
        passage = document_text(title, text[a:b])
        tokens = encoder.tokenizer(passage)["input_ids"]
        assert len(tokens) <= WINDOW, (passage, len(tokens))  # the encoder never cuts one
        assert text[a:b] == text[a:b].strip() and text[a:b] in text
    gaps = [c for c, seen in zip(text, covered, strict=True) if not seen]
    assert set(gaps) <= {" "}  # every word is in a passage
    # sentence-aware: most passages end a sentence
    assert sum(text[a:b].endswith(".") for a, b in spans[:-1]) >= len(spans) // 2


def test_a_document_that_fits_is_one_passage_its_whole_text(encoder):
    splitter = Splitter.for_encoder(encoder, PassageConfig())
    assert splitter.spans("Title", "short text") == [(0, 10)]
    assert splitter.spans("", "") == [(0, 0)]
    assert Splitter.for_encoder(encoder, PassageConfig(enabled=False)) is None


# -- indexes ------------------------------------------------------------------------------


def test_an_index_of_passages_records_them(encoder, tmp_path):
    out = tmp_path / "idx"
    manifest = build_index(long_docs(), out, encoder, IndexConfig(device="cpu", bm25=True),
                           show_progress=False)  # fmt: skip
    passages = manifest.passages
    assert passages["window"] == WINDOW and passages["stride"] == WINDOW // 4
    assert passages["sentence_aware"] is True
    assert manifest.documents["count"] == 5 and passages["count"] == manifest.faiss["ntotal"] > 5
    assert manifest.bm25["passages"] == passages["count"]
    index = DenseIndex(out, device="cpu")
    refs = index.locate(range(len(index)))
    assert [r.doc_id for r in refs.values()].count("short") == 1
    docs = {d["id"]: d for d in long_docs()}
    for ref in refs.values():  # every passage's text is its document's, at its offsets
        texts = index.passage_texts([ref])
        doc = docs[ref.doc_id]
        assert texts[ref.pid] == document_text(doc["title"], doc["text"][ref.start : ref.stop])
    parts = [r.part for r in refs.values() if r.doc_id == "d1"]
    assert parts == list(range(len(parts)))


def test_the_default_window_is_128_tokens_or_the_encoder_s_max_length():
    assert (
        PassageConfig().resolved(256).window == 128 and PassageConfig().resolved(256).stride == 32
    )
    assert PassageConfig().resolved(32).window == 32 and PassageConfig().resolved(32).stride == 8
    assert PassageConfig(window=200).resolved(256).stride == 50


def test_by_default_documents_are_split_where_at_least_half_are_several_windows_long(encoder):
    splitter = Splitter.for_encoder(encoder, PassageConfig())
    long, short = ("Doc", long_text(0)), ("Short", "Fits in one window.")
    assert not splitter.fits(*long, 2 * WINDOW)
    assert splitter.splits([long, long, short, short]) == (True, 2)  # half: split
    assert splitter.splits([long, short, short]) == (False, 1)
    assert splitter.splits([short, short]) == (False, 0)
    # A little longer than the encoder reads (up to twice): cut, and counted as cut.
    slightly = ("Doc", long_text(0, sentences=3))
    assert not splitter.fits(*slightly, WINDOW) and splitter.fits(*slightly, 2 * WINDOW)
    assert splitter.splits([slightly, slightly, slightly]) == (False, 3)
    assert splitter.splits([slightly, long, long]) == (True, 3)
    # Long means longer than the encoder reads, whatever the passage window.
    narrow = Splitter.for_encoder(encoder, PassageConfig(window=16))
    medium = ("Medium", "a few plain words that need more than sixteen tokens in all here")
    assert not narrow.fits(*medium) and narrow.fits(*medium, WINDOW)
    assert narrow.splits([medium, medium]) == (False, 0)
    assert Splitter.for_encoder(encoder, PassageConfig(False)) is None


def test_a_long_document_among_short_ones_is_split_on_its_own(encoder, tmp_path, caplog):
    """The per-document rule: where most documents are short, only those more than
    SPLIT_FACTOR times the max length are split (and counted); the others are one passage,
    cut at the max length as before; an index where none is that long has no passages."""
    shorts = [{"id": f"s{i}", "title": "Short", "text": f"Note {i} fits."} for i in range(3)]
    # one long of 4: a sentence is over 12 tokens, the test encoder's max length 32
    docs = [{"id": "d1", "title": "Doc 1", "text": long_text(1, 5 * SPLIT_FACTOR)}, *shorts]
    with caplog.at_level("INFO", logger="dotcat.index.build"):
        mixed = build_index(docs, tmp_path / "mixed", encoder,
                            IndexConfig(device="cpu", bm25=True), show_progress=False)  # fmt: skip
    longer = SPLIT_FACTOR * encoder.max_length
    assert mixed.passages["split_longer_than"] == longer
    assert mixed.passages["count"] == mixed.faiss["ntotal"] > 4  # the long one split
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"1 of 4 documents are longer than {longer} tokens: split into passages" in said
    index = DenseIndex(tmp_path / "mixed", device="cpu")
    parts = index.store.passage_spans(0, index.manifest.next_vector_id)
    assert sorted({pos for _, pos, part, _, _ in parts if part > 0}) == [0]  # only d1 split
    short = build_index(shorts, tmp_path / "short", encoder, IndexConfig(device="cpu", bm25=True),
                        show_progress=False)  # fmt: skip
    assert short.passages is None and short.faiss["ntotal"] == 3
    forced = build_index(
        docs,
        tmp_path / "forced",
        encoder,
        IndexConfig(device="cpu", bm25=True, passages=True),
        show_progress=False,
    )
    assert forced.passages["count"] == forced.faiss["ntotal"] > 4


def test_split_over_two_splits_mid_length_documents_ranked_by_lead(encoder, tmp_path):
    """``split_over=2``: a document past two windows among short ones is split (under the
    default it is cut), and ``auto`` ranks such an index by ``lead``; the default by MaxP."""
    shorts = [{"id": f"s{i}", "title": "Short", "text": f"Note {i} fits."} for i in range(3)]
    docs = [{"id": "d1", "title": "Doc 1", "text": long_text(1, 6)}, *shorts]  # ~80 tokens
    config = IndexConfig(device="cpu", passages=PassageConfig(split_over=2))
    mid = build_index(docs, tmp_path / "mid", encoder, config, show_progress=False)
    assert mid.passages["split_longer_than"] == 2 * encoder.max_length
    assert mid.faiss["ntotal"] > 4 and "split_over" not in mid.passages
    assert resolve(AGGREGATION, mid.passages) == "lead"
    cut = build_index(docs, tmp_path / "cut", encoder, IndexConfig(device="cpu"),
                      show_progress=False)  # fmt: skip
    assert cut.passages is None and cut.faiss["ntotal"] == 4
    with pytest.raises(DotcatError, match="split_over"):
        PassageConfig(True, split_over=2)


def test_the_doc_store_disagreeing_with_the_manifest_is_refused(encoder, tmp_path):
    out = tmp_path / "idx"
    build_index(long_docs(), out, encoder, IndexConfig(device="cpu"), show_progress=False)
    with sqlite3.connect(out / "docstore.sqlite") as conn:
        conn.execute("DROP TABLE passages")
    with pytest.raises(DotcatError, match="no passages table"):
        DenseIndex(out, device="cpu")


def _old_layout(path):
    """An index as dotcat wrote it before passages: no ``passages`` key in its manifest."""
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest.pop("passages") is None
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.kernels
def test_an_index_from_before_passages_loads_and_searches_as_before(encoder, tmp_path):
    """Built with passages off and its manifest written as before (no passage key): one vector
    per document, FAISS ids are positions, and every result is what FAISS ranks."""
    out = tmp_path / "old"
    config = IndexConfig(device="cpu", bm25=True, passages=PassageConfig(enabled=False))
    build_index(long_docs(), out, encoder, config, show_progress=False)
    _old_layout(out)
    index = DenseIndex(out, device="cpu")
    assert len(index) == index.document_count == 5 and index.passages is None
    with sqlite3.connect(out / "docstore.sqlite") as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"docs", "fields", "field_kinds"}  # no passages table
    pipeline = SearchPipeline(out, PipelineConfig(device="cpu"))
    query = "Doc 2 " + long_text(2)[:60]
    vector = pipeline.encoder.encode_queries([query])
    scores, ids = index.search(vector, 5)
    names = index.doc_ids(ids[0])
    expected = [(names[i], float(s)) for s, i in zip(scores[0], ids[0], strict=True)]
    found = pipeline.run({"q": query}, 5, first_stage="dense")["q"]
    assert [d for d, _ in found] == [d for d, _ in expected]
    np.testing.assert_allclose([s for _, s in found], [s for _, s in expected], atol=1e-6)
    bm25 = pipeline.run({"q": "item3x5"}, 3, first_stage="bm25")["q"]
    assert bm25[0][0] == "d3"
    hits = pipeline.search(query, 2)
    assert hits[0].start is None and hits[0].passage == hits[0].text  # matched whole


@pytest.mark.kernels
def test_the_answer_beyond_the_first_window_is_found_with_passages_only(encoder, tmp_path):
    """A guide whose answer sits in its third passage, and a short near-copy of that passage:
    with passages the guide's own passage matches the question exactly; cut at the window, the
    guide is what its opening says, and the near-copy wins."""
    opening = "The guide opens with general advice about packing, weather and maps for hikers. "
    answer = "Boil the kettle for seven minutes before adding the dried lentils to the pot."
    text = opening * 3 + "Later chapters cover other things entirely. " + answer + " The end."
    title = "Trail guide"
    spans = Splitter.for_encoder(encoder, PassageConfig()).spans(title, text)
    start, stop = spans[2]
    assert start > spans[0][1]  # beyond the first window
    passage = text[start:stop]
    assert "lentils" in passage and "lentils" not in text[: spans[0][1]]
    near_copy = passage.replace("seven", "nine").replace("lentils", "beans")
    docs = [
        {"id": "guide", "title": title, "text": text},
        {"id": "copy", "title": title, "text": near_copy},
        {"id": "other", "title": "Recipes", "text": "Bake the bread at a high heat for an hour."},
    ]
    query = document_text(title, passage)
    found = {}
    for name, passages in (("passages", PassageConfig(True)), ("cut", PassageConfig(False))):
        out = tmp_path / name
        build_index(docs, out, encoder, IndexConfig(device="cpu", bm25=False, passages=passages),
                    show_progress=False)  # fmt: skip
        found[name] = SearchPipeline(out, PipelineConfig(device="cpu")).search(query, 3)
    best = found["passages"][0]
    assert best.doc_id == "guide" and best.score == pytest.approx(1.0, abs=1e-4)
    assert (best.start, best.stop) == (start, stop) and "lentils" in best.passage
    assert found["cut"][0].doc_id == "copy"  # truncation: the guide is not found first
    assert found["cut"][0].score > next(h.score for h in found["cut"] if h.doc_id == "guide")


@pytest.mark.kernels
def test_bm25_and_the_hybrid_point_at_the_passage_bm25_matched(encoder, tmp_path):
    """BM25 ranks the long document by the passage that holds the word; in a hybrid where
    BM25 gave the document most of its score, that passage comes first too."""
    text = long_text(5, sentences=16)
    docs = [{"id": "long", "title": "Long", "text": text}, *long_docs(2)]
    out = tmp_path / "idx"
    build_index(docs, out, encoder, IndexConfig(device="cpu", bm25=True), show_progress=False)
    for stage, fusion in (("bm25", {}), ("hybrid", {"fusion": "linear", "fusion_weight": 0.2})):
        config = PipelineConfig(device="cpu", first_stage=stage, **fusion)
        (hit, *_) = SearchPipeline(out, config).search("speaks of item5x14", 3)
        assert hit.doc_id == "long" and hit.start > 0
        assert hit.passage == text[hit.start : hit.stop]
        assert re.search(r"\bitem5x14\b", hit.passage), (stage, hit.passage)


def test_summed_passage_scores_are_labelled_as_sums(encoder, tmp_path):
    """Under ``aggregation="sum"`` a document's score is its passages' scores added (over 1
    for cosines): its ``score_kind`` says so; fusion and an index of whole documents (one
    passage each: the sum is the score) keep theirs."""
    docs = long_docs()
    query = "Sentence 3 of doc 2 speaks of item2x3."
    for name, passages in (("split", PassageConfig()), ("whole", PassageConfig(False))):
        config = IndexConfig(device="cpu", bm25=True, passages=passages)
        build_index(docs, tmp_path / name, encoder, config, show_progress=False)
    for stage, kind in (("dense", "cosine-sum"), ("bm25", "bm25-sum"), ("hybrid", "fused")):
        pipeline = SearchPipeline(tmp_path / "split", first_stage=stage, aggregation="sum",
                                  aggregate_top=3, device="cpu")  # fmt: skip
        hits = pipeline.search(query, 3)
        assert {h.score_kind for h in hits} == {kind} == {pipeline.score_kind()}, stage
        assert stage != "dense" or hits[0].score > 1  # no cosine
    maxp = SearchPipeline(tmp_path / "split", first_stage="dense", device="cpu")
    assert maxp.score_kind() == "cosine"
    whole = SearchPipeline(tmp_path / "whole", first_stage="dense", aggregation="sum", device="cpu")
    assert whole.search(query, 1)[0].score_kind == "cosine"


# -- the command line and the Python API ----------------------------------------------------


@pytest.mark.kernels
def test_the_command_line_and_python_set_the_passages_and_the_aggregation(tiny_bert_dir, tmp_path):
    """``dotcat index --passage-window/--passage-stride/--no-passages`` are the manifest's
    record; ``dotcat search --aggregation`` ranks by it; ``IndexConfig(passages=False)`` is
    passages off; a bad value is one line naming the option."""
    from typer.testing import CliRunner

    from dotcat.cli import app

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in long_docs()), encoding="utf-8")
    model = ["--model", str(tiny_bert_dir), "--pooling", "mean", "--similarity", "cos",
             "--max-length", str(WINDOW), "--device", "cpu", "--precision", "fp32"]  # fmt: skip

    def invoke(*args):
        return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)

    split = tmp_path / "split"
    result = invoke("-q", "index", corpus, split, *model, "--passage-window", 24,
                    "--passage-stride", 4, "--no-sentence-aware")  # fmt: skip
    assert result.exit_code == 0, result.output
    recorded = json.loads((split / "manifest.json").read_text())["passages"]
    assert (recorded["window"], recorded["stride"], recorded["sentence_aware"]) == (24, 4, False)
    assert recorded["count"] > 5

    whole = tmp_path / "whole"
    assert invoke("-q", "index", corpus, whole, *model, "--no-passages").exit_code == 0
    manifest = json.loads((whole / "manifest.json").read_text())
    assert manifest.get("passages") is None and manifest["faiss"]["ntotal"] == 5
    assert IndexConfig(passages=False).passages == PassageConfig(enabled=False)

    found = []
    for aggregation in ("maxp", "firstp"):
        result = invoke("search", split, "item2x9", "--first-stage", "bm25", "--json",
                        "--aggregation", aggregation, "--device", "cpu")  # fmt: skip
        assert result.exit_code == 0, result.output
        found.append([hit["doc_id"] for hit in json.loads(result.output)])
    # item2x9 sits beyond d2's first passage: MaxP finds d2 by it, FirstP cannot
    assert found[0][0] == "d2" and "d2" not in found[1]

    result = CliRunner().invoke(app, ["index", str(corpus), str(tmp_path / "bad"),
                                      "--passage-window", "4"])  # fmt: skip
    assert result.exit_code == 2 and "--passage-window must be >= 8, got 4" in result.output
    for args, said in (
        (["--split-over", "0"], "--split-over must be >= 1, got 0"),
        (["--passages", "--split-over", "2"], "--split-over applies where the build decides"),
    ):
        result = CliRunner().invoke(app, ["index", str(corpus), str(tmp_path / "bad"), *args])
        assert result.exit_code == 2 and said in result.output, result.output  # fmt: skip
    result = CliRunner().invoke(app, ["search", str(split), "q", "--aggregation", "meanp"])
    expected = "--aggregation must be one of auto, maxp, firstp, lead, sum"
    assert result.exit_code == 2 and expected in result.output
