"""Validation category E: speculative runs, their prediction, the fit of the speculative
overheads, and what `specsim validate` and `specsim calibrate` say of them."""

from __future__ import annotations

import csv
import json
import zlib

import numpy as np
import pytest

from hardware.catalog import load_catalog
from hardware.spec_cost import SpecRound
from hardware.timing.spec_fit import apply_spec_fields, fit_spec, spec_default_fields
from hardware.timing.spec_rows import SPEC_COLUMNS, predict_spec, read_spec_rows, spec_costs
from hardware.timing.validation import SPEC_VALIDATION_CSV, validate_spec
from sim.cli import main
from specdec.errors import UserError

CAT = load_catalog()
ROW = {"category": "E", "framework": "vllm", "model": "llama-3.1-8b", "gpu": "h100", "tp": "1",
       "method": "eagle3", "draft_vocab": "32000", "shape": "chain:3",
       "acceptance_length": "2.8", "load": "concurrency", "batch": "1", "context": "128",
       "output_tokens": "256", "metric": "tpot_s", "measured_base": "0.007",
       "measured_spec": "0.004", "split": "fit", "source": "test"}


def _write(path, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, SPEC_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({**dict.fromkeys(SPEC_COLUMNS, ""), **r})
    return path


@pytest.mark.parametrize(("field", "value", "match"), [
    ("shape", "chain:0", "shape: 'chain:K'"),
    ("shape", "tree:steps=2,topk=2,tokens=9", r"2 <= N <= 1 \+ S x T"),
    ("acceptance_length", "5", "yields 1..4 tokens"),
    ("method", "lookahead", "method: must be one of"),
    ("load", "qps", "load: must be one of"),
    ("metric", "speedup", "a speedup row gives 1"),
    ("measured_spec", "-1", "measured_spec: must be a finite number > 0"),
    ("draft_vocab", "32000x", "draft_vocab: must be an integer"),
])
def test_a_bad_speculative_row_is_one_line_naming_the_file_line_and_field(tmp_path, field,
                                                                           value, match):
    path = _write(tmp_path / "e.csv", [ROW, {**ROW, field: value}])
    with pytest.raises(UserError, match=match) as err:
        read_spec_rows(path)
    assert f"{path}: line 3: " in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_column_is_refused(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text(",".join([*SPEC_COLUMNS, "acceptance_lenght"]) + "\n")
    with pytest.raises(UserError, match="unknown column 'acceptance_lenght'"):
        read_spec_rows(path)


def test_the_shipped_rows_split_by_the_crc_of_their_conditions():
    keys = ("category", "model", "gpu", "tp", "framework", "method", "draft", "shape",
            "acceptance_length", "load", "batch", "context", "output_tokens", "metric",
            "source")
    with SPEC_VALIDATION_CSV.open(newline="") as f:
        raw = list(csv.DictReader(f))
    for r in raw:
        crc = zlib.crc32("|".join(r[k] for k in keys).encode())
        assert r["split"] == ("fit" if crc % 2 == 0 else "test"), r
    rows = read_spec_rows(SPEC_VALIDATION_CSV)
    assert len(rows) == len(raw) and all(r.source for r in rows)


def test_a_batch_one_round_is_its_passes_and_the_engines_overheads_over_its_yield(tmp_path):
    row = read_spec_rows(_write(tmp_path / "e.csv", [ROW]))[0]
    target, draft, _ = spec_costs(row, CAT)
    spec = SpecRound(1e-3, 5e-5, 2e-4, 0.0)
    p = predict_spec(row, CAT, costs=(target, draft, spec))
    assert p.round_s == pytest.approx(1e-3 + 5e-5 + 3 * 2e-4)
    assert p.spec_tpot_s == pytest.approx((p.draft_s + p.verify_s + p.round_s) / 2.8)
    free = predict_spec(row, CAT, costs=(target, draft, SpecRound()))
    assert p.spec_tpot_s - free.spec_tpot_s == pytest.approx(p.round_s / 2.8)
    assert p.base_tpot_s == free.base_tpot_s  # the plain run pays nothing of it


def test_the_fit_recovers_known_overheads_from_runs_they_priced(tmp_path):
    """Rows whose measurements are SpecSim's own predictions under known overheads: fitted
    from nothing, the overheads come back (the fit is a fit, not a lookup)."""
    truth = {"frameworks.vllm.speculation.step_s": 9e-4,
             "frameworks.vllm.speculation.draft_step_s.eagle3": 6e-4,
             "frameworks.vllm.speculation.seq_s": 3e-5}
    known = apply_spec_fields(CAT, list(truth), list(truth.values()))
    rows = []
    for k in (2, 3, 5, 7):
        for b in (1, 8):
            for al in (2.0, 2.6):
                r = {**ROW, "shape": f"chain:{k}", "acceptance_length": str(al),
                     "batch": str(b), "load": "batch", "split": "fit"}
                row = read_spec_rows(_write(tmp_path / "one.csv", [r]))[0]
                p = predict_spec(row, known)
                rows.append({**r, "measured_base": repr(float(p.base_tpot_s)),
                             "measured_spec": repr(float(p.spec_tpot_s))})
    rows = read_spec_rows(_write(tmp_path / "e.csv", rows))
    fields = spec_default_fields(rows, CAT)
    assert fields == ["frameworks.vllm.speculation.step_s",
                      "frameworks.vllm.speculation.draft_step_s.eagle3",
                      "frameworks.vllm.speculation.seq_s"]
    fit = fit_spec(rows, CAT, fields)
    for f, v in zip(fit.fields, fit.values, strict=True):
        assert v == pytest.approx(truth[f], rel=1e-3), f
    assert fit.speedup_fit < 1e-6


def test_category_e_meets_its_bounds_held_out_on_the_shipped_rows():
    """docs/timing.md, Speculation: the speedup held out, its bias, per method and engine."""
    e = validate_spec(CAT)
    s = e.summary
    assert s["all"]["rows"] == 142 and s["all"]["test_rows"] == 78
    # pinned at what the rows measure (the issue asks <= 8%, every group <= 12%, signed
    # within 3%); with the 74 rows before the vLLM load sweeps: 1.3%, groups <= 1.4%
    assert s["all"]["speedup_test"] <= 0.03  # 2.1%
    assert abs(s["all"]["speedup_signed_test"]) <= 0.01  # -0.2%: no systematic optimism
    for name, g in s.items():
        if g["test_rows"]:
            assert g["speedup_test"] <= 0.04, name  # vLLM 2.8%
    # the speculative TPOT: 9.0% held out (the issue asks <= 8%: not met). Where the plain
    # runs are off (SGLang's H200 rows, 12.5%; TensorRT-LLM's B200 MTP rows, 81%) it
    # carries their error; on the Qwen3-32B load sweeps (plain 2.7%) the EAGLE-3 head is
    # priced too slow (docs/timing.md)
    assert s["all"]["tpot_test"] <= 0.10
    assert s["framework:sglang"]["tpot_test"] == pytest.approx(
        s["framework:sglang"]["base_test"], abs=0.02)


def test_without_the_overheads_speculation_is_priced_as_optimistically_as_it_was():
    """The issue's finding, kept as a check of what the overheads fix: with none, the
    vLLM EAGLE-3 rows' speedups are 30-61% optimistic (30-59% while a draft's passes paid
    the engine's per-sequence cost too; the issue measured +29 to +56%), EAGLE-1's
    10-16% (10-14% then; the issue: +10 to +13%)."""
    bare = apply_spec_fields(CAT, ["frameworks.vllm.speculation.step_s",
                                   "frameworks.vllm.speculation.draft_step_s.eagle",
                                   "frameworks.vllm.speculation.draft_step_s.eagle3"],
                             [0.0, 0.0, 0.0])
    e = validate_spec(bare)
    vllm = [(r, err) for r, err in zip(e.rows, e.speedup_error, strict=True)
            if r.framework == "vllm" and r.gpu == "h100"]
    eagle3 = [err for r, err in vllm if r.method == "eagle3"]
    eagle1 = [err for r, err in vllm if r.method == "eagle"]
    assert 0.29 <= min(eagle3) and max(eagle3) <= 0.62
    assert 0.09 <= min(eagle1) and max(eagle1) <= 0.16


def test_validate_prints_category_e_and_its_rows(capsys):
    assert main(["validate", "--rows"]) == 0
    out = capsys.readouterr().out
    assert "E speculative decoding" in out and "method:eagle3" in out
    assert "framework:sglang" in out and "E rows:" in out
    assert main(["validate", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["spec_summary"]["all"]["rows"] == 142 and len(doc["spec_rows"]) == 142


def test_calibrate_fits_a_users_speculative_runs_and_writes_a_catalog(tmp_path, capsys):
    out = tmp_path / "cat.yaml"
    assert main(["calibrate", str(SPEC_VALIDATION_CSV), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fitted = {f["field"]: f["after"] for f in doc["fields"]}
    shipped = CAT.framework("vllm").speculation
    assert fitted["frameworks.vllm.speculation.step_s"] == pytest.approx(shipped.step_s,
                                                                          rel=1e-3)
    user = load_catalog(str(out))
    assert user.framework("sglang").speculation.tree_s == pytest.approx(
        CAT.framework("sglang").speculation.tree_s, rel=1e-3)
    assert doc["speedup_test_error"] < 0.03  # 2.1%, the shipped values' own
    assert np.isfinite(doc["spec_tpot_test_error"])


def test_a_field_no_fit_row_depends_on_is_left_as_it_was(tmp_path):
    rows = read_spec_rows(_write(tmp_path / "e.csv", [
        {**ROW, "shape": f"chain:{k}"} for k in (2, 3, 4, 5, 6, 7)]))  # chains only
    fit = fit_spec(rows, CAT, ["frameworks.vllm.speculation.step_s",
                               "frameworks.vllm.speculation.tree_s"])
    assert fit.unmoved == ("frameworks.vllm.speculation.tree_s",)
    assert fit.values[1] == CAT.framework("vllm").speculation.tree_s == 0.0
