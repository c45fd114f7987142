"""Admitting and prefilling iterations of a steady replica, several at once.

``sim.steady`` runs a replica's decode-only iterations in stretches; an iteration in which
someone waits or prefills goes through the reference path (``sim.decode_step.plan`` or the
full scheduler, ``Replica.price``, ``sim.step.advance``): about a hundred numpy calls. Where
the replica uses the compiled stretch, ``plan`` hands such iterations to
``steady_kernel.walk`` instead -- the vLLM v1 budget walk over the running rows, the
admissions from the waiting queue, the pricing sums and the advance, one iteration after
another on the batch's own rows -- and ``run`` writes what the reference would have: the
same admissions (slots, admission order, ``first_scheduled_at``), KV grants and
roll-backs, first tokens, inter-token gaps, finishes and iteration rows.

Each iteration still lets its own time pass with one ``env.timeout`` (one event per
iteration). As in ``sim.steady`` the walk runs up to the next event of anyone else
(``env.peek()``): the iteration that ends at or after it is its last, and the event comes
while it runs -- so the iterations before it are written when the last of them ends, as the
event finds them, and it is written at its own end. One that would admit then is left to
the reference path. The walk also stops before an iteration that would preempt,
admit a request resumed after a preemption (its recompute is counted apart) or one beyond
those it was given, or when a running sequence is re-prefilling after a preemption: the
reference path takes those. The walk's records are compared with the reference's for every
shipped scenario (``tests/sim/test_golden.py``).
"""

from __future__ import annotations

from itertools import islice

import numpy as np

from sim.slots import ADMIT, N_COLS, OUTPUT, RESUMED, RID, STREAM, TARGET

_any = np.logical_or.reduce
# steady_kernel's bound codes 0..3; -1 (no bound recorded) names the last, ""
_NAMES = ("compute", "memory", "comm", "host", "")


class Walk:
    """``k`` iterations of a replica from ``start`` (each starts where the one before
    ended), as ``steady_kernel.walk`` planned them for ``rows``: the running slots ``run``
    in running order, then the waiting requests it was given, ``admitted`` of which it
    admits (all before the split, if there is one)."""

    __slots__ = ("run", "start", "k", "floats", "ints", "gaps", "st", "last_end",
                 "first_at", "admitted", "adm_iter", "finished", "finished_at", "free",
                 "split")

    def __init__(self, run: np.ndarray, rows: np.ndarray, start: float, got: tuple):
        self.run, self.st, self.start = run, rows, start
        (self.k, self.floats, self.ints, self.gaps, self.last_end, self.first_at, admitted,
         self.adm_iter, self.finished, self.finished_at, free, self.split) = got
        self.admitted, self.free = int(admitted), int(free)


def plan(r, fn, params) -> Walk | None:
    """The next walk of replica ``r`` (``fn``: the compiled ``steady_kernel.walk``;
    ``params``: its timing parameters), or None (``r`` untouched): the reference path runs
    the iteration."""
    run = r.running_order() if r.n_active else _NO_ROWS
    n = len(run)
    st = r.state[run]
    if _any(st[:, RESUMED]):
        return None  # a recompute: its prefill tokens are counted apart
    lim = r.limits
    w = min(len(r.waiting), lim.max_num_seqs - n)  # the most the walk could admit
    ids = np.fromiter(islice(r.waiting, w), dtype=np.int64, count=w)
    if r._resume:  # up to the first request resumed after a preemption
        for i, rid in enumerate(ids.tolist()):
            if rid in r._resume:
                ids = ids[:i]
                break
    w = len(ids)
    rows = np.zeros((n + w, N_COLS), dtype=np.int64)
    rows[:n] = st
    if w:
        tab = r.table
        rows[n:, RID] = ids
        rows[n:, TARGET] = tab.prompt_tokens[ids]
        rows[n:, OUTPUT] = tab.output_tokens[ids]
        rows[n:, STREAM] = tab.stream[ids]
    start = r.env.now
    got = fn(rows, n, w, len(r.waiting) > w, r.last_chunk_at[run], r.kv.free_blocks,
             r.kv.capacity_blocks, lim.block_size, lim.max_batched_tokens, lim.chunk_tokens,
             lim.chunked_prefill, lim.max_num_seqs, start, r.env.peek(), MAX_STEPS,
             r.on_finish is not None, r.pricer.record_bound, *params)
    return Walk(run, rows, start, got) if got[0] else None


MAX_STEPS = 256  # iterations per walk (bounds its [rows, steps] gaps)
_NO_ROWS = np.zeros(0, dtype=np.int64)


def run(r, w: Walk):
    """Let walk ``w``'s iterations pass on replica ``r``, one event each, and write them (a
    SimPy sub-generator: ``yield from``)."""
    env = r.env
    delays = [0.0 + v for v in w.floats[3].tolist()]  # timeout(draft_s + verify_s)
    ints = w.ints
    ints[0] = r.index
    ints[8] = r.log.iterations.codes(_NAMES)[ints[8]]
    n, a = len(w.run), w.admitted
    slots = np.empty(n + a, dtype=np.int64)
    slots[:n] = w.run
    k, st, last, first, alive, ng, nf, free, held = w.split
    if a:  # vLLM v1's running order: by admission
        w.st[n:n + a, ADMIT] = np.arange(r._admitted + 1, r._admitted + a + 1)
        if k:
            st[n:n + a, ADMIT] = w.st[n:n + a, ADMIT]
    if not k:
        for delay in delays:
            yield env.timeout(delay)
        _write(r, w, slots, None, w.st[:n + a], w.last_end[:n + a],
               ~np.isnan(w.first_at[:n + a]), 0, w.k, 0, len(w.gaps), 0, len(w.finished),
               w.free)
        return
    for delay in delays[:k]:
        yield env.timeout(delay)
    before = np.isnan(first[:n + a])
    _write(r, w, slots, None, st[:n + a], last[:n + a], ~before, 0, k, 0, ng, 0, nf, free)
    yield env.timeout(delays[k])
    rows = alive[:n + a].nonzero()[0]  # no admission in the last: the rows then
    _write(r, w, slots, rows, w.st[rows], w.last_end[rows],
           before[rows] & ~np.isnan(w.first_at[rows]), k, w.k, ng, len(w.gaps), nf,
           len(w.finished), w.free + held)


def _write(r, w: Walk, slots: np.ndarray, rows: np.ndarray | None, st: np.ndarray,
           last: np.ndarray, first: np.ndarray, i0: int, i1: int, g0: int, g1: int,
           f0: int, f1: int, free: int) -> None:
    """Write iterations ``i0:i1`` of walk ``w`` into replica ``r``: the admissions (the
    first part only; each request to the slot ``Replica.admit`` gives it: no request
    finishes before the walk's last admission), the state of ``rows`` (None: all;
    ``st``, ``last``: their rows and last emissions then; ``first``: whose first token came
    in them), the KV pool (``free`` blocks less those of the finished sequences), the gaps
    ``g0:g1``, the finished ``f0:f1``, the iteration rows and the liveness guard."""
    log = r.log
    n, a = len(w.run), w.admitted
    if a and not i0:
        free_slots = r._free_slots
        for j in range(n, n + a):
            slots[j] = free_slots.pop()
            r.waiting.popleft()
        r._admitted += a
        r.active[slots[n:]] = True
        r._order = None
        r.n_active += a
        log.first_scheduled_at[st[n:, RID]] = w.floats[0, w.adm_iter]  # their start
    at = slots if rows is None else slots[rows]
    r.state[at] = st
    if _any(first):
        got = first.nonzero()[0]
        log.first_token_at[st[got, RID]] = w.first_at[got if rows is None else rows[got]]
    log.add_itl(w.gaps[g0:g1])
    r.last_chunk_at[at] = last
    r.kv.free_blocks = free  # the finished sequences' blocks come back in finish
    if f1 > f0:
        r.finish(slots[w.finished[f0:f1]], w.finished_at[f0:f1])
    emitted = w.ints[7, i0:i1]
    if emitted.all():
        r.check_progress(1)
    else:
        for e in emitted.tolist():
            r.check_progress(e)
    log.iterations.extend_rows(w.floats[:, i0:i1], w.ints[:, i0:i1])
