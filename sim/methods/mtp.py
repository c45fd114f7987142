"""``mtp``: the target's own multi-token-prediction module (DeepSeek-V3's next-n layer),
reused for every draft position as vLLM does: one decoder layer of the target's shape plus
the 2h -> h projection, sharing embedding and lm_head. For a DeepSeek target that layer is
an MLA + MoE block (the checkpoint's layer 61: 256 routed experts and a shared one), run
on the target's GPUs with its tensor and expert parallelism (vLLM's MTP drafter takes the
target's parallel config), not replicated per GPU.
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import Gamma, Strict
from sim.methods.base import MethodTraits, colocated_or_separate


class MtpDrafter(Strict):
    """The target's own multi-token-prediction module (vLLM ``mtp``, DeepSeek-V3's next-n
    layer, reused for every draft position)."""

    method: Literal["mtp"]
    layers: Gamma = 1  # num_nextn_predict_layers

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` pricing the module as one decoder layer of the target's shape."""
        from hardware.catalog import ModelSpec
        from sim.drafters import Drafter, head_config

        cfg = head_config(target.dep.model.config, "mtp", self.layers)
        spec = ModelSpec(id=f"{target.dep.model.id}-mtp", config=cfg,
                         source=f"MTP module of {target.dep.model.id}")
        t = target.dep
        if cfg.routed_experts and placement == "colocated":
            # an MoE module (DeepSeek): sharded like the target, one copy (sim.drafters)
            from hardware.draft import DraftSetup

            return Drafter("mtp", DraftSetup(cost=make_cost(spec, t.tp, t.ep),
                                             placement="colocated"))
        return Drafter("mtp", colocated_or_separate(make_cost(spec, 1), target, placement))


Kind = MtpDrafter
TRAITS = MethodTraits(eagle_type=True, dynamic_k=True, vllm=("mtp", "deepseek_mtp"),
                      sglang=("NEXTN",), trtllm=("MTP",))
DEFAULT = MtpDrafter(method="mtp")
