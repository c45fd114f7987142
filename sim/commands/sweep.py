"""``specsim sweep``: a scenario over the cartesian product of overrides, one table out."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.commands._lists import check_bounds, document_bounds, scenario_path
from sim.commands._sets import add_set_flag
from sim.limits import MAX_WORKERS

_HELP = """\
Run a scenario at every point of the cartesian product of --vary axes (dotted keys as in
'specsim run --set', comma-separated values; lists in brackets), and/or of the scenario
file's 'sweep: {vary: {key: [values]}}' block. Writes one combined table, one row per point
x variant with the summary columns (latency percentiles, throughput, goodput under the
scenario's SLO, acceptance, mean batch size, time split, speedups vs the 'none' variant), as
sweep.csv (and sweep.parquet when pyarrow is installed) under --out, with meta.yaml. Ctrl-C
writes the points that had finished, marked partial (meta.yaml: complete: false), and exits
with code 130.

Each point's seed is derived from the scenario's seed and the point's values, so the table
is identical whatever --workers or --scheduler ran it (--same-seed: every point uses the
scenario's seed). With run.seed as an axis (--vary run.seed=0,1,2,3) sweep_ci.csv adds, per
other point and variant, the mean and 95% Student-t half-width of every column over seeds.

examples:
  specsim sweep scenarios/default.yaml --vary workload.rate_per_s=2,4,8 \\
      --vary variants.1.policy.gamma=2,4 --set run.requests=200 --workers 2
  specsim sweep scenarios/default.yaml --vary workload.rate_per_s=2,4 \\
      --scheduler tcp://10.0.0.5:8786
"""

# Columns printed in the terminal table (the files hold every column).
_SHOWN = ("variant", "finished", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
          "throughput_tokens_per_s", "goodput_requests_per_s", "tokens_per_verify",
          "mean_batch_size", "speedup_tpot")


BOUNDS = {"workers": (1, MAX_WORKERS)}


def add_parser(subparsers) -> None:
    """Register ``specsim sweep``."""
    p = subparsers.add_parser(
        "sweep",
        description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", type=scenario_path,
                   help="scenario YAML file (may hold a sweep: block)")
    p.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="an axis: dotted key and its values (repeatable)")
    add_set_flag(p, "override a field of the base scenario (repeatable)")
    p.add_argument("--workers", type=int, default=1, help="local processes (default 1)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on an existing Dask cluster, e.g. tcp://host:8786")
    p.add_argument("--same-seed", action="store_true",
                   help="every point uses the scenario's seed (common random numbers)")
    p.add_argument("--out", default=None, help="output folder (default: runs/sweep-<name>-<time>)")
    p.add_argument("--force", action="store_true",
                   help="replace --out if SpecSim wrote it (its .specsim-output marker "
                        "lists all it holds); any other folder is refused")
    p.add_argument("--json", action="store_true",
                   help="print {points, rows, files} as JSON: the point count, the rows as "
                        "JSON records, the files written")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    document_bounds(p, BOUNDS)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Load, run every point, write the table, print it."""
    check_bounds(args, BOUNDS)
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread: the worker processes are forked

    from reports.tables import json_records, seeds_table, write_table
    from sim.output import default_run_dir, rebased, staged_folder
    from sim.studies.sweep import SweepInterrupted, load_sweep, run_sweep
    from specdec.errors import Interrupted, UserError

    spec = load_sweep(args.scenario, args.vary, args.overrides)
    n = len(spec.points())
    out = Path(args.out if args.out is not None
               else default_run_dir(f"sweep-{spec.base.get('name', 'scenario')}"))
    axes = [k for k, _ in spec.vary]
    if args.same_seed and "run.seed" in axes:  # the axis's seeds won, silently
        raise UserError("--same-seed: run.seed is an axis (a seed per point); give one or "
                        "the other")
    stopped = None
    with staged_folder(out, "--out", args.force) as tmp:
        bar = tqdm(total=n, desc="sweep", unit="point", file=sys.stderr,
                   disable=args.no_progress)
        try:
            table = run_sweep(spec, args.workers, args.scheduler, args.same_seed,
                              lambda: bar.update(1))
        except SweepInterrupted as stop:  # keep what finished, marked partial
            if not stop.finished:
                raise Interrupted(f"{stop}; nothing was written") from None
            stopped, table = stop, stop.table
        finally:
            bar.close()
        paths = write_table(table, tmp / "sweep")
        if "run.seed" in axes and stopped is None:
            # Seeds as an axis: also the mean and 95% t-interval over seeds per other point.
            keys = [k for k in axes if k != "run.seed"] + ["variant"]
            paths += write_table(seeds_table(table.drop(columns=["run.seed"]), by=keys),
                                 tmp / "sweep_ci")
        _write_meta(tmp, spec, args, n, stopped)
        paths = rebased(paths, tmp, out)
    if stopped is not None:
        raise Interrupted(f"{stopped}; they are written, marked partial (meta.yaml "
                          f"complete: false), to {paths[0]}") from None
    if args.json:
        rows = json_records(table)
        print(json.dumps({"points": n, "rows": rows, "files": [str(p) for p in paths]},
                         indent=2))
        return 0
    shown = table[[*axes, *_SHOWN]]
    with _pd_options():
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"table: {paths[0]}")
    return 0


def _write_meta(folder: Path, spec, args, points: int, stopped) -> None:
    """meta.yaml: what was swept and whether every point finished (``complete``; an
    interrupted sweep lists the points it holds)."""
    import yaml

    from sim.output import package_version

    meta = {"version": package_version(), "source": spec.source,
            "overrides": list(args.overrides), "vary": list(args.vary), "points": points,
            "complete": stopped is None}
    if stopped is not None:
        meta["finished_points"] = stopped.finished
    (folder / "meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))


def _pd_options():
    import pandas as pd

    return pd.option_context("display.width", 200, "display.max_columns", 50)
