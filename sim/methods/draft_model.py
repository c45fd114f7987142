"""``draft_model``: a separate catalog model drafting autoregressively (one pass per level).
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import Gpus, Strict
from sim.methods.base import MethodTraits, colocated_or_separate


class DraftModelDrafter(Strict):
    """A separate, smaller model drafting autoregressively (vLLM ``method: draft_model``)."""

    method: Literal["draft_model"]
    model: str | None = None  # a catalog id; null = models.draft
    tp: Gpus = 1  # vLLM's draft_tensor_parallel_size (1 = one copy per target GPU)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` of the catalog model (``model`` or ``models.draft``)."""
        from sim.drafters import Drafter

        spec = make_cost.catalog.model(self.model) if self.model else draft_model
        if spec is None:
            raise ValueError("model: give a draft model (here or as models.draft)")
        spec.servable("model")
        cost = make_cost(spec, self.tp)
        if self.tp > 1:
            from hardware.draft import DraftSetup

            return Drafter("draft_model", DraftSetup(cost=cost, placement=placement))
        return Drafter("draft_model", colocated_or_separate(cost, target, placement))


Kind = DraftModelDrafter
TRAITS = MethodTraits(input_slots=1, dynamic_k=True, vllm=("draft_model",),
                      sglang=("STANDALONE",), trtllm=("DraftTarget",))
DEFAULT = DraftModelDrafter(method="draft_model")
