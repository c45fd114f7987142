"""Resolving scenarios: every arrival kind, replayed request traces, horizons, task mixes."""

import numpy as np
import pytest

from sim.build import setups
from sim.loading import load_scenario
from sim.runner import run_scenario
from specdec.errors import UserError

SMALL = ["variants=[{name: none, policy: {kind: none}}]"]


@pytest.mark.parametrize("arrivals", [
    "{arrivals: poisson, rate_per_s: 5}",
    "{arrivals: gamma, rate_per_s: 5, cv: 2}",
    "{arrivals: onoff, on_rate_per_s: 10, off_rate_per_s: 0, on_mean_s: 1, off_mean_s: 1}",
    "{arrivals: offline}",
    "{arrivals: closed_loop, users: 4, think_mean_s: 0.1}",
])
def test_every_arrival_kind_runs(arrivals):
    sc = load_scenario(None, [*SMALL, f"workload={arrivals}", "run.requests=30"])
    res = run_scenario(sc)
    reqs = res.variants[0].requests
    assert len(reqs) == 30 and all(r.finished for r in reqs)
    times = [r.arrival_at for r in reqs]
    assert times == sorted(times)


def test_replayed_request_trace(tmp_path):
    from workloads import RequestSpec, write_request_csv

    path = tmp_path / "trace.csv"
    specs = [RequestSpec(i, 0.1 * i, 10 + i, 5 + i) for i in range(12)]
    write_request_csv(path, specs)
    sc = load_scenario(None, [*SMALL, f"workload={{arrivals: replay, file: {path}}}",
                              "run.requests=10"])
    (name, setup), = setups(sc)
    assert setup.table.arrival_at.tolist() == pytest.approx([0.1 * i for i in range(10)])
    assert setup.table.prompt_tokens.tolist() == [10 + i for i in range(10)]
    res = run_scenario(sc)
    assert [r.output_tokens for r in res.variants[0].requests] == [5 + i for i in range(10)]


def test_horizon_only_runs_generate_arrivals_up_to_the_horizon():
    sc = load_scenario(None, [*SMALL, "run.requests=null", "run.horizon_s=3",
                              "workload.rate_per_s=10"])
    res = run_scenario(sc)
    v = res.variants[0]
    assert v.end_at == 3.0
    assert all(r.arrival_at < 3.0 for r in v.requests)
    assert 15 < len(v.requests) < 50  # ~30 Poisson arrivals in 3 s
    assert any(not r.finished for r in v.requests)  # cut off at the horizon


def test_task_mix_labels_requests_and_draws_streams_per_task():
    sc = load_scenario(None, [
        "run.requests=200",
        "acceptance={kind: task_mix, tasks: {easy: {weight: 1, acceptance: {kind: iid, "
        "alpha: 0.95}}, hard: {weight: 1, acceptance: {kind: iid, alpha: 0.2}}}}",
    ])
    (_, setup), _ = setups(sc)
    tasks = setup.table.task
    assert set(np.unique(tasks).tolist()) == {0, 1}
    res = run_scenario(sc)
    spec = res.variants[1].requests
    rate = {t: sum(r.accepted_tokens for r in spec if r.task == t)
            / sum(r.drafted_tokens for r in spec if r.task == t) for t in (0, 1)}
    assert rate[0] > 0.7 > 0.2 > rate[1]


def test_the_workload_layer_errors_name_the_file_and_section():
    sc = load_scenario(None, [*SMALL, "workload={arrivals: replay, file: /nonexistent.csv}"])
    with pytest.raises(UserError, match=r"^x\.yaml: workload: /nonexistent\.csv: cannot read"):
        setups(sc, "x.yaml")


@pytest.mark.parametrize("policy, tokens", [
    ("{kind: fixed, gamma: 5}", 6),
    ("{kind: tree, expansion: [2, 2, 1]}", 1 + 2 + 4 + 4),
    ("{kind: tree, steps: 3, topk: 4}", 1 + 12),
    ("{kind: batch_ladder, ladder: [[1, 4, 6], [5, 256, 2]]}", 7),
    ("{kind: adaptive, max_gamma: 8, max_width: 3}", 1 + 3 * 8),  # <3,1,...,1> at depth 8
])
def test_a_verify_that_cannot_fit_the_token_budget_is_refused_at_build(policy, tokens):
    sets = [f"variants=[{{name: v, policy: {policy}}}]", "run.requests=3",
            "scheduler.chunked_prefill=true", "scheduler.chunk_tokens=1"]
    setups(load_scenario(None, [*sets, f"scheduler.max_batched_tokens={tokens}"]), "x.yaml")
    sc = load_scenario(None, [*sets, f"scheduler.max_batched_tokens={tokens - 1}"])
    with pytest.raises(UserError, match=rf"max_batched_tokens: must be >= a verify pass of "
                                        rf"{tokens} tokens, got {tokens - 1}"):
        setups(sc, "x.yaml")
