"""vLLM's async scheduling: step n + 1 is scheduled while step n runs, before its outcome.

vLLM's engine core keeps a queue of two batches (``EngineCore.step_with_batch_queue``,
``vllm/v1/engine/core.py``; ``VllmConfig.max_concurrent_batches`` is 2 with
``async_scheduling``): it schedules a step, schedules the next at once, then waits for the
older one and applies its output. So the step that starts at the end of step n was
scheduled when step n started, from the state step n's scheduling left
(``AsyncScheduler``, ``vllm/v1/core/sched/async_scheduler.py``), and what it sees of the
world is one step old:

- **Placeholders.** Scheduling a step counts its tokens as computed at once
  (``_update_after_schedule``: ``num_computed_tokens`` grows by the tokens scheduled) and,
  for a request that will sample, holds ``num_output_placeholders`` for the token and the
  drafts it may emit. The next step then asks a decoder for 1 + K tokens again, with K
  placeholder drafts (the worker fills in the real ones), and grants its KV as if every
  draft in flight were accepted: the KV check needs the in-flight step's 1 + K slots
  beside the new step's 1 + K and the K lookahead slots.
- **Rejections** come back with the output: ``num_computed_tokens`` (and the
  placeholders) fall by the rejected drafts (``update_from_output``); the blocks stay.
- **Admissions lag a step.** A request that arrives while step n runs is first seen when
  step n + 2 is scheduled (at step n + 1's start), where sync scheduling would run it in
  step n + 1.
- **The wasted verify.** A request whose in-flight step may end it is scheduled again
  unless that step is sure to (``Scheduler.schedule``: skipped only when one more token
  reaches ``max_tokens``); when its output does end it, the step already scheduled
  computes its verify for nothing. SpecSim prices that verify's tokens in the step and
  counts them in its ``verify_tokens``, not as a decoding sequence.
- **Stale output.** A request preempted while a step of it runs still gets that step's
  tokens when its output comes back (``_preempt_request``: ``num_stale_output_tokens``),
  and may finish from the waiting queue.
- An empty schedule (nothing to run, or a step that only preempts) runs in no time, so the
  step after it is scheduled once the step before it has ended, as in sync mode.

vLLM 0.33 runs async scheduling with EAGLE-type drafters, MTP, GPU n-gram and draft models,
not with a host-side n-gram proposer nor with pipeline parallelism on its V1 model runner
(``VllmConfig.__post_init__``); SpecSim refuses those combinations (``sim.build``).

``run(r)`` is the replica's SimPy process in this mode (reference path only:
``sim.gate``); ``schedule(r)`` forms a step and applies its scheduling; ``settle(r, ...)``
applies its outcome.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.slots import COUNTS, EMITTED, FILLED, KV, OUTPUT, RESUMED, RID, STREAM, TARGET
from sim.step import verify

_sum = np.add.reduce
_any = np.logical_or.reduce


class Step:
    """A scheduled step: its batch, its price, which of its prefill chunks complete their
    prompt (and sample), the request each of its slots held, and the verify tokens of
    requests that finished before it ran (priced, for nothing)."""

    __slots__ = ("batch", "draft_s", "verify_s", "bound", "completes", "dec_rids",
                 "pre_rids", "wasted")

    def __init__(self, r, batch) -> None:
        self.batch = batch
        self.draft_s, self.verify_s, self.bound = r.price(batch)
        pre = batch.pre_slots
        self.completes = r.state[pre, FILLED] + batch.chunks >= r.state[pre, TARGET]  # [P]
        self.dec_rids = r.state[batch.dec_slots, RID].copy()
        self.pre_rids = r.state[pre, RID].copy()
        self.wasted = 0


def schedule(r) -> Step | None:
    """Form replica ``r``'s next step and apply its scheduling (the placeholders: its
    tokens counted as computed, its samplers marked in flight); None when it runs nothing
    (it may have preempted: ``r.last_preempted``)."""
    batch = r.form_batch()
    r.last_preempted = batch.preempted
    if batch.empty:
        return None
    step = Step(r, batch)
    pre, dec = batch.pre_slots, batch.dec_slots
    st = r.state
    if len(pre):
        st[pre, FILLED] += batch.chunks
        st[pre, KV] = batch.pre_context + batch.priced_chunks  # pads: rejected at settle
        st[pre, COUNTS + 6] += batch.chunks * st[pre, RESUMED]  # recomputed prefill
        r.sampling[pre[step.completes]] += 1
        if len(batch.pads):
            r.unconfirmed[pre] += batch.pads
    if len(dec):
        row = batch.row
        nodes = np.cumprod(row, axis=-1).sum(axis=-1)  # scalar, or [D]
        st[dec, KV] += 1 + nodes
        r.sampling[dec] += 1
        r.unconfirmed[dec] += 1 + nodes
    return step


def drop_finished(r, step: Step, fin: np.ndarray) -> Step:
    """``step`` without replica ``r``'s decoding slots ``fin`` (their requests finished
    before it ran): their verify tokens stay priced, as ``wasted``."""
    batch = step.batch
    ended = np.zeros(len(r.state), dtype=bool)
    ended[fin] = True
    gone = ended[batch.dec_slots]
    if not _any(gone):
        return step
    keep = ~gone
    row = batch.row
    before = batch.verify_tokens
    if row.ndim == 2:
        row = row[keep]
    step.batch = replace(batch, row=row, dec_slots=batch.dec_slots[keep],
                         dec_context=batch.dec_context[keep],
                         valid=None if batch.valid is None else batch.valid[keep])
    step.dec_rids = step.dec_rids[keep]
    step.wasted += before - step.batch.verify_tokens
    return step


def settle(r, step: Step) -> tuple[int, int, int, int, np.ndarray]:
    """Apply step ``step``'s outcome to replica ``r`` (its time has passed): first tokens of
    the prompts it completed, each verify's accepted drafts drawn, the rejected ones taken
    off the computed tokens, finished requests freed; a request preempted while it ran gets
    its tokens where it waits. Returns (emitted, accepted, drafted, prefill tokens,
    finished slots)."""
    now = r.env.now
    log = r.log
    batch = step.batch
    emitted = accepted = drafted = 0
    fin = []

    pre = batch.pre_slots
    prefill = int(_sum(batch.chunks)) if len(pre) else 0
    if _any(step.completes):
        slots, rids = pre[step.completes], step.pre_rids[step.completes]
        pads = batch.pads[step.completes] if len(batch.pads) else 0
        live = r.active[slots] & (r.state[slots, RID] == rids)
        for s, rid, pad, here in zip(slots.tolist(), rids.tolist(),
                                     np.broadcast_to(pads, slots.shape).tolist(),
                                     live.tolist(), strict=True):
            emitted += 1
            if not here:  # preempted while it ran: its token still comes
                _stale(r, rid, 1, None, now)
                continue
            row = r.state[s]
            row[KV] -= pad  # the placeholder drafts, rejected
            r.sampling[s] -= 1
            r.unconfirmed[s] -= pad
            if row[EMITTED] == 0:
                log.first_token_at[rid] = now
            else:  # a recompute after a preemption
                log.add_itl(np.array([now - r.last_chunk_at[s]]))
            row[RESUMED] = 0
            r.last_chunk_at[s] = now
            row[EMITTED] += 1
            if row[EMITTED] >= row[OUTPUT]:
                fin.append(s)

    dec = batch.dec_slots
    if len(dec):
        live = r.active[dec] & (r.state[dec, RID] == step.dec_rids)
        row, valid = batch.row, batch.valid
        if not live.all():  # preempted while it ran: their tokens still come
            gone = ~live
            stale = _stale_rows(r, step.dec_rids[gone])
            acc, *_, out, acc_n, drafted_n = verify(
                r, stale, row if row.ndim == 1 else row[gone],
                None if valid is None else valid[gone])
            for rid, st in zip(step.dec_rids[gone].tolist(), stale, strict=True):
                _stale(r, rid, None, st, now)
            emitted, accepted, drafted = emitted + out, accepted + acc_n, drafted + drafted_n
            dec = dec[live]
            row = row if row.ndim == 1 else row[live]
            valid = None if valid is None else valid[live]
        if len(dec):
            st = r.state[dec]
            acc, _, nodes, last, out, acc_n, drafted_n = verify(r, st, row, valid)
            st[:, KV] -= nodes - acc  # the rejected drafts (their blocks stay: vLLM v1)
            r.state[dec] = st
            r.sampling[dec] -= 1
            r.unconfirmed[dec] -= 1 + nodes
            log.add_itl(now - r.last_chunk_at[dec])
            r.last_chunk_at[dec] = now
            r.policy.observe(acc, row)
            emitted, accepted, drafted = emitted + out, accepted + acc_n, drafted + drafted_n
            fin.extend(dec[last].tolist())
    done = np.array(fin, dtype=np.int64)
    if len(done):
        r.sampling[done] = r.unconfirmed[done] = 0
        r.finish(done, now)
    return emitted, accepted, drafted, prefill, done


def _stale_rows(r, rids: np.ndarray) -> np.ndarray:
    """State rows for preempted requests ``rids``, from what they carried back to the queue."""
    st = np.zeros((len(rids), r.state.shape[1]), dtype=np.int64)
    for i, rid in enumerate(rids.tolist()):
        back = r._resume[rid]
        st[i, EMITTED], st[i, COUNTS:] = back[0], back[1]
    st[:, RID] = rids
    st[:, OUTPUT] = r.table.output_tokens[rids]
    st[:, STREAM] = r.table.stream[rids]
    return st


def _stale(r, rid: int, tokens: int | None, row: np.ndarray | None, now: float) -> None:
    """A waiting (preempted) request ``rid`` gets the output of a step that ran it: its
    first token (``tokens``) or a verify's (``row``, already settled by ``verify``)."""
    emitted, counters, off, last = r._resume[rid]
    if row is None and emitted == 0:
        r.log.first_token_at[rid] = now
    else:
        r.log.add_itl(np.array([now - last]))
    if row is None:
        emitted += tokens
    else:
        emitted, counters = int(row[EMITTED]), row[COUNTS:].copy()
    if emitted >= r.table.output_tokens[rid]:  # it finished while it waited
        r.waiting.remove(rid)
        del r._resume[rid]
        _retire_waiting(r, rid, emitted, counters, now)
        return
    r._resume[rid] = (emitted, counters, off, now)


def _retire_waiting(r, rid: int, emitted: int, counters: np.ndarray, now: float) -> None:
    """Record request ``rid``, preempted and waiting, as finished: a step that ran it
    before the preemption wrote its last token (``Replica.retire`` for a request that
    holds no slot)."""
    log = r.log
    log.finished_at[rid] = now
    log.emitted[rid] = emitted
    log.counts[rid] = counters
    r.outstanding_requests -= 1
    if r.on_finish is not None:
        r.on_finish(np.array([rid], dtype=np.int64))
    r.outstanding_tokens -= int(r.table.prompt_tokens[rid] + r.table.output_tokens[rid])


def run(r):
    """Replica ``r``'s SimPy process under async scheduling: one timeout per step, the next
    step scheduled when this one starts."""
    env = r.env
    ahead: Step | None = None
    while True:
        if ahead is None:
            if r.n_active == 0 and not r.waiting:
                r._wake = env.event()
                yield r._wake
                r._wake = None
            step = schedule(r)
            if step is None:
                if r.last_preempted:  # vLLM v1 admits nobody in the step that preempted
                    r.check_progress(0)
                    continue
                raise RuntimeError(f"replica {r.index}: nothing schedulable with work queued")
        else:
            step, ahead = ahead, None
        start_at = env.now
        ahead = schedule(r)  # step n + 1, before step n's outcome
        yield env.timeout(step.draft_s + step.verify_s)
        out, accepted, drafted, prefill, fin = settle(r, step)
        if ahead is not None and len(fin):
            ahead = drop_finished(r, ahead, fin)
        r.check_progress(out)
        b = step.batch
        r.log.iterations.append(
            r.index, start_at, env.now - start_at, len(b.dec_slots) + len(b.pre_slots),
            len(b.dec_slots), prefill, b.verify_tokens + step.wasted, drafted, accepted, out,
            step.draft_s, step.verify_s, step.bound, r.kv.used_blocks)

