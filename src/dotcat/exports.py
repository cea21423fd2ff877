"""The one export rule of dotcat's packages: public names load on first use (PEP 562).

Every package's ``__init__.py`` declares its public names in one mapping and nothing else::

    from dotcat.exports import lazy_exports

    _EXPORTS = {"SearchPipeline": "dotcat.search.pipeline", "build": "dotcat.tuning:build_and_tune"}
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

A value is the module that defines the name under the same name, or ``module:attribute``
when the public name differs. ``import dotcat.search`` then loads nothing but the mapping:
torch, FAISS and transformers load when a name that needs them is first used, so the command
line checks its arguments in milliseconds and a program that only reads runs starts fast.
A submodule not in the mapping (``dotcat.models.runtime``) is imported when first asked for,
as a plain ``import`` would.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` over ``exports`` (name -> ``module`` or
    ``module:attribute``)."""

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook
        target = exports.get(name)
        if target is None:
            if importlib.util.find_spec(f"{package}.{name}") is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            return importlib.import_module(f"{package}.{name}")
        module, _, attribute = target.partition(":")
        try:
            loaded = importlib.import_module(module)
        except AttributeError as e:  # `from package import name` would report it as missing
            raise ImportError(f"{module}: {e}") from e
        value = getattr(loaded, attribute or name)
        vars(importlib.import_module(package))[name] = value  # the next access is plain
        return value

    def __dir__() -> list[str]:  # noqa: N807 - the PEP 562 hook
        return sorted({*vars(importlib.import_module(package)), *exports})

    return __getattr__, __dir__
