"""Ctrl-C and SIGTERM: exit 130 with one line, no traceback, and no folder that looks like a
finished run (``meta.yaml: complete: true``) -- whether the signal arrives during the
simulation, during the report, or midway through a sweep, plan or grid (a sweep or plan
says how many points had finished; a sweep writes them, marked partial)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

import sim.studies.grid as grid_study
import sim.studies.plan as plan_study
import sim.studies.run_report as run_report
import sim.studies.sweep as sweep_study
from sim.cli import main
from sim.loading import repo_root

# The test's own launcher: says when the command line is loaded, then runs it.
LAUNCHER = ("import sys; from sim.cli import main; print('ready', flush=True); "
            "sys.exit(main(sys.argv[1:]))")
SHORT = ["--set", "run.requests=40", "--set", "run.horizon_s=null", "--no-progress"]
# The commands interrupted below run one iteration at a time (no compiled kernels): how
# long they take then does not depend on numba's cache, and they are still running when
# the signal comes (with the kernels, 100,000 requests simulate in a few seconds).
ITERATION_AT_A_TIME = {**os.environ, "SPECSIM_NUMBA": "0"}


def _finished_folders(root):
    """Folders under ``root`` whose meta.yaml says complete: true."""
    return [m.parent for m in root.rglob("meta.yaml")
            if (yaml.safe_load(m.read_text()) or {}).get("complete") is True]


def _one_line(err: str) -> str:
    """The one line an interrupted command prints (after the size estimate a long run
    prints before it starts)."""
    lines = [x for x in err.strip().splitlines()
             if not (x.startswith("specsim run: about ") and x.endswith("(estimate)"))]
    assert len(lines) == 1, lines
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_simulation_exits_130_and_leaves_nothing(sig, tmp_path):
    out = tmp_path / "run"
    # 100k requests per variant simulate for most of a minute one iteration at a time
    # (side by side on --workers processes by default): the signal lands while they run.
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, "run", "--set", "run.requests=100000",
         "--set", "run.horizon_s=null", "--no-progress", "--no-report", "--out", str(out)],
        cwd=repo_root(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=ITERATION_AT_A_TIME)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(3.0)  # past parsing and building, into the simulation
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, (stdout, stderr)
    assert _one_line(stderr) == "specsim run: interrupted"
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no staging folder left beside it either


def test_an_interrupt_during_the_report_leaves_no_folder(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_report, "write_report", interrupted)
    out = tmp_path / "run"
    assert main(["run", *SHORT, "--out", str(out)]) == 130
    assert _one_line(capsys.readouterr().err) == "specsim run: interrupted"
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert _finished_folders(tmp_path) == []
    # the same run, not interrupted, is complete
    monkeypatch.undo()
    assert main(["run", *SHORT, "--out", str(out)]) == 0
    assert _finished_folders(tmp_path) == [out]


def _sweep_interrupted_at(call: int, monkeypatch):
    """Make the sweep's ``call``-th point (1-based) raise KeyboardInterrupt."""
    real, calls = sweep_study.run_point, []

    def interrupted_there(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_study, "run_point", interrupted_there)


SWEEP = ["sweep", "scenarios/default.yaml", "--vary", "workload.rate_per_s=4,8,16", *SHORT]


def test_an_interrupted_sweep_writes_the_points_that_finished_marked_partial(
        tmp_path, capsys, monkeypatch):
    """Ctrl-C on an 800-point sweep threw away the 420 points that had finished."""
    _sweep_interrupted_at(3, monkeypatch)
    out = tmp_path / "sweep"
    assert main([*SWEEP, "--out", str(out)]) == 130
    line = _one_line(capsys.readouterr().err)
    assert line == ("specsim sweep: interrupted: 2 of 3 sweep points had finished (points 0, "
                    "1); they are written, marked partial (meta.yaml complete: false), to "
                    f"{out / 'sweep.csv'}")
    table = pd.read_csv(out / "sweep.csv")
    assert table["workload.rate_per_s"].tolist() == [4, 4, 8, 8]  # none, fixed-g4 each
    meta = yaml.safe_load((out / "meta.yaml").read_text())
    assert meta["complete"] is False and meta["points"] == 3
    assert meta["finished_points"] == [0, 1]
    assert _finished_folders(tmp_path) == []
    # the rows are those of the whole sweep's first two points
    monkeypatch.undo()
    whole = tmp_path / "whole"
    assert main([*SWEEP, "--out", str(whole)]) == 0
    assert yaml.safe_load((whole / "meta.yaml").read_text())["complete"] is True
    pd.testing.assert_frame_equal(pd.read_csv(whole / "sweep.csv").head(4), table)


def test_a_sweep_interrupted_before_any_point_finished_writes_nothing(
        tmp_path, capsys, monkeypatch):
    _sweep_interrupted_at(1, monkeypatch)
    out = tmp_path / "sweep"
    assert main([*SWEEP, "--out", str(out)]) == 130
    assert _one_line(capsys.readouterr().err) == (
        "specsim sweep: interrupted: 0 of 3 sweep points had finished; nothing was written")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_interrupted_grid_exits_130_with_one_line(tmp_path, capsys, monkeypatch):
    real, calls = grid_study.chain_table, []

    def second_is_interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(grid_study, "chain_table", second_is_interrupted)
    out = tmp_path / "grid"
    assert main(["grid", "--target", "llama-3-8b", "--draft", "llama-3.2-1b", "--gpu", "h100",
                 "--alpha", "0.8", "--timing", "paper", "--batches", "1,4",
                 "--contexts", "128", "--no-progress", "--out", str(out)]) == 130
    assert _one_line(capsys.readouterr().err) == "specsim grid: interrupted"
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_interrupted_plan_says_which_candidates_finished(tmp_path, capsys, monkeypatch):
    real, calls = plan_study.search_rate, []

    def second_is_interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_study, "search_rate", second_is_interrupted)
    doc = yaml.safe_load((repo_root() / "scenarios" / "plan-llama70b.yaml").read_text())
    doc["run"]["requests"] = 100  # as tests/sim/test_plan_command.py: enough to find a limit
    doc["deployment"]["timing"] = "paper"
    scenario = tmp_path / "plan.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    cands = yaml.safe_load((repo_root() / "scenarios" / "plan-candidates.yaml").read_text())
    cands["candidates"] = [c for c in cands["candidates"]
                           if c["name"] in ("h200-tp2-none", "h200-tp2-chain4")]
    cfile = tmp_path / "cands.yaml"
    cfile.write_text(yaml.safe_dump(cands))
    out = tmp_path / "plan"
    assert main(["plan", str(scenario), "--candidates", str(cfile), "--slo",
                 "ttft_p99=2s,tpot_p99=50ms", "--no-progress", "--workers", "1",
                 "--out", str(out)]) == 130
    line = _one_line(capsys.readouterr().err)
    first = cands["candidates"][0]["name"]
    assert line == (f"specsim plan: interrupted: 1 of 2 plan candidates had finished "
                    f"({first}); nothing was written")
    assert not out.exists()


def test_a_plan_interrupted_while_its_candidates_are_built_says_none_had_finished(
        tmp_path, capsys, monkeypatch):
    """Building the candidates (their cost models: the first tabulates the kernel tables,
    seconds on a cold cache) is part of the plan: Ctrl-C there says how many had finished."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plan_study, "build_for", interrupted)
    out = tmp_path / "plan"
    scenarios = repo_root() / "scenarios"
    assert main(["plan", str(scenarios / "plan-llama70b.yaml"), "--candidates",
                 str(scenarios / "plan-candidates.yaml"), "--slo", "ttft_p99=2s,tpot_p99=50ms",
                 "--no-progress", "--out", str(out)]) == 130
    assert _one_line(capsys.readouterr().err) == (
        "specsim plan: interrupted: 0 of 8 plan candidates had finished; nothing was written")
    assert not out.exists()


@pytest.mark.timeout(180)
def test_ctrl_c_stops_a_plan_on_worker_processes_at_once(tmp_path):
    """Ctrl-C signals the whole process group: the workers stop with the plan instead of
    working through the candidates still queued (the plan runs about 40 s on two workers
    at 3,000 requests a run, one iteration at a time -- the example's 300 finish in
    seconds; after the signal it must be gone within seconds)."""
    out = tmp_path / "plan"
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, "plan", "scenarios/plan-llama70b.yaml",
         "--candidates", "scenarios/plan-candidates.yaml", "--slo",
         "ttft_p99=2s,tpot_p99=50ms", "--set", "run.requests=3000", "--workers", "2",
         "--no-progress", "--out", str(out)],
        cwd=repo_root(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env=ITERATION_AT_A_TIME)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(6.0)  # the candidates are being searched on both workers
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    sent = time.monotonic()
    stdout, stderr = proc.communicate(timeout=120)
    waited = time.monotonic() - sent
    assert proc.returncode == 130, (stdout, stderr)
    line = _one_line(stderr)
    assert line.startswith("specsim plan: interrupted: ") and "of 8 plan candidates" in line
    assert waited < 15.0, f"{waited:.1f} s from Ctrl-C to exit"
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_interrupted_bench_exits_130_with_one_line(capsys, monkeypatch):
    """Ctrl-C in the middle of ``specsim bench``'s simulation (the 225-line traceback the
    issue saw): one line, exit 130."""
    from sim import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "simulate", interrupted)
    assert main(["bench", "--requests", "20"]) == 130
    assert _one_line(capsys.readouterr().err) == "specsim bench: interrupted"
