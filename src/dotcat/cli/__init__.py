"""The ``dotcat`` command line: a thin shell over library functions.

Every command parses its arguments into the library's settings (:mod:`dotcat.options`: their
defaults, help text and choices are the command line's), checks them with ``validate()`` and
light file checks before torch loads, calls one library function, and prints. A
:class:`~dotcat.errors.DotcatError` becomes one line on stderr and exit status 2.

Commands by group: :mod:`.index` (index, add, delete, merge, export), :mod:`.search` (search,
rerank, bm25), :mod:`.evaluate` (eval, experiment), :mod:`.train` (train dot/cat/distill,
adapt, calibrate), :mod:`.judge` (judge pool/status/qrels/export/import), :mod:`.serve`,
:mod:`.datasets` (datasets list/get); :mod:`.app` holds the application and its global
options.
"""

from dotcat.cli.app import app

# Each module registers its commands on import; `dotcat --help` lists them in this order.
# isort: off
from dotcat.cli import index, search, evaluate, train, judge, serve, datasets
# isort: on

__all__ = ["app", "datasets", "evaluate", "index", "judge", "search", "serve", "train"]
