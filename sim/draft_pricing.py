"""The draft's serial passes of one iteration, priced by its cost model.

The draft is autoregressive: a chain of γ needs γ serial passes and an expansion tree
⟨k1..km⟩ needs m, pass j feeding every decoding sequence that level's nodes (1 for the
root, then k1, k1·k2, ...) after the nodes fed before it (lecture §3.1, §6.2). The first
pass also carries the draft's share of the prefill chunks, so its KV exists when a
sequence starts decoding, and the tokens a sequence's draft still has to ingest (``sync``:
the draft keeping up with iterations it did not draft for, see ``sim.step``). A tree's
level-j nodes attend their context, j ancestors and themselves (the tree mask).

``draft`` is a ``hardware.draft.DraftSetup``: with one replica the sums are formed here;
with several (a draft on each of the target's GPUs, sequences split round robin)
``hardware.draft`` prices the levels and the prefill is one extra pass.

A ``one_pass`` drafter (Medusa's heads) is not autoregressive: when any decoding sequence
speculates, its heads run once on the last hidden state of every sequence in the batch
(vLLM's Medusa proposer takes one row per scheduled request, vllm/v1/spec_decode/medusa.py)
and propose every position of any chain or tree; it keeps no KV, so it ingests nothing.
"""

from __future__ import annotations

import numpy as np

from sim.shapes import causal_keys, draft_feeds, tree_key_term

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce


def prefill_sums(pre_context: np.ndarray, pre_chunks: np.ndarray) -> tuple:
    """(Σ new, Σ ctx, Σ new·ctx, Σ new²) of the prefill chunks."""
    if not len(pre_chunks):
        return 0.0, 0.0, 0.0, 0.0
    c = pre_chunks.astype(np.float64)
    return float(_sum(c)), float(_sum(pre_context)), float(c @ pre_context), float(c @ c)


def shared_shape_seconds(draft, row: np.ndarray, dec_context: np.ndarray, pre_sums: tuple,
                         n_pre: int, sync: int | None = None,
                         s_ctx: float | None = None) -> float:
    """Seconds of the draft passes when every decoding sequence has shape ``row`` (1-D).

    ``sync``: tokens each decoding sequence's draft ingests in the first pass besides its
    root (only for a shape with no levels: every sequence keeps its draft's KV in step);
    ``s_ctx``: float(Σ dec_context), when the caller has it.
    """
    cost, n_dec = draft.cost, len(dec_context)
    if draft.one_pass:
        from hardware.draft import one_pass_seconds

        speculating = bool(n_dec and row.size and row[0] > 0)
        return one_pass_seconds(draft, n_dec + n_pre) if speculating else 0.0
    feeds = draft_feeds(row) if n_dec else []
    p_new, p_ctx, p_new_ctx, p_sq = pre_sums
    if s_ctx is None:
        s_ctx = float(_sum(dec_context))
    extra = (sync or 0) if n_dec else 0
    if draft.replicas > 1:
        from hardware.draft import tree_draft_seconds

        total = tree_draft_seconds(draft, row[row > 0].tolist(), dec_context) \
            if feeds else 0.0
        if extra:  # one more pass: each sequence's missed tokens
            total += cost.pass_seconds(np.full(n_dec, extra), dec_context)
        if p_new:
            total += cost.pass_seconds_sums(p_new, p_ctx, p_new_ctx, p_sq, n_seqs=n_pre)
        return total
    if not feeds:
        if extra:  # the draft ingests each sequence's new tokens, with the prefill
            return cost.pass_seconds_sums(n_dec * extra + p_new, s_ctx + p_ctx,
                                          extra * s_ctx + p_new_ctx,
                                          n_dec * extra * extra + p_sq, n_seqs=n_dec + n_pre)
        return cost.pass_seconds_sums(p_new, p_ctx, p_new_ctx, p_sq, n_seqs=n_pre) \
            if p_new else 0.0
    total = 0.0
    for t in _level_seconds(cost, feeds, tree_key_term(row) is not None, s_ctx, n_dec,
                            pre_sums, n_pre):
        total += t
    return total


def _level_seconds(cost, feeds: list[int], tree: bool, s_ctx: float, n_dec: int,
                   pre_sums: tuple, n_pre: int):
    """Yield the seconds of each serial draft pass of one replica, root first."""
    p_new, p_ctx, p_new_ctx, p_sq = pre_sums
    before = 0
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
        yield cost.pass_seconds_sums(s_new, s_c, s_nc, s_sq, sum_keys=keys, n_seqs=n)
        before += f


def chain_prefix_seconds(draft, depth: int, dec_context: np.ndarray) -> list[float]:
    """[``shared_shape_seconds`` of ``chain(γ, depth)`` for γ = 0..depth] for decoding
    sequences alone (no prefill, nothing to ingest): each the running sum of the deepest
    chain's passes, in the order that function adds them, so the very same floats (the
    adaptive policy prices every γ of an iteration with one chain's passes)."""
    n_dec = len(dec_context)
    if not n_dec or not depth:
        return [0.0] * (depth + 1)
    if draft.one_pass:
        from hardware.draft import one_pass_seconds

        return [0.0] + [one_pass_seconds(draft, n_dec)] * depth
    if draft.replicas > 1:
        from hardware.draft import tree_draft_prefix_seconds

        return tree_draft_prefix_seconds(draft, [1] * depth, dec_context)
    out, total = [0.0], 0.0
    for t in _level_seconds(draft.cost, [1] * depth, False, float(_sum(dec_context)), n_dec,
                            (0.0, 0.0, 0.0, 0.0), 0):
        total += t
        out.append(total)
    return out


def per_sequence_seconds(draft, widths: np.ndarray, dec_context: np.ndarray,
                         pre_context: np.ndarray, pre_chunks: np.ndarray,
                         sync: np.ndarray | None = None) -> float:
    """Seconds of the draft passes with a shape per decoding sequence (widths [D, m]):
    sequences with shallower shapes drop out of later passes; ``sync`` int64 [D] adds the
    tokens each sequence's draft ingests in the first pass."""
    dcost = draft.cost
    if draft.one_pass:
        from hardware.draft import one_pass_seconds

        speculating = bool(widths.size and (widths[:, 0] > 0).any())
        return one_pass_seconds(draft, len(dec_context) + len(pre_chunks)) \
            if speculating else 0.0
    if widths.shape[1] == 0:  # no levels at all: at most the ingest pass
        widths = np.zeros((len(dec_context), 1), dtype=np.int64)
    from hardware.draft import level_feeds

    feed = level_feeds(widths)  # [D, m]: tokens pass j feeds per sequence
    if sync is not None:
        feed[:, 0] += sync
    if draft.replicas > 1:
        from hardware.draft import chain_draft_seconds, tree_rows_draft_seconds

        total = tree_rows_draft_seconds(draft, widths, dec_context) if (widths > 1).any() \
            else chain_draft_seconds(draft, (widths > 0).sum(axis=1), dec_context)
        if sync is not None and (sync > 0).any():
            total += dcost.pass_seconds(sync[sync > 0], dec_context[sync > 0])
        if len(pre_chunks):
            total += dcost.pass_seconds(pre_chunks, pre_context)
        return total
    before = np.cumsum(feed, axis=1) - feed  # [D, m]: nodes fed before pass j
    tree = bool((widths > 1).any())
    total = 0.0
    for j in range(widths.shape[1]):
        live = feed[:, j] > 0
        new_j, ctx_j = feed[live, j], dec_context[live] + before[live, j]
        # level-j nodes attend their context, j ancestors and themselves
        keys = new_j * (dec_context[live] + j + 1.0) if tree else None
        if j == 0 and len(pre_chunks):
            new_j = np.concatenate((new_j, pre_chunks))
            ctx_j = np.concatenate((ctx_j, pre_context))
            if keys is not None:
                keys = np.concatenate((keys, causal_keys(pre_chunks, pre_context)))
        if len(new_j):
            total += dcost.pass_seconds(new_j, ctx_j, keys)
    return total


def one_level_deeper(widths: np.ndarray) -> np.ndarray:
    """int64 [D, m + 1]: each speculating chain extended by one guess (the draft drafting
    past its last guess while the verify runs)."""
    depth = (widths > 0).sum(axis=1)  # [D]
    out = np.concatenate((widths, np.zeros((len(widths), 1), dtype=np.int64)), axis=1)
    out[np.arange(len(widths)), depth] = depth > 0
    return out
