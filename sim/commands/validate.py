"""``specsim validate``: SpecSim's default timing against public measurements."""

from __future__ import annotations

import argparse
import json

from hardware.deployment import TIMINGS
from sim.commands._lists import file_path

_HELP = """\
Price every row of the project's validation table (hardware/data/validation.csv: public
measurements, each with its source) with the default timing (auto: measured kernel tables
where they cover the deployment, else the calibrated roofline) and print the prediction,
the error, and per category the median absolute error on the held-out half (the rows the
shipped parameters were not fitted on), on the fit half and over all rows.
Category E (hardware/data/validation_spec.csv): published runs with speculation beside the
same runs without, the published acceptance length given; for all its rows, per method and
per engine: the median |error| of the speedup held out and on the fit half, its median
signed error held out (a positive one is optimism), and the median |error| of the
speculative TPOT held out (with the plain run's, which the TPOT error includes).
Category H (hardware/data/validation_pd.csv): disaggregated-serving runs, a prefill pool
and a decode pool; for all its runs, per engine, GPU, precision and requests in flight per
prefill replica: the median |error| of the TPOT and of the TTFT held out and on the fit
half, and their median signed errors held out and over all runs (a negative one is
optimism: the run was slower than priced). Queueing is not priced, so a busy prefill
pool's TTFT comes out fast. --simulate-pd also replays each of its runs whose client is
public through the P/D engine, as that client loaded it (a closed loop of the run's
concurrency, its rounds of requests, its length ranges), and prints the same table for the
simulated TTFT and TPOT (minutes; --workers N runs N at once).
Category I (hardware/data/validation_offload.csv, --simulate-offload): serving with a CPU
KV tier below the prefix cache (vLLM's native offload), each published run and its
GPU-only twin replayed through the engine as its benchmark's client sent it (stages of
Poisson load over shared-prefix prompts, the caches carried from stage to stage); per
metric the median |error| of the mean TTFT, mean E2E latency and throughput held out and
on the fit half, signed, and of the offload-to-GPU-only ratio (tens of minutes; --workers
2 runs the two configurations at once).
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
    p.add_argument("--timing", choices=TIMINGS,
                   default="auto", help="backend to validate (default auto, the default)")
    p.add_argument("--catalog", action="append", metavar="FILE", type=file_path,
                   help="extra catalog YAML file (repeatable)")
    p.add_argument("--rows", action="store_true",
                   help="also print every row (measured, predicted, error, source)")
    p.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    p.add_argument("--default-overheads", action="store_true",
                   help="price every row with its framework's own overheads, not a listed "
                        "release's (as an unlisted release is priced)")
    p.add_argument("--simulate-pd", action="store_true",
                   help="also replay category H's runs through the simulator under their "
                        "benchmarks' protocols (minutes; sim/studies/validate_pd.py)")
    p.add_argument("--simulate-offload", action="store_true",
                   help="also replay category I's runs with and without a CPU KV tier "
                        "through the simulator under their benchmark's protocol (tens of "
                        "minutes; sim/studies/validate_offload.py)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes for --simulate-pd and --simulate-offload (default 1)")
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
    from hardware.timing.validation import (
        CATEGORIES,
        group_summary,
        validate,
        validate_pd,
        validate_spec,
    )

    if args.workers < 1 and (args.simulate_pd or args.simulate_offload):
        from specdec.errors import UserError

        raise UserError(f"--workers: at least 1, got {args.workers}")
    by = _by_fields(args.by)
    catalog = load_catalog(args.catalog)
    if args.default_overheads:
        catalog = catalog.without_releases()
    v = validate(catalog, timing=args.timing)
    ev = validate_spec(catalog, timing=args.timing)
    hv = validate_pd(catalog, timing=args.timing)
    groups = group_summary(v, by) if by else None
    sim_h = _simulate_pd(catalog, args) if args.simulate_pd else None
    sim_i = _simulate_offload(catalog, args) if args.simulate_offload else None
    if args.json:
        print(json.dumps({
            "summary": v.summary, **({"groups": groups} if by else {}),
            "spec_summary": ev.summary,
            "spec_rows": [{"framework": r.framework, "framework_version": r.framework_version,
                           "model": r.model, "gpu": r.gpu, "tp": r.tp, "method": r.method,
                           "shape": r.shape, "batch": r.batch, "load": r.load,
                           "acceptance_length": r.acceptance_length,
                           "measured_speedup": r.measured_speedup,
                           "predicted_speedup": p.speedup,
                           "speedup_error": float(se),
                           "spec_tpot_error": None if te != te else float(te),
                           "split": r.split, "source": r.source}
                          for r, p, se, te in zip(ev.rows, ev.predicted, ev.speedup_error,
                                                  ev.tpot_error, strict=True)],
            "pd_summary": hv.summary,
            "pd_rows": [{"model": r.model, "gpu": r.gpu, "framework": r.framework,
                         "framework_version": r.framework_version, "isl": r.isl,
                         "osl": r.osl, "concurrency": r.concurrency,
                         "prefill": f"{r.prefill_workers} x tp {r.prefill_tp} ep "
                                    f"{r.prefill_ep}",
                         "decode": f"{r.decode_workers} x tp {r.decode_tp} ep {r.decode_ep}",
                         "decode_batch": r.decode_batch,
                         "measured_tpot_s": r.measured_tpot, "predicted_tpot_s": p.tpot_s,
                         "tpot_error": float(te), "measured_ttft_s": r.measured_ttft,
                         "predicted_ttft_s": p.ttft_s, "ttft_error": float(fe),
                         "prefill_s": p.prefill_s, "transfer_s": p.transfer_s,
                         "backends": [p.prefill_backend, p.decode_backend],
                         "split": r.split, "source": r.source}
                        for r, p, te, fe in zip(hv.rows, hv.predicted, hv.tpot_error,
                                                hv.ttft_error, strict=True)],
            **({} if sim_h is None else {
                "pd_simulated_summary": sim_h.summary,
                "pd_simulated_rows": [
                    {"line": r.line, "split": r.split, "measured_ttft_s": r.measured_ttft,
                     "simulated_ttft_s": x.ttft_s, "ttft_error": float(fe),
                     "measured_tpot_s": r.measured_tpot, "simulated_tpot_s": x.tpot_s,
                     "tpot_error": float(te), "requests": x.requests}
                    for r, x, te, fe in zip(sim_h.rows, sim_h.simulated, sim_h.tpot_error,
                                            sim_h.ttft_error, strict=True)],
                "pd_simulated_left_out": [r.line for r in sim_h.left_out]}),
            **({} if sim_i is None else {
                "offload_simulated_summary": sim_i.summary,
                "offload_simulated_rows": [
                    {"line": r.line, "split": r.split, "config": r.config,
                     "stage_rate": r.stage_rate, "metric": r.metric,
                     "measured": r.measured, "simulated": float(x), "error": float(e),
                     "ratio_error": None if q != q else float(q), "source": r.source}
                    for r, x, e, q in zip(sim_i.rows, sim_i.simulated, sim_i.error,
                                          sim_i.ratio_error, strict=True)]}),
            "rows": [{"category": r.category, "model": r.model, "gpu": r.gpu, "tp": r.tp,
                      "framework": r.framework,
                      "framework_version": r.framework_version, "ep": r.ep, "batch": r.batch,
                      "context": r.context, "weight_bits": r.weight_bits,
                      "kv_bits": r.kv_bits, "moe_kernel": r.moe_kernel,
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
    _print_spec(ev, args.rows)
    _print_pd(hv, args.rows)
    if sim_h is not None:
        _print_simulated_pd(sim_h, args.rows)
    if sim_i is not None:
        _print_simulated_offload(sim_i, args.rows)
    return 0


def _simulate_pd(catalog, args):
    """Category H replayed by the simulator (``sim.studies.validate_pd``), progress on
    stderr."""
    import sys

    from sim.studies.validate_pd import simulate_pd

    def done(i: int, n: int) -> None:
        print(f"specsim validate: H simulated {i}/{n}", file=sys.stderr, flush=True)

    return simulate_pd(catalog, workers=args.workers, done=done)


def _simulate_offload(catalog, args):
    """Category I replayed by the simulator (``sim.studies.validate_offload``), progress on
    stderr."""
    import sys

    from sim.studies.validate_offload import read_offload_rows, simulate_offload

    rows = read_offload_rows()  # a bad file is refused before minutes of replay

    def done(i: int, n: int) -> None:
        print(f"specsim validate: I simulated {i}/{n} runs", file=sys.stderr, flush=True)

    return simulate_offload(catalog, rows, workers=args.workers, done=done)


def _print_simulated_offload(v, rows: bool) -> None:
    """Category I replayed by the simulator: its table (and with ``rows`` every row)."""
    if rows:
        print("\nI simulated rows: split line config       rate metric              "
              "measured  simulated   error  offload/GPU-only ratio error")
        for r, x, e, q in zip(v.rows, v.simulated, v.error, v.ratio_error, strict=True):
            ratio = "" if q != q else f"{q:+.1%}"
            print(f"  {r.split:5s} {r.line:4d} {r.config:12s} {r.stage_rate:4g} "
                  f"{r.metric:18s} {r.measured:10.4g} {x:10.4g}  {e:+6.1%}  {ratio}")
    print("\nI CPU KV offload (vLLM's native tier), each run and its GPU-only twin replayed "
          "under its client's\nprotocol (sim/studies/validate_offload.py), nothing fitted; "
          "median |error| held out (fit half in\nbrackets); signed: median signed error "
          "held out / over all rows; ratio: the offload run's\nvalue over its twin's, "
          "simulated against measured")
    print(f"{'group':26s} {'rows (held out)':>15s}  {'error':>15s}  {'signed':>15s}")
    for name, s in v.summary.items():
        err = f"{_pct(s['test'])} ({_pct(s['fit'])})"
        signed = f"{_pct(s['signed_test'])} / {_pct(s['signed_all'])}"
        print(f"{name:26s} {s['rows']:>7d} ({s['test_rows']:3d})  {err:>15s}  "
              f"{signed:>15s}")
    print(f"{len(v.rows)} rows; sources in hardware/data/validation_offload.csv (--rows "
          f"lists them)")


def _pct(x) -> str:
    """A share as a table cell: signed where negative, "-" where there is none."""
    return "-" if x is None else f"{x:+.1%}" if x < 0 else f"{x:.1%}"


def _print_simulated_pd(h, rows: bool) -> None:
    """Category H replayed by the simulator: its lines (and with ``rows`` every run)."""
    if rows:
        print("\nH simulated rows: split line  TTFT ms meas/sim   error  TPOT ms meas/sim  "
              "error")
        for r, x, te, fe in zip(h.rows, h.simulated, h.tpot_error, h.ttft_error,
                                strict=True):
            print(f"  {r.split:5s} {r.line:4d}  {1e3 * r.measured_ttft:7.0f} "
                  f"{1e3 * x.ttft_s:7.0f}  {fe:+6.1%}  {1e3 * r.measured_tpot:7.2f} "
                  f"{1e3 * x.tpot_s:7.2f}  {te:+6.1%}")
    print("\nH simulated: each run replayed by the P/D engine under its client's protocol "
          "(a closed loop of\nits concurrency, 10 or 8 rounds, lengths uniform on [0.8 L, "
          "L]; sim/studies/validate_pd.py); mean TTFT\nand TPOT against the measured, "
          "nothing fitted; median |error| held out (fit half in brackets)")
    _pd_table(h.summary)
    print(f"{len(h.rows)} runs replayed; {len(h.left_out)} left out (their client's "
          f"protocol is not public)")


def _print_pd(h, rows: bool) -> None:
    """Category H's lines (and with ``rows`` every run)."""
    if rows:
        print("\nH rows: split model        gpu    framework          isl   osl  conc  "
              "prefill      decode        batch  TPOT ms meas/pred  error  "
              "TTFT ms meas/pred (transfer)  error")
        for r, p, te, fe in zip(h.rows, h.predicted, h.tpot_error, h.ttft_error,
                                strict=True):
            fw = f"{r.framework}@{r.framework_version}" if r.framework_version else \
                r.framework
            print(f"  {r.split:5s} {r.model:12s} {r.gpu:6s} {fw:18s} {r.isl:5d} {r.osl:5d} "
                  f"{r.concurrency:5d}  {r.prefill_workers:2d}x{r.prefill_tp}/{r.prefill_ep:<6d}"
                  f"  {r.decode_workers:2d}x{r.decode_tp}/{r.decode_ep:<6d}  {r.decode_batch:5d}"
                  f"  {1e3 * r.measured_tpot:7.2f} {1e3 * p.tpot_s:7.2f}  {te:+6.1%}  "
                  f"{1e3 * r.measured_ttft:7.0f} {1e3 * p.ttft_s:7.0f} "
                  f"({1e3 * p.transfer_s:5.1f})  {fe:+6.1%}")
    print("\nH disaggregated serving (prefill and decode pools), nothing fitted; median "
          "|error| over held-out runs\n(fit half in brackets); signed: median signed "
          "error held out / over all runs; load: requests in\nflight per prefill replica "
          "(queueing is not priced: a busy prefill pool's TTFT comes out fast)")
    _pd_table(h.summary)
    print(f"{len(h.rows)} runs; sources in hardware/data/validation_pd.csv (--rows lists "
          f"them)")


def _pd_table(summary: dict) -> None:
    """Category H's table of a summary (``hardware.timing.validation.pd_summary``)."""
    print(f"{'group':18s} {'runs (held out)':>15s}  {'TPOT':>15s}  {'signed':>15s}  "
          f"{'TTFT':>15s}  {'signed':>15s}")
    for name, s in summary.items():
        cells = []
        for m in ("tpot", "ttft"):
            cells.append(f"{_pct(s[m + '_test'])} ({_pct(s[m + '_fit'])})")
            cells.append(f"{_pct(s[m + '_signed_test'])} / {_pct(s[m + '_signed_all'])}")
        print(f"{name:18s} {s['rows']:>7d} ({s['test_rows']:3d})  "
              + "  ".join(f"{c:>15s}" for c in cells))


def _print_spec(e, rows: bool) -> None:
    """Category E's lines (and with ``rows`` every row)."""
    if rows:
        print("\nE rows: split framework method shape                     batch    AL  "
              "speedup meas/pred   error  spec TPOT error  plain error")
        for r, p, se, te, be in zip(e.rows, e.predicted, e.speedup_error, e.tpot_error,
                                    e.base_error, strict=True):
            te_s = "-" if te != te else f"{te:+.1%}"
            be_s = "-" if be != be else f"{be:+.1%}"
            print(f"  {r.split:5s} {r.framework:9s} {r.method:6s} {r.shape:27s} {r.batch:5d} "
                  f"{r.acceptance_length:5.2f}  {r.measured_speedup:5.2f} {p.speedup:5.2f}  "
                  f"{se:+6.1%}  {te_s:>15s}  {be_s:>11s}")
    print("\nE speculative decoding, against the same run without speculation; median over "
          "held-out rows\n(fit half in brackets); signed: median signed speedup error held "
          "out")
    print(f"{'group':22s} {'rows (held out)':>15s}  {'speedup':>16s}  {'signed':>7s}  "
          f"{'spec TPOT':>9s}  {'plain TPOT':>10s}")
    for name, s in e.summary.items():
        speed = f"{_pct(s['speedup_test'])} ({_pct(s['speedup_fit'])})"
        print(f"{name:22s} {s['rows']:>7d} ({s['test_rows']:3d})  {speed:>16s}  "
              f"{_pct(s['speedup_signed_test']):>7s}  {_pct(s['tpot_test']):>9s}  "
              f"{_pct(s['base_test']):>10s}")
    print(f"{len(e.rows)} rows; sources in hardware/data/validation_spec.csv (--rows lists "
          f"them); the TPOT errors include the plain run's (the timing of A-D)")


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
