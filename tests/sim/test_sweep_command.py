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


def _sweep_error(args, tmp_path, capsys) -> str:
    """The one stderr line of a refused ``specsim sweep``, without the command's prefix."""
    assert main(["sweep", *args, "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not (tmp_path / "o").exists()
    return err[0].removeprefix("specsim sweep: error: ")


@pytest.mark.parametrize(("args", "expected"), [
    # A bad axis value, found validating or building, names the --vary value.
    (["--vary", "workload.rate_per_s=2,-1"],
     "(--vary workload.rate_per_s=-1): workload.rate_per_s: must be > 0, got -1"),
    (["--vary", "deployment.tp=1,3"],
     "(--vary deployment.tp=3): deployment: llama-3-8b: tp 3 does not divide "
     "num_attention_heads 32"),
    (["--vary", "workload.rate_per_s=2", "--vary", 'deployment.gpu=h100,"h900"'],
     "(--vary deployment.gpu=\"h900\"): deployment: unknown gpu 'h900'"),
    # A bad --set of the base names the --set, also when only building finds it.
    (["--vary", "workload.rate_per_s=2,4", "--set", "scheduler.max_num_seqs=0"],
     "(--set scheduler.max_num_seqs=0): scheduler.max_num_seqs: must be >= 1, got 0"),
    (["--vary", "workload.rate_per_s=2,4", "--set", "deployment.gpu=h900"],
     "(--set deployment.gpu=h900): deployment: unknown gpu 'h900'"),
])
def test_a_bad_point_or_override_is_named_after_the_file(args, expected, tmp_path, capsys):
    path = _scenario(tmp_path)
    line = _sweep_error([str(path), *args], tmp_path, capsys)
    assert line.startswith(f"{path} {expected}"), line


def test_a_bad_value_of_the_files_sweep_block_names_the_block(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "sweep": {"vary": {"deployment.tp": [1, 3]}}}))
    line = _sweep_error([str(path)], tmp_path, capsys)
    assert line.startswith(f"{path} (sweep.vary deployment.tp=3): deployment: "), line


def test_a_file_at_fault_is_named_alone(tmp_path, capsys):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "deployment": {"gpu": "h900"}}))
    line = _sweep_error([str(path), "--vary", "workload.rate_per_s=2,4", "--set", "run.seed=3"],
                        tmp_path, capsys)
    assert line.startswith(f"{path}: deployment: unknown gpu 'h900'"), line


def test_a_repeated_vary_value_is_refused(tmp_path, capsys):
    """``--vary x=1,1`` used to run the same point twice."""
    line = _sweep_error([str(_scenario(tmp_path)), "--vary", "workload.rate_per_s=2,2"],
                        tmp_path, capsys)
    assert line == "--vary workload.rate_per_s: value 2 is repeated (each point would run twice)"
    doc = {**SCENARIO, "sweep": {"vary": {"workload.rate_per_s": [2, 4, 2]}}}
    p = tmp_path / "block.yaml"
    p.write_text(yaml.safe_dump(doc))
    line = _sweep_error([str(p)], tmp_path, capsys)
    assert line.endswith("sweep.vary.workload.rate_per_s: value 2 is repeated (each point "
                         "would run twice)"), line


def test_sweep_out_that_is_a_file_is_one_line(tmp_path, capsys):
    out = tmp_path / "f"
    out.write_text("x")
    assert main(["sweep", str(_scenario(tmp_path)), "--vary", "workload.rate_per_s=2",
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"--out {out}: exists and is not a folder"), err


def test_a_point_that_changes_a_variant_names_it_after_the_value_in_effect(tmp_path, capsys):
    """The default variants' ``fixed-g4`` at γ = 2 and 5 is ``fixed-g2`` and ``fixed-g5``:
    the name never contradicts the row; an unvaried variant keeps its name."""
    rc = main(["sweep", str(_scenario(tmp_path)), "--vary", "variants.1.policy.gamma=2,5",
               "--out", str(tmp_path / "o"), "--json", "--no-progress"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["variants.1.policy.gamma"], r["variant"]) for r in rows] == [
        (2, "none"), (2, "fixed-g2"), (5, "none"), (5, "fixed-g5")]


def test_variant_labels_append_the_value_where_the_name_does_not_hold_it_once():
    from sim.studies.sweep import variant_labels

    two = {"variants": [{"name": "g2", "policy": {"kind": "fixed", "gamma": 2}},
                        {"name": "g4", "policy": {"kind": "fixed", "gamma": 4}}]}
    assert variant_labels(two, {"variants.1.policy.gamma": 3})["g4"] == "g3"
    # "g2" is the other variant's name: appended, never two variants under one name
    assert variant_labels(two, {"variants.1.policy.gamma": 2})["g4"] == "g4-gamma=2"
    tree = {"variants": [{"name": "eagle", "policy": {"kind": "tree", "expansion": [2, 1]}}]}
    assert variant_labels(tree, {"variants.0.policy.expansion": [3, 1, 1]}) == {
        "eagle": "eagle-expansion=[3,1,1]"}
    # a point that names the variant itself, or changes no variant, renames nothing
    assert variant_labels(two, {"variants.1.policy.gamma": 3, "variants.1.name": "x"}) == {
        "g2": "g2", "g4": "g4"}
    assert variant_labels(two, {"workload.rate_per_s": 3}) == {"g2": "g2", "g4": "g4"}


def test_a_second_vary_on_one_key_is_refused(tmp_path, capsys):
    rc = main(["sweep", str(_scenario(tmp_path)), "--vary", "workload.rate_per_s=2",
               "--vary", "workload.rate_per_s=4,8", "--out", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--vary workload.rate_per_s: given twice" in err[0]
    assert not (tmp_path / "o").exists()
