"""Latency against offered load: the scenario re-run at several arrival rates.

Used by the run report (the latency-vs-load figure with its crossover) and usable alone.
All rates share the scenario's seed (common random numbers: with Poisson or gamma arrivals
the same draws, scaled by 1/rate), so the curves differ only by load. Only rate-driven
arrivals (poisson, gamma) can be scaled; other kinds return ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

MULTIPLIERS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def load_curve(scenario: dict, multipliers: Sequence[float] = MULTIPLIERS,
               max_requests: int | None = 200, workers: int = 1,
               source: str = "scenario") -> pd.DataFrame | None:
    """One row per (rate, variant) with the sweep summary columns and ``rate_per_s``.

    ``scenario`` is a resolved scenario document; runs keep at most ``max_requests``
    requests (``None``: the scenario's own count) so a report stays quick.
    """
    from reports.sweep import SweepSpec, run_sweep

    w = scenario.get("workload") or {}
    if w.get("arrivals") not in ("poisson", "gamma") or not w.get("rate_per_s"):
        return None
    base = dict(scenario)
    run = dict(base.get("run") or {})
    if max_requests is not None and (run.get("requests") or max_requests) > max_requests:
        run["requests"] = max_requests
    base["run"] = run
    rate = float(w["rate_per_s"])
    rates = tuple(rate * m for m in multipliers)
    table = run_sweep(SweepSpec(base, source, (("workload.rate_per_s", rates),)),
                      workers=workers, same_seed=True)
    return table.rename(columns={"workload.rate_per_s": "rate_per_s"})
