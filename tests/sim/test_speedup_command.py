"""``specsim speedup`` in both modes end to end through ``sim.cli.main``."""

from __future__ import annotations

import json

import pytest

from sim.cli import main

HW = ["speedup", "--target", "llama-3-8b", "--draft", "llama-3.2-1b", "--gpu", "h100"]
TREE = ["speedup", "--target", "llama-3-70b", "--weight-bits", "8", "--draft", "llama-3.2-1b",
        "--gpu", "h200", "--context", "1024", "--tree", "k,1,1,1", "--widths", "1,5",
        "--tokens-per-verify", "1.63,2.34"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_analytic_json_shape(capsys):
    code, out, _ = run(capsys, "speedup", "--alpha", "0.8", "--c", "0.1", "--gamma-max", "8",
                       "--json")
    assert code == 0
    data = json.loads(out)
    assert [r["gamma"] for r in data["rows"]] == list(range(1, 9))
    assert set(data["rows"][0]) == {"gamma", "expected_tokens", "speedup", "ops"}
    assert data["best"]["gamma"] == 6 and round(data["best"]["speedup"], 2) == 2.47


def test_analytic_no_gamma_pays(capsys):
    code, out, _ = run(capsys, "speedup", "--alpha", "0.1", "--c", "0.2", "--json")
    assert code == 0
    assert json.loads(out)["best"] == {"gamma": 0, "expected_tokens": 1.0, "speedup": 1.0,
                                       "ops": 1.0}
    code, out, _ = run(capsys, "speedup", "--alpha", "0.1", "--c", "0.2")
    assert "best: no speculation" in out


def test_hardware_chain_json(capsys):
    code, out, _ = run(capsys, *HW, "--batch", "256", "--context", "128", "--alpha", "0.8",
                       "--json")
    assert code == 0
    data = json.loads(out)
    row4 = data["rows"][3]
    assert row4["gamma"] == 4 and round(row4["verify_ratio"], 1) == 3.7
    assert round(row4["speedup"], 2) == 0.73 and "c" in row4
    assert data["best"]["gamma"] == 1 and round(data["best"]["speedup"], 2) == 1.03
    code, out, _ = run(capsys, *HW, "--batch", "512", "--context", "128", "--alpha", "0.8",
                       "--json")
    assert json.loads(out)["best"]["gamma"] == 0 and json.loads(out)["best"]["speedup"] == 1.0


def test_hardware_chain_text(capsys):
    code, out, _ = run(capsys, *HW, "--batch", "256", "--context", "1024", "--alpha", "0.8")
    assert code == 0 and "best: gamma 2, speedup 1.637x" in out


def test_hardware_tree_json(capsys):
    code, out, _ = run(capsys, *TREE, "--batch", "16", "--json")
    assert code == 0
    data = json.loads(out)
    assert [r["width"] for r in data["rows"]] == [1, 5]
    assert [r["nodes"] for r in data["rows"]] == [5, 21]
    assert round(data["rows"][0]["speedup"], 2) == 1.30
    assert data["best"]["width"] == 1
    code, out, _ = run(capsys, *TREE, "--batch", "64", "--json")
    assert json.loads(out)["best"]["width"] == 0 and json.loads(out)["best"]["speedup"] == 1.0


def test_single_tree_without_k(capsys):
    code, out, _ = run(capsys, *HW, "--batch", "1", "--context", "128", "--tree", "2,2,1",
                       "--tokens-per-verify", "2.0", "--json")
    assert code == 0 and json.loads(out)["rows"][0]["nodes"] == 11


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["speedup", "--alpha", "0.8", "--c", "0.1", "--gpu", "h100"], "--gpu needs --target"),
        (["speedup", "--alpha", "0.8", "--c", "0.1", "--tree", "k,1"], "--tree needs --target"),
        ([*HW, "--batch", "1", "--context", "1", "--alpha", "0.8", "--c", "0.2"],
         "--c is for the analytic mode"),
        ([*HW, "--batch", "1", "--context", "1"], "--alpha: required for a chain table"),
        ([*HW, "--context", "1", "--alpha", "0.8"], "--batch: required in hardware mode"),
        ([*HW, "--batch", "1", "--context", "1", "--alpha", "0.8", "--widths", "1,2"],
         "--widths needs --tree"),
        ([*TREE, "--batch", "1", "--alpha", "0.8"], "--alpha is not used with --tree"),
        ([*HW, "--batch", "1", "--context", "1", "--tree", "k,1"],
         "--tokens-per-verify: required with --tree"),
        ([*HW, "--batch", "1", "--context", "1", "--tree", "k,1", "--tokens-per-verify", "1.5"],
         "--widths: required when --tree contains k"),
        ([*HW, "--batch", "1", "--context", "1", "--tree", "2,x", "--tokens-per-verify", "1.5"],
         "--tree: must be comma-separated integers"),
        (["speedup", "--alpha", "0.8"], "analytic mode needs --alpha and --c"),
        (["speedup", "--alpha", "1.5", "--c", "0.1"], "alpha: must be in [0, 1]"),
        ([*HW, "--batch", "512", "--context", "1024", "--alpha", "0.8"], "does not fit"),
    ],
)
def test_mixed_or_missing_flags_are_one_line_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1
