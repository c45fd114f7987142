"""``specsim bench``'s named workloads (``sim.bench_workloads``) and ``--workload all``:
each builds, runs and exercises the feature it names, and the table says which engine
path each takes and why it leaves the fast path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.bench import NO_FEED, bench_scenario, path_taken, run_bench
from sim.bench_workloads import BASES, WORKLOADS
from sim.build import setups
from sim.cli import main
from sim.engine_path import PATHS
from sim.runner import run_setups
from specdec.errors import UserError

VARIATIONS = [n for n, w in WORKLOADS.items() if n not in BASES]
FIGURES = {"workload", "requests", "wall_s", "cpu_s", "requests_per_cpu_s", "requests_per_s",
           "iterations_per_s", "output_tokens_per_s", "us_per_iteration", "peak_rss_mb",
           "mean_batch", "sets", "fast_paths", "engine_path", "fallback", "compiled_share"}


def _run(name: str, requests: int, sets=(), path=PATHS["reference"]):
    """The first variant's records of ``name`` for ``requests`` requests (not the
    decode-heavy bases, which replay a trace file)."""
    sc = bench_scenario(requests, 0, name, None, list(sets))
    return run_setups(sc, setups(sc, "bench"), engine_path=path).variants[0]


def test_the_table_holds_the_issues_cases_each_a_variation_of_a_base():
    assert {"replicas-8", "prefix-cache", "pipeline", "ngram", "per-seq-gamma",
            "adaptive-tree", "suffix", "replicas-2", "parallel-drafting", "closed-loop",
            "preemption", "task-mix", "ladder", "sticky-ladder", "roofline", "trace-tree"} \
        <= set(VARIATIONS)
    for name, w in WORKLOADS.items():
        assert w.base in BASES and (w.base == name) == (name in BASES), name
        assert (w.sets == ()) == (name in BASES), name
        assert "\n" not in w.line and len(w.line) <= 78, name


@pytest.mark.parametrize("name", VARIATIONS)
def test_each_variation_validates_and_builds(name):
    """Its overrides validate over its base, and the scenario builds one variant."""
    sc = bench_scenario(20, 0, name)
    assert sc.run.requests == 20
    assert [n for n, _ in setups(sc, "bench")] == [sc.variants[0].name]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_each_workload_runs_a_few_requests(name, capsys):
    assert main(["bench", "--workload", name, "--requests", "20", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert FIGURES <= set(got) and got["workload"] == name and got["requests"] == 20
    assert got["engine_path"] in ("auto", "reference")  # under KERNEL_REQUESTS on auto
    if got["engine_path"] == "reference":
        assert got["fallback"] == got["fast_paths"]["walk"] and got["fallback"]


def test_a_variations_bad_override_names_the_workload(monkeypatch):
    from sim import bench_workloads

    bad = bench_workloads.Workload("speculative", "bad", ("scheduler.max_num_seqs=0",), 1)
    monkeypatch.setitem(bench_workloads.WORKLOADS, "bad", bad)
    with pytest.raises(UserError, match=r"^bench \(bad\) \(workload bad: "
                                        r"scheduler.max_num_seqs=0\): scheduler.max_num_seqs"):
        bench_scenario(20, 0, "bad")
    # the user's --set comes after the workload's, and is named as such
    with pytest.raises(UserError, match=r"\(--set deployment.pp=0\): deployment.pp"):
        bench_scenario(20, 0, "pipeline", None, ["deployment.pp=0"])


def test_the_features_are_exercised():
    """Each variation does what its line says, at a few hundred requests."""
    rq = _run("prefix-cache", 200).requests.columns
    assert rq["cached_tokens"].sum() / rq["prompt_tokens"].sum() > 0.5  # 384 of 512 shared
    assert _run("preemption", 400).requests.column("preemptions").sum() > 0
    rq = _run("sticky-ladder", 1000).requests.columns
    assert (rq["draft_steps"] < rq["verify_steps"] / 2).any()  # some switched off for good
    it = _run("ladder", 1000).iterations.columns  # each rung of the ladder drafts in steps
    dec, drafted = np.asarray(it["decode_seqs"]), np.asarray(it["drafted_tokens"])
    for gamma in (4, 2, 0):
        assert ((dec > 0) & (drafted == gamma * dec)).any(), gamma
    v = _run("replicas-8", 200)
    assert set(v.requests.column("replica").tolist()) == set(range(8))
    tasks = set(_run("task-mix", 100).requests.column("task").tolist())
    assert tasks == {0, 1, 2}  # code, chat, reasoning


def test_path_taken_names_the_path_and_the_reason():
    closed = {"steady": "speculation (steady ...)", "walk": "2 pipeline stages"}
    spec = {"steady": "speculation (steady ...)", "walk": None}
    compiled, auto = PATHS["compiled"], PATHS["auto"]
    assert path_taken(closed, False, compiled, 10**5) == ("reference", "2 pipeline stages")
    assert path_taken(spec, True, compiled, 20) == ("compiled", None)
    assert path_taken(spec, True, auto, 10**5) == ("compiled", None)
    assert path_taken(spec, True, auto, 20) == ("auto", None)  # the kernels may not load
    assert path_taken(spec, False, compiled, 20) == ("compiled", NO_FEED)
    plain = {"steady": None, "walk": None}
    assert path_taken(plain, True, compiled, 20) == ("compiled", None)


def test_bench_prints_the_fall_back_reason(capsys):
    assert main(["bench", "--workload", "pipeline", "--requests", "20",
                 "--set", "variants.0.policy={kind: adaptive}"]) == 0
    out = capsys.readouterr().out
    why = "2 pipeline stages with a shape that varies, a lookup drafter or a draft drafting ahead"
    assert f"walk              not taken: {why}" in out
    assert f"engine path       reference ({why})" in out
    assert main(["bench", "--workload", "replicas-2", "--requests", "20",
                 "--set", "deployment.router=least_requests",
                 "--engine-path", "compiled"]) == 0
    assert f"engine path       compiled ({NO_FEED})" in capsys.readouterr().out
    # a closed loop that sends to one replica is the walk's feed
    assert main(["bench", "--workload", "closed-loop", "--requests", "20",
                 "--engine-path", "compiled"]) == 0
    assert "engine path       compiled\n" in capsys.readouterr().out


def test_bench_all_prints_one_table_with_progress(capsys):
    assert main(["bench", "--workload", "all", "--requests", "20"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["workload", "path", "wall", "s", "us/iter", "x", "fast",
                                "batch", "compiled", "fall-back", "reason"]
    assert [ln.split()[0] for ln in lines[1:]] == list(WORKLOADS)
    assert err.splitlines() == [f"specsim bench: {i}/{len(WORKLOADS)} {n}"
                                for i, n in enumerate(WORKLOADS, 1)]
    row = {ln.split()[0]: ln for ln in lines[1:]}
    assert row["pd-1p2d"].split()[1] == "reference"
    assert row["pd-1p2d"].endswith("  prefill/decode disaggregation runs on the reference path")
    assert row["speculative"].split()[4] == "1.00" and row["speculative"].endswith("  -")


def test_bench_all_json_is_the_list_of_the_same_figures(capsys):
    assert main(["bench", "--workload", "all", "--requests", "20", "--json",
                 "--engine-path", "reference"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["workload"] for r in rows] == list(WORKLOADS)
    for r in rows:
        assert FIGURES | {"x_fast_path"} <= set(r)
        assert r["engine_path"] == "reference"
        assert r["fallback"] == "off on this engine path"
        base = next(b for b in rows if b["workload"] == WORKLOADS[r["workload"]].base)
        assert r["x_fast_path"] == pytest.approx(r["us_per_iteration"]
                                                 / base["us_per_iteration"])


def test_run_all_takes_a_subset_bases_first():
    from sim.bench import run_all

    seen = []
    rows = run_all(20, names=["pipeline", "ngram", "speculative"],
                   path=PATHS["reference"], progress=lambda i, n, name: seen.append((i, n, name)))
    assert seen == [(1, 3, "speculative"), (2, 3, "pipeline"), (3, 3, "ngram")]
    assert [r["x_fast_path"] is not None for r in rows] == [True, True, True]
    rows = run_all(20, names=["pipeline"], path=PATHS["reference"])
    assert rows[0]["x_fast_path"] is None  # its base is not in the list


def test_a_single_workload_times_no_kernel_load(monkeypatch):
    # specsim bench --workload X warms the kernels up untimed first, as --workload all does:
    # a fresh install's first run otherwise timed their compile (about a minute on 2 cores)
    from sim import bench

    calls = []

    names = {id(v): k for k, v in PATHS.items()}

    def fake(requests, seed, workload, sets, path):
        calls.append((requests, workload, names[id(path)]))
        return {"requests": requests}

    monkeypatch.setattr(bench, "run_bench", fake)
    row = bench.run_warm(5000, 0, "ngram", (), PATHS["auto"])
    assert calls == [(bench.WARMUP_REQUESTS, "ngram", "compiled"), (5000, "ngram", "auto")]
    assert row["requests"] == 5000 and isinstance(row["compiled_kernels"], list)
    calls.clear()
    bench.run_warm(5000, 0, "ngram", (), PATHS["reference"])  # no kernels: no warm-up
    assert calls == [(5000, "ngram", "reference")]
    calls.clear()  # nor where the kernels will not be taken: a short auto run, P/D
    bench.run_warm(300, 0, "ngram", (), PATHS["auto"])
    bench.run_warm(5000, 0, "pd-1p2d", (), PATHS["compiled"])
    assert calls == [(300, "ngram", "auto"), (5000, "pd-1p2d", "compiled")]


def test_the_help_lists_each_workload_on_one_line():
    from sim.commands.bench import _HELP as doc

    for name, w in WORKLOADS.items():
        assert f"  {name:<19s} {w.line}\n" in doc
    assert "\n  all " in doc


def test_a_long_all_says_how_long_first():
    from sim.commands.bench import RATES, estimate

    assert estimate("all", 100) is None
    seconds = sum(10**6 / r for r in RATES.values())
    assert estimate("all", 10**6) == (f"specsim bench: 1,000,000 requests of each of "
                                      f"{len(WORKLOADS)} workloads; about "
                                      f"{seconds / 60:.0f} minutes")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in VARIATIONS if n not in ("preemption", "pd-1p2d")])
def test_each_variation_keeps_about_64_sequences_running(name):
    """The rates in the table keep the speculative load (module docstring): a time-weighted
    batch of 64 +- 4 on 3,000 requests, per replica. Not preemption's (its pool is too
    small for 64) nor P/D's: each of its two decode replicas takes the speculative rate, but
    decodes alone (~33 sequences), and its one prefill replica caps them near 50 at any
    rate."""
    it = _run(name, 3000, path=PATHS["compiled"]).iterations.columns
    batch = float(it["batch_size"] @ it["duration_s"]) / it["duration_s"].sum()
    assert 60 <= batch <= 68, batch


@pytest.mark.slow
def test_the_fast_path_is_faster_than_what_leaves_it():
    """On the compiled path, at 3,000 requests, the speculative base costs less per
    iteration than a workload the gate sends to the reference scheduler."""
    fast = run_bench(3000, 0, "speculative", path=PATHS["compiled"])
    slow = run_bench(3000, 0, "pd-1p2d", path=PATHS["compiled"])
    assert fast["engine_path"] == "compiled" and slow["engine_path"] == "reference"
    assert np.isfinite(slow["us_per_iteration"])
    assert fast["us_per_iteration"] < slow["us_per_iteration"]


def test_bench_says_what_share_of_the_iterations_the_kernels_formed():
    """A path the gate opens can still leave iterations to the reference scheduler (an
    admission when a request arrives at a replica behind a router that reads the load):
    the share is counted, not inferred from the gate."""
    pytest.importorskip("numba", reason="the kernels are compiled with numba")
    compiled = run_bench(60, workload="speculative", path=PATHS["compiled"])
    reference = run_bench(60, workload="speculative", path=PATHS["reference"])
    assert compiled["compiled_share"] > 0.9 and reference["compiled_share"] == 0.0
    routed = run_bench(200, workload="replicas-2", path=PATHS["compiled"],
                       sets=["deployment.router=least_requests"])
    assert 0.0 < routed["compiled_share"] < 1.0
    # preemption is the kernels' too (vLLM v1's, as the reference path's)
    tight = run_bench(300, workload="preemption", path=PATHS["compiled"])
    assert tight["compiled_share"] == 1.0


# the workloads whose every iteration the compiled kernels form (at any number of requests)
ALL_COMPILED = ("speculative", "decode-heavy", "replicas-2", "replicas-8", "prefix-cache",
                "ngram", "suffix", "adaptive-tree", "per-seq-gamma", "parallel-drafting",
                "closed-loop", "preemption", "task-mix", "ladder", "sticky-ladder",
                "roofline", "trace-tree")


@pytest.mark.parametrize("name", ALL_COMPILED)
def test_the_compiled_workloads_stay_compiled(name):
    """No fall-back reason and every iteration compiled on the compiled path (a kernel
    numba fails to build, or a gate closed, would show here)."""
    pytest.importorskip("numba", reason="the kernels are compiled with numba")
    pytest.importorskip("aiconfigurator_core", reason="the kernels price measured timings")
    got = run_bench(60, workload=name, path=PATHS["compiled"])
    assert got["engine_path"] == "compiled" and got["fallback"] is None, got["fallback"]
    assert got["fast_paths"]["walk"] is None
    assert got["compiled_share"] == 1.0
