"""The draft's passes of one iteration, and the adaptive policy's choice, as the compiled
walk prices them (``sim.draft_pricing``, ``sim.policies.AdaptiveGamma``)."""

from __future__ import annotations

import numpy as np

from hardware.spec_cost import round_seconds
from sim.kernels.base import FILLED, KV, TARGET, pass_seconds


def draft_seconds(n_dec, n_pre, s_ctx, p_new, p_ctx, p_new_ctx, p_sq, feeds, tri, reps,
                   one_pass, group_n, group_ctx, dp):
    """``sim.draft_pricing.shared_shape_seconds`` of one iteration: every decoding sequence
    drafts the shape whose serial passes feed ``feeds`` tokens each (``tri`` >= 0: a tree),
    ``n_pre`` prefill chunks with their sums. One draft replica: the chunks ride in the
    first pass. ``reps`` > 1 (``hardware.draft.tree_draft_seconds``): sequences split round
    robin, group g holding ``group_n[g]`` of them with ``group_ctx[g]`` context, the
    slowest group's passes, then the chunks in a pass of their own. ``one_pass`` (Medusa's
    heads): one pass over every row, split over the replicas (``one_pass_seconds``)."""
    if one_pass:
        if n_dec == 0 or len(feeds) == 0:
            return 0.0
        rows = -(-(n_dec + n_pre) // reps)
        d, _ = pass_seconds(float(rows), 0.0 + rows, 0.0, float(rows), dp, False)
        return d
    causal_pre = float(p_new_ctx) + 0.5 * float(p_sq + p_new)  # the chunks' causal keys
    if n_dec == 0:
        if not p_new:
            return 0.0
        d, _ = pass_seconds(float(p_new), float(p_ctx + p_new), causal_pre, float(n_pre), dp,
                            False)
        return d
    d = 0.0
    if len(feeds) == 0:  # no guesses: each draft ingests its sequence's new token
        if reps > 1:  # (vLLM v1 drafts every step; draft_sync every_step) in one pass
            d, _ = pass_seconds(float(n_dec), float(s_ctx + n_dec),
                                float(s_ctx) + 0.5 * (2 * n_dec), float(n_dec), dp, False)
            if p_new:
                dj, _ = pass_seconds(float(p_new), float(p_ctx + p_new), causal_pre,
                                     float(n_pre), dp, False)
                d += dj
            return d
        new = n_dec + p_new  # with the prefill chunks
        d, _ = pass_seconds(float(new), float(s_ctx + p_ctx + new),
                            float(s_ctx + p_new_ctx) + 0.5 * float(n_dec + p_sq + new),
                            float(n_dec + n_pre), dp, False)
        return d
    if reps > 1:
        for g in range(reps):
            b = group_n[g]
            if b == 0:
                break
            total = 0.0
            before = 0
            for j in range(len(feeds)):
                fj = feeds[j]
                dj, _ = pass_seconds(float(b * fj), float(group_ctx[g] + b * before + b * fj),
                                     float(fj * (group_ctx[g] + b * (j + 1))), float(b), dp,
                                     False)
                total += dj
                before += fj
            if total > d:
                d = total
        if p_new:
            dj, _ = pass_seconds(float(p_new), float(p_ctx + p_new), causal_pre, float(n_pre),
                                 dp, False)
            d += dj
        return d
    before = 0
    for j in range(len(feeds)):
        fj = feeds[j]
        ctx = s_ctx + n_dec * before
        s_new, s_c, s_nc, s_sq = n_dec * fj, ctx, fj * ctx, n_dec * fj * fj
        m = n_dec
        if j == 0:
            m += n_pre
            s_new += p_new
            s_c += p_ctx
            s_nc += p_new_ctx
            s_sq += p_sq
        if tri < 0.0:
            dk = float(s_nc) + 0.5 * float(s_sq + s_new)
        else:
            dk = float(fj * (s_ctx + n_dec * (j + 1)))
            if j == 0:
                dk += causal_pre
        dj, _ = pass_seconds(float(s_new), float(s_c + s_new), dk, float(m), dp, False)
        d += dj
        before += fj
    return d


def adaptive_gamma(st, order, n_alive, alpha, max_g, reps, one_pass, group_n, group_ctx,
                    tp, dp, sp):
    """``sim.policies.AdaptiveGamma.shape`` for chains (its ``price_chains``:
    ``IterationPricer.decode_chain_seconds``, the engine's speculative overheads ``sp``
    included): over every decoding row (the scheduler asks the policy before its budget
    walk), the chain γ in 0..``max_g`` with the most expected tokens per second,
    D·E(α̂, γ) / seconds, the first on a tie."""
    nd, sc = 0, 0
    group_n[:] = 0
    group_ctx[:] = 0
    for o in range(n_alive):
        i = order[o]
        if st[i, TARGET] == st[i, FILLED]:
            if reps > 1:
                group_n[nd % reps] += 1
                group_ctx[nd % reps] += st[i, KV]
            nd += 1
            sc += st[i, KV]
    if nd == 0:
        return 0
    draft = np.zeros(max_g + 1)  # draft_pricing.chain_prefix_seconds
    if one_pass:
        rows = -(-nd // reps)
        one, _ = pass_seconds(float(rows), 0.0 + rows, 0.0, float(rows), dp, False)
        draft[1:] = one
    elif reps > 1:  # hardware.draft.tree_draft_prefix_seconds of a chain
        for g in range(reps):
            b = group_n[g]
            if b == 0:
                break
            total = 0.0
            for j in range(max_g):
                dj, _ = pass_seconds(float(b), float(group_ctx[g] + b * j + b),
                                     float(group_ctx[g] + b * (j + 1)), float(b), dp, False)
                total += dj
                if total > draft[j + 1]:
                    draft[j + 1] = total
    else:
        total = 0.0
        for j in range(max_g):
            ctx = sc + nd * j
            dj, _ = pass_seconds(float(nd), float(ctx + nd), float(ctx) + 0.5 * float(nd + nd),
                                 float(nd), dp, False)
            total += dj
            draft[j + 1] = total
    best, best_rate, expected = 0, -1.0, 1.0  # policies.chain_expectations, term by term
    for g in range(max_g + 1):
        if g:
            expected = 1.0 + alpha * expected
        v = 1 + g
        new = nd * v
        keys = float(v * sc) + 0.5 * float(nd * v * v + new)
        seconds, _ = pass_seconds(float(new), float(sc + new), keys, float(nd), tp, False)
        extra = round_seconds(sp, nd, 1 if one_pass else g, False) if g else 0.0
        rate = nd * expected / (draft[g] + extra + seconds)
        if rate > best_rate:
            best, best_rate = g, rate
    return best
