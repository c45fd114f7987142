"""``vllm_v1``: one token budget walked in ``running`` order, as vLLM v1's scheduler does
(``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``; the default order).

v1 has no decode phase and no prefill phase: each running request wants the tokens that
bring its computed tokens up to its tokens-with-speculation. Per iteration:

1. Walk the running requests in order (the order they entered ``running``: a request
   resumed after a preemption goes to the back). Each gets ``min(want, remaining
   budget)`` tokens: a decoder wants 1 + its draft tokens, and when the budget runs out
   mid-way **its draft tokens are cut to fit** (``spec_token_ids[:num_scheduled_spec_
   tokens]``; a tree keeps the whole levels that fit); a prefilling request wants the
   rest of its prompt, at most ``chunk_tokens`` (v1's ``long_prefill_token_threshold``).
   A request in flight in a pipeline wants nothing this iteration and is skipped.
2. KV blocks for each scheduled request: its tokens plus ``lookahead`` slots for the next
   verify (v1's ``num_lookahead_tokens`` = the draft's tokens per step). When a request
   cannot get them, the request at the back of ``running`` is preempted by recompute,
   repeatedly, possibly the request itself; then nothing behind it is scheduled.
3. Waiting requests are admitted (first come first served, while ``max_num_seqs``, the
   budget and the blocks for their first chunk last) **only if this iteration preempted
   nobody** (``if not preempted_reqs``). With prefix caching a request's cached leading
   blocks are found first and its prefill starts after them; the prompt blocks each
   scheduled chunk completes are cached as it is scheduled (``sim.prefix_cache``). In
   0.33, with speculation, a request admitted with one token to compute is padded to a
   verify of 1 + K tokens whose K placeholder drafts are rejected (``rules.padding``).

Departures from vLLM: a request whose prefill chunk is in flight in a pipeline waits for
it (v1 may schedule its next chunk at once); a tree verify is cut by whole levels.
"""

from __future__ import annotations

import numpy as np

from sim.kernels import rules
from sim.scheduling.common import (
    HISTORY,
    NONE,
    Batch,
    admit_waiting,
    cache_prefills,
    preempt_until_fits,
    truncate_rows,
)
from sim.shapes import shape_info
from sim.slots import BLOCKS, FILLED, KV, TARGET

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce
_any = np.logical_or.reduce


def plan_vllm_v1(r) -> Batch:
    """Form the next batch of replica ``r`` (mutates its KV pool, slots and queue)."""
    lim = r.limits
    run = r.running_order()  # int64 [R]: every running slot, front of ``running`` first
    st = r.state[run]  # [R, N_COLS]
    left = st[:, TARGET] - st[:, FILLED]  # [R]: prompt tokens still to prefill
    ready = r.schedulable()[run]  # [R]: not in flight
    decoding = (left == 0) & ready
    prefilling = (left > 0) & ready
    d_idx = decoding.nonzero()[0]
    dec = run[d_idx]
    row = r.draft_shapes(dec, st[d_idx, KV], st[d_idx][:, HISTORY])  # [m] or [D, m]
    if row.ndim == 1:
        verify = np.int64(1 + shape_info(row)[1])  # memoised: policies reuse a few shapes
    else:
        verify = 1 + np.cumprod(row, axis=1).sum(axis=1)  # [D]

    # 1. the budget walk: take[i] = what running request i gets, in order, each at most
    # the step's cap (long_prefill_token_threshold, which cuts a verify too)
    # (vLLM's get_request_counts: the running, the waiting and kv_holding_waiting, the
    # requests holding blocks while their KV loads or once loaded, not yet admitted)
    cap = lim.cap(len(run) + len(r.waiting) + len(r.holding))
    if row.ndim == 1:
        want = rules.wanted(left, verify, cap) * ready
        capped = verify > cap
    else:  # a verify per decoder
        per_row = np.zeros(len(run), dtype=np.int64)
        per_row[d_idx] = verify
        want = rules.wanted(left, per_row, cap) * ready
        capped = False  # each decoder's shape is cut to its take below
    budget, slots = r.step_tokens, r.draft_slots  # slots: what a drafter takes beside
    cost = rules.spent(want, slots) if slots else want  # (no slots: spent is want)
    cut = int(_sum(cost)) > budget or capped
    if cut:  # the budget runs out part-way: what is left of it, in order
        take = rules.share(want, budget - (cost.cumsum() - cost), slots)  # [R]
    else:  # everyone gets what it wants
        take = want

    # 2. KV blocks: tokens + lookahead for every scheduled request
    go = take > 0
    extra = rules.grant(st[:, KV], take, r.lookahead, st[:, BLOCKS], lim.block_size) * go
    preempted = int(_sum(extra)) > r.kv.free_blocks
    if preempted:
        keep = preempt_until_fits(r, run, run[go], extra[go])
        go &= np.isin(run, keep)
        extra = np.where(go, extra, 0)
    sched = go.nonzero()[0]
    r.kv.grant(run[sched], st[sched, BLOCKS], extra[sched])

    # the batch: decoders (draft tokens cut where the budget cut them) and prefill chunks
    d_take = take[d_idx]  # [D]
    d_go = go[d_idx]
    if row.ndim == 1 and ((not cut and not preempted)
                          or (d_go.all() and (d_take == verify).all())):
        dec_slots, dec_ctx = dec, st[d_idx, KV]
    else:
        rows = np.broadcast_to(row, (len(dec), row.shape[-1])) if row.ndim == 1 else row
        rows = truncate_rows(rows[d_go], d_take[d_go] - 1)  # [D', m]
        dec_slots, dec_ctx = dec[d_go], st[d_idx[d_go], KV]
        row = rows if len(rows) == 0 or (rows != rows[0]).any() else rows[0]
    p = (prefilling & go).nonzero()[0]
    pre, pctx, chunks = run[p], st[p, KV], take[p]
    cache_prefills(r, pre, pctx, chunks)
    budget -= int(_sum(rules.spent(take[sched], slots) if slots else take[sched]))

    # 3. admissions, only when nobody was preempted (a one-token admission padded to a
    # verify: rules.padding)
    pads = NONE
    if not preempted and (r.waiting or r.loaded) and budget > slots \
            and r.n_active < lim.max_num_seqs:
        new_pre, new_chunks, new_ctx, new_pads = admit_waiting(
            r, lim, budget, cap=cap, pad=r.pad_tokens, scheduled=len(sched),
            prefilling=len(pre))
        if len(new_pre):
            if _any(new_pads):
                pads = np.concatenate((np.zeros(len(pre), dtype=np.int64), new_pads))
            pre = np.concatenate((pre, new_pre))
            pctx = np.concatenate((pctx, new_ctx))
            chunks = np.concatenate((chunks, new_chunks))
    if row.ndim == 2 and len(dec_slots) == 0:
        row = NONE
    return Batch(row, dec_slots, dec_ctx, pre, pctx, chunks, preempted, pads)
