"""``specsim sweep`` end to end: files, JSON, progress on stderr, scheduler address."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from sim.cli import main

SCENARIO = {
    "name": "tiny",
    "workload": {"arrivals": "poisson", "rate_per_s": 4.0,
                 "prompt": {"kind": "fixed", "tokens": 64},
                 "output": {"kind": "fixed", "tokens": 16}},
    "acceptance": {"kind": "iid", "alpha": 0.7},
    "run": {"requests": 15, "seed": 1},
}


def _scenario(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(SCENARIO))
    return p


def test_sweep_json_and_files(tmp_path, capsys):
    rc = main(["sweep", str(_scenario(tmp_path)), "--vary", "workload.rate_per_s=2,4",
               "--out", str(tmp_path / "out"), "--json", "--no-progress"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["points"] == 2 and len(out["rows"]) == 4
    csv = pd.read_csv(tmp_path / "out" / "sweep.csv")
    assert list(csv["workload.rate_per_s"]) == [2, 2, 4, 4]
    assert (tmp_path / "out" / "sweep.parquet").exists()
    assert out["rows"][0]["acceptance_rate"] is None  # 'none' drafts nothing: null, not NaN


def test_sweep_text_table_and_progress(tmp_path, capsys):
    rc = main(["sweep", str(_scenario(tmp_path)), "--vary", "variants.1.policy.gamma=1,2",
               "--out", str(tmp_path / "o")])
    assert rc == 0
    cap = capsys.readouterr()
    assert "variants.1.policy.gamma" in cap.out and "table:" in cap.out
    assert "sweep" in cap.err  # the tqdm bar


def test_sweep_errors_are_one_line(tmp_path, capsys):
    assert main(["sweep", str(_scenario(tmp_path)), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing to sweep" in err[0]
    assert main(["sweep", str(_scenario(tmp_path)), "--vary", "x=1", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_sweep_on_scheduler_address(tmp_path, capsys):
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster:
        rc = main(["sweep", str(_scenario(tmp_path)), "--vary", "workload.rate_per_s=2,4",
                   "--scheduler", cluster.scheduler_address, "--json", "--no-progress",
                   "--out", str(tmp_path / "d")])
    assert rc == 0
    assert len(json.loads(capsys.readouterr().out)["rows"]) == 4


def test_seed_axis_gives_confidence_table(tmp_path, capsys):
    rc = main(["sweep", str(_scenario(tmp_path)), "--vary", "run.seed=1,2,3",
               "--vary", "workload.rate_per_s=2,4", "--out", str(tmp_path / "s"), "--json",
               "--no-progress"])
    assert rc == 0
    capsys.readouterr()
    full = pd.read_csv(tmp_path / "s" / "sweep.csv")
    ci = pd.read_csv(tmp_path / "s" / "sweep_ci.csv")
    assert len(ci) == 2 * 2 and (ci["seeds"] == 3).all()
    # A seed given as an axis is used as is.
    assert set(full["seed"]) == {1, 2, 3}
    g = full[(full["workload.rate_per_s"] == 4) & (full["variant"] == "fixed-g4")]
    row = ci[(ci["workload.rate_per_s"] == 4) & (ci["variant"] == "fixed-g4")].iloc[0]
    assert row["tpot_mean_s_mean"] == pytest.approx(g["tpot_mean_s"].mean(), rel=1e-12)
    assert row["tpot_mean_s_ci"] > 0
