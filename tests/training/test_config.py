"""dotcat.training.config: one validation style, choices the losses hold, help on every field,
and no torch to check a config (the command line's defaults: tests/test_cli_options.py)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from dotcat.errors import DotcatError
from dotcat.training import config as settings
from dotcat.training.config import (
    AdaptConfig,
    CatConfig,
    DistillConfig,
    DotConfig,
    TrainConfig,
    check_window,
)

CONFIGS = (DotConfig, CatConfig, DistillConfig, AdaptConfig)


@pytest.mark.parametrize(
    "overrides",
    [
        {"loss": "hinge"},
        {"negatives": "colbert"},
        {"loss": "triplet", "negatives": "none"},
        {"epochs": 0},
        {"window": (5, 5)},
        {"bf16": "maybe"},
        {"remine_each_epoch": True, "negatives": "none"},
    ],
)
def test_bad_settings_are_refused(tmp_path, overrides):
    config = DotConfig(data=tmp_path, out_dir=tmp_path / "out", **overrides)
    with pytest.raises(DotcatError):
        config.validate()


@pytest.mark.parametrize(
    ("cls", "overrides", "message"),
    [
        (DotConfig, {"loss": "lce"}, "loss must be one of contrastive, triplet (for dot)"),
        (CatConfig, {"loss": "contrastive"}, "loss must be one of lce, bce (for cat)"),
        (CatConfig, {"max_length": 4}, "max_length must be >= 8"),
        (CatConfig, {"dev_fraction": 1.0}, "dev_fraction must be in [0, 1)"),
        (DotConfig, {"dev_fraction": -0.1}, "dev_fraction must be in [0, 1)"),
        (DotConfig, {"keep_checkpoints": -1}, "keep_checkpoints must be >= 0"),
        (DistillConfig, {"teacher": "t", "distill_loss": "mse"}, "(for distill), got 'mse'"),
        (DistillConfig, {"teacher": "t", "loss": "triplet"}, "added to distillation"),
    ],
)
def test_every_recipe_checks_the_shared_fields_in_one_style(cls, overrides, message):
    config = cls(data="d", out_dir="o", **overrides)
    with pytest.raises(DotcatError, match=re.escape(message)):
        config.validate()


def test_the_defaults_are_valid_and_the_subclasses_keep_their_own():
    for cls in (DotConfig, CatConfig):
        cls(data="d", out_dir="o").validate()
    DistillConfig(data="d", out_dir="o", teacher="t").validate()
    AdaptConfig(corpus="c", out_dir="o").validate()
    dot, cat = DotConfig(data="d", out_dir="o"), CatConfig(data="d", out_dir="o")
    distill = DistillConfig(data="d", out_dir="o", teacher="t")
    assert (dot.loss, dot.n_negatives, dot.batch_size, dot.max_length) == (
        "contrastive",
        1,
        32,
        256,
    )
    assert (cat.loss, cat.n_negatives, cat.batch_size, cat.max_length) == ("lce", 7, 4, None)
    assert (distill.n_negatives, distill.negatives, distill.window) == (4, "dense", (0, 30))
    assert isinstance(dot, TrainConfig) and isinstance(distill, DotConfig)


def test_the_losses_a_config_offers_are_the_ones_the_registry_holds():
    from dotcat.losses import LOSSES

    assert DotConfig.losses == settings.DOT_LOSSES == tuple(LOSSES["dot"])
    assert CatConfig.losses == settings.CAT_LOSSES == tuple(LOSSES["cat"])
    assert tuple(LOSSES["distill"]) == settings.DISTILL_LOSSES


def test_every_field_carries_its_help_text():
    for cls in CONFIGS:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help", "").strip(), f"{cls.__name__}.{f.name} has no help"


def test_to_dict_is_json_ready(tmp_path):
    config = CatConfig(data=tmp_path, out_dir=tmp_path / "o", first_stages=("bm25", tmp_path))
    out = config.to_dict()
    assert out["data"] == str(tmp_path) and out["first_stages"] == ["bm25", str(tmp_path)]
    assert "recipe" not in out and "losses" not in out  # class settings, not the run's


def test_check_window_takes_numpy_integers_and_refuses_the_rest():
    import numpy as np

    assert check_window((np.int64(1), 10)) == (1, 10)
    for bad in ((5, 5), (1.0, 3), (True, 3), (3,), None):
        with pytest.raises(DotcatError, match="rank window"):
            check_window(bad)


def test_building_and_checking_a_config_imports_no_torch():
    code = (
        "import sys; from dotcat.training.config import DotConfig, CatConfig;"
        "DotConfig(data='d', out_dir='o').validate(); CatConfig(data='d', out_dir='o').validate();"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
