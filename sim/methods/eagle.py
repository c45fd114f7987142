"""``eagle`` / ``eagle3``: a head of the target's width on the target's hidden states (EAGLE,
EAGLE-3: Li et al. 2024/2025): ``layers`` decoder layers (1 in the published heads), an
input projection fusing 2 (EAGLE) or 3 (EAGLE-3, low/mid/high layer features) hidden
states into one, and an lm_head -- the target's (EAGLE) or its own over a reduced draft
vocabulary (EAGLE-3: 32000 rows for the Llama-3 heads, sgl-project/SpecForge
configs/llama3-70B-ealge3.json @82b62f6e). The embedding is the target's (not stored
again). It drafts autoregressively (one pass per level) and caches KV for its own layers;
with ``parallel`` every position from one pass (P-EAGLE, vLLM's ``parallel_drafting`` on
``eagle``/``eagle3``): vLLM 0.33's V1 proposer (vllm/v1/spec_decode/llm_base_proposer.py)
feeds each request its step's target tokens shifted by one (the rejected ones as padding),
the bonus token and K - 1 mask tokens (the checkpoint's ``ptd_token_id``, a learned hidden
state in place of the target's) in one causal pass of the head, and the scheduler gives
each request K - 1 input slots (``max_num_new_slots_for_drafting``) and K lookahead slots.
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import Gamma, Strict, Vocab
from sim.methods.base import MethodTraits, colocated_or_separate


class EagleDrafter(Strict):
    """An EAGLE (``eagle``) or EAGLE-3 (``eagle3``) head on the target's hidden states:
    ``layers`` decoder layers of the target's shape; EAGLE-3's lm_head over a draft
    vocabulary of ``draft_vocab`` tokens (32000 in the published Llama-3 heads)."""

    method: Literal["eagle", "eagle3"]
    layers: Gamma = 1
    draft_vocab: Vocab | None = None  # eagle3 only; null = 32000 (eagle: the target's)
    parallel: bool = False  # P-EAGLE: all K drafts from one pass (vLLM's parallel_drafting)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` pricing the head as a one-layer model (``sim.drafters``)."""
        from hardware.catalog import ModelSpec
        from sim.drafters import TRAITS, Drafter, head_config

        if self.method == "eagle" and self.draft_vocab is not None:
            raise ValueError("draft_vocab: only EAGLE-3 heads have their own vocabulary")
        vocab = (self.draft_vocab or 32000) if self.method == "eagle3" else None
        cfg = head_config(target.dep.model.config, self.method, self.layers, vocab)
        spec = ModelSpec(id=f"{target.dep.model.id}-{self.method}", config=cfg,
                         source=f"{self.method} head of {target.dep.model.id}")
        # DraftSetup.parallel: P-EAGLE's new queries fall short of K by -parallel_slots (1)
        short = -TRAITS[self.method].parallel_slots if self.parallel else None
        return Drafter(self.method, colocated_or_separate(make_cost(spec, 1), target,
                                                          placement, short),
                       parallel=self.parallel)


Kind = EagleDrafter
TRAITS = MethodTraits(eagle_type=True, parallel_slots=-1, dynamic_k=True, vllm=("eagle",),
                      sglang=("EAGLE",))
DEFAULT = EagleDrafter(method="eagle")
