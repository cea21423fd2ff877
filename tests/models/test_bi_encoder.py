"""BiEncoder on a tiny random BERT: config defaults, overrides, encoding invariants."""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dotcat.errors import DotcatError
from dotcat.models import BiEncoder, EncoderConfig, batching, bi_encoder, runtime
from dotcat.models.pooling import mean_pooling

TEXTS = [
    "Cats are small domesticated carnivorous mammals.",
    "Dogs were domesticated from wolves long ago, probably more than fifteen thousand years.",
    "ATP",
    "Plants turn light into chemical energy in their chloroplasts through photosynthesis, "
    "a process that also releases oxygen into the atmosphere of the whole planet.",
    "",
    "Insulin regulates blood glucose.",
    "Vaccines train the immune system against viruses and bacteria.",
]


def _load(model_dir: Path, **overrides) -> BiEncoder:
    """The encoder at fp32 unless a test says otherwise: these tests compare at fp32 tolerance,
    and ``precision="auto"`` would pick bf16 on a CPU with native bf16."""
    settings = {"device": "cpu", "precision": "fp32", **overrides}
    return BiEncoder.load(EncoderConfig(model=str(model_dir), **settings))


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir) -> BiEncoder:
    return _load(tiny_bert_dir)


def _st_layout(src: Path, dst: Path, pooling: dict, normalize: bool = True, **extra) -> Path:
    """A sentence-transformers layout (old-style files) around the tiny BERT's weights."""
    shutil.copytree(src, dst)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    if normalize:
        modules.append(
            {
                "idx": 2,
                "name": "2",
                "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
    modules += extra.pop("more_modules", [])
    (dst / "modules.json").write_text(json.dumps(modules))
    (dst / "1_Pooling").mkdir()
    (dst / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, **pooling})
    )
    (dst / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": extra.pop("max_seq_length", 128), "do_lower_case": False})
    )
    if extra:
        (dst / "config_sentence_transformers.json").write_text(json.dumps(extra))
    return dst


MEAN_OLD = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}


def _reference(encoder: BiEncoder, text: str) -> np.ndarray:
    """One text alone, no padding at all, straight through the transformers model."""
    ids = encoder.tokenizer(
        [text], truncation=True, max_length=encoder.max_length, return_tensors="pt"
    )
    with torch.inference_mode():
        hidden = encoder.model(**ids).last_hidden_state
    v = hidden[:, 0] if encoder.pooling == "cls" else mean_pooling(hidden, ids["attention_mask"])
    if encoder.similarity == "cos":
        v = torch.nn.functional.normalize(v, dim=-1)
    return v[0].numpy()


# -- defaults and overrides ---------------------------------------------------------------


def test_plain_hf_directory_defaults_to_cls_dot_512(tiny, tiny_bert_dir):
    assert (tiny.pooling, tiny.similarity, tiny.max_length, tiny.dim) == ("cls", "dot", 512, 32)
    assert tiny.device == torch.device("cpu")
    assert tiny.path == tiny_bert_dir.resolve()
    assert (tiny.query_prefix, tiny.document_prefix) == ("", "")


def test_sentence_transformers_files_give_the_defaults(tiny_bert_dir, tmp_path):
    st_dir = _st_layout(tiny_bert_dir, tmp_path / "st", MEAN_OLD, max_seq_length=64)
    enc = _load(st_dir)
    assert (enc.pooling, enc.similarity, enc.max_length) == ("mean", "cos", 64)


def test_new_style_pooling_config_and_similarity_fn_name(tiny_bert_dir, tmp_path):
    st_dir = _st_layout(
        tiny_bert_dir,
        tmp_path / "st",
        {"embedding_dimension": 32, "pooling_mode": "cls", "include_prompt": True},
        normalize=False,
        similarity_fn_name="dot",
    )
    enc = _load(st_dir)
    assert (enc.pooling, enc.similarity) == ("cls", "dot")


def test_directory_saved_by_sentence_transformers_gives_its_vectors(tiny_bert_dir, tmp_path):
    """The current sentence-transformers layout (new module names, length in the tokenizer)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(tiny_bert_dir), max_seq_length=48)
    peer = SentenceTransformer(
        modules=[transformer, Pooling(32, pooling_mode="mean"), Normalize()], device="cpu"
    )
    peer.save(str(tmp_path / "st6"))
    enc = _load(tmp_path / "st6")
    assert (enc.pooling, enc.similarity, enc.max_length) == ("mean", "cos", 48)
    theirs = peer.encode(TEXTS + ["word " * 100], batch_size=4, convert_to_numpy=True)
    np.testing.assert_allclose(enc.encode(TEXTS + ["word " * 100]), theirs, rtol=0, atol=2e-5)


def test_explicit_config_overrides_the_model_files(tiny_bert_dir, tmp_path):
    st_dir = _st_layout(tiny_bert_dir, tmp_path / "st", MEAN_OLD)
    enc = _load(st_dir, pooling="cls", similarity="dot", max_length=16)
    assert (enc.pooling, enc.similarity, enc.max_length) == ("cls", "dot", 16)


def test_prompts_become_prefixes_and_config_overrides_them(tiny_bert_dir, tmp_path):
    st_dir = _st_layout(
        tiny_bert_dir,
        tmp_path / "st",
        MEAN_OLD,
        prompts={"query": "query: ", "passage": "passage: "},
    )
    enc = _load(st_dir)
    assert (enc.query_prefix, enc.document_prefix) == ("query: ", "passage: ")
    np.testing.assert_allclose(
        enc.encode_queries(["a b"]), enc.encode(["query: a b"]), rtol=0, atol=1e-6
    )
    np.testing.assert_allclose(
        enc.encode_documents(["a b"]), enc.encode(["passage: a b"]), rtol=0, atol=1e-6
    )
    assert enc.manifest_entry()["query_prefix"] == "query: "
    assert _load(st_dir, query_prefix="").query_prefix == ""


def test_unsupported_pooling_is_refused_unless_overridden(tiny_bert_dir, tmp_path):
    st_dir = _st_layout(tiny_bert_dir, tmp_path / "st", {"pooling_mode_max_tokens": True})
    with pytest.raises(DotcatError, match="pooling .*max_tokens.* not supported"):
        _load(st_dir)
    assert _load(st_dir, pooling="mean").pooling == "mean"


def test_unsupported_module_is_refused(tiny_bert_dir, tmp_path):
    dense = {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}
    st_dir = _st_layout(tiny_bert_dir, tmp_path / "st", MEAN_OLD, more_modules=[dense])
    with pytest.raises(DotcatError, match="Dense.* not supported"):
        _load(st_dir)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_length": 513}, "max_length 513 is outside"),
        ({"pooling": "max"}, "pooling must be one of cls, mean, got 'max'"),
        ({"similarity": "l2"}, "similarity must be one of dot, cos, got 'l2'"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"precision": "int4"}, "precision must be one of auto, fp32, bf16, fp16, int8"),
    ],
)
def test_bad_settings_are_clear_errors(tiny_bert_dir, overrides, message):
    with pytest.raises(DotcatError, match=message):
        _load(tiny_bert_dir, **overrides)


def test_cuda_without_gpu_is_a_clear_error(tiny_bert_dir):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert runtime.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(DotcatError, match="no CUDA GPU"):
        BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), device="cuda"))


def test_manifest_entry(tiny):
    entry = tiny.manifest_entry()
    assert entry == {
        "name": tiny.name,
        "path": str(tiny.path),
        "fingerprint": tiny.fingerprint,
        "pooling": "cls",
        "similarity": "dot",
        "normalize": False,
        "max_length": 512,
        "dim": 32,
        "query_prefix": "",
        "document_prefix": "",
        "do_lower_case": True,  # the tiny BERT's uncased tokenizer
        "precision": "fp32",
        "backend": "torch",
        "queries": {"precision": "fp32", "backend": "torch"},
    }
    assert len(entry["fingerprint"]) == 64
    json.dumps(entry)  # goes into manifest.json as is


# -- encoding -------------------------------------------------------------------------------


def test_encode_shape_dtype_and_unbatched_reference(tiny):
    out = tiny.encode(TEXTS, batch_size=3)
    assert out.shape == (len(TEXTS), 32) and out.dtype == np.float32
    ref = np.stack([_reference(tiny, t) for t in TEXTS])
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-5)
    assert not np.allclose(np.linalg.norm(out, axis=1), 1.0)  # dot: not normalised


def test_cos_vectors_are_unit_length_and_match_mean_reference(tiny_bert_dir):
    enc = _load(tiny_bert_dir, pooling="mean", similarity="cos")
    out = enc.encode(TEXTS, batch_size=2)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=0, atol=1e-6)
    ref = np.stack([_reference(enc, t) for t in TEXTS])
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-5)


def test_shuffled_input_gives_the_same_rows(tiny):
    order = list(range(len(TEXTS)))
    random.Random(3).shuffle(order)
    out = tiny.encode(TEXTS)
    shuffled = tiny.encode([TEXTS[i] for i in order])
    np.testing.assert_allclose(shuffled, out[order], rtol=0, atol=2e-5)


def test_batch_defaults_follow_the_device(tiny_bert_dir):
    # 32 texts under 2048 tokens on CPU; 256 under 65,536 on a GPU (checked without one: the
    # rule is a function of the device), and whatever the caller asks for wins.
    assert batching.default_batch(torch.device("cpu")) == (32, 2048)
    assert batching.default_batch(torch.device("cuda")) == (256, 65_536)
    plain = _load(tiny_bert_dir)
    assert (plain.batch_size, plain.max_batch_tokens) == (32, 2048)
    asked = _load(tiny_bert_dir, batch_size=5, max_batch_tokens=0)
    assert (asked.batch_size, asked.max_batch_tokens) == (5, 0)


@pytest.mark.parametrize(
    ("batch_size", "max_batch_tokens"), [(1, None), (2, None), (64, 0), (64, 24)]
)
def test_batching_does_not_change_vectors(tiny, tiny_bert_dir, batch_size, max_batch_tokens):
    enc = _load(tiny_bert_dir, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
    np.testing.assert_allclose(
        enc.encode(TEXTS), tiny.encode(TEXTS, batch_size=32), rtol=0, atol=2e-5
    )


def test_token_budget_defaults(tiny_bert_dir):
    assert _load(tiny_bert_dir, max_batch_tokens=100).max_batch_tokens == 100
    assert _load(tiny_bert_dir).max_batch_tokens == batching.CPU_MAX_BATCH_TOKENS
    assert _load(tiny_bert_dir, fast=False).max_batch_tokens == 0


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_cpu_workers_give_the_same_vectors(tiny, tiny_bert_dir, workers):
    threads = torch.get_num_threads()
    enc = _load(tiny_bert_dir, cpu_workers=workers, batch_size=2)
    np.testing.assert_allclose(enc.encode(TEXTS * 3), tiny.encode(TEXTS * 3), rtol=0, atol=2e-5)
    assert torch.get_num_threads() == threads  # restored after the workers


def test_a_worker_error_reaches_the_caller(tiny_bert_dir, monkeypatch):
    enc = _load(tiny_bert_dir, cpu_workers=2, batch_size=1)
    calls = []

    def failing(input_ids, mask):
        calls.append(1)
        raise RuntimeError("boom in a worker")

    monkeypatch.setattr(enc, "_embed", failing)
    with pytest.raises(RuntimeError, match="boom in a worker"):
        enc.encode(TEXTS)
    assert len(calls) < len(TEXTS)  # the other worker stopped early


def test_default_workers_one_per_thread_and_one_when_plain(tiny, tiny_bert_dir):
    assert tiny._workers() == min(torch.get_num_threads(), batching.MAX_AUTO_WORKERS)
    assert _load(tiny_bert_dir, fast=False)._workers() == 1


def test_fast_and_plain_paths_agree(tiny, tiny_bert_dir):
    plain = _load(tiny_bert_dir, fast=False)
    assert plain.autocast_dtype is None
    np.testing.assert_allclose(plain.encode(TEXTS), tiny.encode(TEXTS), rtol=0, atol=2e-5)


def test_truncation_to_max_length(tiny_bert_dir):
    enc = _load(tiny_bert_dir, max_length=8)
    long = "word " * 200
    np.testing.assert_allclose(
        enc.encode([long]), enc.encode([long + " tail that is cut off"]), rtol=0, atol=1e-6
    )


def test_encode_into_a_memmap_and_empty_input(tiny, tmp_path):
    out = np.lib.format.open_memmap(
        tmp_path / "v.npy", mode="w+", dtype=np.float32, shape=(len(TEXTS), 32)
    )
    assert tiny.encode(TEXTS, out=out) is out
    out.flush()
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), tiny.encode(TEXTS), rtol=0, atol=2e-5)
    assert tiny.encode([]).shape == (0, 32)
    with pytest.raises(ValueError, match="out must be float32"):
        tiny.encode(TEXTS, out=np.empty((2, 32), np.float32))


def test_window_boundaries_keep_rows_in_place(tiny, monkeypatch):
    expected = tiny.encode(TEXTS)
    monkeypatch.setattr(bi_encoder, "WINDOW", 3)
    np.testing.assert_allclose(tiny.encode(TEXTS), expected, rtol=0, atol=2e-5)


def test_show_progress_runs(tiny):
    assert tiny.encode(TEXTS[:2], show_progress_bar=True).shape == (2, 32)


# -- precision and threads ------------------------------------------------------------------


@pytest.mark.kernels
def test_auto_precision_uses_bf16_only_with_native_support(monkeypatch):
    """The detection itself (the DOTCAT_NATIVE_BF16 switch is tested in test_precision.py)."""
    monkeypatch.delenv(runtime.NATIVE_BF16_ENV, raising=False)
    cpu = torch.device("cpu")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(runtime.platform, "machine", lambda: "x86_64")
    assert not runtime.cpu_has_native_bf16()
    assert runtime.resolve_precision("auto", cpu) is None
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert runtime.resolve_precision("auto", cpu) is torch.bfloat16
    assert runtime.resolve_precision("fp32", cpu) is None
    monkeypatch.setattr(runtime.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"asimd", "bf16"}))
    assert runtime.cpu_has_native_bf16()


def test_cpu_flags_follow_cpuid_where_proc_cpuinfo_describes_the_host(monkeypatch):
    """Under an emulator /proc/cpuinfo lists the host's AVX-512 while CPUID, which the libraries'
    kernels follow, says AVX2: CPUID wins, as NumPy's runtime detection read it; the flags NumPy
    has no name for (AVX-VNNI, AMX) go where it denies any. On the host itself (an Intel
    Sapphire Rapids' flags) they stay, and nothing imports PyTorch to check them."""
    from numpy._core._multiarray_umath import __cpu_features__

    host = {"fma", "avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni"}
    monkeypatch.setattr(runtime, "_proc_cpuinfo_flags", lambda: frozenset(host))
    for feature in ("AVX512F", "AVX512VNNI", "AVX512BF16"):
        monkeypatch.setitem(__cpu_features__, feature, False)
    runtime.cpu_flags.cache_clear()
    try:
        assert runtime.cpu_flags() == {"fma", "avx2"}
        monkeypatch.setitem(__cpu_features__, "AVX512F", True)
        runtime.cpu_flags.cache_clear()
        assert runtime.cpu_flags() == {"fma", "avx2", "avx512f", "avx512bw"}
        spr = host | {"avx512_fp16", "amx_bf16", "amx_tile", "amx_int8", "gfni"}
        monkeypatch.setattr(runtime, "_proc_cpuinfo_flags", lambda: frozenset(spr))
        for feature in ("AVX512F", "AVX512VNNI", "AVX512BF16", "AVX512FP16", "GFNI", "AVX2"):
            monkeypatch.setitem(__cpu_features__, feature, True)
        monkeypatch.setitem(sys.modules, "torch", None)  # importing it would fail
        runtime.cpu_flags.cache_clear()
        assert runtime.cpu_flags() == spr
        assert runtime.cpu_kind() == "vnni+bf16" and runtime.detect_native_bf16()
    finally:
        runtime.cpu_flags.cache_clear()


def test_threads_use_every_available_core(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert runtime.configure_threads() == runtime.available_cpus()
        assert runtime.configure_threads(1) == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert runtime.configure_threads() == 1  # the user's setting is left alone
        with pytest.raises(DotcatError, match="num_threads must be >= 1"):
            runtime.configure_threads(0)
    finally:
        torch.set_num_threads(before)


@pytest.mark.kernels
def test_model_loading_hides_transformers_bars_and_restores_them(tiny_bert_dir, capsys):
    """transformers 5 draws a "Loading weights" bar per load; dotcat's loads draw none."""
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    with runtime.quiet_transformers():
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled()
    capsys.readouterr()
    BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir)))
    assert "Loading weights" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled()


def test_one_query_takes_the_free_cores_and_restores_the_count(tiny_bert_dir, monkeypatch):
    """A small call must not split over a busy core (under load that waits in every op's
    barrier), and should use the idle ones."""
    enc = _load(tiny_bert_dir)
    seen: list[int] = []
    embed = enc._embed

    def spy(input_ids, mask):
        seen.append(torch.get_num_threads())
        return embed(input_ids, mask)

    monkeypatch.setattr(enc, "_embed", spy)
    monkeypatch.setattr(runtime, "available_cpus", lambda: 2)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(runtime, "busy_cpus", lambda: 1)  # another process on a core
        enc.encode_queries(["how do cells make ATP"])
        assert seen == [1] and torch.get_num_threads() == 2
        monkeypatch.setattr(runtime, "busy_cpus", lambda: 0)  # an idle machine
        enc.encode_queries(["how do cells make ATP"])
        assert seen == [1, 2]
        seen.clear()
        enc.encode(["word " * 300] * 8)  # ~2,400 tokens: data-parallel workers
        assert seen and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_busy_cpus_counts_other_processes_only():
    """Our own threads never count as busy; a spinning process does.

    The spinner is paused (SIGSTOP) and resumed (SIGCONT) in alternation and the busy count
    read in each state, so that other work on the machine (a build beside the suite) changes
    both levels alike: levels read one after the other flaked when that work came or went
    between them.
    """
    import signal
    import subprocess
    import sys
    import time

    if runtime.busy_cpus() is None:
        pytest.skip("no /proc/loadavg here")

    def level() -> float:
        time.sleep(0.02)  # let the state change take effect
        reads = []
        for _ in range(5):
            reads.append(runtime.busy_cpus())
            time.sleep(0.01)
        return sum(reads) / len(reads)

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        gaps = []
        for _ in range(10):
            spinner.send_signal(signal.SIGSTOP)
            quiet = level()
            spinner.send_signal(signal.SIGCONT)
            gaps.append(level() - quiet)
    finally:
        spinner.kill()
        spinner.wait()
    gaps.sort()
    assert gaps[len(gaps) // 2] >= 0.5, gaps  # the spinner is runnable at every read
