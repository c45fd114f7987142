"""Running simulations: the only place that calls ``env.run()``.

``simulate(setup)`` runs one wired setup and returns its records; ``run_scenario(scenario)``
(the Python API behind ``specsim run``) runs every speculation variant of a scenario on the
same arrivals and returns a ``RunResult`` per variant.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from sim.cluster import Setup, wire
from sim.records import IterationRecord, RequestRecord


@dataclass(frozen=True)
class VariantResult:
    """The records of one variant: one per arrived request, one per finished iteration."""

    name: str
    requests: list[RequestRecord]
    iterations: list[IterationRecord]
    end_at: float


def simulate(
    setup: Setup, horizon_s: float | None = None, name: str = "run", progress=None
) -> VariantResult:
    """Run ``setup`` until every request finished, or until ``horizon_s`` simulated seconds.

    Requests still queued or running at the horizon are recorded with ``finished=False``.
    ``progress``, if given, is called with the simulated time now and then (a progress bar).
    """
    env = simpy.Environment()
    cluster = wire(env, setup)
    if progress is None or horizon_s is None:
        env.run(until=horizon_s)
    else:
        steps = 100
        for k in range(1, steps + 1):
            env.run(until=horizon_s * k / steps)
            progress(env.now)
    log = cluster.log
    return VariantResult(
        name=name,
        requests=log.request_records(setup.table, cluster.arrived[0]),
        iterations=log.iteration_records(),
        end_at=float(env.now),
    )
