"""The ``dotcat`` command line: a thin shell over library functions.

Every command parses its arguments into the library's settings (:mod:`dotcat.options`: their
defaults, help text and choices are the command line's), checks them with ``validate()`` and
light file checks before torch loads, calls one library function, and prints. A
:class:`~dotcat.errors.DotcatError` becomes one line on stderr and exit status 2.

Commands by group: :mod:`.index` (index, add, delete, merge, export), :mod:`.search` (search,
rerank, bm25), :mod:`.evaluate` (eval, experiment), :mod:`.train` (train dot/cat/distill,
adapt, calibrate), :mod:`.judge` (judge pool/status/qrels/export/import), :mod:`.serve`,
:mod:`.datasets` (datasets list/get); :mod:`.main` holds the application and its global
options, :mod:`.commands` the application with every command and the console script (``run``).
"""

from dotcat.exports import lazy_exports

_EXPORTS = {"app": "dotcat.cli.commands", "run": "dotcat.cli.commands"}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
