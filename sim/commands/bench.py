"""``specsim bench``: the simulator's own speed on a fixed benchmark workload."""

from __future__ import annotations

import argparse
import json
import sys

from sim.bench_workloads import WORKLOADS
from sim.commands._sets import add_set_flag
from sim.engine_path import HELP, PATHS
from sim.limits import MAX_REQUESTS

_HEAD = """\
Simulate a fixed benchmark workload and print how fast the simulator ran it: wall seconds,
simulated requests, iterations and output tokens per wall second (and requests per CPU
second of the process, which a busy machine does not inflate), microseconds per
iteration, the time-weighted batch, the process's peak memory, and the engine path its
iterations take (the compiled kernels or the reference scheduler) with the reason where
they leave the fast path.

The two base workloads: speculative is Llama-3-8B + Llama-3.2-1B draft on one H100
(default timing), gamma = 4, bursty acceptance, 512-token prompts and 128-token outputs,
Poisson arrivals at a rate that keeps ~64 sequences running; decode-heavy is a
request-trace replay of Llama-2-7B on one A100-80GB without speculation, Sarathi-style
chunked prefill (512-token budget), prompts around 256 and outputs around 512 tokens, ~32
sequences running: the cost of an iteration. Every other workload is speculative with one
engine feature set as it is used, at the arrival rate that keeps ~64 sequences running:

workloads:
"""
_TAIL = """\
  all                 every workload above, one after the other, into one table: the
                      engine path, us per iteration, that over its base's ("x fast": the
                      base takes the fast path), the batch, the share of iterations the
                      compiled kernels formed and the fall-back reason
                      (--json: a list); progress on stderr; peak memory is the whole
                      run's
"""
_NOTES = """
Before the timed run a few requests of the workload run untimed on the compiled path, so
that no figure holds the kernels' load (about 0.5 s) or their first compile after an
install (up to a minute or so, then cached). Peak memory is the whole process's, that
compile's included: compare it across runs of one workload each, and not on a run whose
compiled_kernels (--json) lists any. A run of 1,000 requests or more computes its
iterations with the compiled kernels (numba) from the start.
"""
_HELP = _HEAD + "".join(f"  {n:<19s} {w.line}\n" for n, w in WORKLOADS.items()) + _TAIL + _NOTES


def add_parser(subparsers) -> None:
    """Register ``specsim bench``."""
    p = subparsers.add_parser("bench", description=_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=[*WORKLOADS, "all"], default="speculative",
                   metavar="NAME",
                   help="a workload listed above, or all (default: speculative)")
    p.add_argument("--requests", type=int, default=100_000,
                   help=f"requests to simulate (default 100000); 1..{MAX_REQUESTS}")
    p.add_argument("--seed", type=int, default=0, help="seed of the workload")
    add_set_flag(p, "override a field of the benchmark scenario (repeatable), e.g. "
                        "scheduler.prefix_caching=true: how fast the engine runs it, and "
                        "which fast paths it leaves")
    p.add_argument("--engine-path", choices=list(PATHS), default="auto",
                   help="how the engine computes its iterations (as for specsim run): "
                        + "; ".join(f"{k}: {v}" for k, v in HELP.items()))
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=main)


# Rough simulated requests per second on one core, each workload's (sim.bench_workloads,
# where they were measured; about half the speed on an idle machine): for the estimate a
# long benchmark prints before it starts, not a promise.
RATES = {name: w.requests_per_s for name, w in WORKLOADS.items()}
LONG_S = 60.0  # benchmarks expected to take longer say so first


def estimate(workload: str, requests: int, who: str = "specsim bench") -> str | None:
    """The line ``who`` prints first when simulating ``requests`` of ``workload`` (or of
    each workload, ``all``) is expected to run past ``LONG_S``, else None."""
    names = list(WORKLOADS) if workload == "all" else [workload]
    seconds = sum(requests / RATES[n] for n in names)
    if seconds <= LONG_S:
        return None
    if workload == "all":
        return (f"{who}: {requests:,} requests of each of {len(names)} workloads; about "
                f"{seconds / 60:.0f} minutes")
    return (f"{who}: {requests:,} {workload} requests; about {seconds / 60:.0f} "
            f"minutes at ~{RATES[workload]:,} requests/s")


def main(args: argparse.Namespace) -> int:
    """Run the benchmark (or every one, ``--workload all``) and print its figures."""
    from sim.bench import run_all, run_warm
    from specdec.errors import UserError

    if not 1 <= args.requests <= MAX_REQUESTS:
        raise UserError(f"--requests: must be in 1..{MAX_REQUESTS:g}, got {args.requests}")
    line = estimate(args.workload, args.requests)
    if line is not None:
        print(line, file=sys.stderr)
    path = PATHS[args.engine_path]
    if args.workload == "all":
        def progress(i: int, n: int, name: str) -> None:
            print(f"specsim bench: {i}/{n} {name}", file=sys.stderr, flush=True)

        rows = run_all(args.requests, args.seed, args.overrides, path, progress=progress)
        print(json.dumps(rows) if args.json else table(rows))
        return 0
    r = run_warm(args.requests, args.seed, args.workload, args.overrides, path)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"workload          {r['workload']}")
        print(f"requests          {r['requests']}")
        print(f"wall              {r['wall_s']:.2f} s")
        print(f"requests/wall s   {r['requests_per_s']:.0f}")
        if r["requests_per_cpu_s"] is not None:
            print(f"requests/CPU s    {r['requests_per_cpu_s']:.0f} ({r['cpu_s']:.2f} CPU s)")
        print(f"iterations/wall s {r['iterations_per_s']:.0f}")
        print(f"output tokens/s   {r['output_tokens_per_s']:.0f}")
        print(f"per iteration     {r['us_per_iteration']:.1f} us")
        print(f"peak RSS          {r['peak_rss_mb']:.0f} MB")
        print(f"mean batch        {r['mean_batch']:.1f} sequences (time-weighted)")
        for name, why in r["fast_paths"].items():
            print(f"{name:<17s} {'taken' if why is None else 'not taken: ' + why}")
        print(f"engine path       {r['engine_path']}"
              + ("" if r["fallback"] is None else f" ({r['fallback']})"))
        if r["compiled_share"] is not None:
            print(f"compiled share    {r['compiled_share']:.0%} of the iterations (the rest "
                  "formed by the reference scheduler)")
    return 0


def table(rows: list[dict]) -> str:
    """``run_all``'s rows as the text table ``specsim bench --workload all`` prints."""
    out = [f"{'workload':<18s} {'path':<9s} {'wall s':>7s} {'us/iter':>8s} {'x fast':>7s} "
           f"{'batch':>6s} {'compiled':>8s}  fall-back reason"]
    for r in rows:
        x = "-" if r["x_fast_path"] is None else f"{r['x_fast_path']:.2f}"
        share = "-" if r["compiled_share"] is None else f"{r['compiled_share']:.0%}"
        out.append(f"{r['workload']:<18s} {r['engine_path']:<9s} {r['wall_s']:7.2f} "
                   f"{r['us_per_iteration']:8.1f} {x:>7s} {r['mean_batch']:6.1f} {share:>8s}  "
                   f"{r['fallback'] or '-'}")
    return "\n".join(out)
