"""dotcat.data.splits: the deterministic dev split, and a dataset's dev queries."""

from __future__ import annotations

import pytest

from dotcat.data.splits import DEV_FRACTION, DEV_SEED, find_dev_split, split_dev, unit_hash
from dotcat.errors import DotcatError


def test_split_dev_is_deterministic_and_depends_on_seed():
    ids = [f"q{i}" for i in range(200)]
    assert split_dev(ids, 0.2, seed=0) == split_dev(list(ids), 0.2, seed=0)
    assert split_dev(ids, 0.2, seed=0)[1] != split_dev(ids, 0.2, seed=1)[1]


def test_split_dev_is_stable_when_queries_are_added():
    old = [f"q{i}" for i in range(1000)]
    new = [f"n{i}" for i in range(500)]
    train, dev = split_dev(old, 0.1, seed=3)
    train2, dev2 = split_dev(new[:250] + old + new[250:], 0.1, seed=3)
    assert set(dev) == set(dev2) & set(old)
    assert set(train) == set(train2) & set(old)


def test_split_dev_fraction_roughly_respected_and_partition():
    ids = [str(i) for i in range(1000)]
    train, dev = split_dev(ids, 0.1)
    assert 60 <= len(dev) <= 140  # binomial(1000, 0.1): sd 9.5
    assert sorted(train + dev, key=int) == ids
    assert not set(train) & set(dev)
    # order of the input is kept in both parts
    assert train == sorted(train, key=int) and dev == sorted(dev, key=int)
    _, dev30 = split_dev(ids, 0.3)
    assert 240 <= len(dev30) <= 360 and set(dev) <= set(dev30)  # thresholds nest


def test_split_dev_at_least_takes_the_smallest_hashes_where_the_set_allows():
    qids = [f"q{i}" for i in range(50)]
    _, by_fraction = split_dev(qids, 0.1, 42)
    train, dev = split_dev(qids, 0.1, 42, at_least=20)
    assert len(dev) == 20 and len(train) == 30 and set(by_fraction) <= set(dev)
    ranked = sorted(qids, key=lambda q: unit_hash(42, q))
    assert set(dev) == set(ranked[:20])
    # Fewer than twice as many queries: train would be the smaller side, the fraction's kept.
    assert split_dev(qids[:39], 0.1, 42, at_least=20) == split_dev(qids[:39], 0.1, 42)
    # The fraction already gives as many: unchanged.
    assert split_dev(qids, 0.5, 42, at_least=20) == split_dev(qids, 0.5, 42)
    assert split_dev(qids, 0.0, 42, at_least=20) == (qids, [])


def test_split_dev_small_sets_never_leave_a_side_empty():
    assert split_dev(["a", "b"], 0.001) in ((["a"], ["b"]), (["b"], ["a"]))
    train, dev = split_dev(["a", "b", "c"], 0.999)
    assert len(train) == 1 and len(dev) == 2
    assert split_dev(["a", "b", "c"], 0.0) == (["a", "b", "c"], [])
    assert split_dev(["a"], 0.5) in ((["a"], []), ([], ["a"]))
    assert split_dev([], 0.5) == ([], [])


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_split_dev_rejects_bad_fraction(fraction):
    with pytest.raises(DotcatError, match="dev fraction"):
        split_dev(["a", "b"], fraction)


def _beir(root, splits: dict[str, list[tuple[str, str]]], n_queries: int = 40):
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d0", "text": "x"}\n')
    (root / "queries.jsonl").write_text(
        "".join(f'{{"_id": "q{i}", "text": "query {i}"}}\n' for i in range(n_queries))
    )
    for split, pairs in splits.items():
        lines = "".join(f"{q}\t{d}\t1\n" for q, d in pairs)
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    return root


def test_dev_split_comes_from_dev_qrels_when_there_are_some(tmp_path):
    data = _beir(tmp_path, {"dev": [("q1", "d0"), ("q2", "d0")], "train": [("q3", "d0")]})
    dev = find_dev_split(data)
    assert dev.source == "qrels/dev.tsv" and set(dev.queries) == {"q1", "q2"}


def test_dev_split_is_carved_from_train_as_training_carves_it(tmp_path):
    train = [(f"q{i}", "d0") for i in range(30)]
    data = _beir(tmp_path, {"train": train, "test": [("q35", "d0")]})
    dev = find_dev_split(data)
    _, expected = split_dev([q for q, _ in train], DEV_FRACTION, DEV_SEED)
    assert list(dev.queries) == expected and set(dev.qrels) == set(expected)
    assert "q35" not in dev.queries  # never the test split
    assert dev.source == "10% of qrels/train.tsv (seed 42)"


def test_no_dev_split_without_dev_or_train_qrels(tmp_path):
    assert find_dev_split(_beir(tmp_path / "a", {"test": [("q1", "d0")]})) is None
    assert find_dev_split(tmp_path / "a" / "corpus.jsonl") is None
