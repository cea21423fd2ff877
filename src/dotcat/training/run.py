"""``train(config)``: the one entry point of ``dotcat train dot|cat|distill`` (and ``adapt``).

The config's type names the recipe (:data:`RECIPES`). A run that a resume finds finished (and
checked) is left alone; otherwise the recipe's first steps run (the ``cat`` recipe's optional
pre-training), then the loop (:func:`dotcat.training.loop.train`) in the recipe's process
context: under ``torchrun`` (``WORLD_SIZE > 1``) every process calls :func:`train` and the
``dot`` and ``distill`` recipes train their share of each batch with DDP; only rank 0 writes.
Last, the held-out check of ``train dot`` and ``train cat`` (:mod:`dotcat.training.heldout`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from dotcat.training import heldout, loop
from dotcat.training.config import CatConfig, DistillConfig, DotConfig, TrainConfig
from dotcat.training.recipe import Recipe
from dotcat.training.recipes.cat import CatRecipe
from dotcat.training.recipes.distill import DistillRecipe
from dotcat.training.recipes.dot import DotRecipe

logger = logging.getLogger(__name__)

#: The recipe each config type trains.
RECIPES: dict[type[TrainConfig], type[Recipe]] = {
    DotConfig: DotRecipe,
    CatConfig: CatRecipe,
    DistillConfig: DistillRecipe,
}


def train(config: TrainConfig) -> Path:
    """Train the model ``config`` describes, then (``check``) its held-out check
    (:func:`dotcat.training.heldout.check`); returns its output directory (the model kept).

    A resumed run that finished before its check was done runs the check alone. The run that
    ``overwrite`` moved aside is removed once this one is checked, put back if it fails.

    Raises:
        DotcatError: bad settings or data, an output directory holding another run (without
            ``resume`` or ``overwrite``), a checkpoint that does not fit.
    """
    config.validate()
    config.check_files()
    recipe = RECIPES[type(config)]
    out_dir = Path(config.out_dir)
    done = config.resume and loop.finished(out_dir, recipe.kind, config.epochs)
    if done and not heldout.pending(out_dir, config):
        logger.info("%s: this training run has already finished; nothing to resume", out_dir)
        return out_dir
    try:
        ready = recipe.first_steps(config)
        if ready is None:  # a first step stopped before its end; resume finishes it
            return out_dir
        ctx = recipe.context(ready.device)
        try:
            run = recipe(ready, ctx)
            if done:
                run.prepare()
            else:
                loop.train(run, ready, ctx)
            finished = loop.finished(out_dir, recipe.kind, ready.epochs)
            if finished and heldout.pending(out_dir, ready):
                heldout.check(run, ready, ctx)
            if finished and ctx.is_main and not heldout.pending(out_dir, ready):
                loop.settle_earlier(out_dir, ready, failed=False)  # done: the earlier run goes
            return out_dir
        finally:
            ctx.close()
    except BaseException:  # Ctrl-C too
        if config.overwrite and not config.resume and os.environ.get("RANK", "0") == "0":
            loop.settle_earlier(out_dir, config, failed=True)
        raise
