"""``dflash``: a block drafter conditioned on the target's hidden states (DFlash, Chen et al.
2026, arXiv 2602.06036; vLLM ``dflash``, SGLang ``DFLASH``): ``layers`` decoder layers of
the target's shape (5 in the published drafters) that propose all K draft positions in
*one* pass over K + 1 queries per request -- the bonus token and a mask token per position
(vllm/v1/spec_decode/dflash.py, ``num_query_per_req = 1 + num_speculative_tokens``;
SGLang's ``[bs, block_size]`` with block_size = K + 1) -- each attending its request's
context and the whole block (non-causal). The context's draft KV is a projection of the
target's hidden states (``precompute_and_store_context_kv``), not a draft forward pass;
the fusing projection's weights are priced with the layers, its per-context-token work is
not. No input slots beyond the target's (``max_num_new_slots_for_drafting`` 0: "DFlash
drafts in a separate query pass"), K + 1 lookahead slots (``num_lookahead_tokens``: the
bonus query and one per draft token), async scheduling (V1 runner), and, unlike EAGLE, no
trailing-block drop in the prefix cache (``needs_eagle_block_drop``: its draft KV depends
on the target's hidden state alone), so not ``eagle_type`` here.
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import Gamma, Strict
from sim.methods.base import MethodTraits


class DFlashDrafter(Strict):
    """A block drafter on the target's hidden states (vLLM ``dflash``, SGLang ``DFLASH``):
    ``layers`` decoder layers of the target's shape and the target's lm_head, proposing every
    draft position in one pass of K + 1 queries per request; ``target_layers`` hidden states
    fused into its context (``sim.drafters``)."""

    method: Literal["dflash"]
    # z-lab's drafters: 5 layers, 5 fused target layers (github z-lab/dflash
    # tests/fixtures/dflash2-config.json @0a7587c04af47b56024ef80f44c0926e795a540b:
    # num_hidden_layers 5, dflash_config.target_layer_ids of 5; z-lab/dflash issue #11 on
    # z-lab/Qwen3-8B-DFlash-b16: "the number of layers (currently 5)")
    layers: Gamma = 5  # drafter decoder layers (z-lab's drafters: 5)
    target_layers: Gamma = 5  # target hidden states fused into its context (z-lab's: 5)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` pricing the block pass (``sim.draft_pricing``)."""
        from hardware.catalog import ModelSpec
        from hardware.draft import DraftSetup
        from sim.drafters import Drafter, head_config

        if placement != "colocated":
            raise ValueError("dflash: the drafter reads the target's hidden states, so it "
                             "runs on its GPUs (deployment.draft_placement colocated)")
        c = target.dep.model.config
        cfg = head_config(c, "eagle", self.layers)  # the target's layer shape and lm_head
        # the fc fusing target_layers hidden states (target_layers x h -> h), as extra MLP
        # width over the layers (same weight bytes; its FLOPs counted per query, not per
        # context token)
        h = c.hidden_size
        fc = self.target_layers * h * h
        cfg = cfg.model_copy(update={
            "intermediate_size": c.intermediate_size + round(fc / (3 * h * self.layers))})
        spec = ModelSpec(id=f"{target.dep.model.id}-dflash", config=cfg,
                         source=f"{self.layers}-layer DFlash drafter of {target.dep.model.id}")
        setup = DraftSetup.colocated_with(make_cost(spec, 1), target, block=True)
        return Drafter("dflash", setup)


Kind = DFlashDrafter
TRAITS = MethodTraits(extra_lookahead=1, dynamic_k=True, vllm=("dflash",),
                      sglang=("DFLASH",))
DEFAULT = DFlashDrafter(method="dflash")
