"""Prefix caching (``scheduler.prefix_caching``, ``sim.prefix_cache``): hits skip prefill,
only computed prompt blocks are cached, LRU eviction, reference counts, the pool's
accounting under random traffic, Mooncake's hash_ids, and nothing changes when it is off."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.replica
from reports.report_md import _health  # the report's serving-health section
from sim import steady_walk
from sim.build import setups
from sim.commands.run import format_table
from sim.engine_path import PATHS
from sim.loading import load_scenario, repo_root
from sim.policies import FixedGamma, NoSpeculation
from sim.prefix_cache import PrefixCachingBlockManager
from sim.runner import run_scenario, simulate
from tests.sim.fakes import FakeCost, IidChain, setup, table

DEFAULT = repo_root() / "scenarios" / "default.yaml"
MOONCAKE = repo_root() / "workloads" / "traces" / "mooncake-synthetic.jsonl"


class CheckedPrefix(PrefixCachingBlockManager):
    """A prefix-caching pool that checks its whole accounting after every change."""

    def grant(self, slots, held, extra):
        super().grant(slots, held, extra)
        self.check()

    def take(self, slot, n):
        super().take(slot, n)
        self.check()

    def rolled_back(self, held, tokens):
        keep = super().rolled_back(held, tokens)
        assert (keep >= 0).all() and (keep <= held).all()
        return keep  # the caller writes ``keep`` back: checked at the next change

    def release(self, slots):
        super().release(slots)
        self.check()

    def free_slots(self, slots, held):
        super().free_slots(slots, held)
        self.check()

    def attach(self, slot, rid, hit):
        super().attach(slot, rid, hit)
        self.check()

    def cache(self, slots, rids, computed, known=None):
        super().cache(slots, rids, computed, known)
        self.check()


@pytest.fixture
def checked(monkeypatch):
    """Every replica's prefix-caching pool checks itself; the pools are collected."""
    pools = []

    class Collected(CheckedPrefix):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pools.append(self)

    monkeypatch.setattr(sim.replica, "PrefixCachingBlockManager", Collected)
    return pools


# -- a hit skips prefill ---------------------------------------------------------------------

def _two_far_apart(caching: bool, engine_path, prefix: int = 2000, own: int = 1000):
    """Two requests behind the same ``prefix``-token system prompt, the second arriving
    long after the first finished, each prefilled in one pass (no chunking)."""
    sets = [
        "variants=[{name: none, policy: {kind: none}}]", "run.requests=2",
        f"scheduler.prefix_caching={str(caching).lower()}",
        "scheduler.chunked_prefill=false", "scheduler.max_batched_tokens=8192",
        "workload={arrivals: poisson, rate_per_s: 0.01, "
        f"prompt: {{kind: fixed, tokens: {own}}}, output: {{kind: fixed, tokens: 8}}, "
        f"shared_prefix_tokens: {prefix}}}",
    ]
    sc = load_scenario(DEFAULT, sets)
    (_, s), = setups(sc)
    return s, simulate(s, path=engine_path)


def test_a_cache_hit_skips_the_prefill_of_the_cached_tokens(engine_path):
    s, res = _two_far_apart(True, engine_path)
    first, second = res.requests
    assert second.arrival_at > first.finished_at  # each runs alone
    prompt = first.prompt_tokens
    assert prompt == 3000 and second.prompt_tokens == 3000
    hit = 2000  # 125 whole blocks of 16: the system prompt (the rest is each request's own)
    assert (first.cached_tokens, second.cached_tokens) == (0, hit)
    cost = s.target_cost
    full = cost.pass_seconds(np.array([prompt]), np.array([0]))
    rest = cost.pass_seconds(np.array([prompt - hit]), np.array([hit]))
    ttft = [r.first_token_at - r.arrival_at for r in res.requests]
    # TTFT is the one prefill pass: the whole prompt, then only what the cache lacked
    # (the rest attends the 2000 cached tokens); same floats up to summation order
    assert ttft[0] == pytest.approx(full, rel=1e-9)
    assert ttft[1] == pytest.approx(rest, rel=1e-9)
    assert ttft[0] - ttft[1] == pytest.approx(full - rest, rel=1e-6)
    assert full - rest > 0.3 * full  # the saving is most of the prefill, not noise
    prefill = [it.prefill_tokens for it in res.iterations if it.prefill_tokens]
    assert prefill == [3000, 1000]


def test_without_prefix_caching_the_second_request_prefills_everything(engine_path):
    _, res = _two_far_apart(False, engine_path)
    assert [r.cached_tokens for r in res.requests] == [0, 0]
    ttft = [r.first_token_at - r.arrival_at for r in res.requests]
    assert ttft[0] == pytest.approx(ttft[1], rel=1e-12)


def test_the_last_prompt_token_is_always_recomputed(engine_path):
    # A prompt that is all system prompt, 2 x 16 tokens: vLLM caps a hit at prompt - 1
    # tokens, so the second request hits 1 block and recomputes the second one whole.
    s = setup(table([0.0, 1.0], [32, 32], [4, 4], hash_ids=[(7,), (7,)], hash_block_tokens=32),
              prefix_caching=True, max_batched_tokens=64)
    res = simulate(s, path=engine_path)
    assert [r.cached_tokens for r in res.requests] == [0, 16]
    assert [it.prefill_tokens for it in res.iterations if it.prefill_tokens] == [32, 16]


def test_a_request_admitted_in_the_same_step_hits_the_blocks_its_predecessor_schedules(
        engine_path):
    # vLLM caches a chunk's full blocks as it schedules them: two identical prompts arriving
    # together, the second admitted after the first in one step, share the first's blocks.
    s = setup(table([0.0, 0.0], [40, 40], [3, 3], hash_ids=[(1,), (1,)], hash_block_tokens=40),
              prefix_caching=True, max_batched_tokens=128)
    res = simulate(s, path=engine_path)
    assert [r.cached_tokens for r in res.requests] == [0, 32]
    assert res.iterations[0].prefill_tokens == 40 + 8


def test_a_hit_needs_free_blocks_for_the_unreferenced_blocks_it_revives(checked, engine_path):
    # A 4-block pool: request 0 (2 prompt blocks + 1) finishes; its cached blocks stay in
    # the free queue and a hit on them takes them out of it.
    s = setup(table([0.0, 5.0], [33, 33], [2, 2], hash_ids=[(3,), (3,)], hash_block_tokens=64),
              prefix_caching=True, blocks=4, max_batched_tokens=64)
    res = simulate(s, path=engine_path)
    assert [r.cached_tokens for r in res.requests] == [0, 32]
    pool, = checked
    assert pool.free_blocks == 4 and pool.evicted_blocks == 0


# -- only committed tokens are cached: never rolled-back draft tokens -------------------------

def test_blocks_a_verify_rolled_back_are_never_cached():
    # Blocks of 4 tokens; a 6-token prompt (1 full block) that decodes with γ = 4.
    pool = _pool([6], capacity=10)
    assert _run(pool, 0, 0, 6) == 0  # prefill: block 0 cached; KV 6, 1 token emitted
    # verify 1: the last token + 4 guesses at positions 6..10 need a third block; 1 guess
    # accepted: positions 0..7 committed, block 2 (positions 8..11) held only draft tokens
    pool.grant(np.array([0]), np.array([2]), np.array([1]))
    pool.blocks[[0]] = pool.rolled_back(pool.blocks[[0]], np.array([8]))
    assert pool.blocks[0] == 2 and pool.cached_blocks() == 1
    # verify 2: positions 8..12 need blocks 2 and 3; none accepted: position 8 committed
    pool.grant(np.array([0]), np.array([2]), np.array([2]))
    pool.blocks[[0]] = pool.rolled_back(pool.blocks[[0]], np.array([9]))
    assert pool.blocks[0] == 3
    pool.check()
    # preempted: blocks 0 and 1 hold committed tokens only (block 1: prompt tokens 4, 5 and
    # output 6, 7) and are cached; block 2 holds 1 committed token and 3 rejected guesses'
    # slots, block 3 was rolled back: neither is
    pool.keep_committed(0, 0, 9)
    pool.release(0)
    pool.check()
    assert pool.cached_blocks() == 2 and pool.free_blocks == 10
    # re-admitted with its 4 emitted tokens to recompute (10 tokens): it finds both blocks
    assert pool.lookup(0, 6 + 4) == (2, 2)


def _committed(r, rid: int) -> int:
    """Tokens of request ``rid`` whose KV is committed: its prompt and every emitted token
    but the last (which the next pass feeds as its root)."""
    on = (r.rid == rid) & r.active
    if on.any():
        emitted = int(r.emitted[on.nonzero()[0][0]])
    elif rid in r._resume:
        emitted = r._resume[rid][0]
    else:
        emitted = int(r.log.emitted[rid])
    return int(r.table.prompt_tokens[rid]) + emitted - 1


def test_speculation_and_preemption_cache_committed_blocks_only(checked, monkeypatch,
                                                                engine_path):
    # Three 40-token prompts decoding 120 tokens with γ = 4 at α = 0.6 in a 20-block pool
    # (they need 30): verifies write guesses into blocks past their committed tokens (which
    # vLLM v1 keeps), and requests are preempted and resumed. After every iteration and
    # every preemption, every cached block of a request's output must lie inside its
    # committed tokens.
    seen = {"past_committed": 0, "output_blocks": 0, "output_hits": 0}
    iteration, preempt, admit = (sim.replica.Replica.finish_iteration,
                                 sim.replica.Replica.preempt, sim.replica.Replica.admit)

    def check(r):
        pool, bs = r.prefix, r.limits.block_size
        for key in pool.cached_keys():
            if key >= pool._out:
                rid, j = divmod(key - pool._out, 1 << 40)
                assert (j + 1) * bs <= _committed(r, rid)
                seen["output_blocks"] += 1

    def on_iteration(r, *args):
        iteration(r, *args)
        need = (r.kv_tokens + r.limits.block_size - 1) // r.limits.block_size
        seen["past_committed"] += int(np.maximum(r.kv.blocks - need, 0)[r.active].sum())
        check(r)

    def on_preempt(r, s):
        preempt(r, s)
        check(r)

    def on_admit(r, rid, target, cached=0):
        seen["output_hits"] += cached > r.table.prompt_tokens[rid]
        return admit(r, rid, target, cached)

    monkeypatch.setattr(sim.replica.Replica, "finish_iteration", on_iteration)
    monkeypatch.setattr(sim.replica.Replica, "preempt", on_preempt)
    monkeypatch.setattr(sim.replica.Replica, "admit", on_admit)
    s = setup(table([0.0, 0.0, 0.0], [40] * 3, [120] * 3, hash_ids=[None] * 3),
              policy=lambda: FixedGamma(4), draft=FakeCost(0.001, 0.0),
              acceptance=IidChain(0.6), prefix_caching=True, blocks=20, max_num_seqs=3,
              max_batched_tokens=128, chunked=True, chunk=32)
    # the hooks see the reference scheduler; the compiled walk (which preempts and resumes
    # too) gives its records, the cache checked after each walk
    write = steady_walk._write

    def on_write(r, *args):
        write(r, *args)
        check(r)

    monkeypatch.setattr(steady_walk, "_write", on_write)
    res = simulate(s, path=PATHS["reference"])
    if engine_path is not PATHS["reference"]:
        fast = simulate(s, path=engine_path)
        assert fast.requests == res.requests and fast.iterations == res.iterations
    assert all(r.finished for r in res.requests)
    assert sum(r.preemptions for r in res.requests) > 0
    # not vacuous: guesses were rejected and their blocks kept past the committed tokens,
    # output blocks were cached, and resumed requests hit them
    assert all(r.drafted_tokens > r.accepted_tokens for r in res.requests)
    assert min(seen.values()) > 0


# -- LRU eviction and reference counts -------------------------------------------------------

def _pool(prompts, capacity, ids=None, block_size=4, **rules):
    """A bare pool over requests with ``prompts`` tokens (all blocks their own unless
    ``ids``), keys as the engine builds them; ``rules``: the pool's release-dependent ones
    (vLLM up to 0.20's by default)."""
    tab = table(np.zeros(len(prompts)), prompts, [1] * len(prompts),
                hash_ids=ids or [None] * len(prompts), hash_block_tokens=block_size,
                block_size=block_size)
    return PrefixCachingBlockManager(capacity, block_size, 4, tab.block_keys,
                                     tab.block_starts, **rules)


def _run(pool, slot, rid, tokens):
    """Admit ``rid`` into ``slot`` with its hit and compute ``tokens`` tokens of it."""
    hit, _ = pool.lookup(rid, tokens)
    if hit:
        pool.attach(slot, rid, hit)
    need = -(-tokens // pool.block_size) - hit
    pool.take(slot, need)
    pool.cache(np.array([slot]), np.array([rid]), np.array([tokens]))
    pool.check()
    return hit


def _finish(pool, slot):
    held = np.array([pool.blocks[slot]])
    pool.blocks[slot] = 0
    pool.free_slots(np.array([slot]), held)
    pool.check()


def test_eviction_takes_the_least_recently_freed_blocks_a_requests_last_first():
    # Blocks of 4 tokens, a pool of 6. A and B: 9-token prompts (2 full blocks + 1 partial).
    pool = _pool([9, 9, 9], capacity=6)
    _run(pool, 0, 0, 9)
    _finish(pool, 0)  # free queue: [4 uncached, a1, a0]
    _run(pool, 1, 1, 9)  # takes 3 uncached blocks
    _finish(pool, 1)  # [1 uncached, a1, a0, 1 uncached, b1, b0]
    assert pool.cached_blocks() == 4
    assert [pool.lookup(r, 9)[0] for r in (0, 1)] == [2, 2]
    pool.take(2, 2)  # a new request's 2 blocks: the uncached one, then A's last block
    assert pool.evicted_blocks == 1
    assert [pool.lookup(r, 9)[0] for r in (0, 1)] == [1, 2]  # A keeps its first block
    pool.take(2, 1)  # then A's first block
    assert [pool.lookup(r, 9)[0] for r in (0, 1)] == [0, 2]
    pool.take(2, 1)  # then the uncached block B's request left before its own
    assert [pool.lookup(r, 9)[0] for r in (0, 1)] == [0, 2]
    pool.take(2, 1)
    assert [pool.lookup(r, 9)[0] for r in (0, 1)] == [0, 1]
    pool.check()


def test_the_walks_undo_log_takes_back_lookups_attaches_evictions_and_caching():
    # The compiled walk notes every change of an iteration it may yet hand to the reference
    # path (sim.kernels.prefix.pc_put with a log) and takes them back (pc_undo): the pool's
    # array is then what it was, byte for byte, and the same changes made again without a
    # log leave it as they left it with one.
    from sim.kernels.prefix import pc_attach, pc_cache, pc_lookup, pc_pop, pc_undo

    pool = _pool([9, 9, 9, 12], capacity=7, ids=[(5,), (5,), (6,), (5, 6)], block_size=4)
    _run(pool, 0, 0, 9)
    _finish(pool, 0)
    _run(pool, 1, 2, 9)
    before = pool.mem.copy()
    log = np.zeros(2 * 500 + 1, dtype=np.int64)

    def iteration(log):  # an admission of request 1 into slot 2: a hit, a pop, caching
        hit, idle = pc_lookup(pool.mem, pool._keys, pool._starts, 1, 9)
        assert (hit, idle) == (1, 1)
        pc_attach(pool.mem, log, pool._keys, pool._starts, 2, 1, hit)
        pc_pop(pool.mem, log, 3)  # past the uncached blocks: evicts cached ones
        pc_cache(pool.mem, log, pool._keys, pool._starts, 2, 1, 9, 9)

    evicted = pool.evicted_blocks
    iteration(log)
    assert log[0] > 0 and pool.evicted_blocks > evicted
    after = pool.mem.copy()
    pc_undo(pool.mem, log)
    assert log[0] == 0 and np.array_equal(pool.mem, before)
    iteration(log[:0])
    assert np.array_equal(pool.mem, after)


def test_uncached_blocks_are_reused_first_in_0_33():
    # The sequence above under vLLM 0.33's BlockPool.free_blocks: a freed request's
    # uncached blocks (the partial third) go to the head of the free queue, its cached ones
    # to the tail, so a new request takes the uncached ones before it evicts anything.
    pool = _pool([9, 9, 9], capacity=6, unhashed_first=True)
    _run(pool, 0, 0, 9)
    _finish(pool, 0)  # free queue: [4 uncached, a1, a0]
    _run(pool, 1, 1, 9)  # takes 3 uncached blocks
    _finish(pool, 1)  # [2 uncached, a1, a0, b1, b0]
    pool.take(2, 2)  # the two uncached blocks: nothing evicted
    assert pool.evicted_blocks == 0
    assert [pool.lookup(r, 9)[0] for r in (0, 1)] == [2, 2]
    pool.take(2, 1)  # then A's last block
    assert [pool.lookup(r, 9)[0] for r in (0, 1)] == [1, 2]
    pool.check()


@pytest.mark.parametrize("drop, hit", [(False, 2), (True, 1)])
def test_an_eagle_type_drafter_loses_the_hits_last_block_up_to_0_20(drop, hit):
    # Two 9-token prompts sharing their first 8 tokens (2 blocks of 4). vLLM up to 0.20
    # drops the last block of an EAGLE-type drafter's hit (its draft needs those tokens'
    # hidden states); 0.33 hashes each block with the token after it, which loses none.
    pool = _pool([9, 9], capacity=8, ids=[[7, 8, 1], [7, 8, 2]], drop_last_hit=drop)
    _run(pool, 0, 0, 9)
    assert _run(pool, 1, 1, 9) == hit


def test_a_hit_makes_blocks_recently_used_again():
    pool = _pool([9, 9, 9], capacity=6)
    _run(pool, 0, 0, 9)
    _finish(pool, 0)
    _run(pool, 1, 1, 9)
    _finish(pool, 1)  # A's blocks are the older ones
    assert _run(pool, 0, 0, 9) == 2  # A again: both blocks hit, out of the free queue
    _finish(pool, 0)  # and back at the tail, behind B's
    pool.take(2, 3)
    assert [pool.lookup(r, 9)[0] for r in (0, 1)] == [2, 0]


def test_shared_blocks_are_counted_once_and_freed_with_their_last_reference():
    # Three 12-token prompts behind one 8-token system prompt (2 blocks of 4): the second
    # and third hit the first's 2 blocks while it still runs.
    pool = _pool([12, 12, 12], capacity=12, ids=[(5, 6)] * 3)
    _run(pool, 0, 0, 12)
    assert _run(pool, 1, 1, 12) == 2 and _run(pool, 2, 2, 12) == 2
    assert pool.used_blocks == 3 + 1 + 1  # 2 shared + 3 own blocks
    assert pool.references(int(pool._keys[0])) == 3
    _finish(pool, 0)
    _finish(pool, 1)
    assert pool.used_blocks == 3 and pool.references(int(pool._keys[0])) == 1
    _finish(pool, 2)
    assert pool.used_blocks == 0 and pool.free_blocks == 12
    assert all(r == 0 for r in pool.reference_counts().values())


def test_preemption_drops_references_and_the_cached_blocks_survive(checked, engine_path):
    # Two requests of 64 + 64 tokens in a 9-block pool: the younger is preempted; when it is
    # re-admitted, its own prompt blocks (cached, then freed) are hits, so it recomputes
    # less than its whole prompt + output.
    s = setup(table([0.0, 0.0], [64, 64], [64, 64], hash_ids=[None, None]),
              prefix_caching=True, blocks=9, max_num_seqs=2, max_batched_tokens=512,
              chunked=True, chunk=64)
    res = simulate(s, path=engine_path)
    old, young = res.requests
    assert young.preemptions >= 1 and young.finished
    assert young.cached_tokens == 0  # a hit at re-admission is not vLLM's num_cached_tokens
    # Preempted once at 0.138 s holding its prompt (4 blocks, all cached) and 1 emitted
    # token; re-admitted once the other finished. While it waited the other grew from 5 to
    # 8 blocks, taking from the head of the free queue the young one's blocks last first
    # (3, 2, 1): block 0 survives, so it recomputes 64 + 1 - 16 tokens.
    assert young.preemptions == 1 and young.recomputed_tokens == 65 - 16
    # without the cache it recomputes its whole prompt and output, once: re-admitted only
    # when KV for all of it fits (vLLM 0.20 on); vLLM 0.11 admitted its first chunk, and it
    # thrashed (preempted 9 times)
    plain = replace(s, limits=replace(s.limits, prefix_caching=False))
    assert simulate(plain, path=engine_path).requests[1].recomputed_tokens == 65
    old_rules = replace(plain, limits=replace(plain.limits, vllm_release="0.11"))
    assert simulate(old_rules, path=engine_path).requests[1].recomputed_tokens > 65


# -- the pool's accounting under random traffic ----------------------------------------------

@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    n=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    gamma=st.sampled_from([0, 1, 4]),
    chunked=st.booleans(),
    spare_blocks=st.integers(0, 10),
    hash_tokens=st.sampled_from([4, 16, 20, 512]),
    order=st.sampled_from(["vllm_v1", "decode_first", "prefill_first"]),
    stages=st.sampled_from([1, 1, 3]),
)
def test_the_pool_accounting_holds_under_random_admission_completion_and_preemption(
        n, seed, gamma, chunked, spare_blocks, hash_tokens, order, stages, engine_path):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, 80, n)
    output = rng.integers(1, 30, n)
    arrivals = np.sort(rng.uniform(0, 0.2, n))
    # three families of prompts: a shared head of 0-3 ids, then ids of their own
    family, depth = rng.integers(3, size=n), rng.integers(0, 4, n)
    ids = [tuple([100 * f + k for k in range(d)] + [1000 + 10 * i + k for k in range(5)])
           for i, (f, d) in enumerate(zip(family, depth, strict=True))]
    ids = [t[:-(-p // hash_tokens)] for t, p in zip(ids, prompt, strict=True)]
    blocks = int(-(-(prompt + output).max() // 16)) + 2 + spare_blocks
    policy = NoSpeculation if gamma == 0 else (lambda: FixedGamma(gamma))
    s = setup(table(arrivals, prompt, output, hash_ids=ids, hash_block_tokens=hash_tokens),
              policy=policy, draft=FakeCost(0.001, 0.0001), acceptance=IidChain(0.6),
              blocks=blocks, max_num_seqs=4, max_batched_tokens=128, chunked=chunked, chunk=16,
              seed=seed, cost=FakeCost(stages=stages), order=order, prefix_caching=True)
    pools = []

    class Collected(CheckedPrefix):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pools.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim.replica, "PrefixCachingBlockManager", Collected)
        res = simulate(replace(s, pipeline_stages=stages), path=engine_path)
    for r in res.requests:
        assert r.finished and r.emitted_tokens == r.output_tokens
        assert 0 <= r.cached_tokens <= max(r.prompt_tokens - 1, 0)
        assert r.cached_tokens % 16 == 0
    pool, = pools
    pool.check()
    assert pool.free_blocks == pool.capacity_blocks  # everything finished: nothing held
    assert all(r == 0 for r in pool.reference_counts().values())


# -- a shared system prompt: the hit rate the workload implies -------------------------------

def _shared_prompt_run(n: int, groups: int, own: str):
    sets = [f"run.requests={n}", "variants=[{name: none, policy: {kind: none}}]",
            f"workload.prompt={own}", "workload.shared_prefix_tokens=1000",
            f"workload.shared_prefix_groups={groups}", "scheduler.prefix_caching=true"]
    return run_scenario(load_scenario(DEFAULT, sets))


def _expected_hit_rate(n: int, groups: int, mean_own: float) -> float:
    """Each group's first request prefills all; every later one finds the system prompt's
    ⌊1000 / 16⌋ = 62 whole blocks (992 tokens) cached (the H100's pool of ~29k blocks
    evicts nothing here). E[distinct groups among n] = G (1 - (1 - 1/G)^n)."""
    seen = groups * (1 - (1 - 1 / groups) ** n)
    return (n - seen) * 992 / (n * (1000 + mean_own))


@pytest.mark.parametrize("groups", [1, 4, 8])
def test_a_shared_system_prompt_gives_the_analytic_hit_rate(groups):
    # 500 tokens of each request's own after the system prompt: the only randomness is the
    # group draws, and at n = 300 every group appears (E[distinct] = G to 1e-17)
    res = _shared_prompt_run(300, groups, "{kind: fixed, tokens: 500}")
    rate = res.summaries[0]["prefix_hit_rate"]
    assert rate == pytest.approx(_expected_hit_rate(300, groups, 500), rel=1e-9)
    cached = res.variants[0].requests.column("cached_tokens")
    assert sorted(set(cached.tolist())) == [0, 992] and (cached == 0).sum() == groups


def test_a_shared_system_prompt_before_drawn_prompts_is_near_the_analytic_rate():
    # The default scenario's prompts (lognormal, median 512, σ 0.8, resampled above 4096)
    # after the system prompt: E[own] = E[⌈X⌉ | X <= 4096] ≈ 683.4 tokens. The mean of 600
    # draws has a relative standard error of ~1.4% of the prompt (~0.9 / √600 · 683 / 1683),
    # so 4% is about 3 standard errors.
    mu, sigma, cap = math.log(512), 0.8, 4096
    phi = lambda z: 0.5 * math.erfc(-z / math.sqrt(2))  # noqa: E731
    mean_own = (math.exp(mu + sigma**2 / 2) * phi((math.log(cap) - mu - sigma**2) / sigma)
                / phi((math.log(cap) - mu) / sigma) + 0.5)
    res = _shared_prompt_run(600, 4, "{kind: lognormal, median_tokens: 512, sigma: 0.8, "
                                     "max_tokens: 4096}")
    assert res.summaries[0]["prefix_hit_rate"] == pytest.approx(
        _expected_hit_rate(600, 4, mean_own), rel=0.04)


# -- Mooncake's hash_ids ---------------------------------------------------------------------

def _mooncake_hits(block: int = 16) -> list[int]:
    """The cached tokens each request of the shipped synthetic trace must find when every
    earlier prompt is cached and nothing is evicted, from the file alone: the longest run of
    leading ids it shares with an earlier prompt, in 512-token trace blocks, as whole
    engine blocks that prompt had in full, and at most its own prompt - 1 tokens."""
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    hits, seen = [], []
    for r in rows:
        p, ids = r["input_length"], r["hash_ids"]
        best = 0
        for q, other in seen:
            k = 0
            while k < min(len(ids), len(other)) and ids[k] == other[k]:
                k += 1
            best = max(best, min(k * 512 // block * block, q // block * block,
                                 p // block * block))
        hits.append(min(best, (p - 1) // block * block))
        seen.append((p, ids))
    return hits


def test_mooncake_hash_ids_give_the_hits_the_file_implies(engine_path):
    # Whole prompts in one chunk, so each prompt is cached as soon as it is scheduled; the
    # pool holds the trace's few thousand distinct blocks without evicting any.
    sc = load_scenario(repo_root() / "scenarios" / "mooncake-trace.yaml", [
        "scheduler.prefix_caching=true", "scheduler.chunk_tokens=8192",
        "variants=[{name: none, policy: {kind: none}}]"])
    res = run_scenario(sc, engine_path=engine_path)
    got = res.variants[0].requests.column("cached_tokens").tolist()
    want = _mooncake_hits()
    assert got == want
    assert sum(want) == 531968  # 81.5% of the trace's 652371 prompt tokens
    summary = res.summaries[0]
    assert summary["prefix_cached_tokens"] == sum(want)
    assert summary["prefix_hit_rate"] == pytest.approx(531968 / 652371, rel=1e-12)


def test_a_block_size_that_does_not_divide_512_shares_only_blocks_inside_shared_ids(
        engine_path):
    # block 48: 512 = 10.67 blocks; a prompt sharing 2 trace blocks (1024 tokens) with an
    # earlier one shares the 21 whole 48-token blocks inside them (1008 tokens), not the
    # 22nd, which reaches into the third trace block.
    sc = load_scenario(repo_root() / "scenarios" / "mooncake-trace.yaml", [
        "scheduler.prefix_caching=true", "scheduler.chunk_tokens=8192",
        "scheduler.block_size=48", "run.requests=40",
        "variants=[{name: none, policy: {kind: none}}]"])
    got = run_scenario(sc, engine_path=engine_path).variants[0].requests.column(
        "cached_tokens").tolist()
    assert got == _mooncake_hits(48)[:40]
    assert 1008 in got


# -- off is today's engine -------------------------------------------------------------------

def test_caching_off_ignores_hash_ids_and_shared_prefixes(engine_path):
    sets = ["run.requests=30", "workload.shared_prefix_tokens=600",
            "workload.shared_prefix_groups=3"]
    sc = load_scenario(DEFAULT, sets)
    res = run_scenario(sc, engine_path=engine_path)
    for v in res.variants:
        assert not v.requests.column("cached_tokens").any()
    assert all(s["prefix_hit_rate"] is None for s in res.summaries)
    # and the same run with caching on saves prefill
    on = run_scenario(load_scenario(DEFAULT, [*sets, "scheduler.prefix_caching=true"]),
                      engine_path=engine_path)
    assert all(s["prefix_cached_tokens"] > 0 for s in on.summaries)
    assert on.summaries[0]["ttft_p50_s"] < res.summaries[0]["ttft_p50_s"]


def test_caching_on_without_shared_prompts_or_preemption_changes_nothing(engine_path):
    # The default workload shares nothing and does not preempt: caching finds no hit, so
    # every record is as without it (the pool's free queue only reorders free blocks).
    sets = ["run.requests=60"]
    off = run_scenario(load_scenario(DEFAULT, sets), engine_path=engine_path)
    on = run_scenario(load_scenario(DEFAULT, [*sets, "scheduler.prefix_caching=true"]),
                      engine_path=engine_path)
    for a, b in zip(off.variants, on.variants, strict=True):
        assert not a.requests.column("preemptions").any()
        assert a.requests == b.requests and a.iterations == b.iterations
    assert on.summaries[0]["prefix_hit_rate"] == 0.0


def test_same_seed_same_records_with_caching():
    sets = ["run.requests=40", "workload.shared_prefix_tokens=300",
            "workload.shared_prefix_groups=4", "scheduler.prefix_caching=true"]
    a = run_scenario(load_scenario(DEFAULT, sets))
    b = run_scenario(load_scenario(DEFAULT, sets))
    for x, y in zip(a.variants, b.variants, strict=True):
        assert x.requests == y.requests and x.iterations == y.iterations



def test_the_text_table_and_report_show_the_hit_rate_only_with_caching():
    sets = ["run.requests=10", "workload.shared_prefix_tokens=320",
            "variants=[{name: none, policy: {kind: none}}]"]
    off = run_scenario(load_scenario(DEFAULT, sets)).summaries
    on = run_scenario(load_scenario(DEFAULT, [*sets, "scheduler.prefix_caching=true"])
                      ).summaries
    assert on[0]["prefix_cached_tokens"] == 9 * 320  # all but the first hit 20 blocks
    rate = f"{on[0]['prefix_hit_rate']:.3f}"
    assert f"{rate} (2880)" in format_table(on)
    assert f"| {rate} | 2880 |" in "\n".join(_health(on))
    assert "prefix" not in format_table(off) and "prefix" not in "\n".join(_health(off))


@pytest.mark.parametrize("release, cached", [("0.33", 48), ("0.20", 32)])
def test_an_eagle_replica_finds_its_hits_as_its_release_does(release, cached, engine_path):
    # Two 64-token prompts of the same 4 blocks, EAGLE drafting: the second hits at most
    # ⌊63 / 16⌋ = 3 blocks; vLLM 0.20 drops the last of them.
    from sim.drafters import Drafter

    s = setup(table([0.0, 0.5], [64, 64], [4, 4], hash_ids=[[1, 2, 3, 4]] * 2),
              policy=lambda: FixedGamma(2), draft=FakeCost(0.001, 0.0),
              acceptance=IidChain(1.0), max_batched_tokens=256, prefix_caching=True,
              vllm_release=release)
    s = replace(s, drafter=Drafter("eagle", s.draft))
    assert [r.cached_tokens for r in simulate(s, path=engine_path).requests] == [0, cached]


def test_a_finished_requests_output_blocks_are_cached_and_freed_to_the_tail(engine_path):
    # 3 blocks of 16. r0 (16-token prompt, 1 out) leaves one cached block; r1 (8-token
    # prompt, 9 out) fills a block with 8 prompt and 8 output tokens, which vLLM caches,
    # so when r1 finishes it goes to the tail of the free queue, behind r0's. r2 (20
    # tokens) then takes the free block and r0's, evicting it: r3, sharing r0's block,
    # finds nothing (freed uncached, to the head, r1's block would have gone first).
    s = setup(table([0.25, 1.5, 12.5, 16.5], [16, 8, 20, 17], [1, 9, 1, 1],
                    hash_ids=[(1,), None, None, (1,)]),
              cost=FakeCost(overhead_s=1.0, per_token_s=0.0), prefix_caching=True, blocks=3,
              max_num_seqs=4, max_batched_tokens=64)
    res = simulate(s, path=engine_path)
    assert all(r.finished for r in res.requests)
    assert res.requests[3].cached_tokens == 0


@pytest.mark.parametrize("prompts, ids, cached", [
    ((64, 64), [(1, 2, 3, 4)] * 2, 48),  # block 2's next block is shared: a hit
    ((40, 40), [(1, 2)] * 2, 16),  # block 1 is followed by each prompt's own tail
    ((40, 40), [(1, 2, 3), (1, 2, 4)], 16)])  # ... or by blocks that differ
def test_an_eagle_block_is_a_hit_only_if_the_token_after_it_is_shared_in_0_33(
        prompts, ids, cached, engine_path):
    # vLLM 0.33 hashes an EAGLE drafter's blocks with the token after them: the last block
    # two prompts share before they part is no hit (the prompts are taken to part at the
    # first token of the block whose keys differ).
    from sim.drafters import Drafter

    s = setup(table([0.0, 0.5], list(prompts), [4, 4], hash_ids=ids),
              policy=lambda: FixedGamma(2), draft=FakeCost(0.001, 0.0),
              acceptance=IidChain(1.0), max_batched_tokens=256, prefix_caching=True)
    s = replace(s, drafter=Drafter("eagle", s.draft))
    assert [r.cached_tokens for r in simulate(s, path=engine_path).requests] == [0, cached]


def test_a_block_computed_beside_an_identical_one_is_cached_too(engine_path):
    # r1 (97 tokens) and r2 (65 tokens) share their 4 full blocks and prefill them side by
    # side, each computing its own copy; r2 is then preempted (7 usable blocks). vLLM
    # caches both copies (it does not de-duplicate), so when r2 resumes, r1's copies and its
    # own still hold its 4 blocks: it recomputes 1 token, not 49 (a private second copy,
    # freed to the head of the free queue, is reused first and lost).
    s = setup(table([7.5417, 8.4583, 9.6667], [1, 97, 65], [3, 1, 1],
                    hash_ids=[(3,), (0, 3, 0, 0), (0, 3, 0, 0)]),
              cost=FakeCost(overhead_s=1.0, per_token_s=0.0), prefix_caching=True, blocks=7,
              max_num_seqs=6, max_batched_tokens=128, chunked=True, chunk=24)
    res = simulate(s, path=engine_path)
    r2 = res.requests[2]
    assert r2.finished and r2.preemptions == 1 and r2.recomputed_tokens == 1
