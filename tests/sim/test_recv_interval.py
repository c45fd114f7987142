"""SGLang's ``--scheduler-recv-interval`` (``scheduler.recv_interval``, ``sim.recv``): a
request submitted to a busy replica waits for a loop where SGLang's scheduler reads its
socket; hand-checked traces, the flag read from ``--from-sglang``, what is refused."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import simpy

from sim.build import setups
from sim.cli import main
from sim.cluster import wire
from sim.engine_path import PATHS
from sim.engines.sglang import launch_command, parse_sglang
from sim.loading import load_scenario, repo_root
from sim.recv import RecvInterval
from sim.runner import run_scenario, simulate
from specdec.errors import UserError
from tests.sim.fakes import setup, table
from tests.sim.test_disagg import assert_same_records_twice
from tests.sim.test_pd_sglang import SGLANG

LAUNCH = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"


def _ids(model: str) -> str:
    return {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b"}[model]


def _sets(parsed) -> dict:
    return {k: json.loads(v) for k, v in (t.split("=", 1) for t in parsed.sets)}


def _simulate(interval: int, arrival_at, prompt, output, path):
    """SGLang's order on the fake cost (10 ms a pass + 1 ms a token) under ``interval``."""
    s = setup(table(arrival_at, prompt, output), max_batched_tokens=64, chunked=True,
              chunk=64, order="prefill_first")
    return simulate(replace(s, limits=replace(s.limits, recv_interval=interval)), path=path)


# -- the counter, as SGLang's SchedulerRecvSkipper.handle ------------------------------

def test_the_counter_reads_every_n_decode_steps_and_after_each_prefill():
    gate = RecvInterval(3)
    reads = []
    for prefill in (True, False, False, False, False, False, False):
        gate.pending.append(7)
        gate.ran(prefill)
        reads.append(bool(gate.receive(idle=False)))
    # the loop after the prefill reads (1000 >= 3); then every third decode step
    assert reads == [True, False, False, True, False, False, True]


def test_an_idle_loop_reads_at_once():
    gate = RecvInterval(10)
    gate.ran(False)
    gate.pending.extend([1, 2])
    assert gate.receive(idle=True) == [1, 2] and gate.counter == 0
    gate.pending.append(3)  # a loop that formed no step: SGLang's idle loops spin to N
    assert gate.receive(idle=False) == [3]


# -- hand-checked traces (both engine paths: the compiled ones leave it to the reference) --

def test_a_request_reaching_a_busy_replica_is_read_at_the_third_loop(engine_path):
    """A (8-token prompt) runs from 0: its prefill ends at 18 ms and the loop there reads
    (a prefill weighs 1000); then decode steps of 11 ms. B arrives at 20 ms: loops start at
    29 ms (counter 1), 40 ms (2) and 51 ms (3: read), so B is first scheduled at 51 ms,
    prefilled alone (18 ms, SGLang's prefill first). With every loop reading it is 29 ms;
    with 10, 18 + 10 x 11 = 128 ms."""
    for interval, read_at in ((1, 0.029), (3, 0.051), (10, 0.128)):
        res = _simulate(interval, [0.0, 0.020], [8, 8], [30, 30], engine_path)
        a, b = res.requests
        assert a.first_scheduled_at == 0.0 and a.first_token_at == pytest.approx(0.018)
        assert b.first_scheduled_at == pytest.approx(read_at, abs=1e-12)
        assert b.first_token_at == pytest.approx(read_at + 0.018, abs=1e-12)
        assert a.finished and b.finished and b.emitted_tokens == 30


def test_the_loop_after_a_prefill_reads_whatever_the_interval(engine_path):
    # B arrives during A's prefill (0-18 ms): the next loop reads it even at interval 10
    res = _simulate(10, [0.0, 0.005], [8, 8], [30, 30], engine_path)
    assert res.requests[1].first_scheduled_at == pytest.approx(0.018, abs=1e-12)


def test_an_idle_replica_reads_at_once(engine_path):
    # A is done by 0.34 s; B arrives at 1 s to an idle replica, which reads it then
    res = _simulate(10, [0.0, 1.0], [8, 8], [30, 30], engine_path)
    assert res.requests[1].first_scheduled_at == 1.0


def test_a_replica_that_runs_dry_reads_what_it_held(engine_path):
    """A: prefill 0-18 ms (its first token), decodes 18-29 and 29-40 ms (its last). B came
    at 20 ms; the loop at 40 ms has counted 2 of 10, but nothing is left to run: SGLang
    spins idle loops until it reads, so B is read at 40 ms."""
    res = _simulate(10, [0.0, 0.020], [8, 8], [3, 3], engine_path)
    assert res.requests[0].finished_at == pytest.approx(0.040, abs=1e-12)
    assert res.requests[1].first_scheduled_at == pytest.approx(0.040, abs=1e-12)


@pytest.mark.parametrize("pd", [False, True])
def test_interval_one_is_the_run_without_the_knob(pd):
    base = [s for s in SGLANG if pd or not s.startswith("disaggregation")]
    base.append("run.requests=40")
    knob = "disaggregation.decode.recv_interval=1" if pd else "scheduler.recv_interval=1"
    root = repo_root() / "scenarios" / "default.yaml"
    one = run_scenario(load_scenario(root, [*base, knob]))
    off = run_scenario(load_scenario(root, base))
    for a, b in zip(one.variants, off.variants, strict=True):
        for kind in ("requests", "iterations"):
            ca, cb = getattr(a, kind).columns, getattr(b, kind).columns
            for k in ca:
                np.testing.assert_array_equal(ca[k], cb[k], err_msg=f"{kind} {k}")


def test_the_fast_paths_leave_it_to_the_reference_loop():
    s = setup(table([0.0], [8], [4]), order="prefill_first")
    cl = wire(simpy.Environment(), replace(s, limits=replace(s.limits, recv_interval=4)),
              PATHS["compiled"], True)
    off = cl.replicas[0].fast_paths()
    assert "scheduler.recv_interval 4" in off["steady"]
    assert "scheduler.recv_interval 4" in off["walk"]


# -- P/D: the decode server reads the router's requests into its preallocation --------

def test_pd_decode_side_reads_late_and_the_prefill_waits_for_it():
    """Under load the decode replicas, busy decoding, read a new request only every 10th
    loop: its allocation, and so its prefill, start later than with every loop reading;
    everything is still prefilled once and finishes, and a run is deterministic."""
    sets = [*SGLANG, "run.requests=60", "workload.rate_per_s=16"]
    root = repo_root() / "scenarios" / "default.yaml"
    waits = {}
    for n in (1, 10):
        sc = load_scenario(root, [*sets, f"disaggregation.decode.recv_interval={n}"])
        v = {x.name: x for x in run_scenario(sc).variants}["none"]
        r, t = v.requests.columns, v.transfers.columns
        assert r["finished"].all()
        assert (t["load_start_at"] >= r["arrival_at"]).all()
        assert (r["first_scheduled_at"] >= t["load_start_at"]).all()
        waits[n] = float(np.mean(t["load_start_at"] - r["arrival_at"]))
    # with every loop reading a request waits for the next loop's start (3.6 ms on
    # average, the step that runs); with every 10th, 33 ms
    assert waits[10] > 5 * waits[1] > 0.0
    assert_same_records_twice(load_scenario(
        root, [*sets, "run.requests=30", "disaggregation.decode.recv_interval=10"]))


# -- the command line and the scenario --------------------------------------------------

def test_from_sglang_reads_the_flag_and_launch_command_writes_it():
    assert _sets(parse_sglang(f"{LAUNCH} --scheduler-recv-interval 10", _ids))[
        "scheduler.recv_interval"] == 10
    p = parse_sglang(f"{LAUNCH} --scheduler-recv-interval 0", _ids)  # SGLang: every loop
    assert _sets(p)["scheduler.recv_interval"] == 1
    assert any("every loop" in n for n in p.notes)
    from hardware.catalog import load_catalog

    sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                       ["scheduler.order=prefill_first", "scheduler.recv_interval=10"])
    cmd, _ = launch_command(sc, sc.variants[0], load_catalog())
    assert "--scheduler-recv-interval 10" in cmd


@pytest.mark.parametrize(("text", "error"), [
    (f"{LAUNCH} --scheduler-recv-interval ten", "--scheduler-recv-interval: must be an "
                                                "integer"),
    (f"{LAUNCH} --scheduler-recv-interval 10 --tp-size 2 --dp-size 2 "
     "--enable-dp-attention --ep-size 2", "SGLang refuses"),
])
def test_from_sglang_refuses_what_sglang_refuses(text, error):
    with pytest.raises(UserError, match=error):
        parse_sglang(text, _ids)


@pytest.mark.parametrize(("sets", "field"), [
    (["scheduler.recv_interval=0"], "scheduler.recv_interval"),
    (["scheduler.recv_interval=10"], "scheduler.recv_interval: SGLang's"),  # vllm_v1
    (["scheduler.order=prefill_first", "scheduler.recv_interval=10", "deployment.pp=2"],
     "deployment.pp"),
    ([*SGLANG, "disaggregation.flow=vllm", "disaggregation.decode.recv_interval=10"],
     "disaggregation.flow"),
    (["scheduler.order=prefill_first", "models={target: deepseek-v3, method: mtp}",
      "deployment={gpu: h200, tp: 8, ep: 16, weight_bits: 8, compute_dtype: fp8}",
      "scheduler.recv_interval=10"], "deployment.ep: data-parallel attention"),
])
def test_bad_values_are_one_line_errors_naming_the_field(sets, field, capsys, tmp_path):
    args = ["run", "--no-progress", "--out", str(tmp_path / "out")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_only_the_servers_with_the_interval_are_checked_for_attention_dp():
    # the prefill pool's data-parallel attention does not meet the decode pool's interval
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", [
        "scheduler.order=prefill_first", "models={target: deepseek-v3, method: mtp}",
        "deployment={gpu: h200, tp: 4, weight_bits: 8, compute_dtype: fp8}",
        "disaggregation={prefill: {tp: 4, ep: 8}, decode: {ep: 4, recv_interval: 10}}"])
    assert sc.disaggregation.decode.recv_interval == 10


def test_setups_carry_the_interval_to_each_pool():
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                       [*SGLANG, "disaggregation.decode.recv_interval=10"])
    name, s = setups(sc)[0]
    assert s.limits.recv_interval == 10
    assert s.disagg.prefill.limits.recv_interval == 1
