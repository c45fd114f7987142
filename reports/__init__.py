"""Reports: pandas tables, matplotlib figures and report.md from the engine's records.

Public names are re-exported lazily (``reports.write_run_report`` imports matplotlib only
when first used), so ``import reports.tables`` stays light.
"""

from __future__ import annotations

import importlib

# Public name -> the module that defines it.
_EXPORTS = {
    "write_run_report": "reports.report_md",
    "load_run": "reports.run_folder",
    "summary_table": "reports.run_folder",
    "requests_frame": "reports.tables",
    "iterations_frame": "reports.tables",
    "summarize_frames": "reports.tables",
    "seeds_table": "reports.tables",
    "trim_warmup": "reports.tables",
    "write_table": "reports.tables",
    "make_dir": "reports.tables",
    "json_records": "reports.tables",
    "SweepSpec": "reports.sweep",
    "load_sweep": "reports.sweep",
    "run_sweep": "reports.sweep",
    "point_seed": "reports.sweep",
    "chain_grid": "reports.grid",
    "tree_grid": "reports.grid",
    "simulate_grid": "reports.grid",
    "make_pair": "reports.grid",
    "plan": "reports.plan",
    "parse_slo": "reports.plan",
    "load_candidates": "reports.plan",
    "search_rate": "reports.plan",
    "load_curve": "reports.load",
    "scenario_histograms": "reports.bursty",
    "formula_bias": "reports.bursty",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import the defining module on first access of a public name."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'reports' has no attribute {name!r}")
