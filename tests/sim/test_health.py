"""Runs that say when their numbers are not capacity: overload, preemption storms."""

from __future__ import annotations

import json

import pytest

from sim.cli import main

# The default scenario (Llama-3-8B + 1B draft, one H100) serves about 24 req/s without
# speculation (measured: served_rate_per_s at 400 req/s offered).
SHORT = ["--set", "run.requests=300", "--no-report", "--no-progress", "--json"]


def _run(tmp_path, capsys, name, *sets):
    args = ["run", "--out", str(tmp_path / name), *SHORT]
    if any(s.startswith("run.requests=") for s in sets):  # (a --set key is given once)
        args.remove("run.requests=300")
        args.remove("--set")
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return {v["name"]: v for v in json.loads(capsys.readouterr().out)["variants"]}


@pytest.fixture(scope="module")
def loads(tmp_path_factory):
    """The default scenario at 1/3x, 2x and 20x its capacity."""
    import contextlib
    import io

    out = {}
    for rate in (8, 50, 500):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["run", "--out", str(tmp_path_factory.mktemp("r") / "x"), *SHORT,
                         "--set", f"workload.rate_per_s={rate}"]) == 0
        out[rate] = {v["name"]: v for v in json.loads(buf.getvalue())["variants"]}
    return out


def test_twenty_times_capacity_is_reported_overloaded_with_a_warning(loads):
    for v in loads[500].values():
        assert v["overloaded"] is True
        assert v["offered_rate_per_s"] > 10 * v["served_rate_per_s"]
        assert any(w.startswith("overloaded: ") for w in v["warnings"])
    for v in loads[8].values():
        assert v["overloaded"] is False and v["warnings"] == []


def test_throughput_does_not_fall_as_load_rises_past_saturation(loads):
    for name in ("none", "fixed-g4"):
        low, two, twenty = (loads[r][name]["throughput_tokens_per_s"] for r in (8, 50, 500))
        assert low < two <= twenty * (1 + 1e-9)


def test_a_kv_starved_run_reports_its_preemptions_and_a_storm(tmp_path, capsys):
    v = _run(tmp_path, capsys, "kv", "workload.rate_per_s=40",
             "scheduler.num_gpu_blocks_override=400", "run.requests=120")
    for s in v.values():
        assert s["preemptions"] > 0 and s["recomputed_tokens"] > 0
        assert any(w.startswith("preemption storm: ") for w in s["warnings"])
