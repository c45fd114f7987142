"""``specsim run``: simulate a scenario's speculation variants side by side."""

from __future__ import annotations

import argparse
import json
import sys

from sim.commands._lists import scenario_path, workers_flag
from sim.commands._sets import add_set_flag
from sim.engine_path import HELP, PATHS
from sim.limits import MAX_FLOAT, MAX_WORKERS

_HELP = """\
Run a scenario: every speculation variant it lists is simulated on the same arrivals
(same seed), and a summary is printed: TTFT, TPOT and end-to-end latency percentiles,
throughput, vLLM's acceptance rate and mean acceptance length, measured tokens per verify
against the i.i.d. formula at the measured alpha, and the speedup over the no-speculation
variant. Records (CSV), the fully resolved scenario and a report (report.md with tables/
and figures/: tokens per verify, CDFs, batch over time) are written under
runs/<name>-<timestamp>/ or --out; --no-report skips the report. With --load-curve the
report also draws latency against offered load with the crossover where speculation stops
paying: it re-simulates the scenario at 1/4x to 8x its load with --report-requests requests
per point up to its own rate and proportionally more above it (so every point spans the
same stretch of arrivals). That multiplies the run's cost several times, so it is asked for,
not done by default. The variants (and the load points) run side by side on --workers
processes, with the same records as one after the other.

A real deployment can be given as its command lines instead of scenario fields:
--from-vllm "vllm serve MODEL ..." (or --from-sglang "python -m sglang.launch_server ...",
or --from-trtllm "trtllm-serve MODEL --config FILE ...")
takes the model, parallelism, batching limits, prefix caching (on by default in both),
--gpu-memory-utilization (SGLang: --mem-fraction-static), KV dtype, quantization and the
--speculative-config drafter (a speculative_token_tree that is an expansion tree becomes
a tree policy), simulated beside the same deployment without speculation; an SGLang
launch also runs SGLang's scheduler (scheduler.order prefill_first: a prefill batch of at
most --chunked-prefill-size tokens whenever one can be formed, else the decode batch) and
its timing (deployment.framework sglang);
--bench "vllm bench serve ..." takes the workload (random dataset lengths, request rate,
burstiness, prompt count). Unknown or unsupported flags are errors naming the flag;
flags without effect on performance are listed. With --bench the results are also printed
the way vllm bench serve prints them.

examples:
  specsim run
  specsim run scenarios/default.yaml --set run.requests=200 --set workload.rate_per_s=8
  specsim run --seed 3 --json
  specsim run --load-curve --workers 2
  specsim run --from-vllm "vllm serve meta-llama/Llama-3.1-8B-Instruct \\
      --speculative-config '{\\"method\\": \\"eagle3\\", \\"num_speculative_tokens\\": 3}'" \\
      --bench "vllm bench serve --request-rate 4 --num-prompts 200"
"""


MAX_REPORT_REQUESTS = 100_000  # per point of the report's load curve


def add_parser(subparsers) -> None:
    """Register ``specsim run``."""
    p = subparsers.add_parser(
        "run",
        description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", nargs="?", default=None, type=scenario_path,
                   help="scenario YAML file (default: scenarios/default.yaml)")
    add_set_flag(p, "override a field, dotted key, YAML value (repeatable), "
                        "e.g. --set variants.1.policy.gamma=3")
    p.add_argument("--seed", type=int, default=None, help="override run.seed")
    p.add_argument("--from-vllm", default=None, metavar="CMD",
                   help="a 'vllm serve MODEL ...' command line as the deployment")
    p.add_argument("--from-sglang", default=None, metavar="CMD",
                   help="a 'python -m sglang.launch_server ...' command line as the "
                        "deployment")
    p.add_argument("--from-trtllm", default=None, metavar="CMD",
                   help="a 'trtllm-serve MODEL ...' command line (with its --config YAML) "
                        "as the deployment; a TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=N "
                        "before it forces the acceptance")
    p.add_argument("--bench", default=None, metavar="CMD",
                   help="a 'vllm bench serve ...' command line as the workload")
    p.add_argument("--out", default=None,
                   help="run folder (default: runs/<name>-<timestamp>); written whole or not "
                        "at all, and refused when it exists and is not empty")
    p.add_argument("--force", action="store_true",
                   help="replace --out if SpecSim wrote it (its .specsim-output marker "
                        "lists all it holds); any other folder is refused")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--no-report", action="store_true",
                   help="write records and summary only, no report.md / figures")
    p.add_argument("--load-curve", action="store_true",
                   help="the report also re-simulates the scenario at 1/4x to 8x its load: "
                        "latency vs offered load and the crossover")
    p.add_argument("--report-requests", type=int, default=None, metavar="N",
                   help="with --load-curve: requests per load point up to the scenario's own "
                        "rate, proportionally more above it; 1..100000 (default: 200)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="processes that simulate the variants side by side (the same "
                        "records as one after the other) and, with --load-curve, its load "
                        f"points (default: the CPUs, at most 5); 1..{MAX_WORKERS}")
    p.add_argument("--warmup", type=float, default=0.0, metavar="SECONDS",
                   help="simulated seconds trimmed from the report's tables, from 0 up to the "
                        "last arrival (default: 0)")
    p.add_argument("--max-memory", type=float, default=None, metavar="GIB",
                   help="refuse the run, before it starts, when its estimated peak memory "
                        "(the request table, iteration records, the report; printed on "
                        "stderr for large runs) is more than GIB GiB (default: the memory "
                        "available, /proc/meminfo's MemAvailable; not checked where unknown)")
    p.add_argument("--engine-path", choices=list(PATHS), default="auto",
                   help="how the engine computes its iterations, never what they are (the "
                        "records are the same on each): "
                        + "; ".join(f"{k}: {v}" for k, v in HELP.items()))
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Load, run, write (``sim.runner.run``) with the report (``sim.studies.run_report``)."""
    from sim.runner import run
    from specdec.errors import UserError

    if args.load_curve and args.no_report:
        raise UserError("--load-curve: draws into the report; drop --no-report or --load-curve")
    if args.report_requests is not None and not args.load_curve:
        raise UserError(f"--report-requests {args.report_requests}: only sizes the report's "
                        "load curve; add --load-curve or drop --report-requests")
    args.workers = workers_flag(args.workers)
    if args.report_requests is None:
        args.report_requests = 200
    if not 1 <= args.report_requests <= MAX_REPORT_REQUESTS:
        raise UserError(f"--report-requests: must be in 1..{MAX_REPORT_REQUESTS}, got "
                        f"{args.report_requests}")
    if args.max_memory is not None and not 0 < args.max_memory <= MAX_FLOAT:
        raise UserError(f"--max-memory: must be a number of GiB > 0, got {args.max_memory:g}")
    if not args.warmup >= 0:
        raise UserError(f"--warmup: must be >= 0 seconds, got {args.warmup:g}")
    if args.no_report and args.warmup > 0:
        raise UserError(f"--warmup {args.warmup:g}: only trims the report; drop --no-report "
                        "or --warmup")
    engine_sets, notes = _engine_sets(args)
    progress, bars = _progress(args.no_progress)
    reports: list = []

    def report(folder):  # inside the staged folder: a failed report leaves no run behind
        import pandas as pd

        from sim.studies.run_report import write_report

        last = max(float(pd.read_csv(f / "requests.csv")["arrival_at"].max())
                   for f in folder.iterdir() if (f / "requests.csv").exists())
        if args.warmup > last:
            raise UserError(f"--warmup {args.warmup:g}: the run's last request arrived at "
                            f"{last:.4g} s, so the report would hold no request; give a "
                            f"warm-up below that")
        reports.append(write_report(folder, warmup_s=args.warmup,
                                    load_requests=args.report_requests, workers=args.workers,
                                    load_curve=args.load_curve).name)

    try:
        result, out = run(args.scenario, args.overrides, args.seed, args.out, progress=progress,
                          engine_sets=engine_sets, force=args.force,
                          then=None if args.no_report else report,
                          check=lambda source, sc, built: _estimate(args, source, sc, built),
                          workers=args.workers,
                          meanwhile=None if args.no_report else _import_report,
                          engine_path=PATHS[args.engine_path])
    finally:
        for bar in bars.values():
            bar.close()
    report = out / reports[0] if reports else None
    from sim.build import cost_models

    # which timing backend priced the target's passes (the engine built the same one)
    timing = cost_models(result.scenario, False)[0].timing
    notes = notes + _order_notes(result.scenario)
    if args.json:
        doc = {"variants": [_public(s) for s in result.summaries], "out": str(out),
               "timing": timing.name, "timing_note": timing.note}
        if notes:
            doc["notes"] = notes
        if report is not None:
            doc["report"] = str(report)
        print(json.dumps(doc, indent=2))
    else:
        if args.bench is not None:
            print(format_vllm_bench(result.summaries))
        print(format_table(result.summaries))
        print(f"timing: {timing.note}")
        for note in notes:
            print(f"note: {note}")
        for s in result.summaries:
            for w in s["warnings"]:
                print(f"warning: {s['name']}: {w}")
        print(f"records: {out}/")
        if report is not None:
            print(f"report: {report}")
    return 0


def _order_notes(scenario) -> list[str]:
    """A note where the scenario prices one engine and schedules like another (SGLang runs
    prefill batches alone, first; vLLM and TensorRT-LLM put prompts in the decode step)."""
    fw, order = scenario.deployment.framework.partition("@")[0], scenario.scheduler.order
    if fw == "sglang" and order != "prefill_first":
        return [f"deployment.framework sglang with scheduler.order {order}: SGLang's own "
                "scheduler is prefill_first (--from-sglang sets it)"]
    if fw in ("vllm", "trtllm") and order == "prefill_first":
        return [f"deployment.framework {fw} with scheduler.order prefill_first (SGLang's): "
                f"{fw} puts prompts in the decode step (vllm_v1)"]
    return []


def _import_report() -> None:
    """Import the report's modules (matplotlib, pandas: about a second) while the variants
    simulate on worker processes, so that the report does not wait for them after."""
    import sim.studies.run_report  # noqa: F401


def _engine_sets(args) -> tuple[list[tuple[str, str]], list[str]]:
    """The (override, label) pairs and notes the engines' command lines give."""
    from hardware.catalog import load_catalog
    from sim.engines import bench, sglang, trtllm, vllm
    from sim.engines.common import (
        checkpoint_precision_sets,
        dense_moe_kernel_sets,
        online_fp8_sets,
    )
    from specdec.errors import UserError

    given = [f for f, v in (("--from-vllm", args.from_vllm), ("--from-sglang",
                                                               args.from_sglang),
                            ("--from-trtllm", args.from_trtllm)) if v is not None]
    if len(given) > 1:
        raise UserError(f"{', '.join(given)}: give one deployment")
    catalog = load_catalog()

    def resolve(model_id: str) -> str:
        try:
            return catalog.model(model_id).id
        except UserError as e:
            raise UserError(f"{flag}: {e}") from None

    def has_mtp(model_id: str) -> bool:
        return catalog.model(model_id).config.num_nextn_predict_layers > 0

    sets, notes = [], []
    for flag, text, parse in (("--from-vllm", args.from_vllm, vllm.parse_vllm_serve),
                              ("--from-sglang", args.from_sglang,
                               lambda t, r: sglang.parse_sglang(t, r, has_mtp)),
                              ("--from-trtllm", args.from_trtllm, trtllm.parse_trtllm)):
        if text is not None:  # an empty one (an unset variable) is the parser's error
            parsed = parse(text, resolve)
            online_fp8_sets(parsed, catalog)
            checkpoint_precision_sets(parsed, catalog, args.overrides)
            dense_moe_kernel_sets(parsed, catalog)
            sets += [(t, f"{flag} ({t})") for t in parsed.sets]
            notes += [f"{flag}: {n}" for n in parsed.notes]
            sets += vllm.preset_sets(parsed, flag, notes, args.overrides)
    if args.bench is not None:  # as above: an empty one is an error, not the scenario's
        parsed = bench.parse_vllm_bench(args.bench)
        sets += [(t, f"--bench ({t})") for t in parsed.sets]
        notes += [f"--bench: {n}" for n in parsed.notes]
    return sets, notes


LOUD_S = 10.0  # runs estimated to take longer, or more memory, say so first (stderr)
LOUD_BYTES = 2.0**30


def _estimate(args, source: str, scenario, built) -> None:
    """Before the requests are drawn (``built`` None) and again before they run: refuse a
    run whose memory estimate (``sim.estimate``) is more than ``--max-memory`` or what the
    machine has available, naming the fields that size it; say how large a large run
    will be (stderr)."""
    from sim import estimate as est
    from sim.cluster import walks
    from specdec.errors import UserError

    report = not args.no_report
    limit = args.max_memory * est.GIB if args.max_memory is not None else \
        est.available_bytes()
    if built is None:
        n = est.requests_bound(scenario)
        need = None if n is None else est.table_bytes(n, report)
        what = f"{n:,} requests"
    else:
        size = est.estimate(scenario, built, args.workers, report,
                            lambda setup: walks(setup, PATHS[args.engine_path]))
        need, what = size.bytes, f"{size.requests:,} requests"
    if limit is not None and need is not None and need > limit:
        given = "--max-memory" if args.max_memory is not None else "available here"
        raise UserError(
            f"{source}: run.requests, run.horizon_s: {what} need about {est.size_text(need)} "
            f"(estimate), more than the {est.size_text(limit)} {given}; give fewer run.requests "
            "or a shorter run.horizon_s (or --max-memory GIB)")
    if built is not None and (size.seconds > LOUD_S or size.bytes > LOUD_BYTES):
        print(f"specsim run: {size.line()}", file=sys.stderr)


_VLLM_BENCH = (
    ("Successful requests:", "finished", "{}"),
    ("Request throughput (req/s):", "requests_per_s", "{:.2f}"),
    ("Output token throughput (tok/s):", "throughput_tokens_per_s", "{:.2f}"),
    ("Median TTFT (ms):", "ttft_p50_s", "ms"),
    ("P99 TTFT (ms):", "ttft_p99_s", "ms"),
    ("Mean TPOT (ms):", "tpot_mean_s", "ms"),
    ("Median TPOT (ms):", "tpot_p50_s", "ms"),
    ("P99 TPOT (ms):", "tpot_p99_s", "ms"),
    ("Median ITL (ms):", "itl_p50_s", "ms"),
    ("P99 ITL (ms):", "itl_p99_s", "ms"),
    ("Acceptance rate (%):", "acceptance_rate", "pct"),
    ("Acceptance length:", "mean_acceptance_length", "{:.2f}"),
)


def format_vllm_bench(summaries: list[dict]) -> str:
    """The summaries as ``vllm bench serve`` prints its result block, one per variant."""
    out = []
    for s in summaries:
        out.append(f"{'=' * 12} Serving Benchmark Result ({s['name']}) {'=' * 12}")
        for label, key, fmt in _VLLM_BENCH:
            v = s.get(key)
            if v is None:
                continue
            text = f"{v * 1e3:.2f}" if fmt == "ms" else f"{v * 100:.2f}" if fmt == "pct" \
                else fmt.format(v)
            out.append(f"{label:<40}{text:>10}")
    out.append("=" * 50)
    return "\n".join(out)


_PUBLIC = ("name", "requests", "finished", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s",
           "tpot_p99_s", "itl_p50_s", "itl_p99_s", "e2e_p50_s", "e2e_p99_s",
           "throughput_tokens_per_s", "requests_per_s", "offered_rate_per_s",
           "served_rate_per_s", "overloaded", "preemptions", "recomputed_tokens",
           "prefix_hit_rate", "prefix_cached_tokens", "acceptance_rate",
           "mean_acceptance_length", "tokens_per_verify",
           "formula_tokens_per_verify", "speedup_vs_none", "speedup_tpot_p99", "warnings")


def _public(summary: dict) -> dict:
    return {k: summary[k] for k in _PUBLIC}


def _progress(disabled: bool):
    """A tqdm bar per variant over simulated time, on stderr when it is a terminal."""
    bars: dict = {}
    if disabled or not sys.stderr.isatty():
        return None, bars
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread: the worker processes are forked

    def tick(name: str, now: float, total: float) -> None:
        if name not in bars:
            bars[name] = tqdm(total=round(total, 3), desc=name, unit="sim s", file=sys.stderr,
                              leave=False)
        bar = bars[name]
        bar.total = max(bar.total, round(total, 3))
        bar.update(round(now - bar.n, 3))

    return tick, bars


_ROWS = (
    ("requests (finished/arrived)", lambda s: f"{s['finished']}/{s['requests']}"),
    ("TTFT p50 / p90 / p99 (ms)", lambda s: _ms(s, "ttft")),
    ("TPOT p50 / p90 / p99 (ms)", lambda s: _ms(s, "tpot")),
    ("ITL p50 / p99 (ms)", lambda s: _percentiles(s, "itl", 1e3, "{:.1f}", (50, 99))),
    ("end-to-end p50 / p90 / p99 (s)", lambda s: _percentiles(s, "e2e", 1.0, "{:.2f}")),
    ("throughput (tokens/s)", lambda s: _num(s["throughput_tokens_per_s"], "{:.0f}")),
    ("served / offered (req/s)", lambda s: f"{_num(s['served_rate_per_s'], '{:.2f}')} / "
                                           f"{_num(s['offered_rate_per_s'], '{:.2f}')}"),
    ("overloaded", lambda s: {None: "-", True: "YES", False: "no"}[s["overloaded"]]),
    ("preemptions (recomputed tokens)",
     lambda s: f"{s['preemptions']} ({s['recomputed_tokens']})"),
    ("prefix cache hit rate (cached tokens)", lambda s: (
        f"{_num(s['prefix_hit_rate'], '{:.3f}')} ({s['prefix_cached_tokens']})")),
    ("CPU tier hit rate (loaded tokens)", lambda s: (
        f"{_num(s['cpu_hit_rate'], '{:.3f}')} ({s['cpu_loaded_tokens']})")),
    ("CPU tier load p50 / p99 (ms)",
     lambda s: _percentiles(s, "cpu_load", 1e3, "{:.1f}", (50, 99))),
    ("KV wait p50 / p99 (ms)", lambda s: _percentiles(s, "kv_wait", 1e3, "{:.1f}", (50, 99))),
    ("KV on the link p50 / p99 (ms)",
     lambda s: _percentiles(s, "kv_transfer", 1e3, "{:.2f}", (50, 99))),
    ("acceptance rate (vLLM)", lambda s: _num(s["acceptance_rate"], "{:.3f}")),
    ("mean acceptance length (vLLM)", lambda s: _num(s["mean_acceptance_length"], "{:.3f}")),
    ("tokens/verify measured", lambda s: _num(s["tokens_per_verify"], "{:.3f}")),
    ("tokens/verify E(α̂,γ) formula", lambda s: _num(s["formula_tokens_per_verify"], "{:.3f}")),
    ("speedup vs none (mean TPOT)", lambda s: _num(s["speedup_vs_none"], "{:.2f}x")),
    ("speedup vs none (p99 TPOT)", lambda s: _num(s["speedup_tpot_p99"], "{:.2f}x")),
    ("SLO (p99 TTFT, TPOT)", lambda s: s.get("slo") or "-"),
)


def _num(v, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def _percentiles(s: dict, key: str, scale: float, fmt: str, qs=(50, 90, 99)) -> str:
    """``key``'s percentiles ``qs`` (``<key>_p<q>_s``) times ``scale``, " / " between."""
    return " / ".join(_num(None if s[f"{key}_p{q}_s"] is None else s[f"{key}_p{q}_s"] * scale,
                           fmt) for q in qs)


def _ms(s: dict, key: str) -> str:
    return _percentiles(s, key, 1000.0, "{:.1f}")


def format_table(summaries: list[dict]) -> str:
    """The summary as an aligned text table, one column per variant."""
    names = [s["name"] for s in summaries]
    caching = any(s.get("prefix_cached_tokens") is not None for s in summaries)
    pd = any("kv_wait_p50_s" in s for s in summaries)  # a P/D run (sim.disagg)
    tier = any("cpu_hit_rate" in s for s in summaries)  # a CPU tier (sim.offload)
    cells = [[label] + [fn(s) for s in summaries] for label, fn in _ROWS
             if (caching or not label.startswith("prefix cache"))
             and (pd or not label.startswith("KV "))
             and (tier or not label.startswith("CPU tier"))]
    header = [""] + names
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in [header, *cells]]
    return "\n".join(lines)
