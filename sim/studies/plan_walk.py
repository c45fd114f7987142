"""The rate grid and the walks of ``specsim plan``'s search (``sim.studies.plan_search``):
a candidate's limit under the SLO found in a few runs on a grid of rates r0 · 2^(i/4), the
bisection that refines it, and which candidates another beats for sure."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from sim.limits import MAX_RATE
from sim.pool import in_processes
from sim.studies.plan import Candidate, Trial, bisect, run_trial

STEPS = 4  # grid points per doubling of the rate
LOWEST = -4 * STEPS  # the grid's lowest point: r0 / 16
UNLOADED = 1.5  # a mean batch below this: the replica is all but idle


@dataclass(frozen=True)
class Job:
    """What every worker needs besides the candidate: the resolved scenario and the SLO."""

    base: dict
    slo: dict
    source: str
    doc: dict | None
    sets: tuple


def grid_rate(r0: float, i: int) -> float:
    """The rate of grid point ``i``."""
    return r0 * 2.0 ** (i / STEPS)


def _top(r0: float) -> int:
    return int(math.floor(STEPS * math.log2(MAX_RATE / r0)))


def walk(job: Job, cand: Candidate, sc, start: int, bound: tuple | None = None) -> tuple:
    """(highest passing grid point, lowest failing one above it, {rate: Trial}, stopped):
    steps of 1, 2, 4, 4, ... grid points (at most a doubling) from ``start``, then
    bisection of the grid. None: no point passed (or none failed) within the grid, or a
    failing run was all but idle (a mean batch under ``UNLOADED``: no lower rate meets the
    SLO). ``sc``: the candidate's validated scenario. ``bound`` = (best key, USD per
    hour, target rate): the walk stops (``stopped``) at a failing rate where the
    candidate's (cost, -rate) is no better than the best key, which some candidate
    reaches for sure."""
    r0 = float(job.base["workload"]["rate_per_s"])
    trials: dict[float, Trial] = {}

    def ok(i: int) -> bool:
        rate = grid_rate(r0, i)
        trials[rate] = run_trial(job.base, cand, rate, job.slo, job.source, job.doc,
                                 job.sets, scenario=sc)
        return trials[rate].ok

    def beaten(i: int) -> bool:
        if bound is None:
            return False
        best, per_hour, target = bound
        rate = grid_rate(r0, i)
        tokens = trials[rate].summary["output_tokens_per_request"]
        return (cost(per_hour, tokens, rate, target), -rate) >= best

    lo: int | None
    hi: int | None
    step, top = 1, _top(r0)
    if ok(start):
        lo, hi = start, None
        while hi is None and lo < top:
            i = min(lo + step, top)
            if ok(i):
                lo, step = i, min(step * 2, STEPS)  # at most doubling the rate
            else:
                hi = i
        if hi is not None and beaten(hi):
            return lo, hi, trials, True
    else:
        lo, hi = None, start
        while lo is None and hi > LOWEST:
            if beaten(hi):
                return None, hi, trials, True
            if trials[grid_rate(r0, hi)].controller["batch"] < UNLOADED:
                break  # it fails with the GPU all but idle: a lower rate cannot help
            i = max(hi - step, LOWEST)
            if ok(i):
                lo = i
            else:
                hi, step = i, min(step * 2, STEPS)
    while lo is not None and hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi, trials, False


def refine(job: Job, cand: Candidate, sc, lo: float, hi: float, rel_tol: float) -> dict:
    """{rate: Trial} of bisecting between a passing ``lo`` and a failing ``hi`` until
    ``hi`` <= ``lo`` (1 + ``rel_tol``)."""
    trials: dict[float, Trial] = {}

    def trial(rate: float) -> bool:
        trials[rate] = run_trial(job.base, cand, rate, job.slo, job.source, job.doc, job.sets,
                                 scenario=sc)
        return trials[rate].ok

    bisect(trial, lo, hi, rel_tol)
    return trials


class Runner:
    """Runs one stage's tasks on the workers (or here, with one), in order of the tasks
    whatever order they finish in, reporting ``progress(stage, done, total)``."""

    def __init__(self, workers: int, progress: Callable | None) -> None:
        self.workers, self.progress = workers, progress

    def __call__(self, stage: str, fn: Callable, args: list[tuple]) -> list:
        out: list = [None] * len(args)
        count = [0]

        def done(i: int, res) -> None:
            out[i] = res
            count[0] += 1
            if self.progress:
                self.progress(stage, count[0], len(args))

        if self.workers == 1 or len(args) < 2:
            for i, a in enumerate(args):
                done(i, fn(*a))
        else:
            in_processes(fn, args, min(self.workers, len(args)), done)
        return out


def bounds(trials: dict, lo: float, hi: float) -> tuple[float, float]:
    """The highest passing and lowest failing rate of ``trials`` within [lo, hi]."""
    passing = [r for r, t in trials.items() if t.ok and lo <= r <= hi]
    failing = [r for r, t in trials.items() if not t.ok and lo <= r <= hi]
    return max(passing, default=lo), min(failing, default=hi)


def cost(per_hour: float, tokens: float, rate: float, target: float | None) -> float:
    """The ranking cost at ``rate`` of a candidate costing ``per_hour`` USD an hour whose
    requests bring ``tokens`` output tokens: USD an hour for the replicas a ``target``
    rate needs, else USD per million output tokens."""
    if rate <= 0 or not tokens:
        return math.inf
    if target is not None:
        return math.ceil(target / rate) * per_hour
    return per_hour / (rate * tokens * 3600) * 1e6


def best_key(names, lo: dict, costs: dict, target) -> tuple[float, float]:
    """The best (cost, -rate) of ``names`` at their passing rates."""
    return min(((cost(*costs[n], lo[n], target), -lo[n]) for n in names),
               default=(math.inf, 0.0))


def survivors(names: list[str], lo: dict, hi: dict, costs: dict, target) -> set[str]:
    """The candidates no other beats for sure: each one's (cost, -rate) at its failing rate
    against the best at a passing rate."""
    best = best_key(names, lo, costs, target)
    if math.isinf(best[0]):
        return set()
    return {n for n in names if (cost(*costs[n], hi[n], target), -hi[n]) < best}
