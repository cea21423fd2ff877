"""dotcat.training.ddp and dotcat.losses.gathered: 2 gloo processes on CPU give the
single-process loss and gradients, for the losses, the dot recipe's step and a whole run.

The processes are started with ``torch.multiprocessing.spawn`` on a free local port; each
writes what it computed to a file, and the test compares that with one process computing the
whole batch.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dotcat.losses import (
    LossConfig,
    contrastive_loss,
    ddp_contrastive_loss,
    ddp_triplet_loss,
    gather_with_grad,
    scale_to_global,
    triplet_loss,
)
from dotcat.training.config import DotConfig
from dotcat.training.data.examples import TrainingExample
from dotcat.training.ddp import DistributedContext, init_distributed, shard_sizes
from dotcat.training.model import TrainableBiEncoder
from dotcat.training.recipes.dot import backward_batch
from dotcat.training.run import train

WORLD = 2
D_IN, D, N_NEG = 10, 6, 2
CASES = [("contrastive", 6), ("contrastive", 5), ("triplet", 5), ("contrastive", 3)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(fn, *args) -> None:
    mp.spawn(fn, args=(WORLD, _free_port(), *args), nprocs=WORLD, join=True)


@pytest.fixture(autouse=True)
def _children_can_import_this_module(monkeypatch):
    # Spawned children unpickle the worker by module name; they inherit the parent's sys.path.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))


def _init(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D_IN, 16), nn.Tanh(), nn.Linear(16, D)).double()


def _inputs(batch: int):
    g = torch.Generator().manual_seed(batch)
    xq = torch.randn(batch, D_IN, generator=g, dtype=torch.float64)
    xp = torch.randn(batch, D_IN, generator=g, dtype=torch.float64)
    xn = torch.randn(batch, N_NEG, D_IN, generator=g, dtype=torch.float64)
    mask = torch.zeros(batch, batch + batch * N_NEG, dtype=torch.bool)
    mask[0, 1] = True  # query 0 finds example 1's positive relevant
    mask[batch - 1, batch + 1] = True  # and the last query one of example 0's negatives
    return xq, xp, xn, mask


def _loss(name, q, p, n, mask, sizes=None, rank=0):
    if sizes is None:  # one process, the whole batch
        if name == "triplet":
            return triplet_loss(q, p, n, margin=0.5, similarity="cos")
        return contrastive_loss(q, p, n, temperature=0.1, similarity="cos", mask=mask)
    if name == "triplet":
        return ddp_triplet_loss(q, p, n, sizes, rank, margin=0.5, similarity="cos")
    return ddp_contrastive_loss(q, p, n, sizes, rank, temperature=0.1, similarity="cos", mask=mask)


def _worker(rank: int, world: int, port: int, out_dir: str, model_dir: str) -> None:
    # One group of processes for both checks: starting processes is the slow part.
    _init(rank, world, port)
    torch.save(_loss_cases(rank, world), Path(out_dir) / f"loss-rank{rank}.pt")
    torch.save(_tiny_step_cases(rank, world, model_dir), Path(out_dir) / f"step-rank{rank}.pt")
    dist.destroy_process_group()


def _loss_cases(rank: int, world: int) -> dict:
    results = {}
    for name, batch in CASES:
        ddp = DistributedDataParallel(_net())
        xq, xp, xn, mask = _inputs(batch)
        sizes = shard_sizes(batch, world)
        start = sum(sizes[:rank])
        rows = slice(start, start + sizes[rank])
        # Three forward passes through DDP before one backward, as the trainer does.
        q, p = ddp(xq[rows]), ddp(xp[rows])
        n = ddp(xn[rows].reshape(-1, D_IN)).reshape(sizes[rank], N_NEG, D)
        loss = _loss(name, q, p, n, mask[rows], sizes, rank)
        loss.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        results[f"{name}-{batch}"] = {
            "loss": float(mean) / world,
            "grads": [prm.grad.clone() for prm in ddp.module.parameters()],
        }
    return results


@pytest.fixture(scope="module")
def ddp_results(tiny_no_dropout, tmp_path_factory) -> Path:
    """What 2 gloo processes computed (see :func:`_worker`), in files ``*-rank{r}.pt``."""
    out = tmp_path_factory.mktemp("ddp")
    _spawn(_worker, str(out), str(tiny_no_dropout))
    return out


def test_two_gloo_processes_give_the_single_process_loss_and_gradients(ddp_results):
    for name, batch in CASES:
        net = _net()
        xq, xp, xn, mask = _inputs(batch)
        n = net(xn.reshape(-1, D_IN)).reshape(batch, N_NEG, D)
        loss = _loss(name, net(xq), net(xp), n, mask)
        loss.backward()
        expected = [prm.grad for prm in net.parameters()]
        for rank in range(WORLD):
            path = ddp_results / f"loss-rank{rank}.pt"
            got = torch.load(path, weights_only=True)[f"{name}-{batch}"]
            assert got["loss"] == pytest.approx(loss.item(), abs=1e-10), (name, batch)
            for g, e in zip(got["grads"], expected, strict=True):
                torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-6)


def test_shard_sizes_and_scaling():
    assert shard_sizes(6, 2) == [3, 3]
    assert shard_sizes(5, 2) == [3, 2]
    assert shard_sizes(5, 3) == [2, 2, 1]
    assert shard_sizes(1, 1) == [1]
    # Averaging the scaled local means over processes gives the global mean.
    values = torch.arange(5.0)
    sizes = shard_sizes(5, 2)
    parts = [values[:3].mean(), values[3:].mean()]
    average = sum(scale_to_global(m, sizes, r) for r, m in enumerate(parts)) / 2
    assert float(average) == pytest.approx(float(values.mean()))
    with pytest.raises(ValueError):
        shard_sizes(3, 0)


def test_single_process_is_a_no_op(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ctx = init_distributed("cpu")
    assert not ctx.enabled and ctx.is_main and ctx.world_size == 1
    assert ctx.local_slice(7) == slice(0, 7)
    ctx.barrier()  # nothing to wait for
    x = torch.randn(3, 2)
    assert gather_with_grad(x, [3]) is x
    assert DistributedContext().device == torch.device("cpu")


# -- the trainer's own step on a tiny BERT ------------------------------------------------


def _tiny_step_cases(rank: int, world: int, model_dir: str) -> dict:
    ctx = DistributedContext(rank=rank, world_size=world)
    results = {}
    for name, chunk in (("contrastive", None), ("contrastive", 2), ("triplet", 2)):
        model, batch, docs, qrels = _tiny_setup(model_dir)
        ddp = DistributedDataParallel(model, broadcast_buffers=False)
        value = backward_batch(
            lambda texts, n, ddp=ddp, model=model: ddp(model.tokenize(texts, n)),
            batch,
            docs,
            LossConfig(name, "cos", temperature=0.05, margin=0.5),
            query_max_length=12,
            max_length=24,
            qrels=qrels,
            ctx=ctx,
            chunk_size=chunk,
            no_sync=ddp.no_sync,
        )
        total = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(total)
        results[f"{name}-{chunk}"] = {
            "loss": float(total) / world,
            "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        }
    return results


def _tiny_setup(model_dir: str):
    model = TrainableBiEncoder.from_pretrained(model_dir, pooling="mean", similarity="cos")
    model.freeze_unused_parameters()
    model.train()
    words = ["insulin", "neuron", "tumor", "virus", "bone", "liver", "lung", "kidney"]
    docs = {f"d{i}": f"{w} study of {w} in patients" for i, w in enumerate(words)}
    batch = [
        TrainingExample(f"q{i}", f"effect of {w}", f"d{i}", (f"d{(i + 5) % 8}",))
        for i, w in enumerate(words[:5])  # 5 examples: shares of 3 and 2
    ]
    qrels = {e.qid: {e.positive_id: 1} for e in batch}
    qrels["q1"]["d2"] = 1  # a false in-batch negative across the two processes' shares
    return model, batch, docs, qrels


def test_trainer_step_under_ddp_equals_one_process(ddp_results, tiny_no_dropout):
    ranks = [torch.load(ddp_results / f"step-rank{r}.pt", weights_only=True) for r in range(WORLD)]
    for name, chunk in (("contrastive", None), ("contrastive", 2), ("triplet", 2)):
        model, batch, docs, qrels = _tiny_setup(str(tiny_no_dropout))
        value = backward_batch(
            lambda texts, n, model=model: model(model.tokenize(texts, n)),
            batch,
            docs,
            LossConfig(name, "cos", temperature=0.05, margin=0.5),
            query_max_length=12,
            max_length=24,
            qrels=qrels,
        )
        expected = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        for got in (r[f"{name}-{chunk}"] for r in ranks):
            assert got["loss"] == pytest.approx(value, abs=1e-5)
            assert got["grads"].keys() == expected.keys()
            for key, grad in expected.items():
                torch.testing.assert_close(got["grads"][key], grad, atol=1e-5, rtol=1e-4)


# -- the whole command under 2 processes --------------------------------------------------


def _train_worker(rank: int, world: int, port: int, config_json: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
    )
    torch.set_num_threads(1)
    train(DotConfig(**json.loads(config_json)))


@pytest.mark.slow  # two processes that each load the data and the model: about 20 s
def test_train_bi_encoder_under_two_processes_matches_one(tiny_no_dropout, tmp_path):
    from tests.training.toy import make_training_beir

    data = make_training_beir(tmp_path / "beir")
    settings = dict(
        data=str(data),
        base=str(tiny_no_dropout),
        pooling="mean",
        similarity="cos",
        window=[1, 10],
        epochs=1,
        batch_size=4,
        lr=1e-3,
        max_length=24,
        query_max_length=12,
        dev_fraction=0.2,
        bf16="off",
        device="cpu",
        show_progress=False,
        check=False,  # the same training in both: no check to keep the base model instead
    )
    ddp_settings = {**settings, "out_dir": str(tmp_path / "ddp"), "checkpoint_every": 2}
    _spawn(_train_worker, json.dumps(ddp_settings))
    single = train(DotConfig(**{**settings, "out_dir": tmp_path / "one"}))
    ddp_record = json.loads((tmp_path / "ddp" / "dotcat_training.json").read_text())
    one_record = json.loads((single / "dotcat_training.json").read_text())
    assert ddp_record["world_size"] == 2 and ddp_record["status"] == "finished"
    assert (tmp_path / "ddp" / "model.safetensors").is_file()
    checkpoint = sorted((tmp_path / "ddp" / "checkpoints").iterdir())[-1]
    state = json.loads((checkpoint / "state.json").read_text())
    assert len(state["rng"]) == 2  # every process's random state, to resume exactly
    ddp_curve, one_curve = ddp_record["loss_curve"], one_record["loss_curve"]
    # The first step starts from the same weights: the same global-batch loss.
    assert ddp_curve[0][1] == pytest.approx(one_curve[0][1], abs=1e-5)
    # DDP skips batches smaller than the number of processes (a last batch of one example);
    # with the same batches, the same schedule and hence the same run.
    assert len(ddp_curve) <= len(one_curve)
    if len(ddp_curve) == len(one_curve):
        for (s1, l1), (s2, l2) in zip(ddp_curve, one_curve, strict=True):
            assert s1 == s2 and l1 == pytest.approx(l2, rel=1e-3, abs=1e-4)
