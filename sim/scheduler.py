"""Continuous batching: which sequences run in the next iteration, and with how many tokens.

Per iteration, in vLLM's order of priority:

1. running sequences that are decoding, oldest first, each with its verify tokens (the last
   token plus the policy's guesses or tree nodes), while they fit the token budget;
2. running sequences still prefilling, oldest first, one chunk each (the whole remaining
   prompt without chunked prefill, which must then fit the budget whole);
3. KV blocks for all of them; when the pool runs dry, the latest-arrived running sequence is
   preempted by recompute (its blocks freed, it returns to the front of the queue and later
   re-prefills its prompt plus what it had emitted), repeatedly, exactly like vLLM's
   ``_preempt`` loop; a sequence that is itself the latest preempts itself;
4. new admissions from the waiting queue, first come first served, while there is a free
   slot (max sequences), token budget, and free blocks for the chunk being admitted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.kv import blocks_for
from sim.pricing import tree_nodes
from sim.slots import BLOCKS, COUNTS, FILLED, KV, TARGET

HISTORY = slice(COUNTS + 3, COUNTS + 5)  # per-request accepted and checked tokens so far

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce
_any = np.logical_or.reduce



@dataclass(frozen=True)
class SchedulerLimits:
    """A replica's batching limits (vLLM's max_num_seqs, max_num_batched_tokens, ...)."""

    max_num_seqs: int
    max_batched_tokens: int
    chunked_prefill: bool
    chunk_tokens: int
    block_size: int = 16


@dataclass(frozen=True)
class Batch:
    """One iteration's work.

    row int64 [m]: the draft shape of every decoding sequence (or int64 [D, m]: one per
    sequence, from a per-sequence policy); dec_slots, dec_context
    int64 [D]: the decoding sequences and their cached tokens; pre_slots, pre_context,
    chunks int64 [P]: the prefilling sequences, their cached tokens and their chunks.
    """

    row: np.ndarray
    dec_slots: np.ndarray
    dec_context: np.ndarray
    pre_slots: np.ndarray
    pre_context: np.ndarray
    chunks: np.ndarray

    @property
    def verify_tokens(self) -> int:
        """Tokens the decoding sequences put into the target pass (root + nodes each)."""
        if self.row.ndim == 1:
            return len(self.dec_slots) * (1 + tree_nodes(self.row))
        return int(_sum(1 + np.cumprod(self.row, axis=1).sum(axis=1)))

    @property
    def empty(self) -> bool:
        """True when nothing runs."""
        return len(self.dec_slots) == 0 and len(self.pre_slots) == 0


_NONE = np.zeros(0, dtype=np.int64)


def _budgeted_chunks(remaining: np.ndarray, limits: SchedulerLimits, budget: int) -> np.ndarray:
    """int64 [P]: each prefilling sequence's chunk under the token budget, in priority order."""
    want = np.minimum(remaining, limits.chunk_tokens) if limits.chunked_prefill else remaining
    before = want.cumsum() - want  # tokens taken by higher-priority chunks
    if limits.chunked_prefill:  # a partial chunk fills the budget
        return np.minimum(np.maximum(budget - before, 0), want)
    return np.where(before + want <= budget, want, 0)


def plan_batch(r) -> Batch:
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
        dec, dctx, dhist, pre, pctx, left = act, ctx, st[:, HISTORY], _NONE, _NONE, _NONE
    else:
        decoding = left == 0
        dec, dctx, dhist = act[decoding], ctx[decoding], st[decoding][:, HISTORY]
        pre, pctx, left = act[~decoding], ctx[~decoding], left[~decoding]

    # 1. decoders and their draft shapes, while their verify tokens fit the budget.
    row = r.policy.shape(len(dec), dctx, dhist)  # [m] for all, or [D, m] per sequence
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
    chunks = _NONE
    if len(pre):
        chunks = _budgeted_chunks(left, lim, budget)
        go = chunks > 0
        pre, pctx, chunks = pre[go], pctx[go], chunks[go]
        budget -= int(_sum(chunks))

    # 3. KV blocks, preempting the latest arrivals when the pool runs dry.
    if len(pre):
        slots = np.concatenate((dec, pre))
        tokens = np.concatenate((dctx + verify, pctx + chunks))
    else:
        slots, tokens = dec, dctx + verify
    # blocks held: from the gathered rows when the batch is exactly the running set
    held = st[:, BLOCKS] if slots is act else r.kv.blocks[slots]
    extra = np.maximum(blocks_for(tokens, lim.block_size) - held, 0)
    if int(_sum(extra)) > r.kv.free_blocks:
        keep = _preempt_until_fits(r, r.running_oldest_first(act), slots, tokens)
        kd, kp = np.isin(dec, keep), np.isin(pre, keep)
        dec, dctx, pre, pctx, chunks = dec[kd], dctx[kd], pre[kp], pctx[kp], chunks[kp]
        if row.ndim == 2:
            row, verify = row[kd], verify[kd]
        budget = (lim.max_batched_tokens - int(_sum(np.broadcast_to(verify, dec.shape)))
                  - int(_sum(chunks)))
        slots = np.concatenate((dec, pre))
        tokens = np.concatenate((dctx + verify, pctx + chunks))
        held = r.kv.blocks[slots]
        extra = np.maximum(blocks_for(tokens, lim.block_size) - held, 0)
    r.kv.grant(slots, held, extra)

    # 4. admissions, first come first served (nothing cached yet: context 0).
    if r.waiting and budget > 0 and r.n_active < lim.max_num_seqs:
        new_slots, new_chunks = _admit(r, lim, budget)
        if new_slots:
            new_pre = np.array(new_slots, dtype=np.int64)
            new_ctx = np.zeros(len(new_slots), dtype=np.int64)
            new_chunks = np.array(new_chunks, dtype=np.int64)
            if len(pre):
                pre = np.concatenate((pre, new_pre))
                pctx = np.concatenate((pctx, new_ctx))
                chunks = np.concatenate((chunks, new_chunks))
            else:
                pre, pctx, chunks = new_pre, new_ctx, new_chunks
    return Batch(row, dec, dctx, pre, pctx, chunks)


def _admit(r, lim: SchedulerLimits, budget: int) -> tuple[list[int], list[int]]:
    """Admit waiting requests while slots, budget and free blocks last."""
    new_slots, new_chunks = [], []
    while r.waiting and r.n_active < lim.max_num_seqs and budget > 0:
        rid = r.waiting[0]
        target = r.prefill_target_of(rid)
        chunk = min(target, lim.chunk_tokens, budget) if lim.chunked_prefill else target
        need = int(blocks_for(chunk, lim.block_size))
        if chunk > budget or need > r.kv.free_blocks:
            break
        r.waiting.popleft()
        slot = r.admit(rid, target)
        r.kv.take(slot, need)
        new_slots.append(slot)
        new_chunks.append(chunk)
        budget -= chunk
    return new_slots, new_chunks


def _preempt_until_fits(r, order: np.ndarray, slots: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """vLLM's preemption loop over running slots ``order`` (oldest first); returns survivors.

    Walk the running sequences oldest first; while the current one cannot get its blocks,
    preempt the latest-arrived one still running (possibly itself). Running sequences that
    are not being scheduled (unscheduled, or in flight in a pipeline) need no new blocks but
    can be victims, as in vLLM, where in-flight requests stay in ``running``: so a younger
    sequence never preempts an older one, and the oldest always makes progress.
    """
    want = dict(zip(slots.tolist(), tokens.tolist(), strict=True))
    alive = order.tolist()
    free = r.kv.free_blocks
    i = 0
    granted = []
    while i < len(alive):
        s = alive[i]
        need = max(int(blocks_for(want.get(s, 0), r.limits.block_size)) - int(r.kv.blocks[s]), 0)
        while need > free:
            victim = alive.pop()
            free += int(r.kv.blocks[victim])
            r.preempt(victim)
            if victim == s:
                break
        else:
            free -= need
            granted.append(s)
            i += 1
    return np.array(granted, dtype=np.int64)
