"""``workload: {arrivals: trace, format: ...}``: fields per format, the request table it
builds, the count and horizon, and a small run of each format end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.build import setups
from sim.loading import load_scenario
from sim.runner import run_scenario
from specdec.errors import UserError

DATA = Path(__file__).parents[1] / "workloads" / "data"
NONE = ["variants=[{name: none, policy: {kind: none}}]"]
BOTH = ["variants=[{name: none, policy: {kind: none}}, "
        "{name: g4, policy: {kind: fixed, gamma: 4}}]", "acceptance={kind: iid, alpha: 0.8}"]
TRACES = {
    "mooncake": f"{{arrivals: trace, format: mooncake, file: {DATA / 'mooncake.jsonl'}}}",
    "azure-2023": f"{{arrivals: trace, format: azure, file: {DATA / 'azure2023.csv'}}}",
    "azure-2024": f"{{arrivals: trace, format: azure, file: {DATA / 'azure2024.csv'}}}",
    "burstgpt": f"{{arrivals: trace, format: burstgpt, file: {DATA / 'burstgpt.csv'}, "
                "zero_tokens: skip, time_scale: 20}",
    "sharegpt": f"{{arrivals: trace, format: sharegpt, file: {DATA / 'sharegpt.json'}, "
                "rate_per_s: 4}",
}
COUNTS = {"mooncake": 12, "azure-2023": 11, "azure-2024": 8, "burstgpt": 11, "sharegpt": 6}


def _table(workload: str, *sets: str):
    sc = load_scenario(None, [*NONE, f"workload={workload}", *sets])
    (_, setup), = setups(sc)
    return setup.table


@pytest.mark.parametrize("name", sorted(TRACES))
def test_each_format_runs_end_to_end(name):
    sc = load_scenario(None, [*BOTH, f"workload={TRACES[name]}",
                              f"run.requests={COUNTS[name]}"])
    res = run_scenario(sc)
    for v in res.variants:
        assert len(v.requests) == COUNTS[name] and all(r.finished for r in v.requests)
    assert [s["name"] for s in res.summaries] == ["none", "g4"]


def test_the_table_is_the_file_exactly():
    t = _table(TRACES["mooncake"], "run.requests=12")
    ms = [0, 0, 250, 1000, 1000, 1500, 2750, 3000, 4000, 4500, 6000, 7250]
    assert t.arrival_at.tolist() == [x / 1000 for x in ms]
    assert t.prompt_tokens.tolist()[:4] == [1200, 600, 1536, 512]
    assert t.output_tokens.tolist()[-3:] == [150, 5, 300]
    t = _table(TRACES["burstgpt"], "run.requests=11")
    assert t.arrival_at.tolist()[:4] == [0.0, 40 / 20, 113 / 20, 185 / 20]


def test_time_scale_window_and_sample_reach_the_table():
    w = TRACES["mooncake"][:-1]
    t = _table(w + ", time_scale: 2, start_s: 1, duration_s: 2}", "run.requests=4")
    assert t.arrival_at.tolist() == [0.0, 0.0, 0.25, 0.875]
    t1 = _table(w + ", sample: 0.5}", "run.requests=3", "run.seed=1")
    t2 = _table(w + ", sample: 0.5}", "run.requests=3", "run.seed=1")
    assert t1.prompt_tokens.tolist() == t2.prompt_tokens.tolist()  # seeded


def test_horizon_only_keeps_the_arrivals_before_it():
    t = _table(TRACES["azure-2023"], "run.requests=null", "run.horizon_s=3")
    assert t.arrival_at.tolist() == [0.0, 0.5, 0.5, 0.68059, 1.25, 2.125]


def test_sharegpt_arrivals_are_poisson_at_the_rate_and_burstiness_is_vllms_gamma():
    t = _table(TRACES["sharegpt"], "run.requests=6")
    assert np.all(np.diff(t.arrival_at) >= 0) and t.arrival_at[0] > 0  # vLLM: gap first
    w = TRACES["sharegpt"][:-1]
    t2 = _table(w + ", burstiness: 0.5}", "run.requests=6")
    assert t2.arrival_at.tolist() != t.arrival_at.tolist()
    assert sorted(t.prompt_tokens.tolist()) == sorted(t2.prompt_tokens.tolist())


def test_too_few_requests_name_both_counts():
    with pytest.raises(UserError, match=r"mooncake\.jsonl: holds 12 requests \(12 rows "
                                        r"read\), fewer than run.requests 20; set run\."
                                        r"requests to at most 12"):
        _table(TRACES["mooncake"], "run.requests=20")
    with pytest.raises(UserError, match=r"holds 2 requests \(12 rows read: 10 before "
                                        r"start_s\), fewer than run.requests 4"):
        _table(TRACES["mooncake"][:-1] + ", start_s: 5}", "run.requests=4")
    with pytest.raises(UserError, match=r"sharegpt\.json: holds 6 usable conversations \(6 "
                                        r"rows read\), fewer than run.requests 7"):
        _table(TRACES["sharegpt"], "run.requests=7")
    with pytest.raises(UserError, match=r"fewer than the \d+ arriving before run.horizon_s 100"):
        _table(TRACES["sharegpt"], "run.requests=null", "run.horizon_s=100")


@pytest.mark.parametrize(("workload", "problem"), [
    ("{arrivals: trace, format: azure, file: x.csv, rate_per_s: 3}",
     "workload.rate_per_s: does not apply to format 'azure' (its fields: time_scale, "
     "start_s, duration_s, sample)"),
    ("{arrivals: trace, format: mooncake, file: x, models: [GPT-4]}",
     "workload.models: does not apply to format 'mooncake'"),
    ("{arrivals: trace, format: burstgpt, file: x, hash_block_tokens: 16}",
     "workload.hash_block_tokens: does not apply to format 'burstgpt'"),
    ("{arrivals: trace, format: sharegpt, file: x, sample: 0.5, rate_per_s: 1}",
     "workload.sample: does not apply to format 'sharegpt'"),
    ("{arrivals: trace, format: sharegpt, file: x}", "workload.rate_per_s: required for "
                                                     "format 'sharegpt'"),
    ("{arrivals: trace, format: mooncake, file: x, speed: 2}", "workload.speed: unknown field"),
    ("{arrivals: trace, format: csv, file: x}", "workload.format: must be one of"),
    ("{arrivals: trace, format: mooncake}", "workload.file: required field is missing"),
    ("{arrivals: trace, format: azure, file: x, sample: 0}", "workload.sample: must be > 0"),
    ("{arrivals: trace, format: azure, file: x, zero_tokens: drop}",
     "workload.zero_tokens: must be one of"),
])
def test_fields_are_checked_per_format(workload, problem):
    with pytest.raises(UserError) as info:
        load_scenario(None, [f"workload={workload}"])
    assert problem.lower() in str(info.value).lower()


def test_a_malformed_trace_names_the_scenario_section_file_and_line(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [0]}\n'
                 '{"timestamp": 1, "input_length": 10, "output_length": 3, "hash_ids": []}\n')
    with pytest.raises(UserError) as info:
        _table(f"{{arrivals: trace, format: mooncake, file: {f}}}", "run.requests=2")
    assert str(info.value) == (f"scenario: workload: {f}: line 2: hash_ids: 0 ids for "
                               f"input_length 10, expected ceil(10 / 512) = 1")


def test_the_resolved_scenario_round_trips():
    for w in TRACES.values():
        sc = load_scenario(None, [f"workload={w}"])
        again = type(sc).model_validate(sc.model_dump(mode="json"))
        assert again == sc
