"""Conservation properties over random small scenarios (hypothesis), and preemption."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import sim.replica
from sim.engine_path import PATHS
from sim.kv import BlockManager
from sim.policies import BatchLadder, FixedGamma, NoSpeculation, TreePolicy
from sim.runner import simulate
from tests.sim.fakes import FakeCost, IidChain, setup, table
from tests.sim.test_policies import Mixed


class CheckedBlocks(BlockManager):
    """A block pool that asserts its invariants after every change: on the reference path,
    every block is held or free after each call; the fast paths write a stretch's rows and
    the pool back at its end (a call among them sees rows not yet written), so there the
    sum is checked at the end of the run (every block back in the pool)."""

    every_call = True

    def _check(self):
        assert 0 <= self.free_blocks <= self.capacity_blocks
        assert (self.blocks >= 0).all()
        if self.every_call:
            assert int(self.blocks.sum()) + self.free_blocks == self.capacity_blocks

    def grant(self, slots, held, extra):
        assert (held == self.blocks[slots]).all()
        super().grant(slots, held, extra)
        self._check()

    def release(self, slots):
        super().release(slots)
        self._check()

    def take(self, slot, n):
        super().take(slot, n)
        self._check()

    def returned(self, n):
        super().returned(n)
        self._check()

    def rolled_back(self, held, tokens):
        keep = super().rolled_back(held, tokens)
        assert (keep >= 0).all() and (keep <= held).all()
        assert 0 <= self.free_blocks <= self.capacity_blocks
        return keep


@pytest.fixture(scope="module")
def monkeypatch_blocks(engine_path):
    """Every replica's pool checks its invariants (patched for this module's tests)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(sim.replica, "BlockManager", CheckedBlocks)
    mp.setattr(CheckedBlocks, "every_call", engine_path == PATHS["reference"])
    flush = sim.replica.Replica.flush_running

    def flush_checked(r):  # the run's end: every stretch written back
        flush(r)
        assert int(r.kv.blocks.sum()) + r.kv.free_blocks == r.kv.capacity_blocks

    mp.setattr(sim.replica.Replica, "flush_running", flush_checked)
    yield
    mp.undo()


POLICIES = {
    "none": NoSpeculation,
    "g1": lambda: FixedGamma(1),
    "g4": lambda: FixedGamma(4),
    "tree": lambda: TreePolicy([2, 1, 2]),
    "ladder": lambda: BatchLadder([[1, 2, 3], [3, 100, 0]]),
    "mixed": Mixed,  # a shape per sequence
}


@settings(max_examples=40, deadline=None)
# the pipeline livelock: the oldest sequence preempted itself while younger ones were in flight
@example(n=5, seed=907, policy="g4", chunked=True, max_num_seqs=4, spare_blocks=0, alpha=0.84,
         stages=3, order="vllm_v1", async_scheduling=False)
# an arrival whose timeout ended a hair short of its time was submitted there, before it
@example(n=5, seed=1073, policy="g1", chunked=False, max_num_seqs=2, spare_blocks=0,
         alpha=0.0, stages=2, order="vllm_v1", async_scheduling=False)
@given(
    n=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(sorted(POLICIES)),
    chunked=st.booleans(),
    max_num_seqs=st.integers(1, 6),
    spare_blocks=st.integers(0, 12),
    alpha=st.floats(0.0, 1.0),
    stages=st.sampled_from([1, 1, 2, 3]),
    order=st.sampled_from(["vllm_v1", "decode_first", "prefill_first"]),
    async_scheduling=st.booleans(),  # vllm_v1 with one stage only (vLLM's)
)
def test_every_request_finishes_with_exactly_its_output(
    monkeypatch_blocks, n, seed, policy, chunked, max_num_seqs, spare_blocks, alpha, stages,
    order, async_scheduling, engine_path):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, 60, n)
    output = rng.integers(1, 40, n)
    arrivals = np.sort(rng.uniform(0, 0.2, n))
    # Capacity: the largest request plus a verify fits, plus a few spare blocks -> tight.
    blocks = int(-(-(prompt + output).max() // 16)) + 2 + spare_blocks
    s = setup(table(arrivals, prompt, output), policy=POLICIES[policy],
              draft=FakeCost(0.001, 0.0001), acceptance=IidChain(alpha), blocks=blocks,
              max_num_seqs=max_num_seqs, max_batched_tokens=128, chunked=chunked, chunk=16,
              seed=seed, cost=FakeCost(stages=stages), order=order,
              async_scheduling=async_scheduling and order == "vllm_v1" and stages == 1)
    res = simulate(replace(s, pipeline_stages=stages), path=engine_path)
    assert len(res.requests) == n
    for r in res.requests:
        assert r.finished
        assert r.emitted_tokens == r.output_tokens
        assert r.arrival_at <= r.first_scheduled_at <= r.first_token_at <= r.finished_at
        assert 0 <= r.accepted_tokens <= r.drafted_tokens
    # the iteration records and the request records account for the same tokens
    its, reqs = res.iterations, res.requests
    assert sum(it.emitted_tokens for it in its) == int(output.sum())
    assert sum(it.accepted_tokens for it in its) == sum(r.accepted_tokens for r in reqs)
    assert sum(it.drafted_tokens for it in its) == sum(r.drafted_tokens for r in reqs)
    assert sum(it.decode_seqs for it in its) == sum(r.verify_steps for r in reqs)
    if order == "prefill_first":  # SGLang's: a prefill batch never carries decodes
        assert not any(it.prefill_tokens and it.decode_seqs for it in its)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 10), seed=st.integers(0, 1000), horizon=st.floats(0.01, 0.5))
def test_horizon_keeps_every_arrived_request(monkeypatch_blocks, n, seed, horizon,
                                             engine_path):
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0, 0.5, n))
    s = setup(table(arrivals, rng.integers(1, 60, n), rng.integers(1, 40, n)),
              policy=POLICIES["g4"], draft=FakeCost(0.001, 0.0), acceptance=IidChain(0.7),
              max_num_seqs=3)
    res = simulate(s, horizon_s=horizon, path=engine_path)
    assert len(res.requests) == int((arrivals <= horizon).sum())
    for r in res.requests:
        assert r.emitted_tokens <= r.output_tokens
        assert r.finished == (r.emitted_tokens == r.output_tokens)


def test_tight_memory_preempts_and_everything_still_finishes(monkeypatch_blocks, engine_path):
    # 8 requests of 64 prompt + 64 output tokens = 8 blocks each at the end; 20 blocks total.
    n = 8
    s = setup(table(np.zeros(n), [64] * n, [64] * n), policy=lambda: FixedGamma(3),
              draft=FakeCost(0.001, 0.0), acceptance=IidChain(0.6), blocks=20,
              max_num_seqs=8, max_batched_tokens=512, chunked=True, chunk=64)
    res = simulate(s, path=engine_path)
    assert all(r.finished and r.emitted_tokens == 64 for r in res.requests)
    assert sum(r.preemptions for r in res.requests) > 0
    # The oldest request is never the victim while younger ones run (vLLM's order).
    assert res.requests[0].preemptions == 0


def test_a_pipelined_sequence_in_flight_can_be_preempted_and_its_result_is_dropped(
        monkeypatch_blocks, engine_path):
    # 3 stages, a pool the largest request plus a verify barely fits: sequences in flight are
    # the only possible victims of the oldest, so the run must preempt some of them.
    rng = np.random.default_rng(907)
    n = 5
    prompt, output = rng.integers(1, 60, n), rng.integers(1, 40, n)
    s = setup(table(np.sort(rng.uniform(0, 0.2, n)), prompt, output),
              policy=POLICIES["g4"], draft=FakeCost(0.001, 0.0001), acceptance=IidChain(0.84),
              blocks=6, max_num_seqs=4, max_batched_tokens=128, chunked=True, chunk=16,
              seed=907, cost=FakeCost(stages=3))
    res = simulate(replace(s, pipeline_stages=3), path=engine_path)
    assert all(r.finished and r.emitted_tokens == r.output_tokens for r in res.requests)
    assert sum(r.preemptions for r in res.requests) > 0
    assert res.requests[0].preemptions == 0  # the oldest is never a victim of younger ones


def test_a_replica_that_stops_emitting_raises_instead_of_looping(engine_path):
    # A pool smaller than one request (which sim.build refuses). vLLM 0.11 admits its first
    # chunk: the request preempts itself every iteration; the liveness guard names the
    # replica and the state. From 0.20 its whole prompt must fit to be admitted: it never
    # is, and the replica says it has nothing to schedule.
    from sim.replica import stall_limit

    tab = table([0.0], [64], [10])
    s = setup(tab, blocks=2, max_num_seqs=2, max_batched_tokens=128, chunked=True, chunk=16,
              vllm_release="0.11")
    limit = stall_limit(tab, s.limits)
    assert limit == 2 * 5 + 100  # 2·⌈74 / 16⌉ + 100
    with pytest.raises(RuntimeError, match=r"replica 0: \d+ iterations without emitting a "
                                           r"token \(a livelock; the limit is 110\).*KV"):
        simulate(s, path=engine_path)
    s = replace(s, limits=replace(s.limits, vllm_release="0.20"))
    with pytest.raises(RuntimeError, match=r"^replica 0: nothing schedulable with work queued"):
        simulate(s, path=engine_path)


def test_preempted_request_recomputes_prompt_plus_output(monkeypatch_blocks, engine_path):
    # Two requests, room for one: the younger is preempted and re-prefills what it had.
    s = setup(table([0.0, 0.0], [16, 16], [40, 40]), blocks=5, max_num_seqs=2,
              max_batched_tokens=512, chunked=True, chunk=64)
    res = simulate(s, path=engine_path)
    old, young = res.requests
    assert old.preemptions == 0 and young.preemptions >= 1
    recompute = [it.prefill_tokens for it in res.iterations if it.prefill_tokens > 16]
    assert recompute and all(p > 16 for p in recompute)
    assert young.emitted_tokens == 40 and young.finished


def test_same_seed_same_records_different_seed_different(engine_path):
    def run(seed):
        rng = np.random.default_rng(seed)
        n = 30
        s = setup(table(np.sort(rng.uniform(0, 1, n)), rng.integers(1, 200, n),
                        rng.integers(1, 100, n)), policy=POLICIES["g4"],
                  draft=FakeCost(0.001, 0.0), acceptance=IidChain(0.7), chunked=True, seed=seed)
        return simulate(s, path=engine_path)

    a, b, c = run(1), run(1), run(2)
    assert a.requests == b.requests and a.iterations == b.iterations
    assert a.requests != c.requests


def test_closed_loop_users_keep_one_request_each_in_flight(engine_path):
    from dataclasses import replace

    n, users = 30, 3
    s = replace(setup(table(np.full(n, np.nan), [8] * n, [5] * n), max_num_seqs=8),
                closed_loop_users=users, think_s=np.full(n + users, 0.05))
    res = simulate(s, path=engine_path)
    assert len(res.requests) == n and all(r.finished for r in res.requests)
    # at most `users` requests are ever outstanding: each arrives after an earlier one ends
    events = sorted([(r.arrival_at, 1) for r in res.requests]
                    + [(r.finished_at, -1) for r in res.requests])
    level = np.cumsum([d for _, d in events])
    assert level.max() == users
    # the first requests arrive one think time after the start
    assert [r.arrival_at for r in res.requests[:users]] == pytest.approx([0.05] * users)
