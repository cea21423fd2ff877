"""`auto` picks only paths whose recorded retention keeps the bar (issue 66): of fp32's
default-pipeline nDCG@10, >= 99.8% on the mean of the collections, >= 98.5% on each, none
significantly below fp32 (paired t-test, p < 0.05).

The record (``eval/benchmarks/results/precision_auto.json``) holds what the results files
measured, path by path; fp32 is the reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dotcat.models import onnx_backend, runtime

RECORD = Path(__file__).resolve().parents[2] / "eval/benchmarks/results/precision_auto.json"


def _path(cpu: str, sides: tuple[str, str]) -> str:
    """The record's name for what ``auto`` runs the bi-encoder's (documents, queries) at on a
    CPU of kind ``cpu``, e.g. ``int8 openvino`` or ``int8 onnxruntime, queries fp32 torch``."""
    documents, queries = (
        f"int8 {runtime.int8_runtimes('encoder', cpu)[0]}" if p == "int8" else f"{p} torch"
        for p in sides
    )
    return documents if documents == queries else f"{documents}, queries {queries}"


def _keeps(found: dict, bar: dict) -> bool:
    return (
        found["mean"] >= bar["mean"]
        and found["lowest"] >= bar["floor"]
        and not found["significantly_below"]
    )


def test_auto_picks_no_path_whose_recorded_retention_is_under_the_bar():
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    bar, paths = record["bar"], record["paths"]
    assert (bar["mean"], bar["floor"], bar["p"]) == (0.998, 0.985, 0.05)
    for kind, sides in runtime.AUTO_ENCODER.items():
        if set(sides) != {"fp32"}:
            found = paths.get(_path(kind, sides))
            assert found is not None, f"{kind}: {_path(kind, sides)} has no recorded retention"
            assert _keeps(found, bar), f"{kind}: {_path(kind, sides)} is under the bar: {found}"


def test_auto_reranks_at_int8_only_where_its_recorded_retention_keeps_the_bar(monkeypatch):
    """Per CPU kind, where ``auto`` re-ranks at int8, that runtime's recorded retention of a
    cross-encoder's re-ranked nDCG@10 (its order alone, six collections) keeps the bar."""
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    monkeypatch.setattr(runtime, "openvino_installed", lambda: True)
    monkeypatch.setattr(runtime, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    kinds = {"vnni+bf16": (True, True), "vnni": (True, False), "bf16": (False, True),
             "avx2": (False, False)}  # fmt: skip
    int8_kinds = []
    for kind, (vnni, bf16) in kinds.items():
        monkeypatch.setattr(runtime, "cpu_has_vnni", lambda vnni=vnni: vnni)
        monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda bf16=bf16: bf16)
        assert runtime.cpu_kind() == kind
        if runtime.auto_precision("cross-encoder", torch.device("cpu")) == "int8":
            int8_kinds.append(kind)
            name = f"int8 {runtime.int8_backend('cross-encoder')}"
            if name == "int8 onnxruntime":  # its recipe: the AVX2 export keeps some units fp32
                name += f" {onnx_backend.default_keep_fp32('cross-encoder', 'avx2')}"
            found = record["rerankers"].get(name)
            assert found is not None, f"{kind}: re-ranking at {name} has no recorded retention"
            assert _keeps(found, record["bar"]), f"{kind}: {name} is under the bar: {found}"
    assert int8_kinds == ["vnni+bf16", "vnni", "avx2"]


def test_the_record_is_what_its_results_files_say():
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    root = RECORD.parents[3]
    for name, found in [*record["paths"].items(), *record["rerankers"].items()]:
        text = (root / found["source"]).read_text(encoding="utf-8")
        assert f"{found['mean']:.2%}" in text, name
        assert f"{found['lowest']:.2%}" in text, name
