"""dotcat.training.recipes.distill: teacher scores, the interpolated teacher, a run, resume, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tests.training.recipes.test_dot import _config as dot_config
from tests.training.toy import make_training_beir
from typer.testing import CliRunner

from dotcat.errors import DotcatError
from dotcat.training.config import LEXICAL_ALPHA, DistillConfig
from dotcat.training.ddp import DistributedContext
from dotcat.training.recipes.distill import (
    DistillRecipe,
    pooled_within_query_std,
    student_scores,
)
from dotcat.training.run import train


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    return make_training_beir(tmp_path_factory.mktemp("distill_toy") / "beir")


@pytest.fixture(scope="module")
def teacher_with_alpha(tiny_cat_dir, tmp_path_factory) -> Path:
    """The tiny cross-encoder with a recorded dev interpolation weight, as train cat writes."""
    out = tmp_path_factory.mktemp("cat_alpha") / "model"
    shutil.copytree(tiny_cat_dir, out)
    record = {"max_length": 64, "interpolation_alpha": 0.25}
    (out / "dotcat_cross_encoder.json").write_text(json.dumps(record))
    return out


def _config(data: Path, out: Path, student: Path, teacher: Path, **overrides) -> DistillConfig:
    """``train dot``'s test settings (tests/training/recipes/test_dot.py) with a teacher."""
    settings = dict(teacher=str(teacher), teacher_precision="fp32", n_negatives=2)
    return dot_config(data, out, student, cls=DistillConfig, **{**settings, **overrides})


def _record(out: Path) -> dict:
    return json.loads((out / "dotcat_training.json").read_text())


def _cached(path: Path) -> dict[tuple[str, str], float]:
    lines = path.read_text().splitlines()[1:]
    return {(q, d): s for q, d, s in map(json.loads, lines)}


def test_student_scores_and_pooled_std():
    q = torch.tensor([[3.0, 4.0]])
    pos = torch.tensor([[3.0, 4.0]])
    negs = torch.tensor([[[4.0, -3.0], [-3.0, -4.0]]])
    cos = student_scores(q, pos, negs, "cos")
    torch.testing.assert_close(cos, torch.tensor([[1.0, 0.0, -1.0]]))
    dot = student_scores(q, pos, negs, "dot")
    torch.testing.assert_close(dot, torch.tensor([[25.0, 0.0, -25.0]]))
    # Within-query spread only: query b's single score and any per-query shift do not count.
    scores = {("a", "x"): 10.0, ("a", "y"): 14.0, ("b", "x"): -50.0}
    assert pooled_within_query_std(scores) == pytest.approx(2.0)


def test_a_run_distils_the_teacher_and_writes_a_bi_encoder(
    toy_data, tiny_bert_dir, tiny_cat_dir, tmp_path
):
    from sentence_transformers import SentenceTransformer

    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    # The teacher's margins alone (no InfoNCE beside them), so their loss can be followed.
    config = _config(toy_data, tmp_path / "run", tiny_bert_dir, tiny_cat_dir, epochs=4)
    config.contrastive_weight = 0.0
    out = train(config)
    record = _record(out)
    assert record["kind"] == "distill" and record["status"] == "finished"
    assert record["teacher"]["alpha"] == 1.0  # the tiny teacher records no dev weight
    assert record["negatives"]["method"] == "dense"  # the student's own top ranks, by default
    assert record["loss"]["distill"] == "margin-mse" and record["loss"]["student_scale"] == 20.0
    assert [e["epoch"] for e in record["epochs"]] == [0, 1, 2, 3, 4]
    # The student learns the teacher's margins: the loss falls from the first epoch to the last.
    losses = [e["train_loss"] for e in record["epochs"][1:]]
    assert losses[-1] < losses[0]

    # Every pair of every example was scored once by the teacher, as the teacher scores it.
    cached = _cached(out / "teacher_scores.jsonl")
    assert len(cached) == record["teacher"]["pairs"] > 0
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_cat_dir), precision="fp32"))
    from dotcat.data import load_corpus
    from dotcat.index import document_text

    corpus = {r["id"]: document_text(r["title"], r["text"]) for r in load_corpus(toy_data)}
    queries = {
        json.loads(line)["_id"]: json.loads(line)["text"]
        for line in (toy_data / "queries.jsonl").read_text().splitlines()
    }
    pairs = sorted(cached)[:5]
    direct = ce.score([queries[q] for q, _ in pairs], [corpus[d] for _, d in pairs])
    np.testing.assert_allclose([cached[p] for p in pairs], direct, atol=1e-5)

    # The output is a BERT_DOT like any other: sentence-transformers loads it.
    st = SentenceTransformer(str(out), device="cpu")
    assert st.encode(["insulin glucose"]).shape[1] == record["model"]["dim"]


def test_a_teacher_weight_of_zero_does_not_run_the_cross_encoder(
    toy_data, tiny_bert_dir, teacher_with_alpha, tmp_path
):
    config = _config(
        toy_data, tmp_path / "run", tiny_bert_dir, teacher_with_alpha, teacher_alpha=0.0
    )
    config.validate()
    config.out_dir.mkdir()
    recipe = DistillRecipe(config, DistributedContext())
    recipe.prepare()
    assert recipe.teacher_info["alpha"] == 0.0
    # Its scores would be multiplied by 0: none were computed.
    assert not (config.out_dir / "teacher_scores.jsonl").exists()
    dense = _cached(config.out_dir / "teacher_dense_scores.jsonl")
    assert dense.keys() == recipe.teacher.keys() and len(dense) == recipe.teacher_info["pairs"]
    # The dense score brought to the student's starting spread; the student is that model,
    # so the factor is its temperature's: cosine / 0.05.
    assert recipe.teacher_info["scale"] == pytest.approx(1 / 0.05, rel=1e-5)
    for pair, value in recipe.teacher.items():
        assert value == pytest.approx(dense[pair] / 0.05, rel=1e-5, abs=1e-9)


def test_the_interpolated_teacher_mixes_the_dense_score_at_the_logit_scale(
    toy_data, tiny_bert_dir, teacher_with_alpha, tmp_path
):
    config = _config(toy_data, tmp_path / "run", tiny_bert_dir, teacher_with_alpha)
    config.validate()
    config.out_dir.mkdir()
    recipe = DistillRecipe(config, DistributedContext())
    recipe.prepare()
    assert recipe.teacher_info["alpha"] == 0.25  # the teacher's own dev-chosen weight
    logit = _cached(config.out_dir / "teacher_scores.jsonl")
    dense = _cached(config.out_dir / "teacher_dense_scores.jsonl")
    assert logit.keys() == dense.keys() == recipe.teacher.keys()
    c = pooled_within_query_std(logit) / pooled_within_query_std(dense)
    assert recipe.teacher_info["dense_scale"] == pytest.approx(c, rel=1e-5)
    mixed = {p: 0.25 * logit[p] + 0.75 * c * dense[p] for p in logit}
    # Brought to the student's starting spread (its cosines / 0.05): one factor for all pairs.
    s = pooled_within_query_std(dense) / 0.05 / pooled_within_query_std(mixed)
    assert recipe.teacher_info["scale"] == pytest.approx(s, rel=1e-5)
    for pair, value in recipe.teacher.items():
        assert value == pytest.approx(s * mixed[pair], rel=1e-5, abs=1e-9)
    assert pooled_within_query_std(recipe.teacher) == pytest.approx(
        recipe.teacher_info["student_spread"], rel=1e-5
    )
    # The student is the dense teacher here: its scores are not computed twice.
    assert not (config.out_dir / "student_start_scores.jsonl").exists()

    # The dense scores are the student's starting model's cosine of query and document.
    from dotcat.models import BiEncoder, EncoderConfig

    encoder = BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), device="cpu"))
    (q, d), value = next(iter(dense.items()))
    text = recipe.data.queries[q]
    doc = next(r for r in recipe.data.corpus if r["id"] == d)
    from dotcat.index import document_text

    expected = float(
        encoder.encode_queries([text])[0]
        @ encoder.encode_documents([document_text(doc["title"], doc["text"])])[0]
    )
    assert value == pytest.approx(expected, abs=1e-5)


def test_the_lexical_teacher_is_bm25_mixed_with_the_dense_score(toy_data, tiny_bert_dir, tmp_path):
    from dotcat.index.bm25 import BM25Index

    def prepared(out: Path, **overrides) -> DistillRecipe:
        config = _config(toy_data, out, tiny_bert_dir, "bm25", **overrides)
        config.validate()
        config.out_dir.mkdir()
        recipe = DistillRecipe(config, DistributedContext())
        recipe.prepare()
        return recipe

    # BM25 alone, raw: the teacher's score of each pair is BM25's over the training corpus.
    plain = prepared(tmp_path / "plain", teacher_alpha=1.0, teacher_scale=1.0)
    assert plain.teacher_info["model"] == "bm25" and plain.teacher_info["alpha"] == 1.0
    assert not (tmp_path / "plain" / "teacher_scores.jsonl").exists()  # no cross-encoder
    index = BM25Index.build(plain.data.corpus, show_progress=False)
    by_query: dict[str, list[str]] = {}
    for q, d in plain.teacher:
        by_query.setdefault(q, []).append(d)
    for q, docs in by_query.items():
        expected = index.pair_scores(plain.data.queries[q], docs)
        assert [plain.teacher[(q, d)] for d in docs] == pytest.approx(expected, abs=1e-6)
    # Each example's positive shares terms with its query: BM25 gives it more than 0.
    assert all(plain.teacher[(e.qid, e.positive_id)] > 0 for e in plain.examples)

    # The default weight: BM25 and the dense score at one spread, half each.
    mixed = prepared(tmp_path / "mixed", teacher_scale=1.0)
    assert mixed.teacher_info["alpha"] == LEXICAL_ALPHA == 0.5
    dense = _cached(tmp_path / "mixed" / "teacher_dense_scores.jsonl")
    c = pooled_within_query_std(plain.teacher) / pooled_within_query_std(dense)
    assert mixed.teacher_info["dense_scale"] == pytest.approx(c, rel=1e-5)
    for pair, value in mixed.teacher.items():
        assert value == pytest.approx(0.5 * plain.teacher[pair] + 0.5 * c * dense[pair], rel=1e-5)


def test_the_teacher_scale_is_the_students_spread_or_given(
    toy_data, tiny_bert_dir, tiny_cat_dir, tmp_path
):
    def prepared(name: str, **overrides) -> DistillRecipe:
        config = _config(toy_data, tmp_path / name, tiny_bert_dir, tiny_cat_dir, **overrides)
        config.validate()
        config.out_dir.mkdir()
        recipe = DistillRecipe(config, DistributedContext())
        recipe.prepare()
        return recipe

    auto = prepared("auto")  # the plain cross-encoder (alpha 1): the student scored apart
    logit = _cached(auto.out_dir / "teacher_scores.jsonl")
    start = _cached(auto.out_dir / "student_start_scores.jsonl")
    assert start.keys() == logit.keys() == auto.teacher.keys()
    spread = pooled_within_query_std(start) / 0.05
    assert auto.teacher_info["student_spread"] == pytest.approx(spread, rel=1e-5)
    assert pooled_within_query_std(auto.teacher) == pytest.approx(spread, rel=1e-5)
    s = auto.teacher_info["scale"]
    assert s == pytest.approx(spread / pooled_within_query_std(logit), rel=1e-5) and s != 1
    # Margins keep their ratios: every pair is the raw logit times one factor.
    for pair, value in auto.teacher.items():
        assert value == pytest.approx(s * logit[pair], rel=1e-5, abs=1e-9)

    raw = prepared("raw", teacher_scale=1.0)
    assert raw.teacher == pytest.approx(logit) and raw.teacher_info["scale"] == 1.0
    assert not (raw.out_dir / "student_start_scores.jsonl").exists()
    given = prepared("given", teacher_scale=0.5)
    assert given.teacher == pytest.approx({p: 0.5 * v for p, v in logit.items()})


def test_a_teacher_at_weight_0_is_named_for_what_it_is(
    toy_data, tiny_bert_dir, tiny_cat_dir, tmp_path, caplog
):
    """A recorded weight 0 leaves only the student's own dense score as the teacher: the run
    says so and how to distil the cross-encoder instead."""
    import logging

    cat = tmp_path / "teacher"
    shutil.copytree(tiny_cat_dir, cat)
    (cat / "dotcat_cross_encoder.json").write_text(
        json.dumps({"max_length": 64, "interpolation_alpha": 0.0})
    )
    config = _config(toy_data, tmp_path / "run", tiny_bert_dir, cat)
    config.validate()
    config.out_dir.mkdir()
    with caplog.at_level(logging.WARNING, logger="dotcat.training.recipes.distill"):
        recipe = DistillRecipe(config, DistributedContext())
        recipe.prepare()
    assert recipe.teacher_info["alpha"] == 0.0
    (message,) = [r.getMessage() for r in caplog.records if "weight is 0" in r.getMessage()]
    assert "its record" in message and "--teacher-alpha 1" in message
    assert "cross-encoder weight" in message and "BM25" not in message


def test_the_lexical_teacher_at_weight_0_is_named_bm25(toy_data, tiny_bert_dir, tmp_path, caplog):
    import logging

    config = _config(toy_data, tmp_path / "run", tiny_bert_dir, "bm25", teacher_alpha=0.0)
    config.validate()
    config.out_dir.mkdir()
    with caplog.at_level(logging.WARNING, logger="dotcat.training.recipes.distill"):
        DistillRecipe(config, DistributedContext()).prepare()
    (message,) = [r.getMessage() for r in caplog.records if "weight is 0" in r.getMessage()]
    assert "BM25 weight is 0 (given)" in message and "cross-encoder" not in message


def test_resume_continues_exactly(toy_data, tiny_bert_dir, tiny_cat_dir, tmp_path):
    common = dict(epochs=2, batch_size=3, dev_eval="none", contrastive_weight=0.5)
    straight = train(
        _config(toy_data, tmp_path / "straight", tiny_bert_dir, tiny_cat_dir, **common)
    )
    total = _record(straight)["steps"]
    split = tmp_path / "split"
    stop = total // 2 + 1
    train(_config(toy_data, split, tiny_bert_dir, tiny_cat_dir, stop_after_steps=stop, **common))
    assert _record(split)["status"] == "stopped"
    # The teacher's scores are on disk: the resumed run reads them, it does not score again.
    before = (split / "teacher_scores.jsonl").stat().st_mtime_ns
    train(_config(toy_data, split, tiny_bert_dir, tiny_cat_dir, resume=True, **common))
    assert (split / "teacher_scores.jsonl").stat().st_mtime_ns == before
    resumed, straight_record = _record(split), _record(straight)
    assert (
        resumed["status"] == "finished" and resumed["loss_curve"] == straight_record["loss_curve"]
    )
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=0)


def test_grad_cache_trains_the_plain_runs_weights(
    toy_data, tiny_no_dropout, tiny_cat_dir, tmp_path
):
    # Without dropout, GradCache's chunks give the whole batch's gradients: margins and InfoNCE
    # pushed through the cached embeddings train the same student, step for step.
    common = dict(epochs=1, batch_size=4, dev_eval="none", contrastive_weight=0.5)
    runs = {}
    for name, chunk in {"plain": None, "cached": 3}.items():
        out = tmp_path / name
        train(
            _config(toy_data, out, tiny_no_dropout, tiny_cat_dir, cache_chunk_size=chunk, **common)
        )
        runs[name] = (_record(out), load_file(out / "model.safetensors"))
    (plain, plain_weights), (cached, cached_weights) = runs["plain"], runs["cached"]
    assert cached["hyperparameters"]["cache_chunk_size"] == 3
    assert len(plain["loss_curve"]) >= 2
    for (_, a), (_, b) in zip(plain["loss_curve"], cached["loss_curve"], strict=True):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-6)
    assert any(
        not torch.equal(plain_weights[n], w)
        for n, w in load_file(tiny_no_dropout / "model.safetensors").items()
        if n in plain_weights
    )
    for name, weight in plain_weights.items():
        torch.testing.assert_close(cached_weights[name], weight, atol=2e-5, rtol=1e-4)


def test_the_loss_options_change_what_is_trained(toy_data, tiny_bert_dir, tiny_cat_dir, tmp_path):
    runs = {}
    for name, overrides in {
        "margin": {"contrastive_weight": 0.0},
        "kl": {"distill_loss": "kl", "contrastive_weight": 0.0},
        "plus-infonce": {},  # the default: margin-mse + 1 x InfoNCE
    }.items():
        out = train(
            _config(
                toy_data,
                tmp_path / name,
                tiny_bert_dir,
                tiny_cat_dir,
                epochs=1,
                dev_eval="none",
                **overrides,
            )
        )
        runs[name] = _record(out)
    assert runs["kl"]["loss"]["distill"] == "kl"
    assert runs["plus-infonce"]["loss"]["contrastive_weight"] == 1.0
    curves = {name: [v for _, v in r["loss_curve"]] for name, r in runs.items()}
    assert curves["kl"] != curves["margin"]
    # InfoNCE (>= 0) added with weight 1: every step's loss is larger than without it.
    assert all(a > b for a, b in zip(curves["plus-infonce"][:1], curves["margin"][:1], strict=True))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"teacher": ""}, "needs a teacher"),
        ({"n_negatives": 0}, "n_negatives"),
        ({"distill_loss": "mse"}, "loss must be one of"),
        ({"teacher_alpha": 1.5}, "teacher_alpha"),
        ({"teacher_scale": 0.0}, "teacher_scale"),
        ({"teacher_scale": float("inf")}, "teacher_scale"),
        ({"teacher_scale": float("nan")}, "teacher_scale"),
    ],
)
def test_bad_settings_are_refused(
    toy_data, tiny_bert_dir, tiny_cat_dir, tmp_path, overrides, message
):
    config = _config(toy_data, tmp_path / "run", tiny_bert_dir, tiny_cat_dir)
    for name, value in overrides.items():
        setattr(config, name, value)
    with pytest.raises(DotcatError, match=message):
        config.validate()


def test_cli_train_distill(toy_data, tiny_bert_dir, tiny_cat_dir, tmp_path):
    from dotcat.cli import app

    runner = CliRunner()
    args = [
        "train",
        "distill",
        str(toy_data),
        str(tmp_path / "out"),
        "--teacher",
        str(tiny_cat_dir),
    ]
    bad = runner.invoke(app, [*args, "--student", str(tiny_bert_dir), "--teacher-alpha", "2"])
    assert bad.exit_code != 0 and "--teacher-alpha" in bad.output
    assert "Traceback" not in bad.output
    for value in ("0", "-1", "x", "nan"):
        bad = runner.invoke(app, [*args, "--student", str(tiny_bert_dir), "--teacher-scale", value])
        assert bad.exit_code != 0 and "--teacher-scale" in bad.output, value
        assert "Traceback" not in bad.output
    result = runner.invoke(
        app,
        [
            *args,
            "--student",
            str(tiny_bert_dir),
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--max-length",
            "32",
            "--n-negatives",
            "2",
            "--teacher-precision",
            "fp32",
            "--bf16",
            "off",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "distilled model written to" in result.output
    assert _record(tmp_path / "out")["kind"] == "distill"


def test_the_cli_and_the_config_default_to_the_students_own_top_30_and_grad_cache():
    import typer

    from dotcat.cli import app

    command = typer.main.get_command(app).get_command(None, "train").get_command(None, "distill")
    options = {p.name: p for p in command.params}
    config = DistillConfig(data="d", out_dir="o", teacher="t")
    cli = (options["negatives"].default, options["window_start"].default)
    assert (config.negatives, config.window) == ("dense", (0, 30))
    assert (*cli, options["window_end"].default) == ("dense", 0, 30)
    assert config.cache_chunk_size == options["cache_chunk_size"].default == 16
