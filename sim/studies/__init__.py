"""Studies: what runs the engine many times and turns the results into answers.

Each study is a module above the engine (``sim.runner``, ``sim.build``) and beside the
command line, which stays a thin layer over them: parameter sweeps (``sweep``), the
latency-vs-load curve (``load_curve``), the run report (``run_report``, with the acceptance
replay of ``acceptance_replay``), speedup grids (``grid``), capacity planning (``plan``; over
a search space: ``plan_space``, ``plan_walk``, ``plan_search``; the ranges on its answers:
``plan_interval``) and the papers' claims
(``claims`` and its groups). Studies may use ``reports`` to tabulate and draw; ``reports``
never imports a study or the engine.
"""

from __future__ import annotations

import importlib

# Public name -> the module that defines it (imported on first use, PEP 562).
_EXPORTS = {
    "SweepSpec": "sim.studies.sweep",
    "SweepInterrupted": "sim.studies.sweep",
    "load_sweep": "sim.studies.sweep",
    "run_sweep": "sim.studies.sweep",
    "point_seed": "sim.studies.sweep",
    "load_curve": "sim.studies.load_curve",
    "write_report": "sim.studies.run_report",
    "scenario_histograms": "sim.studies.acceptance_replay",
    "chain_grid": "sim.studies.grid",
    "tree_grid": "sim.studies.grid",
    "simulate_grid": "sim.studies.grid",
    "make_pair": "sim.studies.grid",
    "plan": "sim.studies.plan",
    "parse_slo": "sim.studies.plan",
    "load_candidates": "sim.studies.plan",
    "search_rate": "sim.studies.plan",
    "load_search": "sim.studies.plan_space",
    "search_plan": "sim.studies.plan_search",
    "run_claims": "sim.studies.claims",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import the defining module on first access of a public name."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sim.studies' has no attribute {name!r}")
