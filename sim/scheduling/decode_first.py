"""``decode_first``: vLLM v0's chunked-prefill order (``--scheduler order: decode_first``).

Per iteration:

1. running sequences that are decoding, oldest request first, each with its verify tokens
   (the last token plus the policy's guesses or tree nodes), while they fit the token
   budget; a decoder whose verify does not fit is left out whole (not truncated);
2. running sequences still prefilling, oldest first, one chunk each (the whole remaining
   prompt without chunked prefill, which must then fit the budget whole);
3. KV blocks for all of them, decoders with ``lookahead`` extra slots for the next
   verify (v0's ``num_lookahead_slots``); when the pool runs dry, the latest-arrived
   running sequence is preempted by recompute, repeatedly (``preempt_until_fits``);
4. new admissions from the waiting queue, first come first served, while there is a free
   slot, token budget and free blocks for the first chunk -- also in an iteration that
   preempted (vLLM v1 does not admit then; see ``sim.scheduling.vllm_v1``).
"""

from __future__ import annotations

import numpy as np

from sim.kernels.rules import grant
from sim.scheduling.common import (
    HISTORY,
    NONE,
    Batch,
    SchedulerLimits,
    admit_waiting,
    budgeted_chunks,
    cache_prefills,
    preempt_until_fits,
)
from sim.shapes import tree_nodes
from sim.slots import BLOCKS, FILLED, KV, TARGET

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce
_any = np.logical_or.reduce


def plan_decode_first(r) -> Batch:
    """Form the next batch of replica ``r`` (mutates its KV pool, slots and queue)."""
    lim: SchedulerLimits = r.limits
    # (ndarray methods: the np.* wrappers cost ~1 µs a call on this hot path)
    act = r.schedulable().nonzero()[0]  # running and not in flight in a pipeline
    if len(act) > 1:
        act = act[r.rid[act].argsort(kind="stable")]  # oldest request first
    st = r.state[act]  # [A, N_COLS]
    ctx = st[:, KV]  # [A]
    left = st[:, TARGET] - st[:, FILLED]  # [A]: prompt tokens still to prefill
    if not _any(left):
        dec, dctx, dhist, pre, pctx, left = act, ctx, st[:, HISTORY], NONE, NONE, NONE
    else:
        decoding = left == 0
        dec, dctx, dhist = act[decoding], ctx[decoding], st[decoding][:, HISTORY]
        pre, pctx, left = act[~decoding], ctx[~decoding], left[~decoding]

    # 1. decoders and their draft shapes, while their verify tokens fit the budget.
    row = r.draft_shapes(dec, dctx, dhist)  # [m] for all, or [D, m] per sequence
    if row.ndim == 1:
        verify = 1 + tree_nodes(row)
        if len(dec) * verify > lim.max_batched_tokens:
            keep = lim.max_batched_tokens // verify
            dec, dctx = dec[:keep], dctx[:keep]
        budget = lim.max_batched_tokens - len(dec) * verify
    else:
        verify = 1 + np.cumprod(row, axis=1).sum(axis=1)  # [D]
        fits = verify.cumsum() <= lim.max_batched_tokens  # a prefix, oldest first
        if not fits.all():
            dec, dctx, row, verify = dec[fits], dctx[fits], row[fits], verify[fits]
        budget = lim.max_batched_tokens - int(_sum(verify))

    # 2. prefill chunks of running sequences.
    chunks = NONE
    if len(pre):
        chunks = budgeted_chunks(left, lim, budget)
        go = chunks > 0
        pre, pctx, chunks = pre[go], pctx[go], chunks[go]
        budget -= int(_sum(chunks))

    # 3. KV blocks (decoders: the verify plus lookahead slots), preempting the latest
    # arrivals when the pool runs dry.
    dtok = dctx + (verify + r.lookahead)
    if len(pre):
        slots = np.concatenate((dec, pre))
        tokens = np.concatenate((dtok, pctx + chunks))
    else:
        slots, tokens = dec, dtok
    # blocks held: from the gathered rows when the batch is exactly the running set
    held = st[:, BLOCKS] if slots is act else r.kv.blocks[slots]
    extra = grant(tokens, 0, 0, held, lim.block_size)
    preempted = int(_sum(extra)) > r.kv.free_blocks
    if preempted:
        keep = preempt_until_fits(r, r.running_order(act), slots, extra)
        kd, kp = np.isin(dec, keep), np.isin(pre, keep)
        dec, dctx, pre, pctx, chunks = dec[kd], dctx[kd], pre[kp], pctx[kp], chunks[kp]
        if row.ndim == 2:
            row, verify = row[kd], verify[kd]
        budget = (lim.max_batched_tokens - int(_sum(np.broadcast_to(verify, dec.shape)))
                  - int(_sum(chunks)))
        slots = np.concatenate((dec, pre))
        tokens = np.concatenate((dctx + (verify + r.lookahead), pctx + chunks))
        held = r.kv.blocks[slots]
        extra = grant(tokens, 0, 0, held, lim.block_size)
    r.kv.grant(slots, held, extra)
    cache_prefills(r, pre, pctx, chunks)

    # 4. admissions, first come first served (context: what the prefix cache held, or 0).
    if (r.waiting or r.loaded) and budget > 0 and r.n_active < lim.max_num_seqs:
        new_pre, new_chunks, new_ctx, _ = admit_waiting(r, lim, budget)
        if len(new_pre):
            if len(pre):
                pre = np.concatenate((pre, new_pre))
                pctx = np.concatenate((pctx, new_ctx))
                chunks = np.concatenate((chunks, new_chunks))
            else:
                pre, pctx, chunks = new_pre, new_ctx, new_chunks
    return Batch(row, dec, dctx, pre, pctx, chunks, preempted)
