"""Golden records: small runs of the shipped scenarios must give byte-identical CSVs.

Refactors (layering, a faster kernel) must not change what the engine computes. Each case
is a shipped scenario with a few requests and short outputs (so the committed files stay
small), plus cases that preempt, in one replica and in a pipeline. A change that *means*
to change the records regenerates them, and says so in its commit::

    SPECSIM_GOLDEN=write python -m pytest tests/sim/test_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sim.engine_path import PATHS, EnginePath
from sim.loading import load_scenario, repo_root
from sim.output import write_records
from sim.runner import run_scenario

GOLDEN = Path(__file__).parent / "golden"
SMALL = ["run.requests=8", "workload.output={kind: uniform, low: 4, high: 40}"]
CASES = {
    "default": ("default", SMALL),
    "adaptive-bursty-load": ("adaptive-bursty-load", SMALL),
    "high-load-ladder": ("high-load-ladder", SMALL),
    "llama70b-two-replicas": ("llama70b-two-replicas", SMALL),
    "pipeline-70b": ("pipeline-70b", SMALL),
    "specinfer-tree": ("specinfer-tree", SMALL),
    "task-mix-closed-loop": ("task-mix-closed-loop", SMALL),
    "offload-opt-13b": ("claims/specinfer-offload-opt-13b", SMALL),
    # drafts a grammar forbids, dropped before the verify (sim.grammar)
    "structured-output": ("structured-output", SMALL),
    # a KV pool that holds a few of the default's prompts: preemption by recompute
    "default-preempting": ("default", [*SMALL, "run.requests=24", "workload.rate_per_s=200",
                                       "scheduler.num_gpu_blocks_override=300"]),
    # three replicas behind a round-robin router, each walking past the others' events
    "round-robin-replicas": ("default", [
        "run.requests=60", "deployment.replicas=3", "workload.rate_per_s=40",
        "workload.output={kind: uniform, low: 4, high: 40}"]),
    # three pipeline stages and a tight pool: in-flight sequences are preempted too
    "pipeline-preempting": ("default", [
        "run.requests=12", "deployment.pp=3", "scheduler.num_gpu_blocks_override=30",
        "scheduler.chunk_tokens=64", "acceptance={kind: iid, alpha: 0.8}",
        "workload={arrivals: poisson, rate_per_s: 200, prompt: {kind: fixed, tokens: 200}, "
        "output: {kind: fixed, tokens: 60}}"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_records_are_byte_identical_to_the_golden_files(case, tmp_path):
    scenario, overrides = CASES[case]
    sc = load_scenario(repo_root() / "scenarios" / f"{scenario}.yaml", overrides)
    result = run_scenario(sc)
    write = os.environ.get("SPECSIM_GOLDEN") == "write"
    for v in result.variants:
        for kind in ("requests", "iterations"):
            name = f"{v.name}-{kind}.csv"
            got = tmp_path / name
            write_records(got, getattr(v, kind))
            want = GOLDEN / case / name
            if write:
                want.parent.mkdir(parents=True, exist_ok=True)
                want.write_bytes(got.read_bytes())
            assert want.exists(), f"no golden file {want} (SPECSIM_GOLDEN=write makes it)"
            assert got.read_bytes() == want.read_bytes(), (
                f"{case}: {name} differs from {want.relative_to(repo_root())}; diff it with "
                f"{got}")


def _shipped_scenarios() -> list[str]:
    from sim.loading import read_yaml

    root = repo_root() / "scenarios"
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml")
                  # a plan's candidates or search file is none
                  if not {"candidates", "search"} & set(read_yaml(p)))


def _assert_same_runs(one, two) -> None:
    """Two lists of ``VariantResult``: every record column, the end and the ITL counts equal
    (NaN where a request did not finish counts as equal to NaN)."""
    assert [v.name for v in one] == [v.name for v in two]
    for a, b in zip(one, two, strict=True):
        for kind in ("requests", "iterations"):
            ca, cb = getattr(a, kind).columns, getattr(b, kind).columns
            assert ca.keys() == cb.keys()
            for k in ca:
                np.testing.assert_array_equal(ca[k], cb[k], err_msg=f"{a.name} {kind} {k}")
        assert a.end_at == b.end_at and (a.itl_counts == b.itl_counts).all()


@pytest.mark.parametrize("scenario", _shipped_scenarios())
def test_variants_side_by_side_give_the_records_of_one_after_the_other(scenario):
    """``--workers``: every shipped scenario, its variants on two forked processes and in
    this one, record for record (pipelines, trees, preemption and traces included)."""
    from sim.build import setups
    from sim.runner import simulate_variants

    sc = load_scenario(repo_root() / "scenarios" / f"{scenario}.yaml",
                       ["run.requests=12"] if sc_has_requests(scenario) else [])
    _assert_same_runs(simulate_variants(setups(sc), sc.run.horizon_s, workers=1),
                      simulate_variants(setups(sc), sc.run.horizon_s, workers=2))


def sc_has_requests(scenario: str) -> bool:
    """Whether a shipped scenario is sized by run.requests (a trace replays its own)."""
    from sim.loading import read_yaml

    doc = read_yaml(repo_root() / "scenarios" / f"{scenario}.yaml")
    return (doc.get("workload") or {}).get("arrivals") != "trace"


def test_side_by_side_variants_relay_their_progress():
    from sim.build import setups
    from sim.runner import simulate_variants

    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", ["run.requests=40"])
    seen: dict = {}
    simulate_variants(setups(sc), None, lambda n, now, tot: seen.setdefault(n, []).append(
        (now, tot)), workers=2)
    assert sorted(seen) == sorted(v.name for v in sc.variants)
    for ticks in seen.values():
        assert len(ticks) > 50 and ticks[-1][0] == ticks[-1][1]  # ends at the end
        assert [t for t, _ in ticks] == sorted(t for t, _ in ticks)


# every request admitted at once, then the pool runs out while they decode (nobody waits)
DECODE_PREEMPTING = ["run.requests=8", "scheduler.num_gpu_blocks_override=200",
                     "workload={arrivals: poisson, rate_per_s: 1000, "
                     "prompt: {kind: fixed, tokens: 160}, output: {kind: fixed, tokens: 400}}"]

# a budget that cuts the drafts of the running sequences that come last in the walk
DECODE_CUT = ["run.requests=24", "scheduler.max_batched_tokens=96", "scheduler.chunk_tokens=32",
              "workload={arrivals: offline, prompt: {kind: fixed, tokens: 4}, "
              "output: {kind: fixed, tokens: 200}}"]


# lookup drafters matching on some steps only, with host seconds per sequence; a
# queue admitted as they finish, and a budget that cuts their drafts
LOOKUP = {
    "ngram-host": ["run.requests=60", "workload.rate_per_s=40", "scheduler.max_num_seqs=12",
                   "variants=[{name: n, drafter: {method: ngram, proposal_rate: 0.45, "
                   "cpu_s_per_seq: 3e-4}, policy: {kind: fixed, gamma: 5}}]"],
    "suffix-host-cut": ["run.requests=40", "scheduler.max_batched_tokens=64",
                        "scheduler.chunk_tokens=32", "acceptance={kind: iid, alpha: 0.8}",
                        "variants=[{name: s, drafter: {method: suffix, proposal_rate: 0.7, "
                        "cpu_s_per_seq: 1e-4}, policy: {kind: fixed, gamma: 3}}]"],
}

# prefix caching (sim.prefix_cache) with speculation: an EAGLE-type drafter, whose blocks
# vLLM 0.33 hashes with the token after them and whose hit loses its last block up to 0.20
# (which also frees uncached blocks to the tail of the free queue, not its head), and a
# pool so small that requests are preempted and resumed (their committed blocks cached)
_SHARED = ["scheduler.prefix_caching=true", "workload.shared_prefix_tokens=200",
           "workload.shared_prefix_groups=3", "workload.prompt={kind: uniform, low: 20, "
           "high: 300}"]
_EAGLE = "variants=[{name: e, drafter: {method: eagle3}, policy: {kind: fixed, gamma: 3}}]"
PREFIX = {
    "prefix-eagle-0.33": ["run.requests=60", *_SHARED, _EAGLE],
    "prefix-eagle-0.20": ["run.requests=60", *_SHARED, _EAGLE,
                          "scheduler.vllm_release='0.20'"],
    "prefix-preempting": ["run.requests=60", *_SHARED, "workload.rate_per_s=200",
                          "scheduler.num_gpu_blocks_override=120"],
}
# Dynamo's KV router reads each replica's pool while an iteration runs: without prefix
# caching too, the fast paths (which write the pool once per walk) gave other records
KV_ROUTER = ["run.requests=100", "scheduler.prefix_caching=false"]


@pytest.mark.parametrize("scenario", [*_shipped_scenarios(), "bench-decode-heavy",
                                      "bench-speculative", "bench-ngram", "bench-suffix",
                                      "bench-prefix-cache", *PREFIX, "kv-router-no-cache",
                                      *LOOKUP, "default-preempting", "round-robin-replicas",
                                      "decode-preempting", "decode-cut"])
def test_fast_paths_give_the_records_of_the_reference_path(scenario, monkeypatch, tmp_path):
    """The compiled kernels -- ``sim.steady`` (several decode iterations at once) and
    ``sim.steady_walk`` (any iteration vLLM v1 forms) -- from the first iteration
    (``compiled``) and after the reference path took the first ones (``auto``): every
    shipped scenario, both bench workloads and the lookup drafters', lookup drafters with
    host seconds, and preempting runs with the kernels on and off, record for record."""
    from sim.build import setups
    from sim.runner import simulate_variants

    if scenario.startswith("bench-"):
        from sim.bench import bench_scenario, decode_heavy_rows

        trace = tmp_path / "decode-heavy.csv"
        trace.write_text(decode_heavy_rows(300, 0))
        sc = bench_scenario(300, 0, scenario.removeprefix("bench-"), str(trace))
    elif scenario in CASES:
        name, sets = CASES[scenario]
        sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml", sets)
    elif scenario == "kv-router-no-cache":
        sc = load_scenario(repo_root() / "scenarios" / "shared-prefix-routing.yaml", KV_ROUTER)
    elif scenario in LOOKUP or scenario in PREFIX:
        sets = LOOKUP.get(scenario) or PREFIX[scenario]
        sc = load_scenario(repo_root() / "scenarios" / "default.yaml", sets)
    elif scenario.startswith("decode-"):
        sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                           DECODE_PREEMPTING if scenario == "decode-preempting" else DECODE_CUT)
    else:
        sc = load_scenario(repo_root() / "scenarios" / f"{scenario}.yaml",
                           ["run.requests=40"] if sc_has_requests(scenario) else [])
    _python_kernel_without_numba(monkeypatch)
    runs = [simulate_variants(setups(sc), sc.run.horizon_s, path=PATHS[name])
            for name in ("reference", "auto", "compiled")]
    if scenario.endswith("-preempting"):  # the case the full scheduler must take over
        assert runs[0][-1].requests.columns["preemptions"].sum() > 0
    _assert_same_runs(runs[0], runs[1])
    _assert_same_runs(runs[0], runs[2])


def _python_kernel_without_numba(monkeypatch) -> None:
    """Where numba is not installed, the kernels run as Python (so that the comparisons
    still compare the kernels with the reference, only slower)."""
    from sim import steady_kernel

    if steady_kernel.compiled() is None:
        monkeypatch.setattr(steady_kernel, "available", lambda: True)
        monkeypatch.setattr(steady_kernel, "compiled", lambda: steady_kernel.stretch)
        monkeypatch.setattr(steady_kernel, "compiled_walk",
                            lambda draws=False: steady_kernel.walk)


def _without_feed(monkeypatch) -> None:
    """Replicas get no arrival feed, and a walk does not run past a closed loop's sends:
    a walk stops at the next arrival, as with several replicas (the compiled stretch then
    runs the steady iterations)."""
    from sim import cluster, steady_walk

    monkeypatch.setattr(cluster, "ArrivalFeed", lambda *args: None)
    monkeypatch.setattr(steady_walk, "_loop", lambda *args: None)


@pytest.mark.parametrize("record_bound", [True, False])
def test_the_kernel_runs_and_switching_to_it_midway_keeps_the_records(record_bound,
                                                                      monkeypatch):
    """The default scenario's variant without speculation, reference path against the
    compiled kernels from the first planning and from the 7th on (numpy before), with the
    arrivals known ahead (one replica: walks run past them) and without (the walk stops
    at each, the compiled stretch runs what is steady): the same records, with and
    without bounds recorded, and each kernel did run (stretches, admitting ones among
    them; walks, admitting and prefilling ones among them)."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import steady, steady_kernel, steady_walk
    from sim.build import setups
    from sim.runner import simulate_variants

    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", ["run.requests=150"])
    real_admitted, real_walk = steady.plan_admitted, steady_walk.plan
    _python_kernel_without_numba(monkeypatch)
    kernel = steady_kernel.compiled()  # each mode counts its own calls of it
    # midway: numpy for a replica's first 6 looks, then the kernels
    paths = {"reference": PATHS["reference"], "kernel": PATHS["compiled"],
             "midway": EnginePath(kernels_after=6)}
    runs, seen = [], {}
    for mode in ("reference", "kernel", "midway", "kernel without feed",
                 "midway without feed"):
        calls = seen[mode] = {"stretch": 0, "admitting": 0, "walk": 0, "walk admitting": 0,
                              "walk prefilling": 0}

        def counted_admitted(*args, calls=calls):
            got = real_admitted(*args)
            calls["admitting"] += got is not None
            return got

        def counted_walk(*args, calls=calls):
            got = real_walk(*args)
            if got is not None:
                calls["walk"] += 1
                calls["walk admitting"] += got.admitted > 0
                prefill, decs = got.ints[3], got.ints[2]
                calls["walk prefilling"] += bool((prefill[decs > 0] > 0).any())
            return got

        monkeypatch.setattr(steady, "plan_admitted", counted_admitted)
        monkeypatch.setattr(steady_walk, "plan", counted_walk)
        if mode.endswith("without feed"):
            _without_feed(monkeypatch)

        def counted(*args, calls=calls):
            calls["stretch"] += 1
            return kernel(*args)

        monkeypatch.setattr(steady_kernel, "compiled", lambda counted=counted: counted)
        built = [(n, s) for n, s in setups(sc, record_bound=record_bound) if n == "none"]
        runs.append(simulate_variants(built, sc.run.horizon_s,
                                      path=paths[mode.removesuffix(" without feed")]))
    for mode in ("kernel", "midway"):  # long walks past the arrivals, no stretch needed
        assert seen[mode]["walk admitting"] > 5 and seen[mode]["walk prefilling"] > 5, seen
    assert seen["kernel"]["stretch"] == 0, seen
    for mode in ("kernel without feed", "midway without feed"):  # walks cut by arrivals
        calls = seen[mode]
        assert calls["stretch"] > 0 and calls["walk"] > 20, seen
        assert calls["walk admitting"] > 5 and calls["walk prefilling"] > 5, seen
    labels = set(runs[0][0].iterations.columns["bound"])
    assert labels == ({""} if not record_bound else labels - {""})
    for run in runs[1:]:
        _assert_same_runs(runs[0], run)


# 5.0 s stops fixed-g4 inside a stretch; 6.2782 * 100 / 100 is not 6.2782 (the progress
# bar's last slice must end at the horizon itself)
@pytest.mark.parametrize("horizon", [7.3, 5.0, 6.2782])
def test_stretches_stop_at_a_horizon_and_at_progress_slices(horizon, monkeypatch):
    """A horizon and the progress bar's slices (``env.run(until=...)``) are events too: the
    records with a horizon, with and without progress, match the iteration-at-a-time run
    (a steady stretch the compiled kernel lets run across it is never written)."""
    from sim.build import setups
    from sim.runner import simulate_variants

    sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                       ["run.requests=120", f"run.horizon_s={horizon}"])
    _python_kernel_without_numba(monkeypatch)
    got = []
    for name, progress in (("reference", None), ("auto", None), ("auto", lambda *a: None),
                           ("compiled", None), ("compiled", lambda *a: None)):
        got.append(simulate_variants(setups(sc), sc.run.horizon_s, progress,
                                     path=PATHS[name]))
    for other in got[1:]:
        _assert_same_runs(got[0], other)
        assert [v.end_at for v in other] == [v.end_at for v in got[0]] == [horizon] * 2
    assert not got[0][0].requests.columns["finished"].all()  # the horizon cut the run


# horizons where walks run past other replicas' events or tell a closed loop of finishes
# (sim.steady_walk._pass jumps to the start of a walk's last iteration)
HORIZON_CASES = {
    "round-robin-3": ("default", ["run.requests=200", "deployment.replicas=3",
                                  "workload.rate_per_s=40",
                                  "workload.output={kind: uniform, low: 4, high: 200}"]),
    "least-tokens-3": ("default", ["run.requests=200", "deployment.replicas=3",
                                   "workload.rate_per_s=40", "deployment.router=least_tokens",
                                   "workload.output={kind: uniform, low: 4, high: 200}"]),
    "closed-loop-2": ("default", [
        "run.requests=200", "deployment.replicas=2",
        "variants=[{name: none, policy: {kind: none}}]",
        "workload={arrivals: closed_loop, users: 16, think_mean_s: 0.05, think_cv: 3, "
        "prompt: {kind: uniform, low: 20, high: 300}, output: {kind: uniform, low: 1, "
        "high: 100}}"]),
}


@pytest.mark.parametrize("horizon", [0.7, 2.9])
@pytest.mark.parametrize("case", sorted(HORIZON_CASES))
def test_walks_of_several_replicas_and_closed_loops_stop_at_a_horizon(case, horizon,
                                                                     monkeypatch):
    """A horizon and progress slices with several replicas (a walk runs past the others'
    events) and with a closed loop (told of finishes as their iterations end): the records
    are the reference path's, with and without progress."""
    from sim.build import setups
    from sim.runner import simulate_variants

    name, sets = HORIZON_CASES[case]
    sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml",
                       [*sets, f"run.horizon_s={horizon}"])
    _python_kernel_without_numba(monkeypatch)
    got = [simulate_variants(setups(sc), sc.run.horizon_s, progress, path=PATHS[path])
           for path, progress in (("reference", None), ("compiled", None),
                                  ("compiled", lambda *a: None))]
    for other in got[1:]:
        _assert_same_runs(got[0], other)
    assert sum(v.compiled_iterations for v in got[1]) > 0


# sim.steady_walk's cases, on the default scenario's variant without speculation
WALK_CASES = {
    # long prompts in 64-token chunks under a 96-token budget: prefills cut and continued
    "chunked": ["run.requests=60", "scheduler.max_batched_tokens=96",
                "scheduler.chunk_tokens=64",
                "workload.prompt={kind: uniform, low: 20, high: 400}"],
    # a pool of a few prompts: preemptions, and resumed requests back in the queue
    "preempting": ["run.requests=40", "workload.rate_per_s=200",
                   "scheduler.num_gpu_blocks_override=120",
                   "workload.output={kind: uniform, low: 4, high: 80}"],
    # more requests than slots: a queue the walk admits from as sequences finish
    "queued": ["run.requests=80", "workload.rate_per_s=400", "scheduler.max_num_seqs=8",
               "workload.output={kind: uniform, low: 1, high: 30}"],
    # prefix caching: prompts behind shared prefixes, vLLM 0.33's free queue (uncached
    # blocks first) and 0.20's, and a pool so small that requests are preempted
    "prefix": ["run.requests=80", *_SHARED, "workload.rate_per_s=60"],
    "prefix-0.20": ["run.requests=80", *_SHARED, "workload.rate_per_s=60",
                    "scheduler.vllm_release='0.20'"],
    "prefix-preempting": ["run.requests=60", *_SHARED, "workload.rate_per_s=200",
                          "scheduler.num_gpu_blocks_override=120"],
    # a closed loop: a finish submits the next request
    "closed-loop": ["run.requests=60",
                    "workload={arrivals: closed_loop, users: 6, think_mean_s: 0.05, "
                    "prompt: {kind: uniform, low: 20, high: 300}, "
                    "output: {kind: uniform, low: 4, high: 60}}"],
    # without think time (vllm bench serve --max-concurrency): a finish's send is seen by
    # the step after the one formed at that finish
    "closed-loop-no-think": ["run.requests=60",
                             "workload={arrivals: closed_loop, users: 8, think_mean_s: 0, "
                             "prompt: {kind: uniform, low: 20, high: 300}, "
                             "output: {kind: uniform, low: 1, high: 60}}"],
}


@pytest.mark.parametrize("case", sorted(WALK_CASES))
def test_walks_give_the_records_of_the_reference_path(case, monkeypatch):
    """The compiled walk (admissions, prefill chunks, slots reused, the split where an
    event comes) against the reference path, from the first planning on, with the
    arrivals known ahead and without: the same records, and the walk did run --
    admitting, prefilling beside decoders; with the feed past arrivals (admitting requests
    that were not waiting when it started) and into the slots of requests it finished;
    without, split by arrivals; where the pool is short, preempting and resuming requests
    -- with the reference path taking what it does not."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import steady_kernel, steady_walk
    from sim.build import setups
    from sim.runner import simulate_variants

    if steady_kernel.compiled_walk() is None:
        pytest.skip("the walk is compiled only with numba")
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", WALK_CASES[case])
    real = steady_walk.plan
    runs, seen = [], {}
    for mode in ("reference", "feed", "no feed"):
        count = seen[mode] = {"walks": 0, "split": 0, "admitting": 0, "mixed": 0,
                              "past arrivals": 0, "reused": 0, "preempts": 0}

        def counted(r, *args, count=count):
            waiting = len(r.waiting)
            got = real(r, *args)
            if got is not None:
                count["walks"] += 1
                count["split"] += got.split[0] > 0
                count["admitting"] += got.admitted > 0
                count["mixed"] += bool(((got.ints[2] > 0) & (got.ints[3] > 0)).any())
                count["past arrivals"] += got.admitted > waiting
                count["preempts"] += got.preempts
                if got.admitted and len(got.finished):  # admitted after a finish
                    # (its admission's iteration starts at or after a finish)
                    count["reused"] += bool(got.adm_at.max() >= got.finished_at.min())
            return got

        monkeypatch.setattr(steady_walk, "plan", counted)
        if mode == "no feed":
            _without_feed(monkeypatch)
        built = [(n, s) for n, s in setups(sc) if n == "none"]
        runs.append(simulate_variants(built, sc.run.horizon_s,
                                      path=PATHS["reference" if mode == "reference"
                                                 else "compiled"]))
    _assert_same_runs(runs[0], runs[1])
    _assert_same_runs(runs[0], runs[2])
    for mode in ("feed", "no feed"):
        count = seen[mode]
        assert count["walks"] > 0 and count["admitting"] > 0 and count["mixed"] > 0, seen
    # (a closed loop's sends are its feed: the walk runs past them)
    assert seen["feed"]["past arrivals"] > 0 and seen["feed"]["reused"] > 0, seen
    if case in ("chunked", "preempting"):  # arrivals while they run
        assert seen["no feed"]["split"] > 0, seen
    if case.endswith("preempting"):  # preempted by the walks, and by the reference
        assert runs[0][0].requests.columns["preemptions"].sum() > 0
        assert seen["feed"]["preempts"] > 0 and seen["no feed"]["preempts"] > 0, seen


def test_an_arrival_at_the_very_end_of_an_iteration_is_left_to_simpy(tmp_path, monkeypatch):
    """A request that arrives exactly when one of the replica's iterations ends: SimPy
    orders the two events (here the arrival first, its timeout being the older), so the
    next iteration admits it. A walk that runs past arrivals cannot tell the order from the
    times alone and stops there; its records are the reference path's, and the request is
    scheduled at that very instant."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import steady_kernel
    from sim.build import setups
    from sim.runner import simulate_variants

    if steady_kernel.compiled_walk() is None:
        pytest.skip("the walk is compiled only with numba")
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(0.05, 12)).tolist()

    def run(times, fast):
        trace = tmp_path / "trace.csv"
        trace.write_text("arrival_at,prompt_tokens,output_tokens\n"
                         + "".join(f"{t!r},{60 + 7 * i},{30 + 3 * i}\n"
                                   for i, t in enumerate(times)))
        sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                           ["workload={arrivals: replay, file: " + str(trace) + "}",
                            f"run.requests={len(times)}"])
        return simulate_variants([(n, s) for n, s in setups(sc) if n == "none"], None,
                                 path=PATHS["compiled" if fast else "reference"])

    first = run(arrivals[:6], False)[0].iterations.columns  # the first six requests alone
    ends = first["start_at"] + first["duration_s"]
    tie = float(ends[ends > arrivals[5]][3])  # an iteration end after the sixth arrival
    times = [*arrivals[:6], tie, *(tie + t - arrivals[6] + 0.01 for t in arrivals[7:])]
    reference, walked = run(times, False), run(times, True)
    _assert_same_runs(reference, walked)
    assert reference[0].requests.columns["first_scheduled_at"][6] == tie


# cases the compiled walk once got wrong, each against the reference path
EDGE_CASES = {
    # a walk's first iteration preempts and runs past the horizon: the reference has
    # preempted as it formed the step, so the walk leaves that step to it
    "preempting-at-the-horizon": [
        "run.requests=80", "run.horizon_s=0.4641673249867514",
        "variants=[{name: none, policy: {kind: none}}]",
        "scheduler.num_gpu_blocks_override=120", "workload.rate_per_s=200",
        "workload.prompt={kind: uniform, low: 20, high: 900}",
        "workload.output={kind: uniform, low: 4, high: 80}"],
    # a closed loop's bursty think times (gamma, cv 3): some are too small to move the
    # clock, so their sends are due as they are made and the step formed then misses them
    "closed-loop-think-below-the-clock": [
        "run.requests=150", "variants=[{name: none, policy: {kind: none}}]",
        "workload={arrivals: closed_loop, users: 16, think_mean_s: 0.05, think_cv: 3, "
        "prompt: {kind: uniform, low: 20, high: 300}, output: {kind: uniform, low: 1, "
        "high: 40}}"],
}


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_the_walk_keeps_the_reference_records_in_edge_cases(case):
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import steady_kernel
    from sim.build import setups
    from sim.runner import simulate_variants

    if steady_kernel.compiled_walk() is None:
        pytest.skip("the walk is compiled only with numba")
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", EDGE_CASES[case])
    runs = [simulate_variants(setups(sc), sc.run.horizon_s, path=PATHS[p])
            for p in ("reference", "compiled")]
    _assert_same_runs(runs[0], runs[1])
