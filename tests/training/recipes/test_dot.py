"""dotcat.training.recipes.dot: an end-to-end run, GradCache == plain, exact resume, triplet,
bf16."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tests.training.toy import TOPICS, make_training_beir

from dotcat.data.splits import DEV_SEED, split_dev
from dotcat.errors import DotcatError
from dotcat.losses import LossConfig
from dotcat.training.config import DotConfig
from dotcat.training.data.examples import TrainingExample
from dotcat.training.data.mining import load_negatives, save_negatives
from dotcat.training.loop import EARLIER_DIR
from dotcat.training.model import TrainableBiEncoder
from dotcat.training.recipes.dot import DotRecipe, backward_batch, evaluate_dev
from dotcat.training.run import train


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    return make_training_beir(tmp_path_factory.mktemp("toy") / "beir")


def _config(data: Path, out: Path, base: Path, cls=DotConfig, **overrides) -> DotConfig:
    settings = dict(
        data=data,
        out_dir=out,
        base=str(base),
        pooling="mean",
        similarity="cos",
        window=(1, 10),
        n_negatives=1,
        epochs=2,
        batch_size=4,
        lr=1e-3,
        warmup_ratio=0.1,
        max_length=32,
        query_max_length=16,
        dev_fraction=0.2,
        seed=7,
        bf16="off",
        device="cpu",
        show_progress=False,
        check=False,  # the held-out check's own tests: tests/training/test_heldout.py
    )
    settings.update(overrides)
    return cls(**settings)


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def _record(out: Path) -> dict:
    return json.loads((out / "dotcat_training.json").read_text())


class _WordVectors:
    """A stand-in bi-encoder for :func:`evaluate_dev`: a text's vector is the sum of fixed
    random word vectors, so scores are far apart (a tiny random BERT ties at 1e-6)."""

    def __init__(self, dim: int = 16) -> None:
        self.rng, self.dim, self.words = np.random.default_rng(0), dim, {}

    def _word(self, word: str) -> np.ndarray:
        if word not in self.words:
            self.words[word] = self.rng.standard_normal(self.dim).astype(np.float32)
        return self.words[word]

    def encode(self, texts, max_length=None, bf16=False):
        return np.stack([sum(self._word(w) for w in t.split()) for t in texts])

    def query_texts(self, texts):
        return list(texts)

    def document_texts(self, texts):
        return list(texts)


def test_evaluate_dev_measures_ndcg_at_10_and_recall_at_100_of_exact_search():
    import ir_measures
    from ir_measures import R, nDCG

    rng = random.Random(3)
    words = [w for pair in TOPICS for w in pair]
    corpus = [
        {"id": f"d{i}", "title": "", "text": " ".join(rng.choices(words, k=8))} for i in range(260)
    ]
    queries = {f"q{j}": " ".join(rng.choices(words, k=3)) for j in range(12)}
    # Several judged documents per query, anywhere in the ranking: some fall past rank 100.
    qrels = {q: {f"d{i}": 1 for i in rng.sample(range(260), 6)} for q in queries}
    model = _WordVectors()

    # Chunks of 50: the top 100 is merged across chunks, as a flat index would rank it.
    got = evaluate_dev(model, corpus, queries, qrels, query_max_length=16, chunk_size=50)

    qids = list(queries)
    scores = model.encode([queries[q] for q in qids]) @ model.encode([x["text"] for x in corpus]).T
    run = [
        ir_measures.ScoredDoc(qid, corpus[j]["id"], float(scores[row, j]))
        for row, qid in enumerate(qids)
        for j in np.argsort(-scores[row])[:100]
    ]
    judged = [ir_measures.Qrel(q_, d_, r) for q_, docs in qrels.items() for d_, r in docs.items()]
    want = ir_measures.calc_aggregate([nDCG @ 10, R @ 10, R @ 100], judged, run)
    assert set(got) == {"nDCG@10", "R@100"}
    assert got["nDCG@10"] == pytest.approx(want[nDCG @ 10], abs=1e-6)
    assert got["R@100"] == pytest.approx(want[R @ 100], abs=1e-6)
    assert want[R @ 10] < want[R @ 100] < 1.0  # the depth is measured, not the top 10 alone


def test_end_to_end_run_writes_model_negatives_and_record(toy_data, tiny_bert_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = train(_config(toy_data, tmp_path / "run", tiny_bert_dir, epochs=3))
    record = _record(out)
    assert record["status"] == "finished"
    assert [e["epoch"] for e in record["epochs"]] == [0, 1, 2, 3]
    scores = [e["dev_nDCG@10"] for e in record["epochs"]]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert record["best_dev_nDCG@10"] == max(scores)
    assert scores[record["best_epoch"]] == max(scores)
    recalls = [e["dev_R@100"] for e in record["epochs"]]
    assert all(0.0 <= r <= 1.0 for r in recalls)
    assert record["best_dev_R@100"] == recalls[record["best_epoch"]]
    losses = [e["train_loss"] for e in record["epochs"][1:]]
    assert losses[-1] < losses[0]  # a learnable toy task: the loss goes down
    assert record["split"]["train_queries"] + record["split"]["dev_queries"] == len(TOPICS)
    assert record["split"]["dev_queries"] >= 1
    assert len(record["data"]["fingerprint"]) == 64
    assert record["base_model"]["fingerprint"] and record["model"]["fingerprint"]
    assert record["negatives"]["method"] == "bm25" and record["negatives"]["window"] == [1, 10]
    assert record["examples_per_second"] > 0 and record["steps"] == record["total_steps"]
    assert record["hyperparameters"]["lr"] == 1e-3 and record["loss"]["temperature"] == 0.05

    negatives, meta = load_negatives(out / "negatives.jsonl.gz")
    assert meta["method"] == "bm25" and negatives
    dev_qids = set(negatives) ^ {f"q{i}" for i in range(len(TOPICS))}
    assert len(dev_qids) == record["split"]["dev_queries"]  # negatives for train queries only

    st = SentenceTransformer(str(out), device="cpu")
    trained = TrainableBiEncoder.from_pretrained(out)
    texts = ["insulin glucose", "a neuron and its synapse"]
    np.testing.assert_allclose(st.encode(texts), trained.encode(texts), atol=1e-5)
    assert not (out / "checkpoints").exists()  # none asked for

    # A second run into the same directory must not silently mix with the first.
    with pytest.raises(DotcatError, match="resume"):
        train(_config(toy_data, out, tiny_bert_dir))


def _example_batch() -> tuple[list[TrainingExample], dict[str, str], dict]:
    docs = {f"d{i}": f"{a} {b} study of {a}" for i, (a, b) in enumerate(TOPICS)}
    batch = [
        TrainingExample(f"q{i}", f"what about {a}", f"d{i}", (f"d{(i + 3) % 16}", f"d{i + 8}"))
        for i, (a, _) in enumerate(TOPICS[:6])
    ]
    # q0 also finds d1 relevant: d1 is a false negative for q0 that the mask must remove.
    qrels = {e.qid: {e.positive_id: 1} for e in batch}
    qrels["q0"]["d1"] = 1
    return batch, docs, qrels


def _grads(model: TrainableBiEncoder) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("loss_name", ["contrastive", "triplet"])
def test_grad_cache_step_gives_the_plain_step_gradients(tiny_no_dropout, loss_name):
    model = TrainableBiEncoder.from_pretrained(tiny_no_dropout, pooling="mean", similarity="cos")
    model.freeze_unused_parameters()
    model.train()
    batch, docs, qrels = _example_batch()
    loss = LossConfig(loss_name, "cos", temperature=0.05, margin=0.5)

    def encode(texts, max_length):
        return model(model.tokenize(texts, max_length))

    def run(chunk_size):
        value = backward_batch(
            encode,
            batch,
            docs,
            loss,
            query_max_length=16,
            max_length=32,
            qrels=qrels,
            chunk_size=chunk_size,
        )
        return value, _grads(model)

    plain_loss, plain = run(None)
    for chunk in (1, 4):
        cached_loss, cached = run(chunk)
        assert cached_loss == pytest.approx(plain_loss, abs=1e-5)
        assert plain.keys() == cached.keys() and len(plain) > 10
        for name in plain:
            torch.testing.assert_close(cached[name], plain[name], atol=1e-5, rtol=1e-4)
    assert any(g.abs().sum() > 0 for g in plain.values())


def test_triplet_accumulation_over_halves_equals_the_whole_batch(tiny_no_dropout):
    # The triplet loss has no in-batch negatives, so two half batches at scale 1/2 must give the
    # whole batch's gradient: the accumulation arithmetic of the training loop.
    model = TrainableBiEncoder.from_pretrained(tiny_no_dropout, pooling="cls", similarity="cos")
    model.freeze_unused_parameters()
    batch, docs, _ = _example_batch()
    loss = LossConfig("triplet", "cos", margin=0.5)

    def step(examples, scale):
        return backward_batch(
            lambda t, n: model(model.tokenize(t, n)),
            examples,
            docs,
            loss,
            query_max_length=16,
            max_length=32,
            scale=scale,
        )

    whole = step(batch, 1.0)
    expected = _grads(model)
    halves = step(batch[:3], 0.5) + step(batch[3:], 0.5)
    got = _grads(model)
    assert halves == pytest.approx(whole, abs=1e-6)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5)


def test_the_dev_split_does_not_follow_the_runs_seed(toy_data, tiny_bert_dir, tmp_path):
    # Every stage holds out the same queries (DEV_SEED): a run with another seed must not train
    # on the queries that calibrate, a hybrid index's fusion weight or a chained run choose on.
    qids = [f"q{i}" for i in range(len(TOPICS))]
    expected = set(split_dev(qids, 0.2, DEV_SEED)[1])
    assert expected and expected != set(split_dev(qids, 0.2, 7)[1])
    config = _config(toy_data, tmp_path / "run", tiny_bert_dir, seed=7, epochs=1, dev_eval="none")
    negatives, _ = load_negatives(train(config) / "negatives.jsonl.gz")
    assert set(qids) - set(negatives) == expected  # negatives are mined for train queries only


def test_resume_continues_exactly(toy_data, tiny_bert_dir, tmp_path):
    common = dict(epochs=2, batch_size=3, grad_accum_steps=1, dev_eval="none", checkpoint_every=0)
    straight = train(_config(toy_data, tmp_path / "straight", tiny_bert_dir, **common))
    total = _record(straight)["steps"]
    assert total >= 6

    split = tmp_path / "split"
    stop = total // 2 + 1  # inside the second epoch
    train(_config(toy_data, split, tiny_bert_dir, stop_after_steps=stop, **common))
    stopped = _record(split)
    assert stopped["status"] == "stopped" and stopped["steps"] == stop
    assert (split / "checkpoints" / f"step-{stop:08d}" / "optimizer.pt").is_file()
    train(_config(toy_data, split, tiny_bert_dir, resume=True, **common))
    resumed = _record(split)
    assert resumed["status"] == "finished" and resumed["steps"] == total
    assert resumed["resumed_from"].endswith(f"step-{stop:08d}")
    # Resuming a finished run does nothing.
    before = (split / "model.safetensors").stat().st_mtime_ns
    train(_config(toy_data, split, tiny_bert_dir, resume=True, **common))
    assert (split / "model.safetensors").stat().st_mtime_ns == before

    a = load_file(straight / "model.safetensors")
    b = load_file(split / "model.safetensors")
    base = load_file(next(Path(tiny_bert_dir).glob("*.safetensors")))
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=0)
    moved = [n for n in a if n.endswith("query.weight")]
    assert moved and any(not torch.equal(a[n], base[n]) for n in moved)  # it did train
    straight_record = _record(straight)
    assert resumed["loss_curve"] == straight_record["loss_curve"]
    assert [e["train_loss"] for e in resumed["epochs"]] == [
        e["train_loss"] for e in straight_record["epochs"]
    ]


def test_an_overwrite_keeps_the_earlier_model_until_it_is_done(
    toy_data, tiny_bert_dir, tmp_path, monkeypatch
):
    """--overwrite: a run that fails (Ctrl-C, a bad setting found late) puts the earlier run
    back as it was; one that finishes replaces it."""
    out = tmp_path / "dot"
    train(_config(toy_data, out, tiny_bert_dir, epochs=1))
    before = _files(out)
    prepare = DotRecipe.prepare

    def interrupted(self):
        prepare(self)  # the new run writes its negatives
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(DotRecipe, "prepare", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(_config(toy_data, out, tiny_bert_dir, epochs=1, seed=8, overwrite=True))
    assert _files(out) == before
    monkeypatch.setattr(DotRecipe, "prepare", prepare)
    train(_config(toy_data, out, tiny_bert_dir, epochs=1, seed=8, overwrite=True))
    assert _record(out)["hyperparameters"]["seed"] == 8 and not (out / EARLIER_DIR).exists()


def test_checkpoints_every_n_steps_and_resume_keeps_dev_history(toy_data, tiny_bert_dir, tmp_path):
    out = tmp_path / "run"
    config = _config(toy_data, out, tiny_bert_dir, epochs=2, checkpoint_every=2, keep_checkpoints=2)
    train(config)
    record = _record(out)
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert len(kept) == 2 and kept[-1] == f"step-{record['steps'] // 2 * 2:08d}"
    state = json.loads((out / "checkpoints" / kept[-1] / "state.json").read_text())
    assert state["config"]["checkpoint_every"] == 2 and state["sampler"]["n_examples"] > 0
    blob = torch.load(out / "checkpoints" / kept[-1] / "optimizer.pt", weights_only=True)
    assert {"optimizer", "scheduler", "torch_rng"} <= blob.keys()

    # Resume from a mid-run checkpoint: the dev history up to it is carried over.
    shutil.rmtree(out / "checkpoints" / kept[-1])
    train(_config(toy_data, out, tiny_bert_dir, epochs=2, checkpoint_every=2, resume=True))
    again = _record(out)
    assert [e["epoch"] for e in again["epochs"]] == [0, 1, 2]
    for before, after in zip(record["epochs"], again["epochs"], strict=True):
        assert after["dev_nDCG@10"] == pytest.approx(before["dev_nDCG@10"], abs=1e-6)
        if before["train_loss"] is not None:
            assert after["train_loss"] == pytest.approx(before["train_loss"], abs=1e-6)


def test_triplet_loss_and_gradcache_and_accumulation_run(toy_data, tiny_bert_dir, tmp_path):
    out = train(
        _config(
            toy_data,
            tmp_path / "triplet",
            tiny_bert_dir,
            loss="triplet",
            margin=0.2,
            n_negatives=2,
            epochs=1,
            grad_accum_steps=2,
            cache_chunk_size=3,
        )
    )
    record = _record(out)
    assert record["loss"]["name"] == "triplet" and record["loss"]["margin"] == 0.2
    assert np.isfinite(record["epochs"][1]["train_loss"])
    assert record["steps"] == record["total_steps"] >= 1


def test_bf16_forced_on_cpu_runs(toy_data, tiny_bert_dir, tmp_path):
    out = train(
        _config(toy_data, tmp_path / "bf16", tiny_bert_dir, bf16="on", epochs=1, dev_fraction=0)
    )
    record = _record(out)
    assert record["bf16"] is True
    assert np.isfinite(record["epochs"][-1]["train_loss"])
    assert record["best_epoch"] == 1  # no dev split: the last epoch is the model
    weights = load_file(out / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in weights.values())


def test_negatives_file_and_in_batch_only(toy_data, tiny_bert_dir, tmp_path):
    first = train(_config(toy_data, tmp_path / "a", tiny_bert_dir, epochs=1))
    again = train(
        _config(
            toy_data,
            tmp_path / "b",
            tiny_bert_dir,
            epochs=1,
            negatives_file=first / "negatives.jsonl.gz",
        )
    )
    a, _ = load_negatives(first / "negatives.jsonl.gz")
    b, meta = load_negatives(again / "negatives.jsonl.gz")
    assert a == b and meta["loaded_from"].endswith("negatives.jsonl.gz")
    # Same negatives, same seed: the same run.
    assert _record(again)["loss_curve"] == _record(first)["loss_curve"]

    foreign, meta = load_negatives(first / "negatives.jsonl.gz")  # as mined on another corpus
    foreign = {q: ["elsewhere", *docs] for q, docs in foreign.items()}
    save_negatives(tmp_path / "foreign.jsonl.gz", foreign, meta)
    with pytest.raises(DotcatError, match="not in the corpus \\(e.g. 'elsewhere'\\)"):
        train(_config(toy_data, tmp_path / "f", tiny_bert_dir, epochs=1,
                      negatives_file=tmp_path / "foreign.jsonl.gz"))  # fmt: skip
    none = train(_config(toy_data, tmp_path / "c", tiny_bert_dir, epochs=1, negatives="none"))
    assert not (none / "negatives.jsonl.gz").exists()
    assert _record(none)["negatives"]["method"] == "none"


def test_dense_remining_between_epochs(toy_data, tiny_bert_dir, tmp_path):
    out = train(
        _config(
            toy_data,
            tmp_path / "remine",
            tiny_bert_dir,
            negatives="dense",
            remine_each_epoch=True,
            epochs=2,
            dev_eval="none",
        )
    )
    first, meta0 = load_negatives(out / "negatives.jsonl.gz")
    second, meta1 = load_negatives(out / "negatives-epoch-1.jsonl.gz")
    assert meta0["method"] == meta1["method"] == "dense"
    assert meta0["model_fingerprint"] != meta1["model_fingerprint"]
    assert first.keys() == second.keys()


def test_the_triplet_loss_is_on_cosines_for_a_dot_product_model(tiny_no_dropout):
    # A dot-product model's embeddings are not unit vectors; the notes' triplet loss compares
    # cosines, so its value is the one computed on the normalised embeddings.
    from dotcat.losses.triplet import triplet_loss

    model = TrainableBiEncoder.from_pretrained(tiny_no_dropout, pooling="cls", similarity="dot")
    model.freeze_unused_parameters()
    batch, docs, _ = _example_batch()
    value = backward_batch(
        lambda t, n: model(model.tokenize(t, n)),
        batch,
        docs,
        LossConfig.for_model("triplet", "dot", None, 0.5),
        query_max_length=16,
        max_length=32,
    )
    with torch.no_grad():
        q = model(model.tokenize([e.query for e in batch], 16))
        p = model(model.tokenize([docs[e.positive_id] for e in batch], 32))
        n = model(model.tokenize([docs[d] for e in batch for d in e.negative_ids], 32))
    n = n.reshape(len(batch), 2, -1)
    assert q.norm(dim=-1).sub(1).abs().max() > 0.1  # really not unit vectors
    on_cos = triplet_loss(q, p, n, margin=0.5, similarity="cos").item()
    on_dot = triplet_loss(q, p, n, margin=0.5, similarity="dot").item()
    assert value == pytest.approx(on_cos, abs=1e-5) and on_cos != pytest.approx(on_dot)
