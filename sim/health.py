"""Conditions a planner must see before trusting a run's numbers: overload, preemption
storms, a full KV pool, speculation the policy turned off.

- ``overloaded``: the queue grew without bound while requests arrived: over the second half
  of the arrival window the backlog (arrived − finished) grew by more than ``GROWTH_SHARE``
  (20%) of the requests that arrived in it, i.e. completions fell behind arrivals by that
  much. A stable system's backlog wanders around λ·latency, an overloaded one's grows in
  proportion to time (a run whose latency is as long as half its arrival window can look
  overloaded: it is too short to tell). Needs at least ``MIN_ARRIVALS`` arrivals in that
  half; ``None`` for arrivals with no window (an offline batch, a closed loop, one
  request).
- ``warnings``: one line each for overload; recompute above ``STORM_SHARE`` of the prefill
  tokens (a preemption storm); the KV pool at least ``FULL_SHARE`` used for more than half
  of the busy time; a drafting policy that gave no draft in more than half of the decoding
  iterations.
"""

from __future__ import annotations

import numpy as np

MIN_ARRIVALS = 10
GROWTH_SHARE = 0.20
STORM_SHARE = 0.10
FULL_SHARE = 0.95


def overload(arrival_at: np.ndarray, finished_at: np.ndarray) -> dict:
    """``overloaded`` (bool or None), ``offered_rate_per_s`` and ``backlog_growth`` (requests
    the backlog grew by over the second half of the arrivals)."""
    arrival = np.sort(np.asarray(arrival_at, dtype=np.float64))
    out = {"overloaded": None, "offered_rate_per_s": None, "backlog_growth": None}
    if len(arrival) < 2 or not arrival[-1] > arrival[0] or np.isnan(arrival).any():
        return out
    first, last = float(arrival[0]), float(arrival[-1])
    out["offered_rate_per_s"] = (len(arrival) - 1) / (last - first)
    mid = 0.5 * (first + last)
    done = np.asarray(finished_at, dtype=np.float64)
    done = done[~np.isnan(done)]

    def backlog(t: float) -> int:
        return int(np.searchsorted(arrival, t, side="right")) - int((done <= t).sum())

    arrived_2 = int(np.searchsorted(arrival, last, side="right")
                    - np.searchsorted(arrival, mid, side="right"))
    growth = backlog(last) - backlog(mid)
    out["backlog_growth"] = growth
    if arrived_2 >= MIN_ARRIVALS:
        out["overloaded"] = bool(growth > GROWTH_SHARE * arrived_2)
    return out


def warnings(summary: dict, totals, kv_capacity_blocks: int | None,
             drafting: bool) -> list[str]:
    """The warning lines of one variant from its summary and its iterations' totals
    (``sim.records.IterationTotals``, whose ``kv_full_s`` counts from ``FULL_SHARE`` of
    ``kv_capacity_blocks``)."""
    out = []
    if summary.get("overloaded"):
        out.append(
            f"overloaded: {summary['offered_rate_per_s']:.4g} req/s offered, "
            f"{summary['served_rate_per_s']:.4g} served; the backlog grew by "
            f"{summary['backlog_growth']} requests over the second half of the arrivals, so "
            "throughput is the capacity and latency percentiles grow with the run's length")
    prefill = totals.prefill_tokens
    recomputed = summary.get("recomputed_tokens") or 0
    if prefill and recomputed > STORM_SHARE * prefill:
        out.append(f"preemption storm: {summary['preemptions']} preemptions recomputed "
                   f"{recomputed} of {prefill} prefill tokens ({recomputed / prefill:.0%}); "
                   "the KV pool is too small for this load")
    busy = totals.busy_s
    if kv_capacity_blocks and totals.kv_full_blocks != FULL_SHARE * kv_capacity_blocks:
        raise ValueError(f"the totals count a full KV pool from {totals.kv_full_blocks} "
                         f"blocks, not {FULL_SHARE} of {kv_capacity_blocks}")
    if kv_capacity_blocks and busy > 0:
        full = totals.kv_full_s
        if full > 0.5 * busy:
            out.append(f"KV pool full: at least {FULL_SHARE:.0%} of the {kv_capacity_blocks} "
                       f"blocks in use for {full / busy:.0%} of the busy time")
    if drafting and totals.decoding_iterations:
        off = totals.undrafted_iterations / totals.decoding_iterations
        if off > 0.5:
            out.append(f"speculation off: the policy drafted nothing in {off:.0%} of the "
                       "decoding iterations")
    return out
