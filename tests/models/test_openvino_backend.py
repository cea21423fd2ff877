"""The cross-encoder's OpenVINO int8 path: export, caching, staleness, scores, the choice of
runtime.

Tolerances: int8 is judged by rank agreement with fp32 (Spearman >= 0.95 on a tiny random
model, as for the ONNX Runtime path; the real re-ranker's figures are in
eval/benchmarks/results/precision.md). A pair's logit alone and in a batch agree within 1e-5: the
activation groups are per token, so neighbours cannot change a pair's ranges.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys

import numpy as np
import pytest
from scipy.stats import spearmanr
from tests.models.ranking_texts import DOCS
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.errors import DotcatError
from dotcat.models import BiEncoder, EncoderConfig, runtime
from dotcat.models import openvino_backend as ovb
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.models.export_files import EXPORT_RECORD
from dotcat.models.resolve import weights_fingerprint

pytest.importorskip("openvino")
pytest.importorskip("nncf")

QUERY = "insulin glucose in blood"


@pytest.fixture()
def cat_copy(tiny_cat_dir, tmp_path):
    """A writable copy of the tiny cross-encoder (explicit exports write into it)."""
    return shutil.copytree(tiny_cat_dir, tmp_path / "cat")


def _load(model, precision="int8", backend="openvino") -> CrossEncoder:
    backend = backend if precision == "int8" else "auto"  # (refused where no int8 runs)
    config = CrossEncoderConfig(model=str(model), precision=precision, backend=backend)
    return CrossEncoder.load(config)


def test_openvino_runs_without_its_telemetry(tiny_cat_dir, tmp_path):
    """Unless a file in ~/intel opts out, importing OpenVINO sends an event to Google Analytics
    from a forked process (and NNCF on use). dotcat's OpenVINO path, export included, forks
    nothing and writes nothing in the home directory."""
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "os.register_at_fork(before=lambda: print('forked', file=sys.stderr))\n"
        "from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig\n"
        f"config = CrossEncoderConfig(model={str(tiny_cat_dir)!r}, precision='int8', "
        "backend='openvino')\n"
        f"print(CrossEncoder.load(config).score_query({QUERY!r}, ['glucose', 'tax']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TF_BUILD", "JENKINS_URL")}
    env |= {"HOME": str(tmp_path), "DOTCAT_CACHE": str(tmp_path / "cache")}  # export anew
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "forked" not in run.stderr and not (tmp_path / "intel").exists()


@pytest.mark.kernels
def test_openvino_int8_ranks_like_fp32(tiny_cat_dir):
    fp32 = _load(tiny_cat_dir, "fp32")
    int8 = _load(tiny_cat_dir)
    assert (fp32.backend, int8.backend, int8.precision) == ("torch", "openvino", "int8")
    a, b = fp32.score_query(QUERY, DOCS), int8.score_query(QUERY, DOCS)
    assert b.dtype == np.float32 and np.ptp(a) > 0.1
    assert not np.array_equal(a, b)  # OpenVINO really ran
    assert spearmanr(a, b).statistic >= 0.95
    assert np.argmax(a) == np.argmax(b)


@pytest.mark.kernels
@pytest.mark.parametrize("hidden", [64, 100])
def test_two_workers_score_like_fp32_whatever_the_hidden_size(tmp_path, hidden):
    """Batches scored by two worker threads at once agree with fp32. Several OpenVINO streams
    broke this for hidden sizes that are not a multiple of 64 on an AMX Xeon (bf16 precision):
    logits off by more than their spread (see ``OpenVinoRunner``)."""
    from tests.conftest import save_tiny_bert

    model = save_tiny_bert(
        tmp_path / "cat", "cat", hidden_size=hidden, intermediate_size=4 * hidden,
        initializer_range=0.1, num_attention_heads=2,
    )  # fmt: skip
    docs = DOCS * 4  # several batches, so both workers run
    fp32 = _load(model, "fp32").score_query(QUERY, docs)
    config = CrossEncoderConfig(model=str(model), precision="int8", backend="openvino",
                                batch_size=4, cpu_workers=2)  # fmt: skip
    int8 = CrossEncoder.load(config)
    assert int8.onnx.workers == 2
    scores = int8.score_query(QUERY, docs)
    assert np.abs(scores - fp32).max() <= 0.1 * np.ptp(fp32)
    assert spearmanr(fp32, scores).statistic >= 0.95


@pytest.mark.kernels
def test_one_querys_pairs_are_not_cut_in_parts_for_calls_that_take_turns(tiny_cat_dir,
                                                                        monkeypatch):  # fmt: skip
    """OpenVINO's calls take turns on one request: splitting a width's pairs over the two
    worker threads (as for ONNX Runtime or PyTorch) would only add calls."""
    calls = []
    original = ovb.OpenVinoRunner.__call__

    def counted(self, feeds):
        calls.append(len(feeds["input_ids"]))
        return original(self, feeds)

    monkeypatch.setattr(ovb.OpenVinoRunner, "__call__", counted)
    config = CrossEncoderConfig(model=str(tiny_cat_dir), precision="int8", backend="openvino",
                                cpu_workers=2)  # fmt: skip
    int8 = CrossEncoder.load(config)
    same_width = [DOCS[0]] * 8
    scores = int8.score_query(QUERY, same_width)
    assert calls == [8]  # one call for the one width, not 4 + 4
    np.testing.assert_allclose(scores, scores[0], atol=1e-5)
    assert not int8._concurrent_calls()
    assert _load(tiny_cat_dir, backend="onnxruntime")._concurrent_calls()


@pytest.mark.kernels
def test_a_pairs_logit_does_not_depend_on_its_batch(tiny_cat_dir):
    int8 = _load(tiny_cat_dir)
    together = int8.score_query(QUERY, DOCS)
    alone = np.array([int8.score_query(QUERY, [d])[0] for d in DOCS])
    reversed_ = int8.score_query(QUERY, DOCS[::-1])[::-1]
    np.testing.assert_allclose(alone, together, atol=1e-5)
    np.testing.assert_allclose(reversed_, together, atol=1e-5)


@pytest.mark.kernels
def test_first_use_exports_into_the_cache_once(cat_copy, monkeypatch):
    int8 = _load(cat_copy)
    home = ovb.cache_home(weights_fingerprint(cat_copy))
    assert int8.onnx.path == home / ovb.INT8_NAME
    assert (home / ovb.INT8_NAME).with_suffix(".bin").is_file()
    assert not (cat_copy / "openvino").exists()  # the user's model directory is not written
    record = json.loads((home / EXPORT_RECORD).read_text())[ovb.INT8_NAME]
    assert record["weights_sha256"] == weights_fingerprint(cat_copy)
    assert record["backend"] == "openvino" and record["precision"] == "int8"
    assert not [p for p in os.listdir(home) if p.startswith(".")]  # no temporary left

    monkeypatch.setattr(ovb, "export", lambda *a, **k: pytest.fail("exported again"))
    assert _load(cat_copy).onnx.path == home / ovb.INT8_NAME


@pytest.mark.kernels
def test_dotcat_export_writes_beside_the_weights(cat_copy, monkeypatch):
    result = CliRunner().invoke(app, ["export", str(cat_copy), "--backend", "openvino"])
    assert result.exit_code == 0, result.output
    target = cat_copy / "openvino" / ovb.INT8_NAME
    assert f"exported cross-encoder {cat_copy} at int8" in result.output
    assert str(target) in result.output
    assert target.with_suffix(".bin").is_file()
    monkeypatch.setattr(ovb, "export", lambda *a, **k: pytest.fail("exported again"))
    assert _load(cat_copy).onnx.path == target


@pytest.mark.kernels
def test_a_stale_export_is_never_used(cat_copy, caplog):
    result = CliRunner().invoke(app, ["export", str(cat_copy), "--backend", "openvino"])
    assert result.exit_code == 0
    home = cat_copy / "openvino"
    records = json.loads((home / EXPORT_RECORD).read_text())
    records[ovb.INT8_NAME]["weights_sha256"] = "0" * 64  # as if the weights changed since
    (home / EXPORT_RECORD).write_text(json.dumps(records))
    shutil.rmtree(ovb.cache_home(weights_fingerprint(cat_copy)), ignore_errors=True)
    with caplog.at_level(logging.WARNING, logger="dotcat.models.export_files"):
        int8 = _load(cat_copy)
    assert "is stale" in caplog.text
    assert int8.onnx.path == ovb.cache_home(weights_fingerprint(cat_copy)) / ovb.INT8_NAME


@pytest.mark.kernels
def test_a_damaged_export_is_made_again(cat_copy, caplog):
    scores = _load(cat_copy).score_query(QUERY, DOCS)
    weights = ovb.cache_home(weights_fingerprint(cat_copy)) / "openvino_model_qint8_weights.bin"
    os.truncate(weights, weights.stat().st_size // 2)
    with caplog.at_level(logging.WARNING, logger="dotcat.models.export_files"):
        again = _load(cat_copy).score_query(QUERY, DOCS)
    assert "is damaged" in caplog.text
    np.testing.assert_allclose(again, scores, atol=1e-4)


def test_an_openvino_that_does_not_import_is_one_line(tiny_cat_dir, monkeypatch):
    monkeypatch.setattr(runtime, "openvino_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "openvino", None)  # as a broken install raises ImportError
    with pytest.raises(DotcatError, match="openvino is installed but does not import .*"):
        _load(tiny_cat_dir)


@pytest.mark.kernels
def test_a_failed_export_keeps_the_old_one(cat_copy, monkeypatch):
    runner = CliRunner()
    assert runner.invoke(app, ["export", str(cat_copy), "--backend", "openvino"]).exit_code == 0
    home = cat_copy / "openvino"
    before = {p: (home / p).read_bytes() for p in os.listdir(home)}

    import openvino

    def broken(model, path, **kwargs):
        path.write_text("half a model")
        raise RuntimeError("disk full")

    monkeypatch.setattr(openvino, "save_model", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        ovb.export(cat_copy, "cross-encoder", home, weights_fingerprint(cat_copy))
    assert {p: (home / p).read_bytes() for p in os.listdir(home)} == before


@pytest.mark.kernels
def test_the_runtime_choice(tiny_cat_dir, tiny_bert_dir, monkeypatch):
    # auto: OpenVINO for both kinds where installed, but on an AVX2-only CPU ONNX Runtime (its
    # 7-bit export: encoding 2.22x sentence-transformers where OpenVINO is 1.20x; re-ranking with
    # the first FFNs in fp32, the recipe that keeps the bar); ONNX Runtime when asked.
    for switch, runtime_here in (("on", "openvino"), ("off", "onnxruntime")):
        monkeypatch.setenv(runtime.NATIVE_BF16_ENV, switch)
        assert runtime.int8_backend("cross-encoder") == runtime_here
        assert runtime.int8_backend("encoder") == runtime_here
    assert _load(tiny_cat_dir, precision="auto", backend="auto").backend == "onnxruntime"
    assert runtime.int8_backend("encoder", "onnxruntime") == "onnxruntime"
    assert _load(tiny_cat_dir, backend="onnxruntime").backend == "onnxruntime"
    with pytest.raises(
        DotcatError, match="backend must be one of auto, onnxruntime, openvino, got 'tensorrt'"
    ):
        _load(tiny_cat_dir, backend="tensorrt")
    bad = CliRunner().invoke(app, ["export", str(tiny_bert_dir), "--backend", "tensorrt"])
    assert bad.exit_code != 0 and "tensorrt" in bad.output

    # On a VNNI CPU auto re-ranks at int8 on OpenVINO; without OpenVINO installed, at bf16.
    monkeypatch.setenv(runtime.NATIVE_BF16_ENV, "on")
    assert _load(tiny_cat_dir, precision="auto", backend="auto").backend == "openvino"
    monkeypatch.setattr(runtime, "openvino_installed", lambda: False)
    assert runtime.int8_backend("cross-encoder") == "onnxruntime"
    fallback = _load(tiny_cat_dir, precision="auto", backend="auto")
    assert (fallback.precision, fallback.backend) == ("bf16", "torch")
    # Nor the encoder: ONNX Runtime's int8 fell below the bar on the default pipeline
    # (eval/benchmarks/results/precision_pipeline.md); --precision int8 still runs on it.
    encoder = BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), device="cpu"))
    assert (encoder.precision, encoder.backend) == ("bf16", "torch")
    config = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="int8")
    assert (BiEncoder.load(config).precision, BiEncoder.load(config).backend) == (
        "int8",
        "onnxruntime",
    )


def test_without_native_bf16_openvino_runs_in_f32(tiny_cat_dir, monkeypatch):
    # What an AVX2-only CPU gets: no bf16 hint (OpenVINO has no bf16 emulation), same ranking.
    monkeypatch.setattr(runtime, "detect_native_bf16", lambda: False)
    int8 = _load(tiny_cat_dir)
    assert int8.onnx.compiled.get_property("INFERENCE_PRECISION_HINT").to_string() == "f32"
    a = _load(tiny_cat_dir, "fp32").score_query(QUERY, DOCS)
    b = int8.score_query(QUERY, DOCS)
    assert spearmanr(a, b).statistic >= 0.95 and np.argmax(a) == np.argmax(b)
