"""The simulator's speed benchmarks (``specsim bench``).

Two base workloads, each a scenario built here, and their variations (``sim.bench_workloads``:
each base's scenario with the overrides of one engine feature):

- ``speculative`` (the default): Llama-3-8B with a Llama-3.2-1B draft on one H100 at the
  default timing, fixed γ = 4, bursty acceptance (easy 0.95 / hard 0.3), prompts of 512 and
  outputs of 128 tokens, Poisson arrivals at a rate that keeps about 64 sequences running
  (Little's law: rate = 64 / the time one request spends in the system at that batch size,
  found by measuring the time-weighted batch at a few rates; ``SPECULATIVE_RATE_PER_S``).
- ``decode-heavy``: a request-trace replay of Llama-2-7B on one A100-80GB without
  speculation, under Sarathi-style chunked prefill (a 512-token budget per iteration, 512-token
  chunks): many cheap decode iterations per request, so it measures the cost of one
  iteration. The trace is written by ``decode_heavy_rows`` (seeded: Poisson arrivals at
  ``DECODE_HEAVY_RATE_PER_S``, lognormal prompts around 256 tokens and outputs around 512,
  both capped) into a temporary CSV that the scenario replays; writing it is not timed.

Each reports wall time, simulated requests, iterations and output tokens per wall second,
microseconds per iteration, the time-weighted batch and the process's peak resident memory
(peak RSS is the whole process's: run one workload per process to compare it), and the
engine path its iterations take, with the reason where they leave the fast path.
``run_all`` runs several and sets each one's µs per iteration beside its base's.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

from sim.bench_workloads import DECODE_HEAVY_RATE_PER_S, SPECULATIVE_RATE_PER_S, WORKLOADS
from sim.engine_path import AUTO, PATHS, EnginePath
from sim.loading import validate_overridden


def bench_scenario(requests: int, seed: int = 0, workload: str = "speculative",
                   trace_file: str | None = None, sets: list[str] | tuple[str, ...] = ()):
    """The benchmark scenario of ``workload`` (a name in ``WORKLOADS``: its base's scenario
    with its overrides) for ``requests`` requests (``decode-heavy`` and its variations
    replay ``trace_file``, see ``decode_heavy_rows``), with the ``--set`` overrides ``sets``
    after them (e.g. ``scheduler.prefix_caching=true``: how fast a setting runs)."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown bench workload {workload!r}")
    w = WORKLOADS[workload]
    if w.base == "speculative":
        doc = {
            "name": "bench",
            "models": {"target": "llama-3-8b", "draft": "llama-3.2-1b"},
            "workload": {"arrivals": "poisson", "rate_per_s": SPECULATIVE_RATE_PER_S,
                         "prompt": {"kind": "fixed", "tokens": 512},
                         "output": {"kind": "fixed", "tokens": 128}},
            "acceptance": {"kind": "bursty", "easy_alpha": 0.95, "hard_alpha": 0.3},
            "variants": [{"name": "fixed-g4", "policy": {"kind": "fixed", "gamma": 4}}],
            "run": {"requests": requests, "seed": seed},
        }
    else:
        if trace_file is None:
            raise ValueError("the decode-heavy bench replays a trace file")
        doc = {
            "name": "bench-decode-heavy",
            "models": {"target": "llama-2-7b", "draft": None},
            "deployment": {"gpu": "a100-80gb"},
            "scheduler": {"max_batched_tokens": 512, "chunk_tokens": 512},
            "workload": {"arrivals": "replay", "file": trace_file},
            "variants": [{"name": "none", "policy": {"kind": "none"}}],
            "run": {"requests": requests, "seed": seed},
        }
    overrides = [*w.sets, *sets]
    labels = [*(f"workload {workload}: {t}" for t in w.sets), *(f"--set {t}" for t in sets)]
    return validate_overridden(doc, overrides, f"bench ({workload})", labels)


def decode_heavy_rows(requests: int, seed: int = 0) -> str:
    """The decode-heavy trace as CSV text (``workloads.read_request_csv``'s format):
    Poisson arrivals at ``DECODE_HEAVY_RATE_PER_S``, prompts lognormal with median 256 and
    σ 0.8 (16..2048 tokens), outputs lognormal with median 512 and σ 0.6 (16..2048)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / DECODE_HEAVY_RATE_PER_S, requests))
    prompts = np.clip(np.rint(256 * rng.lognormal(0.0, 0.8, requests)), 16, 2048)
    outputs = np.clip(np.rint(512 * rng.lognormal(0.0, 0.6, requests)), 16, 2048)
    lines = ["arrival_at,prompt_tokens,output_tokens"]
    lines += [f"{a:.6f},{int(p)},{int(o)}" for a, p, o in zip(arrivals, prompts, outputs,
                                                               strict=True)]
    return "\n".join(lines) + "\n"


def _scenario(requests: int, seed: int, workload: str, sets, folder: str):
    """``bench_scenario`` of ``workload``, its decode-heavy trace (if it replays one)
    written into ``folder``."""
    trace = None
    if WORKLOADS[workload].base == "decode-heavy":
        trace = Path(folder) / "decode-heavy.csv"
        trace.write_text(decode_heavy_rows(requests, seed))
    return bench_scenario(requests, seed, workload, None if trace is None else str(trace),
                          sets)


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak / 1e3  # bytes vs KiB


def run_bench(requests: int, seed: int = 0, workload: str = "speculative",
              sets: list[str] | tuple[str, ...] = (), path: EnginePath = AUTO) -> dict:
    """Run one benchmark (with the overrides ``sets``, on the engine path ``path``);
    returns the figures ``specsim bench --json`` prints, with the fast paths its replicas
    take and why they leave the others to the reference scheduler (``sim.gate``)."""
    from sim.build import setups
    from sim.cluster import fast_paths, walks
    from sim.runner import run_setups

    with tempfile.TemporaryDirectory(prefix="specsim-bench-") as tmp:
        sc = _scenario(requests, seed, workload, sets, tmp)
        built = setups(sc, "bench")
        paths = fast_paths(built[0][1], path)
        engine, fallback = path_taken(paths, walks(built[0][1], path), path, requests)
        start, cpu = time.perf_counter(), time.process_time()
        # only summarised: the iteration rows are folded into their totals, not kept
        result = run_setups(sc, built, engine_path=path, iteration_rows=False)
        wall_s = time.perf_counter() - start
        cpu_s = time.process_time() - cpu
    v = result.variants[0]
    it = v.totals
    n_iter = it.iterations
    return {
        "workload": workload,
        "requests": requests,
        "wall_s": wall_s,
        "requests_per_s": requests / wall_s,
        # the process's CPU seconds over the same run (every thread's; a worker pool's
        # processes not counted): what a noisy machine's wall time overstates
        "cpu_s": cpu_s,
        "requests_per_cpu_s": requests / cpu_s if cpu_s > 0 else None,
        "iterations_per_s": n_iter / wall_s,
        "output_tokens_per_s": float(v.requests.column("output_tokens").sum()) / wall_s,
        "us_per_iteration": 1e6 * wall_s / max(n_iter, 1),
        "peak_rss_mb": peak_rss_mb(),
        # sequences in the batch, weighted by iteration time (Little's law's "in service")
        "mean_batch": it.batch_size_s / max(it.busy_s, 1e-12),
        "sets": list(sets),
        "fast_paths": paths,  # each fast path: None (taken) or why not
        "engine_path": engine,  # compiled, reference, or auto (see path_taken)
        "fallback": fallback,  # why its iterations leave the fast path, or None
        # the share of its iterations the compiled kernels formed: a path the gate opens may
        # still leave some iterations to the reference scheduler (preemptions, budget cuts)
        "compiled_share": v.compiled_iterations / n_iter if n_iter else None,
    }


# why a walk the gate opens still goes no further than the next arrival
NO_FEED = ("the walk stops at each arrival (replicas behind a router that reads their "
           "load, or a closed loop over several replicas)")


def path_taken(paths: dict[str, str | None], walks: bool, path: EnginePath,
               requests: int) -> tuple[str, str | None]:
    """Which path a run's iterations take, from the gate's ``paths`` (``fast_paths``) and
    whether the walk runs past arrivals (``walks``), and why it leaves the fast path (None
    where it does not): ``compiled`` where a fast path is open, ``reference`` where none is,
    ``auto`` where one is open but the auto path may leave it to the reference scheduler
    (a run under ``steady.KERNEL_REQUESTS`` requests: the kernels load only once this
    process has looked often enough)."""
    from sim import steady

    if paths["walk"] is not None and paths["steady"] is not None:
        return "reference", paths["walk"]
    small = path.kernels_after is None and requests < steady.KERNEL_REQUESTS
    engine = "auto" if small else "compiled"
    return engine, None if walks or paths["walk"] is not None else NO_FEED


WARMUP_REQUESTS = 50  # an untimed run before each of run_all's: loads the kernels it uses


def run_warm(requests: int, seed: int = 0, workload: str = "speculative",
             sets: list[str] | tuple[str, ...] = (), path: EnginePath = AUTO) -> dict:
    """``run_bench``, after ``WARMUP_REQUESTS`` of the same workload run untimed on the
    compiled path where the timed run will take the kernels (``_takes_kernels``): its
    figures hold neither the kernels' load (about 0.5 s, once per process and kind) nor
    their first compile (about a minute on 2 cores, once per install), which a run of its
    own would otherwise time; a run that takes no kernel loads none. ``compiled_kernels``:
    the kernels this process compiled rather than read from the cache (its peak RSS holds
    the compile's memory where there are any)."""
    from sim import steady_kernel

    if _takes_kernels(requests, workload, sets, path):
        run_bench(min(requests, WARMUP_REQUESTS), seed, workload, sets, PATHS["compiled"])
    row = run_bench(requests, seed, workload, sets, path)
    row["compiled_kernels"] = list(steady_kernel.COMPILED)
    return row


def _takes_kernels(requests: int, workload: str, sets, path: EnginePath) -> bool:
    """Whether a run of ``requests`` of ``workload`` on ``path`` takes the compiled
    kernels from its start: the engine path ``path_taken`` reports for it is
    ``compiled``."""
    from sim.build import setups
    from sim.cluster import fast_paths

    if not path.fast:  # (the reference path: nothing to build to know)
        return False
    with tempfile.TemporaryDirectory(prefix="specsim-bench-") as tmp:
        sc = _scenario(WARMUP_REQUESTS, 0, workload, sets, tmp)
        paths = fast_paths(setups(sc, "bench")[0][1], path)
    return path_taken(paths, False, path, requests)[0] == "compiled"


def run_all(requests: int, seed: int = 0, sets: list[str] | tuple[str, ...] = (),
            path: EnginePath = AUTO, names=None, progress=None) -> list[dict]:
    """``run_warm`` of every workload in ``names`` (default: all of ``WORKLOADS``), bases
    first and the others in the order given, each with ``x_fast_path``: its µs per
    iteration over its base workload's in this list (the base's own, 1; None where its
    base is not in ``names``).

    ``progress(i, n, name)`` is called before the i-th of n (from 1)."""
    names = list(WORKLOADS) if names is None else list(names)
    names.sort(key=lambda n: WORKLOADS[n].base != n)  # bases first, else in order
    rows: dict[str, dict] = {}
    for i, name in enumerate(names, 1):
        if progress is not None:
            progress(i, len(names), name)
        row = run_warm(requests, seed, name, sets, path)
        base = rows.get(WORKLOADS[name].base, row if WORKLOADS[name].base == name else None)
        row["x_fast_path"] = None if base is None else \
            row["us_per_iteration"] / base["us_per_iteration"]
        rows[name] = row
    return list(rows.values())

