"""A replica: one copy of the target (and draft) model serving a queue of requests.

The replica owns the per-sequence state of its running batch as numpy arrays indexed by
slot (no Python object per sequence or per token) and runs one SimPy process, ``run``: each
loop is one iteration -- the scheduler forms the batch (``sim.scheduling``, in the order the
scenario names), the policy shapes the drafts, the cost model prices draft passes plus one
target pass, one ``env.timeout`` lets that time pass, then ``sim.step.advance`` draws every
decoding sequence's accepted depth at once and moves the state on (lecture §3.1: emit
accepted + 1, roll the KV back to what was kept).
"""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import replace

import numpy as np
import simpy

from sim import async_scheduling, gate, steady, steady_kernel, steady_walk
from sim.drafters import EAGLE_TYPE, input_slots, lookahead_slots
from sim.engine_path import AUTO, EnginePath
from sim.kernels import rules
from sim.kv import BlockManager
from sim.log import RequestTable, RunLog
from sim.offload import Loads
from sim.prefix_cache import PrefixCachingBlockManager
from sim.pricing import IterationPricer
from sim.recv import RecvInterval
from sim.router import pass_iterations
from sim.scheduling import ORDERS, SchedulerLimits
from sim.scheduling.prefill_first import INIT_NEW_TOKEN_RATIO
from sim.slots import (
    ADMIT,
    BLOCKS,
    CACHED,
    COUNTS,
    EMITTED,
    FILLED,
    KV,
    N_COLS,
    OUTPUT,
    RESUMED,
    RID,
    SPEC_OFF,
    STREAM,
    TARGET,
)
from sim.step import advance, draft_sync

_EMPTY = np.zeros(0, dtype=np.int64)


class Replica:
    """One serving replica: a waiting queue, a batch of slots, a KV pool and a loop.

    ``draft_sync`` (``every_step`` | ``catch_up``) says when the draft ingests the tokens of
    iterations it did not draft for (see ``sim.step``); ``overlap`` runs the draft on its
    own GPU ahead of the verify (PEARL-style, chains only, see ``sim.pricing``).
    """

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
        draft_sync: str = "every_step",
        overlap: bool = False,
        drafter=None,
        path: EnginePath = AUTO,
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
        self.draft_sync = draft_sync
        self.overlap = overlap
        self.path = path  # the fast paths it may take (sim.engine_path); never its records
        self._looked = 0  # stretches and walks looked for before the kernels (steady.use_kernels)
        self.plan = ORDERS[limits.order]
        # SGLang's share of its running requests' remaining output it reserves KV for when
        # it admits (prefill_first only; sim.scheduling.prefill_first)
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.drafter = drafter  # ``sim.drafters.Drafter`` or None (a plain draft model)
        # KV slots reserved for the next verify (vLLM's num_lookahead_tokens/slots): only
        # model-based drafters reserve them
        self.lookahead = lookahead_slots(drafter, policy)
        # the step's token budget and the input slots each scheduled request takes from it
        # beside its tokens (vLLM's max_num_new_slots_for_drafting; SchedulerLimits.step_budget)
        self.step_tokens, self.draft_slots = limits.step_budget(
            input_slots(drafter, policy.uses_draft, policy.max_depth))
        self.v1 = limits.v1.copy()  # vLLM v1's rules as the kernels take them
        self.v1[rules.DRAFT_SLOTS] = self.draft_slots
        # placeholder drafts of a one-token admission (rules.padding): vLLM's
        # num_speculative_tokens, the policy's most draft tokens per verify; none under a
        # batch ladder (vLLM pads only without its dynamic_sd_lookup)
        self.pad_tokens = int(policy.max_nodes) if policy.uses_draft \
            and getattr(policy, "pads_admissions", True) and limits.pads_admissions else 0
        self.v1[rules.PAD_TOKENS] = self.pad_tokens
        # vLLM's num_speculative_tokens, what an asynchronous load's reservation counts a
        # speculative step by (load_reserve)
        self.spec_tokens = int(policy.max_nodes) if policy.uses_draft else 0
        self.grammar = None  # sim.grammar.GrammarState: requests under a grammar
        self.proposal_rate = getattr(drafter, "proposal_rate", None)
        self.cpu_s_per_seq = getattr(drafter, "cpu_s_per_seq", 0.0)
        # a lookup drafter's matches are drawn apart from the acceptance draws
        self.propose_rng = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0]) \
            if self.proposal_rate is not None else None
        self.sticky_off = bool(getattr(policy, "sticky", False))
        n = limits.max_num_seqs
        # with a CPU tier (sim.offload), as many rows again past the slots: each holds a
        # loading request's blocks in the pool (vLLM allocates them as the load starts)
        holds = n if limits.offload is not None else 0
        rows = n + holds
        # All per-slot state in one int64 [slots, N_COLS] array, so that a batch's rows are
        # gathered and scattered with one fancy-index operation each; named column views.
        self.state = np.zeros((rows, N_COLS), dtype=np.int64)
        st = self.state
        self.rid, self.target_prefill, self.prefilled = st[:, RID], st[:, TARGET], st[:, FILLED]
        self.emitted, self.kv_tokens, self.output = st[:, EMITTED], st[:, KV], st[:, OUTPUT]
        self.stream = st[:, STREAM]
        # [slots, N_COUNTERS], written to the log when a request leaves
        self.counters = st[:, COUNTS:]
        # with prefix caching, the pool keeps prompt blocks by content (sim.prefix_cache)
        eagle_type = policy.uses_draft and drafter is not None \
            and drafter.method in EAGLE_TYPE
        self.prefix = make_prefix_cache(table, limits, kv_capacity_blocks, rows,
                                        st[:, BLOCKS], eagle_type)
        if self.prefix is not None and path.fast:  # its helpers as the walk compiled them
            self.prefix.helpers = steady_kernel.fast  # (the reference path keeps Python's)
        self.kv = self.prefix or BlockManager(kv_capacity_blocks, limits.block_size, n,
                                              blocks=st[:, BLOCKS],
                                              rolls_back=limits.rolls_back)
        self.last_chunk_at = np.zeros(rows)  # when each slot last emitted (ITL)
        # how many requests the step that last scheduled each slot scheduled (what a batch
        # ladder keyed on it reads: vLLM drafts a request's next verify at the end of it)
        self.scheduled_in = np.zeros(rows, dtype=np.int64)
        self.active = np.zeros(rows, dtype=bool)
        self._order: np.ndarray | None = None  # running_order's answer until it changes
        self._free_slots = list(range(n - 1, -1, -1))
        self.n_active = 0
        self._admitted = 0  # admission counter: the ``running`` order of vLLM v1
        self.waiting: deque[int] = deque()
        # SGLang's --scheduler-recv-interval: submitted requests its loop has not read yet
        # (sim.recv); None: every loop reads
        self.recv = RecvInterval(limits.recv_interval) if limits.recv_interval > 1 else None
        # a decode replica of a P/D deployment (sim.disagg.DecodeReplica): requests whose
        # prompt KV is on a prefill replica, those of them holding blocks while it loads
        # (vLLM's kv_holding_waiting, in order) and those whose load has finished
        self.remote: dict = {}
        self.holding: deque[int] = deque()
        self.loaded: set[int] = set()
        # async scheduling (sim.async_scheduling): steps in flight that will sample a token
        # for each slot (vLLM's num_output_placeholders > 0), and whether the last
        # scheduling preempted
        self.sampling = np.zeros(rows, dtype=np.int64)
        # and the tokens in flight that no output has confirmed (a verify's, placeholder
        # drafts): counted in KV but not cached by a preemption
        self.unconfirmed = np.zeros(rows, dtype=np.int64)
        self.last_preempted = False
        # preempted request -> (tokens it had emitted, its counters, speculation off, last
        # chunk time): carried back to the queue
        self._resume: dict[int, tuple[int, np.ndarray, int, float]] = {}
        self.outstanding_requests = 0
        self.outstanding_tokens = 0
        self._wake: simpy.Event | None = None
        self.on_finish = None  # called with the ids of finished requests (closed loops)
        self.feed = None  # sim.router.ArrivalFeed: its arrivals known ahead (sim.cluster)
        self.loop = None  # sim.router.ClosedLoop: one that sends to this replica alone
        # a router reads the pool while an iteration runs: a walk ends before an iteration
        # an event would come in (sim.cluster, for Dynamo's KV router)
        self.strict_walk = False
        self.peers: list = []  # the other replicas behind its router (sim.cluster)
        self.stall_limit = stall_limit(table, limits, self.stages)
        self._stalled = 0  # iterations in a row that emitted no token
        if hasattr(policy, "price"):
            policy.price = self._price_decode
        if hasattr(policy, "price_chains"):
            policy.price_chains = self._price_decode_chains
        walk = steady_walk.params(self)  # the compiled walk's arguments, or why it never walks
        # the fast paths it can take: None, else why not (sim.gate, asked once)
        self._off = {"steady": gate.steady(self),
                     "walk": walk if isinstance(walk, str) else None}
        # the compiled stretch's timing parameters (sim.steady_kernel), or None: no stretch
        self._steady_params = None
        if self._off["steady"] is None:
            self._steady_params = steady.kernel_params(self)
            if self._steady_params is None:
                self._off["steady"] = steady.NOT_PRICED
        # a CPU tier below the prefix cache and its loads (sim.offload), or None
        self.offload = Loads(self, limits.offload, n, holds) if holds else None
        self._steady = self._off["steady"] is None  # sim.steady: several iterations at once
        self._steady_kernel = None  # the compiled stretch, once it uses it
        self._walk = walk if isinstance(walk, tuple) else None
        self._walk_kernel = None  # and the compiled walk, once it uses it
        self._walk_gaps = None  # and its buffer of inter-token gaps (steady_walk._gaps)
        self._walk_log = None  # and its prefix cache's undo log (steady_walk._prefix)
        self._walk_tlog = None  # and its CPU tier's
        self._walk_stages = None  # and its pipeline stages' prices (steady_walk)
        self.compiled_iterations = 0  # iterations the compiled kernels formed (the rest: not)
        self.step_s = 0.0  # how long its last iteration ran (steady_walk.plan's guess)
        self.process = env.process(self.run())

    def fast_paths(self) -> dict[str, str | None]:
        """Each fast path and why this replica never takes it (``sim.gate``; None: it takes
        it where an iteration allows; a walk without an arrival feed -- replicas behind a
        router that reads their load, a closed loop over several replicas -- stops at each
        arrival)."""
        return dict(self._off)

    def keep_off_steady(self, why: str) -> None:
        """Take no steady stretch (``why``: ``sim.gate.router``'s reason)."""
        self._off["steady"] = self._off["steady"] or why
        self._steady = False

    def keep_off_fast_paths(self, why: str) -> None:
        """Take no compiled path at all (``why``: what keeps it off, as ``fast_paths``
        says)."""
        self.keep_off_steady(why)
        self._walk = None
        self._off["walk"] = self._off["walk"] or why

    @property
    def walks(self) -> bool:
        """Whether the compiled walk can compute this replica's iterations, several at a
        time past its arrivals (``sim.steady_walk``, with an arrival feed or a closed loop
        that sends to it alone)."""
        return self._walk is not None and (self.feed is not None or self.loop is not None)

    # -- the router's side ------------------------------------------------------------
    def submit(self, rid: int) -> None:
        """Queue request ``rid`` here (held until a loop reads it, under a recv interval:
        ``poll``) and wake the loop if it is idle."""
        self.accept(rid)
        (self.waiting if self.recv is None else self.recv.pending).append(rid)
        self.wake()

    def accept(self, rid: int) -> None:
        """Count request ``rid`` as this replica's (what a router reads of its load)."""
        self.log.replica[rid] = self.index
        self.outstanding_requests += 1
        tab = self.table
        self.outstanding_tokens += tab.prompt_tokens.item(rid) + tab.output_tokens.item(rid)

    # -- the scheduler's side ---------------------------------------------------------
    def schedulable(self) -> np.ndarray:
        """bool [slots]: running sequences the scheduler may put in the next batch. Under
        async scheduling not those whose step in flight is sure to write their last token
        (vLLM's ``Scheduler.schedule`` skips them; ``sim.async_scheduling``)."""
        if not self.limits.async_scheduling:
            return self.active
        return self.active & ~((self.sampling > 0) & (self.output - self.emitted <= 1))

    def running_order(self, schedulable: np.ndarray | None = None) -> np.ndarray:
        """int64 [R]: every running slot in priority order, the front first (the preemption
        order): by admission for ``vllm_v1`` (its ``running`` list), by arrival for
        ``decode_first`` and ``prefill_first``. ``schedulable`` (the schedulable slots
        oldest request first) is returned as is when it is every running slot."""
        run = self._order
        if run is None:  # re-sorted only after an admission, preemption or finish
            run = self.active.nonzero()[0]
            key = self.state[run, ADMIT] if self.limits.order == "vllm_v1" else self.rid[run]
            run = self._order = run[key.argsort(kind="stable")]
            run.flags.writeable = False  # shared by the calls until the next change
        if schedulable is not None and len(schedulable) == len(run):
            return schedulable
        return run

    def form_batch(self):
        """The scheduler's next batch (``self.plan``, its order's ``plan_<order>``); the
        slots it schedules remember its size (``scheduled_in``)."""
        batch = self.plan(self)
        if self.grammar is not None:  # the grammar's draws for its decoders (sim.grammar)
            batch = self.grammar.attach(batch)
        size = len(batch.dec_slots) + len(batch.pre_slots)
        if size:
            self.scheduled_in[batch.dec_slots] = size
            self.scheduled_in[batch.pre_slots] = size
            if self.recv is not None:  # what the next loop's read counts (sim.recv)
                self.recv.ran(len(batch.pre_slots) > 0)
        return batch

    def draft_shapes(self, dec: np.ndarray, context: np.ndarray,
                     history: np.ndarray) -> np.ndarray:
        """The shapes the scheduler sees for decoding slots ``dec``: int64 [m] for all, or
        [D, m] -- the policy's (``policy_shapes``), cut where the engine drops the drafts a
        grammar forbids (``sim.grammar``)."""
        row = self.policy_shapes(dec, context, history)
        if self.grammar is not None and len(dec):
            row = self.grammar.shapes(self, dec, row)
        return row

    def policy_shapes(self, dec: np.ndarray, context: np.ndarray,
                      history: np.ndarray) -> np.ndarray:
        """The policy's shapes for decoding slots ``dec``: int64 [m] for all, or [D, m].

        With a sticky policy (vLLM v0's disable-by-batch-size), a request it once gave no
        draft never drafts again: its row is zeros from then on."""
        row = self.policy.shape(len(dec), context, history, running=self.n_active,
                                scheduled=self.scheduled_in[dec])
        if self.proposal_rate is not None and len(dec) and (row > 0).any():
            row = self._proposals(row, len(dec))
        if not self.sticky_off or not len(dec):
            return row
        off = self.state[dec, SPEC_OFF].astype(bool)  # [D]
        depth = (row > 0).sum(axis=-1)  # scalar or [D]
        self.state[dec[~off & (depth == 0)], SPEC_OFF] = 1
        if not off.any() or not depth.any():
            return row
        rows = np.array(np.broadcast_to(row, (len(dec), row.shape[-1])))  # [D, m]
        rows[off] = 0
        return rows

    def _proposals(self, row: np.ndarray, n: int) -> np.ndarray:
        """A lookup drafter proposes only for the sequences that find a match this step."""
        found = self.propose_rng.random(n) < self.proposal_rate  # [D]
        if found.all():
            return row
        rows = np.array(np.broadcast_to(row, (n, row.shape[-1])))  # [D, m]
        rows[~found] = 0
        return rows

    def prefill_target_of(self, rid: int) -> int:
        """Tokens to prefill for ``rid``: its prompt, plus what it emitted before a preemption."""
        back = self._resume.get(rid)
        return int(self.table.prompt_tokens[rid]) + (back[0] if back else 0)

    def admit(self, rid: int, target: int, cached: int = 0) -> int:
        """Give waiting request ``rid`` a slot at the back of the running order; its first
        ``cached`` tokens were found in the prefix cache (its prefill starts after them)."""
        s = self._free_slots.pop()
        self.active[s] = True
        self._order = None
        row = self.state[s]
        row[RID], row[TARGET] = rid, target
        row[FILLED] = row[KV] = cached
        self._admitted += 1
        row[ADMIT] = self._admitted
        back = self._resume.pop(rid, None)
        if back is None:  # first admission (a preempted request was scheduled before)
            self.log.first_scheduled_at[rid] = self.env.now
            row[CACHED] = cached  # vLLM's num_cached_tokens: set once, when first scheduled
        else:
            row[EMITTED] = back[0]
            row[COUNTS:] = back[1]
            row[SPEC_OFF], row[RESUMED] = back[2], 1
            self.last_chunk_at[s] = back[3]
        row[OUTPUT] = self.table.output_tokens[rid]
        row[STREAM] = self.table.stream[rid]
        self.n_active += 1
        return s

    # -- KV loads: a CPU tier's (sim.offload); a P/D decode replica overrides them ----
    def start_load(self, rid: int, hit: int = 0, idle: int = 0, more: int = 0) -> bool:
        """Hold blocks for waiting request ``rid``: its ``hit`` GPU prefix blocks
        (``idle`` of them unreferenced) and ``more`` blocks found in the CPU tier, and start
        loading those; False (nothing done) where they do not fit beside what the requests
        still prefilling need (``load_reserve``, ``sim.offload.Loads.start``)."""
        return self.offload.start(rid, self.prefill_target_of(rid), hit, idle, more)

    def load_reserve(self, holds) -> int:
        """Blocks an asynchronous KV load must leave free (vLLM 0.33's
        ``Scheduler.schedule``: ``_inflight_prefill_reserved_blocks`` and
        ``_spec_decode_step_blocks``): for every request still prefilling -- ``holds``,
        (tokens, blocks held) of each holding blocks while its KV loads or once loaded, and
        every running one short of its prompt -- the blocks it needs to hold its whole
        sequence and a speculative step, and the load's own speculative step; a step is
        1 + K + K lookahead tokens where K drafts are verified (none without
        speculation)."""
        bs = self.limits.block_size
        spec = 1 + self.spec_tokens + self.lookahead if self.spec_tokens else 0
        reserved = int(rules.blocks_for(spec, bs)) + sum(
            int(rules.blocks_for(tokens + spec, bs)) - held for tokens, held in holds)
        run = (self.active & (self.prefilled < self.target_prefill)).nonzero()[0]
        if len(run):
            reserved += int(np.add.reduce(
                rules.blocks_for(self.target_prefill[run] + spec, bs) - self.kv.blocks[run]))
        return reserved

    def kv_arrived(self, rid: int) -> None:
        """``rid``'s KV is here: the next scheduling step may admit it."""
        self.loaded.add(rid)
        self.wake()

    def release_hold(self, rid: int) -> int:
        """Loaded request ``rid``'s blocks are cached on the GPU; returns its computed
        tokens (its blocks stay in its hold row: ``held_blocks``)."""
        return self.offload.release(rid)

    def hold_again(self, rid: int) -> None:
        """Undo ``release_hold`` (its admission did not fit): nothing to undo here."""

    def unhold(self, rid: int) -> None:
        """``rid`` is admitted: it waits no more."""
        self.holding.remove(rid)
        self.loaded.discard(rid)

    def held_blocks(self, rid: int) -> int:
        """Blocks loaded request ``rid`` brings to its admission (0: none; a P/D decode
        replica's go back to the pool first)."""
        return 0 if self.offload is None else self.offload.held(rid)

    def take_hold(self, rid: int, slot: int) -> None:
        """Give admitted request ``rid``'s held blocks to its ``slot``; its
        ``cached_tokens`` are its GPU hit's (its CPU hit is the tier's record)."""
        gpu = self.offload.take(rid, slot)
        if not self.state[slot, RESUMED]:
            self.state[slot, CACHED] = gpu

    def preempt(self, s: int) -> None:
        """Preempt by recompute: free the slot and its blocks, requeue at the front (with
        prefix caching its full committed blocks are cached first, so its recompute can
        start after those still cached when it is re-admitted, as in vLLM v1)."""
        rid = int(self.rid[s])
        self.counters[s, 5] += 1  # preemptions
        self._resume[rid] = (int(self.emitted[s]), self.counters[s].copy(),
                             int(self.state[s, SPEC_OFF]), float(self.last_chunk_at[s]))
        if self.prefix is not None:  # its committed blocks stay findable until evicted
            # (under async scheduling not the tokens of a verify in flight: vLLM caches
            # only tokens an output has confirmed)
            self.prefix.keep_committed(s, rid, int(self.kv_tokens[s] - self.unconfirmed[s]),
                                       int(self.table.prompt_tokens[rid] + self.emitted[s]))
        self.kv.release(s)
        self.state[s] = 0
        self.sampling[s] = self.unconfirmed[s] = 0
        self._vacate(s)
        self.waiting.appendleft(rid)

    def _vacate(self, s: int) -> None:
        self.active[s] = False
        self._order = None
        self._free_slots.append(s)
        self.n_active -= 1

    # -- the loop ---------------------------------------------------------------------
    def run(self):
        """The replica's process: one SimPy timeout per iteration."""
        if self.limits.async_scheduling:  # the next step scheduled while one runs
            yield from async_scheduling.run(self)
            return
        env = self.env
        while True:
            self.poll()
            if self.n_active == 0 and not self.waiting and not self.loaded:
                yield from self._sleep()
                continue
            if self._steady or self._walk is not None:  # several iterations at once
                fn = steady_walk.compiled(self)
                # a walk that sees the arrivals ahead covers the steady stretches too
                if self._steady and (fn is None or (self.feed is None and self.loop is None)):
                    stretch = steady.plan(self)
                    if stretch is not None:
                        yield from self._pass_stretch(stretch)
                        continue
                walk = steady_walk.plan(self, fn) if fn is not None else None
                if walk is not None:  # iterations that admit, prefill or speculate
                    self.compiled_iterations += walk.k
                    yield from steady_walk.run(self, walk)
                    continue
            start_at = env.now
            # every running sequence decodes before this batch (steady.plan_admitted)
            decoding = self._steady and steady.all_decoding(self)
            batch = self.form_batch()  # the scheduler (sim.scheduling)
            if batch.empty:
                if batch.preempted:  # vLLM v1 admits nobody in the step that preempted
                    self.check_progress(0)
                    continue
                if len(self.loaded) < len(self.holding):  # a KV load in flight wakes it (P/D)
                    yield from self._sleep()
                    continue
                raise RuntimeError(f"replica {self.index}: nothing schedulable with work queued")
            draft_s, verify_s, bound = self.price(batch)
            if decoding:  # admissions that leave the batch steady after them
                stretch = steady.plan_admitted(self, batch, start_at, draft_s, verify_s, bound)
                if stretch is not None:
                    yield from self._pass_stretch(stretch)
                    continue
            yield env.timeout(draft_s + verify_s)
            self.finish_iteration(batch, start_at, draft_s, verify_s, bound)

    def poll(self) -> None:
        """What the scheduler's loop does before it forms a step, besides the step: under a
        recv interval, read the requests submitted since the last read where SGLang's loop
        would (``sim.recv``); nothing else here (a P/D decode replica of SGLang's flow takes
        its queues, ``sim.pd_sglang``)."""
        if self.recv is not None:
            idle = self.n_active == 0 and not self.waiting and not self.loaded
            self.waiting.extend(self.recv.receive(idle))

    def _sleep(self):
        """Wait until ``submit`` (or a finished KV load, ``sim.disagg``) wakes the loop."""
        self._wake = self.env.event()
        yield self._wake
        self._wake = None

    def wake(self) -> None:
        """Wake the loop if it sleeps."""
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _pass_stretch(self, stretch):
        """Let a steady stretch's iterations pass (``pass_iterations``: it ends before
        anyone else's next event), then write it (and the iteration it hands on to, if
        any)."""
        while stretch is not None:
            delays = stretch.delays()
            self.compiled_iterations += len(delays)
            yield from pass_iterations(self.env, delays)
            if delays:
                self.step_s = delays[-1]
            steady.apply(self, stretch)
            stretch = stretch.then

    def price(self, batch) -> tuple[float, float, str]:
        """(draft_s, verify_s, bound) of ``batch`` (draft_s: drafting on the critical path)."""
        drafted = batch.drafted  # the shapes drafted, where a grammar cut the verify's
        sync, ready = draft_sync(self, batch if drafted is None else
                                 replace(batch, row=drafted))
        draft_s, verify_s, bound = self.pricer.price(
            batch.row, batch.dec_context, batch.pre_context, batch.priced_chunks, sync=sync,
            ready=ready, draft_pre=self.draft_pre(batch), drafted=drafted)
        if self.cpu_s_per_seq and self.policy.uses_draft:  # CPU drafting, every sequence
            draft_s += self.cpu_s_per_seq * len(batch.dec_slots)
        return draft_s, verify_s, bound

    def draft_pre(self, batch):
        """(context, chunk) int64 [P] the draft prefills this iteration where they are not
        the target's (``IterationPricer.price``): None here (``sim.disagg``)."""
        return None

    def finish_iteration(self, batch, start_at: float, draft_s: float, verify_s: float,
                         bound: str) -> None:
        """Apply a finished iteration and record it."""
        self.step_s = self.env.now - start_at
        emitted, accepted, drafted, prefill = advance(self, batch)
        self.check_progress(emitted)
        self.log.iterations.append(
            self.index, start_at, self.env.now - start_at,
            len(batch.dec_slots) + len(batch.pre_slots), len(batch.dec_slots), prefill,
            batch.verify_tokens, drafted, accepted, emitted, draft_s, verify_s, bound,
            self.kv.used_blocks,
        )

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

    def finish(self, fin: np.ndarray, now: float | np.ndarray) -> None:
        """Record and free finished sequences (``now``: when they finished, one time for
        all or float64 [F], one each)."""
        self.retire(fin, self.state[fin], now)

    def retire(self, fin: np.ndarray, st: np.ndarray, now: float | np.ndarray,
               freed: bool = False, notify: bool = True) -> None:
        """``finish`` the slots ``fin`` whose rows were ``st`` ([F, N_COLS]) when they
        finished (``sim.steady_walk``: rows it kept apart from the state; ``freed``: whose
        blocks it has cached and freed in the prefix cache already; ``notify`` False:
        ``on_finish`` was told of them as they finished)."""
        rids = st[:, RID]
        log = self.log
        log.finished_at[rids] = now
        log.emitted[rids] = st[:, EMITTED]
        log.counts[rids] = st[:, COUNTS:]  # [F, N_COUNTERS]
        if self.prefix is not None and not freed:  # its full blocks of computed tokens
            tokens = self.table.prompt_tokens[rids] + st[:, EMITTED] - 1
            for s, rid, n in zip(fin.tolist(), rids.tolist(), tokens.tolist(), strict=True):
                self.prefix.keep_committed(s, rid, n)
                if self.offload is not None:  # its CPU blocks ranked anew
                    self.offload.finished(s, rid)
        self.state[fin] = 0  # blocks and counters back to zero for the next tenant
        if not freed:
            self.kv.free_slots(fin, st[:, BLOCKS])
        self.active[fin] = False
        self._order = None
        self._free_slots.extend(fin.tolist())
        self.n_active -= len(fin)
        self.outstanding_requests -= len(fin)
        if notify and self.on_finish is not None:
            self.on_finish(rids)
        tab = self.table
        self.outstanding_tokens -= int(np.add.reduce(tab.prompt_tokens[rids])
                                       + np.add.reduce(st[:, OUTPUT]))

    def flush_running(self) -> None:
        """At the horizon: write what running and preempted requests have done so far."""
        log = self.log
        slots = self.active.nonzero()[0]
        rids = self.rid[slots]
        log.emitted[rids] = self.emitted[slots]
        log.counts[rids] = self.counters[slots]  # [n, N_COUNTERS]
        for rid, (emitted, counters, _, _) in self._resume.items():
            log.emitted[rid] = emitted
            log.counts[rid] = counters

    def _price_decode(self, row: np.ndarray, context: np.ndarray) -> float:
        """Seconds of the decoding part of an iteration with this shape (adaptive policy)."""
        draft_s, verify_s, _ = self.pricer.price(row, context, _EMPTY, _EMPTY, bound=False)
        return draft_s + verify_s

    def _price_decode_chains(self, context: np.ndarray, depth: int) -> list[float]:
        """``_price_decode`` of ``chain(γ, depth)`` for γ = 0..depth, at once (the same
        floats; ``IterationPricer.decode_chain_seconds``)."""
        return self.pricer.decode_chain_seconds(context, depth)


def make_prefix_cache(table: RequestTable, limits: SchedulerLimits, capacity_blocks: int,
                      n_slots: int, blocks: np.ndarray, eagle_type: bool = False
                      ) -> PrefixCachingBlockManager | None:
    """The replica's prefix-caching KV pool, or None when ``limits.prefix_caching`` is off.
    Without block keys in ``table`` every prompt block is its own (only a request resumed
    after a preemption can hit its own prompt). ``eagle_type``: an EAGLE-type drafter
    speculates (``limits.drops_eagle_block``)."""
    if not limits.prefix_caching:
        return None
    keys, starts = table.block_keys, table.block_starts
    if keys is None:  # (their keys are their places: no array of them)
        starts = _implicit_starts(table, limits.block_size)
        keys = starts[:0]
    elif not np.array_equal(np.diff(starts), table.prompt_tokens // limits.block_size):
        raise RuntimeError(f"block keys were made for another block size than "
                           f"{limits.block_size}")
    # the most blocks a slot caches: its committed tokens', at most its prompt and output
    width = int(((table.prompt_tokens + table.output_tokens) // limits.block_size).max()) \
        if len(table) else 1
    return PrefixCachingBlockManager(capacity_blocks, limits.block_size, n_slots, keys,
                                     starts, blocks=blocks, rolls_back=limits.rolls_back,
                                     unhashed_first=limits.unhashed_first,
                                     drop_last_hit=eagle_type and limits.drops_eagle_block,
                                     next_token_hash=eagle_type and limits.hashes_next_token,
                                     width=width)


_STARTS: list = [None, 0, None]  # weak references: the table, (block size), its starts


def _implicit_starts(table: RequestTable, block_size: int) -> np.ndarray:
    """int64 [N + 1]: where each request's prompt blocks start in a table without block
    keys, made once for all the replicas of a run (each one's pool reads it, none writes
    it: at 8 replicas and a million requests, 56 MB kept once instead of 8 times). A
    request table is never changed once made (a frozen dataclass whose arrays nobody
    writes); one slot: pools of another block size make their own."""
    ref, size, kept = _STARTS
    starts = kept() if ref is not None and ref() is table and size == block_size else None
    if starts is None:
        starts = np.zeros(len(table) + 1, dtype=np.int64)
        np.cumsum(table.prompt_tokens // block_size, out=starts[1:])
        _STARTS[:] = [weakref.ref(table), block_size, weakref.ref(starts)]
    return starts


def stall_limit(table: RequestTable, limits: SchedulerLimits, stages: int = 1) -> int:
    """How many iterations in a row may emit no token before the replica is declared live-
    locked: stages × (2·⌈L / c⌉ + 100), L the longest request (prompt + output tokens, the
    most a recompute can prefill), c the prefill chunk (L without chunked prefill).

    Why it cannot fire on a live run: an iteration with a decoding sequence emits a token, so
    a run without emission only prefills, and the front request of the running order gets
    the first share of the token budget (at least one chunk); it can be preempted only by
    itself, when it does not fit the KV pool alone, which ``sim.build`` refuses. So it emits
    within ⌈L / c⌉ of its iterations, and with ``stages`` micro-batches in flight it is in at
    least one of every ``stages`` iterations.
    """
    longest = int((table.prompt_tokens + table.output_tokens).max()) if len(table) else 1
    chunk = limits.chunk_tokens if limits.chunked_prefill else longest
    return stages * (2 * -(-longest // max(chunk, 1)) + 100)
