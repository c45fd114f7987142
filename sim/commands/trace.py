"""``specsim trace``: record an acceptance trace with the numpy core and summarise it."""

from __future__ import annotations

import argparse
import json
import sys

from sim.commands._lists import check_bounds, document_bounds
from sim.limits import MAX_GAMMA, MAX_TOKENS
from specdec.drafts import DRAFT_KINDS
from specdec.errors import UserError
from specdec.traces import COVERAGE_KS, record_settings, trace_summary

# Recordings shorter than this finish in about a second: no progress bar.
_PROGRESS_MIN_TOKENS = 2000


# Ranges of the integer flags (sim.limits): far above any useful trace, refused past them.
BOUNDS = {"tokens": (1, MAX_TOKENS), "prompts": (1, MAX_TOKENS), "k_max": (1, MAX_GAMMA),
          "layers": (1, MAX_GAMMA), "ngram": (1, MAX_GAMMA),
          "seed": (0, 2**63 - 1)}  # numpy seeds are >= 0; as a scenario's run.seed


def add_parser(subparsers) -> None:
    """Register ``specsim trace``."""
    p = subparsers.add_parser(
        "trace",
        description=(
            "Decode random prompts with the tiny target transformer and record, per "
            "generated position, the rank of the target's token in the draft's distribution "
            "and the probability that multi-step speculative sampling with 1..K candidates "
            "accepts there. The simulator replays such traces for any gamma or token tree. "
            "Everything random (weights, draft noise, prompts, sampling) derives from --seed."
        ),
    )
    p.add_argument("--draft", choices=DRAFT_KINDS, default="perturbed",
                   help="draft model: perturbed copy, truncated copy, uniform or n-gram "
                        "prompt lookup (default: perturbed)")
    p.add_argument("--sigma", type=float, default=0.1,
                   help="noise scale of the perturbed draft, in per-tensor std (default 0.1)")
    p.add_argument("--layers", type=int, default=1,
                   help="layers kept by the truncated draft (default 1)")
    p.add_argument("--ngram", type=int, default=3,
                   help="longest suffix the n-gram draft matches (default 3)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature; 0 = greedy (default 0)")
    p.add_argument("--tokens", type=int, default=5000,
                   help="positions to record, split over the prompts (default 5000)")
    p.add_argument("--prompts", type=int, default=40,
                   help="number of random prompts / decoding runs (default 40: ~125 tokens "
                        "each, before a random model's greedy text settles into loops)")
    p.add_argument("--k-max", type=int, default=5,
                   help="largest number of MSS candidates per node to record (default 5)")
    p.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    p.add_argument("--out", default=None,
                   help="write the trace here (.npz); without it only the summary is printed")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    document_bounds(p, BOUNDS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Record, optionally save, and print the summary."""
    check_bounds(args, BOUNDS)
    from workloads.trace_file import save_trace

    if args.out is not None and not str(args.out).endswith(".npz"):
        raise UserError(f"--out: trace files end in .npz, got {args.out!r}")
    bar = _progress_bar(args.tokens)
    try:
        trace = record_settings(
            draft=args.draft, sigma=args.sigma, layers=args.layers, ngram=args.ngram,
            temperature=args.temperature, tokens=args.tokens, prompts=args.prompts,
            k_max=args.k_max, seed=args.seed, progress=None if bar is None else bar.update,
        )
    except UserError as e:  # the core names its parameter; the user gave it as a flag
        field, sep, rest = str(e).partition(": ")
        if sep and field in _FLAGS:
            raise UserError(f"--{field.replace('_', '-')}: {rest}") from None
        raise
    finally:
        if bar is not None:
            bar.close()
    summary = trace_summary(trace)
    summary["out"] = None if args.out is None else str(save_trace(args.out, trace))
    summary["settings"] = {k: trace.meta[k] for k in ("draft", "temperature", "seed", "k_max")}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    d = trace.meta["draft"]
    detail = {"perturbed": f" sigma={d['sigma']}", "truncated": f" layers={d['layers']}",
              "ngram": f" n={d['ngram']}"}.get(d["kind"], "")
    print(f"draft {d['kind']}{detail}, temperature {trace.meta['temperature']}, "
          f"seed {trace.meta['seed']}")
    print(f"positions            {summary['positions']} in {summary['sequences']} sequences")
    print(f"alpha_hat            {summary['alpha_hat']:.4f}")
    coverage = "  ".join(f"top-{k} {summary[f'coverage_top{k}']:.3f}" for k in COVERAGE_KS)
    print(f"coverage             {coverage}")
    print(f"mean greedy run      {summary['mean_run_length']:.3f} tokens")
    print(f"written to           {summary['out'] or '(not saved: no --out)'}")
    return 0


_FLAGS = ("draft", "sigma", "layers", "ngram", "temperature", "tokens", "prompts", "k_max",
          "seed")


def _progress_bar(tokens: int):
    if tokens < _PROGRESS_MIN_TOKENS or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=tokens, unit="tok", desc="recording", file=sys.stderr, leave=False)
