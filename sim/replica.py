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
from sim.pricing import IterationPricer, tree_nodes
from sim.scheduler import SchedulerLimits, plan_batch

_EMPTY = np.zeros(0, dtype=np.int64)


class Replica:
    """One serving replica: a waiting queue, a batch of slots, a KV pool and a loop."""

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
        self.kv = BlockManager(kv_capacity_blocks, limits.block_size, n)
        self.active = np.zeros(n, dtype=bool)
        self.rid = np.zeros(n, dtype=np.int64)
        self.target_prefill = np.zeros(n, dtype=np.int64)
        self.prefilled = np.zeros(n, dtype=np.int64)
        self.emitted = np.zeros(n, dtype=np.int64)
        self.kv_tokens = np.zeros(n, dtype=np.int64)
        self.output = np.zeros(n, dtype=np.int64)
        self.stream = np.zeros(n, dtype=np.int64)
        self._free_slots = list(range(n - 1, -1, -1))
        self.n_active = 0
        self.waiting: deque[int] = deque()
        self._resume: dict[int, int] = {}  # preempted request -> tokens it had emitted
        self.outstanding_requests = 0
        self.outstanding_tokens = 0
        self._wake: simpy.Event | None = None
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
    def prefill_target_of(self, rid: int) -> int:
        """Tokens to prefill for ``rid``: its prompt, plus what it emitted before a preemption."""
        return int(self.table.prompt_tokens[rid]) + self._resume.get(rid, 0)

    def admit(self, rid: int, target: int) -> int:
        """Give waiting request ``rid`` a slot; returns the slot."""
        s = self._free_slots.pop()
        self.active[s] = True
        self.rid[s] = rid
        self.target_prefill[s] = target
        self.prefilled[s] = 0
        self.kv_tokens[s] = 0
        self.emitted[s] = self._resume.pop(rid, 0)
        self.output[s] = self.table.output_tokens[rid]
        self.stream[s] = self.table.stream[rid]
        self.n_active += 1
        if np.isnan(self.log.first_scheduled_at[rid]):
            self.log.first_scheduled_at[rid] = self.env.now
        return s

    def preempt(self, s: int) -> None:
        """Preempt by recompute: free the slot and its blocks, requeue at the front."""
        rid = int(self.rid[s])
        self.kv.release(s)
        self._resume[rid] = int(self.emitted[s])
        self.log.preemptions[rid] += 1
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
                self.kv_tokens[dec], batch.widths, batch.verify_tokens,
                self.kv_tokens[pre], batch.chunks,
            )
            yield env.timeout(draft_s + verify_s)
            emitted, accepted, drafted = self._advance(batch)
            self.log.iterations.append((
                self.index, start_at, env.now - start_at, len(dec) + len(pre), len(dec),
                int(batch.chunks.sum()), int(batch.verify_tokens.sum()), drafted, accepted,
                emitted, draft_s, verify_s, bound,
            ))

    def _advance(self, batch) -> tuple[int, int, int]:
        """Apply one finished iteration; returns (emitted, accepted, drafted) tokens."""
        now = self.env.now
        log = self.log
        total_emitted = 0

        # Prefill chunks: the pass that completes a prompt samples the next token.
        pre, chunks = batch.pre_slots, batch.chunks
        if len(pre):
            self.prefilled[pre] += chunks
            self.kv_tokens[pre] += chunks
            done = pre[self.prefilled[pre] >= self.target_prefill[pre]]
            if len(done):
                first = done[self.emitted[done] == 0]
                log.first_token_at[self.rid[first]] = now
                self.emitted[done] += 1
                total_emitted += len(done)

        # Verification: accepted guesses + 1 token, capped at the remaining output.
        dec, widths = batch.dec_slots, batch.widths
        drafted = accepted_total = 0
        if len(dec):
            rids = self.rid[dec]
            nodes = batch.verify_tokens - 1  # [D]
            depth = (widths > 0).sum(axis=1) if widths.shape[1] else np.zeros(len(dec), np.int64)
            if widths.shape[1] and depth.any():
                acc = self.acceptance.accept(self.stream[dec], self.emitted[dec], widths, self.rng)
            else:
                acc = np.zeros(len(dec), dtype=np.int64)
            remaining = self.output[dec] - self.emitted[dec]
            emit = np.minimum(acc + 1, remaining)  # [D]
            self.emitted[dec] += emit
            self.kv_tokens[dec] += 1 + acc  # rolled back to the root plus the accepted path
            self.kv.shrink(dec, self.kv_tokens[dec])
            checked = acc + (acc < depth)
            log.verify_steps[rids] += 1
            log.draft_steps[rids] += depth > 0
            log.drafted[rids] += nodes
            log.accepted[rids] += acc
            log.checked[rids] += checked
            drafted, accepted_total = int(nodes.sum()), int(acc.sum())
            total_emitted += int(emit.sum())
            self.policy.observe(int(checked.sum()), accepted_total)

        # Bookkeeping and completions.
        touched = np.concatenate((dec, pre))
        log.emitted[self.rid[touched]] = self.emitted[touched]
        fin = touched[self.emitted[touched] >= self.output[touched]]
        if len(fin):
            frids = self.rid[fin]
            log.finished_at[frids] = now
            self.kv.release(fin)
            for s in fin.tolist():
                self._vacate(s)
            self.outstanding_requests -= len(fin)
            self.outstanding_tokens -= int(
                (self.table.prompt_tokens[frids] + self.table.output_tokens[frids]).sum()
            )
        return total_emitted, accepted_total, drafted

    def _price_decode(self, widths: np.ndarray, context: np.ndarray) -> float:
        """Seconds of the decoding part of an iteration with these shapes (adaptive policy)."""
        draft_s, verify_s, _ = self.pricer.price(
            context, widths, 1 + tree_nodes(widths), _EMPTY, _EMPTY
        )
        return draft_s + verify_s
