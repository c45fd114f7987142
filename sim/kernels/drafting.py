"""The draft's passes of one iteration, and the adaptive policy's choice, as the compiled
walk prices them: ``sim.draft_pricing.draft_passes`` (which passes run, each
``hardware.cost.batch_pass``) priced by ``base.pass_seconds``, combined by its
``draft_total``; with a chain per sequence, ``per_sequence_seconds``' passes
(``chain_rows_seconds``); the choice ``sim.policies.best_chain`` over
``IterationPricer.decode_chain_seconds``' sums, then the trees widened at the root that
``AdaptiveGamma.shape`` tries (``sim.policies.tree_tokens`` over ``IterationPricer.price``'s
seconds of each: ``tree_seconds``)."""

from __future__ import annotations

from hardware.cost import batch_pass, verify_pass
from hardware.spec_cost import round_seconds
from sim.draft_pricing import (
    KEYS,
    KV,
    NEW,
    SECONDS,
    SEQS,
    chain_rows_passes,
    draft_passes,
    draft_prefix,
    draft_total,
)
from sim.kernels.base import FILLED, TARGET, pass_seconds
from sim.kernels.base import KV as KV_COLUMN
from sim.policies import best_chain, tree_tokens


def draft_seconds(n_dec, n_pre, s_ctx, p_new, p_ctx, p_new_ctx, p_sq, feeds, tri, reps,
                  one_pass, group_n, group_ctx, dp, passes):
    """``sim.draft_pricing.shared_shape_seconds`` of one iteration: every decoding sequence
    drafts the shape whose serial passes feed ``feeds`` tokens each (``tri`` >= 0: a tree),
    beside ``n_pre`` prefill chunks with their sums; ``reps`` draft replicas, group g
    holding ``group_n[g]`` sequences with ``group_ctx[g]`` context; ``one_pass``: Medusa's
    heads. With no levels each draft ingests its sequence's new token (vLLM v1 drafts
    every step). ``passes``: scratch rows for ``draft_passes``."""
    k = draft_passes(passes, n_dec, s_ctx, feeds, tri >= 0.0, 1, reps, group_n, group_ctx,
                     one_pass, n_pre, p_new, p_ctx, p_new_ctx, p_sq)
    _price(passes, k, dp)
    return draft_total(passes, k)


def chain_rows_seconds(n_dec, s_ctx, n_pre, p_new, p_ctx, p_new_ctx, p_sq, levels_n,
                       levels_ctx, depth, n_idle, c_idle, reps, dp, passes):
    """``sim.draft_pricing.per_sequence_seconds`` of one iteration in which each decoding
    sequence drafts a chain of its own γ: the passes ``sim.draft_pricing.chain_rows_passes``
    lists (the reference pricer's, the same function), priced on the draft's timing
    ``dp`` and combined by ``draft_total``. ``passes``: scratch rows
    (``passes_capacity``)."""
    k = chain_rows_passes(passes, n_dec, s_ctx, n_pre, p_new, p_ctx, p_new_ctx, p_sq,
                          levels_n, levels_ctx, depth, n_idle, c_idle, reps)
    _price(passes, k, dp)
    return draft_total(passes, k)


def _price(passes, k, dp):
    """Each of the first ``k`` rows' seconds on the draft's timing ``dp``."""
    for i in range(k):
        passes[i, SECONDS], _ = pass_seconds(passes[i, NEW], passes[i, KV], passes[i, KEYS],
                                             passes[i, SEQS], dp, False)


def adaptive_gamma(st, order, n_alive, alpha, max_g, width, reps, one_pass, group_n,
                   group_ctx, tp, dp, sp, passes, ones, seconds, feeds):
    """``sim.policies.AdaptiveGamma.shape`` over every decoding row (the scheduler asks
    the policy before its budget walk): (γ, k), the shape ⟨k, 1, …, 1⟩ γ levels deep (k
    = 1: the chain γ). First ``best_chain`` of the seconds
    ``IterationPricer.decode_chain_seconds`` gives each chain γ in 0..``max_g`` -- the
    draft passes of the deepest chain (``ones``: its feeds) summed by ``draft_prefix``,
    the engine's speculative overheads ``sp``, the verify -- into ``seconds``; then, with
    ``width`` > 1 (``max_width``) and γ > 0, each tree k = 2..``width`` in turn, taken
    where its ``tree_tokens`` per second beat the best so far (``tree_seconds``; ``feeds``:
    scratch for its feeds)."""
    nd, sc = 0, 0
    group_n[:] = 0
    group_ctx[:] = 0
    for o in range(n_alive):
        i = order[o]
        if st[i, TARGET] == st[i, FILLED]:
            if reps > 1:
                group_n[nd % reps] += 1
                group_ctx[nd % reps] += st[i, KV_COLUMN]
            nd += 1
            sc += st[i, KV_COLUMN]
    if nd == 0:
        return 0, 1
    k = draft_passes(passes, nd, sc, ones[:max_g], False, 0, reps, group_n, group_ctx,
                     one_pass, 0, 0.0, 0.0, 0.0, 0.0)
    _price(passes, k, dp)
    draft_prefix(passes, k, seconds)
    for g in range(max_g + 1):
        new, kv, keys, n = batch_pass(1 + g, 0, 0, sc, nd, False, 0.0, 0.0, 0.0, 0.0, 0)
        verify, _ = pass_seconds(new, kv, keys, n, tp, False)
        extra = round_seconds(sp, nd, 1 if one_pass else g, False) if g else 0.0
        seconds[g] = seconds[g] + extra + verify
    g, best_rate = best_chain(nd, alpha, seconds)
    best = 1
    if g > 0:
        for w in range(2, width + 1):
            rate = nd * tree_tokens(alpha, w, g) / tree_seconds(
                nd, sc, w, g, reps, one_pass, group_n, group_ctx, tp, dp, sp, passes, feeds)
            if rate > best_rate:
                best, best_rate = w, rate
    return g, best


def root_tree(k, depth, feeds):
    """The tree ⟨k, 1, …, 1⟩ ``depth`` levels deep (k > 1): its feeds into ``feeds[:depth]``
    (``sim.shapes.draft_feeds``: the root, then k nodes a level) and its
    ``sim.shapes.tree_key_term`` (Σ_l n_l·(l + 1): 1 for the root, k for each level)."""
    term = 1
    feeds[0] = 1
    for j in range(1, depth):
        feeds[j] = k
    for j in range(1, depth + 1):
        term += k * (j + 1)
    return float(term)


def tree_seconds(nd, sc, k, depth, reps, one_pass, group_n, group_ctx, tp, dp, sp, passes,
                 feeds):
    """``Replica._price_decode`` of the tree ⟨k, 1, …, 1⟩ ``depth`` levels deep (k > 1) for
    ``nd`` decoding rows of ``sc`` context and nothing else (``IterationPricer.price``,
    ``bound=False``): the draft's passes (``draft_seconds``, the groups ``group_n``,
    ``group_ctx`` of the draft replicas), the engine's speculative overheads for a tree,
    the target's verify of 1 + k·depth tokens a row under the tree mask. ``feeds``: scratch
    (``root_tree``)."""
    tri = root_tree(k, depth, feeds)
    verify = 1 + k * depth
    new, kv, keys, n = verify_pass(verify, tri, sc, nd, 0.0, 0.0, 0.0, 0.0, 0)
    v, _ = pass_seconds(new, kv, keys, n, tp, False)
    d = draft_seconds(nd, 0, sc, 0.0, 0.0, 0.0, 0.0, feeds[:depth], tri, reps, one_pass,
                      group_n, group_ctx, dp, passes)
    d += round_seconds(sp, nd, 1 if one_pass else depth, True)
    return d + v
