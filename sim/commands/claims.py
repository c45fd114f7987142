"""``specsim claims``: the papers' claims checked under SpecSim's cost model."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from specdec.errors import UserError

_HELP = """\
Check published claims (SpecInfer's distributed and offloading speedups, its Table 2
acceptance, Leviathan et al.'s T5 speedups, the lecture's §7 batching and tree-size
results) by simulation at the papers' setups (scenarios/claims/*.yaml) or, where the
engine cannot run a setup, from the cost model with calibrated acceptance. One row per
claim: the claim, the paper's figure or range, SpecSim's figure, the verdict (inside,
partly inside, outside, not comparable -- computed from the numbers) and the assumptions
that drive it. Writes claims.csv, claims.json, report.md and claims.png under
runs/claims-<timestamp>/ or --out.

groups (--only): specinfer-distributed, specinfer-offload, specinfer-table2, leviathan,
batching, trees-vs-load

examples:
  specsim claims
  specsim claims --only leviathan --only specinfer-table2 --json
  specsim claims --quick --out runs/claims-quick
"""


def add_parser(subparsers) -> None:
    """Register ``specsim claims``."""
    p = subparsers.add_parser(
        "claims",
        description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", action="append", default=[], metavar="GROUP",
                   help="run only this claim group (repeatable; comma-separated also works)")
    p.add_argument("--quick", action="store_true",
                   help="fewer requests per simulated point (half; batching curves "
                        "without their light-load points), every batch, width and γ kept: "
                        "the same verdicts as the full run (tested), about 0.6x its time")
    p.add_argument("--json", action="store_true",
                   help="print the rows as a JSON list of {claim, paper, specsim, verdict, "
                        "assumptions, ...}")
    p.add_argument("--out", default=None, help="output folder (default: runs/claims-<time>)")
    p.add_argument("--force", action="store_true",
                   help="replace --out if SpecSim wrote it (its .specsim-output marker "
                        "lists all it holds); any other folder is refused")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run the claim groups, write the folder, print the table (or JSON)."""
    from reports.claims_report import format_table, write_claims
    from sim.output import default_run_dir, staged_folder
    from sim.studies.claims import POINT_TOLERANCE, VERDICTS, run_claims

    only = [name.strip() for item in args.only for name in item.split(",") if name.strip()]
    if args.only and not only:  # an unset variable: --only "$GROUP" must not run them all
        raise UserError(f"--only: names no claim group, got {', '.join(map(repr, args.only))}")
    start = time.perf_counter()

    def progress(group: str) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"claims: {group} ...", file=sys.stderr)

    out = Path(args.out if args.out is not None else default_run_dir("claims"))
    with staged_folder(out, "--out", args.force) as tmp:
        rows = run_claims(only or None, quick=args.quick, progress=progress)
        write_claims(rows, tmp, POINT_TOLERANCE, VERDICTS)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        print(format_table(rows))
        print(f"({time.perf_counter() - start:.1f} s) results: {out}/")
    return 0
