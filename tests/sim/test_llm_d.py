"""llm-d's endpoint picker (sim.llm_d): each scorer against the rule in llm-d's router
source (github llm-d/llm-d-router @ebab6879, paths under pkg/epp/), the picker, the
approximate prefix index, and the router in runs."""

from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest

from sim.llm_d import (
    LlmdConfig,
    LlmdPicker,
    PrefixIndex,
    block_hashes,
    kv_scores,
    no_hit_lru_scores,
    pick,
    prefix_scores,
    queue_scores,
    router_block_tokens,
)
from sim.loading import load_scenario, repo_root, validate
from specdec.errors import UserError
from workloads.prefix_blocks import prompt_block_keys
from workloads.requests import RequestSpec


def test_the_queue_scorer_normalises_waiting_queues_between_min_and_max():
    # scorer/queuedepth/queue.go: (max - q) / (max - min); 1.0 where all are equal
    assert queue_scores([3, 0, 1]) == [0.0, 1.0, 2 / 3]
    assert queue_scores([2, 2]) == [1.0, 1.0]


def test_the_kv_scorer_is_one_less_the_usage():
    # scorer/kvcacheutilization/kvcache_utilization.go: 1 - KVCacheUsagePercent
    assert kv_scores([0.25, 0.9, 0.0]) == [0.75, 1 - 0.9, 1.0]


def test_the_prefix_scorer_is_the_matched_share_of_the_requests_blocks():
    # scorer/prefix/plugin.go: matchBlocks / totalBlocks (matchLengthWeight 0), 0 with none
    assert prefix_scores([3, 0, 4], 4) == [0.75, 0.0, 1.0]
    assert prefix_scores([0, 0], 0) == [0.0, 0.0]


def test_the_no_hit_lru_scorer_ranks_endpoints_for_cold_requests_only():
    # scorer/nohitlru/no_hit_lru.go: never-used endpoints 1 - i / (n - 1) in candidate
    # order, then the used ones least recently used first, rank never + position; a
    # request with a hit anywhere scores 0.5 everywhere
    assert no_hit_lru_scores(True, [], 4) == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0], abs=1e-15)
    # endpoint 2 took a cold request before endpoint 0: never used 1, 3; then 2, then 0
    assert no_hit_lru_scores(True, [2, 0], 4) == pytest.approx([0.0, 1.0, 1 / 3, 2 / 3],
                                                          abs=1e-15)
    assert no_hit_lru_scores(False, [2, 0], 4) == [0.5] * 4
    assert no_hit_lru_scores(True, [], 1) == [1.0]


def test_the_router_block_is_the_engines_or_sixteen_at_least_sixty_four():
    # approximateprefix/plugin.go GetBlockSize: autoTune reads the engine's block size,
    # else blockSizeTokens (16), raised to minBlockSizeTokens (64)
    assert router_block_tokens(16, auto_tune=True) == 64
    assert router_block_tokens(128, auto_tune=True) == 128
    assert router_block_tokens(128, auto_tune=False) == 64


def test_the_index_evicts_each_servers_least_recently_added_hash_at_capacity():
    # approximateprefix/indexer.go Add: every hash into the server's LRU in order (one
    # present moves to the front), the oldest evicted past capacity and the server
    # dropped from it; Get then finds the server only where its LRU still holds it
    index = PrefixIndex([3, 3])
    index.add([1, 2, 3], 0)
    index.add([2], 1)
    assert index.match([1, 2, 3], 2) == [3, 1]  # hash 1: server 0 only; 2: both
    index.add([2], 0)  # 2 moves to the front: 1 is now the oldest
    index.add([4], 0)  # over capacity: evicts 1
    assert list(index.lru[0]) == [3, 2, 4]
    assert index.match([1, 2, 3], 2) == [0, 0]  # no server has hash 1: the walk stops
    assert index.match([2, 3, 4], 2) == [3, 1]
    index.add([5, 6], 1)
    index.add([7], 1)  # evicts 2 from server 1: hash 2 is server 0's alone
    assert index.owners[2] == 0b01 and len(index) == 6


def test_the_longest_prefix_walk_counts_each_servers_hashes_until_none_has_one():
    # matchLongestPrefix: per hash in order, every server holding it gains one; the walk
    # stops at the first hash no server holds (a server need not hold a run of them)
    index = PrefixIndex([10, 10, 10])
    index.add([1, 2, 3], 0)
    index.add([2, 3], 1)
    index.add([1], 2)
    assert index.match([1, 2, 3, 9, 2], 3) == [3, 2, 1]


def test_the_picker_takes_the_highest_score_and_a_tie_at_random():
    # picker/maxscore/picker.go: shuffle, stable sort by score: any of the tied
    rng = np.random.default_rng(0)
    assert pick([0.5, 2.0, 1.0], rng) == 1
    got = {pick([1.0, 0.2, 1.0, 1.0], np.random.default_rng(s)) for s in range(30)}
    assert got == {0, 2, 3}
    same = [pick([1.0, 1.0, 1.0], np.random.default_rng(7)) for _ in range(3)]
    assert len(set(same)) == 1  # the seed decides


def _table(specs, block_size=16):
    keys, starts = prompt_block_keys(specs, block_size)
    return SimpleNamespace(prompt_tokens=np.array([s.prompt_tokens for s in specs]),
                           block_keys=keys, block_starts=starts)


def test_a_requests_hashes_are_shared_where_its_prompt_is_and_its_own_past_it():
    # two prompts sharing their first 128 tokens (ids over 64-token blocks), 200 tokens:
    # 64-token router blocks 0 and 1 shared, block 2 each its own, the partial block 3 too
    specs = [RequestSpec(i, 0.0, 200, 5, hash_ids=(7, 8), hash_block_tokens=64)
             for i in range(2)]
    tab = _table(specs)
    a, b = (block_hashes(tab, rid, 64, 16) for rid in (0, 1))
    assert len(a) == len(b) == 4
    assert a[:2] == b[:2] and min(a[:2]) >= 0
    assert not set(a[2:]) & set(b[2:]) and a[3] < 0 and b[3] < 0
    # without keys (no prefix caching) every block is the request's own
    bare = SimpleNamespace(prompt_tokens=tab.prompt_tokens, block_keys=None,
                           block_starts=None)
    assert max(block_hashes(bare, 0, 64, 16)) < 0


class _Replica:
    """What llm-d's router reads of a replica: its queue, its KV use, its block size and
    pool (the GPU producer's autoTune), the request table, the clock."""

    def __init__(self, table, env, waiting=0, used=0, capacity=100):
        self.table, self.env = table, env
        self.limits = SimpleNamespace(block_size=16)
        self.waiting, self.holding = deque(range(waiting)), deque()
        self.kv = SimpleNamespace(used_blocks=used, capacity_blocks=capacity)


def test_the_picker_adds_its_scorers_at_weight_one_and_records_what_it_routed():
    # Requests 0-2 share a 128-token prefix (2 router blocks of 64, 3 blocks each).
    specs = [RequestSpec(i, 0.0, 192, 5, hash_ids=(1, 2), hash_block_tokens=64)
             for i in range(3)]
    env = SimpleNamespace(now=0.0)
    reps = [_Replica(_table(specs), env, waiting=w, used=u)
            for w, u in ((2, 50), (0, 10), (1, 10))]
    picker = LlmdPicker(reps, LlmdConfig(cpu_scorer=True, cpu_lru_capacity=100),
                        np.random.default_rng(0))
    picker.scrape(0.0)
    total, seen = picker.scores(0)
    # queue [0, 1, 0.5] + KV [0.5, 0.9, 0.9] + GPU prefix 0 + CPU prefix 0 + cold LRU
    # [1, 0.5, 0]: 1.5, 2.4, 1.4
    assert seen["cold"] and total == pytest.approx([1.5, 2.4, 1.4])
    assert picker.choose(0, 0.0) == 1
    # request 1 shares 2 of its 3 blocks with what went to replica 1: prefix 2/3 on both
    # scorers there, a hit, so the LRU scores 0.5 everywhere
    total, seen = picker.scores(1)
    assert not seen["cold"] and seen["gpu_matched"] == [0, 2, 0]
    assert total == pytest.approx([0 + 0.5 + 0 + 0 + 0.5, 1 + 0.9 + 4 / 3 + 0.5,
                                   0.5 + 0.9 + 0.5])
    # the queues are read once a 50 ms tick: a change inside it is not seen
    reps[1].waiting.extend(range(10))
    picker.scrape(0.04)
    assert picker.waiting == [2, 0, 1]
    picker.scrape(0.05)
    assert picker.waiting == [2, 10, 1]


def test_the_cpu_scorer_is_on_with_a_cpu_tier_and_the_knobs_only_with_llm_d():
    from sim.build import _llm_d

    sc = validate({"deployment": {"replicas": 2, "router": "llm_d"}}, "s.yaml")
    assert _llm_d(sc) == LlmdConfig(cpu_scorer=False, cpu_lru_capacity=82000)
    sc = validate({"deployment": {"replicas": 2, "router": "llm_d"},
                   "scheduler": {"prefix_caching": True, "kv_offload_gib": 4}}, "s.yaml")
    assert _llm_d(sc) == LlmdConfig(cpu_scorer=True, cpu_lru_capacity=82000)
    with pytest.raises(UserError, match=r"^s.yaml.*llm_d_cpu_scorer: only the llm_d router"):
        validate({"deployment": {"llm_d_cpu_scorer": True}}, "s.yaml")
    with pytest.raises(UserError, match="llm_d_cpu_lru_capacity: only the llm_d router"):
        validate({"deployment": {"llm_d_cpu_lru_capacity": 10}}, "s.yaml")
    with pytest.raises(UserError, match="llm_d_cpu_lru_capacity"):
        validate({"deployment": {"router": "llm_d", "llm_d_cpu_lru_capacity": 0}}, "s.yaml")
    with pytest.raises(UserError, match="llm_d_cpu_lru_capacity: sizes the CPU prefix"):
        validate({"deployment": {"router": "llm_d", "llm_d_cpu_scorer": False,
                                 "llm_d_cpu_lru_capacity": 10}}, "s.yaml")


_SETS = ["deployment.router=llm_d", "run.requests=120"]


def _records(sets, path="auto"):
    from sim.build import setups
    from sim.engine_path import PATHS
    from sim.runner import simulate_variants

    sc = load_scenario(repo_root() / "scenarios" / "shared-prefix-routing.yaml", sets)
    return simulate_variants(setups(sc), sc.run.horizon_s, path=PATHS[path])


def test_llm_d_keeps_each_prefix_group_together_and_repeats_itself():
    one, two = _records(_SETS), _records(_SETS)
    cols = one[0].requests.columns
    assert np.array_equal(cols["replica"], two[0].requests.columns["replica"])
    assert np.array_equal(cols["finished_at"], two[0].requests.columns["finished_at"])
    assert len(set(cols["replica"].tolist())) == 4
    assert cols["cached_tokens"].sum() > 0


@pytest.mark.parametrize("sets", [_SETS, [*_SETS, "scheduler.prefix_caching=false"]])
def test_fast_paths_give_the_records_of_the_reference_path_behind_llm_d(sets, monkeypatch):
    from tests.sim.test_golden import _assert_same_runs, _python_kernel_without_numba

    _python_kernel_without_numba(monkeypatch)
    runs = [_records(sets, name) for name in ("reference", "auto", "compiled")]
    _assert_same_runs(runs[0], runs[1])
    _assert_same_runs(runs[0], runs[2])
