"""``specsim bench``: the simulator's own speed on a fixed benchmark workload."""

from __future__ import annotations

import argparse
import json
import sys

from sim.engine_path import HELP, PATHS
from sim.limits import MAX_REQUESTS

_HELP = """\
Simulate a fixed benchmark workload and print how fast the simulator ran it: wall seconds,
simulated requests, iterations and output tokens per wall second, microseconds per
iteration, the time-weighted batch and the process's peak memory.

workloads:
  speculative   Llama-3-8B + Llama-3.2-1B draft on one H100 (default timing), gamma = 4,
                bursty acceptance, 512-token prompts and 128-token outputs, Poisson
                arrivals at a rate that keeps ~64 sequences running (the default)
  decode-heavy  a request-trace replay of Llama-2-7B on one A100-80GB without speculation,
                Sarathi-style chunked prefill (512-token budget), prompts around 256 and
                outputs around 512 tokens, ~32 sequences running: the cost of an iteration

Peak memory is the whole process's: compare it across runs of one workload each. A run
of 1,000 requests or more computes its iterations with the compiled kernels (numba) from
the start; the first such run after an install also compiles them (up to a minute or so,
then cached), so time the second.
"""


def add_parser(subparsers) -> None:
    """Register ``specsim bench``."""
    from sim.bench import WORKLOADS

    p = subparsers.add_parser("bench", description=_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=WORKLOADS, default="speculative",
                   help="which benchmark workload (default: speculative)")
    p.add_argument("--requests", type=int, default=100_000,
                   help=f"requests to simulate (default 100000); 1..{MAX_REQUESTS}")
    p.add_argument("--seed", type=int, default=0, help="seed of the workload")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field of the benchmark scenario (repeatable), e.g. "
                        "scheduler.prefix_caching=true: how fast the engine runs it, and "
                        "which fast paths it leaves")
    p.add_argument("--engine-path", choices=list(PATHS), default="auto",
                   help="how the engine computes its iterations (as for specsim run): "
                        + "; ".join(f"{k}: {v}" for k, v in HELP.items()))
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=main)


# Rough simulated requests per second on one core (this machine class, 2 cores, measured
# with `specsim bench --requests 1000000` and `--workload decode-heavy --requests 100000`
# with the compiled walk: about 60,000 and 12,000, about half that on a busy machine): for
# the estimate a long benchmark prints before it starts, not a promise.
RATES = {"speculative": 30_000, "decode-heavy": 6_000}
LONG_S = 60.0  # benchmarks expected to take longer say so first


def estimate(workload: str, requests: int, who: str = "specsim bench") -> str | None:
    """The line ``who`` prints first when simulating ``requests`` of ``workload`` is
    expected to run past ``LONG_S``, else None."""
    seconds = requests / RATES[workload]
    if seconds <= LONG_S:
        return None
    return (f"{who}: {requests:,} {workload} requests; about {seconds / 60:.0f} "
            f"minutes at ~{RATES[workload]:,} requests/s")


def main(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures."""
    from sim.bench import run_bench
    from specdec.errors import UserError

    if not 1 <= args.requests <= MAX_REQUESTS:
        raise UserError(f"--requests: must be in 1..{MAX_REQUESTS:g}, got {args.requests}")
    line = estimate(args.workload, args.requests)
    if line is not None:
        print(line, file=sys.stderr)
    r = run_bench(args.requests, args.seed, args.workload, args.overrides,
                  PATHS[args.engine_path])
    if args.json:
        print(json.dumps(r))
    else:
        print(f"workload          {r['workload']}")
        print(f"requests          {r['requests']}")
        print(f"wall              {r['wall_s']:.2f} s")
        print(f"requests/wall s   {r['requests_per_s']:.0f}")
        print(f"iterations/wall s {r['iterations_per_s']:.0f}")
        print(f"output tokens/s   {r['output_tokens_per_s']:.0f}")
        print(f"per iteration     {r['us_per_iteration']:.1f} us")
        print(f"peak RSS          {r['peak_rss_mb']:.0f} MB")
        print(f"mean batch        {r['mean_batch']:.1f} sequences (time-weighted)")
        for name, why in r["fast_paths"].items():
            print(f"{name:<17s} {'taken' if why is None else 'not taken: ' + why}")
    return 0
