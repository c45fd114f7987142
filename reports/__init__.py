"""Reports: pandas tables, matplotlib figures and report.md from the engine's records.

Reports read records and tables; they never run the engine nor import ``sim`` (the studies
in ``sim.studies`` that run it hand their results here).

Public names are re-exported lazily (``reports.write_run_report`` imports matplotlib only
when first used), so ``import reports.tables`` stays light.
"""

from __future__ import annotations

import importlib

# Public name -> the module that defines it.
_EXPORTS = {
    "write_run_report": "reports.report_md",
    "format_table": "reports.claims_report",
    "write_claims": "reports.claims_report",
    "load_run": "reports.run_folder",
    "summary_table": "reports.run_folder",
    "requests_frame": "reports.tables",
    "iterations_frame": "reports.tables",
    "summarize_frames": "reports.tables",
    "iteration_sums": "reports.tables",
    "seeds_table": "reports.tables",
    "trim_warmup": "reports.tables",
    "write_table": "reports.tables",
    "make_dir": "reports.tables",
    "json_records": "reports.tables",
    "verify_histogram": "reports.bursty",
    "run_length_table": "reports.bursty",
    "formula_bias": "reports.bursty",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import the defining module on first access of a public name."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'reports' has no attribute {name!r}")
