"""The run report (sim.studies.run_report over reports.report_md): report.md, tables with
their columns, figures with data in them; the load curve it re-simulates."""

from __future__ import annotations

import shutil

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from reports import figures
from reports.report_md import chain_gamma, report_figures, save_each
from reports.run_folder import load_run
from sim.studies.acceptance_replay import scenario_histograms
from sim.studies.load_curve import load_curve, requests_at
from sim.studies.run_report import save_side_by_side, write_report


@pytest.fixture(scope="module")
def report(small_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("rep") / "run"
    shutil.copytree(small_run, folder)
    return write_report(folder, load_requests=40)


def test_report_files(report):
    folder = report.parent
    text = report.read_text()
    for heading in ("## Summary", "## Serving health", "## Latency vs offered load",
                    "## Acceptance"):
        assert heading in text
    for png in ("latency_vs_load", "tokens_per_verify", "latency_cdf", "batch_over_time"):
        assert (folder / "figures" / f"{png}.png").stat().st_size > 5000
        assert f"figures/{png}.png" in text
    for stem in ("summary", "load_curve", "tokens_per_verify", "run_lengths", "formula_bias"):
        assert (folder / "tables" / f"{stem}.csv").exists()
        assert (folder / "tables" / f"{stem}.parquet").exists()


def test_report_table_columns(report):
    t = report.parent / "tables"
    summary = pd.read_csv(t / "summary.csv")
    assert list(summary["name"]) == ["none", "fixed-g4"]
    for col in ("goodput_requests_per_s", "mean_batch_size", "acceptance_rate",
                "mean_acceptance_length", "draft_time_share", "memory_bound_share",
                "speedup_tpot"):
        assert col in summary.columns
    load = pd.read_csv(t / "load_curve.csv")
    assert load["rate_per_s"].nunique() == 6 and set(load["variant"]) == {"none", "fixed-g4"}
    # 40 requests below the scenario's own rate (6/s), the run itself (60) at it, then the
    # same arrival window as 40.
    per_rate = load.groupby("rate_per_s")["requests"].max()
    assert list(per_rate) == [40, 40, 60, 80, 160, 320]
    hist = pd.read_csv(t / "tokens_per_verify.csv")
    assert list(hist["tokens"]) == [1, 2, 3, 4, 5]  # γ = 4 of the fixed-g4 variant
    assert hist["measured"].sum() == pytest.approx(1.0)


def test_report_figures_have_data_before_saving(small_run):
    run = load_run(small_run)
    load = load_curve(run.scenario, multipliers=(0.5, 1.0), max_requests=20)
    hist, _ = scenario_histograms(run.scenario, chain_gamma(run), 32, 8)
    figs = report_figures(run, load, hist)
    assert set(figs) == {"latency_vs_load", "latency_cdf", "tokens_per_verify",
                         "batch_over_time"}
    for fig in figs.values():
        assert figures.has_data(fig)
    # The load figure: one line per variant with one point per rate, in milliseconds.
    ax = figs["latency_vs_load"].axes[0]
    curves = [ln for ln in ax.lines if len(ln.get_xdata()) == 2]
    assert len(curves) == 2
    # The histogram: 2 x (γ + 1) bars, heights = the table's fractions.
    heights = [p.get_height() for p in figs["tokens_per_verify"].axes[0].patches]
    assert heights == pytest.approx([*hist["measured"], *hist["iid"]])
    for fig in figs.values():
        plt.close(fig)


def test_load_requests_scale_with_load():
    assert [requests_at(40, m) for m in (0.25, 1.0, 1.5, 8.0)] == [40, 40, 60, 320]


def test_report_says_where_the_curves_cross(report):
    text = report.read_text()
    assert "Median TPOT: fixed-g4 is " in text and "p99 TTFT: fixed-g4 is " in text


def test_no_load_curve_for_offline_arrivals(small_run, tmp_path):
    run = load_run(small_run)
    sc = dict(run.scenario)
    sc["workload"] = {"arrivals": "offline", "prompt": sc["workload"]["prompt"],
                      "output": sc["workload"]["output"]}
    assert load_curve(sc) is None


def test_closed_loop_load_is_users(small_run):
    run = load_run(small_run)
    sc = dict(run.scenario)
    sc["workload"] = {"arrivals": "closed_loop", "prompt": sc["workload"]["prompt"],
                      "output": sc["workload"]["output"], "users": 4, "think_mean_s": 0.5}
    load = load_curve(sc, multipliers=(0.1, 0.25, 1.0, 2.0), max_requests=20)
    assert sorted(load["users"].unique()) == [1, 4, 8]  # 0.4 and 1.0 both round to 1
    fig = figures.latency_vs_load(load)
    assert figures.has_data(fig) and "users" in fig.axes[0].get_xlabel()
    plt.close(fig)


def test_load_curve_own_rate_point_is_the_headline_summary(report):
    """The curve's point at the scenario's own rate is the run (its 60 requests), not a
    re-run with --report-requests: the report cannot contradict its own summary."""
    t = report.parent / "tables"
    summary = pd.read_csv(t / "summary.csv").set_index("name")
    load = pd.read_csv(t / "load_curve.csv")
    at_own = load[load["rate_per_s"] == 6.0].set_index("variant")
    assert list(at_own.index) == list(summary.index)
    for col in ("requests", "tpot_p50_s", "ttft_p99_s", "speedup_tpot", "e2e_p50_s"):
        assert list(at_own[col]) == list(summary[col]), col


def test_load_curve_own_rows_match_a_rerun_at_the_runs_count(small_run):
    """The run's own summary rows and a re-simulated point at the same count are the same
    numbers, so the own point sits on the curve's other points' scale."""
    run = load_run(small_run)
    from reports.run_folder import summary_table

    rerun = load_curve(run.scenario, multipliers=(1.0,), max_requests=None)
    own = load_curve(run.scenario, multipliers=(1.0,), own=summary_table(run))
    cols = [c for c in rerun.columns if c in own.columns and c != "seed"]
    assert len(cols) > 20
    pd.testing.assert_frame_equal(own[cols], rerun[cols], check_dtype=False)


def test_load_curve_refuses_no_requests_per_point(small_run):
    """max_requests 0 used to become 1 request per point silently."""
    from specdec.errors import UserError

    with pytest.raises(UserError, match="--report-requests: must be >= 1, got 0"):
        load_curve(load_run(small_run).scenario, max_requests=0)


def test_figures_drawn_side_by_side_are_the_same_files(small_run, tmp_path):
    run = load_run(small_run)
    hist, _ = scenario_histograms(run.scenario, chain_gamma(run))

    def todo(folder):
        return {stem: (fig, folder / f"{stem}.png")
                for stem, fig in report_figures(run, None, hist).items()}

    one = save_each(todo(tmp_path / "one"))
    two = save_side_by_side(todo(tmp_path / "two"), workers=2)
    assert list(one) == list(two) and len(one) >= 3
    for stem in one:
        assert two[stem].read_bytes() == one[stem].read_bytes()
    empty, _ = plt.subplots()
    with pytest.raises(ValueError, match="no data"):
        save_side_by_side({"a": (empty, tmp_path / "a.png"),
                           **todo(tmp_path / "three")}, workers=2)
    assert not (tmp_path / "three").exists()  # refused before anything was drawn


def test_the_report_specsim_run_writes_names_its_source_and_version(small_run):
    """meta.yaml is written before the report that reads it (its header said `?`)."""
    import yaml

    meta = yaml.safe_load((small_run / "meta.yaml").read_text())
    text = (small_run / "report.md").read_text()
    assert f"Source `{meta['source']}`" in text and f"specsim {meta['version']}" in text
    assert "`?`" not in text
