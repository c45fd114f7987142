"""Summary numbers of a run, from its records (numpy only; DataFrames are for ``reports/``).

Definitions:

- TTFT = first_token_at − arrival_at; TPOT = (finished_at − first_token_at) / (output − 1)
  over finished requests with more than one output token; end-to-end = finished_at −
  arrival_at. Percentiles over finished requests (TTFT: over requests that got a token).
- Throughput is what the run delivered over the span its requests occupied, from the first
  arrival to the last completion, or to the end of the run (the horizon) when some request
  was still queued or running then (:func:`span_s`; a horizon far past the last completion,
  as in the whole-trace recipe ``run: {requests: null, horizon_s: H}``, adds nothing to the
  span): ``throughput_tokens_per_s`` = output
  tokens emitted / span, ``requests_per_s`` (= ``served_rate_per_s``) = requests finished /
  span. As the offered load rises past what the deployment serves, the span shrinks to
  the time the work takes at capacity, so these numbers rise to the capacity and stay there:
  they never fall with more load. Below capacity they are the offered rate, a little less in
  a short run (the span includes draining the last requests). ``offered_rate_per_s`` =
  requests / arrival window. Whether the run is overloaded, and other conditions a planner
  must see, are ``sim.health``'s (``overloaded``, ``warnings``).
- ``itl_p50_s``, ``itl_p99_s``: inter-token latency as vLLM's benchmark defines it, the
  gaps between consecutive output chunks of each request (one chunk per verify: with
  speculation a chunk carries several tokens), over all requests; from the engine's ITL
  histogram (0.1% bins).
- ``acceptance_rate`` = accepted / drafted tokens, and ``mean_acceptance_length`` = 1 +
  accepted / draft steps, as vLLM defines them.
- ``tokens_per_verify`` = (accepted + verify steps) / verify steps: tokens a verify yields
  before capping at the request's end, the lecture's "tokens per verification".
- ``formula_tokens_per_verify``: the i.i.d. formula E(α̂, γ) at the measured α̂ = accepted
  / checked guesses (lecture §4.5), averaged over decode steps with each iteration's γ
  (chain policies only; ``None`` for trees, where no such formula applies).
- What is taken of the iterations comes from their totals (``sim.records.IterationTotals``),
  which a run keeps whether or not it keeps the rows: the same numbers either way.
- ``prefix_hit_rate``: vLLM's prefix cache hit rate (``PrefixCacheStats``, whose queries
  are a request's tokens and hits its cached tokens when first scheduled; preempted
  requests' lookups are kept apart, as vLLM does): Σ ``cached_tokens`` / Σ prompt tokens
  over the requests that were scheduled; ``prefix_cached_tokens``: Σ ``cached_tokens``, the
  prompt tokens not prefilled thanks to the cache. Both ``None`` without
  ``scheduler.prefix_caching``. With a CPU tier below the cache (``sim.offload``) it
  stays the GPU's, and ``cpu_hit_rate`` and the loads are :func:`offload_stats`'.
- ``speedup_vs_none``: mean TPOT of the first variant whose policy is ``none`` over this
  variant's (how much faster decoding is per token), ``speedup_tpot_p99``: the same ratio
  of p99 TPOTs (the tail); ``None`` without such a variant.
"""

from __future__ import annotations

import numpy as np

from sim.health import overload, warnings
from sim.log import ItlHistogram
from sim.records import IterationTotals, Records, RequestRecord


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
    requests: Records[RequestRecord], totals: IterationTotals
) -> float | None:
    """E(α̂, γ) averaged over decode steps, γ per iteration = rint(drafted / decoding
    sequences): from the decode steps at each γ (``totals.seqs_by_gamma``)."""
    from specdec import expected_tokens

    checked = int(_col(requests, "checked_tokens", np.int64).sum())
    accepted = int(_col(requests, "accepted_tokens", np.int64).sum())
    seqs = np.asarray(totals.seqs_by_gamma, dtype=np.float64)  # [max γ + 1]
    if checked == 0 or seqs.sum() == 0:
        return None
    alpha = accepted / checked
    e = np.asarray(expected_tokens(alpha, np.arange(len(seqs))), dtype=np.float64)
    return float((e * seqs).sum() / seqs.sum())


def prefix_stats(requests: Records[RequestRecord]) -> dict[str, float | int | None]:
    """``prefix_hit_rate`` and ``prefix_cached_tokens`` (module docstring) of a run with
    prefix caching; the rate is None when no request was scheduled."""
    looked_up = ~np.isnan(_col(requests, "first_scheduled_at"))
    cached = int(_col(requests, "cached_tokens", np.int64)[looked_up].sum())
    queried = int(_col(requests, "prompt_tokens", np.int64)[looked_up].sum())
    return {"prefix_hit_rate": cached / queried if queried else None,
            "prefix_cached_tokens": cached}


def itl_percentile(counts: np.ndarray | None, q: float) -> float | None:
    """The q-th percentile of the ITL histogram ``counts`` (``sim.log.ItlHistogram``): the
    geometric middle of the bin that holds it (0.1% wide)."""
    if counts is None or not counts.any():
        return None
    i = int(np.searchsorted(np.cumsum(counts), q / 100.0 * counts.sum()))
    edges = ItlHistogram.edges()
    return float(np.sqrt(edges[i] * edges[i + 1]))


def span_s(arrival_at, finished_at, end_at: float) -> float:
    """The seconds the requests occupied: from the first arrival to the last completion
    when every request finished (``finished_at`` nan where one did not), else to
    ``end_at``, the end of the run (the horizon), where some were still queued or running.
    ``reports.tables`` computes the same span from its frames."""
    arrival = np.asarray(arrival_at, dtype=np.float64)
    done = np.asarray(finished_at, dtype=np.float64)
    end = float(done.max()) if done.size and not np.isnan(done).any() else end_at
    return end - (float(arrival.min()) if arrival.size else 0.0)


def delivery_rates(arrival_at, finished_at, emitted: int, finished: int, end_at: float
                   ) -> dict[str, float | None]:
    """``throughput_tokens_per_s`` and ``requests_per_s`` over :func:`span_s` (the run
    ends at ``end_at``): see the module docstring. ``reports`` computes the same numbers
    from its frames with the same definition."""
    span = span_s(arrival_at, finished_at, end_at)
    if not span > 0:
        return {"throughput_tokens_per_s": None, "requests_per_s": None}
    return {"throughput_tokens_per_s": emitted / span, "requests_per_s": finished / span}


def summarize(name: str, requests: Records[RequestRecord], totals: IterationTotals,
              duration_s: float, chain: bool = True, itl: np.ndarray | None = None,
              kv_capacity_blocks: int | None = None, drafting: bool = False,
              prefix_caching: bool = False) -> dict:
    """The summary of one variant (the keys ``specsim run --json`` prints).

    ``totals``: the iterations' (``sim.runner.VariantResult.totals``, or
    ``IterationTotals.of_records`` of some rows); ``itl``: the run's ITL histogram counts;
    ``kv_capacity_blocks``: one replica's pool;
    ``drafting``: whether the variant's policy drafts (for the warnings, ``sim.health``);
    ``prefix_caching``: whether the KV pool cached prompt blocks (``prefix_hit_rate``).
    """
    lat = latencies(requests)
    emitted = int(_col(requests, "emitted_tokens", np.int64).sum())
    finished = len(lat["e2e"])
    steps = int(_col(requests, "verify_steps", np.int64).sum())
    drafts = int(_col(requests, "draft_steps", np.int64).sum())
    drafted = int(_col(requests, "drafted_tokens", np.int64).sum())
    accepted = int(_col(requests, "accepted_tokens", np.int64).sum())
    summary = {
        "name": name,
        "end_at": duration_s,
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
        "itl_p50_s": itl_percentile(itl, 50),
        "itl_p99_s": itl_percentile(itl, 99),
        **(rates := delivery_rates(_col(requests, "arrival_at"), _col(requests, "finished_at"),
                                   emitted, finished, duration_s)),
        "served_rate_per_s": rates["requests_per_s"],
        **overload(_col(requests, "arrival_at"), _col(requests, "finished_at")),
        "preemptions": int(_col(requests, "preemptions", np.int64).sum()),
        "recomputed_tokens": int(_col(requests, "recomputed_tokens", np.int64).sum()),
        **(prefix_stats(requests) if prefix_caching else
           {"prefix_hit_rate": None, "prefix_cached_tokens": None}),
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "tokens_per_verify": (accepted + steps) / steps if steps else None,
        "formula_tokens_per_verify": (
            formula_tokens_per_verify(requests, totals) if chain and drafts else None
        ),
        "speedup_vs_none": None,
        "speedup_tpot_p99": None,
        "warnings": [],
    }
    summary["warnings"] = warnings(summary, totals, kv_capacity_blocks, drafting)
    return summary


def transfer_stats(transfers) -> dict:
    """A P/D run's KV hand-offs (``sim.disagg``, its ``TransferRecord`` s): percentiles of
    the time on the link (``kv_transfer``: sent to arrived) and of the whole wait from the
    prefill's end until the KV is on the decode replica (``kv_wait``: the decode replica's
    queue for blocks and the link's included), and the prompt tokens decode replicas ran
    through their drafts because the draft's KV stayed behind."""
    c = transfers.columns
    done = ~np.isnan(c["kv_ready_at"])
    on_link = (c["kv_ready_at"] - c["sent_at"])[done]
    wait = (c["kv_ready_at"] - c["prefill_done_at"])[done]
    return {"kv_transfer_p50_s": _pct(on_link, 50), "kv_transfer_p99_s": _pct(on_link, 99),
            "kv_wait_p50_s": _pct(wait, 50), "kv_wait_p99_s": _pct(wait, 99),
            "kv_transfer_bytes": float(c["kv_bytes"].sum()),
            "draft_prefill_tokens": int(c["draft_prefill_tokens"].sum())}


def offload_stats(loads, tiers, requests: Records[RequestRecord]) -> dict:
    """A run with a CPU tier below the prefix cache (``sim.offload``; its ``LoadRecord`` s
    and ``TierRecord`` s): ``cpu_hit_rate``, the prompt tokens the first scheduling of the
    scheduled requests loaded from the CPU tier over their prompt tokens (the share
    ``prefix_hit_rate``, the GPU's, does not count: the two add up to the share not
    prefilled), the tokens loaded in all (``cpu_loaded_tokens``, loads after a preemption
    included) and the loads, percentiles of the wait from holding blocks to the KV on the
    GPU (``cpu_load``: the link's queue included) and of the time on the link, and the
    tiers' stored, evicted and held blocks and dropped offers (summed over replicas)."""
    c, t = loads.columns, tiers.columns
    looked_up = ~np.isnan(_col(requests, "first_scheduled_at"))
    queried = int(_col(requests, "prompt_tokens", np.int64)[looked_up].sum())
    first = c["first"] & (c["id"] < len(looked_up))
    first_ids = c["id"][first]
    hit = int(c["tokens"][first][looked_up[first_ids]].sum()) if len(first_ids) else 0
    done = ~np.isnan(c["ready_at"])
    wait = (c["ready_at"] - c["start_at"])[done]
    on_link = (c["ready_at"] - c["sent_at"])[done]
    return {"cpu_hit_rate": hit / queried if queried else None,
            "cpu_cached_tokens": hit,
            "cpu_loaded_tokens": int(c["tokens"].sum()), "cpu_loads": len(c["tokens"]),
            "cpu_load_p50_s": _pct(wait, 50), "cpu_load_p99_s": _pct(wait, 99),
            "cpu_link_p50_s": _pct(on_link, 50), "cpu_link_p99_s": _pct(on_link, 99),
            "cpu_stored_blocks": int(t["stored_blocks"].sum()),
            "cpu_evicted_blocks": int(t["evicted_blocks"].sum()),
            "cpu_held_blocks": int(t["held_blocks"].sum()),
            "cpu_dropped_offers": int(t["dropped_offers"].sum())}


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
    """Fill ``speedup_vs_none`` and ``speedup_tpot_p99`` against the no-speculation variant
    ``base_name``."""
    base = next((s for s in summaries if s["name"] == base_name), None)
    if base is None or not base["tpot_mean_s"]:
        return summaries
    for s in summaries:
        if s["tpot_mean_s"]:
            s["speedup_vs_none"] = base["tpot_mean_s"] / s["tpot_mean_s"]
        if s["tpot_p99_s"] and base["tpot_p99_s"]:
            s["speedup_tpot_p99"] = base["tpot_p99_s"] / s["tpot_p99_s"]
    return summaries
