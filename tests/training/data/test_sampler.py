"""dotcat.training.data.sampler: conflict-free batches, coverage, determinism, resume, the mask."""

from __future__ import annotations

import random

import pytest
import torch
from torch.utils.data import DataLoader

from dotcat.errors import DotcatError
from dotcat.losses.contrastive import contrastive_loss
from dotcat.training.data.examples import TrainingExample
from dotcat.training.data.sampler import NoDuplicatePositiveBatchSampler, batch_false_negatives


def _random_examples(rng: random.Random, n_queries: int, n_docs: int, n_neg: int):
    """Queries with 1-3 positives drawn from a small pool (so positives are shared)."""
    examples, qrels = [], {}
    docs = [f"d{i}" for i in range(n_docs)]
    for q in range(n_queries):
        qid = f"q{q}"
        positives = rng.sample(docs, rng.randint(1, 3))
        qrels[qid] = {d: rng.choice((1, 2)) for d in positives}
        if rng.random() < 0.3:
            qrels[qid].setdefault(rng.choice(docs), 0)  # judged non-relevant: a legal negative
        pool = [d for d in docs if qrels[qid].get(d, 0) <= 0]
        for p in positives:
            examples.append(TrainingExample(qid, f"text {q}", p, tuple(rng.sample(pool, n_neg))))
    return examples, qrels


def _relevant(qrels, qid):
    return {d for d, r in qrels[qid].items() if r > 0}


def test_batches_never_hold_false_negatives_over_random_configurations():
    rng = random.Random(1234)
    for _ in range(60):
        n_neg = rng.randint(0, 2)
        examples, qrels = _random_examples(rng, rng.randint(1, 40), rng.randint(8, 60), n_neg)
        batch_size = rng.randint(1, 9)
        drop_last = rng.random() < 0.3
        check_negatives = rng.random() < 0.7
        sampler = NoDuplicatePositiveBatchSampler(
            examples,
            batch_size,
            seed=rng.randint(0, 99),
            drop_last=drop_last,
            qrels=qrels,
            check_negatives=check_negatives,
        )
        for epoch in range(2):
            sampler.set_epoch(epoch)
            batches = list(sampler)
            assert len(batches) == len(sampler.batches(epoch))
            flat = [i for b in batches for i in b]
            assert len(flat) == len(set(flat))
            if drop_last:
                assert all(len(b) == batch_size for b in batches)
            else:
                assert sorted(flat) == list(range(len(examples)))
                assert all(1 <= len(b) <= batch_size for b in batches)
            seen_short = False
            for b in batches:
                seen_short |= len(b) < batch_size
                if not seen_short:
                    assert len(b) == batch_size  # short batches only at the end
                batch = [examples[i] for i in b]
                assert len({e.qid for e in batch}) == len(batch)
                assert len({e.positive_id for e in batch}) == len(batch)
                for e in batch:
                    for other in batch:
                        if other is e:
                            continue
                        docs = {other.positive_id}
                        if check_negatives:
                            docs |= set(other.negative_ids)
                        assert not docs & _relevant(qrels, e.qid)
                mask = batch_false_negatives(batch, qrels)
                if check_negatives:
                    assert not mask.any()
                else:
                    assert not mask[:, : len(batch)].any()


def test_shared_positive_and_negative_collisions_are_kept_apart():
    shared = [
        TrainingExample("q0", "a", "d0"),
        TrainingExample("q1", "b", "d0"),
        TrainingExample("q2", "c", "d2"),
    ]
    for seed in range(10):
        for b in NoDuplicatePositiveBatchSampler(shared, 3, seed=seed):
            assert not {0, 1} <= set(b)
    crossed = [TrainingExample("q0", "a", "d0", ("d1",)), TrainingExample("q1", "b", "d1", ("d5",))]
    assert list(NoDuplicatePositiveBatchSampler(crossed, 2)) in ([[0], [1]], [[1], [0]])
    loose = NoDuplicatePositiveBatchSampler(crossed, 2, check_negatives=False)
    assert sorted(next(iter(loose))) == [0, 1]


def test_batches_are_deterministic_per_seed_and_epoch():
    examples, qrels = _random_examples(random.Random(5), 50, 200, 1)

    def make(seed=0):
        return NoDuplicatePositiveBatchSampler(examples, 8, seed=seed, qrels=qrels)

    assert make().batches(0) == make().batches(0) == list(make())
    assert make().batches(0) != make().batches(1)
    assert make(0).batches(3) != make(1).batches(3)
    loader = DataLoader(examples, batch_sampler=make(), collate_fn=lambda b: [e.qid for e in b])
    assert len(loader) == len(make().batches(0))
    assert list(loader) == [[examples[i].qid for i in b] for b in make().batches(0)]
    assert list(loader) == [[examples[i].qid for i in b] for b in make().batches(1)]


def test_state_dict_resume_yields_exactly_the_remaining_batches():
    examples, _ = _random_examples(random.Random(7), 40, 150, 2)
    first = NoDuplicatePositiveBatchSampler(examples, 6, seed=3)
    epoch0, epoch1 = first.batches(0), first.batches(1)
    it = iter(first)
    taken = [next(it) for _ in range(4)]
    assert taken == epoch0[:4]
    state = first.state_dict()
    assert state["epoch"] == 0 and state["batches_yielded"] == 4

    resumed = NoDuplicatePositiveBatchSampler(examples, 6, seed=3)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # the trainer's usual call at the top of the epoch: keeps the position
    assert list(resumed) == epoch0[4:]
    assert list(it) == epoch0[4:]  # the original goes on the same way
    assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["batches_yielded"] == 0
    assert list(resumed) == epoch1  # the next epoch, without set_epoch

    mid = NoDuplicatePositiveBatchSampler(examples, 6, seed=3)
    mid.load_state_dict({**state, "epoch": 1, "batches_yielded": 2})
    assert len(mid) == len(epoch1) and list(mid) == epoch1[2:]
    mid.set_epoch(5)  # another epoch: from its first batch
    assert mid.state_dict()["batches_yielded"] == 0 and list(mid) == mid.batches(5)

    # an epoch handed out to the last batch (consumer stopped without exhausting the iterator)
    end = NoDuplicatePositiveBatchSampler(examples, 6, seed=3)
    it = iter(end)
    for _ in range(len(epoch0)):
        next(it)
    assert end.state_dict()["epoch"] == 1 and end.state_dict()["batches_yielded"] == 0


def test_load_state_dict_refuses_other_examples_or_settings():
    examples, _ = _random_examples(random.Random(8), 10, 40, 1)
    state = NoDuplicatePositiveBatchSampler(examples, 4).state_dict()
    with pytest.raises(DotcatError, match="examples_sha256"):
        NoDuplicatePositiveBatchSampler(examples[::-1], 4).load_state_dict(state)
    with pytest.raises(DotcatError, match="batch_size"):
        NoDuplicatePositiveBatchSampler(examples, 5).load_state_dict(state)
    with pytest.raises(DotcatError):
        NoDuplicatePositiveBatchSampler([], 4)
    with pytest.raises(DotcatError):
        NoDuplicatePositiveBatchSampler(examples, 0)


def test_false_negative_mask_layout():
    batch = [
        TrainingExample("q0", "a", "d0", ("a", "b")),
        TrainingExample("q1", "b", "d1", ("c", "d9")),
        TrainingExample("q0", "a", "d9", ("e", "f")),
    ]
    qrels = {"q0": {"d0": 1, "d9": 2, "a": 0}, "q1": {"d1": 1, "b": 1}}
    # columns: 0 d0 | 1 d1 | 2 d9 | 3 a | 4 b | 5 c | 6 d9 | 7 e | 8 f
    expected = torch.zeros(3, 9, dtype=torch.bool)
    expected[0, [2, 6]] = True  # q0's other positive d9, also as q1's negative
    expected[1, 4] = True  # b: q0's negative, relevant to q1
    expected[2, [0, 6]] = True  # q0 again: d0 and d9 (not its own target column 2)
    mask = batch_false_negatives(batch, qrels)
    assert mask.dtype == torch.bool and torch.equal(mask, expected)
    without_qrels = expected.clone()
    without_qrels[1, 4] = False  # only the examples' own positives are known
    assert torch.equal(batch_false_negatives(batch, None), without_qrels)

    torch.manual_seed(0)
    q, p, n = torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 2, 8)
    loss = contrastive_loss(q, p, n, mask=mask)
    assert torch.isfinite(loss)
    assert loss < contrastive_loss(q, p, n)  # masked logits only ever remove denominator terms
    with pytest.raises(ValueError, match="equal numbers"):
        batch_false_negatives([batch[0], TrainingExample("q2", "c", "d2", ("x",))], qrels)
    assert batch_false_negatives([TrainingExample("q", "t", "d")], {}).shape == (1, 1)
