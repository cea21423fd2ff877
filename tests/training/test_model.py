"""dotcat.training.model: settings from sentence-transformers files, forward, atomic save that
sentence-transformers and dotcat load to the same vectors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from dotcat.errors import DotcatError
from dotcat.models.st_config import read_st_settings
from dotcat.training.model import TrainableBiEncoder

TEXTS = [
    "Cats are small domesticated carnivorous mammals.",
    "how do cells make ATP",
    "x",
    "Insulin regulates blood glucose in mammals, and its absence causes diabetes.",
]


@pytest.mark.parametrize(("pooling", "similarity"), [("cls", "dot"), ("mean", "cos")])
def test_save_loads_in_sentence_transformers_with_the_same_vectors(
    tiny_bert_dir, tmp_path, pooling, similarity
):
    from sentence_transformers import SentenceTransformer

    model = TrainableBiEncoder.from_pretrained(
        tiny_bert_dir, pooling=pooling, similarity=similarity, max_length=48
    )
    out = model.save(tmp_path / "model")
    assert (out / "model.safetensors").is_file()
    settings = read_st_settings(out)  # what dotcat's BiEncoder reads
    assert (settings.pooling, settings.similarity, settings.max_length) == (pooling, similarity, 48)
    st = SentenceTransformer(str(out), device="cpu")
    assert st.max_seq_length == 48
    assert st.similarity_fn_name == ("cosine" if similarity == "cos" else "dot")
    expected = model.encode(TEXTS)
    np.testing.assert_allclose(st.encode(TEXTS, convert_to_numpy=True), expected, atol=1e-5)
    if similarity == "cos":
        np.testing.assert_allclose(np.linalg.norm(expected, axis=1), 1.0, atol=1e-5)
    # Reloading the saved directory reads the same settings back.
    again = TrainableBiEncoder.from_pretrained(out)
    assert (again.pooling, again.similarity, again.max_length) == (pooling, similarity, 48)
    np.testing.assert_allclose(again.encode(TEXTS), expected, atol=1e-6)


@pytest.mark.parametrize(("pooling", "similarity"), [("cls", "dot"), ("mean", "cos")])
def test_saved_model_encodes_like_dotcat_bi_encoder(tiny_bert_dir, tmp_path, pooling, similarity):
    models = pytest.importorskip("dotcat.models")
    model = TrainableBiEncoder.from_pretrained(
        tiny_bert_dir, pooling=pooling, similarity=similarity, max_length=48
    )
    out = model.save(tmp_path / "model")
    encoder = models.BiEncoder.load(
        models.EncoderConfig(model=str(out), device="cpu", precision="fp32")
    )
    assert (encoder.pooling, encoder.similarity, encoder.max_length) == (pooling, similarity, 48)
    np.testing.assert_allclose(encoder.encode_documents(TEXTS), model.encode(TEXTS), atol=1e-5)


def test_defaults_from_a_plain_hugging_face_dir(tiny_bert_dir):
    model = TrainableBiEncoder.from_pretrained(tiny_bert_dir)
    assert (model.pooling, model.similarity, model.max_length) == ("cls", "dot", 512)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with pytest.raises(DotcatError, match="max_length"):
        TrainableBiEncoder.from_pretrained(tiny_bert_dir, max_length=4096)


def test_prompts_and_lowercasing_survive_a_save(tiny_bert_dir, tmp_path):
    models = pytest.importorskip("dotcat.models")
    model = TrainableBiEncoder.from_pretrained(tiny_bert_dir, pooling="mean", similarity="cos")
    model.query_prefix, model.document_prefix = "query: ", "passage: "
    out = model.save(tmp_path / "model")
    again = TrainableBiEncoder.from_pretrained(out)
    assert (again.query_prefix, again.document_prefix) == ("query: ", "passage: ")
    assert again.query_texts(["a"]) == ["query: a"] and again.document_texts(["b"]) == [
        "passage: b"
    ]
    encoder = models.BiEncoder.load(
        models.EncoderConfig(model=str(out), device="cpu", precision="fp32")
    )
    np.testing.assert_allclose(
        encoder.encode_queries(TEXTS), model.encode(model.query_texts(TEXTS)), atol=1e-5
    )


def test_a_model_that_lowercases_is_saved_saying_so(tiny_bert_dir, tmp_path):
    # A cased tokenizer (so lower-casing changes the tokens) under a model whose
    # sentence-transformers config lower-cases: training encodes lower-cased text, and so
    # must dotcat and SentenceTransformer when they load the saved model, cased input included.
    from transformers import AutoTokenizer

    models = pytest.importorskip("dotcat.models")
    model = TrainableBiEncoder.from_pretrained(tiny_bert_dir, pooling="mean", similarity="cos")
    model.tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir, do_lower_case=False)
    cased = ["Cats ATP Insulin", "DNA Repair In Mammals"]
    as_is = model.encode(cased)
    model.lowercase = True
    trained = model.encode(cased)
    assert not np.allclose(as_is, trained, atol=1e-4)  # the test can tell the difference
    out = model.save(tmp_path / "model")
    assert json.loads((out / "sentence_bert_config.json").read_text())["do_lower_case"] is True
    assert TrainableBiEncoder.from_pretrained(out).lowercase is True
    encoder = models.BiEncoder.load(
        models.EncoderConfig(model=str(out), device="cpu", precision="fp32")
    )
    np.testing.assert_allclose(encoder.encode(cased), trained, atol=1e-5)
    st = pytest.importorskip("sentence_transformers").SentenceTransformer(str(out), device="cpu")
    np.testing.assert_allclose(st.encode(cased), trained, atol=1e-5)


def test_a_pooling_dotcat_cannot_reproduce_is_refused(tiny_bert_dir, tmp_path):
    root = tmp_path / "st"
    shutil.copytree(tiny_bert_dir, root)
    (root / "1_Pooling").mkdir()
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(DotcatError, match="pooling"):
        TrainableBiEncoder.from_pretrained(root)
    assert TrainableBiEncoder.from_pretrained(root, pooling="mean").pooling == "mean"


def test_save_into_an_existing_run_dir_keeps_other_files_and_drops_stale_modules(
    tiny_bert_dir, tmp_path
):
    out = tmp_path / "run"
    out.mkdir()
    (out / "dotcat_training.json").write_text("{}")
    TrainableBiEncoder.from_pretrained(tiny_bert_dir, pooling="mean", similarity="cos").save(out)
    assert (out / "2_Normalize").is_dir()
    TrainableBiEncoder.from_pretrained(tiny_bert_dir, pooling="cls", similarity="dot").save(out)
    assert not (out / "2_Normalize").exists()
    assert (out / "dotcat_training.json").read_text() == "{}"
    assert read_st_settings(out).similarity == "dot"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary leftovers


def test_forward_has_gradients_and_the_pooler_is_frozen(tiny_bert_dir):
    model = TrainableBiEncoder.from_pretrained(tiny_bert_dir, pooling="mean", similarity="dot")
    frozen = model.freeze_unused_parameters()
    assert frozen and all("pooler" in name for name in frozen)
    model.train()
    emb = model(model.tokenize(TEXTS[:2], max_length=16))
    assert emb.shape == (2, 32) and emb.dtype == torch.float32
    emb.sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(grads[n] is None for n in frozen)
    assert all(g is not None for n, g in grads.items() if n not in frozen)
    # Truncation: max_length bounds the tokens.
    assert model.tokenize(["word " * 100], max_length=10)["input_ids"].shape[1] == 10


def test_encode_restores_train_mode_and_keeps_input_order(tiny_bert_dir):
    model = TrainableBiEncoder.from_pretrained(tiny_bert_dir, pooling="cls", similarity="cos")
    model.train()
    together = model.encode(TEXTS, batch_size=2)
    assert model.training
    one_by_one = np.stack([model.encode([t])[0] for t in TEXTS])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
