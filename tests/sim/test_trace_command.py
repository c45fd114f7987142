"""``specsim trace`` end to end through ``sim.cli.main``."""

from __future__ import annotations

import json

import numpy as np

from sim.cli import main
from workloads.trace_file import load_trace


def test_trace_json_end_to_end(tmp_path, capsys):
    out = tmp_path / "t.npz"
    code = main(["trace", "--draft", "perturbed", "--sigma", "0.3", "--temperature", "0.5",
                 "--tokens", "120", "--prompts", "2", "--k-max", "3", "--seed", "5",
                 "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    trace = load_trace(out)
    assert summary["positions"] == trace.positions == 120
    assert summary["sequences"] == 2 and summary["out"] == str(out)
    assert summary["alpha_hat"] == trace.accept_prob[:, 0].mean()
    assert summary["coverage_top1"] == np.mean(trace.ranks == 0)
    assert summary["mean_run_length"] == trace.run0.mean()
    assert trace.meta["draft"]["sigma"] == 0.3 and trace.meta["k_max"] == 3


def test_trace_text_summary_without_out(capsys):
    assert main(["trace", "--draft", "ngram", "--tokens", "100", "--prompts", "2"]) == 0
    text = capsys.readouterr().out
    assert "draft ngram n=3" in text and "positions            100 in 2 sequences" in text
    assert "coverage             top-1" in text and "not saved" in text


def test_trace_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert main(["trace", "--draft", "truncated", "--layers", "5", "--tokens", "50"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specsim trace: error: --layers:") and "\n" not in err
    assert main(["trace", "--tokens", "3", "--prompts", "4"]) == 2
    assert "tokens" in capsys.readouterr().err
    assert main(["trace", "--tokens", "50", "--out", str(tmp_path / "x.txt")]) == 2
    assert "--out" in capsys.readouterr().err


def test_trace_out_where_nothing_can_be_written_is_one_line(capsys):
    code = main(["trace", "--tokens", "20", "--prompts", "2", "--out", "/proc/x.npz"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "/proc/x.npz: cannot write the trace" in err[0]
