"""Sphinx configuration of dotcat's API reference, generated from the docstrings.

Built by ``make reference`` (and CI): ``sphinx-build -W -n`` turns every warning into an
error, so a docstring that names a dotcat module, class or function that does not exist
breaks the build. References to other libraries' types are not checked (no network here to
fetch their inventories).
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

project = "dotcat"
author = "the dotcat developers"
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
]
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
templates_path = ["_templates"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = "dotcat API reference"
# Only dotcat's own names are checked: other libraries' are not resolvable offline.
nitpicky = True
# Private names (a base class, a type variable) are no part of the reference.
nitpick_ignore_regex = [
    (r"py:.*", r"(?!dotcat\b).*"),
    (r"py:.*", r"dotcat\..*\._\w+"),
    (r"py:class", r".*\[.*"),  # a generic base, e.g. RootModel[...]
]
suppress_warnings = ["config.cache"]
