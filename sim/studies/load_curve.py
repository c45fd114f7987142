"""Latency against offered load: the scenario re-run at several load levels.

Used by the run report (the latency-vs-load figure with its crossover) and usable alone.
Rate-driven arrivals (poisson, gamma) are re-run at multiples of ``rate_per_s``; a closed
loop at multiples of its ``users`` (rounded, at least 1). All levels share the scenario's
seed (common random numbers: Poisson or gamma arrivals are the same draws scaled by
1/rate), so the curves differ only by load. Other arrival kinds return ``None``.

Above the scenario's own load the request count grows with the load (``requests_at``), so
every level spans the same stretch of arrivals: a fixed count at 8× the rate would arrive in
1/8 of the time, too briefly for the queue and the batch to grow to where they settle, and
the high-load points (where a crossover lies) would look lighter than they are.

At the scenario's own load the curve can take the run itself (``own``: the run's summary
table, ``reports.run_folder.summary_table``) instead of re-running it with another request
count, so a report's curve passes through its own headline summary.

The table's load column is ``rate_per_s`` or ``users``; ``reports.tables.load_column(table)``
says which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from sim.studies.sweep import SweepSpec, run_sweep
from specdec.errors import UserError

MULTIPLIERS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def load_axis(scenario: dict, multipliers: Sequence[float]) -> tuple[str, tuple] | None:
    """(dotted key, values) to scale the scenario's load, or None when it cannot be."""
    w = scenario.get("workload") or {}
    if w.get("arrivals") in ("poisson", "gamma") and w.get("rate_per_s"):
        return "workload.rate_per_s", tuple(float(w["rate_per_s"]) * m for m in multipliers)
    if w.get("arrivals") == "closed_loop" and w.get("users"):
        users = dict.fromkeys(max(1, round(w["users"] * m)) for m in multipliers)
        return "workload.users", tuple(users)
    return None


def requests_at(base_requests: int, multiplier: float) -> int:
    """Requests to run at ``multiplier`` × the scenario's load: ``base_requests`` at or
    below it, proportionally more above it (the same arrival window)."""
    return math.ceil(base_requests * max(1.0, multiplier))


def load_curve(scenario: dict, multipliers: Sequence[float] = MULTIPLIERS,
               max_requests: int | None = 200, workers: int = 1,
               source: str = "scenario", own: pd.DataFrame | None = None
               ) -> pd.DataFrame | None:
    """One row per (load level, variant) with the sweep summary columns.

    ``scenario`` is a resolved scenario document. At or below its own load a level runs at
    most ``max_requests`` requests (``None``: the scenario's own count), so a report stays
    quick; above it, that count times the multiplier (``requests_at``). A scenario bounded
    by ``run.horizon_s`` alone keeps its horizon and gets no request count. Given ``own``
    (the run's summary table, one row per variant with a ``name`` column), the level at the
    scenario's own load is those rows, not a re-run.
    """
    if max_requests is not None and max_requests < 1:
        raise UserError(f"--report-requests: must be >= 1, got {max_requests}")
    axis = load_axis(scenario, multipliers)
    if axis is None:
        return None
    key, levels = axis
    col = key.removeprefix("workload.")
    own_level = next((v for v in levels if _multiplier(scenario, key, v) == 1.0), None)
    if own is not None and own_level is not None:
        levels = tuple(v for v in levels if v != own_level)
    else:
        own = None
    n = (scenario.get("run") or {}).get("requests")
    base_n = n if n is None or max_requests is None else min(n, max_requests)
    tables = []
    if levels:
        vary = [(key, levels)]
        if base_n is not None:
            # One request count per level, zipped with the levels (not a cartesian product).
            counts = tuple(requests_at(base_n, _multiplier(scenario, key, v)) for v in levels)
            vary.append(("run.requests", counts))
        spec = SweepSpec(dict(scenario), source, tuple(vary), zipped=True)
        table = run_sweep(spec, workers=workers, same_seed=True)
        tables.append(table.drop(columns=["run.requests"], errors="ignore")
                      .rename(columns={key: col}))
    if own is not None:
        rows = own.rename(columns={"name": "variant"})
        rows.insert(0, "seed", (scenario.get("run") or {}).get("seed"))
        rows.insert(0, col, own_level)
        tables.append(rows)
    table = pd.concat(tables, ignore_index=True)
    order = table[col].rank(method="dense").astype(int)
    return table.iloc[order.argsort(kind="stable")].reset_index(drop=True)


def _multiplier(scenario: dict, key: str, level: float) -> float:
    """``level`` over the scenario's own load on ``key``."""
    own = scenario["workload"][key.removeprefix("workload.")]
    return float(level) / float(own)
