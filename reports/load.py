"""Latency against offered load: the scenario re-run at several load levels.

Used by the run report (the latency-vs-load figure with its crossover) and usable alone.
Rate-driven arrivals (poisson, gamma) are re-run at multiples of ``rate_per_s``; a closed
loop at multiples of its ``users`` (rounded, at least 1). All levels share the scenario's
seed (common random numbers: Poisson or gamma arrivals are the same draws scaled by
1/rate), so the curves differ only by load. Other arrival kinds return ``None``.

The table's load column is ``rate_per_s`` or ``users``; ``load_column(table)`` says which.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

MULTIPLIERS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
LOAD_COLUMNS = ("rate_per_s", "users")


def load_axis(scenario: dict, multipliers: Sequence[float]) -> tuple[str, tuple] | None:
    """(dotted key, values) to scale the scenario's load, or None when it cannot be."""
    w = scenario.get("workload") or {}
    if w.get("arrivals") in ("poisson", "gamma") and w.get("rate_per_s"):
        return "workload.rate_per_s", tuple(float(w["rate_per_s"]) * m for m in multipliers)
    if w.get("arrivals") == "closed_loop" and w.get("users"):
        users = dict.fromkeys(max(1, round(w["users"] * m)) for m in multipliers)
        return "workload.users", tuple(users)
    return None


def load_column(table: pd.DataFrame) -> str:
    """The load column of a ``load_curve`` table."""
    return next(c for c in LOAD_COLUMNS if c in table.columns)


def load_curve(scenario: dict, multipliers: Sequence[float] = MULTIPLIERS,
               max_requests: int | None = 200, workers: int = 1,
               source: str = "scenario") -> pd.DataFrame | None:
    """One row per (load level, variant) with the sweep summary columns.

    ``scenario`` is a resolved scenario document; runs keep at most ``max_requests``
    requests (``None``: the scenario's own count) so a report stays quick.
    """
    from reports.sweep import SweepSpec, run_sweep

    axis = load_axis(scenario, multipliers)
    if axis is None:
        return None
    base = dict(scenario)
    run = dict(base.get("run") or {})
    if max_requests is not None and (run.get("requests") or max_requests) > max_requests:
        run["requests"] = max_requests
    base["run"] = run
    table = run_sweep(SweepSpec(base, source, (axis,)), workers=workers, same_seed=True)
    return table.rename(columns={axis[0]: axis[0].removeprefix("workload.")})
