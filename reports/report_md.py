"""``write_run_report(run, ...)``: report.md, tables and figures beside a run's records.

Given the run folder's data (``reports.run_folder``) and the tables the report study
computed (``sim.studies.run_report``: the load curve, the acceptance replay), writes:

    report.md                 the report (links the figures and tables below)
    tables/summary.csv        one row per variant (reports.tables columns + speedups)
    tables/load_curve.csv     latency vs offered load (re-simulated: sim.studies.load_curve)
    tables/tokens_per_verify.csv, tables/run_lengths.csv, tables/formula_bias.csv
    figures/latency_vs_load.png, figures/latency_cdf.png, figures/tokens_per_verify.png,
    figures/batch_over_time.png

(each table also as .parquet when pyarrow is importable). The latency-vs-load curve re-runs
the resolved scenario at several rates (or closed-loop user counts) with at most
``load_requests`` requests each; its point at the scenario's own load is the run itself, so
it passes through the summary. It is left out, with a note, for other arrival kinds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from reports import bursty, figures
from reports.run_folder import RunData
from reports.tables import load_column, write_table

# Summary columns shown in report.md: (column, header, scale, format).
_SHOWN = (
    ("name", "variant", None, "{}"),
    ("finished", "finished", None, "{}"),
    ("ttft_p50_s", "TTFT p50 ms", 1e3, "{:.1f}"),
    ("ttft_p99_s", "TTFT p99 ms", 1e3, "{:.1f}"),
    ("tpot_p50_s", "TPOT p50 ms", 1e3, "{:.2f}"),
    ("tpot_p99_s", "TPOT p99 ms", 1e3, "{:.2f}"),
    ("throughput_tokens_per_s", "tokens/s", 1, "{:.0f}"),
    ("goodput_requests_per_s", "goodput req/s", 1, "{:.2f}"),
    ("acceptance_rate", "acc. rate", 1, "{:.3f}"),
    ("mean_acceptance_length", "mean acc. len", 1, "{:.2f}"),
    ("mean_batch_size", "mean batch", 1, "{:.1f}"),
    ("speedup_tpot", "speedup (TPOT)", 1, "{:.2f}x"),
)
_SPLIT = (
    ("name", "variant", None, "{}"),
    ("draft_time_share", "draft", 100, "{:.1f}%"),
    ("prefill_time_share", "prefill", 100, "{:.1f}%"),
    ("decode_time_share", "verify/decode", 100, "{:.1f}%"),
    ("compute_bound_share", "compute-bound", 100, "{:.1f}%"),
    ("memory_bound_share", "memory-bound", 100, "{:.1f}%"),
    ("comm_bound_share", "comm-bound", 100, "{:.1f}%"),
)


def markdown_table(df: pd.DataFrame, spec) -> str:
    """A GitHub markdown table of ``df`` with (column, header, scale, format) ``spec``."""
    lines = ["| " + " | ".join(h for _, h, _, _ in spec) + " |",
             "|" + "|".join("---" for _ in spec) + "|"]
    for _, r in df.iterrows():
        cells = []
        for col, _, scale, fmt in spec:
            v = r.get(col)
            if v is None or (isinstance(v, float) and np.isnan(v)):
                cells.append("-")
            else:
                cells.append(fmt.format(v * scale if scale is not None else v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chain_gamma(run: RunData) -> int:
    """The γ used for the tokens-per-verify histogram: the first fixed-γ variant's, else the
    adaptive policy's max_gamma, else 4."""
    for v in run.variants:
        if v.policy.get("kind") == "fixed":
            return int(v.policy["gamma"])
    for v in run.variants:
        if v.policy.get("kind") == "adaptive":
            return int(v.policy.get("max_gamma", 4))
    return 4


def report_figures(run: RunData, load: pd.DataFrame | None, hist: pd.DataFrame
                   ) -> dict[str, figures.Figure]:
    """The report's figures by file stem (not saved yet, so callers can inspect them)."""
    name = run.scenario.get("name", "run")
    out = {}
    if load is not None:
        out["latency_vs_load"] = figures.latency_vs_load(
            load, title=f"{name}: latency vs offered load",
            note=_load_note(load, run.scenario["run"]["seed"]))
    out["latency_cdf"] = figures.latency_cdfs({v.name: v.requests for v in run.variants},
                                              title=f"{name}: TTFT and TPOT distributions")
    gamma = int(hist["gamma"].iloc[0])
    out["tokens_per_verify"] = figures.tokens_per_verify_hist(
        hist, title=f"{name}: tokens per verify, chain γ = {gamma}",
        note=f"Replay of the scenario's '{run.scenario['acceptance']['kind']}' acceptance "
             f"model; i.i.d. law at the measured α̂ = {hist['alpha_hat'].iloc[0]:.3f}.")
    out["batch_over_time"] = figures.batch_over_time(
        {v.name: v.iterations for v in run.variants}, title=f"{name}: batch size over time")
    return out


def save_each(figs: dict) -> dict:
    """Save ``{stem: (figure, path)}`` one after the other; returns ``{stem: path}``."""
    return {stem: figures.save(fig, path) for stem, (fig, path) in figs.items()}


def _load_note(load: pd.DataFrame, seed: int) -> str:
    """What each point of the latency-vs-load curve ran."""
    col = load_column(load)
    n = load.groupby(col)["requests"].max()
    unit = "req/s" if col == "rate_per_s" else "users"
    counts = (f"{n.iloc[0]} requests per point" if n.nunique() == 1 else
              f"{n.min()} requests per point at light load, up to {n.max()} at "
              f"{n.idxmax():g} {unit} (more requests at higher load: the same arrival "
              "window)")
    return (f"{counts}; the point at the scenario's own load is the run itself (the summary "
            f"above); seed {seed} at every load.")


def write_run_report(run: RunData, summary: pd.DataFrame, load: pd.DataFrame | None,
                     hist: pd.DataFrame, runs: pd.DataFrame, warmup_s: float = 0.0,
                     load_asked: bool = True, save_figures=None) -> Path:
    """Write report.md, tables/ and figures/ into ``run``'s folder; returns report.md's path.

    ``summary``: ``summary_table(run, warmup_s)``; ``load``: the latency-vs-load table or
    None (``load_asked``: whether it was asked for, so None means it could not be drawn);
    ``hist``, ``runs``: the acceptance replay's verify histogram and run lengths
    (``sim.studies.run_report`` computes all of them). ``save_figures(figs)`` saves
    ``{stem: (figure, path)}`` and returns ``{stem: path}`` (default: ``figures.save`` one
    after the other; the study draws them side by side on worker processes).
    """
    folder = run.folder
    bias = bursty.formula_bias(run.summaries)
    tables = {"summary": summary, "tokens_per_verify": hist, "run_lengths": runs,
              "formula_bias": bias}
    if load is not None:
        tables["load_curve"] = load
    for stem, df in tables.items():
        write_table(df, folder / "tables" / stem)
    todo = {stem: (fig, folder / "figures" / f"{stem}.png")
            for stem, fig in report_figures(run, load, hist).items()}
    figs = (save_figures or save_each)(todo)
    text = _markdown(run, summary, load, hist, runs, bias, figs, warmup_s, load_asked)
    path = folder / "report.md"
    path.write_text(text)
    return path


def _markdown(run, summary, load, hist, runs, bias, figs, warmup_s, load_asked) -> str:
    sc = run.scenario
    meta = _meta(run.folder)
    dep, w = sc["deployment"], sc["workload"]
    rel = {k: p.relative_to(run.folder).as_posix() for k, p in figs.items()}
    out = [f"# Run report: {sc.get('name', 'run')}", ""]
    out.append(f"Source `{meta.get('source', '?')}`, seed {sc['run']['seed']}, "
               f"specsim {meta.get('version', '?')}; overrides: "
               f"{', '.join(f'`{o}`' for o in meta.get('overrides') or []) or 'none'}.")
    out.append(f"Target `{sc['models']['target']}`, draft `{sc['models'].get('draft')}` on "
               f"{dep['replicas']} x {dep['gpu']} (TP {dep['tp']}, PP {dep['pp']}); arrivals "
               f"`{w['arrivals']}`" + (f" at {w['rate_per_s']:g} req/s" if w.get("rate_per_s")
                                       else "") +
               f"; acceptance `{sc['acceptance']['kind']}`; {sc['run'].get('requests')} "
               "requests.")
    if warmup_s > 0:
        out.append(f"Statistics exclude requests that arrived in the first {warmup_s:g} s.")
    slo = {k: v for k, v in (sc.get("slo") or {}).items() if v is not None}
    out += ["", "## Summary", "", markdown_table(summary, _SHOWN), ""]
    out.append("Goodput counts finished requests whose own TTFT and TPOT meet the SLO ("
               + (", ".join(f"{k.removesuffix('_s')} <= {v * 1e3:g} ms" for k, v in slo.items())
                  or "none set") + ", applied per request). Speedup: mean TPOT of `none` "
               "over the variant's.")
    out += _health(run.summaries)
    out += ["", "## Where the time goes", "", markdown_table(summary, _SPLIT), "",
            "Prefill vs decode split the target pass by the share of new tokens each "
            "contributed; bound shares weight each iteration by its duration.", ""]
    out += ["## Latency vs offered load", ""]
    if load is None and not load_asked:
        out.append("Not computed: `specsim run --load-curve` re-simulates the scenario at 1/4x "
                   "to 8x its load and draws latency against offered load here, with the "
                   "crossover where speculation stops paying (several times the run's cost; "
                   "`--workers` spreads its points over processes).")
    elif load is None:
        out.append("Not drawn: the arrivals are neither rate-driven (poisson, gamma) nor a "
                   "closed loop, so the scenario cannot be re-run at scaled load.")
    else:
        out.append(f"![latency vs load]({rel['latency_vs_load']})")
        out.append("")
        out.append(_crossovers(load))
    out += ["", "## Latency distributions", "", f"![latency CDFs]({rel['latency_cdf']})", ""]
    out += ["## Acceptance: measured vs the i.i.d. formula", "",
            markdown_table(bias, (("name", "variant", None, "{}"),
                                  ("tokens_per_verify", "tokens/verify", 1, "{:.3f}"),
                                  ("formula_tokens_per_verify", "E(α̂,γ)", 1, "{:.3f}"),
                                  ("formula_over_prediction", "formula error", 100,
                                   "{:+.1f}%"),
                                  ("tpot_p99_over_p50", "TPOT p99/p50", 1, "{:.2f}"))),
            "", "Formula error > 0: the i.i.d. formula over-predicts tokens per verify (easy "
                "and hard stretches make acceptance bursty, lecture §4.5). Two acceptance "
                "rates appear in this report: the summary's *acc. rate* is vLLM's accepted / "
                "drafted, which counts the guesses after the first rejection that are never "
                "checked; α̂ is accepted / checked guesses, the α of the formula E(α̂, γ). The "
                "histogram and run lengths below replay the scenario's acceptance model with "
                "their own draws, so their α̂ differs a little from the run's.", "",
            f"![tokens per verify]({rel['tokens_per_verify']})", ""]
    tail = runs[runs["run_length"] >= 8]
    out.append(f"Runs of accepted tokens (replay, α̂ = {runs['alpha_hat'].iloc[0]:.3f}): "
               f"{runs['measured'].iloc[0]:.1%} are empty (i.i.d.: {runs['iid'].iloc[0]:.1%}), "
               f"{tail['measured'].sum():.1%} reach 8 or more (i.i.d.: {tail['iid'].sum():.1%}).")
    out += ["", "## Batch size over time", "", f"![batch size]({rel['batch_over_time']})", "",
            "## Files", "",
            "Tables (CSV, and Parquet when pyarrow is installed) under `tables/`: summary, "
            "load_curve, tokens_per_verify, run_lengths, formula_bias. Records: "
            "`<variant>/requests.csv`, `<variant>/iterations.csv`; resolved scenario: "
            "`scenario.yaml`.", ""]
    return "\n".join(out)


_HEALTH = (
    ("name", "variant", None, "{}"),
    ("offered_rate_per_s", "offered req/s", 1, "{:.2f}"),
    ("served_rate_per_s", "served req/s", 1, "{:.2f}"),
    ("overloaded", "overloaded", None, "{}"),
    ("preemptions", "preemptions", None, "{}"),
    ("recomputed_tokens", "recomputed tokens", None, "{}"),
    ("itl_p50_s", "ITL p50 ms", 1e3, "{:.2f}"),
    ("itl_p99_s", "ITL p99 ms", 1e3, "{:.2f}"),
    ("speedup_tpot_p99", "speedup (p99 TPOT)", 1, "{:.2f}x"),
)

_PREFIX = (  # with scheduler.prefix_caching
    ("prefix_hit_rate", "prefix hit rate", 1, "{:.3f}"),
    ("prefix_cached_tokens", "cached prompt tokens", None, "{}"),
)


def _health(summaries: list[dict]) -> list[str]:
    """The serving-health section: load, preemption, ITL, tail speedup, and the warnings."""
    if not summaries or "overloaded" not in summaries[0]:
        return []
    table = pd.DataFrame(summaries)
    spec = _HEALTH
    if any(s.get("prefix_cached_tokens") is not None for s in summaries):
        spec = (*_HEALTH[:6], *_PREFIX, *_HEALTH[6:])
    out = ["", "## Serving health", "", markdown_table(table, spec), "",
           "Throughput is what the run delivered from its first arrival to its last "
           "completion (to its end, where requests were still unfinished); "
           "*overloaded* means completions fell behind arrivals (the queue grew) over the "
           "second half of the arrivals, so throughput there is the capacity and latency "
           "grows with the run's length. ITL is vLLM's: the gaps between consecutive output "
           "chunks of a request (with speculation a chunk carries several tokens).", ""]
    lines = [f"- **{s['name']}**: {w}" for s in summaries for w in s.get("warnings") or []]
    out += ["Warnings:", "", *lines] if lines else ["No warnings."]
    return out


def _crossovers(load: pd.DataFrame) -> str:
    """One sentence per speculating variant and metric: where it crosses plain decoding."""
    base = figures.baseline_variant(load)
    if base is None:
        return "No `none` variant: no crossover to mark."
    parts = [f"{name}: {figures.compare_curves(load, metric, base, v)}"
             for metric, name in (("tpot_p50_s", "Median TPOT"), ("ttft_p99_s", "p99 TTFT"))
             for v in dict.fromkeys(load["variant"]) if v != base]
    return ". ".join(parts) + "."


def _meta(folder: Path) -> dict:
    try:
        return yaml.safe_load((folder / "meta.yaml").read_text()) or {}
    except OSError:
        return {}
