"""The ``dotcat`` application with every command registered (the console script's ``app``).

Each command module registers its commands on :data:`dotcat.cli.main.app` when imported;
``dotcat --help`` lists them in this order.
"""

# isort: off
from dotcat.cli import index, search, evaluate, train, judge, serve, datasets  # noqa: F401

# isort: on
from dotcat.cli.main import app

__all__ = ["app"]
