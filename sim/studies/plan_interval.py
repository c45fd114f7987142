"""The interval on ``specsim plan``'s capacity figures: each candidate's rate limit found
again with the acceptance and the timing at the ends of their spreads.

What spreads:

- **timing**: every step time × (1 ± e), e the held-out median |error| of category E's
  rows as ``specsim validate`` computes them (``hardware.timing.validation.validate_spec``,
  the one place they are computed): of the speculative runs' TPOT for a speculative
  candidate, of the same runs without speculation for one without; over the rows of the
  candidate's engine and drafting method where three or more are held out, else of its
  engine, else all (:func:`timing_error`). A run's times come only from the timing model
  and the arrivals (plan needs rate-driven arrivals), so the run with every step time × s
  at rate r is the run at rate r·s with every time × s: a rate r meets the SLO at timing
  × s where rate r·s meets it with each limit ÷ s (``run.horizon_s`` ÷ s too). Pricing is
  not touched.
- **acceptance** (speculative candidates only): a ``task_mix`` spreads over its tasks: the
  low end gives every request the task whose model accepts least (mean α), the high end
  the one that accepts most. ``spread`` (``--acceptance-spread``, default 0) is a stated
  relative range on top: every per-guess acceptance rate × (1 ± spread), at most 1. No
  preset states a range for its measurement (``workloads/data/acceptance_presets.yaml``;
  a few notes quote one in prose), so none comes from the presets. A request's own spread
  (trace replay, bursty stretches) is already drawn in every run.

The low end takes both pessimistic ends (slower steps, lower acceptance), the high end
both optimistic ones: a range of answers under the stated spreads, not a confidence
interval. Each end is searched outward from the candidate's own bracket (passing rate
``lo``, failing ``hi``) and bisected to ``rel_tol``; where an end meets the SLO as the
candidate does (passes at ``lo``, or fails at ``hi``) it is ``lo``, so the interval holds
the point estimate. A run that meets the SLO without keeping up (``sim.studies.plan``'s
``KEEP_UP``: too few requests to tell) counts as a miss, so such an end is a lower
bound.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

import numpy as np
from pydantic import TypeAdapter

from hardware import load_catalog
from hardware.timing.spec_rows import read_spec_rows
from hardware.timing.validation import SPEC_VALIDATION_CSV, validate_spec
from sim.kinds.acceptance import Acceptance
from sim.limits import MAX_RATE
from sim.paths import resolve_file
from sim.studies.plan import Candidate, bisect, build_for, run_trial
from sim.studies.plan_walk import Job, Runner
from specdec.errors import Interrupted, UserError
from workloads.acceptance import IIDAcceptance, PositionalAcceptance
from workloads.presets import preset

LOWEST = 1 / 16  # an end is searched down to this share of the candidate's rate, then 0
GROW = 2 ** 0.25  # the first step outward: the search grid's 19%, doubling after


MIN_ROWS = 3  # held-out rows a group needs for its own median (else the wider group's)


@lru_cache(maxsize=16)
def _spec_errors(catalog: str | None, timing: str, engine: str | None):
    """Category E priced (``validate_spec``): the rows of ``engine`` (None: every row; an
    engine without rows: None). Pricing one engine's rows alone keeps a plan from paying
    for the others' (the B200 and H200 kernel tables take seconds to read)."""
    rows = read_spec_rows(SPEC_VALIDATION_CSV)
    if engine is not None:
        rows = [r for r in rows if r.framework == engine]
        if not rows:
            return None
    cat = load_catalog([resolve_file(catalog)] if catalog else None)
    return validate_spec(cat, rows=rows, timing=timing)


def timing_error(sc, method: str | None) -> float:
    """The held-out median |error| of category E's TPOT for a candidate's validated
    scenario ``sc``: with ``method`` (a drafting method) the speculative runs' TPOT, with
    ``method`` None the same runs' TPOT without speculation; over the held-out rows of the
    candidate's engine and method where at least ``MIN_ROWS`` have it, else of its engine,
    else of the method, else of all (an engine's error is the one its deployments carry:
    the rows of another engine on another GPU say little of it)."""
    d = sc.deployment
    engine = d.framework.partition("@")[0]
    groups = ((engine, method), (engine, None), (None, method), (None, None))
    for f, m in groups:
        if method is None and m is not None:
            continue
        e = _spec_errors(d.catalog, d.timing, f)
        if e is None:
            continue
        errors = e.base_error if method is None else e.tpot_error
        vals = [abs(x) for r, x in zip(e.rows, errors, strict=True)
                if r.split == "test" and not math.isnan(x) and (m is None or r.method == m)]
        if len(vals) >= MIN_ROWS or (f is None and m is None):
            return float(np.median(vals)) if vals else 0.0
    return 0.0


def _scaled(p: float, factor: float) -> float:
    return min(1.0, p * factor)


def _ends_single(acc: dict, spread: float, who: str) -> tuple[dict, dict]:
    """(low, high) of one (not a mix) acceptance config under the stated ``spread``."""
    if spread == 0:
        return acc, acc
    factors = (1 - spread, 1 + spread)
    if acc["kind"] == "bursty":
        return tuple({**acc, "easy_alpha": _scaled(acc.get("easy_alpha", 0.95), f),
                      "hard_alpha": _scaled(acc.get("hard_alpha", 0.3), f)} for f in factors)
    if acc["kind"] == "preset" and preset(acc["name"]).proposal_rate is not None:
        raise UserError(f"--acceptance-spread: {who}: preset {acc['name']}'s rates are over "
                        f"the steps its drafter proposed on; give the rates as a positional "
                        f"acceptance and the drafter's proposal_rate, or --acceptance-spread 0")
    model = TypeAdapter(Acceptance).validate_python(acc).build(np.random.default_rng(0))
    theta = getattr(getattr(model, "width_model", None), "theta", None)
    if isinstance(model, IIDAcceptance) and theta is not None:
        return tuple({"kind": "iid", "alpha": _scaled(model.alpha, f), "theta": theta}
                     for f in factors)
    if isinstance(model, PositionalAcceptance) and theta is not None:
        # as vLLM-style marginals (the products of the conditional rates), keeping theta
        return tuple({"kind": "marginal", "theta": theta, "marginals": [
            float(x) for x in np.cumprod(np.minimum(1.0, model.rates * f))]} for f in factors)
    raise UserError(f"--acceptance-spread: {who}: acceptance kind {acc['kind']} has no "
                    f"per-guess rates to spread; give --acceptance-spread 0")


def acceptance_ends(acc: dict, spread: float, who: str) -> tuple[dict, dict]:
    """(low, high) acceptance configs of ``acc`` (a scenario's or a variant's, as JSON):
    a ``task_mix``'s least and most accepting task, then the stated ``spread``."""
    if acc["kind"] == "task_mix":
        tasks = TypeAdapter(Acceptance).validate_python(acc).tasks
        alpha = {n: t.acceptance.build(np.random.default_rng(0)).mean_alpha
                 for n, t in tasks.items()}
        low, high = min(alpha, key=alpha.get), max(alpha, key=alpha.get)
        dump = {n: t.acceptance.model_dump(mode="json", exclude_none=True)
                for n, t in tasks.items()}
        return (_ends_single(dump[low], spread, who)[0],
                _ends_single(dump[high], spread, who)[1])
    return _ends_single(acc, spread, who)


@dataclasses.dataclass(frozen=True)
class End:
    """One end of a candidate's interval: its acceptance (None: the candidate's own) and
    timing scale; ``down`` for the low end."""

    acceptance: dict | None
    scale: float
    down: bool


def drafting_method(cand: Candidate, sc) -> str | None:
    """The drafting method of candidate ``cand`` (``sc``: its validated scenario), None
    where it does not speculate."""
    if cand.policy.get("kind") == "none":
        return None
    v = sc.variants[0]
    return v.drafter.method if v.drafter is not None else sc.models.method


def plan_ends(cand: Candidate, sc, spread: float) -> tuple[End, End]:
    """(low end, high end) of candidate ``cand`` (``sc``: its validated scenario)."""
    method = drafting_method(cand, sc)
    e = timing_error(sc, method)
    if not e < 1:
        raise UserError(f"{cand.origin or cand.name}: deployment.timing {sc.deployment.timing}"
                        f": its held-out error on the speculative runs is {e:.0%}, so the "
                        f"faster end has no step time; give --no-interval")
    if method is None:
        return End(None, 1 + e, True), End(None, 1 - e, False)
    v = sc.variants[0]
    acc = (v.acceptance or sc.acceptance).model_dump(mode="json", exclude_none=True)
    low, high = acceptance_ends(acc, spread, cand.origin or f"candidate {cand.name}")
    return (End(None if low == acc else low, 1 + e, True),
            End(None if high == acc else high, 1 - e, False))


def end_rate(job: Job, cand: Candidate, sc, end: End, lo: float, hi: float,
             rel_tol: float) -> tuple[float, int]:
    """(the passing rate of ``end``, runs): from the candidate's own bracket (``lo``
    passing, ``hi`` failing) outward until the SLO flips, then bisected to ``rel_tol``.
    ``sc``: the candidate's validated scenario."""
    if end.acceptance is not None:
        cand = dataclasses.replace(cand, variant={**cand.variant, "acceptance": end.acceptance})
        sc = build_for(job.base, cand, lo, job.source, job.doc, job.sets)[0]
    s = end.scale
    if sc.run.horizon_s is not None:
        sc = sc.model_copy(update={"run": sc.run.model_copy(
            update={"horizon_s": sc.run.horizon_s / s})})
    slo = {k: v / s for k, v in job.slo.items()}
    runs = [0]

    def ok(rate: float) -> bool:
        runs[0] += 1
        t = run_trial(job.base, cand, rate * s, slo, job.source, job.doc, job.sets,
                      keep_up=False, scenario=sc)
        return t.ok and t.keeps_up

    if end.down:
        if ok(lo):
            return lo, runs[0]
        fail, step = lo, GROW
        while True:
            rate = fail / step
            if rate < lo * LOWEST:
                return 0.0, runs[0]
            if ok(rate):
                break
            fail, step = rate, min(step * step, 2.0)
        return bisect(ok, rate, fail, rel_tol)[0], runs[0]
    if not ok(hi):
        return lo, runs[0]
    passed, step = hi, GROW
    while True:
        rate = min(passed * step, MAX_RATE)
        if rate <= passed or not ok(rate):
            break
        passed, step = rate, min(step * step, 2.0)
    if rate <= passed:  # it passes at the highest rate allowed
        return passed, runs[0]
    return bisect(ok, passed, rate, rel_tol)[0], runs[0]


def add_intervals(table, names: list[str], cands: dict, built: dict, job: Job,
                  spread: float, rel_tol: float, target_rate: float | None,
                  run: Runner) -> tuple:
    """(``table`` with the interval columns, runs): the interval of each candidate of
    ``names`` that meets the SLO somewhere, from its row's bracket (``max_rate_per_s``,
    ``fail_rate_per_s``); the other rows' are empty. ``cands``/``built``: each name's
    Candidate and validated scenario; ``run``: a ``plan_walk.Runner``."""
    rows = table.set_index("candidate")
    todo = [n for n in names if rows.loc[n, "max_rate_per_s"] > 0]
    args = []
    for n in todo:
        lo, hi = rows.loc[n, "max_rate_per_s"], rows.loc[n, "fail_rate_per_s"]
        for end in plan_ends(cands[n], built[n], spread):
            args.append((job, cands[n], built[n], end, float(lo), float(hi), rel_tol))
    found = run("interval", end_rate, args)
    cols: dict[str, dict] = {}
    for i, n in enumerate(todo):
        (low, _), (high, _) = found[2 * i], found[2 * i + 1]
        cols[n] = {**interval_columns(low, high, int(rows.loc[n, "gpus"]), target_rate),
                   "timing_error": args[2 * i][3].scale - 1.0}
    out = table.copy()
    for key in ("max_rate_low_per_s", "max_rate_high_per_s", *(
            f"{w}_for_target_{k}" for w in ("replicas", "gpus") for k in ("low", "high")
            if target_rate is not None), "timing_error"):
        out[key] = [cols.get(n, {}).get(key, math.nan) for n in out["candidate"]]
    return out, sum(r for _, r in found)


def interval_columns(low: float, high: float, gpus: int, target_rate: float | None) -> dict:
    """The table's interval columns from an interval's (low, high) passing rates; with a
    target rate, the replicas (and GPUs: ``gpus`` a replica) it needs at each end."""
    row = {"max_rate_low_per_s": low, "max_rate_high_per_s": high}
    if target_rate is not None:
        for key, rate in (("high", low), ("low", high)):
            n = math.ceil(target_rate / rate) if rate else math.inf
            row[f"replicas_for_target_{key}"] = n
            row[f"gpus_for_target_{key}"] = n * gpus
    return row


def candidate_intervals(table, base: dict, candidates: list[Candidate], slo: dict,
                        source: str, spread: float, rel_tol: float,
                        target_rate: float | None, doc: dict | None = None, sets=(),
                        workers: int = 1, progress=None) -> tuple:
    """``add_intervals`` for every row of ``sim.studies.plan.plan``'s table of
    ``candidates`` (each built again at the scenario's rate)."""
    r0 = float(base["workload"]["rate_per_s"])
    try:
        built = {c.name: build_for(base, c, r0, source, doc, sets)[0] for c in candidates}
        return add_intervals(table, [c.name for c in candidates],
                             {c.name: c for c in candidates}, built,
                             Job(base, slo, source, doc, tuple(sets)), spread, rel_tol,
                             target_rate, Runner(workers, progress))
    except KeyboardInterrupt:
        raise Interrupted("plan interrupted while finding the ranges; nothing was "
                          "written") from None
