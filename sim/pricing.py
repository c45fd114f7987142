"""Pricing one replica iteration: the draft passes, then one target pass.

The target pass carries every decoding sequence's verify tokens (the last token plus its
guesses or tree nodes) and every prefill chunk, priced by the cost model as one mixed batch.
The draft is autoregressive, so a chain of γ needs γ serial draft passes and an expansion
tree ⟨k1..km⟩ needs m passes, pass j feeding the nodes of level j−1 (lecture §3.1, §6.2).
The draft also prefills every prompt chunk (in its first pass) so that its own KV exists
when the sequence starts decoding. Attention is causal for decodes, chains and prefill
chunks; a token tree's nodes attend only their context, their ancestors and themselves
(SpecInfer's topology-aware mask, lecture §6.2), so tree passes give the cost model their
attended keys (``sum_keys``, as ``hardware.draft.tree_attended_keys`` counts them).

Placement: a draft on the target's GPUs runs serially with the target on the same chips
and shares their memory; a draft on its own GPUs (SpecInfer's data-parallel drafts) does
not share memory, but a sequence's verify still waits for its guesses and the target has
nothing else to run meanwhile in this model, so the iteration time is the same sum
``draft_s + verify_s`` in both cases; only the KV capacity differs (see ``sim.build``).

A pass depends on the batch only through its sequence count and four sums (Σ new,
Σ context, Σ new·context, Σ new²), so the engine computes those with a few numpy reductions
and calls the cost model's ``pass_seconds_sums`` (``pass_seconds_bound_sums`` when it also
records which roofline bound won).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

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


def level_sizes(row: np.ndarray) -> np.ndarray:
    """int64 [m]: nodes at each level of a tree shape (1 per level for a chain; 0 past depth)."""
    return np.cumprod(row)


_SHAPES: dict[bytes, tuple[int, int, list[int]]] = {}


def shape_info(row: np.ndarray) -> tuple[int, int, list[int]]:
    """(depth, draft nodes below the root, tokens each serial draft pass feeds) of a shape.

    Nodes: γ for a chain of γ, Σ_j Π_{i<=j} k_i for a tree. Feeds: the root (1), then each
    level's nodes but the last. Memoised: policies reuse a handful of shapes.
    """
    key = row.tobytes()
    info = _SHAPES.get(key)
    if info is None:
        depth = int((row > 0).sum())
        sizes = [int(x) for x in level_sizes(row)]
        info = (depth, sum(sizes), [1] + sizes[: depth - 1] if depth else [])
        _SHAPES[key] = info
    return info


def tree_nodes(row: np.ndarray) -> int:
    """Draft nodes below the root: γ for a chain of γ, Σ_j Π_{i<=j} k_i for a tree."""
    return shape_info(row)[1]


def draft_feeds(row: np.ndarray) -> list[int]:
    """Tokens per sequence each serial draft pass feeds: the root, then each level's nodes."""
    return shape_info(row)[2]


_TREE_KEYS: dict[bytes, float | None] = {}


def tree_key_term(row: np.ndarray) -> float | None:
    """Σ_l n_l·(l + 1) over the levels of a tree verify (root l = 0), or None for a chain.

    Under the tree mask a node at depth l attends its context, its l ancestors and itself,
    so one sequence's verify attends ``(1 + nodes)·ctx + this`` keys
    (``hardware.draft.tree_attended_keys``). A chain's causal count is the same number,
    and chains keep the cost model's own causal sums (None), so their prices are unchanged.
    """
    key = row.tobytes()
    if key not in _TREE_KEYS:
        depth = shape_info(row)[0]
        sizes = [1] + [int(x) for x in level_sizes(row[:depth])]
        _TREE_KEYS[key] = (float(sum(n * (lvl + 1) for lvl, n in enumerate(sizes)))
                           if depth and int(row.max()) > 1 else None)
    return _TREE_KEYS[key]


def _causal_keys(new: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """float [n]: keys a causal run of ``new`` tokens over ``ctx`` cached ones attends."""
    c = new.astype(np.float64)
    return c * ctx + 0.5 * c * (c + 1)


class IterationPricer:
    """Prices iterations of one replica from its target cost model and (optional) draft.

    ``draft`` is a ``hardware.draft.DraftSetup`` (or anything with ``cost`` and ``replicas``).

    ``record_bound`` asks the target model for its breakdown each iteration (to record which
    roofline limit won); otherwise the bound is recorded as ``""``.
    """

    def __init__(self, target: PassPricer, draft=None, record_bound: bool = True):
        self.target = target
        self.draft = draft
        self.record_bound = record_bound

    def price(self, row: np.ndarray, dec_context: np.ndarray, pre_context: np.ndarray,
              pre_chunks: np.ndarray, bound: bool | None = None) -> tuple[float, float, str]:
        """(draft_s, verify_s, bound) for one iteration.

        row int64 [m]: every decoding sequence's shape, or int64 [D, m]: one per sequence;
        dec_context int64 [D]: their cached tokens; pre_context, pre_chunks int64 [P]: cached
        tokens and this iteration's chunk of the prefilling sequences.
        """
        if row.ndim == 2:
            return self._per_sequence(row, dec_context, pre_context, pre_chunks, bound)
        n_dec = len(dec_context)
        s_ctx = float(_sum(dec_context))
        if len(pre_chunks):
            c = pre_chunks.astype(np.float64)
            p_new, p_ctx = float(_sum(c)), float(_sum(pre_context))
            p_new_ctx, p_sq = float(c @ pre_context), float(c @ c)
        else:
            p_new = p_ctx = p_new_ctx = p_sq = 0.0
        verify = 1 + tree_nodes(row)
        sums = (n_dec * verify + p_new, s_ctx + p_ctx, verify * s_ctx + p_new_ctx,
                n_dec * verify * verify + p_sq)
        tri = tree_key_term(row)
        keys = None if tri is None or not n_dec else \
            verify * s_ctx + n_dec * tri + p_new_ctx + 0.5 * (p_sq + p_new)  # tree mask
        label = ""
        n_seqs = n_dec + len(pre_chunks)
        if self.record_bound if bound is None else bound:
            verify_s, label = self.target.pass_seconds_bound_sums(*sums, sum_keys=keys,
                                                                  n_seqs=n_seqs)
        else:
            verify_s = self.target.pass_seconds_sums(*sums, sum_keys=keys, n_seqs=n_seqs)
        draft_s = 0.0
        if self.draft is not None:
            draft_s = self._draft_seconds(row, n_dec, s_ctx, dec_context,
                                          (p_new, p_ctx, p_new_ctx, p_sq), len(pre_chunks))
        return draft_s, verify_s, label

    def price_stages(self, row: np.ndarray, dec_context: np.ndarray, pre_context: np.ndarray,
                     pre_chunks: np.ndarray):
        """(draft_s, the target's ``PassCost`` with ``stage_s`` and ``hop_s``) for a pipeline."""
        if row.ndim == 2:
            return self._per_sequence(row, dec_context, pre_context, pre_chunks, True, True)
        n_dec = len(dec_context)
        verify = 1 + tree_nodes(row)
        new = np.concatenate((np.full(n_dec, verify, dtype=np.int64), pre_chunks))
        keys = None
        tri = tree_key_term(row)
        if tri is not None:
            keys = np.concatenate((verify * dec_context + tri,
                                   _causal_keys(pre_chunks, pre_context)))  # [D + P]
        cost = self.target.pass_cost(new, np.concatenate((dec_context, pre_context)), keys)
        draft_s = 0.0
        if self.draft is not None:
            c = pre_chunks.astype(np.float64)
            sums = (float(_sum(c)), float(_sum(pre_context)), float(c @ pre_context), float(c @ c))
            draft_s = self._draft_seconds(row, n_dec, float(_sum(dec_context)), dec_context, sums,
                                          len(pre_chunks))
        return draft_s, cost

    def _draft_seconds(self, row, n_dec, s_ctx, dec_context, pre_sums, n_pre) -> float:
        """The draft's serial passes: its share of the prefill, then one pass per level.

        Pass j of a shape feeds each decoding sequence that level's nodes (1 for the root,
        then k1, k1·k2, ...) after the nodes fed before it, as ``hardware.draft`` prices it.
        With one draft replica the prefill chunks ride along in the first pass and the sums
        are formed here; with several (a draft on each of the target's GPUs, sequences split
        round robin) ``hardware.draft`` prices the levels and the prefill is one extra pass.
        """
        cost, replicas = self.draft.cost, self.draft.replicas
        feeds = draft_feeds(row) if n_dec else []
        p_new, p_ctx, p_new_ctx, p_sq = pre_sums
        if replicas > 1:
            from hardware.draft import tree_draft_seconds

            total = tree_draft_seconds(self.draft, row[row > 0].tolist(), dec_context) \
                if feeds else 0.0
            if p_new:
                total += cost.pass_seconds_sums(p_new, p_ctx, p_new_ctx, p_sq, n_seqs=n_pre)
            return total
        if not feeds:
            return cost.pass_seconds_sums(p_new, p_ctx, p_new_ctx, p_sq, n_seqs=n_pre) \
                if p_new else 0.0
        tree = tree_key_term(row) is not None
        total, before = 0.0, 0
        for j, f in enumerate(feeds):
            ctx = s_ctx + n_dec * before  # KV read: contexts and every node fed before
            s_new, s_c, s_nc, s_sq = n_dec * f, ctx, f * ctx, n_dec * f * f
            # a tree's level-j nodes attend their context, j ancestors and themselves
            keys = f * (s_ctx + n_dec * (j + 1)) if tree else None
            n = n_dec
            if j == 0:
                n += n_pre
                s_new, s_c, s_nc, s_sq = s_new + p_new, s_c + p_ctx, s_nc + p_new_ctx, s_sq + p_sq
                if tree:
                    keys += p_new_ctx + 0.5 * (p_sq + p_new)
            total += cost.pass_seconds_sums(s_new, s_c, s_nc, s_sq, sum_keys=keys, n_seqs=n)
            before += f
        return total

    def _per_sequence(self, widths, dec_context, pre_context, pre_chunks, bound, stages=False):
        """The general path: a shape per decoding sequence (widths int64 [D, m]).

        Verify: 1 + that sequence's nodes each. Draft: pass j feeds each sequence that has a
        level j its level j−1 nodes; sequences with shallower shapes drop out of later
        passes. Returns what ``price`` (or, with ``stages``, ``price_stages``) returns.
        """
        sizes = np.cumprod(widths, axis=1)  # [D, m] nodes per level
        new = np.concatenate((1 + sizes.sum(axis=1), pre_chunks))  # [D + P]
        ctx = np.concatenate((dec_context, pre_context))  # [D + P]
        keys = None
        if (widths > 1).any():  # trees: each node attends its context, ancestors and itself
            tri = 1 + (sizes * np.arange(2, widths.shape[1] + 2)).sum(axis=1)  # [D]
            keys = np.concatenate((new[: len(dec_context)] * dec_context + tri,
                                   _causal_keys(pre_chunks, pre_context)))  # [D + P]
        label, cost = "", None
        if stages or (self.record_bound if bound is None else bound):
            cost = self.target.pass_cost(new, ctx, keys)
            label = str(cost.bound)
        verify_s = float(cost.seconds) if cost is not None else \
            self.target.pass_seconds(new, ctx, keys)
        draft_s = 0.0
        if self.draft is not None:
            draft_s = self._draft_per_sequence(widths, sizes, dec_context, pre_context,
                                               pre_chunks)
        return (draft_s, cost) if stages else (draft_s, verify_s, label)

    def _draft_per_sequence(self, widths, sizes, dec_context, pre_context, pre_chunks):
        dcost = self.draft.cost
        has = widths > 0  # [D, m]
        feed = np.zeros_like(widths)  # [D, m]: tokens pass j feeds per sequence
        feed[:, 0] = has[:, 0]
        feed[:, 1:] = sizes[:, :-1] * has[:, 1:]
        if self.draft.replicas > 1:
            from hardware.draft import chain_draft_seconds

            if (widths > 1).any():
                raise ValueError("per-sequence trees with several draft replicas: chains only")
            total = chain_draft_seconds(self.draft, has.sum(axis=1), dec_context)
            if len(pre_chunks):
                total += dcost.pass_seconds(pre_chunks, pre_context)
            return total
        before = np.cumsum(feed, axis=1) - feed  # [D, m]: nodes fed before pass j
        tree = bool((widths > 1).any())
        total = 0.0
        for j in range(max(widths.shape[1], 1)):
            keys = None
            if widths.shape[1]:
                live = feed[:, j] > 0
                new_j, ctx_j = feed[live, j], dec_context[live] + before[live, j]
                if tree:  # level-j nodes attend their context, j ancestors and themselves
                    keys = new_j * (dec_context[live] + j + 1.0)
            else:
                new_j = ctx_j = np.zeros(0, dtype=np.int64)
            if j == 0 and len(pre_chunks):
                new_j = np.concatenate((new_j, pre_chunks))
                ctx_j = np.concatenate((ctx_j, pre_context))
                if keys is not None:
                    keys = np.concatenate((keys, _causal_keys(pre_chunks, pre_context)))
            if len(new_j):
                total += dcost.pass_seconds(new_j, ctx_j, keys)
        return total
