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
    _row,
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
    """``sim.draft_pricing.per_sequence_seconds`` of one iteration in which each of the
    ``n_dec`` decoding sequences (``s_ctx`` context in all) drafts a chain of its own γ,
    at least one γ > 0 and the deepest ``depth``, every sequence at γ = 0 ingesting its
    new token (``draft_sync: every_step``; ``n_idle`` of them, ``c_idle`` context),
    beside ``n_pre`` prefill chunks with their sums. ``levels_n[g, j]``,
    ``levels_ctx[g, j]``: the sequences of draft replica g (split round robin) whose γ
    is past j, and their context. Its passes are ``per_sequence_seconds``':

    - one draft replica: pass 0 feeds every sequence one token (its root, or the token a
      γ = 0 sequence ingests) with the prefill chunks; pass j > 0 one token to each
      sequence whose γ is past j, after the j it fed before (the shallower drop out);
    - ``reps`` > 1: ``hardware.draft.chain_draft_seconds`` (each replica's passes, as
      above without the ingest and the chunks; the slowest replica), then the ingest of
      the γ = 0 sequences and the chunks, each a pass of its own (GROUP -1).

    (Medusa's heads run one pass whatever the shapes: ``draft_seconds`` prices it.)
    ``passes``: scratch rows (``passes_capacity``), priced on the draft's timing ``dp``
    and combined by ``draft_total``."""
    if reps > 1:
        k = 0
        for g in range(reps):
            for j in range(depth):
                if levels_n[g, j] == 0:
                    break
                k = _row(passes, k, batch_pass(1, j, j, levels_ctx[g, j], levels_n[g, j],
                                               False, 0.0, 0.0, 0.0, 0.0, 0), g, j)
        if n_idle > 0:  # the γ = 0 sequences' new tokens
            k = _row(passes, k, batch_pass(1, 0, 0, c_idle, n_idle, False, 0.0, 0.0, 0.0,
                                           0.0, 0), -1, 0)
        if n_pre > 0:
            k = _row(passes, k, batch_pass(0, 0, 0, 0.0, 0, False, p_new, p_ctx, p_new_ctx,
                                           p_sq, n_pre), -1, 0)
    else:
        k = _row(passes, 0, batch_pass(1, 0, 0, s_ctx, n_dec, False, p_new, p_ctx, p_new_ctx,
                                       p_sq, n_pre), 0, 0)
        for j in range(1, depth):
            k = _row(passes, k, batch_pass(1, j, j, levels_ctx[0, j], levels_n[0, j], False,
                                           0.0, 0.0, 0.0, 0.0, 0), 0, j)
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
