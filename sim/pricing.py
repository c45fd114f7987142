"""Pricing one replica iteration: the draft passes, then one target pass.

The target pass carries every decoding sequence's verify tokens (the last token plus its
guesses or tree nodes) and every prefill chunk, priced by the cost model as one mixed batch.
Attention is causal for decodes, chains and prefill chunks; a token tree's nodes attend only
their context, their ancestors and themselves (SpecInfer's topology-aware mask, lecture
§6.2), so tree passes give the cost model their attended keys (``sum_keys``, as
``hardware.draft.tree_attended_keys`` counts them). The draft's passes are
``sim.draft_pricing``'s.

Placement: a draft on the target's GPUs runs serially with the target on the same chips
and shares their memory, so an iteration costs ``draft_s + verify_s``. A draft on its own
GPUs (``deployment.draft_placement: separate``) does not share memory; by default
(``draft_overlap: serial``) it still alternates with the verify, each waiting for the
other's result. With ``draft_overlap: parallel`` (PEARL's parallel drafting, Liu et al.,
2024) the draft keeps drafting a chain past its last guess while the target verifies:
where every guess and the bonus token turn out right (``sim.step`` draws it), the next
iteration's guesses are already there (``ready``) and only the other sequences are drafted
before its verify; where a guess is rejected the drafting ahead is thrown away at once.
So an iteration costs draft(not ready) + verify, plus, when some sequence uses guesses
drafted ahead, whatever of the last iteration's drafting ahead outlasted its verify. This
is reported as ``draft_s``: the drafting on the critical path.

Beyond its passes, an iteration in which some sequence verifies drafted tokens costs what
the engine spends around them -- rejection sampling, the proposer's inputs, per draft pass
and per sequence, tree building -- by ``hardware.spec_cost.round_seconds`` (the framework's
overheads for the drafting method, ``spec``); it is reported in ``draft_s``, with the
drafting, as the speculative part of the iteration. A draft model or an EAGLE-type head
runs one serial pass per level of the shape, a ``one_pass`` drafter (Medusa) one, a CPU
drafter (no ``draft``) none.

A pass depends on the batch only through its sequence count and four sums (Σ new,
Σ context, Σ new·context, Σ new²), so the engine computes those with a few numpy reductions
and calls the cost model's ``pass_seconds_sums`` (``pass_seconds_bound_sums`` when it also
records which roofline bound won).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from hardware.cost import batch_pass, verify_pass
from hardware.spec_cost import round_seconds, serial_passes
from sim.draft_pricing import (
    chain_prefix_seconds,
    one_level_deeper,
    per_sequence_seconds,
    prefill_sums,
    shared_shape_seconds,
)
from sim.shapes import causal_keys, shape_info, tree_key_term, tree_nodes

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce


class PassPricer(Protocol):
    """What the engine needs from a cost model (``hardware.cost.CostModel`` has it)."""

    def pass_seconds_sums(self, sum_new: float, sum_ctx: float, sum_new_ctx: float,
                          sum_new_sq: float, sum_keys: float | None = None, *,
                          n_seqs: float) -> float:
        """Seconds of one pass of ``n_seqs`` sequences from Σ new, Σ context, Σ new·context,
        Σ new² (and the attended keys, which replace the causal count where given: token
        trees)."""

    def pass_seconds_bound_sums(self, sum_new: float, sum_ctx: float, sum_new_ctx: float,
                                sum_new_sq: float, sum_keys: float | None = None, *,
                                n_seqs: float) -> tuple[float, str]:
        """(seconds, the roofline bound that won) of one pass from the same sums."""

    def pass_seconds(self, new_tokens: np.ndarray, context: np.ndarray,
                     keys: np.ndarray | None = None) -> float:
        """Seconds of one pass over per-sequence arrays (keys: attended keys per sequence)."""

    def pass_cost(self, new_tokens: np.ndarray, context: np.ndarray,
                  keys: np.ndarray | None = None):
        """The pass with its breakdown; needs ``seconds``, ``bound``, ``stage_s``, ``hop_s``."""


class IterationPricer:
    """Prices iterations of one replica from its target cost model and (optional) draft.

    ``draft`` is a ``hardware.draft.DraftSetup`` (or anything with ``cost`` and ``replicas``);
    ``overlap``: the draft drafts ahead during the verify (see the module notes).
    ``record_bound`` asks the target model for its breakdown each iteration (to record which
    roofline limit won); otherwise the bound is recorded as ``""``. ``spec`` is the
    framework's speculative overheads for the drafting method (a
    ``hardware.spec_cost.SpecRound``; None: none).
    """

    def __init__(self, target: PassPricer, draft=None, record_bound: bool = True,
                 overlap: bool = False, spec=None):
        self.target = target
        self.draft = draft
        self.record_bound = record_bound
        self.overlap = overlap
        self.spec = spec
        # round_seconds' parameters, or None where they are all zero (nothing to add)
        params = None if spec is None else spec.params
        self.spec_params = params if params is not None and params.any() else None
        self.ahead_excess = 0.0  # drafting ahead still running when the last verify ended

    def round_s(self, n_spec: float, depth: int, tree: bool) -> float:
        """What the engine spends beyond the passes on an iteration where ``n_spec``
        sequences verify drafts of a shape ``depth`` levels deep (``round_seconds``)."""
        if self.spec_params is None:
            return 0.0
        return round_seconds(self.spec_params, n_spec, serial_passes(self.draft, depth), tree)

    def price(self, row: np.ndarray, dec_context: np.ndarray, pre_context: np.ndarray,
              pre_chunks: np.ndarray, bound: bool | None = None, sync=None,
              ready: np.ndarray | None = None, draft_pre=None,
              drafted: np.ndarray | None = None) -> tuple[float, float, str]:
        """(draft_s, verify_s, bound) for one iteration.

        row int64 [m]: every decoding sequence's shape, or int64 [D, m]: one per sequence;
        dec_context int64 [D]: their cached tokens; pre_context, pre_chunks int64 [P]: cached
        tokens and this iteration's chunk of the prefilling sequences; ``sync``: tokens the
        draft ingests per decoding sequence besides its root (a scalar or int64 [D]);
        ``ready`` bool [D] (with overlap): whose guesses were drafted ahead; ``draft_pre``:
        (context, chunk) int64 [P] the draft prefills instead of ``pre_context`` and
        ``pre_chunks``, where it has tokens of its own to catch up on (a decode replica
        whose draft KV was not sent with the target's, ``sim.disagg``); ``drafted`` int64
        [D, m]: the shapes the draft drafted where the verify's ``row`` lost the drafts a
        grammar forbids (``sim.grammar``): the draft and the round are priced at them, the
        verify at ``row``.
        """
        if drafted is not None:  # the verify at row, the draft and the round at drafted
            if ready is not None:
                raise ValueError("a grammar's dropped drafts do not draft ahead")
            draft_s, _, _ = self._price(drafted, dec_context, pre_context, pre_chunks,
                                        False, sync, None, draft_pre, verify=False)
            _, verify_s, label = self._price(row, dec_context, pre_context, pre_chunks,
                                             bound, sync, None, draft_pre, draft=False)
            return draft_s, verify_s, label
        return self._price(row, dec_context, pre_context, pre_chunks, bound, sync, ready,
                           draft_pre)

    def _price(self, row, dec_context, pre_context, pre_chunks, bound, sync, ready, draft_pre,
               draft: bool = True, verify: bool = True) -> tuple[float, float, str]:
        """``price`` without ``drafted``; ``draft`` / ``verify`` False: that half is not
        priced (0.0; the round's overheads go with the draft)."""
        if row.ndim == 2 or isinstance(sync, np.ndarray):
            return self._per_sequence(_rows(row, len(dec_context)), dec_context, pre_context,
                                      pre_chunks, bound, sync=sync, ready=ready,
                                      draft_pre=draft_pre, draft=draft, verify=verify)
        n_dec = len(dec_context)
        s_ctx = float(_sum(dec_context))
        pre = prefill_sums(pre_context, pre_chunks)
        p_new, p_ctx, p_new_ctx, p_sq = pre
        verify = 1 + tree_nodes(row)
        tri = tree_key_term(row)
        target = verify_pass(verify, -1.0 if tri is None else tri, s_ctx, n_dec, p_new, p_ctx,
                             p_new_ctx, p_sq, len(pre_chunks))
        label, verify_s = "", 0.0
        if not verify:
            pass
        elif self.record_bound if bound is None else bound:
            verify_s, label = self.target.pass_seconds_bound_at(*target)
        else:
            verify_s = self.target.pass_seconds_at(*target)
        draft_s = 0.0
        if not draft:
            return draft_s, verify_s, label
        if self.draft is not None:
            if self.overlap and ready is not None and shape_info(row)[0]:
                return self._per_sequence(_rows(row, n_dec), dec_context, pre_context,
                                          pre_chunks, bound, ready=ready)
            draft_s = shared_shape_seconds(
                self.draft, row, dec_context,
                pre if draft_pre is None else prefill_sums(*draft_pre), len(pre_chunks),
                sync, s_ctx)
        if self.spec_params is not None and verify > 1:
            draft_s += self.round_s(n_dec, shape_info(row)[0], tri is not None)
        return draft_s, verify_s, label

    def decode_chain_seconds(self, dec_context: np.ndarray, depth: int) -> list[float]:
        """[draft_s + verify_s of ``price(chain(γ, depth), dec_context, ∅, ∅, bound=False)``
        for γ = 0..depth]: every chain depth of a decode-only iteration at once, the draft
        passes of the deepest chain summed in order (``chain_prefix_seconds``), so each entry
        is the float ``price`` gives for that γ alone."""
        n_dec = len(dec_context)
        s_ctx = float(_sum(dec_context))
        p_new = p_ctx = p_new_ctx = p_sq = 0.0  # no prefill: price's sums, term for term
        draft = [0.0] * (depth + 1) if self.draft is None else \
            chain_prefix_seconds(self.draft, depth, dec_context)
        out = []
        for g in range(depth + 1):
            verify = 1 + g
            verify_s = self.target.pass_seconds_at(*batch_pass(
                verify, 0, 0, s_ctx, n_dec, False, p_new, p_ctx, p_new_ctx, p_sq, 0))
            extra = self.round_s(n_dec, g, False) if g else 0.0
            out.append(draft[g] + extra + verify_s)
        return out

    def price_stages(self, row: np.ndarray, dec_context: np.ndarray, pre_context: np.ndarray,
                     pre_chunks: np.ndarray, sync=None):
        """(draft_s, the target's ``PassCost`` with ``stage_s`` and ``hop_s``) for a pipeline."""
        if row.ndim == 2 or isinstance(sync, np.ndarray):
            return self._per_sequence(_rows(row, len(dec_context)), dec_context, pre_context,
                                      pre_chunks, True, stages=True, sync=sync)
        n_dec = len(dec_context)
        verify = 1 + tree_nodes(row)
        new = np.concatenate((np.full(n_dec, verify, dtype=np.int64), pre_chunks))
        keys = None
        tri = tree_key_term(row)
        if tri is not None:
            keys = np.concatenate((verify * dec_context + tri,
                                   causal_keys(pre_chunks, pre_context)))  # [D + P]
        cost = self.target.pass_cost(new, np.concatenate((dec_context, pre_context)), keys)
        draft_s = 0.0
        if self.draft is not None:
            draft_s = shared_shape_seconds(self.draft, row, dec_context,
                                           prefill_sums(pre_context, pre_chunks),
                                           len(pre_chunks), sync)
        if verify > 1:
            draft_s += self.round_s(n_dec, shape_info(row)[0], tri is not None)
        return draft_s, cost

    def _per_sequence(self, widths, dec_context, pre_context, pre_chunks, bound, stages=False,
                      sync=None, ready=None, draft_pre=None, draft=True, verify=True):
        """The general path: a shape per decoding sequence (widths int64 [D, m]).

        Verify: 1 + that sequence's nodes each. Draft: ``sim.draft_pricing``, with the
        overlap when the draft drafts ahead (``draft_pre``: as ``price``'s). Returns what
        ``price`` (or, with ``stages``, ``price_stages``) returns; ``draft`` / ``verify``
        as ``_price``'s.
        """
        sizes = np.cumprod(widths, axis=1)  # [D, m] nodes per level
        new = np.concatenate((1 + sizes.sum(axis=1), pre_chunks))  # [D + P]
        ctx = np.concatenate((dec_context, pre_context))  # [D + P]
        keys = None
        if (widths > 1).any():  # trees: each node attends its context, ancestors and itself
            tri = 1 + (sizes * np.arange(2, widths.shape[1] + 2)).sum(axis=1)  # [D]
            keys = np.concatenate((new[: len(dec_context)] * dec_context + tri,
                                   causal_keys(pre_chunks, pre_context)))  # [D + P]
        label, cost, verify_s = "", None, 0.0
        if stages or (verify and (self.record_bound if bound is None else bound)):
            cost = self.target.pass_cost(new, ctx, keys)
            label = str(cost.bound)
            verify_s = float(cost.seconds)
        elif verify:
            verify_s = self.target.pass_seconds(new, ctx, keys)
        draft_s = 0.0
        if not draft:
            return (draft_s, cost) if stages else (draft_s, verify_s, label)
        if self.draft is not None:
            if self.overlap and ready is not None:
                cold = ~ready  # [D]: guesses not drafted ahead
                serial = per_sequence_seconds(self.draft, widths[cold], dec_context[cold],
                                              pre_context, pre_chunks,
                                              None if sync is None else sync[cold])
                ahead = per_sequence_seconds(self.draft, one_level_deeper(widths),
                                             dec_context, pre_context[:0], pre_chunks[:0])
                draft_s = serial + (self.ahead_excess if ready.any() else 0.0)
                self.ahead_excess = max(0.0, ahead - verify_s)
            else:
                d_ctx, d_chunks = (pre_context, pre_chunks) if draft_pre is None else draft_pre
                draft_s = per_sequence_seconds(self.draft, widths, dec_context, d_ctx,
                                               d_chunks, sync)
        if self.spec_params is not None and widths.size:
            levels = (widths > 0).sum(axis=1)  # [D]
            n_spec = int((levels > 0).sum())
            # serial draft passes on the critical path: drafted ahead ones ran in the verify
            serial = levels if not (self.overlap and ready is not None) else levels[~ready]
            if n_spec:
                draft_s += self.round_s(n_spec, int(serial.max(initial=0)),
                                        bool((widths > 1).any()))
        return (draft_s, cost) if stages else (draft_s, verify_s, label)


def _rows(row: np.ndarray, n: int) -> np.ndarray:
    """int64 [n, m]: ``row`` as one shape per sequence."""
    return row if row.ndim == 2 else np.broadcast_to(row, (n, row.shape[0]))
