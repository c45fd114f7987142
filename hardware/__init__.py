"""Hardware: GPU, link, model and framework catalogs and the cost of a forward pass.

``load_catalog()`` reads the shipped YAML catalogs (plus optional user files);
``Deployment`` says how a model runs (GPU, TP/PP, bits, offloading, timing backend,
framework); ``CostModel`` prices one forward pass over a batch with the backend the
deployment asks for (``hardware.timing``: paper, roofline, measured kernel tables, auto);
``hardware.draft`` prices drafting and places the draft; ``hardware.speedup`` builds the
speedup tables the ``specsim speedup`` command prints.

Names are imported lazily (PEP 562): importing one submodule never pulls in the rest.
"""

from __future__ import annotations

from specdec.lazy import lazy_exports

_EXPORTS = {
    "Catalog": "hardware.catalog",
    "FrameworkSpec": "hardware.catalog",
    "GpuSpec": "hardware.catalog",
    "LinkSpec": "hardware.catalog",
    "ModelSpec": "hardware.catalog",
    "load_catalog": "hardware.catalog",
    "CostModel": "hardware.cost",
    "PassCost": "hardware.cost",
    "Deployment": "hardware.deployment",
    "StageLayout": "hardware.deployment",
    "check_positions": "hardware.deployment",
    "stage_layouts": "hardware.deployment",
    "DraftSetup": "hardware.draft",
    "chain_draft_seconds": "hardware.draft",
    "check_colocated_memory": "hardware.draft",
    "check_same_vocab": "hardware.draft",
    "colocated_kv_capacity_tokens": "hardware.draft",
    "tree_attended_keys": "hardware.draft",
    "tree_draft_seconds": "hardware.draft",
    "tree_rows_draft_seconds": "hardware.draft",
    "level_feeds": "hardware.draft",
    "tree_level_sizes": "hardware.draft",
    "tree_nodes": "hardware.draft",
    "ModelConfig": "hardware.models",
    "ModelShape": "hardware.models",
    "load_hf_config": "hardware.models",
    "model_shape": "hardware.models",
    "distinct_experts": "hardware.moe",
}

__all__ = [
    "Catalog",
    "CostModel",
    "Deployment",
    "DraftSetup",
    "FrameworkSpec",
    "GpuSpec",
    "LinkSpec",
    "ModelConfig",
    "ModelShape",
    "ModelSpec",
    "PassCost",
    "StageLayout",
    "chain_draft_seconds",
    "check_colocated_memory",
    "check_positions",
    "check_same_vocab",
    "colocated_kv_capacity_tokens",
    "distinct_experts",
    "load_catalog",
    "level_feeds",
    "load_hf_config",
    "model_shape",
    "stage_layouts",
    "tree_attended_keys",
    "tree_draft_seconds",
    "tree_rows_draft_seconds",
    "tree_level_sizes",
    "tree_nodes",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
