"""``ngram`` / ``suffix``: prompt lookup / suffix-tree matching on the CPU; no GPU pass, no
draft KV, no lookahead slots (vLLM reserves them only for model-based drafters). On each
step a sequence finds a match with probability ``proposal_rate`` (otherwise it verifies
just its last token); ``cpu_s_per_seq`` is the CPU time per sequence per step, 0 unless
set (not measured here).
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import NonNegSeconds, Prob, Strict
from sim.methods.base import MethodTraits


class LookupDrafter(Strict):
    """CPU drafting by matching: prompt lookup / n-gram (vLLM ``ngram``, its
    ``prompt_lookup_min/max``) or suffix decoding (``suffix``)."""

    method: Literal["ngram", "suffix"]
    # P(a sequence finds a match on a step); null = the acceptance preset's proposal_rate
    proposal_rate: Prob | None = None
    cpu_s_per_seq: NonNegSeconds = 0.0  # CPU seconds per sequence per step (not measured: 0)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` with no GPU model."""
        from sim.drafters import Drafter

        return Drafter(self.method, None, lookahead=False, proposal_rate=self.proposal_rate,
                       cpu_s_per_seq=self.cpu_s_per_seq)


Kind = LookupDrafter
TRAITS = MethodTraits(on_cpu=True, async_ok=False, dynamic_k=True, vllm=("ngram",),
                      sglang=("NGRAM",), trtllm=("NGram",))
DEFAULT = LookupDrafter(method="ngram")
