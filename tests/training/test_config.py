"""dotcat.training.config: one validation style, choices the losses hold, help on every field,
and no torch to check a config (the command line's defaults: tests/test_cli_options.py)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys

import pytest

from dotcat.errors import DotcatError, SettingError
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


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DotConfig(data="d", out_dir="o", batch_size="8"), "batch_size must be a whole number"),
        (DotConfig(data="d", out_dir="o", lr="1e-4"), "lr must be a number, got '1e-4'"),
        (DotConfig(data="d", out_dir="o", epochs=1.5), "epochs must be a whole number, got 1.5"),
        (CatConfig(data="d", out_dir="o", first_stages="bm25"), "first_stages must be a list"),
        (CatConfig(data="d", out_dir="o", max_length=True), "max_length must be a whole number"),
    ],
)
def test_a_python_caller_gets_a_setting_error_for_a_value_of_the_wrong_type(config, message):
    with pytest.raises(SettingError, match=re.escape(message)):
        config.validate()


def test_a_value_of_the_right_type_passes_whatever_its_class():
    import numpy as np

    DotConfig(data="d", out_dir="o", lr=1, epochs=np.int64(2)).validate()
    DotConfig(data="d", out_dir="o", lr=np.float32(1e-4), epochs=np.int64(2)).validate()
    CatConfig(data="d", out_dir="o", first_stages=["bm25"], max_length=None).validate()


@pytest.mark.parametrize("overrides", [{"negatives": "none"}, {"n_negatives": 0}])
def test_batch_size_1_without_hard_negatives_is_refused(overrides):
    """No in-batch negative and no hard one: the loss would be 0 at every step."""
    with pytest.raises(SettingError, match=r"batch_size must be >= 2 without hard negatives"):
        DotConfig(data="d", out_dir="o", batch_size=1, **overrides).validate()
    DotConfig(data="d", out_dir="o", batch_size=1).validate()  # one bm25 negative each: fine
    DotConfig(data="d", out_dir="o", batch_size=2, **overrides).validate()


def test_an_out_dir_that_is_or_holds_the_base_model_is_refused_before_any_work(
    tiny_bert_dir, tiny_beir_dir, tmp_path
):
    model = tmp_path / "run" / "trained"
    shutil.copytree(tiny_bert_dir, model)
    before = sorted(p.name for p in model.iterdir())
    for cls, out, base in [
        (DotConfig, model, model),  # train dot DATA OUT --base OUT
        (CatConfig, model.parent, model),  # --base OUT/trained: the check's own folder
        (DotConfig, tmp_path / "run" / "." / "trained", str(model)),
    ]:
        config = cls(data=tiny_beir_dir, out_dir=out, base=str(base), overwrite=True)
        with pytest.raises(DotcatError, match=r"OUT_DIR is \(or holds\) the folder of the model"):
            config.check_files()
    assert sorted(p.name for p in model.iterdir()) == before
    elsewhere = DotConfig(data=tiny_beir_dir, out_dir=tmp_path / "other", base=str(model))
    dataclasses.replace(elsewhere, split="test").check_files()
