"""``specsim run`` and ``specsim bench`` end to end, and every shipped scenario runs."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.cli import main
from sim.loading import load_scenario, repo_root
from sim.runner import run_scenario

# Every scenario file under scenarios/ (candidate lists and search spaces for `specsim plan`,
# which hold a top-level `candidates` or `search` key, are overrides for a scenario, not
# scenarios themselves).
SCENARIOS = sorted(
    p for p in (repo_root() / "scenarios").rglob("*.yaml")
    if not {"candidates", "search"} & set(yaml.safe_load(p.read_text()) or {})
)
KEYS = {"name", "requests", "finished", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
        "tpot_p99_s", "itl_p50_s", "itl_p99_s", "e2e_p50_s", "e2e_p99_s",
        "throughput_tokens_per_s", "requests_per_s", "offered_rate_per_s", "served_rate_per_s",
        "overloaded", "preemptions", "recomputed_tokens", "prefix_hit_rate",
        "prefix_cached_tokens", "acceptance_rate",
        "mean_acceptance_length", "tokens_per_verify", "formula_tokens_per_verify",
        "speedup_vs_none", "speedup_tpot_p99", "warnings"}
SHORT = ["run.requests=40", "run.horizon_s=null"]


def test_run_json_writes_records_and_resolved_scenario(tmp_path, capsys):
    out = tmp_path / "run"
    sets = [x for s in SHORT for x in ("--set", s)]
    code = main(["run", *sets, "--seed", "5", "--out", str(out), "--json", "--no-progress",
                 "--load-curve", "--report-requests", "40"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["out"] == str(out)
    assert doc["report"] == str(out / "report.md")
    report = (out / "report.md").read_text()
    for fig in ("latency_vs_load", "tokens_per_verify"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 0
        assert f"figures/{fig}.png" in report
    assert (out / "tables" / "summary.csv").exists()
    names = [v["name"] for v in doc["variants"]]
    assert names == ["none", "fixed-g4"]
    for v in doc["variants"]:
        assert set(v) == KEYS
        assert v["requests"] == 40 and v["finished"] == 40
    none, spec = doc["variants"]
    assert none["prefix_hit_rate"] is None  # scheduler.prefix_caching is off by default
    assert none["speedup_vs_none"] == pytest.approx(1.0)
    assert none["acceptance_rate"] is None and spec["acceptance_rate"] > 0
    resolved = yaml.safe_load((out / "scenario.yaml").read_text())
    assert resolved["run"]["seed"] == 5 and resolved["run"]["requests"] == 40
    assert resolved["scheduler"]["block_size"] == 16  # defaults are filled in
    meta = yaml.safe_load((out / "meta.yaml").read_text())
    assert meta["seed"] == 5 and meta["version"]
    with (out / "fixed-g4" / "requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 40 and all(r["finished"] == "True" for r in rows)
    assert (out / "none" / "iterations.csv").read_text().startswith("replica,start_at,")



def test_run_json_gives_each_variant_its_prefix_hit_rate(tmp_path, capsys):
    sets = [*SHORT, "scheduler.prefix_caching=true", "workload.shared_prefix_tokens=800"]
    code = main(["run", *[x for s in sets for x in ("--set", s)], "--out", str(tmp_path / "r"),
                 "--json", "--no-progress", "--no-report"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    for v in doc["variants"]:
        # 40 requests behind one 800-token system prompt (50 whole blocks): every one but
        # the first finds it cached (they arrive 1/8 s apart, after its prefill)
        with (tmp_path / "r" / v["name"] / "requests.csv").open() as f:
            rows = list(csv.DictReader(f))
        cached = [int(r["cached_tokens"]) for r in rows]
        assert cached == [0] + [800] * 39
        assert v["prefix_cached_tokens"] == 39 * 800
        assert v["prefix_hit_rate"] == pytest.approx(
            39 * 800 / sum(int(r["prompt_tokens"]) for r in rows), rel=1e-12)


def test_run_prints_a_table(tmp_path, capsys):
    sets = [x for s in SHORT for x in ("--set", s)]
    out = tmp_path / "r"
    assert main(["run", *sets, "--out", str(out), "--no-progress", "--no-report"]) == 0
    text = capsys.readouterr().out
    assert not (out / "report.md").exists()
    for label in ("TTFT p50", "tokens/verify measured", "speedup vs none", "fixed-g4"):
        assert label in text


def test_default_report_leaves_the_load_curve_to_load_curve(tmp_path, capsys):
    """The load curve re-runs the scenario several times, so a plain run does not draw it
    and its report says how to ask for it."""
    sets = [x for s in SHORT for x in ("--set", s)]
    out = tmp_path / "r"
    assert main(["run", *sets, "--out", str(out), "--no-progress"]) == 0
    report = (out / "report.md").read_text()
    assert "Not computed: `specsim run --load-curve`" in report
    assert not (out / "figures" / "latency_vs_load.png").exists()
    assert (out / "figures" / "tokens_per_verify.png").stat().st_size > 0


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_loads_and_runs_short(path):
    sc = load_scenario(path, SHORT)
    res = run_scenario(sc, path.name)
    assert [s["name"] for s in res.summaries] == [v.name for v in sc.variants]
    for v in res.variants:
        assert len(v.requests) == 40
        assert all(r.finished for r in v.requests)


def test_same_seed_same_records_different_seed_different_arrivals():
    a = run_scenario(load_scenario(None, SHORT))
    b = run_scenario(load_scenario(None, SHORT))
    c = run_scenario(load_scenario(None, [*SHORT, "run.seed=1"]))
    for va, vb in zip(a.variants, b.variants, strict=True):
        assert va.requests == vb.requests and va.iterations == vb.iterations
    arrivals = [[r.arrival_at for r in v.requests] for v in (a.variants[0], c.variants[0])]
    assert arrivals[0] != arrivals[1]
    # variants share their arrivals
    assert [r.arrival_at for r in a.variants[0].requests] == \
        [r.arrival_at for r in a.variants[1].requests]


@pytest.mark.parametrize("workload", ["speculative", "decode-heavy"])
def test_bench_json(capsys, workload):
    assert main(["bench", "--workload", workload, "--requests", "300", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"requests", "wall_s", "requests_per_s", "iterations_per_s", "output_tokens_per_s",
            "us_per_iteration", "peak_rss_mb", "mean_batch"} <= set(doc)
    assert doc["workload"] == workload and doc["requests"] == 300
    assert doc["wall_s"] > 0 and doc["peak_rss_mb"] > 0
    # the figures are one measurement seen several ways
    assert doc["us_per_iteration"] * doc["iterations_per_s"] == pytest.approx(1e6)
    assert doc["requests_per_s"] * doc["wall_s"] == pytest.approx(300)


def test_the_decode_heavy_trace_is_what_its_docstring_says(tmp_path):
    from sim.bench import DECODE_HEAVY_RATE_PER_S, decode_heavy_rows
    from workloads.requests import read_request_csv

    text = decode_heavy_rows(4000, seed=3)
    assert text == decode_heavy_rows(4000, seed=3)  # seeded
    path = tmp_path / "decode-heavy.csv"
    path.write_text(text)
    specs = read_request_csv(path)
    prompts = np.array([s.prompt_tokens for s in specs])
    outputs = np.array([s.output_tokens for s in specs])
    arrivals = np.array([s.arrival_at for s in specs])
    assert len(specs) == 4000
    # medians 256 and 512 (lognormal), within the sampling error of 4000 draws
    assert np.median(prompts) == pytest.approx(256, rel=0.06)
    assert np.median(outputs) == pytest.approx(512, rel=0.05)
    assert prompts.min() >= 16 and prompts.max() <= 2048 and outputs.max() <= 2048
    assert 4000 / arrivals[-1] == pytest.approx(DECODE_HEAVY_RATE_PER_S, rel=0.05)


def test_default_scenario_is_found_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_scenario(None, SHORT).name == "default"
    assert Path(repo_root() / "scenarios" / "default.yaml").exists()


def test_python_api_is_importable_lazily():
    import subprocess
    import sys

    code = ("import sys, sim; assert 'hardware' not in sys.modules; "
            "assert 'workloads' not in sys.modules; "
            "from sim import load_scenario, run_scenario, RequestRecord, IterationRecord; "
            "print(len(run_scenario(load_scenario(None, ['run.requests=5'])).variants))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=repo_root(), check=True)
    assert out.stdout.strip() == "2"


def test_default_run_folders_never_collide(tmp_path):
    from sim.output import default_run_dir

    first = default_run_dir("x", tmp_path)
    first.mkdir(parents=True)
    second = default_run_dir("x", tmp_path)
    assert second != first and second.name.startswith(first.name)


def test_python_run_does_what_the_command_does(tmp_path):
    import sim

    result, folder = sim.run(None, SHORT, seed=2, out=tmp_path / "api")
    assert folder == tmp_path / "api" and (folder / "scenario.yaml").exists()
    assert yaml.safe_load((folder / "meta.yaml").read_text())["seed"] == 2
    assert json.loads((folder / "summary.json").read_text())["variants"] == result.summaries
    again, none = sim.run(None, SHORT, seed=2, write=False)
    assert none is None and again.variants[1].requests == result.variants[1].requests


def test_slo_verdicts():
    from sim.summary import slo_verdict

    s = {"finished": 10, "requests": 10, "ttft_p99_s": 0.5, "tpot_p99_s": 0.02}
    assert slo_verdict(s, None, None) is None
    assert slo_verdict(s, 1.0, 0.05) == "met"
    assert slo_verdict(s, 0.4, None) == "missed"
    assert slo_verdict({**s, "finished": 9}, 1.0, 0.05) == "missed"


@pytest.mark.parametrize(("flags", "expected"), [
    (["--load-curve", "--report-requests", "0"],
     "--report-requests: must be in 1..100000, got 0"),
    (["--load-curve", "--report-requests", "-3"],
     "--report-requests: must be in 1..100000, got -3"),
    (["--load-curve", "--workers", "0"], "--workers: must be in 1..256, got 0"),
    (["--report-requests", "40"], "--report-requests 40: only sizes the report's load curve"),
    (["--load-curve", "--no-report"], "--load-curve: draws into the report"),
    (["--warmup", "-1"], "--warmup: must be >= 0 seconds, got -1"),
    (["--warmup", "5", "--no-report"], "--warmup 5: only trims the report"),
    (["--warmup", "1e6"], "--warmup 1e+06: the run's last request arrived at "),
])
def test_report_flags_out_of_range_are_refused(flags, expected, tmp_path, capsys):
    """--report-requests 0 used to become 1 request per point; a warm-up past the run used
    to write an empty report with exit 0."""
    sets = [x for s in SHORT for x in ("--set", s)]
    assert main(["run", *sets, "--no-progress", "--out", str(tmp_path / "o"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not (tmp_path / "o" / "report.md").exists()


def test_a_trace_report_says_its_load_cannot_be_scaled(tmp_path, capsys):
    """A trace has no rate to scale: its plain report does not advise --load-curve."""
    out = tmp_path / "t"
    assert main(["run", "scenarios/mooncake-trace.yaml", "--set", "run.requests=20",
                 "--no-progress", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "Not drawn: the arrivals are neither rate-driven" in report
    assert "--load-curve" not in report


def test_a_very_large_run_says_how_large_before_it_starts(tmp_path, capsys):
    """Two replicas behind a load-aware router (no arrival feed): one iteration at a time,
    at ``TOKENS_PER_S``; refused before it runs by --max-memory, after the size it would
    have had."""
    from sim.build import setups
    from sim.cluster import walks
    from sim.estimate import TOKENS_PER_S, estimate

    sets = ["run.requests=200000", "deployment.replicas=2", "deployment.router=least_requests"]
    sc = load_scenario(None, sets)
    built = setups(sc)
    assert not any(walks(s) for _, s in built)
    size = estimate(sc, built, 2, walks=walks)
    tokens = 2 * int(built[0][1].table.output_tokens.sum())
    assert size.seconds >= tokens / TOKENS_PER_S / 2
    argv = [a for s in sets for a in ("--set", s)]
    assert main(["run", *argv, "--max-memory", "0.5", "--no-progress",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "200,000 requests need about " in err and len(err.splitlines()) == 1


def test_a_run_that_walks_is_estimated_at_the_walk_s_rate():
    """One replica: both variants walk (numba installed), at ``WALK_TOKENS_PER_S``."""
    pytest.importorskip("numba", reason="the walk is compiled with numba")
    pytest.importorskip("aiconfigurator_core", reason="the walk prices measured timings")
    from sim.build import setups
    from sim.cluster import walks
    from sim.estimate import TOKENS_PER_S, WALK_TOKENS_PER_S, estimate

    sc = load_scenario(None, ["run.requests=200000"])
    built = setups(sc)
    assert all(walks(s) for _, s in built)
    tokens = 2 * int(built[0][1].table.output_tokens.sum())
    walked, stepped = estimate(sc, built, 1, walks=walks), estimate(sc, built, 1)
    assert walked.seconds < stepped.seconds - tokens / TOKENS_PER_S \
        + tokens / WALK_TOKENS_PER_S + 1e-6


def test_a_long_benchmark_says_how_long_it_will_take_first():
    from sim.bench import WORKLOADS
    from sim.commands.bench import LONG_S, RATES, estimate

    assert set(RATES) == set(WORKLOADS)
    for workload, rate in RATES.items():
        assert estimate(workload, int(rate * LONG_S)) is None
        line = estimate(workload, 10**8)
        assert line.startswith(f"specsim bench: 100,000,000 {workload} requests; about "
                               f"{10**8 / rate / 60:.0f} minutes")


def test_variants_side_by_side_raise_the_error_one_after_the_other_would(monkeypatch):
    """The first variant fails late, the second at once: the first one's error wins, as
    when they run in order."""
    import time

    import sim.runner as runner
    from sim.build import setups

    built = setups(load_scenario(None, ["run.requests=30"]))

    def failing(setup, horizon, name, tick, path, rows):
        if name == built[0][0]:
            time.sleep(0.5)
        raise RuntimeError(f"{name} failed")

    monkeypatch.setattr(runner, "simulate", failing)  # the forked workers inherit it
    for workers in (1, 2):
        with pytest.raises(RuntimeError, match=f"^{built[0][0]} failed$"):
            runner.simulate_variants(built, None, workers=workers)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_records_are_written_by_the_process_that_simulated_them(workers, tmp_path, capsys,
                                                                monkeypatch):
    """Each variant's records are written where it was simulated (a forked worker, with
    --workers 2): the folder is the one ``write_run`` writes, and a write that fails there
    is the one-line error that names the file, with nothing left behind."""
    import os

    import sim.output as output
    from sim.output import write_run

    sets = [x for s in SHORT for x in ("--set", s)]
    out = tmp_path / "run"
    assert main(["run", *sets, "--out", str(out), "--no-report", "--no-progress",
                 "--workers", workers]) == 0
    capsys.readouterr()
    result = run_scenario(load_scenario(None, SHORT))
    ref = write_run(result, tmp_path / "ref", "x", [], 0.0)
    for v in ("none", "fixed-g4"):
        for f in ("requests.csv", "iterations.csv"):
            assert (out / v / f).read_bytes() == (ref / v / f).read_bytes()
    pid = os.getpid()

    def full(path, records):
        if os.getpid() != pid or workers == "1":  # in the worker that simulated it
            raise OSError(28, "No space left on device", str(path))
        return write_records(path, records)

    write_records = output.write_records
    monkeypatch.setattr(output, "write_records", full)
    bad = tmp_path / "bad"
    assert main(["run", *sets, "--out", str(bad), "--no-report", "--no-progress",
                 "--workers", workers]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"specsim run: error: --out {bad}: cannot write ")
    assert err[0].endswith("/none/requests.csv: No space left on device")
    assert not bad.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ref", "run"]


def test_trees_the_budget_cuts_are_priced_with_the_draft_on_every_target_gpu(tmp_path):
    """A tree policy whose token budget cuts some sequences' trees, with the draft on each
    of a TP-4 target's GPUs (four draft replicas): those iterations are priced
    (``hardware.draft.tree_rows_draft_seconds``) and the run finishes."""
    sc = load_scenario(repo_root() / "scenarios" / "plan-llama70b.yaml", [
        "run.requests=20", "scheduler.max_batched_tokens=256", "scheduler.chunk_tokens=128",
        "variants=[{name: t, policy: {kind: tree, expansion: [2, 3, 1, 3, 1, 1]}}]"])
    res = run_scenario(sc).variants[0]
    it = res.iterations.columns
    full = 1 + 2 + 6 + 6 + 18 + 18 + 18  # one sequence's verify of the whole tree
    cut = (it["decode_seqs"] > 0) & (it["verify_tokens"] < it["decode_seqs"] * full)
    assert cut.any() and (it["draft_s"][cut] > 0).all()
    assert res.requests.columns["finished"].all()


def test_every_engine_path_prints_the_same_summary(small_scenario, tmp_path, capsys):
    """``--engine-path`` says how the engine computes its iterations, never what they are:
    the reference, auto and compiled paths print the same summaries."""
    import json

    from sim.cli import main

    got = {}
    for path in ("reference", "auto", "compiled"):
        assert main(["run", str(small_scenario), "--engine-path", path, "--json",
                     "--no-report", "--no-progress", "--out", str(tmp_path / path)]) == 0
        got[path] = json.loads(capsys.readouterr().out)["variants"]
    assert got["reference"] == got["auto"] == got["compiled"]


def test_the_help_s_engine_example_runs_as_pasted_into_a_shell(tmp_path):
    """``specsim run --help``'s --from-vllm example, given to bash as printed (its quotes and
    line continuations), yields arguments that run (with fewer requests)."""
    import shutil
    import subprocess

    from sim.cli import build_parser, main

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    text = build_parser("run")._subparsers._group_actions[0].choices["run"].description
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "specsim run --from-vllm" in line)
    example = [lines[first]]
    while example[-1].endswith("\\"):
        example.append(lines[first + len(example)])
    script = "\n".join(example).strip().replace("specsim run", "printf '%s\\0'", 1)
    argv = subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                          text=True).stdout.split("\0")[:-1]
    assert argv[0] == "--from-vllm" and argv[2] == "--bench", argv
    assert main(["run", *argv, "--set", "run.requests=10", "--no-report", "--no-progress",
                 "--out", str(tmp_path / "out")]) == 0
