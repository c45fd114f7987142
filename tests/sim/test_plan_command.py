"""``specsim plan``: the top entry, re-run with ``specsim run`` at its rate, meets the SLO and
at 1.2x that rate does not."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from sim.cli import main
from sim.loading import repo_root

SCENARIO = repo_root() / "scenarios" / "plan-llama70b.yaml"
CANDIDATES = repo_root() / "scenarios" / "plan-candidates.yaml"


def _run_meets(capsys, scenario, args: list[str], rate: float, tmp_path) -> bool:
    """Run ``specsim run`` at ``rate`` and check the SLO from its JSON summary."""
    args = [a for a in args if not a.startswith("workload.rate_per_s=")]
    sets = [x for a in args for x in ("--set", a)]
    assert main(["run", str(scenario), *sets, "--set", f"workload.rate_per_s={rate!r}",
                 "--json", "--no-progress", "--no-report",
                 "--out", str(tmp_path / f"r{rate}")]) == 0
    s = json.loads(capsys.readouterr().out)["variants"][0]
    return (s["finished"] == s["requests"] and s["ttft_p99_s"] <= 2.0
            and s["tpot_p99_s"] <= 0.05)


def _plan_and_recheck(capsys, tmp_path, scenario, candidates):
    assert main(["plan", str(scenario), "--candidates", str(candidates), "--slo",
                 "ttft_p99=2s,tpot_p99=50ms", "--json", "--no-progress",
                 "--out", str(tmp_path / "plan")]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    assert rows[0]["cheapest"] and not any(r["cheapest"] for r in rows[1:])
    costs = [r["usd_per_million_tokens"] for r in rows]
    assert costs == sorted(costs)
    top = rows[0]
    words = shlex.split(top["run_args"])  # what a shell makes of the printed arguments
    args = [w for w in words if w != "--set"]
    assert len(words) == 2 * len(args)
    rate = top["max_rate_per_s"]
    assert _run_meets(capsys, scenario, args, rate, tmp_path)
    assert not _run_meets(capsys, scenario, args, 1.2 * rate, tmp_path)
    return rows


def test_plan_small_then_rerun(tmp_path, capsys):
    """Reduced: 100 requests, two candidates."""
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["run"]["requests"] = 100
    scenario = tmp_path / "plan.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    cands = yaml.safe_load(CANDIDATES.read_text())
    keep = {"h200-tp2-none", "h200-tp2-chain4"}
    cands["candidates"] = [c for c in cands["candidates"] if c["name"] in keep]
    cpath = tmp_path / "c.yaml"
    cpath.write_text(yaml.safe_dump(cands))
    rows = _plan_and_recheck(capsys, tmp_path, scenario, cpath)
    assert {r["candidate"] for r in rows} == keep


@pytest.mark.slow
def test_plan_shipped_example_then_rerun(tmp_path, capsys):
    rows = _plan_and_recheck(capsys, tmp_path, SCENARIO, CANDIDATES)
    assert len(rows) == 8


def test_plan_text_output_and_errors(tmp_path, capsys):
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["run"]["requests"] = 40
    doc["variants"] = [{"name": "g2", "policy": {"kind": "fixed", "gamma": 2}}]
    scenario = tmp_path / "p.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    assert main(["plan", str(scenario), "--rel-tol", "0.2", "--target-rate", "10",
                 "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "* cheapest: g2" in text and "within 20%" in text
    assert (tmp_path / "o" / "plan.csv").exists()
    assert main(["plan", str(scenario), "--slo", "ttft=1s"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--slo" in err[0]
