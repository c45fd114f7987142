"""Steady decoding: several iterations of a replica computed at once, with the same records.

When a replica decodes without speculation and nothing can change its batch but its own
sequences finishing -- no request waiting, none prefilling, no preemption, and no other
event in the simulation before the iterations end -- each of the next iterations feeds
every running sequence one token: the batch, its order and its outcome are known in
advance. A sequence with ``r`` tokens left is in the next ``r`` iterations and finishes at
the end of the last of them; the batch shrinks as they leave, in the running order it had.
``plan`` finds how many such iterations fit (at most ``MAX_STEPS``) and prices them, with
the compiled stretch (``sim.steady_kernel``; without it the reference path runs them); the
replica then lets their time pass (``sim.router.pass_iterations``: an event at the start of
the last, the delays summed one by one as the timeouts of one iteration at a time would
reach it, and the last one's own timeout, so ``env.now`` takes exactly the values it takes
one iteration at a time and an event at the instant the last ends is ordered against it as
there) and ``apply`` writes what ``sim.step.advance`` and the scheduler would
have: the same KV grants, roll-backs and releases, counters, inter-token gaps, finish times
and iteration rows.

Nothing but the iteration's own end can see what it does: the router reads a replica's
outstanding requests and tokens, which change only when a sequence finishes, and a stop
reads the state as the last finished iteration left it. So a stretch runs up to the next
event of anyone else (``env.peek()``), and when even its first iteration ends at or after
that event, the stretch is that one iteration: the event comes while it runs, as it
would one iteration at a time, and ``apply`` writes it at its end (a run stopped there
never writes it, as the reference never finishes it). The stretch plans that
iteration with the ones before it and hands it on (``Stretch.then``): the iterations
before are written when the last of them ends, as the event finds them, and it is
written at its own end.

A closed loop's users submit their next request when one finishes (``Replica.on_finish``),
which changes the queue: there a stretch ends with the first iteration that finishes a
sequence.

An iteration that admits requests is formed and priced by the reference path (the
scheduler, ``Replica.price``); when every running sequence decoded before it, each
request it admits prefills its whole prompt in it and nobody is left waiting, the batch
is steady from the next iteration on, and ``plan_admitted`` makes that iteration the
first of a stretch: it fills the prompts and samples their first tokens as ``advance``
does, and runs whatever comes during it, as the loop runs any priced batch.

Where the compiled kernels are in use and the replica has an arrival feed (one replica,
open loop: ``sim.router.ArrivalFeed``), ``sim.steady_walk`` runs past arrivals and covers
these stretches too; the stretches here serve the other replicas.

The stretch's rules are the scheduler's (``sim.kernels.rules``) and its price is the
timing's; the reference path (``sim.engine_path``) turns it off, and a test runs every
shipped scenario both ways and compares every record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim import steady_kernel
from sim.router import next_event_of
from sim.slots import FILLED, RESUMED, RID, TARGET

MAX_STEPS = 256  # iterations per steady stretch (bounds the [sequences, steps] arrays)
# the auto path (sim.engine_path): the compiled kernels once this process has looked for a
# stretch or a walk this many times, or at once in a run of this many requests (the
# default scenario's 1,000 requests per variant: 1.41 s compiled from the start, 1.86 s on
# the reference path; 300: 1.35 s and 1.24 s -- `specsim run --engine-path`, 2 cores)
KERNEL_AFTER = 5_000
KERNEL_REQUESTS = 1_000
_planned = 0  # the auto path's looks in this process (a sweep's small runs share them)

_sum = np.add.reduce
_any = np.logical_or.reduce
_NO_CHUNKS = np.zeros(0, dtype=np.int64)
# steady_kernel's bound codes 0..3; -1 (no bound recorded) names the last, ""
_NAMES = ("compute", "memory", "comm", "host", "")


@dataclass(frozen=True)
class Stretch:
    """``k`` steady iterations of the slots ``dec`` (in running order) from time ``start``;
    each starts where the one before ended. ``st`` is their state rows after the stretch."""

    dec: np.ndarray  # int64 [n]
    st: np.ndarray  # int64 [n, N_COLS]
    start: float
    ends: np.ndarray  # float64 [k]: each iteration's end time (env.now after its timeout)
    verify_s: list[float]  # each iteration's target pass (Python floats: the timeouts)
    bounds: list[str] | tuple[np.ndarray, tuple[str, ...]]  # labels, or codes and names
    batch: np.ndarray  # int64 [k]: sequences in each iteration
    used: np.ndarray  # int64 [k]: KV blocks in use after each iteration
    gaps: np.ndarray  # float64: every sequence's inter-token gap in every iteration
    last_end: np.ndarray  # float64 [n]: the end of each sequence's last iteration
    finished: np.ndarray  # int64 [F]: rows (of dec) that finish, in the order they do
    finished_at: np.ndarray  # float64 [F]
    free: int  # the pool's free blocks after it, less the finished sequences' blocks
    admitted: int = 0  # rows (the last of dec) whose whole prompt the first iteration fills
    prefill: int = 0  # their prompt tokens
    draft0: float = 0.0  # the first iteration's draft_s
    then: Stretch | None = None  # the iteration an event comes during, run after this one

    def delays(self) -> list[float]:
        """Each iteration's timeout, as the replica's loop computes it one at a time."""
        v = self.verify_s
        if not self.admitted:
            return [0.0 + x for x in v]
        return [self.draft0 + v[0]] + [0.0 + x for x in v[1:]]

    @property
    def k(self) -> int:
        return len(self.ends)

    @property
    def starts(self) -> np.ndarray:
        """float64 [k]: each iteration's start time."""
        return np.concatenate(([self.start], self.ends[:-1]))


# why a replica whose target the kernels cannot price takes no stretch (sim.gate's phrase)
NOT_PRICED = "a target timing the kernels do not price (they price one stage)"


def kernel_params(r):
    """The timing's parameters for ``sim.steady_kernel`` (a one-stage timing), or
    None: such a replica takes no stretch (``NOT_PRICED``)."""
    params = getattr(getattr(r.pricer.target, "timing", None), "kernel_params", None)
    return None if params is None else params()


def use_kernels(r) -> bool:
    """Whether replica ``r`` takes the compiled kernels now (asked before each stretch or
    walk it may take), as its run's path says (``sim.engine_path``): after
    ``kernels_after`` looks of its own; on the auto path, once this process has asked
    ``KERNEL_AFTER`` times, or from the start in a run of ``KERNEL_REQUESTS`` requests or
    more. numba's import and the load of the cached kernels take about 0.5 s (their first
    compile, 25-80 s), which pay for themselves only in runs of several hundred requests
    or more, speculating or not. Which path is taken never changes a record."""
    after = r.path.kernels_after
    if after is not None:
        r._looked += 1
        return r._looked > after
    global _planned
    _planned += 1
    return _planned > KERNEL_AFTER or len(r.table) >= KERNEL_REQUESTS


def kernel(r):
    """Replica ``r``'s compiled stretch, or None: a replica whose timing it prices takes it
    once it uses the kernels (``use_kernels``); None for good without numba."""
    fn = r._steady_kernel
    if fn is None and r._steady_params is not None and use_kernels(r):
        fn = r._steady_kernel = steady_kernel.compiled()
    return fn


def plan(r) -> Stretch | None:
    """The next steady stretch of replica ``r``, or None."""
    if r.n_active > r.limits.max_batched_tokens or r.waiting or not r.n_active:
        return None
    run = r.running_order()
    st = r.state[run]  # [n, N_COLS]: a copy
    if _any(st[:, TARGET] != st[:, FILLED]):
        return None  # someone prefills
    env = r.env
    horizon = float(next_event_of(r))  # the next event that can touch it (an arrival, ...)
    start = float(env.now)  # (an int before any timeout: one specialisation)
    fn = kernel(r)
    if fn is None:
        return None
    return _compiled(r, fn, run, st, start, horizon, MAX_STEPS)


def all_decoding(r) -> bool:
    """Whether every running sequence of ``r`` decodes (none prefills): a batch the
    scheduler forms now may then start a stretch (``plan_admitted``)."""
    if not r.n_active:
        return True
    slots = r.active.nonzero()[0]
    return not _any(r.target_prefill[slots] != r.prefilled[slots])


def plan_admitted(r, batch, start: float, draft_s: float, verify_s: float,
                  bound: str) -> Stretch | None:
    """The stretch that begins with ``batch`` -- formed by the scheduler at ``start`` when
    every running sequence decoded (``all_decoding``): all of them, their blocks granted,
    and the requests it admitted, in running order -- and priced (``draft_s``,
    ``verify_s``, ``bound``), when each admitted request prefills its whole prompt in it and
    nobody is left waiting: after it the batch is steady (every sequence decodes). Its
    first iteration runs whatever comes during it, as the loop runs a priced batch. None
    (``r`` untouched) otherwise, or before the compiled stretch is in use: the iteration
    is then run as any other."""
    fn = r._steady_kernel
    pre = batch.pre_slots
    if fn is None or not len(pre) or r.waiting or bound not in _NAMES or batch.preempted \
            or len(batch.pads):
        return None
    sp = r.state[pre]
    if _any(sp[:, FILLED] + batch.chunks < sp[:, TARGET]) or _any(sp[:, RESUMED]):
        return None  # a prompt continues in the next iteration, or a recompute
    dec = batch.dec_slots
    run = np.concatenate((dec, pre))  # the running order after the admissions ...
    if not np.array_equal(run, r.running_order()):
        return None  # ... unless the budget left a decoder out
    st = np.concatenate((r.state[dec], sp))
    steps = MAX_STEPS if len(run) <= r.limits.max_batched_tokens else 1
    return _compiled(r, fn, run, st, start, next_event_of(r), steps,
                     (len(dec), batch.chunks, draft_s + verify_s, verify_s,
                      _NAMES.index(bound)),
                     admitted=len(pre), prefill=int(_sum(batch.chunks)), draft0=draft_s)


def _compiled(r, fn, run: np.ndarray, st: np.ndarray, start: float, horizon: float,
              steps: int, first_iteration=None, **first) -> Stretch | None:
    """The stretch the compiled ``fn`` plans for the rows ``st`` of the slots ``run`` of
    replica ``r`` (``first_iteration``: ``steady_kernel.stretch``'s n_dec, chunks,
    first_delay, first_v and first_code for a formed first iteration; ``first``: the
    Stretch fields that say so), or None when it has no iteration. When an event comes
    during its last iteration (after others), it is two: the iterations before, then that
    one, with the state the replica has when the event comes in between."""
    k, ends, verify, codes, b, used, gaps, last_end, fin, fin_at, free, split = fn(
        st, r.last_chunk_at[run], r.kv.free_blocks, r.kv.capacity_blocks,
        r.limits.block_size, r.v1, start, horizon, steps, r.on_finish is not None, True,
        r.pricer.record_bound, *(first_iteration or (len(run), _NO_CHUNKS, 0.0, 0.0, 0)),
        *r._steady_params)
    if not k:
        return None
    ks, st_k, last_k, ng, nf, free_k, held_k = split
    verify = verify.tolist()
    if not ks:
        return Stretch(dec=run, st=st, start=start, ends=ends, verify_s=verify,
                       bounds=(codes, _NAMES), batch=b, used=used, gaps=gaps,
                       last_end=last_end, finished=fin, finished_at=fin_at, free=free,
                       **first)
    alive = np.ones(len(run), dtype=bool)  # the rows in the last iteration
    alive[fin[:nf]] = False
    row = np.cumsum(alive) - 1  # a row's place among them
    last = Stretch(dec=run[alive], st=st[alive], start=float(ends[ks - 1]), ends=ends[ks:],
                   verify_s=verify[ks:], bounds=(codes[ks:], _NAMES), batch=b[ks:],
                   used=used[ks:], gaps=gaps[ng:], last_end=last_end[alive],
                   finished=row[fin[nf:]], finished_at=fin_at[nf:], free=free + held_k)
    return Stretch(dec=run, st=st_k, start=start, ends=ends[:ks], verify_s=verify[:ks],
                   bounds=(codes[:ks], _NAMES), batch=b[:ks], used=used[:ks], gaps=gaps[:ng],
                   last_end=last_k, finished=fin[:nf], finished_at=fin_at[:nf], free=free_k,
                   then=last, **first)


def apply(r, s: Stretch) -> None:
    """Write stretch ``s`` into replica ``r``: state, KV pool, ITL gaps, finished requests
    (as advance finishes them: iteration by iteration, each in running order), iteration
    rows."""
    dec = s.dec
    r.state[dec] = s.st
    log = r.log
    log.add_itl(s.gaps)
    r.last_chunk_at[dec] = s.last_end
    r.check_progress(len(dec))
    r.kv.free_blocks = s.free  # the finished sequences' blocks come back in finish
    if len(s.finished):
        r.finish(dec[s.finished], s.finished_at)
    b = size = s.batch  # sequences decoding; in the batch
    prefill, draft = 0, 0.0
    if s.admitted:  # the first iteration also filled these prompts
        log.first_token_at[s.st[-s.admitted:, RID]] = s.ends[0]
        size = b.copy()
        size[0] += s.admitted
        prefill = np.zeros(s.k, dtype=np.int64)
        prefill[0] = s.prefill
        draft = np.zeros(s.k)
        draft[0] = s.draft0
    log.iterations.extend(r.index, s.starts, s.ends, size, b, prefill, b, 0, 0, size, draft,
                          np.array(s.verify_s), s.bounds, s.used)
