"""dotcat.search.calibrate and `dotcat calibrate`: the interpolation weight chosen on a
corpus's own pseudo-queries, recorded in the index, followed by the pipeline."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data.pseudo import pseudo_queries, write_pseudo_dataset
from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate
from dotcat.evaluation.choice import choose
from dotcat.index import IndexConfig, build_index
from dotcat.index.manifest import Manifest
from dotcat.models import EncoderConfig
from dotcat.options import RERANK_DEPTH
from dotcat.search.calibrate import (
    WEIGHTS,
    calibrate_reranker,
    pseudo_scores,
    record_corpus_weight,
    sample_documents,
)
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.search.reranker import Reranker

TOPICS = [
    "insulin glucose pancreas", "neuron synapse dendrite", "tumor chemotherapy radiation",
    "virus antibody vaccine", "bone calcium skeleton", "liver bile digestion",
    "kidney urine filtration", "lung oxygen breathing", "heart artery pressure",
    "skin melanin sunlight", "muscle protein exercise", "blood platelet clotting",
    "thyroid hormone metabolism", "stomach acid enzyme", "retina light vision",
    "cochlea sound hearing", "gene mutation cancer", "sleep memory dreams",
    "bacteria antibiotic resistance", "fever infection immune", "diet fiber bowel",
    "smoking nicotine addiction", "malaria mosquito parasite", "asthma allergy airway",
    "obesity fat appetite", "stroke brain clot", "pregnancy placenta fetus",
    "dementia plaque aging",
]  # fmt: skip
FILLER = "Many patients joined the trial and the results were reported after careful review."


def _docs() -> list[dict]:
    """Documents whose titles are usable pseudo-queries: three topic words, which the text
    repeats among shared filler sentences (so BM25 finds the answer and has rivals)."""
    docs = []
    for i, topic in enumerate(TOPICS):
        a, b, c = topic.split()
        text = f"This study of {a} looks at {b} in detail. {FILLER} Effects on {c} were large."
        docs.append({"_id": f"d{i}", "title": f"{a} {b} {c}", "text": text})
    return docs


@pytest.fixture(scope="module")
def index(tmp_path_factory, tiny_bert_dir):
    root = tmp_path_factory.mktemp("calibrate")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in _docs()))
    out = root / "index"
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(corpus, out, encoder, IndexConfig(bm25=True), show_progress=False)
    return out


def _pipeline(index, cat=None, **settings) -> SearchPipeline:
    config = PipelineConfig(
        device="cpu", precision="fp32", rerank=str(cat) if cat else None, **settings
    )
    return SearchPipeline(index, config)


@pytest.mark.kernels
def test_a_re_ranker_worse_than_the_first_stage_on_the_corpus_is_weighted_down(
    index, tiny_cat_dir, tmp_path
):
    pipeline = _pipeline(index, tiny_cat_dir, depth=10)
    weight = calibrate_reranker(pipeline, queries=25, show_progress=False)
    assert (weight.queries, weight.documents, weight.depth) == (25, len(TOPICS), 10)
    assert weight.first_stage == "hybrid" and weight.pseudo["from_titles"] == len(TOPICS)
    dense = calibrate_reranker(
        _pipeline(index, tiny_cat_dir, depth=10, first_stage="dense"),
        queries=25,
        show_progress=False,
    )  # fmt: skip (no fusion there)
    assert dense.first_stage == "dense" and dense.queries == 25
    assert weight.fingerprint == pipeline.reranker.cross_encoder.fingerprint
    scores = {float(a): s for a, s in weight.scores.items()}
    assert sorted(scores) == list(WEIGHTS)
    # The weight is the choice rule's on the pseudo-queries' per-query scores, 0.2 the prior.
    found = pseudo_scores(pipeline, queries=25, show_progress=False)
    choice = choose(found.per_query, 0.2, WEIGHTS)
    assert (weight.alpha, weight.best) == (choice.chosen, choice.best)
    assert weight.choice == choice.to_json() and weight.choice["prior"] == "0.2"
    assert scores == pytest.approx(choice.means, abs=1e-6)
    # Weight 0 is the pipeline's own first stage over the pseudo corpus, judged against the
    # document each title came from; rebuilt here by hand.
    pseudo = pseudo_queries(
        [d for d in sample_documents(pipeline, 10_000, 0)], max_queries=25, seed=0
    )
    data = write_pseudo_dataset(pseudo, tmp_path / "pseudo")
    build_index(
        data / "corpus.jsonl", tmp_path / "pseudo_index", pipeline.encoder,
        IndexConfig(bm25=True), show_progress=False,
    )  # fmt: skip
    run = _pipeline(tmp_path / "pseudo_index").run({q: t for q, t, _ in pseudo.queries}, 10)
    qrels = {q: {d: 1} for q, _, d in pseudo.queries}
    assert scores[0.0] == pytest.approx(evaluate(run, qrels, ["nDCG@10"]).aggregate["nDCG@10"])
    # The titles' words are in their documents: the first stage finds nearly all of them, and
    # a random cross-encoder does worse, so the corpus gives it little weight.
    assert scores[0.0] > 0.8 and scores[1.0] < scores[0.0]
    assert weight.alpha <= 0.5


@pytest.mark.kernels
def test_the_recorded_weight_is_followed_before_the_dev_weight(index, tiny_cat_dir, tmp_path):
    pipeline = _pipeline(index, tiny_cat_dir, depth=10)
    before = pipeline.run({"q": "insulin glucose"}, 5, rerank=False)
    weight = calibrate_reranker(pipeline, queries=25, show_progress=False)
    again = calibrate_reranker(pipeline, queries=25, show_progress=False)
    assert {**again.to_json(), "created": ""} == {**weight.to_json(), "created": ""}
    weight.alpha = 0.4  # a weight the model does not record, to see which one is followed
    record_corpus_weight(index, weight)
    assert Manifest.read(index).rerank[weight.fingerprint]["alpha"] == 0.4
    # A copy of the model (same weights, same fingerprint) that records a dev weight.
    model = tmp_path / "cat"
    shutil.copytree(tiny_cat_dir, model)
    (model / "dotcat_cross_encoder.json").write_text(
        json.dumps({"max_length": 64, "interpolation_alpha": 0.9, "interpolation_dev_scores": {}})
    )
    followed = _pipeline(index, model, depth=10)
    assert (followed.reranker.alpha, followed.reranker.alpha_source) == (0.4, "corpus-chosen")
    given = _pipeline(index, model, depth=10, interpolate=1)
    assert (given.reranker.alpha, given.reranker.alpha_source) == (1.0, "given")
    ce = followed.reranker.cross_encoder
    other = Reranker(ce, corpus_weights={"another model": {"alpha": 0.1}})
    assert (other.alpha, other.alpha_source) == (0.9, "dev-chosen")
    for broken in ({"alpha": 2}, {"alpha": "high"}, {}):
        with pytest.raises(DotcatError, match="re-ranking weight recorded for model"):
            Reranker(ce, corpus_weights={ce.fingerprint: broken})
    # Only the manifest changed: the index answers as before.
    assert _pipeline(index).run({"q": "insulin glucose"}, 5, rerank=False) == before
    record_corpus_weight(index, again)  # a new calibration of the model replaces the old
    assert Manifest.read(index).rerank[weight.fingerprint]["alpha"] == again.alpha


@pytest.mark.kernels
def test_a_corpus_without_pseudo_queries_is_refused(tiny_bert_dir, tiny_cat_dir, tmp_path):
    corpus = tmp_path / "short.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": "too short"}) + "\n"
                for i in range(30))
    )  # fmt: skip
    out = tmp_path / "index"
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(corpus, out, encoder, IndexConfig(bm25=True), show_progress=False)
    with pytest.raises(DotcatError, match=r"only 0 pseudo-queries from 30 documents"):
        calibrate_reranker(_pipeline(out, tiny_cat_dir), show_progress=False)


@pytest.mark.kernels
def test_cli_calibrate_records_and_search_follows(index, tiny_cat_dir, tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(index, copy)
    runner = CliRunner()
    args = ["calibrate", str(copy), "--rerank", str(tiny_cat_dir), "--depth", "8"]
    args += ["--queries", "22", "--precision", "fp32", "--device", "cpu"]
    dry = runner.invoke(app, [*args, "--no-record"], catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert "not recorded (--no-record)" in dry.output and "<- chosen" in dry.output
    assert "chosen by the paired one-standard-error rule: " in dry.output
    assert (Manifest.read(copy).rerank or {}) == (Manifest.read(index).rerank or {})
    result = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    weight = json.loads(result.stdout)
    assert (weight["queries"], weight["depth"]) == (22, 8)
    assert Manifest.read(copy).rerank[weight["fingerprint"]] == weight
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tinsulin glucose\n")
    searched = ["search", str(copy), "--queries", str(queries), "--output", str(tmp_path / "r"),
                "--rerank", str(tiny_cat_dir), "--precision", "fp32"]  # fmt: skip
    search = runner.invoke(app, searched, catch_exceptions=False)
    assert search.exit_code == 0, search.output
    stage = weight["first_stage"]  # re-ranked at the default depth, not the one calibrated
    advice = f"was chosen re-ranking {stage} at depth 8, not {stage} at depth {RERANK_DEPTH}: "
    assert advice + f"`dotcat calibrate {copy} --rerank {tiny_cat_dir}" in search.output
    searched[5] = str(tmp_path / "r8")
    same = runner.invoke(app, [*searched, "--depth", "8"], catch_exceptions=False)
    assert same.exit_code == 0 and "was chosen re-ranking" not in same.output, same.output
    if weight["alpha"]:
        assert f"interpolation {weight['alpha']:g}, corpus-chosen" in search.output
    else:  # the corpus did not vouch for this re-ranker: the first stage's ranking
        assert "has weight 0 here (corpus-chosen)" in search.output


@pytest.mark.kernels
def test_at_weight_0_the_first_stage_answers_and_the_cross_encoder_is_not_run(
    index, tiny_cat_dir, monkeypatch
):
    pipeline = _pipeline(index, tiny_cat_dir, depth=10, interpolate=0)
    queries = {"a": "insulin glucose", "b": "virus antibody vaccine"}

    def refuse(*args, **kwargs):
        raise AssertionError("the cross-encoder ran at weight 0")

    monkeypatch.setattr(pipeline.reranker.cross_encoder, "score", refuse)
    assert pipeline.run(queries, 5) == pipeline.run(queries, 5, rerank=False)
    first = pipeline.run(queries, 10, rerank=False)
    assert pipeline.reranker.rerank(first, queries, {}) == first
