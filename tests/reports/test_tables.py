"""reports.tables / reports.run_folder: frames, summaries against the engine's, goodput."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from reports.run_folder import load_run, summary_table
from reports.tables import meets_slo, seeds_table, trim_warmup, write_table
from specdec.errors import UserError


def test_summary_matches_engine_summary(small_run):
    table = summary_table(load_run(small_run))
    engine = json.loads((small_run / "summary.json").read_text())["variants"]
    assert list(table["name"]) == [s["name"] for s in engine]
    for (_, row), s in zip(table.iterrows(), engine, strict=True):
        for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p90_s",
                    "throughput_tokens_per_s", "requests_per_s", "tokens_per_verify"):
            assert row[key] == pytest.approx(s[key], rel=1e-12), key
    spec = table.set_index("name").loc["fixed-g4"]
    assert spec["speedup_tpot"] == pytest.approx(engine[1]["speedup_vs_none"], rel=1e-12)


def test_time_split_and_bounds_sum_to_one(small_run):
    table = summary_table(load_run(small_run)).set_index("name")
    for name in ("none", "fixed-g4"):
        r = table.loc[name]
        split = r["draft_time_share"] + r["prefill_time_share"] + r["decode_time_share"]
        assert split == pytest.approx(1.0, abs=1e-9)
        bounds = sum(r[f"{b}_bound_share"] for b in ("compute", "memory", "comm", "host"))
        assert bounds == pytest.approx(1.0, abs=1e-9)
    assert table.loc["none", "draft_time_share"] == 0.0
    assert table.loc["fixed-g4", "draft_time_share"] > 0.0
    assert 1.0 <= table.loc["none", "mean_batch_size"] <= 256


def test_goodput_counts_requests_within_thresholds(small_run):
    run = load_run(small_run)
    v = run.variants[0]
    ttft_cut = float(v.requests["ttft_s"].median())
    ok = meets_slo(v.requests, {"ttft_s": ttft_cut, "tpot_s": None})
    assert ok.sum() == (v.requests["ttft_s"] <= ttft_cut).sum()
    loose = summary_table(run, slo={"ttft_p99_s": 1e9})
    assert (loose["goodput_requests_per_s"] == loose["requests_per_s"]).all()
    tight = summary_table(run, slo={"tpot_p99_s": 1e-9})
    assert (tight["goodput_requests_per_s"] == 0).all()
    with pytest.raises(UserError, match="unknown metric"):
        meets_slo(v.requests, {"itl_s": 1.0})


def test_warmup_trimming(small_run):
    run = load_run(small_run)
    v = run.variants[0]
    cut = float(v.requests["arrival_at"].quantile(0.5))
    req, it = trim_warmup(v.requests, v.iterations, cut)
    assert (req["arrival_at"] >= cut).all() and len(req) < len(v.requests)
    assert (it["start_at"] >= cut).all()
    trimmed = summary_table(run, warmup_s=cut)
    assert (trimmed["requests"] == [len(x.requests[x.requests["arrival_at"] >= cut])
                                    for x in run.variants]).all()
    with pytest.raises(UserError, match="warmup_s"):
        trim_warmup(v.requests, v.iterations, -1.0)


def test_warmup_rates_run_from_the_first_request_kept_to_the_runs_end(small_run):
    """The run's end is a time, not a length: with a request unfinished the rates span the
    first request kept to the end of the run (it was once shortened by the warm-up too,
    which counted the warm-up twice)."""
    import dataclasses

    run = load_run(small_run)
    v = run.variants[0]
    cut = float(v.requests["arrival_at"].quantile(0.5))
    requests = v.requests.copy()
    last = requests.index[-1]
    requests.loc[last, "finished"] = False  # one request still running at the end
    end = float(requests["finished_at"].max()) + 1.0
    variant = dataclasses.replace(v, requests=requests, duration_s=end)
    row = summary_table(dataclasses.replace(run, variants=[variant]), warmup_s=cut).iloc[0]
    kept = requests[requests["arrival_at"] >= cut]
    span = end - float(kept["arrival_at"].min())
    assert row["throughput_tokens_per_s"] == pytest.approx(kept["emitted_tokens"].sum() / span,
                                                           rel=1e-12)


def test_frame_rates_end_at_the_last_completion_as_the_engine_summary():
    """As ``sim.summary.span_s``: a run cut at a horizon long after its last completion
    delivers over first arrival..last completion; one with a request unfinished, to the end."""
    from reports.tables import iteration_sums, summarize_frames

    req = pd.DataFrame({"arrival_at": [1.0, 2.0], "first_token_at": [1.2, 2.5],
                        "finished_at": [3.0, 6.0], "finished": [True, True],
                        "output_tokens": [4, 6], "emitted_tokens": [4, 6],
                        "ttft_s": [0.2, 0.5], "tpot_s": [0.6, 0.7], "e2e_s": [2.0, 4.0],
                        "drafted_tokens": [0, 0], "accepted_tokens": [0, 0],
                        "draft_steps": [0, 0], "verify_steps": [4, 6]})
    it = pd.DataFrame({"duration_s": [1.0], "batch_size": [1], "prefill_tokens": [0],
                       "verify_tokens": [1], "verify_s": [1.0], "draft_s": [0.0],
                       "bound": ["memory"]})
    row = summarize_frames("x", req, iteration_sums(it), 1e6)
    assert row["throughput_tokens_per_s"] == 10 / 5 and row["requests_per_s"] == 2 / 5
    req.loc[1, ["finished", "finished_at"]] = [False, np.nan]
    row = summarize_frames("x", req, iteration_sums(it), 11.0)
    assert row["requests_per_s"] == 1 / 10


def test_seeds_table_t_interval():
    t = pd.DataFrame({"name": ["a"] * 3 + ["b"], "seed": [0, 1, 2, 0],
                      "x": [1.0, 2.0, 3.0, 5.0]})
    s = seeds_table(t).set_index("name")
    assert s.loc["a", "x_mean"] == 2.0 and s.loc["a", "seeds"] == 3
    # t(0.975, 2) = 4.302653; sd = 1; half-width = t / sqrt(3).
    assert s.loc["a", "x_ci"] == pytest.approx(4.302653 / np.sqrt(3), rel=1e-6)
    assert np.isnan(s.loc["b", "x_ci"])


def test_write_table_csv_and_parquet(tmp_path):
    df = pd.DataFrame({"a": [1, 2], "b": [0.5, np.nan]})
    paths = write_table(df, tmp_path / "sub" / "t")
    assert [p.name for p in paths] == ["t.csv", "t.parquet"]
    pd.testing.assert_frame_equal(pd.read_csv(paths[0]), df)
    pd.testing.assert_frame_equal(pd.read_parquet(paths[1]), df)


def test_missing_run_folder_is_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read run file"):
        load_run(tmp_path)


def test_json_records_have_no_nan_or_numpy_scalars():
    from reports.tables import json_records

    df = pd.DataFrame({"a": [1, 2], "b": [0.5, np.nan], "c": [np.inf, -1.0], "d": ["x", "y"]})
    rows = json_records(df)
    assert rows == [{"a": 1, "b": 0.5, "c": None, "d": "x"},
                    {"a": 2, "b": None, "c": -1.0, "d": "y"}]
    assert type(rows[0]["a"]) is int
    json.dumps(rows, allow_nan=False)  # strict JSON


def test_make_dir_refuses_in_one_line(tmp_path):
    from reports.tables import make_dir
    from specdec.errors import UserError

    assert make_dir(tmp_path / "a" / "b").is_dir()
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UserError, match=r"file: cannot write output there: it is a file"):
        make_dir(f)
    with pytest.raises(UserError, match=r"file/sub: cannot create the output folder: Not a"):
        make_dir(f / "sub")
    with pytest.raises(UserError, match=r"^/proc/specsim-x: cannot create the output folder"):
        make_dir("/proc/specsim-x")
