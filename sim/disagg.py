"""Disaggregated prefill and decode (xPyD): two pools of replicas and the KV between them.

A request arrives at the prefill pool (``deployment.router`` picks the replica), is
prefilled there as a request of one output token (vLLM's P/D proxy sends the prefill
instance ``max_tokens`` 1 and drops its token), and is handed to a decode replica
(``disaggregation.decode_router``). The decode replica follows vLLM 0.33's NixlConnector
flow (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule`` and
``_update_waiting_for_remote_kv``):

- when its scheduler reaches the request in the waiting queue it allocates blocks for the
  whole prompt, if they fit beside the request's first verify (else it admits nobody
  further, first come first served), and starts loading the KV; the request holds those
  blocks but takes no slot of the running batch and none of the step's tokens;
- the load ends after the transfer (below); at the next scheduling step the request is
  admitted before any waiting request (vLLM drains ``kv_holding_waiting`` first) with all
  but its last prompt token computed: that token is recomputed to sample the first output
  token, on the decode replica (its TTFT);
- preempted there, it recomputes its prompt and output there (the remote KV is gone).

**The transfer.** Each GPU's share of the KV crosses ``disaggregation.link`` (default: the
GPUs' ``node_link``, a NIC per GPU) at once, so a prompt of n tokens takes
``latency_s + n × max(b_P, b_D) / bytes_per_s``, b_P and b_D the KV bytes per token on one
GPU of a prefill and of a decode replica (the pool with fewer GPUs sends or receives more
per NIC). A transfer holds its prefill replica's NICs and its decode replica's: transfers
from or to one replica queue first come first served; others run side by side.

**Speculation.** Both pools run the variant's drafter (vLLM refuses to pair prefill and
decode workers whose model-based speculation differs, vllm-project/vllm PR #49230). The
prefill pool never verifies (one output token), so its K is moot; it runs the drafter
over the prompt. With ``draft_kv: transfer`` the draft's KV per token crosses with the
target's; with ``recompute`` it does not, and the request's first iteration on the decode
replica runs the draft over its whole prompt before drafting (vLLM with Gemma-4's MTP
drafter, vllm-project/vllm issue #54926), which shows in that iteration's ``draft_s``, in
the TTFT, and in the request's ``draft_prefill_tokens`` (``transfers.csv``).

**SGLang's flow** (``PdSetup.flow``: ``sglang``) is ``sim.pd_sglang``'s: the decode
replica allocates first, the KV leaves chunk by chunk and the first token rides along;
``PdRun`` holds the hand-offs of both flows.

**Not modelled (departures).** vLLM's prefill replica keeps a request's blocks until the
decode side has read them (NIXL's delayed free); SpecSim frees them when the prefill ends.
TensorRT-LLM's disaggregated serving runs as vLLM's flow. No layer-wise overlap of the transfer
with the prefill, no prefix caching on the decode pool (the prefill pool has the
scenario's), no pipeline stages or async scheduling. P/D runs take the reference engine
path (no compiled walk); a closed loop's users send to the prefill pool and wait for the
decode replica to finish.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import simpy

from hardware.kv_transfer import kv_transfer_s
from sim.kernels.rules import blocks_for
from sim.log import RunLog
from sim.pd_sglang import SglangDecodeReplica, SglangPrefillReplica
from sim.records import Records, TransferRecord, field_names
from sim.replica import Replica
from sim.router import Router, arrivals, closed_loop
from sim.slots import COUNTS

# why a P/D replica takes no compiled fast path (``specsim bench`` and ``fast_paths``)
REFERENCE_ONLY = "prefill/decode disaggregation runs on the reference path"


@dataclass(frozen=True)
class Link:
    """The link a replica's GPUs send or receive KV over, one per GPU."""

    id: str
    bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class PdSetup:
    """The P/D half of a decode pool's ``sim.cluster.Setup``: the prefill pool's Setup, the
    link, and the per-GPU KV bytes per token of each pool (the draft's included where its
    KV is transferred)."""

    prefill: object  # sim.cluster.Setup of the prefill pool
    link: Link
    prefill_bytes_per_token: float
    decode_bytes_per_token: float
    draft_kv: str = "transfer"
    decode_router: str = "least_requests"
    decode_gpus: int = 1  # GPUs of a decode replica (the bytes it receives)
    flow: str = "vllm"  # whose hand-off: vllm (this module) or sglang (sim.pd_sglang)

    def transfer_s(self, tokens: int) -> float:
        """Seconds the KV of ``tokens`` prompt tokens takes on the link (module notes)."""
        return kv_transfer_s(tokens, self.prefill_bytes_per_token,
                             self.decode_bytes_per_token, self.link.bytes_per_s,
                             self.link.latency_s)

    def kv_bytes(self, tokens: int) -> float:
        """Bytes of the KV of ``tokens`` tokens a decode replica receives (on all its
        GPUs)."""
        return tokens * self.decode_bytes_per_token * self.decode_gpus


@dataclass(frozen=True)
class Incoming:
    """A prefilled request on its way to a decode replica."""

    src: int  # its prefill replica
    tokens: int  # prompt tokens whose KV it brings
    counters: np.ndarray  # its counters on the prefill replica
    first_scheduled_at: float


class TransferLog:
    """Per request: where it was prefilled and decoded, and when its KV moved."""

    def __init__(self, n: int) -> None:
        nan = np.full(n, np.nan)
        self.prefill_replica = np.full(n, -1, dtype=np.int64)
        self.decode_replica = np.full(n, -1, dtype=np.int64)
        self.prefill_done_at = nan.copy()
        self.load_start_at = nan.copy()
        self.sent_at = nan.copy()
        self.kv_ready_at = nan.copy()
        self.kv_bytes = np.zeros(n)
        self.draft_prefill_tokens = np.zeros(n, dtype=np.int64)
        self.transfers = np.zeros(n, dtype=np.int64)

    def records(self, arrived: int) -> Records[TransferRecord]:
        """One record per request that arrived."""
        n = arrived
        cols = (np.arange(n, dtype=np.int64), self.prefill_replica[:n],
                self.decode_replica[:n], self.prefill_done_at[:n], self.load_start_at[:n],
                self.sent_at[:n], self.kv_ready_at[:n], self.kv_bytes[:n],
                self.draft_prefill_tokens[:n], self.transfers[:n])
        return Records(TransferRecord, dict(zip(field_names(TransferRecord), cols,
                                                strict=True)))


class PrefillReplica(Replica):
    """A replica of the prefill pool: every request writes one token here (its table says
    so: ``wire``), and when it has, the request leaves for a decode replica
    (``PdRun.hand_off``)."""

    def __init__(self, *args, pd: PdRun, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.on_finish = lambda rids: pd.hand_off(self, rids)
        self.keep_off_fast_paths(REFERENCE_ONLY)


class DecodeReplica(Replica):
    """A replica of the decode pool: its requests' prompt KV comes from the prefill pool
    (the module notes: vLLM's NixlConnector flow); ``pd``: the run's hand-offs and link."""

    def __init__(self, *args, pd: PdRun, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pd = pd
        self._holds: dict[int, int] = {}  # request -> blocks it holds while its KV loads
        self._draft_prompt: dict[int, int] = {}  # slot -> prompt its draft runs (recompute)
        self.recompute_draft = pd.pd.draft_kv == "recompute" and self.policy.uses_draft \
            and self.pricer.draft is not None
        self.keep_off_fast_paths(REFERENCE_ONLY)

    def start_load(self, rid: int) -> bool:
        """Hold blocks for waiting request ``rid``'s prompt KV and start loading it; False
        (nothing done) where they do not fit. vLLM 0.33 (``Scheduler.schedule``,
        ``_inflight_prefill_reserved_blocks``, ``_spec_decode_step_blocks``) admits an
        asynchronous load only if its prompt's blocks fit in the free blocks less, for
        every request still prefilling (loading, or running short of its prompt), the
        blocks it needs to hold its whole sequence plus a speculative step, and its own
        speculative step's blocks; a step is 1 + K + K lookahead tokens where K drafts are
        verified (none without speculation)."""
        inc = self.remote[rid]
        held = int(blocks_for(inc.tokens, self.limits.block_size))
        reserved = self.load_reserve((self.remote[r].tokens, self._holds[r])
                                     for r in self.holding)
        if held + reserved > self.kv.free_blocks:
            return False
        self.kv.free_blocks -= held
        self._holds[rid] = held
        self.holding.append(rid)
        self.pd.send(rid, self)
        return True

    def release_hold(self, rid: int) -> int:
        """Give loaded request ``rid``'s held blocks back to the pool for its admission to
        take; returns its computed tokens (all but the last prompt token, recomputed to
        sample the first output token)."""
        self.kv.returned(self._holds[rid])
        return self.remote[rid].tokens - 1

    def hold_again(self, rid: int) -> None:
        """Undo ``release_hold`` (its admission did not fit)."""
        self.kv.free_blocks -= self._holds[rid]

    def unhold(self, rid: int) -> None:
        """``rid`` is admitted: it holds no blocks apart any more."""
        del self._holds[rid]
        super().unhold(rid)

    def admit(self, rid: int, target: int, cached: int = 0) -> int:
        inc = self.remote.pop(rid, None)
        s = super().admit(rid, target, cached)
        if inc is not None:  # first scheduled on its prefill replica; its counters there
            self.log.first_scheduled_at[rid] = inc.first_scheduled_at
            self.state[s, COUNTS:] = inc.counters
            if self.recompute_draft:
                self._draft_prompt[s] = target
                self.pd.log.draft_prefill_tokens[rid] = target
        return s

    def draft_pre(self, batch):
        """With ``draft_kv: recompute``, the draft runs a newly loaded request's whole
        prompt in its first iteration here: (context, chunk) of the draft's prefill."""
        if not self._draft_prompt or not len(batch.pre_slots):
            return None
        ctx, chunks = batch.pre_context.copy(), batch.priced_chunks.copy()
        for i, s in enumerate(batch.pre_slots.tolist()):
            if self._draft_prompt.pop(s, None) is not None:
                chunks[i] += ctx[i]
                ctx[i] = 0
        return ctx, chunks


class PdRun:
    """A wired P/D deployment's hand-offs and transfers."""

    reference_only = REFERENCE_ONLY  # what keeps its replicas off the compiled paths

    def __init__(self, env: simpy.Environment, pd: PdSetup, table, plog: RunLog) -> None:
        self.env = env
        self.pd = pd
        self.table = table
        self.plog = plog  # the prefill pool's log
        self.log = TransferLog(len(table))
        self.prefill: list[PrefillReplica] = []
        self.decode: list[DecodeReplica] = []
        self.router: Router | None = None  # over the decode pool, once it is wired
        # each replica's NICs: one transfer at a time from or to it
        self.egress: list[simpy.Resource] = []
        self.ingress: list[simpy.Resource] = []

    def add(self, prefill: list, decode: list) -> None:
        """The pools' replicas, once made."""
        self.prefill, self.decode = prefill, decode
        self.router = Router(decode, self.pd.decode_router)
        self.egress = [simpy.Resource(self.env, 1) for _ in prefill]
        self.ingress = [simpy.Resource(self.env, 1) for _ in decode]

    def hand_off(self, replica: PrefillReplica, rids: np.ndarray) -> None:
        """Prefilled requests ``rids`` leave ``replica`` for decode replicas (vLLM's flow:
        the decode replica is picked now and loads the KV when its scheduler reaches the
        request; SGLang's: it was picked at arrival, and the last chunk's KV leaves now)."""
        now = self.env.now
        plog, log = replica.log, self.log
        sglang = self.pd.flow == "sglang"
        for rid in rids.tolist():
            if sglang:
                d = int(log.decode_replica[rid])
            else:
                d = self.router.choose(rid)
                log.prefill_replica[rid] = replica.index
                log.decode_replica[rid] = d
            log.prefill_done_at[rid] = now
            dst = self.decode[d]
            dst.remote[rid] = Incoming(replica.index, int(self.table.prompt_tokens[rid]),
                                       plog.counts[rid].copy(),
                                       float(plog.first_scheduled_at[rid]))
            if sglang:
                self.send_chunk(rid, replica.index, replica.last_chunk(rid), last=True)
            else:
                dst.submit(rid)

    def pair(self, replica, rid: int) -> None:
        """SGLang's flow: new request ``rid`` of prefill ``replica`` is sent to a decode
        replica too, which allocates for it before the prefill may start."""
        d = self.router.choose(rid)
        self.log.prefill_replica[rid] = replica.index
        self.log.decode_replica[rid] = d
        self.decode[d].enqueue(rid)

    def allocated(self, rid: int, dst) -> None:
        """SGLang's flow: ``dst`` holds blocks for ``rid``; its prefill replica may run it."""
        self.log.load_start_at[rid] = self.env.now
        self.prefill[int(self.log.prefill_replica[rid])].bootstrapped(rid)

    def send_chunk(self, rid: int, src: int, tokens: int, last: bool = False) -> None:
        """SGLang's flow: send ``tokens`` prompt tokens' KV of ``rid`` from prefill replica
        ``src``; the decode replica has it all when the ``last`` send lands."""
        self.env.process(self._send_chunk(rid, src, tokens, last))

    def _send_chunk(self, rid: int, src: int, tokens: int, last: bool):
        env, log = self.env, self.log
        dst = self.decode[int(log.decode_replica[rid])]
        with self.egress[src].request() as out:
            yield out
            with self.ingress[dst.index].request() as into:
                yield into
                log.sent_at[rid] = env.now  # (the last send's: the one a request waits on)
                yield env.timeout(self.pd.transfer_s(tokens))
        log.kv_bytes[rid] += self.pd.kv_bytes(tokens)
        log.transfers[rid] += 1
        if last:
            log.kv_ready_at[rid] = env.now
            dst.kv_arrived(rid)

    def send(self, rid: int, dst: DecodeReplica) -> None:
        """Start moving ``rid``'s KV to ``dst``, which holds blocks for it."""
        self.env.process(self._send(rid, dst))

    def _send(self, rid: int, dst: DecodeReplica):
        env, log = self.env, self.log
        inc = dst.remote[rid]
        log.load_start_at[rid] = env.now
        with self.egress[inc.src].request() as out:
            yield out
            with self.ingress[dst.index].request() as into:
                yield into
                log.sent_at[rid] = env.now
                yield env.timeout(self.pd.transfer_s(inc.tokens))
        log.kv_ready_at[rid] = env.now
        log.kv_bytes[rid] = self.pd.kv_bytes(inc.tokens)
        log.transfers[rid] += 1
        dst.kv_arrived(rid)


def wire(env: simpy.Environment, setup, path, iteration_rows: bool):
    """``sim.cluster.wire``'s work for a P/D ``setup`` (the decode pool's, ``setup.disagg``
    the rest): (the decode pool's replicas, the arrivals' router over the prefill pool,
    the decode pool's log, the arrival count, the ``PdRun`` with the prefill pool's
    replicas and log, the request table: a closed loop's own copy)."""
    from sim.pricing import IterationPricer

    pd: PdSetup = setup.disagg
    pre = pd.prefill
    table = setup.table
    if setup.closed_loop_users:  # the users write arrival times as they send: a copy
        table = dataclasses.replace(table, arrival_at=table.arrival_at.copy())
    log = RunLog(len(table), iteration_rows, setup.kv_capacity_blocks)
    plog = RunLog(len(table), iteration_rows, pre.kv_capacity_blocks)
    seed = setup.seed

    def rng(i: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(seed.entropy,
                                                            spawn_key=(*seed.spawn_key, i)))

    run = PdRun(env, pd, table, plog)
    # a prefill replica writes one token of each request (the proxy's max_tokens 1,
    # SGLang's max_new_tokens 1): its table says so, for its scheduler's estimates too
    one = dataclasses.replace(table, output_tokens=np.ones_like(table.output_tokens))

    def replica(kind, s, i: int, lg: RunLog, stream: int, tab):
        pricer = IterationPricer(s.target_cost, s.draft, s.record_bound, False, s.spec)
        return kind(env, i, s.limits, s.kv_capacity_blocks, pricer, s.make_policy(),
                    s.acceptance, rng(stream), tab, lg, s.draft_sync, False, s.drafter,
                    path=path, pd=run)

    Decode, Prefill = ((SglangDecodeReplica, SglangPrefillReplica) if pd.flow == "sglang"
                       else (DecodeReplica, PrefillReplica))
    decode = [replica(Decode, setup, i, log, i, table) for i in range(setup.replicas)]
    prefill = [replica(Prefill, pre, j, plog, setup.replicas + j, one)
               for j in range(pre.replicas)]
    run.add(prefill, decode)
    router = Router(prefill, setup.router, setup.router_weight, setup.llm_d)
    arrived = [0]
    if setup.closed_loop_users:  # a user sends its next request when its last finishes
        closed_loop(env, setup.closed_loop_users, setup.think_s, table.arrival_at, router,
                    arrived, decode)
    else:
        env.process(arrivals(env, table.arrival_at, router, arrived))
    return decode, router, log, arrived, run, table
