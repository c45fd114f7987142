"""``specsim plan``: the cheapest deployment that meets an SLO at a given traffic."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.commands._lists import file_path, scenario_path, workers_flag
from sim.commands._plan_text import interval_note, needed, pool_lines, ranges
from sim.commands._sets import add_set_flag
from sim.limits import MAX_RATE, MAX_WORKERS
from specdec.errors import UserError

_HELP = """\
Capacity planning. For each candidate deployment (GPU type x count x TP x speculation
policy) find, with the simulator at the scenario's fixed seed and request count, the highest
request rate that meets the SLO: the rate is doubled/halved from the scenario's until the
SLO flips, then bisected until the failing rate is within --rel-tol (default 5%) of the
passing one. A pass where the deployment completes under half the offered rate (the
requests came as one burst, or queued up) is refused: the run is too short or the SLO too
loose to find a limit; raise run.requests or tighten the SLO. Reports that rate, the
replicas a --target-rate needs, and the cost per million output tokens from the catalog's
hourly GPU prices; ranks the candidates and marks the cheapest.

SLO: --slo ttft_p99=2s,tpot_p50=50ms (metrics ttft, tpot, e2e; any percentile; units s, ms,
us); without --slo the scenario's slo: section is used. A run meets the SLO when every
request finished and every listed percentile is within its limit.

Candidates file (YAML):
  candidates:
    - name: h200-tp2-chain4
      set: {deployment.gpu: h200, deployment.tp: 2}   # dotted scenario overrides
      policy: {kind: fixed, gamma: 4}                  # the one policy it runs
Without --candidates, each variant of the scenario is a candidate on its own deployment.
Each row's run_args re-runs it: specsim run SCENARIO <run_args>.

Or a search space (a candidates file with a search: section instead; see
scenarios/plan-search-llama8b.yaml and docs/how-to/choose-a-speculation-setup.md):
  search:
    gpus: [h100, h200]                # x tp: the deployments (or deployments: [{name, set}])
    tp: [1, 2]
    methods: {eagle3: {drafter: {method: eagle3}, acceptance: {kind: preset, name: ...}}}
    k: [1, 2, 3, 4]                   # draft lengths
    trees: [[2, 1, 1]]                # optional expansion trees
    controllers: [fixed, vllm_ladder, trtllm, sglang_adaptive, adaptive]
    off_above: [32, 64]               # ladder / trtllm: speculation off above this batch
Each deployment also runs without speculation. Rates are found on a grid of 19% steps; a
candidate stops where another is cheaper for sure (dominated), and only those that could
still come first are refined to --rel-tol (each row says its status and precision). The
answer adds the crossover: the request rate above which the best speculative candidate
stops beating its deployment without speculation on --crossover-metric (by at least 1%),
found by simulation, and what its controller does there; and the winner's vLLM, SGLang and
TensorRT-LLM configurations.

Interval: each capacity figure (the highest rate, the replicas and GPUs a --target-rate
needs) comes with a low-high range: the rate limit found again with the step times x (1 +
e) and the acceptance at its low end, and with x (1 - e) and its high end. e is the
held-out median |error| of the timing on the speculative decoding runs of `specsim
validate` (category E): of their speculative TPOT for a speculative candidate (its
drafting method's rows where it has some), of the same runs' TPOT without speculation for
one without. The acceptance's ends: a task_mix's least and most accepting task, and every
per-guess rate x (1 -/+ --acceptance-spread) (default 0: the presets state no range). It
is the range of answers at the ends of these spreads, not a confidence interval, and it
leaves out the spread over seeds. A list of candidates gets one for each; a search for
the rows refined to --rel-tol (the others' rates are known only to the grid's 19%).
--no-interval skips it (two more searches a row).

examples:
  specsim plan scenarios/plan-llama70b.yaml --candidates scenarios/plan-candidates.yaml \\
      --slo ttft_p99=2s,tpot_p99=50ms --target-rate 30
  specsim plan scenarios/plan-llama8b.yaml --candidates scenarios/plan-search-llama8b.yaml \\
      --target-rate 100 --workers 2
"""

_SHOWN = ("rank", "candidate", "gpu", "gpus", "policy", "max_rate_per_s", "usd_per_hour",
          "usd_per_million_tokens")


def add_parser(subparsers) -> None:
    """Register ``specsim plan``."""
    p = subparsers.add_parser(
        "plan",
        description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", type=scenario_path,
                   help="base scenario YAML (workload, models, run, slo)")
    p.add_argument("--slo", default=None, help="e.g. ttft_p99=2s,tpot_p50=50ms")
    p.add_argument("--candidates", default=None, type=file_path, help="candidates YAML file")
    p.add_argument("--target-rate", type=float, default=None,
                   help="requests/s to serve: replicas needed and their hourly cost "
                        f"(> 0, at most {MAX_RATE:g})")
    p.add_argument("--rel-tol", type=float, default=0.05,
                   help="stop bisecting when fail rate <= pass rate x (1 + tol) (default 0.05)")
    add_set_flag(p, "override a field of the base scenario (repeatable)")
    p.add_argument("--out", default=None, help="write plan.csv here (default: runs/plan-...)")
    p.add_argument("--force", action="store_true",
                   help="replace --out if SpecSim wrote it (its .specsim-output marker "
                        "lists all it holds); any other folder is refused")
    p.add_argument("--crossover-metric", default=None,
                   help="a search's crossover compares this latency (ttft, tpot, itl or e2e; "
                        "p50 or p99; default: the SLO's TPOT percentile, else tpot_p50)")
    p.add_argument("--top", type=int, default=15,
                   help="rows of a search's table printed (all are in plan.csv; default 15)")
    p.add_argument("--acceptance-spread", type=float, default=0.0, metavar="F",
                   help="the interval's acceptance ends: every per-guess acceptance rate x "
                        "(1 - F) and x (1 + F), at most 1 (0 <= F < 1; default 0)")
    p.add_argument("--no-interval", action="store_true",
                   help="no interval on the capacity figures (faster)")
    p.add_argument("--json", action="store_true", help="print the ranking as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="candidates searched at once in local processes (default: the CPUs, "
                        f"at most 5; the table is the same for any N); 1..{MAX_WORKERS}")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Search every candidate, rank, write, print."""
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread: the worker processes are forked

    from reports.tables import json_records, write_table
    from sim.commands._plan_search import searched
    from sim.loading import display_path, read_yaml, validate_overridden
    from sim.output import default_run_dir, rebased, staged_folder
    from sim.studies.plan import (
        Candidate,
        load_candidates,
        parse_slo,
        plan,
        slo_from_scenario,
    )
    from sim.studies.plan_space import load_search

    args.workers = workers_flag(args.workers)
    if not 0 < args.rel_tol < 1:
        raise UserError(f"--rel-tol: must be in (0, 1), got {args.rel_tol}")
    if not 0 <= args.acceptance_spread < 1:
        raise UserError(f"--acceptance-spread: must be >= 0 and < 1, got "
                        f"{args.acceptance_spread:g}")
    if args.target_rate is not None and not 0 < args.target_rate <= MAX_RATE:
        raise UserError(f"--target-rate: requests/s, must be > 0 and <= {MAX_RATE:g}, got "
                        f"{args.target_rate:g}")
    path = Path(args.scenario)
    source = display_path(path)
    doc = read_yaml(path)
    scenario = validate_overridden(doc, args.overrides, source)
    base = scenario.model_dump(mode="json")
    # an empty --slo or --candidates (an unset variable) is refused, not taken as absent
    slo = parse_slo(args.slo) if args.slo is not None else slo_from_scenario(scenario)
    space = load_search(args.candidates, base) if args.candidates is not None else None
    if space is not None:
        return searched(args, scenario, base, space, slo, doc, source)
    if args.candidates is not None:
        candidates = load_candidates(args.candidates)
    else:
        candidates = [Candidate(v.name, {}, v.policy.model_dump(mode="json", exclude_none=True),
                                f"{source} variants.{i} {v.name}",
                                {k: getattr(v, k).model_dump(mode="json", exclude_none=True)
                                 for k in ("drafter", "acceptance") if getattr(v, k)})
                      for i, v in enumerate(scenario.variants)]
    out = Path(args.out if args.out is not None else default_run_dir(f"plan-{scenario.name}"))
    with staged_folder(out, "--out", args.force) as tmp:
        bar = tqdm(total=len(candidates), desc="plan", unit="candidate", file=sys.stderr,
                   disable=args.no_progress)
        try:
            table = plan(base, candidates, slo, source, args.target_rate, args.rel_tol,
                         lambda name: bar.update(1), doc=doc, sets=args.overrides,
                         workers=args.workers)
        finally:
            bar.close()
        if not args.no_interval:
            table = _intervals(args, table, base, candidates, slo, source, doc)
        paths = write_table(table, tmp / "plan")
        if table["pareto"].any():
            from reports import figures

            paths.append(figures.save(figures.pareto_front(
                table, title=f"{scenario.name}: throughput per GPU vs per-user speed"),
                tmp / "pareto.png"))
        paths = rebased(paths, tmp, out)
    slo_text = ", ".join(f"{k.removesuffix('_s')} <= {v * 1e3:g} ms" for k, v in slo.items())
    if args.json:
        rows = json_records(table)
        print(json.dumps({"slo": slo, "rel_tol": args.rel_tol, "target_rate": args.target_rate,
                          "interval": None if args.no_interval else
                          {"acceptance_spread": args.acceptance_spread},
                          "rows": rows, "files": [str(p) for p in paths]}, indent=2))
        return 0
    cols = list(_SHOWN)
    if table["pd"].astype(bool).any():  # P/D candidates: their prefill:decode replicas
        cols.insert(cols.index("gpus") + 1, "pd")
    if args.target_rate is not None:
        cols += ["replicas_for_target", "usd_per_hour_for_target"]
    shown = table[cols].copy()
    if not args.no_interval:
        shown.insert(cols.index("max_rate_per_s") + 1, "rate_range", ranges(
            table, "max_rate_low_per_s", "max_rate_high_per_s"))
        if args.target_rate is not None:
            shown.insert(len(shown.columns) - 1, "gpus_needed", needed(table))
    shown.insert(0, "", ["*" if c else "" for c in table["cheapest"]])
    print(f"SLO: {slo_text}; rates within {args.rel_tol:.0%} (fixed seed "
          f"{scenario.run.seed}, {scenario.run.requests} requests per run)")
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if not args.no_interval:
        print(interval_note(args.acceptance_spread))
    best = table.iloc[0]
    if best["cheapest"]:
        print(f"* cheapest: {best['candidate']}; re-run: specsim run {source} {best['run_args']}")
        print(f"  serve it:{pool_lines(best['vllm_serve'])}")
        if best["vllm_serve_notes"]:
            print(f"  ({best['vllm_serve_notes']})")
        print(f"  or with SGLang:{pool_lines(best['sglang_launch'])}")
        if best["sglang_launch_notes"]:
            print(f"  ({best['sglang_launch_notes']})")
        if best["trtllm_serve"]:
            print(f"  or with TensorRT-LLM: {best['trtllm_serve']}")
            print("  and this config.yaml:")
            for line in best["trtllm_config"].splitlines():
                print(f"    {line}")
        if best["trtllm_serve_notes"]:
            print(f"  ({best['trtllm_serve_notes']})")
        front = ", ".join(table.loc[table["pareto"], "candidate"])
        print(f"Pareto front (tokens/s per GPU vs per-user tokens/s): {front}")
    else:
        print("no candidate meets the SLO at any rate tried")
    print(f"table: {paths[0]}")
    return 0


def _intervals(args, table, base: dict, candidates, slo: dict, source: str, doc: dict):
    """The table with each candidate's interval (``sim.studies.plan_interval``)."""
    from tqdm import tqdm

    from sim.studies.plan_interval import candidate_intervals

    bar = tqdm(total=2 * len(candidates), desc="plan interval", unit="search",
               file=sys.stderr, disable=args.no_progress)

    def progress(stage: str, done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        table, _ = candidate_intervals(table, base, candidates, slo, source,
                                       args.acceptance_spread, args.rel_tol,
                                       args.target_rate, doc, args.overrides, args.workers,
                                       progress)
    finally:
        bar.close()
    return table

