"""The run report's study: what ``report.md`` shows beyond the run's own records.

``write_report(run_folder)`` reads the run folder, re-simulates the scenario at scaled load
when asked (``load_curve=True``: ``sim.studies.load_curve``; its point at the scenario's own
load is the run itself), replays the acceptance model for the tokens-per-verify histogram
and run lengths (``sim.studies.acceptance_replay``), and hands everything to ``reports.report_md``,
whose figures it draws side by side on worker processes (``save_side_by_side``).
"""

from __future__ import annotations

from pathlib import Path

from reports import figures
from reports.report_md import chain_gamma, save_each, write_run_report
from reports.run_folder import load_run, summary_table
from reports.tables import make_dir
from sim.studies.acceptance_replay import scenario_histograms
from sim.studies.load_curve import MULTIPLIERS, load_axis
from sim.studies.load_curve import load_curve as _load_curve


def save_side_by_side(figs: dict, workers: int) -> dict:
    """Save ``{stem: (figure, path)}`` (``reports.report_md.write_run_report``'s figures) on
    up to ``workers`` forked processes (``sim.pool.forked``): drawing a figure (text layout,
    rasterising) is most of its cost and each is independent. Linux only; elsewhere, or with
    one worker, one after the other. Returns ``{stem: path}``; a figure without data is
    refused here, before any is drawn."""
    from sim.pool import can_fork, forked

    if not can_fork(workers, len(figs)):
        return save_each(figs)
    items = list(figs.values())
    try:
        for fig, path in items:
            figures.check_data(fig, path)
            make_dir(path.parent)
        forked(lambda item: figures.save(*item), items, workers)
    finally:
        for fig, _ in items:
            figures.close(fig)
    return {stem: path for stem, (_, path) in figs.items()}


def write_report(run_folder: str | Path, warmup_s: float = 0.0, load_requests: int = 200,
                 workers: int = 1, load_curve: bool = True) -> Path:
    """Write report.md, tables/ and figures/ into ``run_folder``; returns report.md's path.

    ``load_curve``: re-simulate at scaled load for the latency-vs-load section;
    ``load_requests``: requests per load point up to the scenario's own load (more above,
    see ``sim.studies.load_curve``); ``workers``: processes for the load points.
    """
    run = load_run(run_folder)
    summary = summary_table(run, warmup_s)
    # The curve's point at the scenario's own load is the run itself (untrimmed).
    own = summary if warmup_s == 0 else summary_table(run, 0.0)
    load = (_load_curve(run.scenario, max_requests=load_requests, workers=workers, own=own)
            if load_curve else None)
    hist, runs = scenario_histograms(run.scenario, chain_gamma(run))
    # a scenario whose load cannot be scaled (a trace, a replay) is told so, asked or not
    asked = load_curve or load_axis(run.scenario, MULTIPLIERS) is None
    return write_run_report(run, summary, load, hist, runs, warmup_s, load_asked=asked,
                            save_figures=lambda figs: save_side_by_side(figs, workers))
