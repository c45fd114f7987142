"""Hardware: GPU, link, model and framework catalogs and the cost of a forward pass.

``load_catalog()`` reads the shipped YAML catalogs (plus optional user files);
``Deployment`` says how a model runs (GPU, TP/PP, bits, offloading, timing backend,
framework); ``CostModel`` prices one forward pass over a batch with the backend the
deployment asks for (``hardware.timing``: paper, roofline, measured kernel tables, auto);
``hardware.draft`` prices drafting and places the draft; ``hardware.speedup`` builds the
speedup tables the ``specsim speedup`` command prints.
"""

from hardware.catalog import Catalog, FrameworkSpec, GpuSpec, LinkSpec, ModelSpec, load_catalog
from hardware.cost import CostModel, PassCost
from hardware.deployment import Deployment, StageLayout, check_positions, stage_layouts
from hardware.draft import (
    DraftSetup,
    chain_draft_seconds,
    check_colocated_memory,
    check_same_vocab,
    colocated_kv_capacity_tokens,
    tree_attended_keys,
    tree_draft_seconds,
    tree_level_sizes,
    tree_nodes,
)
from hardware.models import ModelConfig, ModelShape, load_hf_config, model_shape

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
    "load_catalog",
    "load_hf_config",
    "model_shape",
    "stage_layouts",
    "tree_attended_keys",
    "tree_draft_seconds",
    "tree_level_sizes",
    "tree_nodes",
]
