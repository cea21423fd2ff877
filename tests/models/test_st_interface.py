"""``BiEncoder.encode`` and ``CrossEncoder.rank``/``predict`` against sentence-transformers'
own on the same tiny models: the same shapes, types, values and order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dotcat.errors import DotcatError
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

TEXTS = [
    "Cats are small domesticated carnivorous mammals.",
    "Dogs were domesticated from wolves long ago.",
    "ATP",
    "Insulin regulates blood glucose in mammals.",
]
QUERY = "which animals were domesticated from wolves"
DOCUMENTS = [
    "Cats are small domesticated carnivorous mammals.",
    "Dogs were domesticated from wolves long ago.",
    "Mitochondria produce ATP for the cell.",
    "Vaccines train the immune system against viruses.",
    "Insulin regulates blood glucose in mammals.",
    "x",
]


@pytest.fixture(scope="module")
def st_dir(tiny_bert_dir, tmp_path_factory):
    """The tiny BERT saved by sentence-transformers with mean pooling and no Normalize, so
    ``normalize_embeddings`` changes the vectors."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    peer = SentenceTransformer(
        modules=[Transformer(str(tiny_bert_dir), max_seq_length=64), Pooling(32, "mean")],
        device="cpu",
        similarity_fn_name="dot",
    )
    out = tmp_path_factory.mktemp("st_mean") / "model"
    peer.save(str(out))
    return out


@pytest.fixture(scope="module")
def peer(st_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(st_dir), device="cpu")


@pytest.fixture(scope="module")
def ours(st_dir) -> BiEncoder:
    return BiEncoder.load(str(st_dir), device="cpu", precision="fp32")


def test_load_takes_a_model_name_and_settings(ours, st_dir):
    assert ours.config == EncoderConfig(model=str(st_dir), device="cpu", precision="fp32")
    assert (ours.pooling, ours.similarity) == ("mean", "dot")


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"normalize_embeddings": True}, {"batch_size": 2, "show_progress_bar": False}],
    ids=["plain", "normalized", "batched"],
)
def test_encode_gives_sentence_transformers_shapes_and_vectors(ours, peer, kwargs):
    for inputs in (TEXTS, TEXTS[0]):  # a list -> (n, dim); one string -> (dim,)
        theirs = peer.encode(inputs, **kwargs)
        mine = ours.encode(inputs, **kwargs)
        assert isinstance(mine, np.ndarray) and mine.dtype == np.float32
        assert (
            mine.shape == theirs.shape == ((len(TEXTS), 32) if isinstance(inputs, list) else (32,))
        )
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=2e-5)
    norms = np.linalg.norm(ours.encode(TEXTS, **kwargs), axis=1)
    assert np.allclose(norms, 1, atol=1e-5) == bool(kwargs.get("normalize_embeddings"))


def test_a_model_s_prompts_apply_as_sentence_transformers_applies_them(tiny_bert_dir, tmp_path):
    """``encode`` puts the ``default_prompt_name`` prompt first (``prompt=""``: none), the
    query and document sides theirs, as sentence-transformers' ``encode`` and
    ``encode_query``/``encode_document`` do on the same saved model."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    prompts = {"query": "query: ", "document": "passage: ", "classification": "classify: "}
    SentenceTransformer(
        modules=[Transformer(str(tiny_bert_dir), max_seq_length=64), Pooling(32, "mean")],
        device="cpu", similarity_fn_name="dot", prompts=prompts,
        default_prompt_name="classification",
    ).save(str(tmp_path / "prompted"))  # fmt: skip
    peer = SentenceTransformer(str(tmp_path / "prompted"), device="cpu")
    ours = BiEncoder.load(str(tmp_path / "prompted"), device="cpu", precision="fp32")
    for mine, theirs in (
        (ours.encode(TEXTS), peer.encode(TEXTS)),
        (ours.encode(TEXTS[0]), peer.encode(TEXTS[0])),
        (ours.encode(TEXTS, prompt=""), peer.encode(TEXTS, prompt="")),
        (ours.encode_query(TEXTS), peer.encode_query(TEXTS)),
        (ours.encode_document(TEXTS), peer.encode_document(TEXTS)),
    ):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=2e-5)
    assert not np.allclose(ours.encode(TEXTS), ours.encode(TEXTS, prompt=""), atol=1e-3)


def test_encode_converts_as_sentence_transformers_does(ours, peer):
    tensor = ours.encode(TEXTS, convert_to_tensor=True)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (len(TEXTS), 32)
    listed = ours.encode(TEXTS, convert_to_numpy=False)
    theirs = peer.encode(TEXTS, convert_to_numpy=False)
    assert isinstance(listed, list) and len(listed) == len(theirs) == len(TEXTS)
    assert all(isinstance(t, torch.Tensor) and t.shape == (32,) for t in listed)
    one = ours.encode(TEXTS[0], convert_to_tensor=True)
    assert one.shape == peer.encode(TEXTS[0], convert_to_tensor=True).shape == (32,)


def test_a_folder_of_the_older_layout_with_its_weights_in_0_transformer(st_dir, peer, tmp_path):
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(st_dir, old / "0_Transformer", ignore=shutil.ignore_patterns("[0-9]_*"))
    for extra in [p for p in st_dir.iterdir() if p.name[0].isdigit() or p.name == "modules.json"]:
        shutil.copytree(extra, old / extra.name) if extra.is_dir() else shutil.copy(extra, old)
    modules = json.loads((old / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (old / "modules.json").write_text(json.dumps(modules))
    for precision in ("fp32", "int8"):  # PyTorch, and an export of its weights
        mine = BiEncoder.load(str(old), device="cpu", precision=precision).encode(TEXTS)
        cosine = (mine * peer.encode(TEXTS)).sum(1) / np.linalg.norm(mine, axis=1)
        assert np.all(cosine / np.linalg.norm(peer.encode(TEXTS), axis=1) > 0.99), precision


def test_a_folder_naming_no_similarity_is_read_as_dot_with_a_warning(st_dir, tmp_path, caplog):
    import json
    import shutil

    old = shutil.copytree(st_dir, tmp_path / "nosim")
    config = json.loads((old / "config_sentence_transformers.json").read_text())
    del config["similarity_fn_name"]  # as sentence-transformers 2 saved it: cosine by default
    (old / "config_sentence_transformers.json").write_text(json.dumps(config))
    for _ in range(2):
        assert BiEncoder.load(str(old), device="cpu", precision="fp32").similarity == "dot"
    told = [r.message for r in caplog.records if "names no similarity function" in r.message]
    assert len(told) == 1 and "--similarity cos" in told[0]  # once a process
    assert BiEncoder.load(str(old), similarity="cos", precision="fp32").similarity == "cos"


def test_a_folder_without_sentence_transformers_files_is_read_as_dpr_with_a_warning(
    tiny_bert_dir, tmp_path, caplog
):
    import shutil

    plain = shutil.copytree(tiny_bert_dir, tmp_path / "plain")
    for _ in range(2):
        encoder = BiEncoder.load(str(plain), device="cpu", precision="fp32")
        assert (encoder.pooling, encoder.similarity) == ("cls", "dot")
    told = [
        r.message for r in caplog.records if "has no sentence-transformers pooling" in r.message
    ]
    assert len(told) == 1 and "--pooling mean --similarity cos" in told[0]  # once a process
    caplog.clear()
    BiEncoder.load(str(plain), pooling="mean", similarity="cos", precision="fp32")
    assert "has no sentence-transformers pooling" not in caplog.text  # asked: nothing to say


def test_queries_and_documents_take_one_string_too(ours):
    np.testing.assert_allclose(ours.encode_query(QUERY), ours.encode_queries([QUERY])[0], atol=1e-6)
    assert ours.encode_documents(TEXTS[0]).shape == (32,)
    assert ours.encode_document(TEXTS).shape == (len(TEXTS), 32)


# -- the cross-encoder -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cat(tiny_cat_dir) -> CrossEncoder:
    return CrossEncoder.load(str(tiny_cat_dir), device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def st_cat(tiny_cat_dir):
    from sentence_transformers import CrossEncoder as STCrossEncoder

    return STCrossEncoder(str(tiny_cat_dir), device="cpu")


def test_rank_orders_as_sentence_transformers_does(cat, st_cat):
    logits = cat.predict([(QUERY, d) for d in DOCUMENTS])
    gaps = np.abs(logits[:, None] - logits[None, :]) + np.eye(len(logits))
    assert gaps.min() > 1e-3, logits  # no near-tie: one order to agree on

    for kwargs in ({}, {"top_k": 3}, {"top_k": 2, "return_documents": True}):
        theirs = st_cat.rank(QUERY, DOCUMENTS, activation_fn=torch.nn.Identity(), **kwargs)
        mine = cat.rank(QUERY, DOCUMENTS, **kwargs)
        assert [set(r) for r in mine] == [set(r) for r in theirs]
        assert [r["corpus_id"] for r in mine] == [r["corpus_id"] for r in theirs]
        assert [r["score"] for r in mine] == pytest.approx([r["score"] for r in theirs], abs=1e-5)
        assert [r.get("text") for r in mine] == [r.get("text") for r in theirs]
    ranked = cat.rank(QUERY, DOCUMENTS)
    assert [r["score"] for r in ranked] == sorted(logits.tolist(), reverse=True)
    assert cat.rank(QUERY, []) == []


def test_predict_gives_logits_or_sentence_transformers_probabilities(cat, st_cat):
    pairs = [(QUERY, d) for d in DOCUMENTS]
    logits = cat.predict(pairs)
    assert logits.shape == (len(pairs),) and logits.dtype == np.float32
    np.testing.assert_allclose(cat.score([QUERY] * len(DOCUMENTS), DOCUMENTS), logits, atol=1e-6)
    sigmoid = cat.predict(pairs, activation_fn=torch.nn.Sigmoid())
    np.testing.assert_allclose(sigmoid, st_cat.predict(pairs), rtol=0, atol=1e-5)
    one = cat.predict(pairs[1])  # one pair: one score, as sentence-transformers gives
    assert np.ndim(one) == 0 and one == pytest.approx(logits[1], abs=1e-5)
    assert np.ndim(st_cat.predict(pairs[1])) == 0


@pytest.mark.kernels
def test_rank_refuses_an_untrained_head(tiny_bert_dir):
    untrained = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu"))
    with pytest.raises(DotcatError, match="not a cross-encoder"):
        untrained.rank(QUERY, DOCUMENTS)


def test_reprs_are_one_short_line(ours, cat):
    assert repr(ours) == (
        f"BiEncoder({ours.name!r}, pooling='mean', similarity='dot', max_length=64, dim=32, "
        "device=cpu, precision='fp32')"
    )
    assert repr(cat).startswith(f"CrossEncoder({cat.name!r}, max_length=") and "\n" not in repr(cat)
