"""Drafter kinds: who proposes the guesses (``variants[i].drafter``, by ``method``).

A variant without ``drafter`` drafts with ``models.draft`` by ``models.method``. The kinds
are the drafting methods' own (``sim.methods``: one module per method); each kind
names its method and knobs and builds the engine's ``sim.drafters.Drafter`` with
``build(target, draft_model, make_cost, placement)``: ``target`` the target's cost model,
``draft_model`` the catalog ``ModelSpec`` of ``models.draft`` (or None),
``make_cost(model_spec, tp, ep=1)`` a cost model for a drafting model on the deployment's GPU,
``placement`` the deployment's draft placement. vLLM's names in comments.
"""

from __future__ import annotations

from sim.kinds.base import kind_union
from sim.methods import DRAFTER_KINDS

__all__ = ["DRAFTER_KINDS", "DrafterCfg"]

DrafterCfg = kind_union(DRAFTER_KINDS, key="method")
