"""``prefill_first``: SGLang's order (``--scheduler order: prefill_first``; what
``--from-sglang`` sets).

SGLang runs a prefill batch whenever it can form one, and the decode batch only when it
cannot (``python/sglang/srt/managers/scheduler.py``, ``Scheduler.get_next_batch_to_run``:
``new_batch = self.get_new_batch_prefill()``, and ``if new_batch is not None`` it runs
instead of ``update_running_batch``); prompts never share a pass with decodes
(``enable_mixed_chunk`` defaults to False, ``python/sglang/srt/server_args.py``). Per
iteration:

1. A prefill batch: the running requests still prefilling (a prompt chunked in an earlier
   pass), oldest first, then waiting requests, first come first served, while a slot
   (``max_num_seqs``, SGLang's ``max_running_requests``), the token budget and free blocks
   for their first chunk last. The budget is ``max_batched_tokens`` -- SGLang's
   ``chunked_prefill_size``, which bounds the tokens of a prefill batch, the last prompt
   in it cut to fill what is left (``PrefillAdder``'s ``rem_chunk_tokens``) -- and each
   prompt's chunk is at most ``chunk_tokens`` (set it to the budget for SGLang's rule).
   A waiting request is admitted only while the free blocks hold its whole prompt and its
   output (up to 4096 tokens) beside what the prompts under way still need and
   ``new_token_ratio`` of the output the running requests may still write (SGLang's
   ``PrefillAdder``, ``rem_total_tokens``; the ratio starts at 0.7, falls by 0.001 per
   decode step to 0.098, and after a preemption is re-estimated from the batch kept, as
   ``ScheduleBatch.retract_decode`` does), so a prompt once started finishes; the blocks
   of its first chunk are taken. KV blocks for the chunks of
   running requests are granted as in the other orders, preempting by recompute from the
   back of the running order when the pool runs dry.
2. If the prefill batch is empty (nothing waiting that fits, nothing mid-prompt): every
   running request decodes, each with its verify tokens (the last token plus the policy's
   guesses or tree nodes) and ``lookahead`` more KV slots. SGLang's decode batch has no
   token budget, so neither has this one. When the pool runs dry, the latest-arrived
   running sequence is preempted by recompute (``preempt_until_fits``), repeatedly.

Departures from SGLang: its decode batch retracts requests chosen by their remaining
output and prompt lengths (``ScheduleBatch.retract_decode``) where this one preempts the
latest arrival, and a decode batch that cannot get its blocks takes them from the
back of the running order where SGLang first lets the batch run with what fits;
``max_prefill_tokens`` (16384 by default, above the chunk budget on every GPU) is not
modelled; CUDA graphs (captured for decode batches up to ``cuda_graph_max_bs``) are not.
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
from sim.slots import EMITTED, FILLED, KV, OUTPUT, TARGET

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce

# SGLang's estimate of the output its running requests have still to write, as a share of
# what they may (github sgl-project/sglang python/sglang/srt/environ.py:
# SGLANG_INIT_NEW_TOKEN_RATIO 0.7, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14,
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600, SGLANG_RETRACT_DECODE_STEPS 20; each output
# estimate clipped to CLIP_MAX_NEW_TOKENS 4096, python/sglang/srt/managers/
# schedule_policy.py @00550cd11b35def9d584bf761a1e32729c20a21d)
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20
CLIP_MAX_NEW_TOKENS = 4096


def _grant(r, order: np.ndarray, slots: np.ndarray, tokens: np.ndarray,
           held: np.ndarray) -> np.ndarray | None:
    """Blocks for ``slots`` to hold ``tokens``, preempting from the back of ``order`` when
    the pool runs dry. Returns None when nobody was preempted, else bool [len(slots)]: the
    slots that got their blocks."""
    extra = grant(tokens, 0, 0, held, r.limits.block_size)
    if int(_sum(extra)) <= r.kv.free_blocks:
        r.kv.grant(slots, held, extra)
        return None
    keep = np.isin(slots, preempt_until_fits(r, order, slots, extra))
    slots, tokens = slots[keep], tokens[keep]
    held = r.kv.blocks[slots]
    r.kv.grant(slots, held, grant(tokens, 0, 0, held, r.limits.block_size))
    return keep


def _running(r) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The schedulable running slots oldest request first, their state rows and the
    prompt tokens each has still to prefill."""
    act = r.schedulable().nonzero()[0]  # running and not in flight in a pipeline
    if len(act) > 1:
        act = act[r.rid[act].argsort(kind="stable")]
    st = r.state[act]  # [A, N_COLS]
    return act, st, st[:, TARGET] - st[:, FILLED]


def plan_prefill_first(r) -> Batch:
    """Form the next batch of replica ``r`` (mutates its KV pool, slots and queue)."""
    lim: SchedulerLimits = r.limits
    act, st, left = _running(r)
    prefilling = left > 0
    preempted = False

    # 1. a prefill batch: prompts under way, then admissions.
    pre = pctx = chunks = NONE
    budget = lim.max_batched_tokens
    if prefilling.any():
        pre, pctx = act[prefilling], st[prefilling, KV]
        chunks = budgeted_chunks(left[prefilling], lim, budget)
        go = chunks > 0
        pre, pctx, chunks = pre[go], pctx[go], chunks[go]
        keep = _grant(r, r.running_order(act), pre, pctx + chunks, r.kv.blocks[pre])
        if keep is not None:
            preempted = True
            pre, pctx, chunks = pre[keep], pctx[keep], chunks[keep]
        cache_prefills(r, pre, pctx, chunks)
        budget -= int(_sum(chunks))
    if (r.waiting or r.loaded) and budget > 0 and r.n_active < lim.max_num_seqs:
        new_pre, new_chunks, new_ctx, _ = admit_waiting(r, lim, budget, _reserved(r),
                                                     CLIP_MAX_NEW_TOKENS)
        if len(new_pre):
            pre = np.concatenate((pre, new_pre))
            pctx = np.concatenate((pctx, new_ctx))
            chunks = np.concatenate((chunks, new_chunks))
    if len(pre):
        row = r.draft_shapes(NONE, NONE, st[:0, HISTORY])
        return Batch(row, NONE, NONE, pre, pctx, chunks, preempted)

    # 2. no prefill to run: every running request past its prompt decodes.
    if preempted:  # the running set changed
        act, st, left = _running(r)
    decoding = left == 0
    if not decoding.all():
        act, st = act[decoding], st[decoding]
    dec, dctx = act, st[:, KV]
    row = r.draft_shapes(dec, dctx, st[:, HISTORY])  # [m] for all, or [D, m] per sequence
    verify = 1 + (tree_nodes(row) if row.ndim == 1 else np.cumprod(row, axis=1).sum(axis=1))
    keep = _grant(r, r.running_order(), dec, dctx + (verify + r.lookahead),
                  r.kv.blocks[dec])
    if keep is not None:
        preempted = True
        dec, dctx = dec[keep], dctx[keep]
        if row.ndim == 2:
            row = row[keep]
        # SGLang re-estimates from the batch it kept (ScheduleBatch.retract_decode)
        st = r.state[r.active]
        r.new_token_ratio = min(1.0, (float(_sum(st[:, EMITTED])) + RETRACT_DECODE_STEPS
                                      * len(st)) / (float(_sum(st[:, OUTPUT])) + 1.0))
    else:  # a decode step without retraction lowers the estimate
        r.new_token_ratio = max(r.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
    return Batch(row, dec, dctx, NONE, NONE, NONE, preempted)


def _reserved(r) -> int:
    """Blocks an admission must leave free: the rest of every running prompt (those in
    flight in a pipeline too) and ``new_token_ratio`` of the output the running requests
    may still write, each clipped to CLIP_MAX_NEW_TOKENS (SGLang's ``PrefillAdder``:
    ``rem_total_token_offset``)."""
    run = r.active.nonzero()[0]
    if not len(run):
        return 0
    st = r.state[run]
    bs = r.limits.block_size
    prompts = st[:, TARGET] > st[:, FILLED]
    rest = (int(_sum(grant(st[prompts, TARGET], 0, 0, r.kv.blocks[run[prompts]], bs)))
            if prompts.any() else 0)
    out = np.minimum(np.maximum(st[:, OUTPUT] - st[:, EMITTED], 0), CLIP_MAX_NEW_TOKENS)
    return rest + int(np.ceil(r.new_token_ratio * float(_sum(out)) / bs))
