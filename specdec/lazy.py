"""Lazy package exports (PEP 562), shared by the packages' ``__init__`` modules.

A package lists ``_EXPORTS = {name: module}`` and sets
``__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())``: a name is imported
from its module on first use and then kept in the package, so importing the package (or
one of its submodules) never pulls in the rest.
"""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str], namespace: dict):
    """The ``(__getattr__, __dir__)`` pair of ``package`` for its ``exports`` table."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
