"""dotcat.training.recipes.cat_pretrain: label-free pre-training before ``train cat`` fine-tunes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from safetensors.torch import load_file
from tests.training.recipes.test_cat import _config, _record
from tests.training.toy import make_titled_beir, make_training_beir

from dotcat.errors import DotcatError
from dotcat.training.recipes import cat_pretrain
from dotcat.training.recipes.cat_pretrain import PRETRAIN_DIR
from dotcat.training.run import train


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    return make_training_beir(tmp_path_factory.mktemp("plain") / "beir")


@pytest.fixture(scope="module")
def titled_data(tmp_path_factory) -> Path:
    """The toy training set with titles of 3+ words and texts of 20+ words, so every topical
    document gives a pseudo-query; the 8 filler documents (no title, one short text) give
    none."""
    return make_titled_beir(tmp_path_factory.mktemp("titled") / "beir")


def _pretrain_config(data: Path, out: Path, base: Path, **overrides):
    return _config(data, out, base, epochs=1, loss="bce", pretrain_queries=12, **overrides)


def test_pretraining_comes_first_and_fine_tuning_starts_from_it(
    titled_data, tiny_bert_dir, tmp_path
):
    out = tmp_path / "cat"
    train(_pretrain_config(titled_data, out, tiny_bert_dir))
    pre = out / PRETRAIN_DIR
    # 12 of the 16 titled documents, each query its own document's title; no qrels read.
    queries = [json.loads(line) for line in (pre / "data" / "queries.jsonl").open()]
    qrels = (pre / "data" / "qrels" / "train.tsv").read_text().splitlines()[1:]
    assert len(queries) == 12
    titles = {}
    with gzip.open(titled_data / "corpus.jsonl.gz", "rt") as f:
        for line in f:
            doc = json.loads(line)
            titles[doc["_id"]] = doc["title"]
    pairs = dict(line.split("\t")[:2] for line in qrels)
    assert {q["_id"] for q in queries} == set(pairs)
    assert all(titles[pairs[q["_id"]]] == q["text"] for q in queries)
    # The pre-training is a finished one-epoch run on them; the fine-tuning started from it.
    pre_record = _record(pre / "model")
    assert pre_record["status"] == "finished" and pre_record["hyperparameters"]["epochs"] == 1
    assert pre_record["data"]["path"] == str((pre / "data").resolve())
    record = _record(out)
    assert record["status"] == "finished"
    assert record["hyperparameters"]["base"] == str(pre / "model")
    assert record["hyperparameters"]["pretrain_queries"] == 12
    assert record["base_model"]["fingerprint"] == pre_record["model"]["fingerprint"]
    assert record["data"]["path"] == str(titled_data.resolve())


def test_a_resumed_run_does_not_pretrain_again(titled_data, tiny_bert_dir, tmp_path):
    straight = tmp_path / "straight"
    train(_pretrain_config(titled_data, straight, tiny_bert_dir))
    split = tmp_path / "split"
    train(_pretrain_config(titled_data, split, tiny_bert_dir, stop_after_steps=1))
    # The pre-training also stopped after one step: resuming finishes it, then the fine-tuning.
    assert _record(split / PRETRAIN_DIR / "model")["status"] == "stopped"
    train(_pretrain_config(titled_data, split, tiny_bert_dir, resume=True))
    pre_weights = split / PRETRAIN_DIR / "model" / "model.safetensors"
    stamp = pre_weights.stat().st_mtime_ns
    assert _record(split)["loss_curve"] == _record(straight)["loss_curve"]
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert all((a[k] == b[k]).all() for k in a)
    # Finished: resuming again touches nothing.
    train(_pretrain_config(titled_data, split, tiny_bert_dir, resume=True))
    assert pre_weights.stat().st_mtime_ns == stamp


def test_resuming_with_other_pseudo_queries_is_refused(titled_data, tiny_bert_dir, tmp_path):
    out = tmp_path / "cat"
    train(_pretrain_config(titled_data, out, tiny_bert_dir, stop_after_steps=1))
    other = _pretrain_config(titled_data, out, tiny_bert_dir, resume=True)
    other.pretrain_queries = 10
    with pytest.raises(DotcatError, match="made with .*'pretrain_queries': 12.*--overwrite"):
        train(other)
    other.overwrite, other.resume = True, False  # --overwrite: made again, 10 this time
    train(other)
    queries = (out / PRETRAIN_DIR / "data" / "queries.jsonl").read_text().splitlines()
    assert len(queries) == 10 and _record(out)["status"] == "finished"


def test_a_busy_output_is_refused_before_pretraining(titled_data, tiny_bert_dir, tmp_path):
    out = tmp_path / "cat"
    train(_config(titled_data, out, tiny_bert_dir, epochs=1, loss="bce"))
    with pytest.raises(DotcatError, match="holds an earlier training run"):
        train(_pretrain_config(titled_data, out, tiny_bert_dir))
    assert not (out / PRETRAIN_DIR).exists()


def test_a_corpus_without_pseudo_queries_is_refused_by_name(toy_data, tiny_bert_dir, tmp_path):
    """The plain toy corpus: two-word titles, one short sentence per text: nothing to pair."""
    with pytest.raises(DotcatError, match=r"only 0 pseudo-queries for pre-training"):
        train(_pretrain_config(toy_data, tmp_path / "cat", tiny_bert_dir))


def test_auto_pretrains_where_the_corpus_gives_enough_pseudo_queries(
    titled_data, toy_data, tiny_bert_dir, tmp_path, monkeypatch
):
    """The default, scaled down: titled_data gives 16 pseudo-queries, toy_data none."""
    monkeypatch.setattr(cat_pretrain, "AUTO_MIN_QUERIES", 10)
    monkeypatch.setattr(cat_pretrain, "AUTO_QUERIES", 12)
    out = train(_config(titled_data, tmp_path / "a", tiny_bert_dir, epochs=1))
    assert _record(out)["hyperparameters"]["pretrain_queries"] == 12
    assert _record(out / PRETRAIN_DIR / "model")["status"] == "finished"
    plain = train(_config(toy_data, tmp_path / "b", tiny_bert_dir, epochs=1))
    assert _record(plain)["hyperparameters"]["pretrain_queries"] == 0
    assert not (plain / PRETRAIN_DIR).exists()


def test_auto_on_resume_keeps_the_first_decision(titled_data, tiny_bert_dir, tmp_path, monkeypatch):
    """A run begun without pre-training (e.g. under the old default) is resumed without it,
    although `auto` would pre-train on this corpus now."""
    monkeypatch.setattr(cat_pretrain, "AUTO_MIN_QUERIES", 10)
    out = tmp_path / "cat"
    settings = dict(epochs=1, stop_after_steps=1)
    train(_config(titled_data, out, tiny_bert_dir, pretrain_queries=0, **settings))
    train(_config(titled_data, out, tiny_bert_dir, resume=True, epochs=1))
    record = _record(out)
    assert record["status"] == "finished" and record["hyperparameters"]["pretrain_queries"] == 0
    assert not (out / PRETRAIN_DIR).exists()
