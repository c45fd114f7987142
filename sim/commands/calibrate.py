"""``specsim calibrate``: fit timing parameters to measured step or serving times."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hardware.deployment import TIMINGS
from sim.commands._lists import file_path

# the timings with parameters to fit (the paper GPU's are the lecture's)
_FITTED = tuple(t for t in TIMINGS if t != "paper")

_HELP = """\
Fit a GPU's (and its links' and framework's) timing parameters to measurements, by least
squares on log error (scipy.optimize.least_squares; fields that share no row are fitted
apart), and write a user catalog that overrides only the fitted fields (use it as
deployment.catalog or --catalog).

From a CSV of measured step times (one measurement per row):
  specsim calibrate my_steps.csv [--fit FIELD ...] [--out my.yaml]
Columns (header names): model, gpu, tp, pp, weight_bits, kv_bits, compute_dtype, batch,
context (cached tokens per sequence), tokens (new tokens per sequence: 1 = decode),
offload (fraction or auto), measured_s, source; optional: framework (default vllm),
framework_version (the engine release the run used: rows of a release the framework's
catalog entry lists under versions are priced with that release's overheads), ep (an MoE
model's expert-parallel GPUs, as hw step --ep; default 1), pin_memory (true
default, false: offloaded weights in pageable host memory), streaming (true default: a
server streaming its tokens; false: an offline run),
metric (step_s default, tpot_s, ttft_s, tokens_per_s_per_gpu, max_load_tokens_per_s:
total output tokens/s of an offline max-load run, batch = its max batch size),
output_tokens, requests (max_load_tokens_per_s only: how many the run served),
max_num_tokens (the run's step token budget) and kv_fraction (the share of the memory left
after weights and the engine's own memory that the run gave the KV cache, TensorRT-LLM's
way) or gpu_memory_utilization (the share of each GPU the run gave weights and KV
together: vLLM's --gpu-memory-utilization, SGLang's --mem-fraction-static); all three for
tpot_s and max_load_tokens_per_s rows), cuda_graph_batch_sizes (max_load_tokens_per_s only: the
CUDA-graph batch sizes the run padded its decode-only steps to, space-separated), split
(fit / test: test rows are held out and only reported), category, notes.
Without --fit the fields the rows can pin down are fitted: each framework's per-pass,
per-layer and per-sequence overheads and, where its fit rows the kernel tables price vary
the TP size, what each more tensor-parallel GPU adds per pass (tp_step_s), its elementwise
kernels' bandwidth (act_passes: hidden-wide activation vectors per token per block, where
at least six of its fit rows carry prompts in bulk -- static-batch, max-load, TTFT or
multi-token step rows -- over more than one model), its streaming cost where at least six
of its fit rows stream and six do not, and for rows the roofline prices, the weight
format's streaming efficiency, the host-link efficiency (pinned or pageable, as the rows
say) and the TP link's call latency.
FIELD paths: gpus.<id>.roofline.<eta_weights|eta_fp8|eta_int8|eta_int4|weights_half_bytes|
eta_kv|kv_half_seqs|eta_compute|corner|eta_host|eta_host_pageable>,
links.<id>.collective.<call_s|step_s|eta>,
frameworks.<id>.<step_s|tp_step_s|layer_s|seq_s|stream_seq_s|act_passes|host_efficiency>,
frameworks.<id>@<release>.<step_s|tp_step_s|layer_s|seq_s|stream_seq_s|act_passes> (one
release's own overheads, fitted on the rows whose framework_version is that release: e.g.
--fit frameworks.vllm@0.12.0.seq_s; a release the catalog does not list yet gets an entry).

From a CSV of speculative runs (category E's columns, hardware/data/validation_spec.csv;
docs/timing.md, Speculation): runs with speculation beside the same runs without, each
with its published acceptance length:
  specsim calibrate my_spec_runs.csv [--fit FIELD ...] [--out my.yaml]
fits each framework's speculative overheads on the speedups of the fit rows: per round
(step_s), per draft pass by method (draft_step_s.<method>, where three fit rows of the
method at two depths or more pin it), per token tree (tree_s) and per speculating sequence
(seq_s), where six fit rows of each kind and six of the other pin them. FIELD paths:
frameworks.<id>.speculation.<step_s|seq_s|tree_s|draft_step_s.<method>>.

From a GPU's measured kernel tables (the shipped roofline calibration):
  specsim calibrate --tables h100 --tables h200
fits each GPU's roofline and its server link's alpha-beta all-reduce to the kernel-only
pass times the tables give over a fixed grid of models, TP, formats, batches and contexts.

The shipped parameters come from five such fits, in order (docs/timing.md, "The
calibration, in order"): the three --tables fits, then hardware/data/validation.csv for the
framework overheads and streaming efficiencies, then for the host-link efficiencies.
"""


def add_parser(subparsers) -> None:
    """Register ``specsim calibrate``."""
    p = subparsers.add_parser(
        "calibrate",
        description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("measurements", nargs="?", help="CSV of measurements (see above)")
    p.add_argument("--tables", action="append", metavar="GPU",
                   help="fit GPU's roofline to its measured kernel tables (repeatable; "
                        "instead of a CSV)")
    p.add_argument("--framework", default="vllm",
                   help="whose kernel tables --tables reads (default vllm)")
    p.add_argument("--timing", choices=_FITTED, default=None,
                   help="backend the rows are predicted with (default auto; --tables: "
                        "roofline)")
    p.add_argument("--fit", action="append", metavar="FIELD",
                   help="a field to fit (repeatable; default: what the rows pin down)")
    p.add_argument("--catalog", action="append", metavar="FILE", type=file_path,
                   help="extra catalog YAML file (repeatable)")
    p.add_argument("--out", help="catalog YAML to write (default runs/calibrate-<time>/"
                                 "catalog.yaml)")
    p.add_argument("--json", action="store_true", help="print the fit as JSON")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Read or tabulate the rows, fit, write the catalog, print the fit."""
    import yaml

    from hardware import load_catalog
    from hardware.timing.calibrate import (
        RESTARTS,
        default_fields,
        field_entry,
        fit,
        overrides,
    )
    from hardware.timing.kernel_rows import kernel_catalog, kernel_rows, table_fields
    from hardware.timing.rows import read_rows
    from sim.output import default_run_dir
    from specdec.errors import UserError

    if (args.measurements is None) == (args.tables is None):
        raise UserError("give a measurements CSV or --tables GPU (one of the two)")
    catalog = load_catalog(args.catalog)
    if args.out is not None:
        _check_out(Path(args.out))
    from hardware.timing.spec_rows import is_spec_csv

    if args.measurements and is_spec_csv(args.measurements):
        return _speculative(args, catalog)
    # the flags that shaped the fit, for the source the written catalog records
    catalogs = "".join(f" --catalog {c}" for c in args.catalog or ())
    fits = "".join(f" --fit {f}" for f in args.fit or ())
    if args.tables:
        if args.timing not in (None, "roofline"):
            raise UserError("--timing: --tables fits the roofline (drop --timing)")
        catalog = kernel_catalog(catalog, args.framework)
        rows = [r for g in dict.fromkeys(args.tables) for r in kernel_rows(g, catalog)]
        timing = "roofline"
        fields = args.fit or list(dict.fromkeys(
            f for g in dict.fromkeys(args.tables)
            for f in table_fields(g, catalog, [r for r in rows if r.gpu == g])))
        framework = "" if args.framework == "vllm" else f" --framework {args.framework}"
        what = (f"the {args.framework} kernel tables of {', '.join(args.tables)} "
                f"(aiconfigurator-core 0.12.0), `specsim calibrate "
                + " ".join(f"--tables {g}" for g in args.tables) + catalogs + framework
                + fits + "`")
    else:
        rows = read_rows(args.measurements)
        timing = args.timing or "auto"
        fields = args.fit or default_fields(rows, catalog, timing)
        what = f"{args.measurements}, `specsim calibrate {args.measurements}{catalogs}{fits}`"
    result = fit(rows, fields, catalog, timing)
    n_fit = sum(r.split == "fit" for r in rows)
    test = "no held-out rows" if result.test_error is None else \
        f"held out {result.test_error:.1%} ({len(rows) - n_fit} rows)"
    source = (f"fitted on {what}: median |error| fit {result.fit_error:.1%} ({n_fit} rows), "
              f"{test}")
    out = Path(args.out) if args.out is not None else \
        default_run_dir("calibrate") / "catalog.yaml"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("# Written by specsim calibrate: only the fitted fields.\n"
                       + yaml.safe_dump(overrides(result, source), sort_keys=False))
    except OSError as err:
        raise UserError(f"--out: {out}: cannot write the catalog: {err.strerror}") from None
    if result.unsettled:
        print(f"warning: still moving after {RESTARTS} least-squares runs (a flat "
              f"stretch; run again with --catalog {out}): {', '.join(result.unsettled)}",
              file=sys.stderr)
    if args.json:
        print(json.dumps({
            "rows": len(rows), "fit_rows": n_fit, "timing": timing,
            "fields": [{"field": f, "before": b, "after": v} for f, b, v in
                       zip(result.fields, result.before, result.values, strict=True)],
            "fit_error": result.fit_error, "test_error": result.test_error,
            "unmoved": list(result.unmoved), "unsettled": list(result.unsettled),
            "catalog": str(out)}, indent=2))
        return 0
    print(f"{len(rows)} rows ({n_fit} fit, {len(rows) - n_fit} held out), timing {timing}")
    _print_fields(result)
    if result.unmoved:
        versions = {r.framework_version for r in rows if r.split == "fit"}
        keys = {field_entry(f) for f in result.unmoved if "@" in f}
        for key in sorted(keys):
            release = key.partition("@")[2]
            if release not in versions:
                print(f"note: no fit row has framework_version {release!r} ({key}); the "
                      f"fit rows' releases: "
                      f"{', '.join(sorted(v for v in versions if v)) or 'none stated'}")
    print(f"median |error|: fit {result.fit_error:.1%}; " + test)
    print(f"catalog: {out} (use it as deployment.catalog or --catalog)")
    return 0


def _check_out(out: Path) -> None:
    """Refuse an ``--out`` the catalog could not be written to, before the fit (seconds of
    work) rather than after it."""
    import os

    from specdec.errors import UserError

    if out.is_dir():
        raise UserError(f"--out: {out}: is a folder; give the catalog file to write")
    parent = next((p for p in (out.parent, *out.parent.parents) if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(f"--out: {out}: cannot write the catalog there")


def _speculative(args: argparse.Namespace, catalog) -> int:
    """Fit speculative overheads to a CSV of speculative runs; write and print the fit."""
    import yaml

    from hardware.timing.spec_fit import fit_spec, spec_default_fields
    from hardware.timing.spec_rows import read_spec_rows
    from sim.output import default_run_dir
    from specdec.errors import UserError

    rows = read_spec_rows(args.measurements)
    timing = args.timing or "auto"
    fields = args.fit or spec_default_fields(rows, catalog)
    result = fit_spec(rows, catalog, fields, timing)
    n_fit = sum(r.split == "fit" for r in rows)

    def pct(x) -> str:
        return "-" if x is None else f"{x:.1%}"

    catalogs = "".join(f" --catalog {c}" for c in args.catalog or ())
    fits = "".join(f" --fit {f}" for f in args.fit or ())
    source = (f"fitted on the speedups of {args.measurements}, `specsim calibrate "
              f"{args.measurements}{catalogs}{fits}`: median |error| of the speedup fit "
              f"{pct(result.speedup_fit)} ({n_fit} rows), held out "
              f"{pct(result.speedup_test)} ({len(rows) - n_fit} rows)")
    out_doc: dict = {}
    for path in [f for f in result.fields if f not in result.unmoved]:
        key = path.split(".speculation.")[0].removeprefix("frameworks.")
        base, _, release = key.partition("@")
        spec = result.catalog.framework(key).speculation
        block = {**spec.model_dump(exclude={"source"}), "source": source}
        entry = out_doc.setdefault("frameworks", {}).setdefault(base, {})
        if release:
            entry.setdefault("versions", {}).setdefault(release, {})["speculation"] = block
        else:
            entry["speculation"] = block
    out = Path(args.out) if args.out is not None else \
        default_run_dir("calibrate") / "catalog.yaml"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("# Written by specsim calibrate: only the fitted speculative "
                       "overheads.\n" + yaml.safe_dump(out_doc, sort_keys=False))
    except OSError as err:
        raise UserError(f"--out: {out}: cannot write the catalog: {err.strerror}") from None
    if args.json:
        print(json.dumps({
            "rows": len(rows), "fit_rows": n_fit, "timing": timing,
            "fields": [{"field": f, "before": b, "after": v} for f, b, v in
                       zip(result.fields, result.before, result.values, strict=True)],
            "speedup_fit_error": result.speedup_fit, "speedup_test_error": result.speedup_test,
            "spec_tpot_fit_error": result.tpot_fit, "spec_tpot_test_error": result.tpot_test,
            "unmoved": list(result.unmoved), "catalog": str(out)}, indent=2))
        return 0
    print(f"{len(rows)} speculative rows ({n_fit} fit, {len(rows) - n_fit} held out), "
          f"timing {timing}; fitted on the speedup")
    _print_fields(result)
    print(f"median |error| of the speedup: fit {pct(result.speedup_fit)}; held out "
          f"{pct(result.speedup_test)}; of the speculative TPOT: fit {pct(result.tpot_fit)}; "
          f"held out {pct(result.tpot_test)} (it includes the plain run's timing error)")
    print(f"catalog: {out} (use it as deployment.catalog or --catalog)")
    return 0


def _print_fields(result) -> None:
    """A fit's fields, before and after, and those no fit row depends on."""
    width = max(len(f) for f in result.fields)
    print(f"{'field':{width}s}  {'before':>11s}  {'after':>11s}")
    for f, b, v in zip(result.fields, result.before, result.values, strict=True):
        print(f"{f:{width}s}  {b:11.4g}  {v:11.4g}")
    if result.unmoved:
        print(f"not fitted (no fit row depends on them; left out of the catalog): "
              f"{', '.join(result.unmoved)}")
