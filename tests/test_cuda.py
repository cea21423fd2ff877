"""The CUDA paths against the CPU ones: encoders, index and search, the three training recipes.

Skipped without a CUDA GPU (CI has none). On a GPU machine, ``pytest tests/test_cuda.py`` runs the
same work on CPU and on the GPU at fp32 and compares the two, so a bug of the GPU path cannot hide
behind a green CPU run (``eval/benchmarks/results/gpu.md`` records such a run). fp32 on CUDA is IEEE
fp32 here (PyTorch leaves TF32 off for matmuls unless asked), so the tolerances are the ones of a
different summation order, not of a lower precision.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.index import IndexConfig, build_index
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.models.runtime import resolve_device
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.training.recipe import resolve_bf16
from dotcat.training.run import train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DEVICES = {"cpu": "cpu", "gpu": "cuda"}
TEXTS = [
    "Cats are small domesticated carnivorous mammals.",
    "Dogs were domesticated from wolves long ago, probably more than fifteen thousand years.",
    "ATP",
    "Plants turn light into chemical energy in their chloroplasts through photosynthesis.",
    "",
    "Insulin regulates blood glucose.",
]


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    from tests.training.toy import make_training_beir

    return make_training_beir(tmp_path_factory.mktemp("cuda_toy") / "beir")


def _record(out: Path) -> dict:
    return json.loads((out / "dotcat_training.json").read_text())


def _assert_same_training(cpu_out: Path, gpu_out: Path, atol: float = 1e-4) -> None:
    """Same loss curve and same weights from a CPU and a GPU run of one recipe."""
    cpu, gpu = _record(cpu_out), _record(gpu_out)
    assert gpu["status"] == "finished" and gpu["steps"] == cpu["steps"]
    assert len(cpu["loss_curve"]) >= 2
    for (_, a), (_, b) in zip(cpu["loss_curve"], gpu["loss_curve"], strict=True):
        assert b == pytest.approx(a, rel=1e-3, abs=1e-5)
    a, b = load_file(cpu_out / "model.safetensors"), load_file(gpu_out / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=atol, rtol=1e-3)


def test_auto_picks_the_gpu_and_bf16_autocast_there():
    device = resolve_device("auto")
    assert device.type == "cuda"
    assert resolve_bf16("auto", device) == torch.cuda.is_bf16_supported()


def test_the_bi_encoder_encodes_alike_on_gpu_and_cpu(tiny_bert_dir):
    def encode(device: str, precision: str) -> np.ndarray:
        config = EncoderConfig(model=str(tiny_bert_dir), device=device, precision=precision)
        return BiEncoder.load(config).encode_documents(TEXTS, batch_size=4)

    cpu = encode("cpu", "fp32")
    np.testing.assert_allclose(encode("cuda", "fp32"), cpu, atol=1e-5, rtol=1e-4)
    # the GPU's own batch (256 texts) gives the same vectors as batches of 4
    config = EncoderConfig(model=str(tiny_bert_dir), device="cuda", precision="fp32")
    gpu = BiEncoder.load(config)
    assert gpu.batch_size == 256
    np.testing.assert_allclose(gpu.encode_documents(TEXTS), cpu, atol=1e-5, rtol=1e-4)
    # auto on a GPU is half precision: close to fp32, not equal to it
    half = encode("cuda", "auto")
    assert half.dtype == np.float32 and half.shape == cpu.shape
    np.testing.assert_allclose(half, cpu, atol=3e-2)


def test_the_cross_encoder_scores_alike_on_gpu_and_cpu(tiny_cat_dir):
    queries = ["which animals were domesticated"] * len(TEXTS)

    def score(device: str, precision: str) -> np.ndarray:
        config = CrossEncoderConfig(model=str(tiny_cat_dir), device=device, precision=precision)
        return CrossEncoder.load(config).score(queries, TEXTS, batch_size=4)

    cpu = score("cpu", "fp32")
    np.testing.assert_allclose(score("cuda", "fp32"), cpu, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(score("cuda", "auto"), cpu, atol=5e-2)


def test_index_and_search_on_the_gpu_give_the_cpus_ranking(tiny_beir_dir, tiny_bert_dir, tmp_path):
    runner = CliRunner()
    hits = {}
    for name, device in DEVICES.items():
        out = tmp_path / name
        args = ["-q", "index", tiny_beir_dir, out, "--model", tiny_bert_dir, "--device", device]
        args += ["--precision", "fp32"]
        result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "indexed 6 documents" in result.output
        query = ["search", out, "cells make ATP", "-k", "6", "--json", "--device", device]
        result = runner.invoke(app, [str(a) for a in query], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        hits[name] = json.loads(result.output)
    cpu, gpu = hits["cpu"], hits["gpu"]
    assert len(cpu) == 6 and [h["doc_id"] for h in gpu] == [h["doc_id"] for h in cpu]
    np.testing.assert_allclose([h["score"] for h in gpu], [h["score"] for h in cpu], atol=1e-4)


def test_the_search_pipeline_on_the_gpu_answers_as_on_the_cpu(
    tiny_beir_dir, tiny_bert_dir, tiny_cat_dir, tmp_path
):
    # What `dotcat serve` and `dotcat search --rerank` run: hybrid first stage, then BERT_CAT.
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    corpus = tiny_beir_dir / "corpus.jsonl.gz"
    build_index(corpus, tmp_path / "index", encoder, IndexConfig(bm25=True), show_progress=False)
    queries = ["cells make ATP", "domesticated from wolves", "blood sugar hormone"]
    answers = {}
    for name, device in DEVICES.items():
        config = PipelineConfig(
            first_stage="hybrid", rerank=str(tiny_cat_dir), depth=4, device=device, precision="fp32"
        )
        answers[name] = SearchPipeline(tmp_path / "index", config).search_many(queries, k=4)
    for cpu, gpu in zip(answers["cpu"], answers["gpu"], strict=True):
        assert len(cpu) == 4 and [h.doc_id for h in gpu] == [h.doc_id for h in cpu]
        np.testing.assert_allclose([h.score for h in gpu], [h.score for h in cpu], atol=1e-4)


def test_train_dot_on_the_gpu_follows_the_cpu_run(toy_data, tiny_no_dropout, tmp_path):
    from tests.training.recipes.test_dot import _config

    common = dict(epochs=2, batch_size=4, dev_eval="none")
    for name, device in DEVICES.items():
        train(_config(toy_data, tmp_path / name, tiny_no_dropout, device=device, **common))
    _assert_same_training(tmp_path / "cpu", tmp_path / "gpu")


def test_train_dot_resumes_exactly_on_the_gpu(toy_data, tiny_bert_dir, tmp_path):
    # Dropout on: the checkpoint must carry the GPU's RNG state for the masks to repeat.
    from tests.training.recipes.test_dot import _config

    common = dict(epochs=2, batch_size=3, dev_eval="none", checkpoint_every=0, device="cuda")
    straight = train(_config(toy_data, tmp_path / "straight", tiny_bert_dir, **common))
    total = _record(straight)["steps"]
    split = tmp_path / "split"
    stop = total // 2 + 1
    train(_config(toy_data, split, tiny_bert_dir, stop_after_steps=stop, **common))
    assert _record(split)["status"] == "stopped"
    train(_config(toy_data, split, tiny_bert_dir, resume=True, **common))
    resumed = _record(split)
    assert resumed["status"] == "finished" and resumed["steps"] == total
    straight_curve = [loss for _, loss in _record(straight)["loss_curve"]]
    resumed_curve = [loss for _, loss in resumed["loss_curve"]]
    assert resumed_curve == pytest.approx(straight_curve, rel=1e-5, abs=1e-6)
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-5, rtol=1e-4)


def test_train_cat_on_the_gpu_follows_the_cpu_run(toy_data, tiny_no_dropout, tmp_path):
    from tests.training.recipes.test_cat import _config

    for name, device in DEVICES.items():
        config = _config(toy_data, tmp_path / name, tiny_no_dropout, device=device, epochs=1)
        train(config)
    # The new classifier bias gets a near-zero BCE gradient, and Adam's update of a near-zero
    # gradient is about lr * sign(g): rounding flips the sign and the bias moves ~lr apart
    # (seen on an H100: 4e-3 after 12 steps at lr 1e-3). The loss curves still agree to 1e-3.
    _assert_same_training(tmp_path / "cpu", tmp_path / "gpu", atol=1e-2)


def test_train_distill_with_grad_cache_on_the_gpu_follows_the_cpu_run(
    toy_data, tiny_no_dropout, tiny_cat_dir, tmp_path
):
    from tests.training.recipes.test_distill import _config

    common = dict(epochs=1, batch_size=4, dev_eval="none", contrastive_weight=0.5)
    for (name, device), chunk in zip(DEVICES.items(), (None, 3), strict=True):
        settings = dict(device=device, cache_chunk_size=chunk, **common)
        out = tmp_path / name
        train(_config(toy_data, out, tiny_no_dropout, tiny_cat_dir, **settings))
    _assert_same_training(tmp_path / "cpu", tmp_path / "gpu")


def test_bf16_autocast_trains_on_the_gpu(toy_data, tiny_bert_dir, tmp_path):
    if not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    from tests.training.recipes.test_dot import _config

    out = train(
        _config(toy_data, tmp_path / "bf16", tiny_bert_dir, device="cuda", bf16="auto", epochs=3)
    )
    record = _record(out)
    assert record["device"].startswith("cuda") and record["bf16"] is True
    losses = [loss for _, loss in record["loss_curve"]]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
