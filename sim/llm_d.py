"""llm-d's router: the endpoint picker (EPP) of llm-d's tiered-prefix-cache guide.

The configuration is the guide's (github llm-d/llm-d
``guides/tiered-prefix-cache/router/single-host/tiered-prefix-cache-cpu.values.yaml``
@68d37a35): plugins ``no-hit-lru-scorer``, two ``approx-prefix-cache-producer`` (the GPU
one with its defaults, the CPU one with ``autoTune: false`` and ``lruCapacityPerServer:
82000``), ``queue-scorer``, ``kv-cache-utilization-scorer`` and two ``prefix-cache-scorer``
(one reading each producer), all five scorers in one profile with no weight given. The
rules are llm-d's router's source, github llm-d/llm-d-router @ebab6879 (the repository
llm-d-inference-scheduler was renamed to; paths under ``pkg/epp/``):

- **Weights and picker.** A scorer given no weight weighs ``DefaultScorerWeight`` = 1
  (``config/loader/defaults.go``, ``ensureSchedulingLayer``, which also adds the default
  ``max-score-picker`` and single-profile handler). An endpoint's score is the sum of each
  scorer's score, clipped to [0, 1], times its weight (``scheduling/scheduler_profile.go``,
  ``runScorerPlugins``, ``enforceScoreRange``); the picker shuffles the endpoints and
  stable-sorts them by score, so the highest wins and a tie goes to one of the tied at
  random (``framework/plugins/scheduling/picker/maxscore/picker.go``; ``picker/common.go``
  seeds it with the clock: here the run's seed).
- **queue-scorer** (``scorer/queuedepth/queue.go``): (max - q) / (max - min) of the
  endpoints' waiting queues q, 1 for all where they are equal.
- **kv-cache-utilization-scorer** (``scorer/kvcacheutilization/kvcache_utilization.go``):
  1 - the endpoint's KV cache usage.
- **The metrics** both read are vLLM's ``vllm:num_requests_waiting`` and
  ``vllm:kv_cache_usage_perc`` (``plugins/datalayer/extractor/metrics/factories.go``),
  scraped every ``--refresh-metrics-interval``, 50 ms by default
  (``server/options.go``, ``MinRefreshMetricsInterval``): every request arriving within one
  50 ms tick sees the same values. SpecSim scrapes lazily, at the first arrival of a tick
  (:data:`SCRAPE_S`), reading each replica's queue (its waiting requests and those loading
  KV from a CPU tier) and the share of its KV blocks in use (evictable cached blocks free,
  as vLLM's ``BlockPool.get_usage``) as they are then; vLLM's gauges move once a step, so
  the real values can be up to a step older.
- **approx-prefix-cache-producer** (``requestcontrol/dataproducer/approximateprefix/``
  ``plugin.go``, ``indexer.go``, ``types.go``; ``dataproducer/prefixhash/hashing.go``): the
  router's own index of what it routed, no engine feedback. A prompt is cut into blocks of
  ``blockSizeTokens`` tokens -- with ``autoTune`` the engine's block size from its metrics
  (the GPU producer: the replica's ``block_size``), else the configured one (default 16) --
  raised to at least 64 (``minBlockSizeTokens``, ``GetBlockSize``), a last partial block
  included, at most ``maxPrefixTokensToMatch`` (131072) / block size blocks, each block's
  hash chained to the one before. Each server's entries sit in an LRU of ``capacity``
  entries (``makeserver``: with ``autoTune`` the engine's ``CacheNumBlocks``, its GPU KV
  blocks, else ``lruCapacityPerServer``, default 31250); when a request is routed, all its
  hashes are added to the chosen server's LRU in order (an entry present moves to the
  front; a new one past capacity evicts the oldest, and the index forgets that server for
  it), then the server is recorded for each hash (``PreRequest``, ``indexer.Add``). A
  lookup walks the request's hashes in order, stopping at the first that no server has,
  and counts for each server the hashes it has (``matchLongestPrefix``).
- **prefix-cache-scorer** (``scorer/prefix/plugin.go``): matched blocks / the request's
  blocks, from the producer it names (``matchLengthWeight`` 0 by default).
- **no-hit-lru-scorer** (``scorer/nohitlru/no_hit_lru.go``): a request no endpoint has a
  prefix hit for is cold: endpoints that never took a cold request score 1 - i / (n - 1) in
  candidate order, i from 0, then the others by how recently they took one (least recent
  first), rank r scoring max(0, 1 - r / (n - 1)); the chosen endpoint becomes the most
  recent. Any other request scores 0.5 everywhere. The guide gives it no producer name, so
  it reads the default producer's key, which neither named producer writes; the EPP then
  creates a default ``approx-prefix-cache-producer`` for it (``datalayer/data_graph.go``,
  ``CreateMissingDataProducers``; ``cmd/epp/runner/runner.go`` registers it), whose
  defaults are the GPU producer's: a request is cold when no server holds its first block
  in the GPU producer's index.

What SpecSim takes as given: the router's token blocks are the engine's tokens (llm-d's
default ``estimate`` token producer packs ~4 bytes of text into a pseudo-token,
``dataproducer/tokenizer/README.md``); a block's identity comes from the prompts' content
keys (``workloads.prefix_blocks``, at the engine's block size), so a router block is
shared where the engine block holding its last token is (exact when the router's block is
a multiple of the engine's), and a partial last block is the request's own; without
prefix caching the table holds no keys and every prompt is its own. Index updates, which
llm-d makes in a goroutine, land at once. Candidates are in replica order (llm-d's come
from its datastore). Not modelled: flow control, the precise (KV-event) prefix scorer,
P/D profiles, weights other than the guide's.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SCRAPE_S = 0.05  # --refresh-metrics-interval's default (server/options.go)
MIN_BLOCK_TOKENS = 64  # minBlockSizeTokens (approximateprefix/plugin.go)
MAX_PREFIX_TOKENS = 131072  # defaultMaxPrefixTokens (approximateprefix/types.go)
CONFIG_BLOCK_TOKENS = 16  # defaultBlockSizeTokens: the CPU producer's (autoTune false)
GUIDE_CPU_LRU_CAPACITY = 82000  # the guide's cpu-prefix-cache-producer lruCapacityPerServer
_SLOTS = MAX_PREFIX_TOKENS // MIN_BLOCK_TOKENS  # block positions a key encodes (2048)


@dataclass(frozen=True)
class LlmdConfig:
    """The guide's knobs: whether the CPU producer and scorer are configured
    (``cpu_scorer``), and the CPU producer's ``lruCapacityPerServer`` (entries a server)."""

    cpu_scorer: bool = True
    cpu_lru_capacity: int = GUIDE_CPU_LRU_CAPACITY


def router_block_tokens(engine_block: int, auto_tune: bool) -> int:
    """``GetBlockSize``: the engine's block size (``autoTune``) or the configured 16,
    raised to ``minBlockSizeTokens``."""
    size = engine_block if auto_tune else CONFIG_BLOCK_TOKENS
    return max(size, MIN_BLOCK_TOKENS)


def block_hashes(table, rid: int, block: int, engine_block: int) -> list[int]:
    """Request ``rid``'s prefix hashes at ``block`` tokens (module notes), at most
    ``MAX_PREFIX_TOKENS // block``: a full block shared with another prompt gets the same
    key (the engine key of the block holding its last token, with its position); a block
    that is the request's own, a negative one no other request has."""
    prompt = int(table.prompt_tokens[rid])
    most = MAX_PREFIX_TOKENS // block
    n = min(-(-prompt // block), most)
    full = min(prompt // block, most)
    keys, starts = table.block_keys, table.block_starts
    out = []
    if keys is not None:
        at, engine_full = int(starts[rid]), int(starts[rid + 1] - starts[rid])
        for j in range(full):
            b = ((j + 1) * block - 1) // engine_block  # the engine block of its last token
            if b >= engine_full:
                break
            out.append(int(keys[at + b]) * _SLOTS + j)
    own = -1 - rid * _SLOTS
    out.extend(own - j for j in range(len(out), n))
    return out


class PrefixIndex:
    """One ``approx-prefix-cache-producer``'s index: per server an LRU of hashes of at most
    ``capacity[s]`` entries, and for each hash the servers holding it (a bitmask)."""

    def __init__(self, capacity: Sequence[int]) -> None:
        self.capacity = [int(c) for c in capacity]
        self.lru: list[OrderedDict] = [OrderedDict() for _ in self.capacity]
        self.owners: dict[int, int] = {}

    def add(self, hashes: list[int], s: int) -> None:
        """``indexer.Add``: the hashes into server ``s``'s LRU in order (evicting its
        oldest past capacity), then ``s`` recorded for each."""
        lru, cap, owners, bit = self.lru[s], self.capacity[s], self.owners, 1 << s
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            if len(lru) > cap:  # the eviction callback
                old = lru.popitem(last=False)[0]
                left = owners.get(old, 0) & ~bit
                if left:
                    owners[old] = left
                else:
                    owners.pop(old, None)
        for h in hashes:
            owners[h] = owners.get(h, 0) | bit

    def match(self, hashes: list[int], n: int) -> list[int]:
        """``matchLongestPrefix``: per server, of the hashes up to the first no server
        holds, those it holds."""
        counts = [0] * n
        owners = self.owners
        run, mask = 0, 0
        for h in hashes:
            m = owners.get(h, 0)
            if not m:
                break
            if m != mask:
                _credit(counts, mask, run)
                run, mask = 0, m
            run += 1
        _credit(counts, mask, run)
        return counts

    def __len__(self) -> int:
        return len(self.owners)


def _credit(counts: list[int], mask: int, run: int) -> None:
    s = 0
    while mask:
        if mask & 1:
            counts[s] += run
        mask >>= 1
        s += 1


def queue_scores(waiting: Sequence[int]) -> list[float]:
    """``queue-scorer``: (max - q) / (max - min), 1 where every queue is alike."""
    lo, hi = min(waiting), max(waiting)
    if hi == lo:
        return [1.0] * len(waiting)
    return [(hi - q) / (hi - lo) for q in waiting]


def kv_scores(usage: Sequence[float]) -> list[float]:
    """``kv-cache-utilization-scorer``: 1 - KV cache usage."""
    return [1.0 - u for u in usage]


def prefix_scores(matched: Sequence[int], total: int) -> list[float]:
    """``prefix-cache-scorer`` (``matchLengthWeight`` 0): matched / total blocks, 0 with
    no blocks."""
    if total == 0:
        return [0.0] * len(matched)
    return [m / total for m in matched]


def no_hit_lru_scores(cold: bool, recent: Sequence[int], n: int) -> list[float]:
    """``no-hit-lru-scorer`` over ``n`` endpoints: 0.5 each for a request with a hit;
    for a cold one, never-used endpoints 1 - i / (n - 1) in order, then the used ones
    (``recent``: least recently used first) ranked after them, at least 0."""
    if not cold:
        return [0.5] * n
    if n == 1:
        return [1.0]
    out = [0.0] * n
    used = set(recent)
    for i, e in enumerate(e for e in range(n) if e not in used):
        out[e] = 1.0 - i / (n - 1)
    never = n - len(used)
    for pos, e in enumerate(recent):
        out[e] = max(0.0, 1.0 - (never + pos) / (n - 1))
    return out


def pick(scores: Sequence[float], rng: np.random.Generator) -> int:
    """``max-score-picker``: the highest score, a tie to one of the tied at random."""
    best = max(scores)
    tied = [i for i, s in enumerate(scores) if s == best]
    return tied[0] if len(tied) == 1 else tied[int(rng.integers(len(tied)))]


def _clip(x: float) -> float:  # enforceScoreRange
    return 0.0 if x < 0 else 1.0 if x > 1 else x


class LlmdPicker:
    """llm-d's endpoint picker over ``replicas`` as the guide configures it (module
    notes); ``choose(rid)`` routes a request and records it in the indexes."""

    def __init__(self, replicas: Sequence, config: LlmdConfig, rng: np.random.Generator
                 ) -> None:
        self.replicas = list(replicas)
        self.config = config
        self.rng = rng
        first = self.replicas[0]
        self.table = first.table
        self.engine_block = int(first.limits.block_size)
        self.gpu_block = router_block_tokens(self.engine_block, auto_tune=True)
        self.cpu_block = router_block_tokens(self.engine_block, auto_tune=False)
        # autoTune: the engine's GPU KV blocks (CacheNumBlocks) are the GPU index's entries
        self.gpu = PrefixIndex([r.kv.capacity_blocks for r in self.replicas])
        self.cpu = PrefixIndex([config.cpu_lru_capacity] * len(self.replicas)) \
            if config.cpu_scorer else None
        self.recent: OrderedDict = OrderedDict()  # no-hit-lru: least recent first
        self._tick = -math.inf
        self.waiting = [0] * len(self.replicas)
        self.usage = [0.0] * len(self.replicas)

    def scrape(self, now: float) -> None:
        """The metrics as of the current 50 ms tick, read at its first arrival."""
        tick = math.floor(now / SCRAPE_S)
        if tick == self._tick:
            return
        self._tick = tick
        for i, r in enumerate(self.replicas):
            self.waiting[i] = len(r.waiting) + len(r.holding)
            self.usage[i] = r.kv.used_blocks / r.kv.capacity_blocks

    def scores(self, rid: int) -> tuple[list[float], dict]:
        """Every replica's weighted score for request ``rid`` and what each scorer saw."""
        n = len(self.replicas)
        gpu_h = block_hashes(self.table, rid, self.gpu_block, self.engine_block)
        gpu_m = self.gpu.match(gpu_h, n)
        parts = [queue_scores(self.waiting), kv_scores(self.usage),
                 prefix_scores(gpu_m, len(gpu_h))]
        seen = {"gpu_hashes": gpu_h, "gpu_matched": gpu_m}
        if self.cpu is not None:
            cpu_h = gpu_h if self.cpu_block == self.gpu_block else \
                block_hashes(self.table, rid, self.cpu_block, self.engine_block)
            cpu_m = self.cpu.match(cpu_h, n)
            parts.append(prefix_scores(cpu_m, len(cpu_h)))
            seen.update(cpu_hashes=cpu_h, cpu_matched=cpu_m)
        cold = not any(gpu_m)  # the auto-created default producer's index is the GPU one's
        parts.append(no_hit_lru_scores(cold, list(self.recent), n))
        seen["cold"] = cold
        total = [sum(_clip(p[i]) for p in parts) for i in range(n)]  # every weight 1
        return total, seen

    def choose(self, rid: int, now: float) -> int:
        """Route request ``rid`` arriving at ``now``: score, pick, then record it
        (``PreRequest``: both producers' indexes, the no-hit LRU for a cold request)."""
        self.scrape(now)
        total, seen = self.scores(rid)
        best = pick(total, self.rng)
        self.gpu.add(seen["gpu_hashes"], best)
        if self.cpu is not None:
            self.cpu.add(seen["cpu_hashes"], best)
        if seen["cold"]:
            self.recent.pop(best, None)
            self.recent[best] = None
        return best
