"""What a speculative iteration costs beyond its passes, as engines pay it: one formula.

An engine's speculative iteration is more than its draft passes and its verify pass. vLLM
and SGLang also run, every iteration that verifies drafts: the rejection sampler over every
drafted position, the proposer's input preparation (positions, slot mappings, the hidden
states an EAGLE head takes), the bookkeeping of accepted tokens and of the draft's KV; per
draft pass the launches and host work the pass's own GPU time does not show (an EAGLE-3
head's feature fusion and vocabulary mapping differ from an EAGLE-1 head's); per sequence
the sampler and the proposer's per-request work; and for a token tree its construction, the
selection of the nodes to verify and the tree mask. SpecSim charges

    round_s = step_s + seq_s x speculating sequences + draft_step_s x serial draft passes
              + tree_s (iterations that verify a tree)

with the four numbers a framework's ``speculation`` block gives for the drafting method
(``hardware.catalog.SpecOverheads``, fitted on validation category E). An iteration in which
no sequence verifies a draft costs nothing more. A drafter that proposes from one pass
(Medusa's heads) has one serial pass; a CPU drafter (n-gram, suffix) none.

:func:`round_seconds` is plain scalar Python over a float64 array: the reference pricer
(``sim.pricing``), the compiled walk (``sim.kernels``, which numba compiles with it), the
speedup tables and the validation rows all call it, so the rule is stated here only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SPEC_FIELDS", "SpecRound", "round_seconds", "serial_passes", "spec_round",
           "for_cost", "NO_SPEC"]

# the order of round_seconds' parameters
SPEC_FIELDS = ("step_s", "seq_s", "draft_step_s", "tree_s")


def round_seconds(p, n_spec, passes, tree):
    """Seconds an engine spends on one speculative iteration beyond its passes (see the
    module notes): ``p`` float64 [4] (:data:`SPEC_FIELDS`), ``n_spec`` the sequences that
    verify at least one drafted token, ``passes`` the serial draft passes, ``tree``
    whether a token tree is verified. Nothing when no sequence speculates."""
    if n_spec <= 0:
        return 0.0
    s = p[0] + p[1] * n_spec + p[2] * passes
    if tree:
        s += p[3]
    return s


def serial_passes(draft, depth: int) -> int:
    """Serial draft passes of a round whose shape is ``depth`` levels deep: a draft model
    or an EAGLE/MTP head one per level, a ``one_pass`` drafter (Medusa's heads) one, a CPU
    drafter (``draft`` None) none. (The compiled walk states it over its own scalars.)"""
    if draft is None or not depth:
        return 0
    return 1 if getattr(draft, "one_pass", False) else depth


@dataclass(frozen=True)
class SpecRound:
    """A framework's speculative overheads for one drafting method, as
    :func:`round_seconds` takes them (``params``), and where they come from."""

    step_s: float = 0.0
    seq_s: float = 0.0
    draft_step_s: float = 0.0
    tree_s: float = 0.0
    note: str = ""

    @property
    def params(self) -> np.ndarray:
        """float64 [4]: the parameters in :data:`SPEC_FIELDS` order."""
        return np.array([self.step_s, self.seq_s, self.draft_step_s, self.tree_s],
                        dtype=np.float64)

    def seconds(self, n_spec: float, passes: int, tree: bool) -> float:
        """:func:`round_seconds` with these parameters (a Python float)."""
        return float(round_seconds(self.params, n_spec, passes, tree))


NO_SPEC = SpecRound(note="no speculative overheads")


def spec_round(framework, method: str | None) -> SpecRound:
    """The overheads ``framework`` (a ``hardware.catalog.FrameworkSpec``) charges a
    speculative iteration drafted by ``method``: its ``speculation`` block, the method's own
    ``draft_step_s`` where it lists one, else its ``default``; none without a block."""
    block = getattr(framework, "speculation", None)
    if block is None or method is None:
        return NO_SPEC
    steps = block.draft_step_s
    per_pass = steps.get(method, steps.get("default", 0.0))
    which = method if method in steps else "default"
    return SpecRound(step_s=block.step_s, seq_s=block.seq_s, draft_step_s=per_pass,
                     tree_s=block.tree_s,
                     note=f"{framework.name} {framework.version} speculative overheads "
                          f"({which} draft pass)")


def for_cost(cost, method: str | None) -> SpecRound:
    """The overheads a target priced by ``cost`` (a ``hardware.cost.CostModel``) pays per
    speculative iteration drafted by ``method``: its framework's (:func:`spec_round`), none
    on the lecture's paper GPU, which has no engine around its passes."""
    if method is None or cost.backend == "paper":
        return NO_SPEC
    return spec_round(cost.framework, method)
