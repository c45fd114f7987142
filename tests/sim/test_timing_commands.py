"""Timing in scenarios and on the command line: deployment.timing / framework /
compute_dtype / offload_fraction auto, `specsim run` naming its backend, and the
`calibrate` and `validate` commands (one-line errors, exit 2)."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest
import yaml

from hardware.timing.rows import REQUIRED
from sim.cli import main
from sim.loading import default_scenario_path, display_path, load_scenario


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _run_error(capsys, tmp_path, *sets) -> str:
    args = [a for s in sets for a in ("--set", s)]
    code, _, err = run(capsys, "run", *args, "--out", str(tmp_path / "o"), "--no-progress")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    return lines[0].removeprefix("specsim run: error: ")


@pytest.mark.parametrize(("sets", "expected"), [
    (["deployment.framework=vllmm"], "(--set deployment.framework=vllmm): deployment: unknown "
                                     "framework 'vllmm' (known: flexgen, gpt-fast, hf-accelerate,"),
    (["deployment.timing=fast"], "(--set deployment.timing=fast): deployment.timing: must be "
                                 "one of 'auto', 'measured', 'roofline' or 'paper', got "
                                 "'fast'"),
    (["deployment.compute_dtype=fp8"], "(--set deployment.compute_dtype=fp8): deployment."
                                       "compute_dtype: fp8 (W8A8) needs weight_bits 8, got 16"),
    (["deployment.gpu=t4", "models.target=llama-2-7b", "models.draft=llama-68m",
      "deployment.timing=measured"],
     "(--set deployment.timing=measured): deployment: timing: measured: gpu t4 has no "
     "measured kernel tables"),
])
def test_timing_fields_are_checked_in_one_line(capsys, tmp_path, sets, expected):
    line = _run_error(capsys, tmp_path, *sets)
    assert line.startswith(f"{display_path(default_scenario_path())} {expected}"), line


def test_the_scenario_fields_reach_the_cost_models():
    from sim.build import cost_models

    sc = load_scenario(None, ["deployment.timing=roofline", "deployment.framework=sglang",
                              "deployment.weight_bits=8", "deployment.compute_dtype=fp8",
                              "deployment.draft_weight_bits=16"])
    target, draft, _ = cost_models(sc, True)
    assert (target.backend, target.dep.framework, target.dep.dtype) == ("roofline", "sglang",
                                                                        "fp8")
    dc = draft.setup.cost
    assert (dc.backend, dc.dep.dtype, dc.dep.step_overhead) == ("roofline", "bf16", False)
    sc = load_scenario(None, ["deployment.offload_fraction=auto", "models.target=opt-30b",
                              "models.draft=opt-125m", "deployment.gpu=a10",
                              "deployment.timing=paper"])
    target, _, blocks = cost_models(sc, True)
    assert 0 < target.offload_fraction < 1 and blocks > 0
    assert target.dep.offload_pin_memory  # pinned unless the scenario says otherwise
    sc = load_scenario(None, ["deployment.offload_fraction=0.5",
                              "deployment.offload_pin_memory=false"])
    assert not cost_models(sc, False)[0].dep.offload_pin_memory


def test_run_names_the_backend_that_priced_it(capsys, tmp_path):
    code, out, _ = run(capsys, "run", "--set", "run.requests=20", "--no-report",
                       "--no-progress", "--json", "--out", str(tmp_path / "r"))
    assert code == 0
    doc = json.loads(out)
    assert doc["timing"] in ("measured", "roofline") and doc["timing_note"]
    code, out, _ = run(capsys, "run", "--set", "run.requests=20", "--set",
                       "deployment.timing=paper", "--no-report", "--no-progress", "--out",
                       str(tmp_path / "p"))
    assert "timing: paper GPU: h100 at eta_compute 0.7, eta_memory 0.8, 0.5 ms per pass" in out


def _csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*REQUIRED, "split"])
        for batch, seconds, split in rows:
            w.writerow(["llama-3.1-8b", "h100", 1, 1, 16, 16, "", batch, 1024, 1, 0,
                        seconds, "a test", split])
    return path


def test_calibrate_writes_a_catalog_of_the_fitted_fields(capsys, tmp_path):
    data = _csv(tmp_path / "m.csv", [(1, 0.0070, "fit"), (8, 0.0075, "fit"),
                                      (32, 0.0090, "test")])
    out = tmp_path / "fitted.yaml"
    code, text, _ = run(capsys, "calibrate", str(data), "--timing", "roofline", "--fit",
                        "frameworks.vllm.step_s", "--out", str(out), "--json")
    assert code == 0
    doc = json.loads(text)
    assert (doc["rows"], doc["fit_rows"], doc["catalog"]) == (3, 2, str(out))
    assert [f["field"] for f in doc["fields"]] == ["frameworks.vllm.step_s"]
    cat = yaml.safe_load(out.read_text())
    assert list(cat) == ["frameworks"] and set(cat["frameworks"]["vllm"]) == {"step_s",
                                                                              "source"}
    # the source names the command as run, its --fit fields included
    assert f"`specsim calibrate {data} --fit frameworks.vllm.step_s`" \
        in cat["frameworks"]["vllm"]["source"]
    assert doc["test_error"] is not None
    code, text, _ = run(capsys, "hw", "step", "--model", "llama-3.1-8b", "--gpu", "h100",
                        "--batch", "1", "--context", "1024", "--timing", "roofline",
                        "--catalog", str(out), "--json")
    assert json.loads(text)["overhead_s"] > doc["fields"][0]["after"]


@pytest.mark.parametrize(("argv", "message"), [
    ([], "give a measurements CSV or --tables GPU (one of the two)"),
    (["--tables", "t4"], "--tables: gpu t4 has no measured kernel tables"),
    (["nope.csv"], "nope.csv: cannot read measurements file"),
])
def test_calibrate_errors_are_one_line(capsys, argv, message):
    code, _, err = run(capsys, "calibrate", *argv)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_calibrate_refuses_an_unknown_field(capsys, tmp_path):
    data = _csv(tmp_path / "m.csv", [(1, 0.007, "fit")])
    code, _, err = run(capsys, "calibrate", str(data), "--fit", "frameworks.vllm.speed")
    assert code == 2 and "--fit: 'frameworks.vllm.speed' is not a fittable field" in err


def test_validate_prints_the_counts_and_medians(capsys):
    pytest.importorskip("aiconfigurator_core", reason="the default timing reads its tables")
    code, out, _ = run(capsys, "validate", "--json", "--by", "model,gpu,framework")
    assert code == 0
    doc = json.loads(out)
    assert {c: s["rows"] for c, s in doc["summary"].items()} == {"A": 47, "B": 810, "C": 79,
                                                                 "D": 16, "F": 40, "G": 217}
    assert len(doc["rows"]) == 1209 and all(r["source"] for r in doc["rows"])
    # each row says the precision and MoE kernel it was priced at (F's from its run script)
    f = [r for r in doc["rows"] if r["category"] == "F"]
    assert all(r["kv_bits"] == 8 and r["moe_kernel"] in ("trtllm_gen", "deepgemm") for r in f)
    assert {r["moe_kernel"] for r in doc["rows"] if r["category"] in "ABCD"} == {None}
    # --by: one entry per (model, gpu, framework), every row in exactly one, its numbers
    # those of its rows
    groups = {(g["model"], g["gpu"], g["framework"]): g for g in doc["groups"]}
    assert sum(g["rows"] for g in groups.values()) == 1209
    g = groups[("qwen3-32b", "h100", "vllm")]
    mine = [r for r in doc["rows"] if (r["model"], r["gpu"], r["framework"]) ==
            ("qwen3-32b", "h100", "vllm")]
    assert (g["rows"], g["test_rows"]) == (len(mine), sum(r["split"] == "test" for r in mine))
    assert g["median_signed"] == pytest.approx(float(np.median([r["error"] for r in mine])))
    assert g["worst"] == pytest.approx(max(abs(r["error"]) for r in mine))
    assert sum(r["framework_version"] == "1.0.0rc3" for r in doc["rows"]) == 361
    # category H: runs of its own, TPOT and TTFT apart
    assert (doc["pd_summary"]["all"]["rows"], len(doc["pd_rows"])) == (63, 63)
    h = doc["pd_rows"][0]
    assert h["tpot_error"] == pytest.approx(h["predicted_tpot_s"] / h["measured_tpot_s"] - 1)
    assert h["predicted_ttft_s"] == pytest.approx(h["prefill_s"] + h["transfer_s"])
    code, out, _ = run(capsys, "validate", "--by", "framework,framework_version")
    assert "A batch-1 decode" in out and "1209 rows" in out
    assert "rows (fit / held out)" in out and "810 (407 / 403)" in out
    assert "by framework, framework_version: rows (held out), median signed error" in out
    assert "H disaggregated serving (prefill and decode pools), nothing fitted" in out
    assert re.search(r"^all +63 \( 37\) +14\.0% \(9\.7%\)", out, flags=re.M)
    lines = out.splitlines()
    assert any(re.match(r"trtllm +1\.0\.0rc3 +361 \(179\)", line) for line in lines)
    assert any(re.match(r"vllm +- +170 \( 88\)", line) for line in lines)  # not stated
    code, _, err = run(capsys, "validate", "--by", "model,size")
    assert code == 2 and "--by: 'size' is not a row field to group on" in err


def test_a_framework_release_prices_the_pass_and_is_listed(capsys):
    """`--framework <id>@<release>` prices the pass with the release's own overheads (its
    note says which); `hw list` shows each listed release; an unlisted one is refused in
    one line; `validate --default-overheads` says that it prices every row at the
    frameworks' own overheads."""
    pytest.importorskip("aiconfigurator_core", reason="the default timing reads its tables")
    argv = ("hw", "step", "--model", "qwen3-32b", "--gpu", "h100", "--batch", "8",
            "--context", "1024", "--json")
    code, out, _ = run(capsys, *argv, "--framework", "vllm@0.12.0")
    assert code == 0
    release = json.loads(out)
    assert "framework vLLM 0.12.0 overheads" in release["note"]
    code, out, _ = run(capsys, *argv, "--framework", "vllm")
    default = json.loads(out)
    assert "framework vLLM 0.24.0 overheads" in default["note"]
    assert release["parts"]["gemm_s"] == default["parts"]["gemm_s"]  # same kernel tables
    assert release["overhead_s"] != default["overhead_s"]
    code, out, _ = run(capsys, "hw", "list")
    assert re.search(r"^ +vllm@0\.12\.0: its own 0\.000 ms/pass, .* us/seq \(the rest as "
                     r"above\)$", out, flags=re.M)
    code, _, err = run(capsys, *argv, "--framework", "vllm@0.1")
    assert code == 2 and "vllm lists no overheads for version '0.1' (listed: 0.12.0)" in err
    code, out, _ = run(capsys, "validate", "--default-overheads")
    assert code == 0
    assert out.startswith("timing auto; every framework at its default overheads;")
    assert "release the catalog lists" not in out
    code, out, _ = run(capsys, "validate")
    assert "\n574 rows are of an engine release the catalog lists, priced with its own " \
           "overheads; --default-overheads prices them" in out
