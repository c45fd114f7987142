"""The SimPy serving engine, scenarios and the ``specsim`` command line.

Python API (the same as ``specsim run``)::

    import sim
    result, folder = sim.run("scenarios/default.yaml", ["run.requests=200"], seed=1)
    result.summaries            # one dict per speculation variant
    result.variants[0].requests # Records: a RequestRecord per request, by column
    result.variants[0].requests.column("finished_at")  # one numpy array; .iterations too

    # or step by step, without writing anything:
    result = sim.run_scenario(sim.load_scenario(None, ["run.requests=200"]))

Names are imported lazily so that ``import sim`` (and the command line's start-up) stays
light and never pulls in ``hardware`` or ``workloads`` before they are needed.
"""

from __future__ import annotations

from specdec.lazy import lazy_exports

_EXPORTS = {
    "Scenario": "sim.scenario",
    "load_scenario": "sim.loading",
    "apply_overrides": "sim.loading",
    "run": "sim.runner",
    "run_scenario": "sim.runner",
    "simulate": "sim.runner",
    "ScenarioResult": "sim.runner",
    "VariantResult": "sim.runner",
    "Records": "sim.records",
    "RequestRecord": "sim.records",
    "IterationRecord": "sim.records",
    "summarize": "sim.summary",
    "write_run": "sim.output",
    "Setup": "sim.cluster",
    "wire": "sim.cluster",
    "setups": "sim.build",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
