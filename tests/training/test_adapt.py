"""dotcat adapt: pseudo-queries -> calibration -> plan -> negatives -> training, on a tiny BERT."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.training.toy import ADAPT_TOPICS as TOPICS
from tests.training.toy import write_adapt_corpus

from dotcat.errors import DotcatError
from dotcat.training.adapt import RECORD, _plan, adapt, interleave
from dotcat.training.config import DISTILL_NEGATIVES, AdaptConfig


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """90 documents: 70 with titles, 14 untitled with several sentences, 6 too short."""
    return write_adapt_corpus(tmp_path_factory.mktemp("adapt") / "corpus.jsonl")


def _config(corpus: Path, out: Path, model: Path, **overrides) -> AdaptConfig:
    settings = dict(
        corpus=corpus,
        out_dir=out,
        model=str(model),
        budget_minutes=30,
        batch_size=8,
        cache_chunk=None,
        max_length=48,
        query_max_length=16,
        lr=1e-3,
        bf16="off",
        device="cpu",
        show_progress=False,
    )
    return AdaptConfig(**{**settings, **overrides})


@pytest.fixture(scope="module")
def adapted(corpus, tiny_bert_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("adapted") / "model"
    return adapt(_config(corpus, out, tiny_bert_dir))


def test_the_output_is_a_bert_dot_that_loads_everywhere(adapted, tiny_bert_dir):
    from sentence_transformers import SentenceTransformer

    from dotcat.models import BiEncoder, EncoderConfig
    from dotcat.training.model import TrainableBiEncoder

    texts = ["insulin and neuron", "a glacier on a volcano"]
    dotcat = BiEncoder.load(EncoderConfig(model=str(adapted), device="cpu", precision="fp32"))
    st = SentenceTransformer(str(adapted), device="cpu")
    np.testing.assert_allclose(st.encode(texts), dotcat.encode(texts), atol=1e-5)
    base = TrainableBiEncoder.from_pretrained(tiny_bert_dir).encode(texts)
    assert not np.allclose(base, dotcat.encode(texts), atol=1e-4)  # it did train


def test_the_record_says_what_was_made_and_how_long_each_step_took(adapted):
    record = json.loads((adapted / RECORD).read_text())
    assert record["status"] == "finished" and record["elapsed_seconds"] > 0
    steps = record["steps"]
    assert list(steps) == ["pseudo_queries", "calibration", "plan", "negatives", "training"]
    assert all(step["seconds"] >= 0 for step in steps.values())
    pseudo = steps["pseudo_queries"]["result"]
    assert (pseudo["from_titles"], pseudo["from_sentences"], pseudo["too_short"]) == (70, 14, 6)
    assert pseudo["queries"] == 84 and pseudo["documents"] == 90
    plan = steps["plan"]["result"]
    assert plan["queries"] == 84 and plan["dense_negatives"] is True  # the budget allows all
    assert steps["negatives"]["result"]["method"] == "bm25+dense"
    calibration = steps["calibration"]["result"]
    assert calibration["examples_per_second"] > 0
    assert calibration["batch_size"] == 8  # timed at the batch size the run trains with


def test_calibration_times_whole_batches_of_the_run_s_size_after_one_untimed(
    adapted, tiny_bert_dir, monkeypatch
):
    from dotcat.training import rates as calibrate

    seen: list[int] = []
    real = calibrate._backward
    monkeypatch.setattr(
        calibrate,
        "_backward",
        lambda encoder, batch, *rest: (seen.append(len(batch)), real(encoder, batch, *rest)),
    )
    rates = calibrate.measure_rates(
        adapted / "adapt" / "all",
        str(tiny_bert_dir),
        batch_size=5,
        chunk_size=None,
        max_length=48,
        query_max_length=16,
        bf16="off",
        device="cpu",
        negatives=2,
    )
    assert seen == [5] * (1 + calibrate.TIMED_BATCHES)  # the warm-up is a whole batch too
    seen.clear()
    calibrate.measure_rates(
        adapted / "adapt" / "all", str(tiny_bert_dir), batch_size=5, chunk_size=None,
        max_length=48, query_max_length=16, bf16="off", device="cpu", warmup=2,
    )  # fmt: skip
    assert seen == [2] + [5] * calibrate.TIMED_BATCHES  # the earlier way, for the benchmark
    assert rates["batch_size"] == 5 and rates["negatives"] == 2
    assert rates["examples_per_second"] > 0 and rates["documents_per_second"] > 0


def test_every_pseudo_query_points_at_its_own_document(adapted, corpus):
    from dotcat.training.data import load_negatives

    source = {d["_id"]: d for d in map(json.loads, corpus.read_text().splitlines())}
    data = adapted / "adapt" / "train"
    queries = {q["_id"]: q["text"] for q in _jsonl(data / "queries.jsonl")}
    pseudo_docs = {d["_id"]: d for d in _jsonl(data / "corpus.jsonl")}
    lines = (data / "qrels" / "train.tsv").read_text().splitlines()[1:]
    pairs = [tuple(line.split("\t")[:2]) for line in lines]
    assert len(pairs) == len(queries) == 84
    for qid, doc_id in pairs:
        assert qid == f"pq-{doc_id}"
        text, original = queries[qid], source[doc_id]
        if original["title"]:
            assert text == original["title"]
        else:  # a sentence cut out of its own document, and gone from it
            assert text in original["text"] and text not in pseudo_docs[doc_id]["text"]
        assert pseudo_docs[doc_id]["title"] == ""
    negatives, _ = load_negatives(adapted / "adapt" / "negatives.jsonl.gz")
    for qid, doc_id in pairs:
        assert doc_id not in negatives[qid]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_interleave_alternates_sources_and_drops_repeats():
    bm25 = {"q": ["a", "b", "c"], "r": []}
    dense = {"q": ["b", "x"], "r": ["y"]}
    assert interleave([bm25, dense]) == {"q": ["a", "b", "x", "c"], "r": ["y"]}


def test_the_plan_follows_the_budget_and_skips_dense_mining_it_cannot_afford(tmp_path):
    pseudo = {"queries": 5000, "documents": 20000}
    rates = {"examples_per_second": 2.0, "documents_per_second": 30.0}
    config = AdaptConfig(corpus=tmp_path, out_dir=tmp_path / "o", budget_minutes=45)
    plan = _plan(config, pseudo, rates, spent=60.0)
    # encoding 20000 docs takes 667 s < 900 s (a third of 45 min): dense mining stays
    assert plan["dense_negatives"] is True
    assert plan["queries"] == int(0.85 * (2700 - 60 - 20000 / 30) * 2.0)
    slow = _plan(config, pseudo, {**rates, "documents_per_second": 10.0}, spent=60.0)
    assert slow["dense_negatives"] is False and "budget" in slow["why_no_dense"]
    assert slow["queries"] == min(5000, int(0.85 * 2640 * 2.0))
    with pytest.raises(DotcatError, match="more minutes"):
        _plan(AdaptConfig(corpus=tmp_path, out_dir=tmp_path, budget_minutes=1), pseudo, rates, 55)


def test_the_plan_pays_for_the_teacher_s_pairs(tmp_path):
    pseudo = {"queries": 5000, "documents": 100}
    rates = {"examples_per_second": 2.0, "documents_per_second": 1000.0}
    config = AdaptConfig(corpus=tmp_path, out_dir=tmp_path / "o", budget_minutes=45)
    alone = _plan(config, pseudo, rates, spent=0.0)
    taught = AdaptConfig(corpus=tmp_path, out_dir=tmp_path / "o", budget_minutes=45, teacher="t")
    plan = _plan(taught, pseudo, {**rates, "teacher_pairs_per_second": 10.0}, spent=0.0)
    # each pseudo-query: 0.5 s of training, and its positive and negatives at 10 pairs/s
    per_query = 0.5 + (1 + DISTILL_NEGATIVES) / 10.0
    left = 2700 - 100 / 1000.0
    assert alone["queries"] == int(0.85 * left / 0.5)
    assert plan["queries"] == int(0.85 * left / per_query) < alone["queries"]
    assert plan["estimated_training_seconds"] == round(plan["queries"] * per_query, 1)


def test_the_plan_pays_for_the_lexical_teacher_s_dense_half(tmp_path):
    pseudo = {"queries": 5000, "documents": 100}
    rates = {"examples_per_second": 2.0, "documents_per_second": 20.0}
    config = AdaptConfig(
        corpus=tmp_path, out_dir=tmp_path / "o", budget_minutes=45, teacher="bm25", n_negatives=3
    )
    plan = _plan(config, pseudo, rates, spent=0.0)  # no cross-encoder rate is needed
    # BM25 is free; the dense score encodes the positive's and each negative's document
    per_query = 0.5 + (1 + 3) / 20.0
    assert plan["queries"] == int(0.85 * (2700 - 100 / 20.0) / per_query)


def test_a_lexical_teacher_labels_the_pseudo_pairs(corpus, tiny_bert_dir, tmp_path):
    out = tmp_path / "model"
    adapt(_config(corpus, out, tiny_bert_dir, max_queries=64, teacher="bm25"))
    record = json.loads((out / RECORD).read_text())
    assert "teacher_pairs_per_second" not in record["steps"]["calibration"]["result"]
    teacher = record["steps"]["training"]["result"]["teacher"]
    assert teacher["model"] == "bm25" and teacher["alpha"] == 0.5
    assert teacher["pairs"] >= 64 * 2 and teacher["dense_model"] == str(tiny_bert_dir)
    training = json.loads((out / "dotcat_training.json").read_text())
    assert training["kind"] == "distill" and training["loss"]["contrastive_weight"] == 0.0
    assert (out / "model.safetensors").exists()


def test_adapt_defaults_to_gpl_s_learning_rate_in_the_config_and_the_cli():
    import typer

    from dotcat.cli import app

    command = typer.main.get_command(app).get_command(None, "adapt")
    options = {p.name: p for p in command.params}
    config = AdaptConfig(corpus=Path("c"), out_dir=Path("o"))
    assert config.lr == options["lr"].default == 2e-5
    assert config.n_negatives == options["n_negatives"].default == 1
    assert config.contrastive_weight == options["contrastive_weight"].default == 0.0


def test_calibration_examples_carry_the_negatives_training_will_have(adapted):
    from dotcat.training.rates import _sample_examples

    examples, docs = _sample_examples(adapted / "adapt" / "all", 10, negatives=3)
    assert len(examples) == 10
    for example in examples:
        assert len(set(example.negative_ids)) == 3
        assert example.positive_id not in example.negative_ids
        assert all(doc in docs for doc in (example.positive_id, *example.negative_ids))


def test_a_teacher_labels_the_pseudo_pairs(corpus, tiny_bert_dir, tiny_cat_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    from dotcat.data import load_queries
    from dotcat.models import BiEncoder, EncoderConfig
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
    from dotcat.training.data.teacher import load_teacher_scores, teacher_header

    # A teacher whose record says weight 0 (the base model's score alone); --teacher-alpha 1
    # asks for the plain cross-encoder, GPL's teacher, and the run follows it.
    cat = tmp_path / "teacher"
    shutil.copytree(tiny_cat_dir, cat)
    (cat / "dotcat_cross_encoder.json").write_text(
        json.dumps({"max_length": 64, "interpolation_alpha": 0.0})
    )
    out = tmp_path / "model"
    config = _config(
        corpus, out, tiny_bert_dir, max_queries=64, teacher=str(cat), teacher_alpha=1.0,
        teacher_precision="fp32",
    )  # fmt: skip
    adapt(config)
    steps = json.loads((out / RECORD).read_text())["steps"]
    assert steps["calibration"]["result"]["teacher_pairs_per_second"] > 0
    teacher = steps["training"]["result"]["teacher"]
    assert teacher["model"] == str(cat) and teacher["alpha"] == 1.0
    # every pair of every pseudo-query was scored by the teacher: its positive and negatives
    train = out / "adapt" / "train"
    queries = load_queries(train)
    lines = (train / "qrels" / "train.tsv").read_text().splitlines()[1:]
    positives = dict(line.split("\t")[:2] for line in lines)
    assert len(positives) == 64 and teacher["pairs"] >= 64 * 2
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(cat), precision="fp32"))
    header = teacher_header(ce.name, ce.fingerprint, ce.backend, ce.max_length)
    scores = load_teacher_scores(out, header)
    pseudo = {d["_id"]: d["text"] for d in _jsonl(train / "corpus.jsonl")}  # what it read
    some = sorted(positives)[:5]
    expected = ce.score([queries[q] for q in some], [pseudo[positives[q]] for q in some])
    got = [scores.get(q, positives[q]) for q in some]
    np.testing.assert_allclose(got, expected, atol=1e-4)
    dotcat = BiEncoder.load(EncoderConfig(model=str(out), device="cpu", precision="fp32"))
    texts = ["insulin and neuron", "a glacier on a volcano"]
    st = SentenceTransformer(str(out), device="cpu")
    np.testing.assert_allclose(st.encode(texts), dotcat.encode(texts), atol=1e-5)


def test_a_crash_resumes_without_redoing_finished_steps(corpus, tiny_bert_dir, tmp_path):
    import dotcat.training.adapt as module

    out = tmp_path / "model"
    config = _config(corpus, out, tiny_bert_dir, max_queries=64)
    real = module._train_step
    module._train_step = _crash
    try:
        with pytest.raises(RuntimeError, match="killed"):
            adapt(config)
    finally:
        module._train_step = real
    first = json.loads((out / RECORD).read_text())
    assert set(first["steps"]) == {"pseudo_queries", "calibration", "plan", "negatives"}
    with pytest.raises(DotcatError, match="resume"):
        adapt(config)  # neither resume nor overwrite
    with pytest.raises(DotcatError, match="other settings"):
        adapt(_config(corpus, out, tiny_bert_dir, max_queries=70, resume=True))
    adapt(_config(corpus, out, tiny_bert_dir, max_queries=64, resume=True))
    second = json.loads((out / RECORD).read_text())
    assert second["status"] == "finished"
    for step in ("pseudo_queries", "calibration", "plan", "negatives"):
        assert second["steps"][step] == first["steps"][step]  # not done again
    assert second["steps"]["plan"]["result"]["queries"] == 64
    assert (out / "model.safetensors").exists()
    # An overwrite that fails (or is stopped) puts the finished run back, whole.
    module._train_step = _crash
    try:
        with pytest.raises(RuntimeError, match="killed"):
            adapt(_config(corpus, out, tiny_bert_dir, max_queries=64, overwrite=True))
    finally:
        module._train_step = real
    assert json.loads((out / RECORD).read_text()) == second
    assert (out / "model.safetensors").exists()
    assert not (tmp_path / ".model.overwritten").exists()
    adapt(_config(corpus, out, tiny_bert_dir, max_queries=70, overwrite=True))  # ends: replaced
    third = json.loads((out / RECORD).read_text())
    assert (third["status"], third["settings"]["max_queries"]) == ("finished", 70)
    assert not (tmp_path / ".model.overwritten").exists()


def _crash(*args):
    raise RuntimeError("killed")


def test_sentences_can_be_preferred_to_titles(tmp_path):
    from dotcat.training.adapt import _pseudo_step

    body = "The {t} level rose in trial {i}. Its rate fell after week {i} of {t} use. "
    body += "Both were measured again in a second trial of {t} number {i}. "
    body += "No other change was seen in the {i} volunteers who took {t} for the whole year."
    path = tmp_path / "c.jsonl"
    rows = [
        {"_id": f"d{i}", "title": f"{t} and its trial {i}", "text": body.format(t=t, i=i)}
        for i, t in enumerate(TOPICS * 4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = AdaptConfig(corpus=path, out_dir=tmp_path / "o", prefer="sentence")
    summary = _pseudo_step(config, tmp_path)
    assert summary["from_sentences"] == len(rows) and summary["from_titles"] == 0
    titles = _pseudo_step(AdaptConfig(corpus=path, out_dir=tmp_path / "o"), tmp_path)
    assert titles["from_titles"] == len(rows)
    with pytest.raises(DotcatError, match="prefer"):
        AdaptConfig(corpus=path, out_dir=tmp_path, prefer="words").validate()
    with pytest.raises(DotcatError, match="teacher_alpha"):
        AdaptConfig(corpus=path, out_dir=tmp_path, teacher_alpha=1.5).validate()


def test_a_corpus_without_usable_pseudo_queries_is_refused(tiny_bert_dir, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"_id": "a", "title": "", "text": "too short"}) + "\n")
    with pytest.raises(DotcatError, match="pseudo-queries"):
        adapt(_config(path, tmp_path / "o", tiny_bert_dir))


def test_cli_adapt_refuses_a_missing_corpus(tmp_path):
    from typer.testing import CliRunner

    from dotcat.cli import app

    result = CliRunner().invoke(app, ["adapt", str(tmp_path / "nope.jsonl"), str(tmp_path / "o")])
    assert result.exit_code == 2 and "nope.jsonl" in result.output
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "a", "title": "t", "text": "x"}) + "\n")
    for value in ("2", "-0.1", "x"):
        args = ["adapt", str(corpus), str(tmp_path / "o"), "--teacher-alpha", value]
        result = CliRunner().invoke(app, args)
        assert result.exit_code != 0 and "--teacher-alpha" in result.output, value
        assert "Traceback" not in result.output
    # A wrong value is named before any model is looked up (a broken model install would
    # otherwise hide it).
    args = ["adapt", str(corpus), str(tmp_path / "o"), "--model", str(tmp_path / "no-model")]
    result = CliRunner().invoke(app, [*args, "--teacher-alpha", "2"])
    assert result.exit_code == 2 and "--teacher-alpha" in result.output
    assert "no-model" not in result.output
    for option, value in (("--n-negatives", "0"), ("--contrastive-weight", "-1")):
        result = CliRunner().invoke(app, [*args, option, value])
        assert result.exit_code == 2 and option in result.output, option
        assert "no-model" not in result.output and "Traceback" not in result.output
