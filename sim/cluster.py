"""Wiring one simulated cluster: N replicas behind a router, fed by the arrival process.

``wire(env, setup)`` builds it from resolved parts (cost models, acceptance model, request
table, limits); ``build(env, scenario, variant)`` (in ``sim.build``) resolves a scenario into
those parts through ``hardware`` and ``workloads`` and then calls ``wire``. Tests use
``wire`` directly with small fake cost models.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from sim import gate
from sim.engine_path import AUTO, EnginePath
from sim.grammar import GrammarState
from sim.llm_d import LlmdConfig
from sim.log import RequestTable, RunLog
from sim.pipeline import PipelinedReplica
from sim.pricing import IterationPricer
from sim.replica import Replica
from sim.router import ArrivalFeed, Router, arrivals, closed_loop
from sim.scheduling import SchedulerLimits


@dataclass(frozen=True)
class Setup:
    """Everything a run needs, resolved.

    ``draft`` is a ``hardware.draft.DraftSetup`` (the draft's cost model, placement and
    replicas) or None; ``make_policy`` builds one policy per replica (adaptive policies hold
    state);
    ``kv_capacity_blocks`` is per replica; ``seed`` seeds the acceptance draws: replica i
    draws from child i of it (derived without mutating it, so re-running a setup repeats
    the same draws).
    """

    table: RequestTable
    limits: SchedulerLimits
    kv_capacity_blocks: int
    target_cost: object
    draft: object | None
    make_policy: Callable[[], object]
    acceptance: object
    seed: np.random.SeedSequence
    replicas: int = 1
    router: str = "round_robin"
    router_weight: float = 1.0  # the kv_aware router's --kv-overlap-score-weight
    llm_d: LlmdConfig | None = None  # the llm_d router's knobs (sim.llm_d)
    record_bound: bool = True
    pipeline_stages: int = 1
    closed_loop_users: int = 0  # > 0: a closed loop of this many users instead of arrivals
    think_s: np.ndarray | None = None  # the closed loop's pre-drawn think times
    draft_sync: str = "every_step"  # when the draft ingests tokens it did not draft for
    draft_overlap: bool = False  # a separate draft drafts ahead during the verify
    drafter: object | None = None  # ``sim.drafters.Drafter`` (None: ``draft`` a draft model)
    # the framework's speculative overheads for the drafter (hardware.spec_cost.SpecRound)
    spec: object | None = None
    notes: tuple[str, ...] = ()  # warnings found building it (added to the run's summary)
    # prefill/decode disaggregation (sim.disagg.PdSetup: the prefill pool, the link): this
    # Setup is then the decode pool's
    disagg: object | None = None
    grammar: object | None = None  # sim.grammar.Grammar: requests under a grammar


@dataclass
class Cluster:
    """The wired simulation: replicas, router, log, and how many requests have arrived."""

    env: simpy.Environment
    setup: Setup
    table: RequestTable
    replicas: list[Replica]
    router: Router
    log: RunLog
    arrived: list[int]
    pd: object | None = None  # sim.disagg.PdRun: the prefill pool and the transfers


def wire(env: simpy.Environment, setup: Setup, path: EnginePath = AUTO,
         iteration_rows: bool = True) -> Cluster:
    """Create the replicas, the router and the arrival process in ``env``; ``path``: the
    fast paths the replicas may take (``sim.engine_path``: the same records on each);
    ``iteration_rows``: whether the log keeps the iteration rows or only their totals.
    A P/D setup (``disagg``) is wired by ``sim.disagg.wire``."""
    if setup.disagg is not None:
        from sim import disagg

        replicas, router, log, arrived, run, table = disagg.wire(env, setup, path,
                                                                 iteration_rows)
        return Cluster(env, setup, table, replicas, router, log, arrived, pd=run)
    table = setup.table
    if setup.closed_loop_users:
        # the users write arrival times as they send: give this run its own copy
        table = dataclasses.replace(table, arrival_at=table.arrival_at.copy())
    log = RunLog(len(table), iteration_rows, setup.kv_capacity_blocks)
    seed = setup.seed
    rngs = [np.random.default_rng(np.random.SeedSequence(seed.entropy,
                                                         spawn_key=(*seed.spawn_key, i)))
            for i in range(setup.replicas)]
    replicas = []
    for i in range(setup.replicas):
        pricer = IterationPricer(setup.target_cost, setup.draft, setup.record_bound,
                                 setup.draft_overlap, setup.spec)
        args = (env, i, setup.limits, setup.kv_capacity_blocks, pricer, setup.make_policy(),
                setup.acceptance, rngs[i], table, log, setup.draft_sync, setup.draft_overlap,
                setup.drafter)
        if setup.pipeline_stages > 1:
            replicas.append(PipelinedReplica(*args, path=path, stages=setup.pipeline_stages))
        else:
            replicas.append(Replica(*args, path=path))
    if setup.grammar is not None:
        for r in replicas:
            r.grammar = GrammarState(setup.grammar, np.random.default_rng(
                r.rng.bit_generator.seed_seq.spawn(1)[0]), len(r.state))
            r.keep_off_fast_paths("structured output (drafts a grammar forbids)")
    # (the router's tie-breaks draw from the child after the replicas')
    router = Router(replicas, setup.router, setup.router_weight, setup.llm_d,
                    np.random.default_rng(np.random.SeedSequence(
                        seed.entropy, spawn_key=(*seed.spawn_key, setup.replicas))))
    why = gate.router(setup.router) if len(replicas) > 1 else None
    if why is not None:
        for r in replicas:
            r.keep_off_steady(why)
            r.strict_walk = True
    if len(replicas) > 1 and setup.router != "round_robin" and not setup.closed_loop_users:
        # a router that reads the replicas when a request arrives (their load, or Dynamo's
        # and llm-d's KV state): a walk runs past the other replicas' steps, which change
        # nothing of its own, to the next arrival (a closed loop's sends come as a peer's
        # requests finish)
        for r in replicas:
            r.peers = [p for p in replicas if p is not r]
    arrived = [0]
    if setup.closed_loop_users:
        loop = closed_loop(env, setup.closed_loop_users, setup.think_s, table.arrival_at,
                           router, arrived, replicas)
        if len(replicas) == 1:  # it sends to this one alone: a walk runs past its sends
            replicas[0].loop = loop
    else:
        # one replica: every request goes to it (no router to ask), at a time known ahead;
        # so do a round-robin router's (request i to replica i mod n), and nothing one
        # replica does changes another's: each walks past the others' events
        one = replicas[0] if len(replicas) == 1 else None
        process = env.process(arrivals(env, table.arrival_at, one or router, arrived))
        if one is not None or setup.router == "round_robin":
            n = len(replicas)
            for i, r in enumerate(replicas):
                r.feed = ArrivalFeed(env, table.arrival_at, arrived, process, i, n,
                                     replicas[:i] + replicas[i + 1:])
    for r in replicas:
        if r.stages > 1 and r.feed is None:  # (a walk of micro-batches runs past arrivals)
            r.keep_off_fast_paths(
                "pipeline stages under a closed loop" if setup.closed_loop_users else
                f"pipeline stages behind a {setup.router} router (it reads the replicas at "
                "each arrival)")
    return Cluster(env, setup, table, replicas, router, log, arrived)


def fast_paths(setup: Setup, path: EnginePath = AUTO) -> dict[str, str | None]:
    """``Replica.fast_paths`` of a run of ``setup`` on ``path`` (its first replica; they are
    alike): a throwaway wiring answers it."""
    return wire(simpy.Environment(), setup, path).replicas[0].fast_paths()


def walks(setup: Setup, path: EnginePath = AUTO) -> bool:
    """Whether a run of ``setup`` on ``path`` computes its iterations with the compiled
    walk, many at a time (``Replica.walks``, numba installed): a throwaway wiring answers
    it. A run that walks goes about 40 times faster than one iteration at a time."""
    from sim import steady_kernel

    if not steady_kernel.available():
        return False
    return all(r.walks for r in wire(simpy.Environment(), setup, path).replicas)
