"""KV offload to a CPU tier below the prefix cache (``sim.offload``, vLLM 0.33's native
offload): a load priced by hand, the tier's capacity held at every change and over runs,
the hit rate it adds on the Mooncake-format trace, determinism, and the refusals."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.offload
import sim.replica
from sim.build import setups
from sim.cli import main
from sim.cluster import wire
from sim.engine_path import PATHS
from sim.loading import load_scenario, repo_root
from sim.offload import CpuTier, TierSpec, tier_blocks
from sim.runner import run_scenario, simulate
from tests.sim.fakes import setup, table
from tests.sim.test_prefix_cache import CheckedPrefix

MOONCAKE = repo_root() / "scenarios" / "mooncake-trace.yaml"
# the Mooncake-format trace (30 conversations, each turn's prompt starting with the one
# before) on one H100 without speculation, its GPU pool cut to 1,000 blocks of 16 tokens
SMALL_POOL = ["scheduler.prefix_caching=true", "scheduler.num_gpu_blocks_override=1000",
              "variants=[{name: none, policy: {kind: none}}]"]


class CheckedTier(CpuTier):
    """A CPU tier that checks its accounting (never more blocks than it holds, the LRU
    queue whole) after every change."""

    def offer(self, idents):
        super().offer(idents)
        self.check()

    def touch(self, idents):
        super().touch(idents)
        self.check()

    def pin(self, idents):
        super().pin(idents)
        self.check()

    def unpin(self, idents):
        super().unpin(idents)
        self.check()


@pytest.fixture
def checked(monkeypatch):
    """Every replica's CPU tier checks itself after every change; the tiers are
    collected."""
    tiers = []

    class Collected(CheckedTier):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            tiers.append(self)

    monkeypatch.setattr(sim.offload, "CpuTier", Collected)
    return tiers


@pytest.fixture
def checked_pool(monkeypatch, checked):
    """The CPU tiers check themselves, and so does the GPU pool above them (its blocks
    held while loading included)."""
    monkeypatch.setattr(sim.replica, "PrefixCachingBlockManager", CheckedPrefix)
    return checked


def _mooncake(*sets):
    sc = load_scenario(MOONCAKE, [*SMALL_POOL, *sets])
    return run_scenario(sc)


# -- the size and the price, by hand ---------------------------------------------------------

def test_the_tier_holds_the_gib_over_a_blocks_bytes_on_every_gpu():
    # Llama-3-8B: 131,072 KV bytes a token on one GPU, 2 MiB a block of 16: 16 GiB hold 8,192
    assert tier_blocks(16, 16, 131_072, 1) == 8192
    # vLLM's --kv-offloading-size is the engine's, summed over its TP ranks: 4 GPUs, 4x a block
    assert tier_blocks(16, 16, 131_072 / 4, 4) == 8192
    # a block rounded up to the host page: 16 x 1,000 = 16,000 bytes take 16,384
    assert tier_blocks(1, 16, 1000, 1) == (1 << 30) // 16384


def test_an_mla_latent_is_kept_once_for_its_tp_group():
    """vLLM's replicated_layout: DeepSeek-V3's latent, 35,136 bytes a token (FP8) on each
    of 8 H200s alike, is offloaded once: 16 tokens make 562,176 bytes, 565,248 a page
    rounded, so 100 GiB hold 189,959 blocks (not an eighth of that)."""
    sc = load_scenario(repo_root() / "scenarios" / "pd-deepseek-v3-mtp.yaml", [
        "disaggregation=null", "scheduler.prefix_caching=true", "scheduler.kv_offload_gib=100",
        "variants=[{name: none, policy: {kind: none}}]"])
    (_, s), = setups(sc)
    assert s.limits.offload.bytes_per_token == 35_136
    assert s.limits.offload.capacity_blocks == (100 << 30) // 565_248 == 189_959


def _evicted_then_reloaded(gib_blocks: int | None):
    """Request 0 (4 blocks of 16: two trace blocks of 32 tokens, ids 1 and 2), then request
    1 (ids 3, 4) whose 5 blocks (prompt and output) evict request 0's from a GPU pool of 5,
    then request 2 with request 0's prompt: a GPU miss; with a CPU tier, a CPU hit."""
    tab = table([0.0, 1.0, 2.0], [64, 64, 64], [2, 2, 2],
                hash_ids=[(1, 2), (3, 4), (1, 2)], hash_block_tokens=32)
    s = setup(tab, prefix_caching=True, blocks=5, max_batched_tokens=128)
    if gib_blocks is not None:
        tier = TierSpec(gib=1.0, capacity_blocks=gib_blocks, link="test", bytes_per_s=1e9,
                        latency_s=1e-3, bytes_per_token=1000.0)
        s = replace(s, limits=replace(s.limits, offload=tier))
    return s, simulate(s)


def test_a_load_takes_the_bytes_over_the_link_plus_the_latency(checked_pool):
    s, res = _evicted_then_reloaded(100)
    cpu = checked_pool[0]
    loads = res.loads.columns
    # one load: request 2's 3 blocks past its (empty) GPU hit, at most (64 - 1) // 16 in all
    assert loads["id"].tolist() == [2] and loads["tokens"].tolist() == [48]
    assert loads["gpu_hit_tokens"].tolist() == [0] and loads["first"].tolist() == [True]
    # 48 tokens x 1,000 bytes over 1 GB/s plus 1 ms (the link was free: sent at once)
    arrival = 2.0
    assert loads["start_at"][0] == arrival and loads["sent_at"][0] == arrival
    assert loads["ready_at"][0] - loads["sent_at"][0] == pytest.approx(1e-3 + 48e3 / 1e9,
                                                                       rel=1e-12)
    r = res.requests.columns
    # its GPU hit is nothing; admitted as the load ends, it prefills the last 16 tokens
    assert r["cached_tokens"].tolist() == [0, 0, 0]
    assert r["first_scheduled_at"][2] == loads["ready_at"][0]
    prefill = [it.prefill_tokens for it in res.iterations if it.prefill_tokens]
    assert prefill == [64, 64, 16]
    # TTFT: the load, then one pass of 16 new tokens (FakeCost: 10 ms + 1 ms a token)
    ttft = r["first_token_at"][2] - r["arrival_at"][2]
    assert ttft == pytest.approx(1.048e-3 + 0.010 + 16 * 0.001, rel=1e-9)
    # stored as computed: request 0's and 1's 4 prompt blocks each, then request 2's,
    # found again (nothing evicted: 100 blocks); output blocks of < 16 tokens: none full
    t = res.tiers.columns
    assert t["stored_blocks"].tolist() == [8] and t["evicted_blocks"].tolist() == [0]
    assert cpu.held_blocks == 8 and cpu.free == cpu.capacity_blocks
    # without a tier request 2 prefills all of it
    _, plain = _evicted_then_reloaded(None)
    assert [it.prefill_tokens for it in plain.iterations if it.prefill_tokens] == [64, 64, 64]
    assert plain.loads is None and plain.tiers is None


def test_a_tier_too_small_for_the_prompt_evicts_its_tail_first_and_loads_what_is_left(
        checked_pool):
    # 6 CPU blocks: requests 0 and 1 offer 4 each; request 1's offer evicts 2 of request
    # 0's, its last two (a request's tail goes first), so request 2 finds blocks 0 and 1
    s, res = _evicted_then_reloaded(6)
    loads = res.loads.columns
    assert loads["tokens"].tolist() == [32]
    assert [it.prefill_tokens for it in res.iterations if it.prefill_tokens] == [64, 64, 32]
    t = res.tiers.columns
    assert (t["held_blocks"] <= 6).all() and (t["peak_blocks"] <= 6).all()
    assert t["evicted_blocks"].tolist() == [4]  # 2 by request 1, 2 by request 2's own


# -- capacity: never more than it holds ------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(cap=st.integers(1, 12),
       ops=st.lists(st.tuples(st.sampled_from(["offer", "pin", "touch"]),
                              st.integers(0, 5), st.integers(1, 8)), max_size=40))
def test_the_tier_never_holds_more_than_its_capacity_nor_evicts_a_block_being_loaded(cap, ops):
    """Random offers (request r's blocks 0..n-1, keyed (r, j)), loads of what is held and
    touches: at every step the tier holds at most ``cap`` blocks and its queue is whole;
    a pinned block stays until unpinned; an offer not dropped leaves all its blocks held."""
    tier = CpuTier(cap, 16)
    pinned: list[list[tuple[int, int]]] = []
    for op, r, n in ops:
        idents = [(100 * r + j, 0) for j in range(n)]
        if op == "offer":
            dropped = tier.dropped
            tier.offer(idents)
            if tier.dropped == dropped:
                assert tier.lookup(idents)[0] == n
        elif op == "pin":
            held, _ = tier.lookup(idents)
            if held:
                tier.pin(idents[:held])
                pinned.append(idents[:held])
        else:
            tier.touch(idents)
        tier.check()
        assert tier.held_blocks <= cap
        for p in pinned:
            assert tier.lookup(p)[0] == len(p)  # nothing being loaded was evicted
        if len(pinned) > 2:
            tier.unpin(pinned.pop(0))
            tier.check()


def test_capacity_holds_at_every_change_over_the_mooncake_trace(checked):
    # 4 GiB: 2,048 blocks of Llama-3-8B's 2 MiB, a fifth of the blocks the trace offers
    res = _mooncake("scheduler.kv_offload_gib=4")
    (tier,) = checked
    t = res.variants[0].tiers.columns
    assert t["capacity_blocks"].tolist() == [2048]
    assert t["evicted_blocks"][0] > 0  # the tier was full, and evicted
    assert t["peak_blocks"][0] == 2048 and t["held_blocks"][0] == 2048
    assert len(res.variants[0].loads) > 0  # and loads pinned blocks meanwhile
    # a smaller tier finds less: 4 GiB 0.105 of the prompt tokens, 16 GiB 0.198
    assert res.summaries[0]["cpu_hit_rate"] == pytest.approx(0.1053, abs=5e-4)
    assert tier.free == tier.capacity_blocks  # no load is left holding a block


# -- the Mooncake-format trace ---------------------------------------------------------------

def test_a_cpu_tier_raises_the_hit_rate_over_gpu_only_on_the_mooncake_trace():
    """GPU-only, 1,000 blocks keep 0.617 of the prompt tokens from being prefilled; a
    16 GiB CPU tier (8,192 blocks) holds every block the trace repeats, and the tokens not
    prefilled come to 0.815, what a GPU pool that holds everything gets. Every load is priced
    over the H100's PCIe 5.0 x16 host link: 131,072 bytes a token over 63 GB/s plus 3 µs."""
    gpu = _mooncake().summaries[0]
    res = _mooncake("scheduler.kv_offload_gib=16")
    cpu = res.summaries[0]
    assert gpu["prefix_hit_rate"] == pytest.approx(0.617, abs=5e-4)
    assert "cpu_hit_rate" not in gpu
    assert cpu["cpu_hit_rate"] == pytest.approx(0.198, abs=5e-4)
    assert cpu["prefix_hit_rate"] + cpu["cpu_hit_rate"] == pytest.approx(0.815, abs=5e-4)
    assert cpu["prefix_hit_rate"] + cpu["cpu_hit_rate"] > gpu["prefix_hit_rate"] + 0.15
    unlimited = run_scenario(load_scenario(MOONCAKE, [
        "scheduler.prefix_caching=true", "variants=[{name: none, policy: {kind: none}}]"]))
    assert unlimited.summaries[0]["prefix_hit_rate"] == pytest.approx(0.815, abs=5e-4)
    assert cpu["ttft_p50_s"] < gpu["ttft_p50_s"]
    loads = res.variants[0].loads.columns
    on_link = loads["ready_at"] - loads["sent_at"]
    np.testing.assert_allclose(on_link, 3e-6 + loads["tokens"] * 131_072 / 63e9, rtol=1e-9)
    assert cpu["cpu_loaded_tokens"] == int(loads["tokens"].sum()) > 0
    # prompt blocks only (vLLM's offload_prompt_only): the trace's 7,377 distinct ones fit
    assert cpu["cpu_stored_blocks"] == cpu["cpu_held_blocks"] == 7377
    assert cpu["cpu_evicted_blocks"] == 0


def test_the_same_seed_gives_the_same_records():
    a = _mooncake("scheduler.kv_offload_gib=2").variants[0]
    b = _mooncake("scheduler.kv_offload_gib=2").variants[0]
    for x, y in ((a.requests, b.requests), (a.loads, b.loads), (a.tiers, b.tiers),
                 (a.iterations, b.iterations)):
        assert x.columns.keys() == y.columns.keys()
        for k in x.columns:
            np.testing.assert_array_equal(x.columns[k], y.columns[k])


def test_a_tier_walks_and_gives_the_reference_paths_records(engine_path):
    """The compiled walk offers the tier what the pool caches, ranks a finished request's
    blocks anew and stops before a load (a CPU hit) or a request passed over while its
    blocks load: the same requests, iterations, loads and tier as the reference path."""
    sc = load_scenario(MOONCAKE, [*SMALL_POOL, "scheduler.kv_offload_gib=2"])
    (_, s), = setups(sc)
    assert s.limits.offload.capacity_blocks == 1024
    assert s.limits.offload.link == "pcie5-x16"
    (r,) = wire(simpy.Environment(), s).replicas
    # (prefix caching alone keeps it off the steady stretch)
    assert r.fast_paths()["walk"] is None and r.fast_paths()["steady"] is not None
    ref = simulate(s, path=PATHS["reference"])
    got = simulate(s, path=engine_path)
    assert len(ref.loads) > 0 and ref.tiers.columns["stored_blocks"][0] > 0
    for x, y in ((ref.requests, got.requests), (ref.loads, got.loads),
                 (ref.tiers, got.tiers), (ref.iterations, got.iterations)):
        assert x.columns.keys() == y.columns.keys()
        for k in x.columns:
            np.testing.assert_array_equal(x.columns[k], y.columns[k])


# -- refusals --------------------------------------------------------------------------------

@pytest.mark.parametrize(("sets", "expected"), [
    (["scheduler.kv_offload_gib=4"],
     "scheduler.kv_offload_gib: it is a tier below the prefix cache: set prefix_caching true"),
    (["scheduler.prefix_caching=true", "scheduler.kv_offload_gib=-1"],
     "scheduler.kv_offload_gib: must be > 0, got -1"),
    (["scheduler.prefix_caching=true", "scheduler.kv_offload_link=pcie5-x16"],
     "scheduler.kv_offload_link: a link for the CPU tier's loads, which kv_offload_gib"),
    (["scheduler.prefix_caching=true", "scheduler.kv_offload_gib=4",
      "scheduler.kv_offload_link=pcie9"], "scheduler.kv_offload_link: unknown link"),
    (["scheduler.prefix_caching=true", "scheduler.kv_offload_gib=0.0001"],
     "scheduler.kv_offload_gib: 0.0001 GiB holds no KV block"),
    (["scheduler.prefix_caching=true", "scheduler.kv_offload_gib=4",
      "scheduler.async_scheduling=true"],
     "scheduler.kv_offload_gib: not modelled with async_scheduling"),
    (["scheduler.prefix_caching=true", "scheduler.kv_offload_gib=4",
      "disaggregation={prefill: {replicas: 1}, decode: {replicas: 1}}"],
     "scheduler.kv_offload_gib: a CPU tier is not modelled with prefill/decode"),
])
def test_bad_tier_settings_are_refused_in_one_line(sets, expected, tmp_path, capsys):
    args = ["run"]
    for x in sets:
        args += ["--set", x]
    code = main([*args, "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert expected in err[0]
    assert not (tmp_path / "o").exists()
