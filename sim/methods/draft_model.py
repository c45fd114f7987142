"""``draft_model``: a separate catalog model drafting autoregressively (one pass per level),
or, with ``parallel``, every position from one pass (PARD: An et al. 2025, arXiv 2504.18583;
vLLM's ``draft_model`` with ``parallel_drafting``). vLLM 0.33's V1 proposer
(vllm/v1/spec_decode/llm_base_proposer.py, ``extra_slots_per_request`` K, the inputs laid
out by ``_copy_and_expand_eagle_inputs`` in vllm/v1/spec_decode/utils.py) feeds each
request its step's target tokens (the rejected ones as padding), the bonus token and K - 1
mask tokens (the checkpoint's ``pard_token``) in one causal pass of the draft model, and
samples the K drafts from the last K positions; the scheduler gives each request K input
slots (``max_num_new_slots_for_drafting``) and K lookahead slots, as for the serial draft.
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import Gpus, Strict
from sim.methods.base import MethodTraits, colocated_or_separate, placed


class DraftModelDrafter(Strict):
    """A separate, smaller model drafting autoregressively (vLLM ``method: draft_model``)."""

    method: Literal["draft_model"]
    model: str | None = None  # a catalog id; null = models.draft
    tp: Gpus = 1  # vLLM's draft_tensor_parallel_size (1 = one copy per target GPU)
    parallel: bool = False  # PARD: all K drafts from one pass (vLLM's parallel_drafting)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` of the catalog model (``model`` or ``models.draft``)."""
        from sim.drafters import TRAITS, Drafter

        spec = make_cost.catalog.model(self.model) if self.model else draft_model
        if spec is None:
            raise ValueError("model: give a draft model (here or as models.draft)")
        spec.servable("model")
        cost = make_cost(spec, self.tp)
        # DraftSetup.parallel: PARD's new queries fall short of K by -parallel_slots (0)
        short = -TRAITS["draft_model"].parallel_slots if self.parallel else None
        if self.tp > 1:
            return Drafter("draft_model", placed(cost, placement, short),
                           parallel=self.parallel)
        return Drafter("draft_model", colocated_or_separate(cost, target, placement, short),
                       parallel=self.parallel)


Kind = DraftModelDrafter
TRAITS = MethodTraits(input_slots=1, parallel_slots=0, dynamic_k=True, vllm=("draft_model",),
                      sglang=("STANDALONE",), trtllm=("DraftTarget",))
DEFAULT = DraftModelDrafter(method="draft_model")
