"""The simulator's speed benchmark (``specsim bench``).

A fixed workload: Llama-3-8B with a Llama-3.2-1B draft on one H100, fixed γ = 4, bursty
acceptance (easy 0.95 / hard 0.3), prompts of 512 and outputs of 128 tokens, Poisson
arrivals at a rate that keeps about 64 sequences running (Little's law: rate = 64 / the
time one request spends in the system at that batch size, found by the ``RATE_PER_S``
calibration below). Reports wall time, simulated requests per wall second, iterations per
wall second and the process's peak resident memory.
"""

from __future__ import annotations

import resource
import sys
import time

from sim.loading import validate

# About 64 sequences in flight for this workload (measured: time-weighted batch 64.7).
RATE_PER_S = 37.0


def bench_scenario(requests: int, seed: int = 0):
    """The benchmark scenario for ``requests`` requests."""
    doc = {
        "name": "bench",
        "models": {"target": "llama-3-8b", "draft": "llama-3.2-1b"},
        "workload": {"arrivals": "poisson", "rate_per_s": RATE_PER_S,
                     "prompt": {"kind": "fixed", "tokens": 512},
                     "output": {"kind": "fixed", "tokens": 128}},
        "acceptance": {"kind": "bursty", "easy_alpha": 0.95, "hard_alpha": 0.3},
        "variants": [{"name": "fixed-g4", "policy": {"kind": "fixed", "gamma": 4}}],
        "run": {"requests": requests, "seed": seed},
    }
    return validate(doc, "bench")


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak / 1e3  # bytes vs KiB


def run_bench(requests: int, seed: int = 0) -> dict:
    """Run the benchmark; returns the figures ``specsim bench --json`` prints."""
    from sim.runner import run_scenario

    sc = bench_scenario(requests, seed)
    start = time.perf_counter()
    result = run_scenario(sc, "bench")
    wall_s = time.perf_counter() - start
    v = result.variants[0]
    it = v.iterations.columns
    return {
        "requests": requests,
        "wall_s": wall_s,
        "requests_per_s": requests / wall_s,
        "iterations_per_s": len(v.iterations) / wall_s,
        "peak_rss_mb": peak_rss_mb(),
        # sequences in the batch, weighted by iteration time (Little's law's "in service")
        "mean_batch": float(it["batch_size"] @ it["duration_s"]) / max(it["duration_s"].sum(),
                                                                      1e-12),
    }
