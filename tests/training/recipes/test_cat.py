"""dotcat.training.recipes.cat: chunked == whole gradients, the head's rate, a run, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tests.training.toy import TOPICS, make_training_beir

from dotcat.data.splits import DEV_SEED, split_dev
from dotcat.errors import DotcatError
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.training.checkpoint import latest_checkpoint
from dotcat.training.config import CatConfig
from dotcat.training.recipes.cat import (
    CatRecipe,
    backward_groups,
    cat_param_groups,
    set_attention_dropout,
)
from dotcat.training.run import train


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    return make_training_beir(tmp_path_factory.mktemp("cat_toy") / "beir")


def _config(data: Path, out: Path, base: Path, **overrides) -> CatConfig:
    settings = dict(
        data=data,
        out_dir=out,
        base=str(base),
        first_stages=("bm25",),
        depth=10,
        n_negatives=3,
        epochs=2,
        batch_size=4,
        pairs_per_forward=8,
        lr=1e-3,
        max_length=48,
        dev_fraction=0.25,
        dev_depth=5,
        seed=3,
        bf16="off",
        device="cpu",
        show_progress=False,
        check=False,  # the held-out check's own tests: tests/training/test_heldout.py
    )
    settings.update(overrides)
    return CatConfig(**settings)


def _record(out: Path) -> dict:
    return json.loads((out / "dotcat_training.json").read_text())


def test_the_dev_split_does_not_follow_the_runs_seed(toy_data, tiny_bert_dir, tmp_path):
    # The queries every other stage holds out (DEV_SEED), whatever the run's own seed.
    qids = [f"q{i}" for i in range(len(TOPICS))]
    expected = set(split_dev(qids, 0.25, DEV_SEED)[1])
    assert expected and expected != set(split_dev(qids, 0.25, 3)[1])
    config = _config(toy_data, tmp_path / "run", tiny_bert_dir, seed=3)
    recipe = CatRecipe(config, CatRecipe.context(config.device))
    recipe.prepare()
    assert set(recipe.dev_queries) == expected


def test_a_small_judged_set_holds_out_the_interpolation_rules_twenty(tiny_bert_dir, tmp_path):
    # 48 queries: 10 % would hold out ~5, too few for the rule that chooses the interpolation
    # weight (it would keep the plain cross-encoder unjudged); 20 are held out, 28 train.
    data = make_training_beir(tmp_path / "beir")
    queries = [json.loads(line) for line in (data / "queries.jsonl").read_text().splitlines()]
    extra = [
        {"_id": f"{q['_id']}v{k}", "text": f"{q['text']} v{k}"} for q in queries for k in (1, 2)
    ]
    with open(data / "queries.jsonl", "a", encoding="utf-8") as f:
        f.writelines(json.dumps(q) + "\n" for q in extra)
    with open(data / "qrels" / "train.tsv", "a", encoding="utf-8") as f:
        f.writelines(f"{q['_id']}\td{q['_id'][1:].split('v')[0]}\t1\n" for q in extra)
    config = _config(data, tmp_path / "run", tiny_bert_dir, dev_fraction=0.1)
    recipe = CatRecipe(config, CatRecipe.context(config.device))
    recipe.prepare()
    assert (len(recipe.train_queries), len(recipe.dev_queries)) == (28, 20)
    qids = list(recipe.train_queries) + list(recipe.dev_queries)
    assert set(split_dev(qids, 0.1, DEV_SEED)[1]) < set(recipe.dev_queries)


@pytest.mark.parametrize("loss", ["lce", "bce", "lce+teacher"])
def test_chunked_backward_gives_the_whole_batch_gradient(tiny_no_dropout, loss):
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_no_dropout), device="cpu"), seed=1)
    ce.model.requires_grad_(True).train()
    groups = [
        (f"query {i} about cells", [f"doc {i} {'word ' * (i + j)}" for j in range(4)])
        for i in range(6)
    ]

    teacher = dict(teacher=[[1.0, 0.5 * i, 0.2, 0.0] for i in range(6)], teacher_weight=0.5)
    extra = teacher if loss == "lce+teacher" else {}
    loss = loss.removesuffix("+teacher")

    def grads(pairs_per_forward: int) -> tuple[float, dict[str, torch.Tensor]]:
        ce.model.zero_grad(set_to_none=True)
        value = backward_groups(ce, groups, loss, pairs_per_forward=pairs_per_forward, **extra)
        return value, {n: p.grad.clone() for n, p in ce.model.named_parameters()}

    whole, g_whole = grads(0)
    chunked, g_chunked = grads(8)  # two groups of four pairs per forward
    assert chunked == pytest.approx(whole, rel=1e-5)
    for name, g in g_whole.items():
        torch.testing.assert_close(g_chunked[name], g, atol=1e-6, rtol=1e-4)
    with pytest.raises(ValueError, match="same size"):
        backward_groups(ce, [("q", ["a", "b"]), ("q", ["a"])], loss)


def test_a_teacher_run_trains_records_and_resumes(toy_data, tiny_bert_dir, tmp_path):
    common = dict(epochs=1, teacher_weight=0.5, teacher_temperature=0.2, dev_fraction=0.0)
    out = train(_config(toy_data, tmp_path / "t", tiny_bert_dir, **common))
    record = _record(out)
    assert record["hyperparameters"]["teacher_weight"] == 0.5 and record["status"] == "finished"
    plain = _record(train(_config(toy_data, tmp_path / "p", tiny_bert_dir,
                                                epochs=1, dev_fraction=0.0)))  # fmt: skip
    assert record["loss_curve"] != plain["loss_curve"]  # the target changed the loss
    assert (out / "teacher.json.gz").is_file()
    split = tmp_path / "split"
    train(_config(toy_data, split, tiny_bert_dir, stop_after_steps=1, **common))
    train(_config(toy_data, split, tiny_bert_dir, resume=True, **common))
    assert _record(split)["loss_curve"] == record["loss_curve"]
    with pytest.raises(DotcatError, match="needs the lce loss"):
        train(_config(toy_data, tmp_path / "b", tiny_bert_dir, loss="bce", **common))


def test_attention_dropout_is_set_on_attention_modules_only(tiny_bert_dir):
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu"))
    assert set_attention_dropout(ce.model, 0.0) == 2  # two layers
    drops = {n: m.p for n, m in ce.model.named_modules() if isinstance(m, torch.nn.Dropout)}
    assert all(p == 0.0 for n, p in drops.items() if n.endswith("attention.self.dropout"))
    assert any(p > 0 for n, p in drops.items() if not n.endswith("attention.self.dropout"))


def test_the_loop_learns_a_batch(tiny_no_dropout):
    """A few AdamW steps on one batch of groups drive the LCE loss well below log(4)."""
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_no_dropout), device="cpu"), seed=0)
    ce.model.requires_grad_(True).train()
    optimizer = torch.optim.AdamW(ce.model.parameters(), lr=5e-3)
    groups = [
        ("insulin glucose", ["insulin glucose study", "bone calcium", "lung oxygen", "gene risk"]),
        ("bone calcium", ["calcium bone levels", "insulin glucose", "heart artery", "skin"]),
    ]
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        losses.append(backward_groups(ce, groups, "lce", pairs_per_forward=4))
        optimizer.step()
    assert losses[0] == pytest.approx(np.log(4), abs=0.05)
    assert min(losses[-5:]) < losses[0] - 0.3


def test_the_new_head_gets_a_larger_learning_rate(tiny_bert_dir, tmp_path):
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu"))
    ce.model.requires_grad_(True)
    config = CatConfig(data=tmp_path, out_dir=tmp_path, lr=1e-4, head_lr_scale=10)
    groups = cat_param_groups(ce.model, config)
    head = [g for g in groups if "lr" in g]
    assert len(head) == 1 and head[0]["lr"] == pytest.approx(1e-3)
    named = dict(ce.model.named_parameters())
    assert {id(p) for p in head[0]["params"]} == {
        id(named["classifier.weight"]),
        id(named["classifier.bias"]),
    }
    assert sum(len(g["params"]) for g in groups) == len(named)  # every parameter, once


def test_run_trains_saves_a_cross_encoder_and_records_everything(toy_data, tiny_bert_dir, tmp_path):
    from sentence_transformers import CrossEncoder as STCrossEncoder

    out = train(_config(toy_data, tmp_path / "cat", tiny_bert_dir, loss="lce"))
    record = _record(out)
    assert record["kind"] == "cat" and record["status"] == "finished"
    assert record["loss"] == {"name": "lce", "group_size": 4}
    assert [e["epoch"] for e in record["epochs"]] == [0, 1, 2]
    assert record["epochs"][0]["dev_nDCG@10"] is not None  # the first stage alone
    assert record["best_epoch"] in (1, 2) and record["best_dev_nDCG@10"] is not None
    assert all(np.isfinite(loss) for _, loss in record["loss_curve"])
    trained = load_file(out / "model.safetensors")
    base = load_file(next(Path(tiny_bert_dir).glob("*.safetensors")))
    moved = [n for n in trained if n.endswith("attention.self.query.weight")]
    assert moved and any(
        not torch.equal(trained[n], base[n.removeprefix("bert.")]) for n in moved
    )  # the encoder itself was trained, not only the new head
    assert 0.0 <= record["interpolation"]["alpha"] <= 1.0
    assert len(record["interpolation"]["dev_scores"]) == 11
    choice = record["interpolation"]["choice"]  # a handful of dev queries: the prior stays
    assert choice["reason"].startswith("only ") and choice["prior"] == "0.5"
    assert record["interpolation"]["alpha"] == 0.5 and len(choice["scores"]) == 11
    assert record["negatives"]["method"] == "first-stage"
    assert record["timings"]["train_seconds"] > 0 and record["pairs_per_second"] > 0

    saved = json.loads((out / "dotcat_cross_encoder.json").read_text())
    assert (
        saved["max_length"] == 48
        and saved["interpolation_alpha"] == record["interpolation"]["alpha"]
        and saved["interpolation_choice"] == choice
    )
    ce = CrossEncoder.load(CrossEncoderConfig(model=str(out), device="cpu", precision="fp32"))
    assert ce.trained_head and ce.max_length == 48
    pairs = [("insulin glucose", "glucose insulin study"), ("insulin glucose", "bone calcium")]
    ours = ce.score([q for q, _ in pairs], [d for _, d in pairs])
    theirs = STCrossEncoder(str(out), device="cpu").predict(
        pairs, activation_fn=torch.nn.Identity(), show_progress_bar=False
    )
    torch.testing.assert_close(torch.tensor(theirs), torch.tensor(ours), atol=1e-5, rtol=1e-5)

    with pytest.raises(DotcatError, match="earlier training run"):
        train(_config(toy_data, out, tiny_bert_dir))


def test_resume_continues_exactly(toy_data, tiny_bert_dir, tmp_path):
    common = dict(epochs=2, loss="bce", dev_fraction=0.0)
    straight = train(_config(toy_data, tmp_path / "straight", tiny_bert_dir, **common))
    total = _record(straight)["steps"]
    assert total >= 4
    split = tmp_path / "split"
    stop = total // 2 + 1  # inside the second epoch
    train(_config(toy_data, split, tiny_bert_dir, stop_after_steps=stop, **common))
    assert _record(split)["status"] == "stopped"
    train(_config(toy_data, split, tiny_bert_dir, resume=True, **common))
    resumed = _record(split)
    assert resumed["status"] == "finished" and resumed["steps"] == total
    assert resumed["resumed_from"].endswith(f"step-{stop:08d}")
    assert resumed["loss_curve"] == _record(straight)["loss_curve"]
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=0)


def test_bad_settings_are_refused(toy_data, tiny_bert_dir, tmp_path):
    for bad in (dict(loss="hinge"), dict(n_negatives=0), dict(depth=0), dict(first_stages=())):
        with pytest.raises(DotcatError):
            train(_config(toy_data, tmp_path / "bad", tiny_bert_dir, **bad))


def test_bf16_off_scores_the_dev_split_in_fp32_too(toy_data, tiny_bert_dir, tmp_path, monkeypatch):
    """--bf16 off means fp32 for the whole run, its dev re-ranking included, even where the
    CPU has native bf16 (forced here, so the test means the same on every machine)."""
    from dotcat.models import runtime

    monkeypatch.setenv(runtime.NATIVE_BF16_ENV, "on")
    seen: list[torch.dtype | None] = []
    original = CrossEncoder.score

    def spy(self, *args, **kwargs):
        seen.append(self.autocast_dtype)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CrossEncoder, "score", spy)
    train(_config(toy_data, tmp_path / "out", tiny_bert_dir, epochs=1, bf16="off"))
    assert seen and all(dtype is None for dtype in seen)
    assert _record(tmp_path / "out")["bf16"] is False


def test_resume_keeps_the_dev_chosen_interpolation_weight(toy_data, tiny_bert_dir, tmp_path):
    """The weight is chosen at the end on the best epoch's dev candidates; a run resumed after
    that epoch must choose it from the same candidates (they live in the checkpoint)."""
    common = dict(epochs=2, loss="bce", dev_fraction=0.25)
    straight = train(_config(toy_data, tmp_path / "straight", tiny_bert_dir, **common))
    total = _record(straight)["steps"]
    split = tmp_path / "split"
    stop = total // 2 + 1  # inside the second epoch, after the first one's dev evaluation
    train(_config(toy_data, split, tiny_bert_dir, stop_after_steps=stop, **common))
    state = json.loads((latest_checkpoint(split) / "state.json").read_text())
    assert state["best"]["epoch"] == 1  # epoch 1 was evaluated before the stop...
    kept = state["best_candidates"]  # ...and its dev candidates travel with the checkpoint
    assert len(kept) == _record(split)["split"]["dev_queries"]
    assert all(len(c["cat"]) == min(5, len(c["docs"])) for c in kept.values())
    train(_config(toy_data, split, tiny_bert_dir, resume=True, **common))
    want, got = _record(straight)["interpolation"], _record(split)["interpolation"]
    assert want and got == want
    saved = json.loads((split / "dotcat_cross_encoder.json").read_text())
    assert saved["interpolation_alpha"] == want["alpha"]


def test_the_dev_lists_are_at_dev_depth_whatever_the_negatives_depth(
    toy_data, tiny_bert_dir, tmp_path
):
    """``--depth 2`` draws negatives from each first stage's top 2; the dev lists, which judge
    the re-ranker and choose its weight, stay at search's depth (``dev_depth``), fresh or
    resumed."""
    lists = []
    for resume in (False, True):
        config = _config(toy_data, tmp_path / "run", tiny_bert_dir, depth=2, resume=resume)
        recipe = CatRecipe(config, CatRecipe.context(config.device))
        (tmp_path / "run").mkdir(exist_ok=True)
        recipe.prepare()
        lists.append(recipe.dev_first)
    assert lists[0] and {len(docs) for docs in lists[0].values()} == {5}
    assert lists[1] == lists[0]
