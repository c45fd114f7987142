"""The draft's passes of one iteration, and the adaptive policy's choice, as the compiled
walk prices them: ``sim.draft_pricing.draft_passes`` (which passes run, each
``hardware.cost.batch_pass``) priced by ``base.pass_seconds``, combined by its
``draft_total``; with a chain per sequence, ``per_sequence_seconds``' passes
(``chain_rows_seconds``); the choice ``sim.policies.best_chain`` over
``IterationPricer.decode_chain_seconds``' sums."""

from __future__ import annotations

from hardware.cost import batch_pass
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
from sim.policies import best_chain


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


def adaptive_gamma(st, order, n_alive, alpha, max_g, reps, one_pass, group_n, group_ctx,
                   tp, dp, sp, passes, ones, seconds):
    """``sim.policies.AdaptiveGamma.shape`` for chains: over every decoding row (the
    scheduler asks the policy before its budget walk), ``best_chain`` of the seconds
    ``IterationPricer.decode_chain_seconds`` gives each chain γ in 0..``max_g`` -- the
    draft passes of the deepest chain (``ones``: its feeds) summed by ``draft_prefix``,
    the engine's speculative overheads ``sp``, the verify -- into ``seconds``."""
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
        return 0
    k = draft_passes(passes, nd, sc, ones[:max_g], False, 0, reps, group_n, group_ctx,
                     one_pass, 0, 0.0, 0.0, 0.0, 0.0)
    _price(passes, k, dp)
    draft_prefix(passes, k, seconds)
    for g in range(max_g + 1):
        new, kv, keys, n = batch_pass(1 + g, 0, 0, sc, nd, False, 0.0, 0.0, 0.0, 0.0, 0)
        verify, _ = pass_seconds(new, kv, keys, n, tp, False)
        extra = round_seconds(sp, nd, 1 if one_pass else g, False) if g else 0.0
        seconds[g] = seconds[g] + extra + verify
    return best_chain(nd, alpha, seconds)[0]
