"""The interval on ``specsim plan``'s capacity figures (``sim.studies.plan_interval``): the
time scaling it rests on, the acceptance ends, and the ranges ``plan`` prints: around the
point estimate, wider with a wider acceptance spread, the same on every run, bad input
refused in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from sim.cli import main
from sim.loading import load_scenario, repo_root
from sim.studies.plan_interval import acceptance_ends, timing_error
from tests.sim.test_plan_search import _tiny

SCENARIO = repo_root() / "scenarios" / "plan-llama70b.yaml"
LLAMA8B = repo_root() / "scenarios" / "plan-llama8b.yaml"


def _small(tmp_path, acceptance=None) -> tuple:
    """The Llama-3-70B example made small (100 requests, the paper GPU, as
    test_plan_command's) with one candidate speculating and one not."""
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["run"]["requests"] = 100
    doc["deployment"]["timing"] = "paper"
    if acceptance is not None:
        doc["acceptance"] = acceptance
    scenario = tmp_path / "plan.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    cands = tmp_path / "c.yaml"
    cands.write_text(yaml.safe_dump({"candidates": [
        {"name": "none", "set": {"deployment.gpu": "h200", "deployment.tp": 2},
         "policy": {"kind": "none"}},
        {"name": "chain4", "set": {"deployment.gpu": "h200", "deployment.tp": 2},
         "policy": {"kind": "fixed", "gamma": 4}}]}))
    return scenario, cands


def _plan(capsys, tmp_path, scenario, cands, *extra) -> dict:
    out = tmp_path / f"o{len(list(tmp_path.iterdir()))}"
    assert main(["plan", str(scenario), "--candidates", str(cands), "--json", "--no-progress",
                 "--slo", "ttft_p99=2s,tpot_p99=50ms", "--target-rate", "30",
                 "--out", str(out), *extra]) == 0
    return {r["candidate"]: r for r in json.loads(capsys.readouterr().out)["rows"]}


_INTERVAL = ("max_rate_low_per_s", "max_rate_high_per_s", "replicas_for_target_low",
             "replicas_for_target_high", "gpus_for_target_low", "gpus_for_target_high",
             "timing_error")


def test_step_times_scaled_by_s_are_the_run_at_rate_times_s(monkeypatch):
    """What the interval's timing ends rest on: every step time x s at rate r is the run at
    rate r x s with every time x s (checked on the reference path, pricing scaled by
    hand)."""
    from sim.engine_path import PATHS
    from sim.pricing import IterationPricer
    from sim.runner import run_scenario
    from sim.summary import latencies

    sets = ["run.requests=60", "workload.rate_per_s=20",
            'variants=[{"name": "k2", "policy": {"kind": "fixed", "gamma": 2}, '
            '"drafter": {"method": "eagle3"}}]']
    s = 1.3

    def run(rate: float, scale: float) -> dict:
        sc = load_scenario(LLAMA8B, [*sets, f"workload.rate_per_s={rate}"])
        return latencies(run_scenario(sc, engine_path=PATHS["reference"],
                                      iteration_rows=False).variants[0].requests)

    plain = run(20 * s, 1.0)
    price = IterationPricer.price

    def slower(self, *a, **k):
        draft_s, verify_s, bound = price(self, *a, **k)
        return draft_s * s, verify_s * s, bound

    monkeypatch.setattr(IterationPricer, "price", slower)
    scaled = run(20, s)
    for key in ("ttft", "tpot", "e2e"):
        assert len(scaled[key]) == 60
        np.testing.assert_allclose(scaled[key], s * plain[key], rtol=1e-9)


def test_acceptance_ends_scale_every_per_guess_rate_and_pick_a_mixs_extreme_tasks():
    lo, hi = acceptance_ends({"kind": "iid", "alpha": 0.8, "theta": 1.0}, 0.1, "c")
    assert lo == {"kind": "iid", "alpha": pytest.approx(0.72), "theta": 1.0}
    assert hi == {"kind": "iid", "alpha": pytest.approx(0.88), "theta": 1.0}
    # capped at 1; a preset's conditional rates as marginals (their products)
    assert acceptance_ends({"kind": "iid", "alpha": 0.95}, 0.1, "c")[1]["alpha"] == 1.0
    from workloads.presets import preset

    rates = preset("eagle3-llama-3.1-8b-mtbench-k3").conditional_rates()
    lo, hi = acceptance_ends({"kind": "preset", "name": "eagle3-llama-3.1-8b-mtbench-k3"},
                             0.2, "c")
    assert lo["kind"] == hi["kind"] == "marginal"
    np.testing.assert_allclose(lo["marginals"], np.cumprod(rates * 0.8))
    np.testing.assert_allclose(hi["marginals"], np.cumprod(np.minimum(1, rates * 1.2)))
    # no spread stated: the acceptance as it is; a mix spreads over its tasks
    acc = {"kind": "positional", "rates": [0.7, 0.6]}
    assert acceptance_ends(acc, 0.0, "c") == (acc, acc)
    mix = {"kind": "task_mix", "tasks": {
        "chat": {"weight": 3, "acceptance": {"kind": "iid", "alpha": 0.6}},
        "code": {"weight": 1, "acceptance": {"kind": "iid", "alpha": 0.9}},
        "sum": {"weight": 1, "acceptance": {"kind": "iid", "alpha": 0.7}}}}
    lo, hi = acceptance_ends(mix, 0.0, "c")
    assert (lo["alpha"], hi["alpha"]) == (0.6, 0.9)
    lo, hi = acceptance_ends(mix, 0.5, "c")
    assert (lo["alpha"], hi["alpha"]) == (pytest.approx(0.3), 1.0)
    # an n-gram preset's rates are over the steps it proposed on: not spread on their own
    from specdec.errors import UserError

    with pytest.raises(UserError, match="^--acceptance-spread: cands.yaml candidates.0 x: "
                                        "preset ngram-llama-3.1-8b-code-edit-k5's rates"):
        acceptance_ends({"kind": "preset", "name": "ngram-llama-3.1-8b-code-edit-k5"}, 0.1,
                        "cands.yaml candidates.0 x")
    assert acceptance_ends({"kind": "preset", "name": "ngram-llama-3.1-8b-code-edit-k5"},
                           0.0, "c")[0]["kind"] == "preset"


def test_the_timing_error_is_the_held_out_median_of_the_engine_and_method():
    import numpy as np

    from hardware import load_catalog
    from hardware.timing.validation import validate_spec

    e = validate_spec(load_catalog())
    sc = load_scenario(LLAMA8B)  # vLLM

    def median(errors, keep) -> float:
        vals = [abs(x) for r, x in zip(e.rows, errors, strict=True)
                if r.split == "test" and not np.isnan(x) and keep(r)]
        return float(np.median(vals))

    assert timing_error(sc, "eagle3") == median(
        e.tpot_error, lambda r: r.framework == "vllm" and r.method == "eagle3")
    assert timing_error(sc, None) == median(e.base_error, lambda r: r.framework == "vllm")
    # no held-out vLLM n-gram rows: the engine's speculative rows
    assert timing_error(sc, "ngram") == median(e.tpot_error, lambda r: r.framework == "vllm")
    assert 0 < timing_error(sc, None) < timing_error(sc, "eagle3")
    # another engine's rows do not set a vLLM candidate's error: SGLang's are larger
    assert timing_error(sc, "eagle3") < median(
        e.tpot_error, lambda r: r.framework == "sglang" and r.method == "eagle3")


def test_the_interval_holds_the_point_estimate_and_is_the_same_every_run(tmp_path, capsys):
    scenario, cands = _small(tmp_path)
    one = _plan(capsys, tmp_path, scenario, cands, "--workers", "1")
    two = _plan(capsys, tmp_path, scenario, cands, "--workers", "2")
    assert one == two
    for r in one.values():
        assert 0 < r["max_rate_low_per_s"] <= r["max_rate_per_s"] <= r["max_rate_high_per_s"]
        assert r["max_rate_low_per_s"] < r["max_rate_high_per_s"]
        assert r["replicas_for_target_low"] <= r["replicas_for_target"] \
            <= r["replicas_for_target_high"]
        assert r["gpus_for_target_high"] == r["replicas_for_target_high"] * r["gpus"]
        assert r["gpus_for_target"] == r["replicas_for_target"] * r["gpus"]
        assert r["timing_error"] > 0
    # without speculation, the error of the runs without speculation
    assert one["none"]["timing_error"] != one["chain4"]["timing_error"]
    skipped = _plan(capsys, tmp_path, scenario, cands, "--no-interval")
    assert not any(k in skipped["chain4"] for k in _INTERVAL)
    assert skipped["chain4"]["max_rate_per_s"] == one["chain4"]["max_rate_per_s"]


def test_the_interval_widens_with_the_acceptance_spread(tmp_path, capsys):
    scenario, cands = _small(tmp_path)
    narrow = _plan(capsys, tmp_path, scenario, cands, "--workers", "2")
    wide = _plan(capsys, tmp_path, scenario, cands, "--workers", "2",
                 "--acceptance-spread", "0.15")
    n, w = narrow["chain4"], wide["chain4"]
    assert w["max_rate_low_per_s"] < n["max_rate_low_per_s"]
    assert w["max_rate_high_per_s"] >= n["max_rate_high_per_s"]
    assert w["max_rate_per_s"] == n["max_rate_per_s"]
    # no speculation, no acceptance: the same range
    assert wide["none"] == narrow["none"]


def test_a_task_mix_spreads_over_its_tasks(tmp_path, capsys):
    """One task accepting α 0.8 against a mix of 0.6 and 0.9 (the same mean α, 0.75 by
    weight): the mix's range runs from its worst task to its best."""
    mix = {"kind": "task_mix", "tasks": {
        "hard": {"weight": 1, "acceptance": {"kind": "iid", "alpha": 0.6}},
        "easy": {"weight": 1, "acceptance": {"kind": "iid", "alpha": 0.9}}}}
    scenario, cands = _small(tmp_path, mix)
    spread = _plan(capsys, tmp_path, scenario, cands, "--workers", "2")["chain4"]
    scenario, cands = _small(tmp_path, {"kind": "iid", "alpha": 0.6})
    hard = _plan(capsys, tmp_path, scenario, cands, "--workers", "2")["chain4"]
    # the mix's low end is the run of all-hard traffic at the slow timing
    assert spread["max_rate_low_per_s"] <= hard["max_rate_low_per_s"] * 1.05
    assert spread["max_rate_low_per_s"] < spread["max_rate_per_s"]


@pytest.mark.parametrize("flag, expected", [
    (["--acceptance-spread", "-0.1"], "--acceptance-spread: must be >= 0 and < 1, got -0.1"),
    (["--acceptance-spread", "1"], "--acceptance-spread: must be >= 0 and < 1, got 1"),
    (["--acceptance-spread", "x"], "argument --acceptance-spread: invalid float value: 'x'"),
])
def test_a_bad_spread_is_one_line_naming_the_flag(tmp_path, capsys, flag, expected):
    scenario, cands = _small(tmp_path)
    try:
        code = main(["plan", str(scenario), "--candidates", str(cands), "--no-progress",
                     "--out", str(tmp_path / "o"), *flag])
    except SystemExit as e:  # argparse's own: not a number
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
    assert not (tmp_path / "o").exists()


def test_a_spread_on_acceptance_without_rates_names_the_candidate(tmp_path, capsys):
    scenario, cands = _small(tmp_path, {"kind": "trace", "file": str(
        repo_root() / "workloads" / "traces" / next(
            p.name for p in (repo_root() / "workloads" / "traces").glob("*.npz")))})
    assert main(["plan", str(scenario), "--candidates", str(cands), "--no-progress",
                 "--slo", "ttft_p99=2s,tpot_p99=50ms", "--acceptance-spread", "0.1",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--acceptance-spread:" in err[0] and "candidates.1 chain4" in err[0] \
        and "acceptance kind trace" in err[0]


def test_a_search_gives_its_refined_rows_a_range(tmp_path, capsys):
    scenario, cands = _tiny(tmp_path, {
        "deployments": [{"name": "a", "set": {"deployment.gpu": "h100", "deployment.tp": 4}}],
        "methods": {"d": {}}, "k": [1, 3]})
    out = tmp_path / "o"
    assert main(["plan", str(scenario), "--candidates", str(cands), "--no-progress",
                 "--target-rate", "40", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rows = pd.read_csv(out / "plan.csv").to_dict("records")
    refined = [r for r in rows if r["status"] == "refined"]
    assert refined
    for r in rows:
        if r["status"] == "refined":
            assert r["max_rate_low_per_s"] <= r["max_rate_per_s"] <= r["max_rate_high_per_s"]
        else:
            assert math.isnan(r["max_rate_low_per_s"])
    best = rows[0]
    assert (f"it serves {best['max_rate_per_s']:.3g} req/s (range "
            f"{best['max_rate_low_per_s']:.3g}-{best['max_rate_high_per_s']:.3g})") in text
    assert "not a confidence interval" in text
