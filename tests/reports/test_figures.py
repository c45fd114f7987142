"""reports.figures: every figure carries data, titles, labelled axes and a caption."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from reports import figures
from reports.run_folder import load_run
from sim.studies.grid import chain_grid, make_pair, tree_grid


def _check(fig):
    assert figures.has_data(fig)
    ax = fig.axes[0]
    assert ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_title() or fig._suptitle is not None
    assert any(t.get_text() for t in fig.texts)  # the caption line


def _load():
    rates = [1.0, 2.0, 4.0]
    return pd.DataFrame({
        "rate_per_s": rates * 2, "variant": ["none"] * 3 + ["g4"] * 3,
        "policy": ["none"] * 3 + ["fixed"] * 3,
        "tpot_p50_s": [0.010, 0.011, 0.020, 0.006, 0.009, 0.030],
        "ttft_p99_s": [0.1, 0.1, 0.2, 0.1, 0.2, 0.4],
    })


def test_crossover_interpolates():
    # diff (g4 - none): -0.004, -0.002, +0.010 -> zero at 2 + 2 * 0.002 / 0.012.
    assert figures.crossover(_load(), "tpot_p50_s", "none", "g4") == pytest.approx(2 + 1 / 3)
    assert figures.crossover(_load(), "ttft_p99_s", "none", "g4") is None


def test_latency_vs_load_marks_crossover():
    fig = figures.latency_vs_load(_load())
    _check(fig)
    ax = fig.axes[0]
    assert len(ax.lines) == 3  # two curves and the crossover line
    assert ax.lines[2].get_xdata()[0] == pytest.approx(2 + 1 / 3)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [10.0, 11.0, 20.0])  # ms
    plt.close(fig)


def test_compare_curves_in_words():
    load = _load()
    assert figures.baseline_variant(load) == "none"
    assert figures.compare_curves(load, "tpot_p50_s", "none", "g4") == (
        "g4 is lower than none up to ≈ 2.33 req/s, higher above")
    assert figures.compare_curves(load, "ttft_p99_s", "none", "g4") == (
        "g4 is not lower than none at any load tried (1–4 req/s; no crossover)")
    load["tpot_p50_s"] = [0.010, 0.011, 0.020, 0.006, 0.009, 0.019]
    assert figures.compare_curves(load, "tpot_p50_s", "none", "g4") == (
        "g4 is lower than none at every load tried (1–4 req/s; no crossover)")
    load["tpot_p50_s"] = [0.010, 0.011, 0.020, 0.012, 0.009, 0.019]
    assert figures.crossover(load, "tpot_p50_s", "none", "g4") is None
    assert "higher than none at light load, lower at heavy load" in figures.compare_curves(
        load, "tpot_p50_s", "none", "g4")


def test_latency_vs_load_caption_without_crossover():
    # Speculation wins at every load: no dashed line, and the caption must not claim one.
    load = _load()
    load["tpot_p50_s"] = [0.010, 0.011, 0.020, 0.006, 0.009, 0.019]
    fig = figures.latency_vs_load(load)
    _check(fig)
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]
    text = fig.texts[-1].get_text()  # the caption (the suptitle comes first)
    assert text.startswith("No crossover with none inside the loads tried")
    assert "Dashed line" not in text
    assert "TPOT p50: g4 is lower than none at every load tried" in text
    plt.close(fig)
    fig = figures.latency_vs_load(_load())
    assert fig.texts[-1].get_text().startswith("Dashed line")
    plt.close(fig)


def test_latency_vs_load_log_axes_for_wide_ranges():
    load = _load()
    load["ttft_p99_s"] = [0.1, 0.1, 5.0, 0.1, 0.2, 9.0]  # an overloaded queue at 4/s
    fig = figures.latency_vs_load(load)
    assert [ax.get_yscale() for ax in fig.axes] == ["linear", "log"]
    assert fig.axes[0].get_xscale() == "linear"  # 1–4/s: less than 8× apart
    plt.close(fig)


def test_heatmaps_hold_the_grid_values():
    pair = make_pair("llama-3-8b", "llama-3.2-1b", "h100", timing="paper")  # the lecture's
    g = chain_grid(pair, 0.8, [1, 256], [128, 1024], 4)
    fig = figures.speedup_heatmap(g, "t")
    _check(fig)
    img = fig.axes[0].images[0].get_array()
    assert img.shape == (2, 2)
    assert img[1, 0] == pytest.approx(g.set_index(["batch", "context"]).loc[(256, 128),
                                                                          "best_speedup"])
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert "1.74×\nγ=4" in labels
    plt.close(fig)
    t = tree_grid(pair, 0.8, "k,1", [1, 2], [1, 64], 512)
    fig = figures.tree_heatmap(t, "t")
    _check(fig)
    assert fig.axes[0].images[0].get_array().shape == (2, 2)
    plt.close(fig)


def test_run_figures(small_run):
    run = load_run(small_run)
    fig = figures.latency_cdfs({v.name: v.requests for v in run.variants})
    _check(fig)
    assert all(len(line.get_xdata()) == 60 for line in fig.axes[0].lines)  # 60 TTFTs each
    plt.close(fig)
    fig = figures.batch_over_time({v.name: v.iterations for v in run.variants})
    _check(fig)
    assert len(fig.axes[0].lines[0].get_xdata()) == len(run.variants[0].iterations)
    plt.close(fig)


def test_save_refuses_empty(tmp_path):
    fig, ax = plt.subplots()
    ax.set_xlabel("x")
    with pytest.raises(ValueError, match="no data"):
        figures.save(fig, tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()
    plt.close(fig)


def test_latency_cdf_labels_a_narrow_log_axis_throughout():
    """TPOT between 2.5 and 7.5 ms used to show labels 3, 4, 6 and none above 6."""
    tpot = np.linspace(2.5e-3, 7.5e-3, 50)
    frames = {"a": pd.DataFrame({"ttft_s": tpot * 10, "tpot_s": tpot})}
    fig = figures.latency_cdfs(frames)
    ax = fig.axes[1]
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    labels = {float(t.get_text()) for t in ax.xaxis.get_ticklabels(minor=True)
              if t.get_text() and lo <= t.get_position()[0] <= hi}
    assert {3.0, 4.0, 5.0, 6.0, 7.0} <= labels
    plt.close(fig)


def test_latency_cdf_of_requests_without_a_tpot_says_so_without_a_warning():
    """One-token outputs have no TPOT: its panel said nothing and matplotlib warned on
    stderr that the legend had no artists."""
    import warnings

    frames = {"a": pd.DataFrame({"ttft_s": [0.02, 0.03], "tpot_s": [np.nan, np.nan]})}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = figures.latency_cdfs(frames)
    assert [t.get_text() for t in fig.axes[1].texts] == ["no request has a TPOT"]
    plt.close(fig)
