"""Summary numbers of a run, from its records (numpy only; DataFrames are for ``reports/``).

Definitions:

- TTFT = first_token_at − arrival_at; TPOT = (finished_at − first_token_at) / (output − 1)
  over finished requests with more than one output token; end-to-end = finished_at −
  arrival_at. Percentiles over finished requests (TTFT: over requests that got a token).
- Throughput is measured over the steady window [first arrival, last arrival], not up to
  the last finish, which would count draining the queue after arrivals stop (a deployment
  that keeps up would look slower than its offered rate, and the faster drainer would look
  like the higher-throughput one): ``throughput_tokens_per_s`` = output tokens emitted by
  iterations that end inside the window / its length; ``requests_per_s`` = requests that
  finish inside it / its length. When the window is empty (an offline batch, every request
  arriving at t=0; or a single request) both fall back to the makespan: all emitted tokens
  and finished requests over the simulated duration. The window still holds the warm-up
  (requests that arrived in its first end-to-end latency finish inside it only in part), so
  a run only a few latencies long reads low; more ``run.requests`` shrinks that share.
- ``acceptance_rate`` = accepted / drafted tokens, and ``mean_acceptance_length`` = 1 +
  accepted / draft steps, as vLLM defines them.
- ``tokens_per_verify`` = (accepted + verify steps) / verify steps: tokens a verify yields
  before capping at the request's end, the lecture's "tokens per verification".
- ``formula_tokens_per_verify``: the i.i.d. formula E(α̂, γ) at the measured α̂ = accepted
  / checked guesses (lecture §4.5), averaged over decode steps with each iteration's γ
  (chain policies only; ``None`` for trees, where no such formula applies).
- ``speedup_vs_none``: mean TPOT of the first variant whose policy is ``none`` over this
  variant's (how much faster decoding is per token); ``None`` without such a variant.
"""

from __future__ import annotations

import numpy as np

from sim.records import IterationRecord, Records, RequestRecord


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if len(x) else None


def _col(records: Records, name: str, dtype=np.float64) -> np.ndarray:
    return records.columns[name].astype(dtype, copy=False)


def latencies(requests: Records[RequestRecord]) -> dict[str, np.ndarray]:
    """Arrays of TTFT, TPOT and end-to-end seconds (finished requests; TTFT: any first token)."""
    arrival = _col(requests, "arrival_at")
    first = _col(requests, "first_token_at")
    done = _col(requests, "finished_at")
    out = _col(requests, "output_tokens")
    fin = ~np.isnan(done)
    multi = fin & (out > 1)
    return {
        "ttft": (first - arrival)[~np.isnan(first)],
        "tpot": (done[multi] - first[multi]) / (out[multi] - 1),
        "e2e": (done - arrival)[fin],
    }


def formula_tokens_per_verify(
    requests: Records[RequestRecord], iterations: Records[IterationRecord]
) -> float | None:
    """E(α̂, γ) averaged over decode steps, γ per iteration = drafted / decoding sequences."""
    from specdec import expected_tokens

    checked = int(_col(requests, "checked_tokens", np.int64).sum())
    accepted = int(_col(requests, "accepted_tokens", np.int64).sum())
    seqs = _col(iterations, "decode_seqs")
    if checked == 0 or seqs.sum() == 0:
        return None
    gamma = _col(iterations, "drafted_tokens")[seqs > 0] / seqs[seqs > 0]
    alpha = accepted / checked
    e = np.asarray(expected_tokens(alpha, np.rint(gamma).astype(np.int64)), dtype=np.float64)
    return float((e * seqs[seqs > 0]).sum() / seqs.sum())


def window_rates(arrival_at, finished_at, iteration_end_at, iteration_emitted, emitted: int,
                 finished: int, duration_s: float) -> dict[str, float | None]:
    """``throughput_tokens_per_s`` and ``requests_per_s`` over the arrival window (see the
    module docstring) from plain arrays: requests' ``arrival_at`` and ``finished_at`` (NaN
    when unfinished), iterations' end times and ``emitted_tokens``; over the makespan
    ``duration_s`` (``emitted`` tokens, ``finished`` requests) when that window is empty.
    ``reports`` computes the same numbers from its frames through this function."""
    arrival = np.asarray(arrival_at, dtype=np.float64)
    first, last = (float(arrival.min()), float(arrival.max())) if arrival.size else (0.0, 0.0)
    if last > first:
        window = last - first
        ends = np.asarray(iteration_end_at, dtype=np.float64)
        done = np.asarray(finished_at, dtype=np.float64)
        tokens = np.asarray(iteration_emitted, dtype=np.int64)[(ends >= first) & (ends <= last)]
        return {"throughput_tokens_per_s": float(tokens.sum()) / window,
                "requests_per_s": int(((done >= first) & (done <= last)).sum()) / window}
    return {"throughput_tokens_per_s": emitted / duration_s if duration_s > 0 else None,
            "requests_per_s": finished / duration_s if duration_s > 0 else None}


def throughput(requests: Records[RequestRecord], iterations: Records[IterationRecord], emitted: int,
               finished: int, duration_s: float) -> dict[str, float | None]:
    """:func:`window_rates` of a variant's records."""
    return window_rates(
        _col(requests, "arrival_at"), _col(requests, "finished_at"),
        _col(iterations, "start_at") + _col(iterations, "duration_s"),
        _col(iterations, "emitted_tokens", np.int64), emitted, finished, duration_s)


def summarize(name: str, requests: Records[RequestRecord], iterations: Records[IterationRecord],
              duration_s: float, chain: bool = True) -> dict:
    """The summary of one variant (the keys ``specsim run --json`` prints)."""
    lat = latencies(requests)
    emitted = int(_col(requests, "emitted_tokens", np.int64).sum())
    finished = len(lat["e2e"])
    steps = int(_col(requests, "verify_steps", np.int64).sum())
    drafts = int(_col(requests, "draft_steps", np.int64).sum())
    drafted = int(_col(requests, "drafted_tokens", np.int64).sum())
    accepted = int(_col(requests, "accepted_tokens", np.int64).sum())
    return {
        "name": name,
        "requests": len(requests),
        "finished": finished,
        "ttft_p50_s": _pct(lat["ttft"], 50),
        "ttft_p90_s": _pct(lat["ttft"], 90),
        "ttft_p99_s": _pct(lat["ttft"], 99),
        "tpot_p50_s": _pct(lat["tpot"], 50),
        "tpot_p90_s": _pct(lat["tpot"], 90),
        "tpot_p99_s": _pct(lat["tpot"], 99),
        "tpot_mean_s": float(lat["tpot"].mean()) if len(lat["tpot"]) else None,
        "e2e_p50_s": _pct(lat["e2e"], 50),
        "e2e_p90_s": _pct(lat["e2e"], 90),
        "e2e_p99_s": _pct(lat["e2e"], 99),
        **throughput(requests, iterations, emitted, finished, duration_s),
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "tokens_per_verify": (accepted + steps) / steps if steps else None,
        "formula_tokens_per_verify": (
            formula_tokens_per_verify(requests, iterations) if chain and drafts else None
        ),
        "speedup_vs_none": None,
    }


def slo_verdict(summary: dict, ttft_p99_s: float | None, tpot_p99_s: float | None) -> str | None:
    """"met" / "missed" for a scenario's SLO (p99 TTFT and TPOT targets), or None without one.

    Unfinished requests count against it: an SLO is missed if any request is unfinished.
    """
    if ttft_p99_s is None and tpot_p99_s is None:
        return None
    ok = summary["finished"] == summary["requests"]
    for key, limit in (("ttft_p99_s", ttft_p99_s), ("tpot_p99_s", tpot_p99_s)):
        if limit is not None:
            ok = ok and summary[key] is not None and summary[key] <= limit
    return "met" if ok else "missed"


def add_speedups(summaries: list[dict], base_name: str | None) -> list[dict]:
    """Fill ``speedup_vs_none`` against the no-speculation variant ``base_name``."""
    base = next((s for s in summaries if s["name"] == base_name), None)
    if base is None or not base["tpot_mean_s"]:
        return summaries
    for s in summaries:
        if s["tpot_mean_s"]:
            s["speedup_vs_none"] = base["tpot_mean_s"] / s["tpot_mean_s"]
    return summaries
