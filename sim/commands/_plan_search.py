"""``specsim plan`` over a ``search:`` space: run the staged search, write, print the answer."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from sim.commands._plan_text import interval_note, needed, pool_lines, ranges

_SHOWN = ("rank", "candidate", "gpus", "rate_per_s", "status", "usd_per_million_tokens")


def searched(args, scenario, base: dict, space, slo: dict, doc: dict, source: str) -> int:
    """Search ``space`` (``sim.studies.plan_space``), write plan.csv, print the answer."""
    from tqdm import tqdm

    from reports.tables import json_records, write_table
    from sim.output import default_run_dir, rebased, staged_folder
    from sim.studies.plan_search import search_plan

    if args.top < 1:
        from specdec.errors import UserError

        raise UserError(f"--top: must be >= 1, got {args.top}")
    bars: dict = {}

    def progress(stage: str, done: int, total: int) -> None:
        if args.no_progress:
            return
        if stage not in bars:
            for bar in bars.values():
                bar.close()
            bars[stage] = tqdm(total=total, desc=f"plan {stage}", unit="task",
                               file=sys.stderr)
        bars[stage].update(done - bars[stage].n)

    out = Path(args.out if args.out is not None else default_run_dir(f"plan-{scenario.name}"))
    started = time.perf_counter()
    with staged_folder(out, "--out", args.force) as tmp:
        try:
            table, answer = search_plan(base, space, slo, source, args.target_rate,
                                        args.rel_tol, args.crossover_metric, progress, doc,
                                        args.overrides, args.workers,
                                        None if args.no_interval else args.acceptance_spread)
        finally:
            for bar in bars.values():
                bar.close()
        wall_s = time.perf_counter() - started
        paths = rebased(write_table(table, tmp / "plan"), tmp, out)
    answer.update({"wall_s": wall_s, "workers": args.workers,
                   "requests_per_run": scenario.run.requests, "seed": scenario.run.seed})
    if args.json:
        print(json.dumps({"slo": slo, "target_rate": args.target_rate, "search": answer,
                          "rows": json_records(table), "files": [str(p) for p in paths]},
                         indent=2))
        return 0
    _print(args, table, answer, slo, source, paths)
    return 0


def _print(args, table, answer: dict, slo: dict, source: str, paths) -> None:
    slo_text = ", ".join(f"{k.removesuffix('_s')} <= {v * 1e3:g} ms" for k, v in slo.items())
    left = "; ".join(f"{n} left out: {why}" for why, n in answer["skipped"].items())
    print(f"SLO: {slo_text}; fixed seed {answer['seed']}, {answer['requests_per_run']} "
          f"requests per run")
    print(f"searched {answer['candidates']} candidates on {answer['deployments']} "
          f"deployments: {answer['runs']} runs on {answer['workers']} workers in "
          f"{answer['wall_s']:.1f} s" + (f" ({left})" if left else ""))
    print(f"rates on a grid of {answer['grid_step']:.0%} steps (coarse: the limit is within "
          f"that of the rate shown); {answer['dominated']} dominated (stopped at a failing "
          f"rate where another candidate is cheaper for sure); the "
          f"{answer['refined']} that could still come first refined to within "
          f"{answer['rel_tol']:.0%}" + ("" if answer["interval"] is None else
                                         f"; {answer['interval']['runs']} runs for their "
                                         f"ranges"))
    cols = list(_SHOWN)
    if args.target_rate is not None:
        cols += ["replicas_for_target", "usd_per_hour_for_target"]
    shown = table.head(args.top).copy()
    # a dominated candidate's limit is only known to lie below the rate it failed at
    shown["rate_per_s"] = [f"<{f:.3g}" if st == "dominated" else f"{m:.3g}" for m, f, st in
                           zip(shown["max_rate_per_s"], shown["fail_rate_per_s"],
                               shown["status"], strict=True)]
    shown = shown[cols]
    interval = answer["interval"] is not None
    if interval:
        shown.insert(cols.index("rate_per_s") + 1, "rate_range", ranges(
            table.head(args.top), "max_rate_low_per_s", "max_rate_high_per_s"))
        if args.target_rate is not None:
            shown.insert(len(shown.columns) - 1, "gpus_needed", needed(table.head(args.top)))
    shown.insert(0, "", ["*" if c else "" for c in table["cheapest"].head(args.top)])
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if interval:
        print(interval_note(answer["interval"]["acceptance_spread"]) + "; only for the "
              "refined rows")
    if len(table) > args.top:
        print(f"({len(table) - args.top} more rows in {paths[0]})")
    best = table.iloc[0]
    if not best["cheapest"]:
        print("no candidate meets the SLO at any rate tried")
    else:
        print(f"* cheapest: {best['candidate']}; re-run: specsim run {source} "
              f"{best['run_args']}")
        if interval and best["max_rate_low_per_s"] == best["max_rate_low_per_s"]:
            print(f"  it serves {best['max_rate_per_s']:.3g} req/s (range "
                  f"{best['max_rate_low_per_s']:.3g}-{best['max_rate_high_per_s']:.3g})"
                  + ("" if args.target_rate is None else
                     f"; {args.target_rate:g} req/s need {needed(best.to_frame().T)[0]} "
                     f"GPUs"))
        _configs(best)
    _print_crossover(answer["crossover"], table, args.rel_tol)
    print(f"table: {paths[0]}")


def _configs(row) -> None:
    """The row's three engine configurations, with what each cannot say."""
    import shlex

    words = shlex.split(row["vllm_serve"])
    if "--speculative-config" in words:
        print(f"  vLLM --speculative-config: {words[words.index('--speculative-config') + 1]}")
    print(f"  vLLM:{pool_lines(row['vllm_serve'])}")
    _notes("vLLM", row["vllm_serve_notes"])
    print(f"  SGLang:{pool_lines(row['sglang_launch'])}")
    _notes("SGLang", row["sglang_launch_notes"])
    if row["trtllm_serve"]:
        print(f"  TensorRT-LLM: {row['trtllm_serve']}")
        print("  with this config.yaml:")
        for line in row["trtllm_config"].splitlines():
            print(f"    {line}")
    _notes("TensorRT-LLM", row["trtllm_serve_notes"])


def _notes(engine: str, notes: str) -> None:
    if notes:
        print(f"  ({engine}: {notes})")


def _print_crossover(cross: dict | None, table, rel_tol: float) -> None:
    if cross is None:
        print("crossover: no speculative candidate meets the SLO at any rate tried")
        return
    metric = cross["metric"]
    print(f"crossover on {metric}: {cross['speculative']} against {cross['baseline']} "
          f"(speculation beats it where its {metric} is at least "
          f"{cross['margin']:.0%} lower)")
    print(f"  {'rate/s':>8} {'spec ms':>8} {'off ms':>8} {'beats':>5} {'mean K':>6} "
          f"{'K=0':>5} {'batch':>6}")
    for s in cross["scan"]:
        print(f"  {s['rate_per_s']:8.3g} {s['speculative'] * 1e3:8.3g} "
              f"{s['baseline'] * 1e3:8.3g} {'yes' if s['beats'] else 'no':>5} "
              f"{s['mean_k']:6.2f} {s['off_share']:5.0%} {s['batch']:6.1f}")
    ctl = cross["controller"]
    if cross["all_beaten"]:
        print("  (every speculative candidate failed the SLO at a rate where a setup without "
              "speculation is cheaper: this one got furthest)")
    if cross["found"] == "always":
        print(f"  speculation beats no speculation at every rate scanned, up to "
              f"{cross['beats_up_to_per_s']:.3g} req/s (past both SLO limits): keep it on")
    elif cross["found"] == "never":
        print(f"  speculation does not beat no speculation even at "
              f"{cross['stops_at_per_s']:.3g} req/s, the lowest rate scanned")
    else:
        at = cross["at_crossover"]
        print(f"  turn speculation off above {cross['beats_up_to_per_s']:.3g} req/s (it no "
              f"longer beats at {cross['stops_at_per_s']:.3g}; within {rel_tol:.0%}). There "
              f"the {ctl} controller drafts K = {at['mean_k']:.2f} on average, none in "
              f"{at['off_share']:.0%} of decoding steps, at a mean batch of "
              f"{at['batch']:.1f} (no speculation: {at['baseline_batch']:.1f})")
        if cross["beats_again_at_per_s"] is not None:
            print(f"  (it beats again at {cross['beats_again_at_per_s']:.3g} req/s: the "
                  f"comparison is not monotone in the rate)")
    if cross["controllers_there"]:
        print(f"  the other controllers' best at {cross['controllers_there'][0]['rate_per_s']:.3g}"
              f" req/s on {cross['deployment']}:")
        for c in cross["controllers_there"]:
            print(f"    {c['candidate']} ({c['controller']}): K = {c['mean_k']:.2f} on "
                  f"average, none in {c['off_share']:.0%} of decoding steps, batch "
                  f"{c['batch']:.1f}; {metric} {c['value'] * 1e3:.3g} ms "
                  f"({'beats' if c['beats'] else 'does not beat'} no speculation)")
    row = table[table["candidate"] == cross["speculative"]].iloc[0]
    if not row["cheapest"]:
        print(f"  best speculative candidate: {row['candidate']} (rank {row['rank']})")
        _configs(row)
