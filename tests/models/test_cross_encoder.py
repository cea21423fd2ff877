"""BERT_CAT cross-encoder on a tiny random BERT: truncation, pair layout, scoring, interop."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from dotcat.errors import DotcatError
from dotcat.models.cross_encoder import (
    DEFAULT_MAX_LENGTH,
    CrossEncoder,
    CrossEncoderConfig,
    PairTemplate,
    _recorded_max_length,
    pair_lengths,
)

#: The pair length the tiny cross-encoder is saved with: neither dotcat's default (256) nor
#: the tokenizer's passage length (512), so a test can tell which one was read back.
SAVED_MAX_LENGTH = 48

SHORT_PAIRS = [
    ("what is a cat", "Cats are small domesticated carnivorous mammals."),
    ("dogs", "Dogs were domesticated from wolves long ago."),
    ("how do cells make atp", "Mitochondria produce ATP for the cell."),
    ("hormone controlling blood sugar", "Insulin regulates blood glucose in mammals."),
    ("vaccines", "x"),
]

_LONG = (
    "Plants turn light into chemical energy in their chloroplasts through photosynthesis, a "
    "process that also releases oxygen into the atmosphere of the whole planet. "
)
#: Pairs of very different lengths (1 to ~120 tokens once cut), none of them with a long query.
MIXED_PAIRS = [
    ("cat", "x"),
    ("photosynthesis in plants", _LONG * 4),
    ("dogs and wolves", "Dogs were domesticated from wolves."),
    ("cat", _LONG),
    ("atp", "Mitochondria produce ATP for the cell. " * 6),
    ("insulin", "Insulin."),
    ("what do vaccines train", "Vaccines train the immune system against viruses. " * 3),
    ("light", _LONG * 2),
    ("cat", "Cats are small domesticated carnivorous mammals."),
]


def _load(model_dir: Path | str, **overrides) -> CrossEncoder:
    """At fp32 unless a test says otherwise (``auto`` is bf16 on CPUs with native bf16)."""
    settings = {"device": "cpu", "precision": "fp32", **overrides}
    return CrossEncoder.load(CrossEncoderConfig(model=str(model_dir), **settings))


def _split(pairs):
    return [q for q, _ in pairs], [d for _, d in pairs]


def _spread_head(model: torch.nn.Module, seed: int = 1) -> None:
    """Random pooler and head weights large enough that different pairs score visibly apart.

    A random 2-layer BERT's [CLS] vector barely depends on the text; a wide pooler and head
    turn those small differences into logit gaps far above the 1e-5 the tests compare at.
    """
    g = torch.Generator().manual_seed(seed)
    pooler = model.base_model.pooler.dense
    head = model.classifier
    with torch.no_grad():
        pooler.weight.copy_(torch.randn(pooler.weight.shape, generator=g))
        head.weight.copy_(torch.randn(head.weight.shape, generator=g))
        head.bias.zero_()


def _assert_distinct(scores: np.ndarray, gap: float = 1e-4) -> None:
    """The scores must differ enough that a mixed-up order could not pass a 1e-5 comparison."""
    diffs = np.abs(scores[:, None] - scores[None, :]) + np.eye(len(scores)) * 1e9
    assert diffs.min() > gap, scores


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    return AutoTokenizer.from_pretrained(tiny_bert_dir)


@pytest.fixture(scope="module")
def cat_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """A saved dotcat cross-encoder: the tiny BERT plus a (spread) head, max_length 48."""
    ce = _load(tiny_bert_dir, max_length=SAVED_MAX_LENGTH)
    _spread_head(ce.model)
    return ce.save(tmp_path_factory.mktemp("tiny_cat"))


@pytest.fixture(scope="module")
def cat(cat_dir) -> CrossEncoder:
    return _load(cat_dir)


# -- pair_lengths ----------------------------------------------------------------------------


def test_pair_lengths_keeps_everything_when_the_pair_fits():
    assert pair_lengths(5, 10, 15) == (5, 10)
    assert pair_lengths(5, 10, 100) == (5, 10)
    assert pair_lengths(0, 0, 2) == (0, 0)


def test_pair_lengths_cuts_the_document_first():
    assert pair_lengths(10, 500, 253) == (10, 243)
    assert pair_lengths(30, 100, 100) == (30, 70)
    # exactly half the budget left to the document: the query is still whole
    assert pair_lengths(50, 100, 100) == (50, 50)


def test_pair_lengths_cuts_a_long_query_only_below_half_the_budget():
    assert pair_lengths(51, 100, 100) == (50, 50)
    assert pair_lengths(400, 500, 253) == (127, 126)
    # a short document keeps all of itself, the long query gets the rest
    assert pair_lengths(300, 10, 100) == (90, 10)
    # no document at all: the query takes the whole budget
    assert pair_lengths(300, 0, 100) == (100, 0)


def test_pair_lengths_invariants_over_a_grid():
    for budget in range(2, 41):
        for q in range(0, 45):
            for d in range(0, 45):
                lq, ld = pair_lengths(q, d, budget)
                assert 0 <= lq <= q and 0 <= ld <= d, (q, d, budget)
                assert lq + ld == min(q + d, budget), (q, d, budget)
                # the document gets at least half the budget (or all of itself) ...
                assert ld >= min(d, budget // 2), (q, d, budget)
                # ... and the query is cut only when it has to be for that
                if q + min(d, budget // 2) <= budget:
                    assert lq == q, (q, d, budget)


@pytest.mark.parametrize("budget", [1, 0, -5])
def test_pair_lengths_rejects_a_budget_below_two(budget):
    with pytest.raises(ValueError, match="at least 2"):
        pair_lengths(3, 3, budget)


# -- PairTemplate ----------------------------------------------------------------------------


def test_pair_template_is_bert_layout(tokenizer):
    template = PairTemplate(tokenizer)
    assert template.prefix == [tokenizer.cls_token_id]
    assert template.middle == [tokenizer.sep_token_id]
    assert template.suffix == [tokenizer.sep_token_id]
    assert (template.query_type, template.doc_type) == (0, 1)
    assert template.n_special == 3


@pytest.mark.parametrize(("query", "doc"), SHORT_PAIRS)
def test_pair_template_matches_the_tokenizer_on_short_pairs(tokenizer, query, doc):
    template = PairTemplate(tokenizer)
    q_ids = tokenizer(query, add_special_tokens=False)["input_ids"]
    d_ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
    ids, types = template.build(q_ids, d_ids)
    ref = tokenizer(query, doc, return_token_type_ids=True)
    assert ids == ref["input_ids"]
    assert types == ref["token_type_ids"]


def test_features_match_the_padded_tokenizer_batch(cat, tokenizer):
    queries, docs = _split(SHORT_PAIRS)
    features = cat.features(queries, docs)
    ref = tokenizer(queries, docs, padding=True, return_tensors="pt", return_token_type_ids=True)
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(features[key], ref[key]), key


# -- truncation ------------------------------------------------------------------------------


def test_long_document_is_cut_and_the_query_kept_whole(cat_dir, tokenizer):
    ce = _load(cat_dir, max_length=16)
    query, doc = "how do cells make atp", _LONG * 3
    q_ids = tokenizer(query, add_special_tokens=False)["input_ids"]
    d_ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
    assert len(q_ids) < 13 < len(d_ids)
    ids = ce.features([query], [doc])["input_ids"][0].tolist()
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    n_doc = 16 - 3 - len(q_ids)
    assert ids == [cls, *q_ids, sep, *d_ids[:n_doc], sep]
    # the same as Hugging Face's "cut only the second text" when the query fits
    ref = tokenizer(query, doc, truncation="only_second", max_length=16)["input_ids"]
    assert ids == ref


def test_very_long_query_is_cut_and_the_document_keeps_half(cat_dir, tokenizer):
    ce = _load(cat_dir, max_length=16)  # budget 13 without [CLS] [SEP] [SEP]
    query, doc = _LONG, "Dogs were domesticated from wolves long ago. " * 5
    q_ids = tokenizer(query, add_special_tokens=False)["input_ids"]
    d_ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
    assert len(q_ids) > 13 and len(d_ids) > 13
    features = ce.features([query, query], [doc, "x"])
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    x_ids = tokenizer("x", add_special_tokens=False)["input_ids"]
    assert features["input_ids"][0].tolist() == [cls, *q_ids[:7], sep, *d_ids[:6], sep]
    assert features["token_type_ids"][0].tolist() == [0] * 9 + [1] * 7
    # a one-token document is kept whole, the query gets the rest of the budget
    assert features["input_ids"][1].tolist() == [cls, *q_ids[:12], sep, *x_ids, sep]
    assert features["attention_mask"].sum(dim=1).tolist() == [16, 16]


# -- loading and saving ----------------------------------------------------------------------


def test_plain_bert_gets_a_new_untrained_head(tiny_bert_dir):
    ce = _load(tiny_bert_dir)
    assert not ce.trained_head
    with pytest.raises(DotcatError, match="not a cross-encoder"):
        ce.require_trained()
    # the tokenizer's 512 is a passage length, not a pair length
    assert ce.tokenizer.model_max_length == 512
    assert ce.max_length == DEFAULT_MAX_LENGTH
    # the new head is seeded: same seed, same head; another seed, another head
    again = CrossEncoder.load(
        CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32"), seed=0
    )
    other = CrossEncoder.load(
        CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32"), seed=1
    )
    assert torch.equal(ce.model.classifier.weight, again.model.classifier.weight)
    assert not torch.equal(ce.model.classifier.weight, other.model.classifier.weight)


def test_save_and_reload_round_trip(tiny_bert_dir, tmp_path):
    ce = _load(tiny_bert_dir, max_length=SAVED_MAX_LENGTH)
    _spread_head(ce.model, seed=3)
    queries, docs = _split(MIXED_PAIRS)
    before = ce.score(queries, docs)
    _assert_distinct(before)

    out = ce.save(tmp_path / "cat")
    record = json.loads((out / "dotcat_cross_encoder.json").read_text())
    assert record["max_length"] == SAVED_MAX_LENGTH
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert (out / "model.safetensors").is_file()

    back = _load(out)
    assert back.trained_head
    back.require_trained()
    assert back.max_length == SAVED_MAX_LENGTH
    np.testing.assert_allclose(back.score(queries, docs), before, rtol=0, atol=1e-5)

    # dotcat's own record wins over the tokenizer's model_max_length
    (out / "dotcat_cross_encoder.json").write_text(json.dumps({"max_length": 40}))
    assert _load(out).max_length == 40
    # an explicit max_length wins over both
    assert _load(out, max_length=24).max_length == 24


def test_recorded_max_length_sources(tmp_path):
    tok = SimpleNamespace(model_max_length=64)
    # a trained cross-encoder's tokenizer records its pair length
    assert _recorded_max_length(tmp_path, tok, 512, trained_head=True) == 64
    # a base checkpoint's is a passage length: dotcat's default instead
    assert _recorded_max_length(tmp_path, tok, 512, trained_head=False) == DEFAULT_MAX_LENGTH
    # an unset tokenizer length (transformers' huge sentinel) or too few positions
    huge = SimpleNamespace(model_max_length=int(1e30))
    assert _recorded_max_length(tmp_path, huge, 512, trained_head=True) == DEFAULT_MAX_LENGTH
    assert _recorded_max_length(tmp_path, huge, 128, trained_head=True) == 128
    # dotcat_cross_encoder.json wins
    (tmp_path / "dotcat_cross_encoder.json").write_text(json.dumps({"max_length": 100}))
    assert _recorded_max_length(tmp_path, tok, 512, trained_head=True) == 100
    (tmp_path / "dotcat_cross_encoder.json").write_text(json.dumps({"length": 100}))
    with pytest.raises(DotcatError, match="max_length"):
        _recorded_max_length(tmp_path, tok, 512, trained_head=True)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"max_length": 600}, "outside 8..512"),
        ({"max_length": 4}, "max_length must be >= 8, got 4"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_load_rejects_bad_settings(cat_dir, overrides, match):
    with pytest.raises(DotcatError, match=match):
        _load(cat_dir, **overrides)


def test_load_refuses_a_multi_label_classifier(tiny_bert_dir, tmp_path):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert_dir, num_labels=2)
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path)
    with pytest.raises(DotcatError, match="2 labels"):
        _load(tmp_path)


def test_load_refuses_a_directory_without_a_model(tmp_path):
    with pytest.raises(DotcatError, match="not a model directory"):
        _load(tmp_path)


# -- scoring ---------------------------------------------------------------------------------


def _direct_logits(ce: CrossEncoder, tokenizer, pairs) -> np.ndarray:
    """One pair per forward pass straight from the tokenizer: no dotcat batching at all."""
    out = []
    with torch.no_grad():
        for q, d in pairs:
            enc = tokenizer(
                q, d, truncation="only_second", max_length=ce.max_length, return_tensors="pt"
            )
            out.append(ce.model(**enc).logits.item())
    return np.array(out, dtype=np.float32)


def test_fast_score_equals_reference_and_keeps_input_order(cat_dir, tokenizer):
    # small token budget and batch size: many batches, each with its own padding
    fast = _load(cat_dir, batch_size=3, max_batch_tokens=128, cpu_workers=1)
    ref = _load(cat_dir, fast=False, batch_size=1)
    queries, docs = _split(MIXED_PAIRS)
    lengths = fast.features(queries, docs)["attention_mask"].sum(1).tolist()
    assert max(lengths) == fast.max_length and min(lengths) <= 6  # very different lengths
    got = fast.score(queries, docs)
    assert got.dtype == np.float32 and got.shape == (len(MIXED_PAIRS),)
    _assert_distinct(got)
    np.testing.assert_allclose(got, ref.score(queries, docs), rtol=0, atol=1e-5)
    np.testing.assert_allclose(got, _direct_logits(ref, tokenizer, MIXED_PAIRS), atol=1e-5)
    # permuting the input permutes the output
    perm = np.random.default_rng(0).permutation(len(MIXED_PAIRS))
    shuffled = fast.score([queries[i] for i in perm], [docs[i] for i in perm])
    np.testing.assert_allclose(shuffled, got[perm], rtol=0, atol=1e-5)
    # beyond SMALL_CALL pairs: token-budget batches instead of one even split per worker
    from dotcat.models.cross_encoder import SMALL_CALL

    many_q, many_d = _split(MIXED_PAIRS * (SMALL_CALL // len(MIXED_PAIRS) + 1))
    assert len(many_q) > SMALL_CALL
    np.testing.assert_allclose(
        fast.score(many_q, many_d), ref.score(many_q, many_d), rtol=0, atol=1e-5
    )


def test_score_with_two_workers_equals_one(cat_dir):
    queries, docs = _split(MIXED_PAIRS * 3)
    one = _load(cat_dir, batch_size=2, max_batch_tokens=96, cpu_workers=1)
    two = _load(cat_dir, batch_size=2, max_batch_tokens=96, cpu_workers=2)
    assert two._workers() == 2
    np.testing.assert_allclose(two.score(queries, docs), one.score(queries, docs), atol=1e-5)


def test_score_query_equals_score_with_the_query_repeated(cat):
    docs = [d for _, d in SHORT_PAIRS] + [_LONG]
    got = cat.score_query("domesticated animals", docs)
    _assert_distinct(got)
    np.testing.assert_array_equal(got, cat.score(["domesticated animals"] * len(docs), docs))


def test_logits_of_features_equal_score_and_carry_gradients(tiny_bert_dir, cat):
    queries, docs = _split(SHORT_PAIRS)
    with torch.no_grad():
        logits = cat.logits(cat.features(queries, docs))
    assert logits.shape == (len(SHORT_PAIRS),)
    np.testing.assert_allclose(logits.numpy(), cat.score(queries, docs), atol=1e-5)

    trainable = _load(tiny_bert_dir)
    trainable.model.train().requires_grad_(True)
    loss = trainable.logits(trainable.features(queries, docs)).sum()
    loss.backward()
    assert trainable.model.classifier.weight.grad is not None
    assert trainable.model.classifier.weight.grad.abs().sum() > 0


def test_score_rejects_strings_and_mismatched_lengths(cat):
    with pytest.raises(TypeError):
        cat.score("what is a cat", ["Cats are mammals."])
    with pytest.raises(TypeError):
        cat.score(["what is a cat"], "Cats are mammals.")
    with pytest.raises(ValueError, match="2 queries but 1 documents"):
        cat.score(["a", "b"], ["c"])


def test_score_of_nothing_is_empty(cat):
    got = cat.score([], [])
    assert got.shape == (0,) and got.dtype == np.float32


# -- sentence-transformers interop -----------------------------------------------------------


def test_dotcat_directory_loads_in_sentence_transformers(cat, cat_dir):
    from sentence_transformers import CrossEncoder as STCrossEncoder

    st = STCrossEncoder(str(cat_dir), device="cpu")
    assert st.num_labels == 1
    assert st.max_seq_length == cat.max_length == SAVED_MAX_LENGTH
    assert st.tokenizer.model_max_length == SAVED_MAX_LENGTH
    queries, docs = _split(SHORT_PAIRS)
    ours = cat.score(queries, docs)
    _assert_distinct(ours)
    theirs = st.predict(SHORT_PAIRS, activation_fn=torch.nn.Identity())
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-5)
    # its default predict is the sigmoid of our logits
    probs = st.predict(SHORT_PAIRS)
    np.testing.assert_allclose(probs, 1.0 / (1.0 + np.exp(-ours)), rtol=0, atol=1e-6)


def test_sentence_transformers_directory_loads_in_dotcat(tiny_bert_dir, tmp_path):
    from sentence_transformers import CrossEncoder as STCrossEncoder

    st = STCrossEncoder(str(tiny_bert_dir), num_labels=1, max_length=64, device="cpu")
    _spread_head(st.model, seed=7)
    st.save(str(tmp_path / "st"))
    ce = _load(tmp_path / "st")
    assert ce.trained_head
    assert ce.max_length == 64
    queries, docs = _split(SHORT_PAIRS)
    ours = ce.score(queries, docs)
    _assert_distinct(ours)
    theirs = st.predict(SHORT_PAIRS, activation_fn=torch.nn.Identity())
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


# -- the real default model ------------------------------------------------------------------


@pytest.mark.slow
def test_default_checkpoint_starts_a_new_re_ranker():
    """all-MiniLM-L6-v2 is a bi-encoder: it loads with a new head and a pair length of 256."""
    ce = _load("default")
    assert not ce.trained_head
    assert ce.max_length == DEFAULT_MAX_LENGTH
    scores = ce.score(*_split(SHORT_PAIRS))
    assert scores.shape == (len(SHORT_PAIRS),) and np.isfinite(scores).all()
