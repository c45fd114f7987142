"""Capacity planning: the highest request rate each candidate deployment serves within an SLO,
the replicas a target rate needs, and what a million output tokens cost.

A candidate is a set of scenario overrides (GPU type, TP, ...) plus one speculation policy.
For each, the simulator runs the scenario (its seed, its request count) with that policy as
the only variant at a trial ``workload.rate_per_s`` and checks the SLO: every request
finished, and each ``<metric>_p<q>`` percentile (TTFT, TPOT, end-to-end, over finished
requests as in ``sim.summary``) at or below its limit. The search doubles (or halves) the
rate from the scenario's own until the SLO flips, then bisects until the failing rate is
within ``rel_tol`` (default 5%) of the passing one; the passing rate is reported. With a
fixed seed, arrivals at rate r are the same draws scaled by 1/r, so runs at different rates
differ only by load.

A finite run can meet any SLO at a rate the deployment cannot sustain: with few requests, or
a loose SLO, all of them arrive before the queue has grown enough to break it, and doubling
would never stop. So a passing trial must also keep up: its completion rate (requests
finished per second between the first and the last completion) at least ``KEEP_UP`` (half)
of the offered rate. Below that the requests came as one burst, or piled up in a queue the
deployment drains at its own, lower, rate. Such a pass is refused (``UserError``, with the
numbers): the run is too short or the SLO too loose for the search to find a limit; more
``run.requests`` or a tighter SLO does.

Costs: a candidate deployment occupies ``deployment.replicas`` × (``tp × pp`` GPUs, plus
one for a draft placed ``separate``) at the catalog's ``price_per_hour_usd``; the cost per
million output tokens is that hourly price over the output tokens per hour at the highest
passing rate (that rate × the run's mean output tokens per request). Replicas for a target
rate (``replicas_for_target``, in copies of the whole candidate deployment) = ceil(target /
highest rate): it assumes the load spreads evenly over the copies.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hardware import load_catalog
from sim.build import setups
from sim.engines.sglang import launch_command
from sim.engines.trtllm import serve_command as trtllm_serve
from sim.engines.vllm import serve_command
from sim.loading import display_path, read_yaml, validate_overridden
from sim.paths import resolve_file
from sim.pool import in_processes
from sim.runner import build_overridden, run_setups
from sim.summary import latencies
from specdec.errors import Interrupted, UserError

_SLO_KEY = re.compile(r"^(ttft|tpot|e2e)_p(\d+(?:\.\d+)?)$")
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def parse_slo(text: str) -> dict[str, float]:
    """``'ttft_p99=2s,tpot_p50=50ms'`` -> {'ttft_p99_s': 2.0, 'tpot_p50_s': 0.05}."""
    slo = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        m = _SLO_KEY.match(key.strip())
        if not sep or m is None or not 0 < float(m.group(2)) <= 100:
            raise UserError(f"--slo {text}: {part.strip()!r} must look like ttft_p99=2s "
                            f"(metrics ttft, tpot, e2e; percentile in (0, 100])")
        num = re.match(r"^\s*([0-9.eE+-]+)\s*(s|ms|us)?\s*$", value)
        try:
            seconds = float(num.group(1)) * _UNITS[num.group(2) or "s"] if num else None
        except ValueError:
            seconds = None
        if seconds is None or not 0 < seconds < math.inf:
            raise UserError(f"--slo {text}: {key.strip()}: need a positive time such as 2s, "
                            f"50ms, got {value!r}")
        if f"{key.strip()}_s" in slo:  # the last would win, silently
            raise UserError(f"--slo {text}: {key.strip()}: given twice")
        slo[f"{key.strip()}_s"] = seconds
    return slo


def slo_from_scenario(scenario) -> dict[str, float]:
    """The scenario's ``slo`` section as an SLO dict (unset targets left out)."""
    return {k: v for k, v in scenario.slo.model_dump().items() if v is not None}


def measure_slo(requests, slo: dict[str, float]) -> tuple[bool, dict[str, float]]:
    """(all finished and every percentile within its limit, the measured percentiles)."""
    lat = latencies(requests)
    measured, ok = {}, bool(requests.column("finished").all())
    for key, limit in slo.items():
        metric, q = _SLO_KEY.match(key.removesuffix("_s")).groups()
        x = lat[metric]
        value = float(np.percentile(x, float(q))) if len(x) else math.inf
        measured[key] = value
        ok = ok and value <= limit
    return ok, measured


@dataclass(frozen=True)
class Candidate:
    """A deployment to price: scenario overrides and the one speculation policy it runs."""

    name: str
    overrides: dict = field(default_factory=dict)
    policy: dict = field(default_factory=lambda: {"kind": "none"})
    # How an error names this candidate, e.g. 'cands.yaml candidates.1 h100-tp3'.
    origin: str = ""
    # the variant's own drafter and acceptance ({"drafter": ..., "acceptance": ...}), if any
    variant: dict = field(default_factory=dict)

    def set_args(self, rate: float | None = None) -> list[str]:
        """The ``specsim run --set`` arguments that reproduce this candidate at ``rate``."""
        args = [f"{k}={json.dumps(v)}" for k, v in self.overrides.items()]
        args.append("variants=" + json.dumps([{"name": self.name, "policy": self.policy,
                                               **self.variant}]))
        if rate is not None:
            args.append(f"workload.rate_per_s={rate!r}")
        return args

    def labels(self, rate: float | None = None) -> list[str]:
        """How an error names each of ``set_args(rate)``: the candidate, then the field."""
        who = self.origin or f"candidate {self.name}"
        out = [f"{who} set {a}" for a in self.set_args()[:-1]]
        out.append(f"{who} policy {json.dumps(self.policy)}")
        if rate is not None:
            out.append(f"plan's trial workload.rate_per_s={rate!r}")
        return out


def load_candidates(path: str | Path) -> list[Candidate]:
    """Read ``candidates: [{name, set: {dotted.key: value}, policy: {...}}]`` from YAML."""
    p = Path(path)
    src = display_path(p)
    items = read_yaml(p, "candidates file").get("candidates")
    if not isinstance(items, list) or not items:
        raise UserError(f"{src}: candidates: must be a non-empty list")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) - {"name", "set", "policy", "drafter",
                                                      "acceptance"} or "name" not in item:
            raise UserError(f"{src}: candidates.{i}: needs name, optional set, policy, "
                            f"drafter and acceptance only, got {item!r}")
        overrides = item.get("set") or {}
        if not isinstance(overrides, dict):
            raise UserError(f"{src}: candidates.{i}.set: must be a mapping of dotted keys")
        out.append(Candidate(str(item["name"]), dict(overrides),
                             item.get("policy") or {"kind": "none"},
                             f"{src} candidates.{i} {item['name']}",
                             {k: item[k] for k in ("drafter", "acceptance") if k in item}))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise UserError(f"{src}: candidates: names must be unique, got {names}")
    return out


def _layers(base: dict, cand: Candidate, rate: float, doc: dict | None, sets) -> tuple:
    """(document, overrides, labels, resolve_at) of ``cand`` at ``rate``: its overrides on the
    resolved ``base``, or, given ``doc``, on the file's ``doc`` resolved with ``sets``."""
    texts, labels = cand.set_args(rate), cand.labels(rate)
    if doc is None:
        return base, texts, labels, None
    return (doc, [*sets, *texts], [*(f"--set {t}" for t in sets), *labels], len(sets))


def scenario_for(base: dict, cand: Candidate, rate: float, source: str,
                 doc: dict | None = None, sets=()):
    """The validated scenario of ``cand`` at ``rate`` (what ``specsim run`` would run); a
    problem names the candidate field (or ``--set``) that brought it in."""
    d, texts, labels, resolve_at = _layers(base, cand, rate, doc, sets)
    return validate_overridden(d, texts, source, labels, resolve_at)


def build_for(base: dict, cand: Candidate, rate: float, source: str,
              doc: dict | None = None, sets=()):
    """``(scenario, setups)`` of ``cand`` at ``rate``: validated and built, a problem (unknown
    GPU, TP, memory) named as in ``scenario_for``."""
    d, texts, labels, resolve_at = _layers(base, cand, rate, doc, sets)
    return build_overridden(d, texts, source, labels, resolve_at)


@dataclass(frozen=True)
class RateSearch:
    """Outcome of the rate search for one candidate."""

    max_rate_per_s: float  # highest rate found to meet the SLO (0 if none did)
    fail_rate_per_s: float  # lowest rate found to miss it (inf if none did)
    runs: int
    summary: dict | None  # sim.summary of the run at max_rate_per_s
    measured: dict  # the SLO percentiles at max_rate_per_s


KEEP_UP = 0.5  # a passing trial must complete at least this share of the offered rate


@dataclass(frozen=True)
class Trial:
    """One run of a candidate at one rate: whether it met the SLO, its summary (with
    ``output_tokens_per_request``), the SLO percentiles, what its policy did
    (``controller_stats``), and whether it kept up (completed at least ``KEEP_UP`` of the
    offered rate)."""

    ok: bool
    summary: dict
    measured: dict
    controller: dict
    keeps_up: bool = True


def controller_stats(totals) -> dict:
    """What a run's policy did, from its iterations' totals: the mean draft length per
    decoding sequence step (``mean_k``), the share of those steps that drafted none
    (``off_share``) and the time-weighted batch (``batch``)."""
    seqs = np.asarray(totals.seqs_by_gamma, dtype=np.float64)  # [max gamma + 1]
    steps = float(seqs.sum())
    return {"mean_k": float(seqs @ np.arange(len(seqs))) / steps if steps else 0.0,
            "off_share": float(seqs[0]) / steps if steps else 1.0,
            "batch": totals.batch_size_s / totals.busy_s if totals.busy_s else 0.0}


def at_rate(scenario, rate: float, source: str):
    """``(scenario, setups)`` of a validated ``scenario`` (a candidate's, built once) at
    ``rate``: only the rate changes, so it is not validated again (``rate`` > 0)."""
    sc = scenario.model_copy(update={"workload": scenario.workload.model_copy(
        update={"rate_per_s": float(rate)})})
    return sc, setups(sc, source)


def run_trial(base: dict, cand: Candidate, rate: float, slo: dict[str, float], source: str,
              doc: dict | None = None, sets=(), keep_up: bool = True,
              scenario=None) -> Trial:
    """Run ``cand`` at ``rate`` and check ``slo``; with ``keep_up``, a pass that does not
    keep up (completes under ``KEEP_UP`` of the offered rate) is refused (``UserError``:
    the run is too short or the SLO too loose to find a limit). ``scenario``: the
    candidate's validated scenario at another rate, to build from (``at_rate``) instead of
    validating its overrides again."""
    try:
        built = at_rate(scenario, rate, source) if scenario is not None else None
    except UserError:  # named by the override that brought it in, below
        built = None
    if built is None:
        built = build_for(base, cand, rate, source, doc, sets)
    # the summary and the request records: the iteration rows are not kept
    res = run_setups(*built, iteration_rows=False)
    reqs = res.variants[0].requests
    ok, measured = measure_slo(reqs, slo)
    summary = dict(res.summaries[0])
    summary["output_tokens_per_request"] = float(np.mean(reqs.column("output_tokens")))
    ends = np.sort(reqs.column("finished_at")[reqs.column("finished")])
    done = (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) > 1 and ends[-1] > ends[0] \
        else math.inf
    keeps_up = done >= KEEP_UP * rate
    if keep_up and ok and not keeps_up:
        span = float(reqs.column("arrival_at").max(initial=0.0))
        raise UserError(
            f"{source}: candidate {cand.name}: the SLO still holds at {rate:.4g} req/s, but "
            f"the run completes only {done:.4g} req/s ({len(reqs)} requests arrive within "
            f"{span:.3g} s): the run is too short or the SLO too loose to find a rate "
            f"limit; raise run.requests or tighten the SLO")
    return Trial(ok, summary, measured, controller_stats(res.variants[0].totals), keeps_up)


def check_arrivals(base: dict, source: str) -> None:
    """Refuse a scenario whose arrivals do not follow ``workload.rate_per_s``."""
    if base.get("workload", {}).get("arrivals") not in ("poisson", "gamma"):
        raise UserError(f"{source}: workload.arrivals: plan needs rate-driven arrivals "
                        f"(poisson or gamma), got {base.get('workload', {}).get('arrivals')!r}")


def search_rate(base: dict, cand: Candidate, slo: dict[str, float], source: str,
                rel_tol: float = 0.05, max_steps: int = 40, doc: dict | None = None,
                sets=()) -> RateSearch:
    """Bisection over the arrival rate for the highest rate that meets ``slo``. ``doc`` and
    ``sets``: the file's document and ``--set`` overrides behind ``base``, for errors."""
    check_arrivals(base, source)
    cache: dict[float, tuple] = {}

    def trial(rate: float) -> bool:
        t = run_trial(base, cand, rate, slo, source, doc, sets)
        cache[rate] = (t.ok, t.summary, t.measured)
        return t.ok

    lo, hi = 0.0, math.inf
    rate = float(base["workload"]["rate_per_s"])
    for _ in range(max_steps):  # bracket: double up from a pass, halve down from a fail
        if trial(rate):
            lo, rate = rate, rate * 2
        else:
            hi, rate = rate, rate / 2
        if lo > 0 and hi < math.inf:
            break
    if lo > 0 and hi < math.inf:
        lo, hi = bisect(trial, lo, hi, rel_tol, max_steps - len(cache))
    if lo == 0.0:
        return RateSearch(0.0, hi, len(cache), None, {})
    _, summary, measured = cache[lo]
    return RateSearch(lo, hi, len(cache), summary, measured)


def bisect(trial: Callable[[float], bool], lo: float, hi: float, rel_tol: float,
           budget: float = math.inf) -> tuple[float, float]:
    """(passing, failing) rate after halving [``lo``, ``hi``] -- ``lo`` passing, ``hi``
    failing, ``trial(rate)`` whether a rate passes -- until ``hi`` <= ``lo`` (1 +
    ``rel_tol``) or ``budget`` trials have run."""
    runs = 0
    while hi > lo * (1 + rel_tol) and runs < budget:
        mid = 0.5 * (lo + hi)
        runs += 1
        if trial(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def gpu_price(sc, cand: Candidate) -> tuple[str, int, float]:
    """(GPU id, GPUs of all its replicas, USD per GPU-hour) of a candidate's built scenario
    ``sc``; a P/D one's GPUs are both pools' ("h200+h100" where they differ, at the
    GPU-weighted mean price)."""
    if sc.disaggregation is not None:
        from sim.pd_pools import pool_scenario

        parts = [gpu_price(pool_scenario(sc, role), cand) for role in ("prefill", "decode")]
        gpus = sum(n for _, n, _ in parts)
        return ("+".join(dict.fromkeys(g for g, _, _ in parts)), gpus,
                sum(n * price for _, n, price in parts) / gpus)
    d = sc.deployment
    dp = d.ep // d.tp if d.ep > d.tp else 1  # data-parallel attention groups (MoE)
    gpus = d.tp * d.pp * dp + (1 if d.draft_placement == "separate"
                          and cand.policy.get("kind") != "none" else 0)
    return d.gpu, gpus * d.replicas, _catalog(sc).gpu(d.gpu).price_per_hour_usd


def _candidate_row(base: dict, cand: Candidate, sc, slo: dict[str, float], source: str,
                   rel_tol: float, doc: dict | None, sets, target_rate: float | None) -> dict:
    """The plan's row for one candidate (``sc``: it built at the scenario's rate): its rate
    limit under ``slo``, what that costs, and how to run it."""
    found = search_rate(base, cand, slo, source, rel_tol, doc=doc, sets=sets)
    return candidate_row(cand, sc, found, rel_tol, target_rate)


def candidate_row(cand: Candidate, sc, found: RateSearch, rel_tol: float,
                  target_rate: float | None) -> dict:
    """The plan's row for ``cand`` (``sc``: its built scenario) given its rate search
    ``found``: the rate limit, what that costs, and how to run it."""
    gpu, gpus, price = gpu_price(sc, cand)
    s = found.summary or {}
    per_hour = price * gpus
    # Sustained output rate: requests/s x output tokens per request (the run's own
    # throughput also counts the final drain, when the queue empties).
    thr = found.max_rate_per_s * s.get("output_tokens_per_request", 0.0)
    dis = sc.disaggregation  # a P/D candidate: its prefill:decode replicas
    row = {"candidate": cand.name, "gpu": gpu, "gpus": gpus,
           "pd": f"{dis.prefill.replicas}:{dis.decode.replicas}" if dis is not None else "",
           "policy": cand.policy.get("kind"), "max_rate_per_s": found.max_rate_per_s,
           "fail_rate_per_s": found.fail_rate_per_s, "rel_tol": rel_tol,
           "runs": found.runs, "output_tokens_per_s": thr,
           "usd_per_hour": per_hour,
           "usd_per_million_tokens": per_hour / (thr * 3600) * 1e6 if thr else math.inf}
    row.update({f"measured_{k}": v for k, v in found.measured.items()})
    # the Pareto axes: what each GPU serves against what each user sees
    tpot = s.get("tpot_mean_s")
    row["output_tokens_per_s_per_gpu"] = thr / gpus if gpus else math.nan
    row["user_tokens_per_s"] = 1.0 / tpot if tpot else math.nan
    row.update(engine_commands(sc, _catalog(sc)))
    if target_rate is not None:
        n = math.ceil(target_rate / found.max_rate_per_s) if found.max_rate_per_s else None
        row["replicas_for_target"] = n
        row["gpus_for_target"] = n * gpus if n else math.inf
        row["usd_per_hour_for_target"] = n * per_hour if n else math.inf
    row["run_args"] = " ".join(f"--set '{a}'" for a in cand.set_args(found.max_rate_per_s))
    return row


def engine_commands(sc, catalog) -> dict:
    """How to run the built candidate ``sc`` (its one variant) on each engine, with what the
    command cannot say: ``vllm_serve``, ``sglang_launch``, ``trtllm_serve`` and
    ``trtllm_config``, each with ``_notes``; for a P/D candidate a line per pool
    (``sim.pd_pools.pool_commands``)."""
    v = sc.variants[0]
    row = {}
    if sc.disaggregation is not None:
        from sim.pd_pools import pool_commands

        for key, engine in (("vllm_serve", "vllm"), ("sglang_launch", "sglang")):
            row[key], notes = pool_commands(sc, v, catalog, engine)
            row[f"{key}_notes"] = "; ".join(notes)
        row["trtllm_serve"], row["trtllm_config"] = "", ""
        row["trtllm_serve_notes"] = ("not written for P/D: TensorRT-LLM's disaggregated "
                                     "serving takes a config of context and generation "
                                     "servers (trtllm-serve disaggregated)")
        return row
    row["vllm_serve"], notes = serve_command(sc, v, catalog)
    row["vllm_serve_notes"] = "; ".join(notes)
    row["sglang_launch"], notes = launch_command(sc, v, catalog)
    row["sglang_launch_notes"] = "; ".join(notes)
    row["trtllm_serve"], row["trtllm_config"], notes = trtllm_serve(sc, v, catalog)
    row["trtllm_serve_notes"] = "; ".join(notes)
    return row


def plan(base: dict, candidates: list[Candidate], slo: dict[str, float], source: str,
         target_rate: float | None = None, rel_tol: float = 0.05,
         progress=None, doc: dict | None = None, sets=(), workers: int = 1) -> pd.DataFrame:
    """One row per candidate, cheapest first (per target rate if given, else per million
    output tokens); infeasible candidates last. ``progress(name)`` after each candidate.

    Each candidate is built first at the scenario's rate, so a bad one (unknown GPU, TP that
    does not divide the heads, a model that does not fit) is refused before any search,
    naming the candidate field that brought it in (or, given the file's ``doc`` and the
    ``--set`` overrides ``sets`` behind ``base``, the override). ``workers`` > 1 searches
    that many candidates at once in local processes; the table is the same either way
    (each search is seeded by the scenario alone)."""
    if not slo:
        raise UserError(f"{source}: no SLO: give --slo or set slo: in the scenario")
    if target_rate is not None and not target_rate > 0:
        raise UserError(f"--target-rate: must be > 0, got {target_rate}")
    if workers < 1:
        raise UserError(f"--workers: must be >= 1, got {workers}")
    rate0 = float(base["workload"]["rate_per_s"])
    rows: list = [None] * len(candidates)
    try:  # an interrupt while the candidates are built says so too: none had finished
        built = [build_for(base, cand, rate0, source, doc, sets)[0] for cand in candidates]
        args = [(base, cand, sc, slo, source, rel_tol, doc, sets, target_rate)
                for cand, sc in zip(candidates, built, strict=True)]
        if workers == 1 or len(args) == 1:
            for i, a in enumerate(args):
                rows[i] = _candidate_row(*a)
                if progress:
                    progress(candidates[i].name)
        else:
            def done(i: int, row: dict) -> None:
                rows[i] = row
                if progress:
                    progress(candidates[i].name)

            in_processes(_candidate_row, args, min(workers, len(args)), done)
    except KeyboardInterrupt:
        done = [c.name for c, r in zip(candidates, rows, strict=True) if r is not None]
        raise Interrupted(f"{len(done)} of {len(candidates)} plan candidates had finished"
                          + (f" ({', '.join(done)})" if done else "")
                          + "; nothing was written") from None
    return ranked(rows, target_rate)


def ranked(rows: list[dict], target_rate: float | None) -> pd.DataFrame:
    """The rows as a table, cheapest first (per target rate if given, else per million
    output tokens; ties: the higher rate first), infeasible last, with ``rank``, the
    ``cheapest`` mark and the ``pareto`` front."""
    table = pd.DataFrame(rows)
    key = "usd_per_hour_for_target" if target_rate is not None else "usd_per_million_tokens"
    table = table.sort_values([key, "max_rate_per_s"], ascending=[True, False],
                              kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    table["cheapest"] = [i == 0 and math.isfinite(table.loc[0, key]) for i in range(len(table))]
    table["pareto"] = pareto_front(table["output_tokens_per_s_per_gpu"],
                                   table["user_tokens_per_s"])
    return table


def pareto_front(x: pd.Series, y: pd.Series) -> list[bool]:
    """Whether each point is on the front: no other point is at least as good on both axes
    and better on one (higher is better on both; nan points are never on it)."""
    pts = list(zip(x.tolist(), y.tolist(), strict=True))
    out = []
    for i, (a, b) in enumerate(pts):
        if math.isnan(a) or math.isnan(b):
            out.append(False)
            continue
        out.append(not any(j != i and c >= a and d >= b and (c > a or d > b)
                           for j, (c, d) in enumerate(pts) if not (math.isnan(c)
                                                                    or math.isnan(d))))
    return out


def _catalog(sc):
    return load_catalog([resolve_file(sc.deployment.catalog)] if sc.deployment.catalog
                        else None)
