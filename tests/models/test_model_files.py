"""A directory that is not a usable model: one line naming it and what is missing."""

from __future__ import annotations

import os
import pickle
import shutil
import warnings
from pathlib import Path

import pytest

from dotcat.errors import DotcatError
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.training.model import TrainableBiEncoder

LOADERS = {
    "bi-encoder": lambda d, **kw: BiEncoder.load(EncoderConfig(model=str(d), device="cpu", **kw)),
    "cross-encoder": lambda d, **kw: CrossEncoder.load(
        CrossEncoderConfig(model=str(d), device="cpu", **kw)
    ),
    "trainable": lambda d, **kw: TrainableBiEncoder.from_pretrained(d, **kw),
}


def _one_line_error(loader, directory: Path, **kwargs) -> str:
    with pytest.raises(DotcatError) as info:
        LOADERS[loader](directory, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("loader", LOADERS)
def test_a_folder_without_a_model(tmp_path, loader):
    (tmp_path / "README.md").write_text("notes, not a model")
    message = _one_line_error(loader, tmp_path)
    assert message.startswith(f"{tmp_path.resolve()}: not a model directory (no config.json")


@pytest.mark.parametrize("loader", LOADERS)
def test_weights_but_no_tokenizer(tiny_bert_dir, tmp_path, loader):
    model = tmp_path / "m"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert_dir / name, model / name)
    message = _one_line_error(loader, model)
    assert "no tokenizer files" in message and str(model.resolve()) in message


@pytest.mark.parametrize("loader", LOADERS)
def test_tokenizer_but_no_weights(tiny_bert_dir, tmp_path, loader):
    model = tmp_path / "m"
    shutil.copytree(tiny_bert_dir, model)
    (model / "model.safetensors").unlink()
    assert "no model weights" in _one_line_error(loader, model)


class _Payload:
    """A pickle that would create a file if anything unpickled it with the unsafe loader."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("loader", LOADERS)
def test_a_pickle_holding_code_is_refused_in_one_line(tiny_bert_dir, tmp_path, loader):
    model = tmp_path / "m"
    shutil.copytree(tiny_bert_dir, model)
    (model / "model.safetensors").unlink()
    marker = tmp_path / "pwned"
    with open(model / "pytorch_model.bin", "wb") as f:
        pickle.dump(_Payload(marker), f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no torch warning leaks out either
        message = _one_line_error(loader, model)
    assert "refused pytorch_model.bin" in message and str(model.resolve()) in message
    assert not marker.exists()


@pytest.mark.parametrize("loader", LOADERS)
def test_max_length_zero_is_an_error_not_the_default(tiny_bert_dir, loader):
    message = _one_line_error(loader, tiny_bert_dir, max_length=0)
    assert "max_length must be >= " in message and "got 0" in message
