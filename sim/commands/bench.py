"""``specsim bench``: the simulator's own speed on a fixed benchmark workload."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    """Register ``specsim bench``."""
    p = subparsers.add_parser(
        "bench",
        description=(
            "Simulate a fixed benchmark workload (Llama-3-8B + Llama-3.2-1B draft on one "
            "H100, Poisson arrivals at a rate that keeps ~64 sequences running, gamma = 4, "
            "bursty acceptance) and print wall seconds, simulated requests per wall second, "
            "iterations per wall second and peak memory."
        ),
    )
    p.add_argument("--requests", type=int, default=100_000, help="requests to simulate")
    p.add_argument("--seed", type=int, default=0, help="seed of the workload")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures."""
    from sim.bench import run_bench
    from specdec.errors import UserError

    if args.requests < 1:
        raise UserError(f"--requests: must be >= 1, got {args.requests}")
    r = run_bench(args.requests, args.seed)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"requests          {r['requests']}")
        print(f"wall              {r['wall_s']:.2f} s")
        print(f"requests/wall s   {r['requests_per_s']:.0f}")
        print(f"iterations/wall s {r['iterations_per_s']:.0f}")
        print(f"peak RSS          {r['peak_rss_mb']:.0f} MB")
        print(f"mean batch        {r['mean_batch']:.1f} sequences (time-weighted)")
    return 0
