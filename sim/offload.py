"""KV offload to CPU memory: a second tier below the prefix cache, as vLLM's native offload.

vLLM 0.33 (``--kv-offloading-size``, read in the PyPI wheel vllm-0.33.0) turns on its
``OffloadingConnector`` (``vllm/distributed/kv_transfer/kv_connector/v1/
offloading_connector.py``, ``offloading/scheduler.py``, ``offloading/worker.py``) over a
CPU block pool (``vllm/v1/kv_offload/cpu/manager.py``, ``cpu/spec.py``,
``cpu/policies/lru.py``, ``cpu/gpu_worker.py``). What SpecSim takes from it:

- **Size.** ``--kv-offloading-size`` is GiB of host memory for the whole engine, "summed
  across all TP ranks" (``vllm/config/cache.py``); ``CPUOffloadingSpec`` divides it into
  chunks of ``blocks_per_chunk`` (1) GPU blocks, each the KV every worker holds for one
  block, rounded up to the host page (4096 bytes): ``capacity = ⌊GiB · 2**30 /
  round_up(world_size · per-GPU block bytes, 4096)⌋`` (:func:`tier_blocks`); an MLA
  model's latent, the same on every GPU of a one-node TP group, is kept once
  (``replicated_layout``, ``offloading/config.py``).
- **Stores: as blocks are computed, not on eviction.** Every step, each scheduled request
  offers the CPU tier its full blocks of committed tokens computed so far, its prompt
  blocks found in the GPU prefix cache included (``_build_store_jobs``; the tokens it
  counts are capped at ``request.num_tokens``, so no draft token is stored, and with
  ``offload_prompt_only``, ``CPUOffloadingSpec``'s default True, at its prompt's tokens:
  ``_calc_num_offloadable_tokens``), so a request's output is never stored, and a finished
  request's offer is its prompt's full blocks. A block the tier holds is not
  stored again but counts as used (LRU); a new one takes a free CPU block, else evicts the
  least recently used unpinned one (``CPUOffloadingManager.prepare_store``); where none
  can be evicted the request's whole offer is dropped (``prepare_store`` returns None:
  "cannot store chunks"). SpecSim offers a request's prompt blocks where its GPU prefix
  cache caches them (a prefill chunk's as it is scheduled: ``sim.prefix_cache``; the hits
  are the same, see there), none of its output (checked against vLLM's own scheduler with
  its ``OffloadingConnector``: tests/conformance, group (o)). The copy itself is
  **free-running**: vLLM submits stores on a stream of their own, GPU to host, at the
  start of the next step "so that offloading starts AFTER
  transfers related to token sampling" (``offloading/worker.py``,
  ``prepare_store_kv``), in the other direction of the (full-duplex) PCIe link from the
  loads, so it takes no step time and delays no load; a block is taken to be in the tier
  once offered (vLLM answers a lookup of a block whose store has not finished
  ``HIT_PENDING`` and delays the request: not modelled).
- **Eviction: LRU, a request's tail first** (``LRUCachePolicy``: a request's blocks rank
  by (request, -position), so its last blocks go before its first; a finished request's
  blocks are ranked anew, ``on_request_finished``). SpecSim keeps the tier in the same
  int64 structure as the GPU cache (``sim.kernels.prefix``: its free queue is the LRU
  order, head first; a block being loaded has a reference and is out of it), calling
  those functions as they are: the functions of a pool of ``capacity`` blocks, one
  copy per block identity.
- **Lookup and load.** When the scheduler first reaches a waiting request (or one
  resumed after a preemption), its GPU prefix hit is looked up, then the CPU tier for the
  blocks after it (``get_num_new_matched_tokens``: the longest run of consecutive blocks
  the tier holds). With a CPU hit the load is **asynchronous**: the scheduler allocates
  the request's blocks (the GPU hit's and the loaded ones, none for the tokens to
  compute), puts it in ``WAITING_FOR_REMOTE_KVS`` and goes on to the next waiting request
  (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``); it takes no slot and no
  token budget while it loads; once loaded, its blocks are cached on the GPU
  (``_update_waiting_for_remote_kv``) and it is admitted before any waiting request
  (``kv_holding_waiting`` is drained first), its prefill starting after the loaded
  tokens. A request whose CPU hit includes a block another request is loading waits
  (``_chunks_being_loaded``: "delay the request"), the requests behind it going on. A
  load starts only where its blocks (no lookahead slots) fit beside what every request
  still prefilling needs for its whole sequence and a speculative step, and its own step
  (``_inflight_prefill_reserved_blocks``, ``_spec_decode_step_blocks``:
  ``Replica.load_reserve``), so that two loads cannot each hold half of what both need.
  This is the path a P/D decode replica's remote KV takes (``sim.disagg``;
  ``sim.scheduling.common.admit_waiting``).
- **The load's price.** vLLM's load handler runs transfers in the order they were
  submitted, one after the other (``SingleDirectionOffloadingHandler``), each worker its
  share over its own host link: ``latency_s + tokens × b / bytes_per_s``, b the KV bytes
  per token on one GPU (the draft's KV included, it is offloaded too), queueing first come
  first served on the replica's link (one ``simpy.Resource``). The rest of the batch runs
  meanwhile: the load overlaps the other requests' steps, not the request's own.

Departures: no ``HIT_PENDING`` wait for a store in flight; a hit on a prompt whose every
block is cached stops, as the GPU lookup does, one block short of the end (vLLM loads
the last block and recomputes its last token); at most ``max_num_seqs`` loads at once (the
rows their blocks are held in); the LRU order is not vLLM's (``LRUCachePolicy`` ranks a block
by its request's first access to the tier and never moves it lower, re-ranking a finished
request's blocks after the next step's stores; SpecSim makes every offer the most recent
and re-ranks at retirement): where tests/conformance group (o) still differs from vLLM's own
scheduler; no sync loads
(``sync_load_budget_bytes``, 0 by default), no ``store_threshold``, no ARC policy, no
disk tier below the CPU one: vLLM 0.33's ``TieringOffloadingSpec``
(``vllm/v1/kv_offload/tiering/manager.py``, ``tiering/fs/manager.py``) puts secondary
tiers under the CPU one (a filesystem one among them): every chunk stored to the CPU tier
is written through to each of them, and a chunk found only there is promoted into a CPU
block first (the lookup answers "pending" and the request retries) before the usual load
to the GPU -- not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from sim.kernels import prefix as pc
from sim.kernels import tier
from sim.kernels.prefix import (
    pc_link,
    pc_new,
    pc_node,
    pc_put,
    pc_unlink,
)
from sim.records import LoadRecord, Records, TierRecord, field_names

# block identities (key, next): int64 [n, 2] (sim.kernels.tier.tier_idents) or pairs
Idents = np.ndarray | list[tuple[int, int]]
PAGE_BYTES = 4096  # vLLM rounds a CPU chunk up to the host page (SharedOffloadRegion)
_NO_LOG = np.zeros(0, dtype=np.int64)


def tier_blocks(gib: float, block_size: int, gpu_bytes_per_token: float, gpus: int) -> int:
    """CPU blocks ``gib`` GiB holds (vLLM's ``CPUOffloadingSpec.num_chunks``): a block is
    ``block_size`` tokens of KV on each of the replica's ``gpus`` workers
    (``gpu_bytes_per_token`` on one), rounded up to a page."""
    block = int(np.ceil(block_size * gpu_bytes_per_token)) * gpus
    block = -(-block // PAGE_BYTES) * PAGE_BYTES
    return int(gib * (1 << 30)) // block


@dataclass(frozen=True)
class TierSpec:
    """One replica's CPU tier: its blocks (``capacity_blocks``, from ``gib``), the link its
    loads cross (``link``, ``bytes_per_s`` one way, ``latency_s``) and the KV bytes per
    token on one GPU a load moves (``bytes_per_token``)."""

    gib: float
    capacity_blocks: int
    link: str
    bytes_per_s: float
    latency_s: float
    bytes_per_token: float

    def load_s(self, tokens: int) -> float:
        """Seconds the KV of ``tokens`` tokens takes on the link (module notes)."""
        return self.latency_s + tokens * self.bytes_per_token / self.bytes_per_s


class CpuTier:
    """The CPU tier's blocks: ``mem`` is a ``sim.kernels.prefix`` cache of ``capacity``
    blocks (at most the blocks the run's requests have: more could never fill) whose free
    queue is the LRU order; each block identity (``sim.kernels.prefix.pc_ident`` of the
    GPU pool) has at most one copy; a copy being loaded has references and is out of the
    queue. ``free``: blocks in the queue (never used, or evictable)."""

    def __init__(self, capacity_blocks: int, block_size: int) -> None:
        self.capacity_blocks = int(capacity_blocks)
        self.mem = pc_new(self.capacity_blocks, block_size, 1, 1, 0, 0, 0, 0)
        self._m = memoryview(self.mem)
        # free (blocks in the queue), stored, dropped (offers nothing could be evicted
        # for), peak (the most blocks held at once): sim.kernels.tier's T_* fields
        self.stats = np.zeros(tier.N_STATS, dtype=np.int64)
        self.stats[tier.T_FREE] = self.capacity_blocks

    free = property(lambda self: int(self.stats[tier.T_FREE]))
    stored = property(lambda self: int(self.stats[tier.T_STORED]))
    dropped = property(lambda self: int(self.stats[tier.T_DROPPED]))
    peak = property(lambda self: int(self.stats[tier.T_PEAK]))

    @property
    def held_blocks(self) -> int:
        """Blocks whose content the tier holds."""
        return int(self.mem[pc.CACHED])

    @property
    def evicted_blocks(self) -> int:
        """Blocks evicted so far."""
        return int(self.mem[pc.EVICTED])

    def copy_of(self, key: int, nxt: int) -> int:
        """The tier's copy of identity (``key``, ``nxt``), or -1."""
        return tier.tier_copy(self._m, key, nxt)

    def refs(self, c: int) -> int:
        """Loads that hold copy ``c``."""
        return self._m[pc_node(self._m, c) + pc.REF]

    def _set_refs(self, c: int, n: int) -> None:
        pc_put(self._m, _NO_LOG, pc_node(self._m, c) + pc.REF, n)

    def lookup(self, idents: Idents) -> tuple[int, bool]:
        """(how many of ``idents``, from the first, the tier holds; whether one of those
        is being loaded): ``sim.kernels.tier.tier_held``."""
        n, busy = tier.tier_held(self._m, _array(idents))
        return int(n), bool(busy)

    def offer(self, idents: Idents) -> None:
        """Store the blocks ``idents`` (one request's, in block order): ``sim.kernels.tier.
        tier_offer`` (the tier lacks them: stored; all the most recently used, the first
        last; dropped where nothing can be evicted for the new ones)."""
        tier.tier_offer(self._m, _NO_LOG, self.stats, _array(idents))

    def touch(self, idents: Idents) -> None:
        """Make the held, unpinned blocks of ``idents`` the most recently used, the first
        last: ``sim.kernels.tier.tier_touch``."""
        tier.tier_touch(self._m, _NO_LOG, _array(idents))

    def pin(self, idents: Idents) -> None:
        """A load holds the blocks ``idents`` (all held by the tier): none is evicted."""
        for key, nxt in idents:
            c = self.copy_of(key, nxt)
            r = self.refs(c)
            if r == 0:
                pc_unlink(self._m, _NO_LOG, c)
                self.stats[tier.T_FREE] -= 1
            self._set_refs(c, r + 1)

    def unpin(self, idents: Idents) -> None:
        """The load of ``idents`` ended: they are the most recently used, the first last."""
        for key, nxt in reversed(idents):
            c = self.copy_of(key, nxt)
            r = self.refs(c) - 1
            self._set_refs(c, r)
            if r == 0:
                pc_link(self._m, _NO_LOG, c, 0)
                self.stats[tier.T_FREE] += 1

    def check(self) -> None:
        """Raise ``RuntimeError`` unless the tier's accounting holds: at most its capacity
        held, free + pinned = capacity, the queue holds ``free`` blocks."""
        m, cap = self.mem, self.capacity_blocks
        held = int(m[pc.CACHED])
        if held > cap or held + int(m[pc.N_COPIES]) != cap:
            raise RuntimeError(f"CPU tier holds {held} blocks of {cap}")
        queued, node, seen = 0, int(m[pc_node(m, 2 * cap) + pc.NEXT]), 0
        while node != 2 * cap:
            queued += 1 if node < cap else int(m[pc_node(m, node) + pc.COUNT])
            node = int(m[pc_node(m, node) + pc.NEXT])
            seen += 1
            if seen > 2 * cap:
                raise RuntimeError("CPU tier: the queue does not end")
        if queued != self.free:
            raise RuntimeError(f"CPU tier: {queued} blocks queued, free {self.free}")


class Loads:
    """A replica's CPU tier and its loads: what ``sim.replica.Replica``'s hold methods
    (``start_load``, ``release_hold``, ...) do for it. ``hold rows`` are rows of the
    replica's state past its ``max_num_seqs`` slots that hold a loading request's blocks in
    the prefix-caching pool (its GPU hit referenced, its loaded blocks taken)."""

    def __init__(self, replica, spec: TierSpec, first_row: int, rows: int) -> None:
        self.r = replica
        self.spec = spec
        pool = replica.prefix
        table = replica.table
        # more CPU blocks than the run's requests have could never be used (nor evicted)
        most = int(((table.prompt_tokens + table.output_tokens) // pool.block_size).sum())
        self.tier = CpuTier(min(spec.capacity_blocks, most + 1), pool.block_size)
        self.link = simpy.Resource(replica.env, 1)  # loads one after the other
        self._rows = list(range(first_row + rows - 1, first_row - 1, -1))
        # request -> (its hold row, GPU-hit blocks, loaded blocks, cached tokens)
        self.holds: dict[int, tuple[int, int, int, int]] = {}
        # per load: request, start, on the link, arrived, tokens, GPU-hit tokens, first
        self.rows: list[tuple] = []
        pool.offered = np.zeros(len(pool.blocks), dtype=np.int64)
        pool.tier = self

    # -- the pool's side: stores -----------------------------------------------------
    def idents(self, rid: int, a: int, b: int) -> np.ndarray:
        """int64 [b - a, 2]: (key, next) of request ``rid``'s blocks ``a`` to ``b`` - 1, as
        the GPU pool keys them (``sim.kernels.tier.tier_idents``)."""
        pool = self.r.prefix
        return pool.helpers(tier.tier_idents)(pool._m, pool._k, pool._s, rid, a, b)

    def offer_slot(self, slot: int, rid: int) -> None:
        """Offer the tier slot ``slot``'s (request ``rid``'s) blocks the GPU pool has cached
        since its last offer (``sim.kernels.tier.tier_offer_slot``)."""
        pool, t = self.r.prefix, self.tier
        offer = pool.helpers(tier.tier_offer_slot)
        offer(t._m, _NO_LOG, t.stats, pool.offered, pool._m, pool._k, pool._s, slot, rid)

    def finished(self, slot: int, rid: int) -> None:
        """Request ``rid`` (in ``slot``) finished: its offered blocks are ranked anew."""
        pool = self.r.prefix
        finished = pool.helpers(tier.tier_finished)
        finished(self.tier._m, _NO_LOG, pool.offered, pool._m, pool._k, pool._s, slot, rid)

    # -- the scheduler's side: loads -------------------------------------------------
    def lookup(self, rid: int, tokens: int, hit: int) -> tuple[int, bool]:
        """(CPU blocks after the ``hit`` GPU blocks of request ``rid`` about to prefill
        ``tokens`` tokens, at most to ⌊(tokens - 1) / block_size⌋ in all; whether one of
        them is being loaded)."""
        pool = self.r.prefix
        lookup = pool.helpers(tier.tier_lookup)
        n, busy = lookup(self.tier._m, pool._m, pool._k, pool._s, rid, tokens, hit,
                         pool.block_size)
        return int(n), bool(busy)

    def start(self, rid: int, target: int, hit: int, idle: int, more: int) -> bool:
        """Hold blocks for request ``rid`` (``target`` tokens to prefill): its ``hit``
        GPU blocks (``idle`` of them unreferenced) and ``more`` blocks to load, if they fit
        beside the blocks every request still prefilling needs and a speculative step
        (``Replica.load_reserve``: vLLM allocates an asynchronous load no lookahead slots
        and keeps ``_inflight_prefill_reserved_blocks`` back) and its whole prompt fits
        (vLLM's ``scheduler_reserve_full_isl``); start the load. False (nothing done) where
        they do not fit or every hold row is taken."""
        r, pool = self.r, self.r.prefix
        bs = pool.block_size
        cached = (hit + more) * bs
        reserve = r.load_reserve((r.prefill_target_of(q), held + got)
                                 for q, (_, held, got, _) in self.holds.items())
        if not self._rows or more + idle + reserve > pool.free_blocks or (
                r.limits.full_isl and (target + bs - 1) // bs - hit + idle > pool.free_blocks):
            return False
        h = self._rows.pop()
        if hit:
            pool.attach(h, rid, hit)
        pool.take(h, more)
        pool.offered[h] = hit + more  # (vLLM offers no loaded block again)
        self.tier.pin(self.idents(rid, hit, hit + more))
        self.holds[rid] = (h, hit, more, cached)
        r.holding.append(rid)
        first = rid not in r._resume
        r.env.process(self._load(rid, hit, more, first))
        return True

    def _load(self, rid: int, hit: int, more: int, first: bool):
        env = self.r.env
        bs = self.r.prefix.block_size
        start_at = env.now
        with self.link.request() as turn:
            yield turn
            sent_at = env.now
            yield env.timeout(self.spec.load_s(more * bs))
        self.tier.unpin(self.idents(rid, hit, hit + more))
        self.rows.append((rid, self.r.index, start_at, sent_at, env.now, more * bs, hit * bs,
                          first))
        self.r.kv_arrived(rid)

    def release(self, rid: int) -> int:
        """Loaded request ``rid``'s blocks are cached on the GPU (vLLM's
        ``_update_waiting_for_remote_kv``); returns its computed tokens."""
        h, _, _, cached = self.holds[rid]
        self.r.prefix.keep_committed(h, rid, cached, self.r.prefill_target_of(rid))
        return cached

    def held(self, rid: int) -> int:
        """Blocks request ``rid``'s hold row holds (0: it holds none)."""
        hold = self.holds.get(rid)
        return 0 if hold is None else int(self.r.prefix.blocks[hold[0]])

    def take(self, rid: int, slot: int) -> int:
        """Move loaded request ``rid``'s blocks from its hold row to its new ``slot``;
        returns the GPU-hit tokens it came with."""
        h, hit, _, _ = self.holds.pop(rid)
        self.r.prefix.move(h, slot)
        self._rows.append(h)
        return hit * self.r.prefix.block_size

    def records(self) -> list[tuple]:
        """This replica's loads, one tuple per load (``LoadRecord``'s fields)."""
        return self.rows

    def tier_record(self) -> tuple:
        """This replica's tier (``TierRecord``'s fields)."""
        t = self.tier
        return (self.r.index, self.spec.capacity_blocks, t.stored, t.evicted_blocks,
                t.dropped, t.peak, t.held_blocks)


def _array(idents: Idents) -> np.ndarray:
    """int64 [n, 2]: block identities (key, next) as the tier's functions take them."""
    return np.array(idents, dtype=np.int64).reshape(len(idents), 2)


def load_records(replicas) -> Records[LoadRecord] | None:
    """Every CPU-tier load of a run's ``replicas`` in the order they started (ties by
    replica), or None where no replica has a tier."""
    tiers = [r.offload for r in replicas if getattr(r, "offload", None) is not None]
    if not tiers:
        return None
    rows = sorted((row for t in tiers for row in t.records()), key=lambda x: (x[2], x[1]))
    return Records(LoadRecord, _columns(LoadRecord, rows))


def tier_records(replicas) -> Records[TierRecord] | None:
    """One record per replica's CPU tier, or None where none has one."""
    tiers = [r.offload for r in replicas if getattr(r, "offload", None) is not None]
    if not tiers:
        return None
    return Records(TierRecord, _columns(TierRecord, [t.tier_record() for t in tiers]))


def _columns(kind: type, rows: list[tuple]) -> dict[str, np.ndarray]:
    names = field_names(kind)
    types = [f.type for f in kind.__dataclass_fields__.values()]
    dtype = {"int": np.int64, "float": np.float64, "bool": np.bool_}
    return {n: np.array([row[i] for row in rows], dtype=dtype[t])
            for i, (n, t) in enumerate(zip(names, types, strict=True))}
