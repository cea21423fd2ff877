"""``train(config)``: the one entry point of ``dotcat train dot|cat|distill`` (and ``adapt``).

The config's type names the recipe (:data:`RECIPES`). A run that a resume finds finished is
left alone; otherwise the recipe's first steps run (the ``cat`` recipe's optional
pre-training), then the loop (:func:`dotcat.training.loop.train`) in the recipe's process
context: under ``torchrun`` (``WORLD_SIZE > 1``) every process calls :func:`train` and the
``dot`` and ``distill`` recipes train their share of each batch with DDP; only rank 0 writes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dotcat.training import loop
from dotcat.training.config import CatConfig, DistillConfig, DotConfig, TrainConfig
from dotcat.training.recipes.cat import CatRecipe
from dotcat.training.recipes.distill import DistillRecipe
from dotcat.training.recipes.dot import DotRecipe

logger = logging.getLogger(__name__)

#: The recipe each config type trains.
RECIPES: dict[type[TrainConfig], type[DotRecipe] | type[CatRecipe]] = {
    DotConfig: DotRecipe,
    CatConfig: CatRecipe,
    DistillConfig: DistillRecipe,
}


def train(config: TrainConfig) -> Path:
    """Train the model ``config`` describes; returns its output directory (the best model).

    Raises:
        DotcatError: bad settings or data, an output directory holding another run (without
            ``resume`` or ``overwrite``), a checkpoint that does not fit.
    """
    config.validate()
    config.check_files()
    recipe = RECIPES[type(config)]
    out_dir = Path(config.out_dir)
    if config.resume and loop.finished(out_dir, recipe.kind, config.epochs):
        logger.info("%s: this training run has already finished; nothing to resume", out_dir)
        return out_dir
    ready = recipe.first_steps(config)
    if ready is None:  # a first step stopped before its end; resume finishes it
        return out_dir
    ctx = recipe.context(ready.device)
    try:
        return loop.train(recipe(ready, ctx), ready, ctx)
    finally:
        ctx.close()
