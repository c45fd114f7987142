"""sim.studies.plan: SLO parsing and checking, candidates files, the rate search, ranking."""

from __future__ import annotations

import math

import pytest
import yaml

from sim.loading import read_yaml, repo_root, validate
from sim.records import Records, RequestRecord
from sim.studies.plan import Candidate, load_candidates, measure_slo, parse_slo, plan, search_rate
from specdec.errors import UserError


def test_parse_slo_units():
    assert parse_slo("ttft_p99=2s,tpot_p50=50ms") == {"ttft_p99_s": 2.0, "tpot_p50_s": 0.05}
    assert parse_slo("e2e_p99.9=1500us")["e2e_p99.9_s"] == pytest.approx(1.5e-3)
    assert parse_slo("ttft_p90=0.3") == {"ttft_p90_s": 0.3}


@pytest.mark.parametrize("bad", ["ttft=2s", "itl_p50=1s", "ttft_p99=-1s", "ttft_p99=2h",
                                 "ttft_p0=1s", "ttft_p99", "tpot_p50=fast"])
def test_parse_slo_rejects(bad):
    with pytest.raises(UserError, match="--slo"):
        parse_slo(bad)


def _recs(*reqs):
    return Records.from_rows(RequestRecord, reqs)


def _req(i, arrival, first, done, out=11):
    return RequestRecord(i, 0, 0, arrival, arrival, first, done, 10, out, out, 0, 0, 0, 0, 0, 0, 0,
                         0, not math.isnan(done))


def test_measure_slo_percentiles_and_unfinished():
    reqs = [_req(0, 0.0, 0.1, 1.1), _req(1, 0.0, 0.3, 2.3)]  # TPOT 0.1 and 0.2 s
    ok, m = measure_slo(_recs(*reqs), {"ttft_p50_s": 0.2, "tpot_p50_s": 0.15})
    assert m == pytest.approx({"ttft_p50_s": 0.2, "tpot_p50_s": 0.15})
    assert ok
    ok, _ = measure_slo(_recs(*reqs), {"tpot_p99_s": 0.15})
    assert not ok
    ok, _ = measure_slo(_recs(*reqs, _req(2, 0.0, 0.2, float("nan"))), {"ttft_p50_s": 1.0})
    assert not ok  # a request still running at the end fails the SLO


def test_candidates_file_errors(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"candidates": [{"name": "a", "sett": {}}]}))
    with pytest.raises(UserError, match=r"candidates.0: needs name"):
        load_candidates(p)
    p.write_text(yaml.safe_dump({"candidates": [{"name": "a"}, {"name": "a"}]}))
    with pytest.raises(UserError, match="unique"):
        load_candidates(p)
    p.write_text(yaml.safe_dump({"other": 1}))
    with pytest.raises(UserError, match="non-empty list"):
        load_candidates(p)


def test_shipped_candidates_use_engine_policies():
    cands = load_candidates(repo_root() / "scenarios" / "plan-candidates.yaml")
    base = validate(read_yaml(repo_root() / "scenarios" / "plan-llama70b.yaml"), "plan")
    kinds = {c.policy["kind"] for c in cands}
    assert kinds == {"none", "fixed", "tree", "adaptive"}
    from sim.studies.plan import scenario_for

    for c in cands:  # every candidate validates against the schema
        scenario_for(base.model_dump(mode="json"), c, 1.0, "plan")


def _small_base(requests=160):
    doc = read_yaml(repo_root() / "scenarios" / "plan-llama70b.yaml")
    doc["run"]["requests"] = requests
    return validate(doc, "plan").model_dump(mode="json")


SLO = {"ttft_p99_s": 2.0, "tpot_p99_s": 0.05}


def test_search_brackets_within_tolerance():
    cand = Candidate("h200-none", {"deployment.gpu": "h200", "deployment.tp": 2})
    found = search_rate(_small_base(), cand, SLO, "plan", rel_tol=0.1)
    assert 0 < found.max_rate_per_s < found.fail_rate_per_s <= found.max_rate_per_s * 1.1
    assert found.measured["tpot_p99_s"] <= 0.05 and found.measured["ttft_p99_s"] <= 2.0


def test_plan_ranks_by_cost_and_marks_cheapest():
    cands = [Candidate("h200-none", {"deployment.gpu": "h200", "deployment.tp": 2}),
             Candidate("h200-g3", {"deployment.gpu": "h200", "deployment.tp": 2},
                       {"kind": "fixed", "gamma": 3})]
    t = plan(_small_base(), cands, SLO, "plan", target_rate=50.0, rel_tol=0.1)
    assert list(t["rank"]) == [1, 2] and list(t["cheapest"]) == [True, False]
    assert (t["usd_per_hour"] == 2 * 3.80).all()  # two H200 at the catalog's 3.80 USD/h
    assert t["usd_per_hour_for_target"].is_monotonic_increasing
    for r in t.itertuples():
        assert r.replicas_for_target == math.ceil(50.0 / r.max_rate_per_s)
        assert r.usd_per_million_tokens == pytest.approx(
            r.usd_per_hour / (r.output_tokens_per_s * 3600) * 1e6)


def test_plan_needs_rate_arrivals_and_an_slo():
    base = _small_base()
    with pytest.raises(UserError, match="no SLO"):
        plan(base, [Candidate("a")], {}, "plan")
    base["workload"]["arrivals"] = "offline"
    with pytest.raises(UserError, match="rate-driven"):
        search_rate(base, Candidate("a"), SLO, "plan")
