"""Running simulations: the only place that calls ``env.run()``.

``simulate(setup)`` runs one wired setup and returns its records; ``run_scenario(scenario)``
(the Python API behind ``specsim run``) runs every speculation variant of a scenario on the
same arrivals and returns a ``RunResult`` per variant. ``build_overridden(doc, overrides, ...)``
is the shared path from a scenario file and its overrides to runnable setups (``run``,
``sweep``, ``plan``): any problem, found validating or building, names the override that
brought it in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import simpy

from sim.cluster import Setup, wire
from sim.engine_path import AUTO, EnginePath
from sim.log import NoIterationRows
from sim.offload import load_records, tier_records
from sim.records import IterationRecord, IterationTotals, Records, RequestRecord


@dataclass(frozen=True)
class VariantResult:
    """The records of one variant: one per arrived request, one per finished iteration
    (``iterations``; where the run kept none, ``iteration_rows`` is None and asking for them
    raises ``sim.log.NoIterationRows``), and the iterations' ``totals`` either way."""

    name: str
    requests: Records[RequestRecord]
    iteration_rows: Records[IterationRecord] | None
    end_at: float
    totals: IterationTotals = IterationTotals()
    itl_counts: np.ndarray | None = None  # the ITL histogram (``sim.log.ItlHistogram``)
    # iterations the compiled kernels formed (``sim.steady``, ``sim.steady_walk``); the
    # others the reference scheduler did (the records are the same either way)
    compiled_iterations: int = 0
    # a P/D run (``sim.disagg``): one TransferRecord per request, and the prefill pool's
    # iterations (``requests`` and ``iterations`` are then the decode pool's)
    transfers: Records | None = None
    prefill_iteration_rows: Records[IterationRecord] | None = None
    prefill_totals: IterationTotals | None = None  # the prefill pool's iterations' totals
    # with a CPU tier below the prefix cache (``sim.offload``): one LoadRecord per load,
    # one TierRecord per replica
    loads: Records | None = None
    tiers: Records | None = None

    @property
    def iterations(self) -> Records[IterationRecord]:
        """One record per finished iteration; ``NoIterationRows`` where the run kept none."""
        if self.iteration_rows is None:
            raise NoIterationRows(
                f"variant {self.name}: the run kept no iteration rows, only their totals "
                "(.totals); run it with iteration_rows=True for them")
        return self.iteration_rows


def simulate(
    setup: Setup, horizon_s: float | None = None, name: str = "run", progress=None,
    path: EnginePath = AUTO, iteration_rows: bool = True,
) -> VariantResult:
    """Run ``setup`` until every request finished, or until ``horizon_s`` simulated seconds.

    Requests still queued or running at the horizon are recorded with ``finished=False``.
    ``progress(now_s, total_s)``, if given, is called now and then as simulated time passes
    (for a progress bar); without a horizon the total is the last arrival time, an estimate.
    ``path`` says which fast paths the replicas may take (``sim.engine_path``); the records
    are the same on each. ``iteration_rows`` False keeps only the iterations' totals (a run
    that only summarises: the rows take most of a long run's memory).
    """
    env = simpy.Environment()
    cluster = wire(env, setup, path, iteration_rows)
    last = float(setup.table.arrival_at[-1]) if len(setup.table) else 0.0
    total = horizon_s if horizon_s is not None else last
    if progress is None or not total > 0:  # also skips a closed loop's unknown (nan) total
        env.run(until=horizon_s)
    else:
        steps = 100
        for k in range(1, steps + 1):  # the last slice ends at the horizon itself
            env.run(until=total if k == steps else total * k / steps)
            progress(env.now, total)
        if horizon_s is None:
            env.run()
            progress(env.now, env.now)
    pd = cluster.pd
    for replica in cluster.replicas + (pd.prefill if pd is not None else []):
        replica.flush_running()
    log = cluster.log
    extra = {}
    tiers = tier_records(cluster.replicas)
    if tiers is not None:
        extra = {"loads": load_records(cluster.replicas), "tiers": tiers}
    if pd is not None:
        extra = {"transfers": pd.log.records(cluster.arrived[0]),
                 "prefill_iteration_rows": pd.plog.iteration_records(len(pd.prefill))
                 if iteration_rows else None,
                 "prefill_totals": pd.plog.iterations.totals()}
    return VariantResult(
        name=name,
        requests=log.request_records(cluster.table, cluster.arrived[0]),
        iteration_rows=log.iteration_records(len(cluster.replicas)) if iteration_rows
        else None,
        end_at=float(env.now),
        totals=log.iterations.totals(),
        itl_counts=log.itl.counts,
        compiled_iterations=sum(r.compiled_iterations for r in cluster.replicas),
        **extra,
    )


@dataclass(frozen=True)
class ScenarioResult:
    """Every variant of a scenario, run on the same arrivals, with their summaries."""

    scenario: object
    variants: list[VariantResult]
    summaries: list[dict]


def run_scenario(scenario, source: str = "scenario", progress=None,
                 record_bound: bool = True, engine_path: EnginePath = AUTO,
                 iteration_rows: bool = True) -> ScenarioResult:
    """Run every variant of ``scenario`` (a ``sim.scenario.Scenario``); the Python API.

    ``progress(variant_name, now_s, total_s)``, if given, is called as simulated time
    advances; ``iteration_rows`` False keeps only the iterations' totals (``simulate``).
    """
    from sim.build import setups

    return run_setups(scenario, setups(scenario, source, record_bound), progress,
                      engine_path=engine_path, iteration_rows=iteration_rows)


def build_overridden(doc: dict, overrides: list[str], source: str,
                     labels: list[str] | None = None, resolve_at: int | None = None,
                     prepare=None, record_bound: bool = True, check=None):
    """``(scenario, [(variant name, Setup)])`` for ``doc`` with ``overrides``: the shared path
    of ``specsim run``, ``sweep`` and ``plan`` from a scenario file to runnable setups.

    A problem, found validating or building (unknown GPU, TP that does not divide the heads,
    a model or request that does not fit), names the override that brought it in, as
    ``source (--set key=value): field: problem`` (``labels`` and ``resolve_at`` as in
    ``sim.loading.validate_overridden``), or only ``source`` when the file is at fault.
    ``prepare(scenario)`` (e.g. a sweep point's seed) is applied before building, then
    ``check(scenario)`` (e.g. refuse a run too large to draw, ``sim.estimate``).
    """
    from pydantic import ValidationError

    from sim.build import setups
    from sim.loading import blame, overridden_doc, validate_overridden
    from sim.scenario import Scenario
    from specdec.errors import UserError

    prep = prepare or (lambda sc: sc)
    scenario = prep(validate_overridden(doc, overrides, source, labels, resolve_at))
    if check is not None:
        check(scenario)
    head = f"{source}: "
    try:
        return scenario, setups(scenario, source, record_bound)
    except UserError as e:
        if not overrides or not str(e).startswith(head):
            raise
        problem = str(e).removeprefix(head)

    def problems(k: int) -> list[str]:
        try:
            sc = Scenario.model_validate(overridden_doc(doc, overrides, k, resolve_at))
            setups(prep(sc), source, record_bound)
        except ValidationError:
            return []  # not this problem: an earlier override alone may be invalid
        except UserError as e:
            return [str(e).removeprefix(head)]
        return []

    where = blame(problem, source, overrides, problems, labels, _numbers_hidden)
    raise UserError(f"{where}: {problem}") from None


def _numbers_hidden(problem: str) -> str:
    """A build problem with its stand-alone numbers as '#': request sizes, KV blocks and GiB
    change with unrelated overrides (the seed), names like 'h100' or 'llama-3-8b' do not."""
    import re

    return re.sub(r"(?<![\w.-])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w-])", "#", problem)


def simulate_variants(built, horizon_s: float | None, progress=None,
                      workers: int = 1, meanwhile=None, keep=None,
                      path: EnginePath = AUTO, iteration_rows: bool = True
                      ) -> list[VariantResult]:
    """``simulate`` every ``(name, setup)`` of ``built``, on up to ``workers`` processes.

    The variants are independent simulations, so running them side by side gives the same
    records as one after the other, and the same error: the first variant's in scenario
    order. Workers are forked (``sim.pool.forked``: they inherit the setups, which hold
    closures that cannot be pickled), on Linux only (elsewhere, or with one worker or one
    variant, they run here one after the other). ``progress(name, now, total)`` is relayed
    from the workers; ``meanwhile()`` runs here while they simulate. ``keep(result)``, if
    given, is called with each variant's result where it was simulated (in its worker:
    e.g. to write its records while the others still run); its error is the variant's.
    ``path``: the fast paths each may take (``sim.engine_path``); ``iteration_rows``: keep
    the iteration rows, or only their totals (``simulate``).
    """
    import multiprocessing as mp

    from sim.pool import can_fork, forked

    def simulated(setup, name, tick):
        res = simulate(setup, horizon_s, name, tick, path, iteration_rows)
        if keep is not None:
            keep(res)
        return res

    if not can_fork(workers, len(built)):
        return [simulated(setup, name, None if progress is None else
                          (lambda now, tot, n=name: progress(n, now, tot)))
                for name, setup in built]
    queue = mp.get_context("fork").SimpleQueue() if progress is not None else None

    def relay() -> None:
        while queue is not None and not queue.empty():
            i, now, tot = queue.get()
            progress(built[i][0], now, tot)

    def one(i: int) -> VariantResult | Exception:
        """Variant ``i`` in a worker; its error is returned, so that the parent raises the
        one the sequential run would."""
        name, setup = built[i]
        tick = None if queue is None else (lambda now, tot: queue.put((i, now, tot)))
        try:
            return simulated(setup, name, tick)
        except Exception as e:  # raised again by the parent, in scenario order
            return e

    results = forked(one, range(len(built)), workers, poll=relay, meanwhile=meanwhile)
    relay()
    for res in results:
        if isinstance(res, Exception):
            raise res
    return results


def run_setups(scenario, built, progress=None, workers: int = 1,
               meanwhile=None, keep=None, engine_path: EnginePath = AUTO,
               iteration_rows: bool = True) -> ScenarioResult:
    """Run ``built`` (``sim.build.setups(scenario)``), every variant on the same arrivals
    (on up to ``workers`` processes: ``simulate_variants``, with its ``meanwhile`` and
    ``keep``; on ``engine_path``, ``sim.engine_path``; keeping the iteration rows or only
    their totals, ``iteration_rows``). The summaries read the totals either way."""
    from sim.summary import (
        add_speedups,
        offload_stats,
        slo_verdict,
        summarize,
        transfer_stats,
    )

    summaries = []
    horizon = scenario.run.horizon_s
    kinds = {v.name: v.policy.kind for v in scenario.variants}
    # The i.i.d. chain formula applies to policies that only ever draft chains.
    chains = {v.name: v.policy.chains_only for v in scenario.variants}
    results = simulate_variants(built, horizon, progress, workers, meanwhile, keep,
                                engine_path, iteration_rows)
    for (name, setup), res in zip(built, results, strict=True):
        totals = res.totals
        if res.prefill_totals is not None:  # P/D: recompute against both pools' prefill
            totals = dataclasses.replace(totals, prefill_tokens=totals.prefill_tokens
                                         + res.prefill_totals.prefill_tokens)
        summ = summarize(name, res.requests, totals, res.end_at, chain=chains[name],
                         itl=res.itl_counts, kv_capacity_blocks=setup.kv_capacity_blocks,
                         drafting=kinds[name] != "none",
                         prefix_caching=setup.limits.prefix_caching)
        if res.transfers is not None:  # a P/D run
            summ.update(transfer_stats(res.transfers))
        if res.tiers is not None:  # a CPU tier below the prefix cache
            summ.update(offload_stats(res.loads, res.tiers, res.requests))
        summ["warnings"] = [*setup.notes, *summ["warnings"]]  # what building it found
        summ["slo"] = slo_verdict(summ, scenario.slo.ttft_p99_s, scenario.slo.tpot_p99_s)
        summaries.append(summ)
    base = next((n for n, k in kinds.items() if k == "none"), None)
    return ScenarioResult(scenario, results, add_speedups(summaries, base))


def run(scenario_path=None, overrides: list[str] | tuple[str, ...] = (), seed: int | None = None,
        out=None, write: bool = True, progress=None, engine_sets=(), force: bool = False,
        then=None, on_start=None, workers: int = 1, meanwhile=None,
        engine_path: EnginePath = AUTO, check=None):
    """What ``specsim run`` does, as a function: load ``scenario_path`` (default
    ``scenarios/default.yaml``) with ``overrides``, run every variant, write the run folder
    (``out``, default ``runs/<name>-<timestamp>``) unless ``write`` is False, and return
    ``(ScenarioResult, run folder or None)``. ``engine_sets`` are ``(override, label)`` pairs
    applied first (what a ``vllm serve`` command line says, ``sim.engines``). The folder is
    written atomically, as ``sim.output.write_run`` writes it, each variant's records by the
    process that simulated it (``force`` replaces a non-empty ``out``, ``then(folder)`` adds
    to it first, e.g. the report); ``check(source, scenario, built)`` is called with
    ``built`` None once the scenario is validated, before any request is drawn, and again
    once it is built, before it runs (it may refuse it: ``sim.estimate``);
    ``on_start(scenario, built)`` then; ``workers``: processes for the variants
    (``simulate_variants``; ``meanwhile()`` runs while they do); ``engine_path``: the fast
    paths they may take (``sim.engine_path``). Never prints.
    """
    import time
    from pathlib import Path

    from sim.loading import default_scenario_path, display_path, read_yaml
    from sim.output import check_out, default_run_dir, finish_run, staged_folder, write_variant

    sets = [t for t, _ in engine_sets] + list(overrides) \
        + ([f"run.seed={seed}"] if seed is not None else [])
    labels = [label for _, label in engine_sets] + [f"--set {t}" for t in overrides] \
        + ([f"--seed {seed}"] if seed is not None else [])
    path = Path(scenario_path) if scenario_path is not None else default_scenario_path()
    source = display_path(path)
    doc = read_yaml(path)
    start = time.perf_counter()
    scenario, built = build_overridden(doc, sets, source, labels,
                                       check=None if check is None else
                                       (lambda sc: check(source, sc, None)))
    if check is not None:
        check(source, scenario, built)
    folder = Path(out) if out is not None else default_run_dir(scenario.name)
    if write:
        check_out(folder, "--out", force)  # refuse before simulating, not after
    if on_start is not None:
        on_start(scenario, built)
    if not write:
        return run_setups(scenario, built, progress, workers, meanwhile,
                          engine_path=engine_path), None
    # sim.output.write_run's folder, each variant's records written where it was simulated
    with staged_folder(folder, "--out", force) as tmp:
        result = run_setups(scenario, built, progress, workers, meanwhile,
                            keep=lambda res: write_variant(tmp, res, folder),
                            engine_path=engine_path)
        finish_run(result, tmp, folder, source, sets, time.perf_counter() - start, then)
    return result, folder
