"""A replica: one copy of the target (and draft) model serving a queue of requests.

The replica owns the per-sequence state of its running batch as numpy arrays indexed by
slot (no Python object per sequence or per token) and runs one SimPy process, ``run``: each
loop is one iteration — the scheduler forms the batch, the policy shapes the drafts, the
cost model prices draft passes plus one target pass, one ``env.timeout`` lets that time
pass, then the acceptance model draws every decoding sequence's accepted depth at once and
the state advances (lecture §3.1: emit accepted + 1, roll the KV back to what was kept).
"""

from __future__ import annotations

from collections import deque

import numpy as np
import simpy

from sim.kv import BlockManager
from sim.log import RequestTable, RunLog
from sim.pricing import IterationPricer, shape_info
from sim.scheduler import SchedulerLimits, plan_batch
from sim.slots import (
    BLOCKS,
    COUNTS,
    EMITTED,
    FILLED,
    KV,
    N_COLS,
    OUTPUT,
    RID,
    STREAM,
    TARGET,
)

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce
_any = np.logical_or.reduce


_EMPTY = np.zeros(0, dtype=np.int64)


class Replica:
    """One serving replica: a waiting queue, a batch of slots, a KV pool and a loop."""

    stages = 1  # pipeline stages (``sim.pipeline.PipelinedReplica`` has more)

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        limits: SchedulerLimits,
        kv_capacity_blocks: int,
        pricer: IterationPricer,
        policy,
        acceptance,
        rng: np.random.Generator,
        table: RequestTable,
        log: RunLog,
    ) -> None:
        self.env = env
        self.index = index
        self.limits = limits
        self.pricer = pricer
        self.policy = policy
        self.acceptance = acceptance
        self.rng = rng
        self.table = table
        self.log = log
        n = limits.max_num_seqs
        # All per-slot state in one int64 [slots, N_COLS] array, so that a batch's rows are
        # gathered and scattered with one fancy-index operation each; named column views.
        self.state = np.zeros((n, N_COLS), dtype=np.int64)
        st = self.state
        self.rid, self.target_prefill, self.prefilled = st[:, RID], st[:, TARGET], st[:, FILLED]
        self.emitted, self.kv_tokens, self.output = st[:, EMITTED], st[:, KV], st[:, OUTPUT]
        self.stream = st[:, STREAM]
        self.counters = st[:, COUNTS:]  # [slots, 6], written to the log when a request leaves
        self.kv = BlockManager(kv_capacity_blocks, limits.block_size, n, blocks=st[:, BLOCKS])
        self.active = np.zeros(n, dtype=bool)
        self._free_slots = list(range(n - 1, -1, -1))
        self.n_active = 0
        self.waiting: deque[int] = deque()
        # preempted request -> (tokens it had emitted, its counters): carried back to the queue
        self._resume: dict[int, tuple[int, np.ndarray]] = {}
        self.outstanding_requests = 0
        self.outstanding_tokens = 0
        self._wake: simpy.Event | None = None
        self.on_finish = None  # called with the ids of finished requests (closed loops)
        self.stall_limit = stall_limit(table, limits, self.stages)
        self._stalled = 0  # iterations in a row that emitted no token
        if hasattr(policy, "price"):
            policy.price = self._price_decode
        self.process = env.process(self.run())

    # -- the router's side ------------------------------------------------------------
    def submit(self, rid: int) -> None:
        """Queue request ``rid`` here and wake the loop if it is idle."""
        self.waiting.append(rid)
        self.log.replica[rid] = self.index
        self.outstanding_requests += 1
        tab = self.table
        self.outstanding_tokens += int(tab.prompt_tokens[rid] + tab.output_tokens[rid])
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    # -- the scheduler's side ---------------------------------------------------------
    def schedulable(self) -> np.ndarray:
        """bool [slots]: running sequences the scheduler may put in the next batch."""
        return self.active

    def running_oldest_first(self, schedulable: np.ndarray) -> np.ndarray:
        """int64 [R]: every running slot, oldest request first (the preemption order), given
        the schedulable ones in that order (all of them here)."""
        return schedulable

    def prefill_target_of(self, rid: int) -> int:
        """Tokens to prefill for ``rid``: its prompt, plus what it emitted before a preemption."""
        back = self._resume.get(rid)
        return int(self.table.prompt_tokens[rid]) + (back[0] if back else 0)

    def admit(self, rid: int, target: int) -> int:
        """Give waiting request ``rid`` a slot; returns the slot."""
        s = self._free_slots.pop()
        self.active[s] = True
        self.rid[s] = rid
        self.target_prefill[s] = target
        self.prefilled[s] = 0
        self.kv_tokens[s] = 0
        back = self._resume.pop(rid, None)
        if back is None:  # first admission (a preempted request was scheduled before)
            self.log.first_scheduled_at[rid] = self.env.now
            self.emitted[s] = 0
        else:
            self.emitted[s] = back[0]
            self.counters[s] = back[1]
        self.output[s] = self.table.output_tokens[rid]
        self.stream[s] = self.table.stream[rid]
        self.n_active += 1
        return s

    def preempt(self, s: int) -> None:
        """Preempt by recompute: free the slot and its blocks, requeue at the front."""
        rid = int(self.rid[s])
        self.counters[s, -1] += 1  # preemptions
        self._resume[rid] = (int(self.emitted[s]), self.counters[s].copy())
        self.kv.release(s)
        self.state[s] = 0
        self._vacate(s)
        self.waiting.appendleft(rid)

    def _vacate(self, s: int) -> None:
        self.active[s] = False
        self._free_slots.append(s)
        self.n_active -= 1

    # -- the loop ---------------------------------------------------------------------
    def run(self):
        """The replica's process: one SimPy timeout per iteration."""
        env = self.env
        while True:
            if self.n_active == 0 and not self.waiting:
                self._wake = env.event()
                yield self._wake
                self._wake = None
            start_at = env.now
            batch = plan_batch(self)
            if batch.empty:
                raise RuntimeError(f"replica {self.index}: nothing schedulable with work queued")
            dec, pre = batch.dec_slots, batch.pre_slots
            draft_s, verify_s, bound = self.pricer.price(
                batch.row, batch.dec_context, batch.pre_context, batch.chunks
            )
            yield env.timeout(draft_s + verify_s)
            emitted, accepted, drafted, prefill = self._advance(batch)
            self.check_progress(emitted)
            self.log.iterations.append((
                self.index, start_at, env.now - start_at, len(dec) + len(pre), len(dec),
                prefill, batch.verify_tokens, drafted, accepted, emitted,
                draft_s, verify_s, bound,
            ))

    def check_progress(self, emitted: int) -> None:
        """The liveness guard: raise if ``stall_limit`` iterations in a row emit no token."""
        if emitted:
            self._stalled = 0
            return
        self._stalled += 1
        if self._stalled > self.stall_limit:
            run = self.active.nonzero()[0]
            raise RuntimeError(
                f"replica {self.index}: {self._stalled} iterations without emitting a token "
                f"(a livelock; the limit is {self.stall_limit}) at t={self.env.now:.6g} s: "
                f"{len(run)} running (requests {sorted(self.rid[run].tolist())[:8]}), "
                f"{len(self.waiting)} waiting, KV {self.kv.free_blocks} of "
                f"{self.kv.capacity_blocks} blocks free")

    def _advance(self, batch) -> tuple[int, int, int, int]:
        """Apply one finished iteration; returns (emitted, accepted, drafted, prefill) tokens."""
        now = self.env.now
        total_emitted = prefill = 0

        # Prefill chunks: the pass that completes a prompt samples the next token.
        pre, chunks = batch.pre_slots, batch.chunks
        if len(pre):
            prefill = int(_sum(chunks))
            sp = self.state[pre]  # [P, N_COLS]: gather once, scatter once below
            filled = sp[:, FILLED]
            filled += chunks  # (a view into sp)
            sp[:, KV] = batch.pre_context + chunks
            done = filled >= sp[:, TARGET]  # [P]
            if _any(done):
                # first token: a request that emitted nothing before (not a recompute)
                first = done & (sp[:, EMITTED] == 0)
                self.log.first_token_at[sp[first, RID]] = now
                sp[done, EMITTED] += 1
                total_emitted += int(_sum(done))
            self.state[pre] = sp

        # Verification: accepted guesses + 1 token, capped at the remaining output.
        dec, row = batch.dec_slots, batch.row
        drafted = accepted = 0
        n = len(dec)
        if n:
            st = self.state[dec]  # [D, N_COLS]: gather once, scatter once below
            emitted = st[:, EMITTED]
            if row.ndim == 1:  # one shape for the batch: scalars
                depth, nodes, _ = shape_info(row)
                # verify steps, draft steps and drafted tokens: the same for every row
                st[:, COUNTS:COUNTS + 3] += _step_counts(row)
                drafted = n * nodes
                speculating = depth > 0
                widths = _rows(row, n)
            else:  # a shape per sequence: arrays [D]
                depth = (row > 0).sum(axis=1)
                nodes = np.cumprod(row, axis=1).sum(axis=1)
                st[:, COUNTS] += 1
                st[:, COUNTS + 1] += depth > 0
                st[:, COUNTS + 2] += nodes
                drafted = int(_sum(nodes))
                speculating = bool(depth.any())
                widths = row
            if speculating:
                acc = self.acceptance.draw(st[:, STREAM], emitted, widths, self.rng)  # [D]
                st[:, COUNTS + 3] += acc
                st[:, COUNTS + 4] += acc + (acc < depth)  # checked: accepted + first rejected
                accepted = int(_sum(acc))
                acc1 = acc + 1
            else:
                acc, acc1 = _zeros(n), _ones(n)
            remaining = st[:, OUTPUT] - emitted  # [D]
            step = np.minimum(acc1, remaining)  # [D]
            emitted += step  # (a view into st)
            kept = batch.dec_context + acc1  # the root plus the accepted path
            st[:, KV] = kept
            st[:, BLOCKS] = self.kv.rolled_back(st[:, BLOCKS], kept)
            self.state[dec] = st
            total_emitted += int(_sum(step))
            self.policy.observe(acc, row)
            fin = dec[step == remaining]
        else:
            fin = _EMPTY
        if len(pre):
            fin = np.concatenate((fin, pre[sp[:, EMITTED] >= sp[:, OUTPUT]]))
        if len(fin):
            self._finish(fin, now)
        return total_emitted, accepted, drafted, prefill

    def _finish(self, fin: np.ndarray, now: float) -> None:
        """Record and free finished sequences."""
        st = self.state[fin]  # [F, N_COLS]
        rids = st[:, RID]
        log = self.log
        log.finished_at[rids] = now
        log.emitted[rids] = st[:, EMITTED]
        log.counts[rids] = st[:, COUNTS:]  # [F, 6]
        self.state[fin] = 0  # blocks and counters back to zero for the next tenant
        self.kv.returned(int(_sum(st[:, BLOCKS])))
        self.active[fin] = False
        self._free_slots.extend(fin.tolist())
        self.n_active -= len(fin)
        self.outstanding_requests -= len(fin)
        if self.on_finish is not None:
            self.on_finish(rids)
        tab = self.table
        self.outstanding_tokens -= int(_sum(tab.prompt_tokens[rids]) + _sum(st[:, OUTPUT]))

    def flush_running(self) -> None:
        """At the horizon: write what running and preempted requests have done so far."""
        log = self.log
        slots = self.active.nonzero()[0]
        rids = self.rid[slots]
        log.emitted[rids] = self.emitted[slots]
        log.counts[rids] = self.counters[slots]  # [n, 6]
        for rid, (emitted, counters) in self._resume.items():
            log.emitted[rid] = emitted
            log.counts[rid] = counters

    def _price_decode(self, row: np.ndarray, context: np.ndarray) -> float:
        """Seconds of the decoding part of an iteration with this shape (adaptive policy)."""
        draft_s, verify_s, _ = self.pricer.price(row, context, _EMPTY, _EMPTY, bound=False)
        return draft_s + verify_s


def stall_limit(table: RequestTable, limits: SchedulerLimits, stages: int = 1) -> int:
    """How many iterations in a row may emit no token before the replica is declared live-
    locked: stages × (2·⌈L / c⌉ + 100), L the longest request (prompt + output tokens, the
    most a recompute can prefill), c the prefill chunk (L without chunked prefill).

    Why it cannot fire on a live run: an iteration with a decoding sequence emits a token, so
    a run without emission only prefills, and the oldest running request gets the first
    share of the token budget (at least one chunk); it can be preempted only by itself, when
    it does not fit the KV pool alone, which ``sim.build`` refuses. So it emits within
    ⌈L / c⌉ of its iterations, and with ``stages`` micro-batches in flight it is in at least
    one of every ``stages`` iterations.
    """
    longest = int((table.prompt_tokens + table.output_tokens).max()) if len(table) else 1
    chunk = limits.chunk_tokens if limits.chunked_prefill else longest
    return stages * (2 * -(-longest // max(chunk, 1)) + 100)


_ROWS: dict[tuple[bytes, int], np.ndarray] = {}
_STEP_COUNTS: dict[bytes, np.ndarray] = {}
_CONST: dict[tuple[int, int], np.ndarray] = {}


def _step_counts(row: np.ndarray) -> np.ndarray:
    """int64 [3]: what one verify with shape ``row`` adds to a sequence's verify steps,
    draft steps and drafted tokens (1, 1 if it drafts, its nodes)."""
    key = row.tobytes()
    counts = _STEP_COUNTS.get(key)
    if counts is None:
        depth, nodes, _ = shape_info(row)
        counts = _STEP_COUNTS[key] = np.array([1, int(depth > 0), nodes], dtype=np.int64)
    return counts


def _const(value: int, n: int) -> np.ndarray:
    """int64 [n] filled with ``value``: a cached read-only array (the caller never writes)."""
    out = _CONST.get((value, n))
    if out is None:
        out = _CONST[(value, n)] = np.full(n, value, dtype=np.int64)
        out.flags.writeable = False
    return out


def _zeros(n: int) -> np.ndarray:
    return _const(0, n)


def _ones(n: int) -> np.ndarray:
    return _const(1, n)


def _rows(row: np.ndarray, n: int) -> np.ndarray:
    """int64 [n, m]: ``row`` for n sequences (a cached read-only broadcast of a private copy)."""
    key = (row.tobytes(), n)
    view = _ROWS.get(key)
    if view is None:
        view = np.broadcast_to(row.copy(), (n, len(row)))
        _ROWS[key] = view
    return view

