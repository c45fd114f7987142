"""Drafting methods: one module each, ``sim.methods.<name>`` for every name of
``hardware.catalog.DRAFT_METHODS`` (the registration: the names, in the order every list of
methods follows). A method's module says what the method is, in its docstring, and defines

- ``Kind``: its drafter config (a ``sim.kinds.base.Strict`` class whose ``method`` literal
  names it, with ``build(target, draft_model, make_cost, placement)`` returning a
  ``sim.drafters.Drafter``; two methods may share one, as EAGLE and EAGLE-3 do);
- ``TRAITS``: what it is to vLLM's scheduler and its names on the engines' command lines
  (``sim.methods.base.MethodTraits``);
- ``DEFAULT``: the config a variant without ``drafter`` runs (``models.method``).

The registries the rest of the engine reads are built here from those: ``TRAITS``,
``DEFAULT_DRAFTERS`` and ``DRAFTER_KINDS`` (``sim.kinds.drafters``' union of them). A module
that lacks one, or whose ``DEFAULT`` is not its own method, stops the import with the
reason.
"""

from __future__ import annotations

import importlib

from hardware.catalog import DRAFT_METHODS
from sim.kinds.base import tags_of
from sim.methods.base import MethodTraits

__all__ = ["DEFAULT_DRAFTERS", "DRAFTER_KINDS", "MODULES", "TRAITS", "MethodTraits"]


def _load(name: str):
    module = importlib.import_module(f"{__name__}.{name}")
    where = f"sim/methods/{name}.py"
    for field in ("Kind", "TRAITS", "DEFAULT"):
        if not hasattr(module, field):
            raise ImportError(f"{where}: defines no {field} (sim.methods)")
    if name not in tags_of(module.Kind, "method"):
        raise ImportError(f"{where}: Kind {module.Kind.__name__}'s method does not name "
                          f"{name!r}")
    if not isinstance(module.TRAITS, MethodTraits):
        raise ImportError(f"{where}: TRAITS is not a MethodTraits")
    if not isinstance(module.DEFAULT, module.Kind) or module.DEFAULT.method != name:
        raise ImportError(f"{where}: DEFAULT is not a {module.Kind.__name__} of method "
                          f"{name!r}")
    return module


MODULES = {name: _load(name) for name in DRAFT_METHODS}
TRAITS = {name: m.TRAITS for name, m in MODULES.items()}
DEFAULT_DRAFTERS = {name: m.DEFAULT for name, m in MODULES.items()}
DRAFTER_KINDS = tuple(dict.fromkeys(m.Kind for m in MODULES.values()))
