"""``specsim validate``: SpecSim's default timing against public measurements."""

from __future__ import annotations

import argparse
import json

_HELP = """\
Price every row of the project's validation table (hardware/data/validation.csv: public
measurements, each with its source) with the default timing (auto: measured kernel tables
where they cover the deployment, else the calibrated roofline) and print the prediction,
the error, and per category the median absolute error on the held-out half (the rows the
shipped parameters were not fitted on), on the fit half and over all rows.
  specsim validate [--json] [--rows] [--by FIELD,...]
--catalog adds a user catalog (e.g. one `specsim calibrate` wrote) to see how it does.
--by model,framework (any of category, model, gpu, framework, framework_version, tp, ep,
metric, weight_bits) adds a line per group of rows: its rows, median signed error (its
bias), median |error| over all and over the held-out rows, and its worst row
(framework_version: the engine version the source states, "-" where it states none).
Rows of a release the framework's catalog entry lists under versions are priced with that
release's own overheads, the others with the entry's; --default-overheads prices every row
with the entry's, as an engine release the catalog does not list is priced: on the listed
releases' rows, which those overheads were not fitted on, it estimates the error for a
release the table does not hold (with --by framework,framework_version).
"""


def add_parser(subparsers) -> None:
    """Register ``specsim validate``."""
    p = subparsers.add_parser(
        "validate",
        description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timing", choices=("auto", "roofline", "measured", "paper"),
                   default="auto", help="backend to validate (default auto, the default)")
    p.add_argument("--catalog", action="append", metavar="FILE",
                   help="extra catalog YAML file (repeatable)")
    p.add_argument("--rows", action="store_true",
                   help="also print every row (measured, predicted, error, source)")
    p.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    p.add_argument("--default-overheads", action="store_true",
                   help="price every row with its framework's own overheads, not a listed "
                        "release's (as an unlisted release is priced)")
    p.add_argument("--by", metavar="FIELD,...",
                   help="also summarise each group of rows sharing these fields (comma-"
                        "separated: category, model, gpu, framework, framework_version, "
                        "tp, ep, metric, weight_bits), e.g. --by model,gpu,framework")
    p.set_defaults(func=main)


def _by_fields(text: str | None) -> tuple[str, ...]:
    """The --by fields; a one-line UserError names an unknown or repeated one."""
    from hardware.timing.validation import GROUP_FIELDS
    from specdec.errors import UserError

    if text is None:
        return ()
    fields = tuple(f.strip() for f in text.split(","))
    for f in fields:
        if f not in GROUP_FIELDS:
            raise UserError(f"--by: {f!r} is not a row field to group on; one of "
                            f"{', '.join(GROUP_FIELDS)}")
    if len(set(fields)) < len(fields):
        raise UserError(f"--by: a field is given twice, got {text!r}")
    return fields


def main(args: argparse.Namespace) -> int:
    """Validate and print."""
    from hardware import load_catalog
    from hardware.timing.validation import CATEGORIES, group_summary, validate

    by = _by_fields(args.by)
    catalog = load_catalog(args.catalog)
    if args.default_overheads:
        catalog = catalog.without_releases()
    v = validate(catalog, timing=args.timing)
    groups = group_summary(v, by) if by else None
    if args.json:
        print(json.dumps({
            "summary": v.summary, **({"groups": groups} if by else {}),
            "rows": [{"category": r.category, "model": r.model, "gpu": r.gpu, "tp": r.tp,
                      "framework": r.framework,
                      "framework_version": r.framework_version, "ep": r.ep, "batch": r.batch,
                      "context": r.context,
                      "metric": r.metric, "measured": r.measured, "predicted": float(p),
                      "error": float(e), "split": r.split, "backend": b, "source": r.source}
                     for r, p, e, b in zip(v.rows, v.predicted, v.error, v.backends,
                                           strict=True)]}, indent=2))
        return 0
    if args.rows:
        print("cat split  model           gpu        tp ep framework       batch context "
              "metric                 measured   predicted   error  backend")
        for r, p, e, b in zip(v.rows, v.predicted, v.error, v.backends, strict=True):
            print(f"{r.category:3s} {r.split:5s}  {r.model:15s} {r.gpu:10s} {r.tp:2d} {r.ep:2d} "
                  f"{r.framework:15s} {r.batch:5d} {r.context:7d} {r.metric:20s} "
                  f"{r.measured:10.4g}  {p:10.4g}  {e:+6.1%}  {b}")
        print()
    overheads = "; every framework at its default overheads" if args.default_overheads else ""
    print(f"timing {args.timing}{overheads}; median |predicted / measured - 1| per category")
    print("category                                                   rows (fit / held out)"
          "  held out  fit half  all    worst held out")
    for cat, s in v.summary.items():
        name = f"{cat} {CATEGORIES.get(cat, '')}"
        count = f"{s['rows']} ({s['fit_rows']} / {s['test_rows']})"
        print(f"{name:58s} {count:>21s}  {s['median_test']:7.1%}  {s['median_fit']:7.1%}"
              f"  {s['median_all']:6.1%}  {s['worst_test']:7.1%}")
    print(f"{len(v.rows)} rows; sources in hardware/data/validation.csv (--rows lists them)")
    listed = sum("@" in catalog.framework_id(r.framework, r.framework_version)
                 for r in v.rows)
    if listed:  # held-out rows share their release with fit rows: say what that means
        print(f"{listed} rows are of an engine release the catalog lists, priced with its "
              f"own overheads; --default-overheads prices them as an unlisted release is "
              f"(docs/timing.md, Engine releases)")
    if groups:
        _print_groups(groups, by)
    return 0


def _print_groups(groups: list[dict], by: tuple[str, ...]) -> None:
    def text(v) -> str:  # an empty framework_version: the source states none
        return str(v) or "-"

    widths = [max(len(f), *(len(text(g[f])) for g in groups)) for f in by]
    head = "  ".join(f"{f:{w}s}" for f, w in zip(by, widths, strict=True))
    print(f"\nby {', '.join(by)}: rows (held out), median signed error, median |error| "
          f"over all and held-out rows, worst |error|")
    print(f"{head}  {'rows':>11s}  {'signed':>7s}  {'all':>6s}  {'held out':>8s}  "
          f"{'worst':>7s}")
    for g in groups:
        key = "  ".join(f"{text(g[f]):{w}s}" for f, w in zip(by, widths, strict=True))
        test = "-" if g["test_rows"] == 0 else f"{g['median_test']:.1%}"
        print(f"{key}  {g['rows']:5d} ({g['test_rows']:3d})  {g['median_signed']:+7.1%}  "
              f"{g['median_all']:6.1%}  {test:>8s}  {g['worst']:7.1%}")
