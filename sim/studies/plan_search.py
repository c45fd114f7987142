"""``specsim plan`` over a search space (``sim.studies.plan_space``): the rate limit of every
candidate, found in stages so that hundreds of candidates take seconds, and the request rate
above which speculation stops paying.

Each candidate runs at the scenario's seed and request count, as in ``sim.studies.plan``,
on a fixed grid of rates r0 · 2^(i/4) (r0: the scenario's ``workload.rate_per_s``; a step
of 19%; from r0 / 16 up). A walk tests a grid point, then steps 1, 2, 4, 4, ... points up
while the SLO holds (down while it does not), then bisects the grid to two neighbouring
points, the lower passing and the higher failing.

1. **Baselines**: each deployment's candidate without speculation walks from r0.
2. **Chains** (fixed chains, trees, SpecSim's adaptive policy) walk from their baseline's
   passing point, and **controllers** (vLLM ladders, TensorRT-LLM, SGLang) from their
   fixed chain's (same method and K). A walk stops early (``dominated``) at a failing
   rate where its (cost, -rate) is no better than the best some candidate walked before
   it reaches for sure: where passing is monotone in the rate, its limit is below that
   rate and it cannot come first.
3. **Refinement**: of the rest, those that could still come first, overall or among the
   speculative ones (their cost at the failing point beats the best cost at a passing
   point), are bisected until the failing rate is within ``rel_tol`` of the passing one.
   Every row says its ``status`` (refined, coarse, dominated) and its precision
   (``rel_tol``: fail rate / pass rate - 1).
4. **Crossover**: the best speculative candidate and its deployment's baseline run on the
   grid from half the baseline's limit to past both limits, and on up to twice that while
   speculation still beats (the runs of stages 1-2 reused); the crossover is bisected (to
   ``rel_tol``) between the last rate where speculation beats the baseline on ``metric``
   (at least ``MARGIN`` lower) and the first where it does not. What the candidate's
   controller does there (its mean K, the share of decoding steps it drafts nothing, the
   batch) comes from that run; so does what the best candidate of each other controller
   on that deployment does at that rate (one run each).
5. **Interval**: each refined candidate's rate limit found again with the acceptance and
   the timing at the ends of their spreads (``sim.studies.plan_interval``); a coarse or
   dominated row's rate is known only to the grid's step, about as wide, and gets none.

Runs are deterministic; the table and the answer are the same for any number of workers.
"""

from __future__ import annotations

import math

from sim.studies.plan import (
    Candidate,
    RateSearch,
    Trial,
    build_for,
    candidate_row,
    check_arrivals,
    gpu_price,
    ranked,
    run_trial,
)
from sim.studies.plan_interval import add_intervals
from sim.studies.plan_space import Space
from sim.studies.plan_walk import (
    STEPS,
    Job,
    Runner,
    best_key,
    bounds,
    grid_rate,
    refine,
    survivors,
    walk,
)
from specdec.errors import Interrupted, UserError

SCAN_BELOW = STEPS  # the crossover scan starts at half the baseline's limit
MARGIN = 0.01  # speculation beats the baseline when its metric is at least 1% lower
METRICS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "itl_p50", "itl_p99",
           "e2e_p50", "e2e_p99")


def _trial(job: Job, cand: Candidate, sc, rate: float) -> Trial:
    """A crossover run: its latencies are compared, whether or not it meets the SLO."""
    return run_trial(job.base, cand, rate, job.slo, job.source, job.doc, job.sets,
                     keep_up=False, scenario=sc)


def search_plan(base: dict, space: Space, slo: dict[str, float], source: str,
                target_rate: float | None = None, rel_tol: float = 0.05,
                metric: str | None = None, progress=None, doc: dict | None = None,
                sets=(), workers: int = 1, spread: float | None = 0.0) -> tuple:
    """(table, answer) of the staged search (module docstring) over ``space``: the table as
    ``sim.studies.plan.plan`` ranks it, with ``refined`` and ``controller``/``k``/
    ``off_above``/``method``/``deployment`` columns; ``answer`` the counts and the
    crossover (``crossover``). With ``spread`` (the stated acceptance spread; None: no
    interval), the refined rows get ``sim.studies.plan_interval``'s interval columns."""
    if not slo:
        raise UserError(f"{source}: no SLO: give --slo or set slo: in the scenario")
    if metric is None:  # the SLO's own TPOT percentile, else the median
        metric = next((k.removesuffix("_s") for k in slo if k.startswith("tpot_p")
                       and k.removesuffix("_s") in METRICS), "tpot_p50")
    if metric not in METRICS:
        raise UserError(f"--crossover-metric: one of {', '.join(METRICS)}, got {metric!r}")
    check_arrivals(base, source)
    r0 = float(base["workload"]["rate_per_s"])
    job = Job(base, slo, source, doc, tuple(sets))
    run = Runner(workers, progress)
    cands = {c.name: c for c in space.candidates}
    point = {c.name: p for c, p in zip(space.candidates, space.points, strict=True)}
    trials: dict[str, dict[float, Trial]] = {n: {} for n in cands}
    try:
        # every candidate built once first: a bad one is refused before any run
        built = {c.name: build_for(base, c, r0, source, doc, sets)[0]
                 for c in space.candidates}
        per_hour = {}
        for n in cands:
            _, gpus, price = gpu_price(built[n], cands[n])
            per_hour[n] = gpus * price
        # 1-2: the grid walks, the baselines first; a later stage's walks stop where a
        # candidate of an earlier stage beats them for sure
        walked: dict[str, tuple] = {}
        stopped: set[str] = set()

        def walks(stage: str, names: list[str], args: list[tuple]) -> None:
            for n, (lo, hi, t, stop) in zip(names, run(stage, walk, args), strict=True):
                walked[n] = (lo, hi)
                trials[n].update(t)
                if stop:
                    stopped.add(n)

        base_names = [space.baseline(d).name for d in space.deployments]
        walks("baselines", base_names, [(job, cands[n], built[n], 0) for n in base_names])
        # then the fixed chains, trees and SpecSim's adaptive policy from their baseline's
        # limit; then the engines' controllers from their fixed chain's (same method, K)
        chains = [n for n in cands if point[n].controller in ("fixed", "adaptive")]
        rest = [n for n in cands if n not in walked and n not in chains]
        for stage, names in (("chains", chains), ("controllers", rest)):
            lo, _ = _rates(walked, r0)
            done = [n for n in walked if lo[n] > 0]
            best = best_key(done, lo, {n: (per_hour[n], _tokens(trials[n], lo[n])) for n in done},
                         target_rate)
            walks(stage, names, [
                (job, cands[n], built[n], _start(n, point, walked),
                 (best, per_hour[n], target_rate) if math.isfinite(best[0]) else None)
                for n in names])
        # 3: refine the candidates that could still come first, overall and among the
        # speculative ones
        lo, hi = _rates(walked, r0)
        costs = {n: (per_hour[n], _tokens(trials[n], lo[n])) for n in cands}
        searched = [n for n in cands if n not in stopped]
        speculative = [n for n in searched if point[n].method is not None]
        keep = survivors(searched, lo, hi, costs, target_rate) | \
            survivors(speculative, lo, hi, costs, target_rate)
        keep = [n for n in cands if n in keep and 0 < lo[n] and hi[n] < math.inf]
        for n, t in zip(keep, run("refine", refine, [
                (job, cands[n], built[n], lo[n], hi[n], rel_tol) for n in keep]), strict=True):
            trials[n].update(t)
            lo[n], hi[n] = bounds(trials[n], lo[n], hi[n])
        rows = []
        for n, c in cands.items():
            at = trials[n].get(lo[n])
            found = RateSearch(lo[n], hi[n], len(trials[n]), at.summary if at else None,
                               at.measured if at else {})
            row = candidate_row(c, built[n], found, hi[n] / lo[n] - 1 if lo[n] else math.inf,
                                target_rate)
            p = point[n]
            row.update({"status": "dominated" if n in stopped else
                        "refined" if n in keep else "coarse", "deployment": p.deployment,
                        "method": p.method or "", "controller": p.controller,
                        "k": p.k, "off_above": p.off_above})
            rows.append(row)
        table = ranked(rows, target_rate)
        # 4: the crossover of the best speculative candidate against its baseline
        cross = _crossover(table, space, walked, trials, job, run, r0, rel_tol, metric,
                           built)
        # 5: the interval of each refined row (the others' rates are known to the grid's
        # step only, as wide as most intervals)
        interval_runs = 0
        if spread is not None:
            table, interval_runs = add_intervals(table, keep, cands, built, job, spread,
                                                 rel_tol, target_rate, run)
    except KeyboardInterrupt:
        raise Interrupted("plan search interrupted; nothing was written") from None
    answer = {"candidates": len(cands), "deployments": len(space.deployments),
              "skipped": dict(space.skipped), "runs": sum(len(t) for t in trials.values()),
              "refined": len(keep), "dominated": len(stopped),
              "grid_step": 2 ** (1 / STEPS) - 1, "rel_tol": rel_tol, "crossover": cross,
              "interval": None if spread is None else {"acceptance_spread": spread,
                                                       "runs": interval_runs}}
    return table, answer


def _start(name: str, point: dict, walked: dict) -> int:
    """Where candidate ``name``'s walk starts: the passing grid point of its fixed chain
    (same deployment, method and K; else the best of the method's chains there), else of
    its deployment's baseline, else the scenario's rate (0)."""
    me = point[name]

    def passing(match) -> list[int]:
        return [walked[n][0] for n, p in point.items() if n in walked and match(p)
                and walked[n][0] is not None]

    same = passing(lambda p: p.deployment == me.deployment and p.method == me.method
                   and p.controller == "fixed" and p.k == me.k and p.tree is None)
    chains = passing(lambda p: p.deployment == me.deployment and p.method == me.method
                     and p.controller == "fixed")
    off = passing(lambda p: p.deployment == me.deployment and p.method is None)
    return next((max(x) for x in (same, chains, off) if x), 0)


def _rates(walked: dict, r0: float) -> tuple[dict, dict]:
    """{name: passing rate (0: none)}, {name: failing rate (inf: none)} of the walks."""
    return ({n: grid_rate(r0, a) if a is not None else 0.0 for n, (a, _) in walked.items()},
            {n: grid_rate(r0, b) if b is not None else math.inf for n, (_, b) in walked.items()})


def _tokens(trials: dict, rate: float) -> float:
    """Output tokens per request of the run at ``rate`` (0: none ran there)."""
    return trials[rate].summary["output_tokens_per_request"] if rate in trials else 0.0


def _crossover(table, space: Space, walked: dict, trials: dict, job: Job, run: Runner,
               r0: float, rel_tol: float, metric: str, built: dict) -> dict | None:
    """The crossover of the best speculative row against its deployment's baseline (see
    the module docstring); None when no speculative candidate meets the SLO at all."""
    spec = table[table["controller"] != "off"]
    if spec.empty:
        return None
    beaten = not (spec["max_rate_per_s"] > 0).any()
    if beaten:  # every one stopped where a baseline beat it: the one that got furthest
        spec = spec.sort_values("fail_rate_per_s", ascending=False, kind="stable")
    else:
        spec = spec[spec["max_rate_per_s"] > 0]
    s_name = spec.iloc[0]["candidate"]
    dep = spec.iloc[0]["deployment"]
    cands = {c.name: c for c in space.candidates}
    b_name = space.baseline(dep).name
    known = [x for x in (*walked[s_name], *walked[b_name]) if x is not None]
    b_lo = walked[b_name][0]
    first = (b_lo if b_lo is not None else min(known)) - SCAN_BELOW
    last = max(known)
    rates = [grid_rate(r0, i) for i in range(first, last + 1)]
    key = f"{metric}_s"

    def fill(points: list[float]) -> None:
        todo = [(n, r) for r in points for n in (s_name, b_name) if r not in trials[n]]
        for (n, r), t in zip(todo, run("crossover", _trial, [
                (job, cands[n], built[n], r) for n, r in todo]), strict=True):
            trials[n][r] = t

    def beats(r: float) -> bool:
        return trials[s_name][r].summary[key] <= (1 - MARGIN) * trials[b_name][r].summary[key]

    fill(rates)
    for i in range(last + 1, last + 1 + STEPS):  # still beating: on, up to a doubling more
        if not all(beats(r) for r in rates):
            break
        rates.append(grid_rate(r0, i))
        fill(rates[-1:])
    verdicts = [beats(r) for r in rates]
    cut = next((i for i, v in enumerate(verdicts) if not v), None)
    found, lo, hi = "always", rates[-1], None
    if cut == 0:
        found, lo, hi = "never", None, rates[0]
    elif cut is not None:
        found, lo, hi = "crossed", rates[cut - 1], rates[cut]
        while hi > lo * (1 + rel_tol):
            mid = 0.5 * (lo + hi)
            fill([mid])
            lo, hi = (mid, hi) if beats(mid) else (lo, mid)
    again = next((r for r, v in zip(rates[cut + 1:], verdicts[cut + 1:], strict=True) if v),
                 None) if cut is not None else None

    def state(r: float) -> dict:
        s, b = trials[s_name][r], trials[b_name][r]
        return {"rate_per_s": r, "speculative": s.summary[key], "baseline": b.summary[key],
                "beats": beats(r), **s.controller, "baseline_batch": b.controller["batch"]}

    # what each engine controller does at that rate: the best-ranked of each kind there
    at = hi if hi is not None else lo
    ranked_here = table[(table["deployment"] == dep) & ~table["controller"].isin(
        ["off", "fixed", spec.iloc[0]["controller"]])]
    others = list(ranked_here.drop_duplicates("controller")["candidate"])
    todo = [n for n in others if at not in trials[n]]
    args = [(job, cands[n], built[n], at) for n in todo]
    for n, t in zip(todo, run("controllers at crossover", _trial, args), strict=True):
        trials[n][at] = t
    controllers = [{"candidate": n, "controller": table.loc[table["candidate"] == n,
                                                            "controller"].iloc[0],
                    "rate_per_s": at, "value": trials[n][at].summary[key],
                    "beats": trials[n][at].summary[key]
                    <= (1 - MARGIN) * trials[b_name][at].summary[key],
                    **trials[n][at].controller} for n in others]
    return {"speculative": s_name, "baseline": b_name, "deployment": dep, "metric": metric,
            "margin": MARGIN, "found": found, "beats_up_to_per_s": lo, "stops_at_per_s": hi,
            "beats_again_at_per_s": again, "all_beaten": beaten,
            "controller": spec.iloc[0]["controller"],
            "at_crossover": state(hi) if hi is not None else None,
            "scan": [state(r) for r in sorted(set(rates) | ({lo, hi} - {None}))],
            "controllers_there": controllers}
