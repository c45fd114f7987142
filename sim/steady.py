"""Steady decoding: several iterations of a replica computed at once, with the same records.

When a replica decodes without speculation and nothing can change its batch -- no request
waiting, none prefilling, no preemption, and no other event in the simulation before the
iterations end -- each of the next iterations feeds every running sequence one token: the
batch, its order and its outcome are known in advance, up to the iteration in which a
sequence emits its last token (the stretch's last: those sequences finish at its end). ``plan``
finds how many such iterations fit (at most ``MAX_STEPS``) and prices them; the replica
then lets each one's time pass with its own ``env.timeout`` (one event per iteration, the
model's semantics, so ``env.now`` takes exactly the values it takes one iteration at a
time) and ``apply`` writes what ``sim.step.advance`` and the scheduler would have: the same
KV grants and roll-backs, counters, inter-token gaps and iteration rows.

Only the reference path's arithmetic is repeated here (no new model): the scheduler's
budget walk and KV check for one token per sequence, and the pricing sums of
``sim.pricing.IterationPricer.price`` for a batch of decodes. ``ENABLED = False`` (or
``SPECSIM_STEADY=0``) turns it off; a test runs every shipped scenario both ways and
compares every record.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from sim.decode_step import decoding_rows
from sim.kv import blocks_for
from sim.slots import BLOCKS, COUNTS, EMITTED, KV, OUTPUT

ENABLED = os.environ.get("SPECSIM_STEADY", "1") != "0"
MAX_STEPS = 256  # iterations per steady stretch (bounds the [sequences, steps] arrays)

_sum = np.add.reduce


@dataclass(frozen=True)
class Stretch:
    """``k`` steady iterations of the slots ``dec`` (in running order) from time ``start``;
    each starts where the one before ended."""

    dec: np.ndarray  # int64 [n]
    start: float
    ends: list[float]  # each iteration's end time (env.now after its timeout)
    verify_s: list[float]
    bounds: list[str]
    blocks: np.ndarray  # int64 [n]: each sequence's blocks after the last iteration
    used: list[int]  # KV blocks in use after each iteration
    free: int  # the pool's free blocks after the last iteration

    @property
    def k(self) -> int:
        return len(self.ends)

    @property
    def starts(self) -> list[float]:
        """Each iteration's start time."""
        return [self.start, *self.ends[:-1]]


def applies(r) -> bool:
    """Whether replica ``r`` can ever decode steadily: no speculation, the vLLM v1 order,
    one pipeline stage, no prefix cache (its LRU changes as blocks are granted)."""
    return (ENABLED and not r.policy.uses_draft and r.pricer.draft is None
            and r.stages == 1 and r.prefix is None and r.limits.order == "vllm_v1"
            and not r.overlap and not r.cpu_s_per_seq and r.proposal_rate is None
            and not r.sticky_off)


def plan(r) -> Stretch | None:
    """The next steady stretch of replica ``r`` (at least two iterations), or None."""
    if r.n_active > r.limits.max_batched_tokens:
        return None
    rows = decoding_rows(r)  # nobody waiting or prefilling
    if rows is None:
        return None
    run, st = rows  # [n], [n, N_COLS]
    # at most up to the iteration that finishes a sequence: the stretch's last
    k = min(int((st[:, OUTPUT] - st[:, EMITTED]).min()), MAX_STEPS)
    if k < 2:
        return None
    env = r.env
    horizon = env.peek()  # the next event of anyone else (an arrival, a stop, a replica)
    now = start = env.now
    n = len(run)
    kv0 = st[:, KV]
    s0 = int(_sum(kv0))
    target = r.pricer.target
    bound = r.pricer.record_bound
    ends, verify, labels = [], [], []
    for j in range(k):
        s_ctx = float(s0 + n * j)  # Σ context of iteration j: each sequence one more
        if bound:
            v, label = target.pass_seconds_bound_sums(float(n), s_ctx, s_ctx, float(n),
                                                      sum_keys=None, n_seqs=n)
        else:
            v, label = target.pass_seconds_sums(float(n), s_ctx, s_ctx, float(n),
                                                sum_keys=None, n_seqs=n), ""
        end = now + (0.0 + v)  # the replica's timeout(draft_s + verify_s)
        if not end < horizon:
            break
        ends.append(end)
        verify.append(v)
        labels.append(label)
        now = end
    k = len(ends)
    if k < 2:
        return None
    # KV, iteration j (1-based): blocks for kv0 + j tokens granted, then rolled back to them
    bs = r.limits.block_size
    need = blocks_for(kv0[:, None] + np.arange(1, k + 1), bs)  # [n, k]
    held = np.concatenate((st[:, BLOCKS][:, None], need[:, :-1]), axis=1)  # [n, k] before
    extra = np.maximum(need - held, 0).sum(axis=0)  # [k] granted per iteration
    back = (np.maximum(held, need) - need).sum(axis=0)  # [k] returned by the roll-back
    free = r.kv.free_blocks
    frees = free - np.cumsum(extra - back)  # [k] after each iteration
    before = np.concatenate(([free], frees[:-1]))
    ok = extra <= before  # no preemption: every grant fits what is free then
    if not ok.all():
        k = int(ok.argmin())
        if k < 2:
            return None
        del ends[k:], verify[k:], labels[k:]
    cap = r.kv.capacity_blocks
    return Stretch(dec=run, start=start, ends=ends, verify_s=verify, bounds=labels,
                   blocks=need[:, k - 1].copy(), used=[cap - int(f) for f in frees[:k]],
                   free=int(frees[k - 1]))


def apply(r, s: Stretch) -> None:
    """Write stretch ``s`` into replica ``r``: state, KV pool, ITL gaps, iteration rows."""
    dec, k, n = s.dec, s.k, len(s.dec)
    st = r.state[dec]
    st[:, COUNTS] += k  # verify steps (no draft steps, no drafted tokens)
    st[:, EMITTED] += k
    st[:, KV] += k
    st[:, BLOCKS] = s.blocks
    r.state[dec] = st
    r.kv.free_blocks = s.free
    log = r.log
    ends = np.array(s.ends)  # [k]
    log.add_itl(ends[0] - r.last_chunk_at[dec])
    log.add_itl(np.repeat(np.diff(ends), n))  # every sequence, each later iteration's gap
    r.last_chunk_at[dec] = s.ends[-1]
    r.check_progress(n)
    used = np.array(s.used)
    done = st[:, EMITTED] >= st[:, OUTPUT]  # [n]: finished by the last iteration
    if done.any():  # (env.now is its end) as sim.step.advance finishes them, then the row
        r.finish(dec[done], r.env.now)
        used[-1] = r.kv.used_blocks
    log.iterations.extend(r.index, np.array(s.starts), ends, n, n, 0, n, 0, 0, n, 0.0,
                          np.array(s.verify_s), s.bounds, used)
