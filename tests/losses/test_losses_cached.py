"""GradCache: the cached step gives the plain loss and the plain parameter gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dotcat.losses.cached as cached_module
from dotcat.losses import (
    GradCache,
    RandContext,
    contrastive_loss,
    grad_cache_backward,
    split_batch,
    triplet_loss,
)

ATOL = 1e-5
B, N_NEG, D_IN, D_OUT = 6, 2, 12, 8


def _mlp(dropout: float) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(D_IN, 16), nn.Dropout(dropout), nn.Tanh(), nn.Linear(16, D_OUT)
    ).double()


def _inputs():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, D_IN, generator=g, dtype=torch.float64)
    p = q + 0.5 * torch.randn(B, D_IN, generator=g, dtype=torch.float64)
    n = torch.randn(B * N_NEG, D_IN, generator=g, dtype=torch.float64)  # flattened [B*n]
    return q, p, n


def _contrastive(q, p, n):
    return contrastive_loss(q, p, n.view(q.shape[0], -1, q.shape[1]), temperature=0.1)


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    # parameters that do not reach the embeddings (BERT's pooler) have no gradient in either run
    grads = {n: prm.grad.clone() for n, prm in model.named_parameters() if prm.grad is not None}
    assert grads
    return grads


def _assert_same_grads(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=ATOL, rtol=0), (name, a[name] - b[name])


def _plain_chunked(model, groups, loss_fn, chunk_size):
    """Reference: the same chunks embedded *with* grad in the same order, one backward."""
    embs = [torch.cat([model(c) for c in split_batch(g, chunk_size)]) for g in groups]
    loss = loss_fn(*embs)
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("loss_fn", [_contrastive, lambda q, p, n: triplet_loss(q, p, n[::2])])
def test_matches_full_batch_without_dropout(loss_fn):
    model = _mlp(0.0)
    q, p, n = _inputs()
    plain = loss_fn(model(q), model(p), model(n))  # one forward over the whole batch
    plain.backward()
    expected = _grads(model)
    model.zero_grad()
    loss = GradCache(model, loss_fn, chunk_size=4)(q, p, n)  # chunks of 4 and 2 (uneven)
    assert not loss.requires_grad
    assert torch.allclose(loss, plain.detach(), atol=ATOL)
    _assert_same_grads(_grads(model), expected)


def test_matches_plain_loss_with_dropout_replayed():
    model = _mlp(0.3).train()
    groups = _inputs()
    # dropout is really active: two passes over the same input differ
    assert not torch.allclose(model(groups[0]), model(groups[0]))
    torch.manual_seed(123)
    plain = _plain_chunked(model, groups, _contrastive, chunk_size=4)
    expected = _grads(model)
    model.zero_grad()
    torch.manual_seed(123)
    loss = GradCache(model, _contrastive, chunk_size=4)(*groups)
    assert torch.allclose(loss, plain, atol=ATOL)
    _assert_same_grads(_grads(model), expected)


def test_without_rng_replay_the_gradients_would_differ(monkeypatch):
    # Guards the test above: if the second pass drew fresh dropout masks, it would catch it.
    model = _mlp(0.3).train()
    groups = _inputs()
    torch.manual_seed(123)
    _plain_chunked(model, groups, _contrastive, chunk_size=4)
    expected = _grads(model)
    model.zero_grad()
    monkeypatch.setattr(cached_module.RandContext, "__enter__", lambda self: None)
    monkeypatch.setattr(cached_module.RandContext, "__exit__", lambda self, *exc: None)
    torch.manual_seed(123)
    GradCache(model, _contrastive, chunk_size=4)(*groups)
    got = _grads(model)
    assert not all(torch.allclose(got[k], expected[k], atol=ATOL) for k in got)


def test_tiny_bert_with_dropout(tiny_bert_dir):
    from transformers import AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = BertModel.from_pretrained(tiny_bert_dir).train()
    assert model.config.hidden_dropout_prob > 0

    def encode(batch):  # [CLS] pooling, as BERT_DOT
        return model(**batch).last_hidden_state[:, 0]

    queries = ["cats and dogs", "how do cells make ATP", "blood sugar hormone", "vaccines"]
    positives = ["Dogs came from wolves.", "Mitochondria produce ATP.", "Insulin.", "Immunity"]
    negatives = ["Plants use light.", "Cats are mammals.", "ATP is energy.", "Wolves howl."]
    groups = [dict(tokenizer(t, padding=True, return_tensors="pt")) for t in (queries, positives)]
    groups.append(dict(tokenizer(negatives, padding=True, return_tensors="pt")))

    def loss_fn(q, p, n):
        return contrastive_loss(q, p, n.unsqueeze(1))

    torch.manual_seed(7)
    embs = [torch.cat([encode(c) for c in split_batch(g, 3)]) for g in groups]
    plain = loss_fn(*embs)
    plain.backward()
    expected = _grads(model)
    model.zero_grad()
    torch.manual_seed(7)
    loss = grad_cache_backward(encode, [split_batch(g, 3) for g in groups], loss_fn)
    assert torch.allclose(loss, plain.detach(), atol=ATOL)
    _assert_same_grads(_grads(model), expected)


def test_separate_encoders_learned_temperature_and_no_sync():
    q_model, d_model = _mlp(0.0), _mlp(0.0)
    with torch.no_grad():
        d_model[0].weight.mul_(0.5)  # make the two towers differ
    log_tau = nn.Parameter(torch.tensor(-2.0, dtype=torch.float64))
    q, p, n = _inputs()

    def loss_fn(qe, pe, ne):
        return contrastive_loss(qe, pe, ne.view(B, N_NEG, -1), temperature=log_tau.exp())

    loss_fn(q_model(q), d_model(p), d_model(n)).backward()
    expected = {**_grads(q_model), **{f"d.{k}": v for k, v in _grads(d_model).items()}}
    expected_tau = log_tau.grad.clone()
    for m in (q_model, d_model):
        m.zero_grad()
    log_tau.grad = None

    entered = []

    def no_sync():
        entered.append(1)
        return torch.autograd.grad_mode.enable_grad()

    chunks = [split_batch(x, 4) for x in (q, p, n)]  # 2 + 2 + 3 chunks
    grad_cache_backward([q_model, d_model, d_model], chunks, loss_fn, no_sync=no_sync)
    got = {**_grads(q_model), **{f"d.{k}": v for k, v in _grads(d_model).items()}}
    _assert_same_grads(got, expected)
    assert torch.allclose(log_tau.grad, expected_tau, atol=ATOL)
    assert len(entered) == 6  # every chunk's backward but the last


def test_unused_group_and_errors():
    model = _mlp(0.0)
    q, p, n = _inputs()
    loss = grad_cache_backward(
        model, [split_batch(x, 4) for x in (q, p, n)], lambda a, b, c: contrastive_loss(a, b)
    )
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="at least one chunk"):
        grad_cache_backward(model, [[q], []], contrastive_loss)
    with pytest.raises(ValueError, match="encode functions"):
        grad_cache_backward([model], [[q], [p]], contrastive_loss)
    with pytest.raises(ValueError, match="scalar"):
        grad_cache_backward(model, [[q]], lambda e: e.sum(1))


def test_split_batch_and_rand_context():
    assert split_batch(["a", "b", "c"], 2) == [["a", "b"], ["c"]]
    parts = split_batch({"input_ids": torch.arange(5), "mask": torch.ones(5)}, 2)
    assert [p["input_ids"].tolist() for p in parts] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="batch sizes"):
        split_batch({"a": torch.ones(2), "b": torch.ones(3)}, 2)
    with pytest.raises(ValueError, match="chunk_size"):
        split_batch([1], 0)

    torch.manual_seed(5)
    ctx = RandContext()
    first = torch.rand(4)
    after = torch.rand(4)
    with ctx:
        assert torch.equal(torch.rand(4), first)  # replayed
    assert not torch.equal(torch.rand(4), after)  # the outer stream went on from where it was
