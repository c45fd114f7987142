"""``medusa``: Medusa heads (Cai et al. 2024) on the target's last hidden state: ``heads``
heads of ``layers`` residual blocks and an lm_head each (``hardware.models``, model_type
medusa), all run in *one* pass that proposes every position of a chain or of a Cartesian
tree ⟨k1..km⟩ (head i's top-k_i), verified by the target in one tree pass. No attention,
no KV and no lookahead slots (vLLM reserves them for EAGLE-type and draft models only,
vllm/v1/core/sched/scheduler.py); a copy on each of the target's GPUs, the batch's rows
split over them (vLLM runs the heads at the target's TP, its lm_heads split over it, on
the last pipeline stage: at tp = pp = 1 the same).
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import Gamma, Strict, Vocab
from sim.methods.base import MethodTraits


class MedusaDrafter(Strict):
    """Medusa heads on the target's last hidden state (vLLM ``medusa``): ``heads`` heads
    (the deepest draft they can propose) of ``layers`` residual blocks each, all in one
    pass; ``draft_vocab`` is vLLM's ``truncated_vocab_size`` (null: the target's)."""

    method: Literal["medusa"]
    heads: Gamma = 5  # vLLM's MedusaConfig default, and FasterDecoding's Vicuna heads
    layers: Gamma = 1  # residual blocks per head (num_hidden_layers / medusa_num_layers)
    draft_vocab: Vocab | None = None

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` pricing the heads as one attention-free pass (``sim.drafters``)."""
        from hardware.catalog import ModelSpec
        from hardware.draft import DraftSetup
        from sim.drafters import Drafter, medusa_config

        if placement != "colocated":
            raise ValueError("medusa: the heads read the target's hidden states, so they run "
                             "on its GPUs (deployment.draft_placement colocated)")
        vocab = target.dep.model.config.vocab_size
        if self.draft_vocab is not None and self.draft_vocab > vocab:
            raise ValueError(f"draft_vocab: {self.draft_vocab} exceeds the target's vocab_size "
                             f"{vocab} (vLLM's truncated_vocab_size keeps a subset of it)")
        cfg = medusa_config(target.dep.model.config, self.heads, self.layers, self.draft_vocab)
        spec = ModelSpec(id=f"{target.dep.model.id}-medusa", config=cfg,
                         source=f"{self.heads} Medusa heads of {target.dep.model.id}")
        setup = DraftSetup.colocated_with(make_cost(spec, 1), target, one_pass=True)
        return Drafter("medusa", setup, lookahead=False)


Kind = MedusaDrafter
TRAITS = MethodTraits(async_ok=False, vllm=("medusa",))
DEFAULT = MedusaDrafter(method="medusa")
