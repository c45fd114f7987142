"""Pipeline-parallel replicas: a hand-checkable two-stage trace, and overlap in flight."""

from dataclasses import dataclass, replace

import numpy as np
import pytest

from sim.runner import simulate
from tests.sim.fakes import setup, table


@dataclass(frozen=True)
class _Cost:
    seconds: float
    bound: str
    stage_s: tuple
    hop_s: float


@dataclass(frozen=True)
class TwoStages:
    """Each of 2 stages: 5 ms + 1 ms per new token; a 2 ms hop between them."""

    def pass_seconds_sums(self, sum_new, sum_ctx, sum_new_ctx, sum_new_sq, sum_keys=None, *,
                          n_seqs):
        return 2 * (0.005 + 0.001 * sum_new) + 0.002

    def pass_seconds_bound_sums(self, sum_new, sum_ctx, sum_new_ctx, sum_new_sq, sum_keys=None, *,
                                n_seqs):
        return self.pass_seconds_sums(sum_new, sum_ctx, sum_new_ctx, sum_new_sq,
                                      n_seqs=n_seqs), "memory"

    def pass_seconds_at(self, new, kv, keys, n_seqs):
        return self.pass_seconds_sums(new, kv - new, 0.0, 0.0, n_seqs=n_seqs)

    def pass_seconds_bound_at(self, new, kv, keys, n_seqs):
        return self.pass_seconds_at(new, kv, keys, n_seqs), "memory"

    def pass_cost(self, new_tokens, context, keys=None):
        stage = 0.005 + 0.001 * float(np.sum(new_tokens))
        return _Cost(2 * stage + 0.002, "memory", (stage, stage), 0.002)


def test_two_stage_pipeline_trace(engine_path):
    # r0 (prompt 4, output 3) at t=0; r1 (prompt 2, output 2) at t=1 ms.
    # mb1 r0 prefill: stage0 0-9, hop 9-11, stage1 11-20            -> r0 first token 20
    # mb2 r1 prefill (sent at 1): stage0 9-16, hop 16-18, stage1 20-27 -> r1 first token 27
    # mb3 r0 decode (sent at 20): stage0 20-26, hop 26-28, stage1 28-34
    # mb4 r1 decode (sent at 27): stage0 27-33, hop 33-35, stage1 35-41 -> r1 done 41
    # mb5 r0 decode (sent at 34): stage0 34-40, hop 40-42, stage1 42-48 -> r0 done 48
    s = replace(setup(table([0.0, 0.001], [4, 2], [3, 2]), cost=TwoStages()), pipeline_stages=2)
    res = simulate(s, path=engine_path)
    r0, r1 = res.requests
    assert (r0.first_scheduled_at, r0.first_token_at, r0.finished_at) == pytest.approx(
        (0.0, 0.020, 0.048), abs=1e-12)
    assert (r1.first_scheduled_at, r1.first_token_at, r1.finished_at) == pytest.approx(
        (0.001, 0.027, 0.041), abs=1e-12)
    starts = sorted((it.start_at, it.duration_s) for it in res.iterations)
    assert [x for pair in starts for x in pair] == pytest.approx(
        [0.0, 0.020, 0.001, 0.026, 0.020, 0.014, 0.027, 0.014, 0.034, 0.014], abs=1e-12)


def test_pipeline_keeps_two_micro_batches_in_flight_and_finishes_everything(engine_path):
    rng = np.random.default_rng(0)
    n = 40
    tab = table(np.sort(rng.uniform(0, 0.05, n)), rng.integers(1, 50, n), rng.integers(1, 30, n))
    base = setup(tab, cost=TwoStages(), max_num_seqs=16, chunked=True, chunk=32)
    one = simulate(replace(base, pipeline_stages=1), path=engine_path)
    two = simulate(replace(base, pipeline_stages=2), path=engine_path)
    assert all(r.finished and r.emitted_tokens == r.output_tokens for r in two.requests)
    # overlapping iterations exist: some micro-batch starts before the previous one ends
    its = sorted(two.iterations, key=lambda it: it.start_at)
    assert any(b.start_at < a.start_at + a.duration_s for a, b in zip(its, its[1:], strict=False))
    assert len(two.iterations) > len(one.iterations)


def test_a_three_stage_replica_with_a_few_kv_blocks_finishes_every_request(engine_path):
    # The scenario form of the pipeline livelock: pp 3, γ = 4, chunked prefill and a KV pool
    # (vLLM's num_gpu_blocks_override) that holds one and a half requests.
    from sim.loading import load_scenario
    from sim.runner import run_scenario

    sc = load_scenario(None, [
        "deployment.pp=3", "scheduler.num_gpu_blocks_override=30", "scheduler.chunk_tokens=64",
        "workload={arrivals: poisson, rate_per_s: 200, prompt: {kind: fixed, tokens: 200}, "
        "output: {kind: fixed, tokens: 100}}", "acceptance={kind: iid, alpha: 0.8}",
        "variants=[{name: g4, policy: {kind: fixed, gamma: 4}}]", "run.requests=40"])
    reqs = run_scenario(sc, engine_path=engine_path).variants[0].requests
    assert all(r.finished and r.emitted_tokens == 100 for r in reqs)
    assert sum(r.preemptions for r in reqs) > 0


def test_num_gpu_blocks_override_beyond_memory_is_refused():
    from sim.build import setups
    from sim.loading import load_scenario
    from specdec.errors import UserError

    sc = load_scenario(None, ["scheduler.num_gpu_blocks_override=100000000"])
    with pytest.raises(UserError, match=r"scheduler.num_gpu_blocks_override: must be <= the "
                                        r"\d+ KV blocks .* got 100000000"):
        setups(sc)


def test_pipeline_pass_is_a_first_come_first_served_tandem_queue():
    from sim.kernels.pipeline import pipeline_pass

    # the trace above in ms: each stage 5 + 1 per token, a 2 ms hop; mb2 queues behind mb1
    # at stage 0 (free at 9), and its stage 1 waits for mb1's (free at 20)
    free = [0.0, 0.0, 0.0]
    assert pipeline_pass(free, 0.0, 0.0, (9.0, 9.0), 2.0) == 20.0
    assert free == [9.0, 11.0, 20.0]
    assert pipeline_pass(free, 1.0, 0.0, (7.0, 7.0), 2.0) == 27.0
    assert free == [16.0, 18.0, 27.0]
    # the draft drafts on stage 0's GPU first; a link still busy holds the hop back
    free = [0.0, 30.0, 0.0]
    assert pipeline_pass(free, 0.0, 3.0, (9.0, 9.0), 2.0) == 41.0  # 0-12, hop 30-32, 32-41
    assert free == [12.0, 32.0, 41.0]
    # one stage: no hop
    free = [5.0]
    assert pipeline_pass(free, 1.0, 1.0, (4.0,), 99.0) == 10.0


@pytest.mark.parametrize("timing", ["measured", "roofline"])
@pytest.mark.parametrize("pp", [2, 3])
def test_the_walk_prices_each_stage_as_the_pipeline_timing_does(timing, pp):
    """``sim.kernels.base.stages_seconds`` on a timing's ``kernel_stages``: each stage's
    seconds, the hop, the pass's seconds and its bound the very floats and name of the
    timing's ``breakdown`` (what ``price_stages`` prices a micro-batch with)."""
    from hardware import CostModel, Deployment, load_catalog
    from sim.kernels.base import stages_seconds

    if timing == "measured":
        pytest.importorskip("aiconfigurator_core", reason="measured tables")
    cat = load_catalog()
    dep = Deployment(model=cat.model("llama-3-70b"), gpu=cat.gpu("h100"), tp=2, pp=pp,
                     timing=timing)
    t = CostModel(dep, cat).timing
    assert t.name == timing
    stages, fixed, per_token = t.kernel_stages()
    assert len(stages) == pp
    out = np.zeros(pp)
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = float(rng.integers(1, 300))
        new = n * float(rng.integers(1, 8)) + float(rng.integers(0, 2048))
        kv = new + n * float(rng.integers(0, 8000))
        keys = kv * float(rng.uniform(1.0, 4.0))
        b = t.breakdown(new, kv, keys, n)
        seconds, code, hop_s = stages_seconds(new, kv, keys, n, stages, fixed, per_token, True,
                                              out)
        assert (seconds, hop_s, tuple(out)) == (b.seconds, b.hop_s, b.stage_s)
        assert ("compute", "memory", "comm", "host")[code] == b.bound
        assert stages_seconds(new, kv, keys, n, stages, fixed, per_token, False, out)[1] == -1


PIPELINE_WALKS = {  # bench workloads in pipeline stages, each with what it exercises
    "pp2": ("pipeline", ()),
    "pp3-prefix-cache": ("pipeline", ("deployment.pp=3", "scheduler.prefix_caching=true")),
    "pp4-plain": ("pipeline", ("deployment.pp=4", "variants.0.policy={kind: none}")),
    "kv-pressure": ("pipeline", ("scheduler.num_gpu_blocks_override=900",)),
    "small-chunks": ("pipeline", ("scheduler.max_batched_tokens=300",
                                  "scheduler.chunk_tokens=256")),
    "replicas-2": ("replicas-2", ("deployment.pp=2",)),
    "task-mix-roofline": ("task-mix", ("deployment.pp=2", "deployment.timing=roofline")),
    "trace-tree": ("trace-tree", ("deployment.pp=2",)),
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", sorted(PIPELINE_WALKS))
def test_a_pipeline_walks_as_the_reference_dispatches_its_micro_batches(case, seed):
    """Every record the same whether the compiled walk or the reference scheduler forms a
    pipelined replica's micro-batches (dispatches, completions, micro-batches handed over
    in flight both ways); the walk forms all but a few, where it is open to it (under KV
    pressure the reference preempts)."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import steady_kernel
    from sim.bench import bench_scenario
    from sim.build import setups
    from sim.engine_path import PATHS
    from sim.runner import run_setups
    from tests.sim.test_golden import _assert_same_runs

    if steady_kernel.compiled_walk(True) is None:
        pytest.skip("the walk is compiled only with numba")
    workload, sets = PIPELINE_WALKS[case]
    sc = bench_scenario(400, seed, workload, None, list(sets))
    ref, comp = (run_setups(sc, setups(sc, "bench"), engine_path=PATHS[path]).variants
                 for path in ("reference", "compiled"))
    _assert_same_runs(ref, comp)
    v = comp[0]
    assert ref[0].compiled_iterations == 0
    assert v.compiled_iterations >= 0.9 * len(v.iterations)


@pytest.mark.parametrize("sets, why", [
    (("deployment.router=least_requests",),
     "pipeline stages behind a least_requests router (it reads the replicas at each arrival)"),
    (("workload={arrivals: closed_loop, users: 8, think_mean_s: 0.5}",),
     "pipeline stages under a closed loop"),
])
def test_pipelines_without_an_arrival_feed_keep_off_the_walk(sets, why):
    """A walk of micro-batches runs past arrivals it knows ahead; where a router reads the
    replicas at each arrival, or a closed loop sends as requests finish, the reference
    scheduler forms every micro-batch, and ``specsim bench`` says why."""
    from sim.bench import bench_scenario
    from sim.build import setups
    from sim.cluster import fast_paths

    sc = bench_scenario(20, 0, "replicas-2", None, ["deployment.pp=2", *sets])
    setup = setups(sc, "bench")[0][1]
    assert fast_paths(setup)["walk"] == why
