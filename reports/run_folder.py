"""Reading a run folder written by ``sim.output.write_run`` back into DataFrames.

The folder holds ``scenario.yaml`` (resolved), ``summary.json`` and per variant
``requests.csv`` / ``iterations.csv``. The simulated duration is not stored as such; it is
recovered exactly from the summary (emitted tokens / throughput), or, for a variant that
emitted nothing, from the horizon or the end of the last iteration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from reports.tables import add_latencies
from specdec.errors import UserError


@dataclass(frozen=True)
class VariantFrames:
    """One variant's request and iteration tables and its simulated duration."""

    name: str
    policy: dict
    requests: pd.DataFrame
    iterations: pd.DataFrame
    duration_s: float


@dataclass(frozen=True)
class RunData:
    """A whole run folder: the resolved scenario (a dict), the summaries, every variant."""

    folder: Path
    scenario: dict
    summaries: list[dict]
    variants: list[VariantFrames]


def load_run(folder: str | Path) -> RunData:
    """Read ``folder``; a missing or malformed file is a one-line UserError."""
    folder = Path(folder)
    scenario = _read(folder / "scenario.yaml", yaml.safe_load)
    summaries = _read(folder / "summary.json", json.loads).get("variants", [])
    by_name = {s["name"]: s for s in summaries}
    variants = []
    for v in scenario.get("variants", []):
        name = v["name"]
        req = add_latencies(_csv(folder / name / "requests.csv"))
        it = _csv(folder / name / "iterations.csv")
        variants.append(VariantFrames(name, v.get("policy", {}), req, it,
                                      _duration(req, it, by_name.get(name), scenario)))
    return RunData(folder, scenario, summaries, variants)


def _duration(req: pd.DataFrame, it: pd.DataFrame, summary: dict | None, scenario: dict
              ) -> float:
    """When the variant's run ended (simulated seconds): the engine's ``end_at``."""
    if (summary or {}).get("end_at") is not None:
        return float(summary["end_at"])
    horizon = (scenario.get("run") or {}).get("horizon_s")
    if horizon:
        return float(horizon)
    return float((it["start_at"] + it["duration_s"]).max()) if len(it) else 0.0


def _read(path: Path, parse):
    try:
        return parse(path.read_text())
    except OSError as e:
        raise UserError(f"{path}: cannot read run file: {e.strerror}") from None
    except (ValueError, yaml.YAMLError) as e:
        raise UserError(f"{path}: not a valid run file: {' '.join(str(e).split())}") from None


def _csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except OSError as e:
        raise UserError(f"{path}: cannot read run file: {e.strerror}") from None


def summary_table(run: RunData, warmup_s: float = 0.0, slo: dict | None = None
                  ) -> pd.DataFrame:
    """One row per variant: ``reports.tables.summarize_frames`` plus speedups vs ``none``.

    ``slo`` defaults to the scenario's ``slo`` section (its p99 targets are applied per
    request for goodput). With ``warmup_s`` > 0 the requests that arrived and the iterations
    that started in the first seconds are left out: the rates then run from the first
    request kept (the run's end stays where it was).
    """
    from reports.tables import add_speedups, iteration_sums, summarize_frames, trim_warmup

    slo = run.scenario.get("slo") if slo is None else slo
    rows = []
    for v in run.variants:
        req, it = trim_warmup(v.requests, v.iterations, warmup_s)
        row = summarize_frames(v.name, req, iteration_sums(it), v.duration_s, slo)
        row["policy"] = v.policy.get("kind", "")
        rows.append(row)
    table = pd.DataFrame(rows)
    base = next((v.name for v in run.variants if v.policy.get("kind") == "none"), None)
    return add_speedups(table, base)
