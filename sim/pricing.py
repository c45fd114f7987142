"""Pricing one replica iteration: the draft passes, then one target pass.

The target pass carries every decoding sequence's verify tokens (the last token plus its
guesses or tree nodes) and every prefill chunk, priced by the cost model as one mixed batch.
The draft is autoregressive, so a chain of γ needs γ serial draft passes and an expansion
tree ⟨k1..km⟩ needs m passes, pass j feeding the nodes of level j−1 (lecture §3.1, §6.2).
The draft also prefills every prompt chunk (in its first pass) so that its own KV exists
when the sequence starts decoding.

Placement: a draft on the target's GPUs runs serially with the target on the same chips
and shares their memory; a draft on its own GPUs (SpecInfer's data-parallel drafts) does
not share memory but a sequence's verify still waits for its guesses, and the target's GPUs
have nothing else to run meanwhile in this model, so the iteration time is the same sum
``draft_s + verify_s`` in both cases; only the KV capacity differs (see ``cluster``).

The cost models only need ``pass_seconds(new_tokens, context)`` and, for the iteration
record's roofline bound, ``pass_cost(...).bound``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class PassPricer(Protocol):
    """What the engine needs from a cost model (``hardware.CostModel`` satisfies it)."""

    def pass_seconds(self, new_tokens: np.ndarray, context: np.ndarray) -> float: ...

    def pass_cost(self, new_tokens: np.ndarray, context: np.ndarray): ...


def level_sizes(widths: np.ndarray) -> np.ndarray:
    """int64 [B, m]: nodes at each level of each sequence's tree (a chain has 1 per level).

    Rows are padded with 0 past their depth, and the cumulative product keeps them 0.
    """
    return np.cumprod(widths, axis=1)  # [B, m] -> [B, m]


def tree_nodes(widths: np.ndarray) -> np.ndarray:
    """int64 [B]: draft nodes below the root (γ for a chain of γ; 0 without speculation)."""
    if widths.shape[1] == 0:
        return np.zeros(widths.shape[0], dtype=np.int64)
    return level_sizes(widths).sum(axis=1)  # [B, m] -> [B]


class IterationPricer:
    """Prices iterations of one replica from its target and (optional) draft cost models.

    ``record_bound`` asks the target model for its full breakdown each iteration (to record
    which roofline limit won); without it the fast ``pass_seconds`` path is used and the
    bound is recorded as ``""``.
    """

    def __init__(self, target: PassPricer, draft: PassPricer | None, record_bound: bool = True):
        self.target = target
        self.draft = draft
        self.record_bound = record_bound

    def price(
        self,
        dec_context: np.ndarray,
        widths: np.ndarray,
        verify_tokens: np.ndarray,
        pre_context: np.ndarray,
        pre_chunks: np.ndarray,
    ) -> tuple[float, float, str]:
        """(draft_s, verify_s, bound) for one iteration.

        dec_context int64 [D]: cached tokens of the decoding sequences; widths int64 [D, m];
        verify_tokens int64 [D] = 1 + tree nodes; pre_context, pre_chunks int64 [P]: cached
        tokens and this iteration's chunk of the prefilling sequences.
        """
        new = np.concatenate((verify_tokens, pre_chunks))  # [D + P]
        ctx = np.concatenate((dec_context, pre_context))  # [D + P]
        if self.record_bound:
            cost = self.target.pass_cost(new, ctx)
            verify_s, bound = float(cost.seconds), str(cost.bound)
        else:
            verify_s, bound = float(self.target.pass_seconds(new, ctx)), ""
        draft_s = self._draft_seconds(dec_context, widths, pre_context, pre_chunks)
        return draft_s, verify_s, bound

    def _draft_seconds(self, dec_context, widths, pre_context, pre_chunks) -> float:
        if self.draft is None:
            return 0.0
        depth = widths.shape[1]
        total = 0.0
        if depth:
            # Pass j feeds level j-1: the root (the last token) first, then each level's nodes.
            feed = np.ones_like(widths)  # [D, m]
            feed[:, 1:] = level_sizes(widths)[:, :-1]
            feed[widths == 0] = 0
        for j in range(max(depth, 1)):
            if depth:
                live = feed[:, j] > 0
                new, ctx = feed[live, j], dec_context[live] + j
            else:
                new = ctx = np.zeros(0, dtype=np.int64)
            if j == 0 and len(pre_chunks):
                new = np.concatenate((new, pre_chunks))
                ctx = np.concatenate((ctx, pre_context))
            if len(new):
                total += float(self.draft.pass_seconds(new, ctx))
        return total
