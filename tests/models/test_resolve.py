"""Model resolution (local dir, packaged copy, hub) and the weights fingerprint."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from dotcat.errors import DotcatError
from dotcat.models import resolve
from dotcat.models.resolve import (
    PACKAGED_MODELS,
    PackagedModel,
    file_sha256,
    resolve_model,
    weights_fingerprint,
)

OFFICIAL_SHA = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Each test gets an empty on-disk sha cache (and an empty in-process memo)."""
    monkeypatch.setenv("DOTCAT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(resolve, "_memo", {})


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fake_package(root: Path, name: str, payload: bytes) -> Path:
    """A package ``name`` shipping ``model/model.safetensors`` with ``payload``."""
    pkg = root / name
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "model.safetensors").write_bytes(payload)
    return pkg


@pytest.mark.parametrize(
    "name", ["default", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"]
)
def test_packaged_names_resolve_to_the_packaged_copy(name, default_model_dir):
    assert resolve_model(name) == default_model_dir.resolve()


def test_packaged_copy_fingerprint_is_the_official_sha256(default_model_dir):
    assert weights_fingerprint(default_model_dir) == OFFICIAL_SHA


def test_local_directory_resolves_to_itself(tiny_bert_dir):
    assert resolve_model(str(tiny_bert_dir)) == tiny_bert_dir.resolve()
    assert resolve_model(tiny_bert_dir) == tiny_bert_dir.resolve()


def test_a_file_is_not_a_model(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(DotcatError, match="is a file, not a model directory"):
        resolve_model(str(f))


@pytest.mark.parametrize("name", ["./no/such/dir", "/no/such/dir", "a/b/c", "org/../x"])
def test_neither_directory_nor_hub_id_is_a_clear_error(name):
    with pytest.raises(DotcatError, match="neither an existing directory nor a Hugging Face"):
        resolve_model(name)


def test_empty_name_is_an_error():
    with pytest.raises(DotcatError, match="empty model name"):
        resolve_model(" ")


def test_packaged_sha_mismatch_is_an_error(tmp_path, monkeypatch):
    _fake_package(tmp_path, "fake_pkg_corrupt", b"not the real weights")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = PackagedModel("fake_pkg_corrupt", "model", "model.safetensors", OFFICIAL_SHA)
    monkeypatch.setitem(PACKAGED_MODELS, "org/fake", entry)
    with pytest.raises(DotcatError, match="corrupt: sha256 of .* expected 53aa5117"):
        resolve_model("org/fake")


def test_packaged_sha_match_resolves_and_is_cached_on_disk(tmp_path, monkeypatch):
    pkg = _fake_package(tmp_path / "site", "fake_pkg_good", b"good weights")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sha = hashlib.sha256(b"good weights").hexdigest()
    entry = PackagedModel("fake_pkg_good", "model", "model.safetensors", sha)
    monkeypatch.setitem(PACKAGED_MODELS, "org/fake", entry)
    assert resolve_model("org/fake") == (pkg / "model").resolve()
    cache = json.loads((tmp_path / "cache" / "verified_sha256.json").read_text())
    assert list(cache.values()) == [sha]


def test_packaged_model_without_its_package_goes_to_the_hub(monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    calls = []

    def offline(repo_id, **kwargs):
        calls.append(repo_id)
        raise huggingface_hub.errors.LocalEntryNotFoundError("not in the cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    entry = PackagedModel("dotcat_no_such_package", "model", "model.safetensors", OFFICIAL_SHA)
    monkeypatch.setitem(PACKAGED_MODELS, "org/fake", entry)
    with pytest.raises(DotcatError, match="could not be fetched .*HF_HUB_OFFLINE.*no packaged"):
        resolve_model("org/fake")
    assert calls == ["org/fake"]


def test_hub_name_uses_snapshot_download(tiny_bert_dir, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_snapshot(repo_id, allow_patterns=None, **kwargs):
        calls.append((repo_id, allow_patterns))
        return str(tiny_bert_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    assert resolve_model("some-org/some-model") == tiny_bert_dir
    assert [c[0] for c in calls] == ["some-org/some-model"]
    assert "*.safetensors" in calls[0][1] and "*.bin" not in calls[0][1]


def test_hub_repo_without_safetensors_fetches_the_pytorch_pickle(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_snapshot(repo_id, allow_patterns=None, **kwargs):
        calls.append(allow_patterns)
        if "*.bin" in allow_patterns:
            (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    assert resolve_model("org/old-model") == tmp_path
    assert len(calls) == 2 and "*.bin" in calls[1]


def test_hub_failure_is_a_dotcat_error(monkeypatch):
    import huggingface_hub

    def unreachable(repo_id, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    # huggingface_hub reads HF_HUB_OFFLINE once, at import: pin both states explicitly.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(DotcatError, match=r"'org/x' could not be fetched .*Network is unreachable"):
        resolve_model("org/x")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DotcatError, match=r"'org/x' could not be fetched .*HF_HUB_OFFLINE is set"):
        resolve_model("org/x")


def test_fingerprint_changes_when_weights_change(tiny_bert_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "copy"
    shutil.copytree(tiny_bert_dir, copy)
    before = weights_fingerprint(copy)
    assert before == weights_fingerprint(tiny_bert_dir) == _sha(copy / "model.safetensors")
    tensors = load_file(copy / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1e-3
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    after = weights_fingerprint(copy)
    assert after != before and after == _sha(copy / "model.safetensors")


def test_fingerprint_of_pytorch_bin_and_shards(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickled weights")
    assert weights_fingerprint(tmp_path) == hashlib.sha256(b"pickled weights").hexdigest()
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "model-00001-of-00002.safetensors").write_bytes(b"one")
    (sharded / "model-00002-of-00002.safetensors").write_bytes(b"two")
    lines = "".join(
        f"model-0000{i}-of-00002.safetensors {hashlib.sha256(p).hexdigest()}\n"
        for i, p in ((1, b"one"), (2, b"two"))
    )
    assert weights_fingerprint(sharded) == hashlib.sha256(lines.encode()).hexdigest()
    # safetensors are preferred to a pickle next to them
    (sharded / "pytorch_model.bin").write_bytes(b"ignored")
    assert weights_fingerprint(sharded) == hashlib.sha256(lines.encode()).hexdigest()


def test_fingerprint_without_weights_is_an_error(tmp_path):
    with pytest.raises(DotcatError, match="no model weights"):
        weights_fingerprint(tmp_path)


def test_sha_cache_is_keyed_by_size_and_mtime(tmp_path, monkeypatch):
    f = tmp_path / "w.safetensors"
    f.write_bytes(b"aaaa")
    first = file_sha256(f)
    monkeypatch.setattr(resolve, "_memo", {})  # a new process: only the disk cache remains
    hashed = []
    real_hash = resolve._hash_file
    monkeypatch.setattr(resolve, "_hash_file", lambda p: hashed.append(p) or real_hash(p))
    assert file_sha256(f) == first and hashed == []  # from the disk cache, not re-hashed
    f.write_bytes(b"bbbbb")  # new size (and mtime): hashed again
    assert file_sha256(f) == _sha(f) != first and len(hashed) == 1
