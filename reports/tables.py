"""DataFrames from a run's records: per-request latencies, per-variant summaries, speedups.

The engine emits flat records stored by column (``sim.records.Records``); this module is
where they become pandas tables. Definitions follow ``sim.summary`` (TTFT, TPOT, vLLM's
acceptance counters) and add:

- ``throughput_tokens_per_s``, ``requests_per_s``: over the span the requests occupied
  (first arrival to the last completion, or to the end of the run when some request had
  not finished), exactly as ``sim.summary.span_s`` (so a sweep point, a load-curve point
  and a run's summary agree).
- ``goodput_requests_per_s``: requests per second (over the same span) whose *own* TTFT
  and TPOT meet the scenario's SLO thresholds
  (DistServe's goodput). A threshold the SLO leaves unset is
  not checked; with no SLO at all goodput equals requests/s.
- ``mean_batch_size``: sequences per target pass, weighted by iteration duration (the batch
  an observer sees at a random instant while the replica is busy).
- time split: draft seconds, and the verify pass split between prefill and decode by the
  share of its new tokens each contributed (a pass's cost is not linear in tokens, so this
  is an attribution, not a measurement).
- bound shares: fraction of busy time whose target pass was compute-, memory-, comm- or
  host-bound.

These come from sums over the iterations (:func:`iteration_sums` of a frame, or the
engine's own, ``sim.records.IterationTotals``, which a run keeps without its rows); a
frame's are taken at once, the engine's a block of rows at a time, so the two agree to
rounding.

Warm-up trimming drops requests that arrived in the first ``warmup_s`` seconds (and the
iterations that started then) before any statistic is taken.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

BOUNDS = ("compute", "memory", "comm", "host")
LOAD_COLUMNS = ("rate_per_s", "users")  # the load axis of a latency-vs-load table


def load_column(table: pd.DataFrame) -> str:
    """The load column of a latency-vs-load table (``sim.studies.load_curve``)."""
    return next(c for c in LOAD_COLUMNS if c in table.columns)


def requests_frame(records) -> pd.DataFrame:
    """One row per request record, plus ``ttft_s``, ``tpot_s`` and ``e2e_s`` (nan if n/a).

    ``records`` is the engine's column table (``sim.records.Records``: its ``columns`` map
    each field, in order, to an array), as for :func:`iterations_frame`.
    """
    return add_latencies(pd.DataFrame(records.columns))


def iterations_frame(records) -> pd.DataFrame:
    """One row per iteration record (from the engine's column table)."""
    return pd.DataFrame(records.columns)


def add_latencies(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (request columns) with ``ttft_s``, ``tpot_s``, ``e2e_s`` added.

    TPOT is only defined for finished requests with more than one output token.
    """
    out = df.copy()
    out["finished"] = out["finished"].astype(bool)
    out["ttft_s"] = out["first_token_at"] - out["arrival_at"]
    multi = out["finished"] & (out["output_tokens"] > 1)
    tpot = (out["finished_at"] - out["first_token_at"]) / (out["output_tokens"] - 1)
    out["tpot_s"] = tpot.where(multi)
    out["e2e_s"] = (out["finished_at"] - out["arrival_at"]).where(out["finished"])
    return out


def trim_warmup(requests: pd.DataFrame, iterations: pd.DataFrame, warmup_s: float
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Drop requests that arrived, and iterations that started, before ``warmup_s``."""
    if warmup_s < 0:
        from specdec.errors import UserError

        raise UserError(f"warmup_s: must be >= 0, got {warmup_s}")
    return (requests[requests["arrival_at"] >= warmup_s],
            iterations[iterations["start_at"] >= warmup_s])


def meets_slo(requests: pd.DataFrame, slo: dict | None) -> pd.Series:
    """Per request: finished and within every per-request threshold of ``slo``.

    ``slo`` maps ``ttft_s`` / ``tpot_s`` / ``e2e_s`` (or the scenario's ``ttft_p99_s`` /
    ``tpot_p99_s``, read as per-request thresholds) to seconds; ``None`` values are unset.
    """
    ok = requests["finished"].astype(bool).copy()
    for key, limit in (slo or {}).items():
        if limit is None:
            continue
        col = _slo_column(key)
        values = requests[col]
        # A one-token request has no TPOT: nothing to violate.
        ok &= values.le(limit) | (values.isna() & (col == "tpot_s"))
    return ok


def _slo_column(key: str) -> str:
    metric = key.split("_")[0]
    if metric not in ("ttft", "tpot", "e2e"):
        from specdec.errors import UserError

        raise UserError(f"slo.{key}: unknown metric (ttft, tpot or e2e)")
    return f"{metric}_s"


def summarize_frames(name: str, requests: pd.DataFrame, sums: dict,
                     duration_s: float, slo: dict | None = None) -> dict:
    """The summary of one variant from its requests frame and its iterations' ``sums``
    (:func:`iteration_sums`; keys as ``sim.summary`` plus extras)."""
    fin = requests[requests["finished"]]
    drafted = int(requests["drafted_tokens"].sum())
    accepted = int(requests["accepted_tokens"].sum())
    drafts = int(requests["draft_steps"].sum())
    steps = int(requests["verify_steps"].sum())
    row: dict = {"name": name, "requests": len(requests), "finished": len(fin)}
    for metric in ("ttft", "tpot", "e2e"):
        values = requests[f"{metric}_s"].dropna().to_numpy()
        for q in (50, 90, 99):
            row[f"{metric}_p{q}_s"] = float(np.percentile(values, q)) if len(values) else np.nan
        row[f"{metric}_mean_s"] = float(values.mean()) if len(values) else np.nan
    good = meets_slo(requests, slo)
    # over the span the requests occupied, as sim.summary.span_s: first arrival to the last
    # completion, or to the end of the run (duration_s) when one had not finished
    end = float(requests["finished_at"].max()) if len(fin) == len(requests) > 0 \
        else duration_s
    span = end - (float(requests["arrival_at"].min()) if len(requests) else 0.0)
    span = span if span > 0 else np.nan
    row["throughput_tokens_per_s"] = int(requests["emitted_tokens"].sum()) / span
    row["requests_per_s"] = len(fin) / span
    row["goodput_requests_per_s"] = int(good.sum()) / span
    row["acceptance_rate"] = accepted / drafted if drafted else np.nan
    row["mean_acceptance_length"] = 1 + accepted / drafts if drafts else np.nan
    row["tokens_per_verify"] = (accepted + steps) / steps if steps else np.nan
    row.update(iteration_stats(sums))
    return row


def iteration_sums(iterations: pd.DataFrame) -> dict:
    """The sums :func:`iteration_stats` takes, of an iterations frame, as
    ``sim.records.IterationTotals`` names them: ``busy_s``, ``batch_size_s``, ``draft_s``,
    ``verify_s``, ``prefill_s`` and ``bound_s``, (bound, seconds) pairs."""
    w = iterations["duration_s"]
    new = (iterations["prefill_tokens"] + iterations["verify_tokens"]).replace(0, np.nan)
    prefill_s = (iterations["verify_s"] * iterations["prefill_tokens"] / new).fillna(0.0)
    return {"busy_s": float(w.sum()), "batch_size_s": float((iterations["batch_size"] * w).sum()),
            "draft_s": float(iterations["draft_s"].sum()),
            "verify_s": float(iterations["verify_s"].sum()), "prefill_s": float(prefill_s.sum()),
            "bound_s": tuple((b, float(s)) for b, s in w.groupby(iterations["bound"]).sum()
                             .items())}


def iteration_stats(sums: dict) -> dict:
    """Duration-weighted mean batch size, the draft/prefill/decode time split, bound shares,
    from the iterations' ``sums`` (:func:`iteration_sums`)."""
    busy = sums["busy_s"]
    out: dict = {"busy_s": busy}
    if busy <= 0:
        out["mean_batch_size"] = np.nan
        for k in ("draft", "prefill", "decode"):
            out[f"{k}_time_share"] = np.nan
        for b in BOUNDS:
            out[f"{b}_bound_share"] = np.nan
        return out
    out["mean_batch_size"] = sums["batch_size_s"] / busy
    out["draft_time_share"] = sums["draft_s"] / busy
    out["prefill_time_share"] = sums["prefill_s"] / busy
    out["decode_time_share"] = (sums["verify_s"] - sums["prefill_s"]) / busy
    bound_s = dict(sums["bound_s"])
    for b in BOUNDS:
        out[f"{b}_bound_share"] = bound_s.get(b, 0.0) / busy
    return out


def add_speedups(table: pd.DataFrame, base: str | None = None) -> pd.DataFrame:
    """``table`` (one row per variant) with ratios against the no-speculation row ``base``.

    ``speedup_tpot`` = base mean TPOT / mean TPOT, ``speedup_throughput`` = throughput /
    base throughput, ``speedup_e2e_p50`` = base p50 end-to-end / p50 end-to-end. Without a
    base row the columns are nan.
    """
    out = table.copy()
    cols = ("speedup_tpot", "speedup_throughput", "speedup_e2e_p50")
    if base is None or base not in set(out["name"]):
        for c in cols:
            out[c] = np.nan
        return out
    b = out[out["name"] == base].iloc[0]
    out["speedup_tpot"] = b["tpot_mean_s"] / out["tpot_mean_s"]
    out["speedup_throughput"] = out["throughput_tokens_per_s"] / b["throughput_tokens_per_s"]
    out["speedup_e2e_p50"] = b["e2e_p50_s"] / out["e2e_p50_s"]
    return out


def seeds_table(table: pd.DataFrame, by: str | list[str] = "name",
                confidence: float = 0.95) -> pd.DataFrame:
    """Mean and Student-t confidence half-width of every numeric column across seeds.

    ``table`` has one row per (seed, ``by``); the result one row per ``by`` with columns
    ``<col>_mean``, ``<col>_ci`` (half-width; nan with one seed) and ``seeds``.
    """
    from scipy import stats

    keys = [by] if isinstance(by, str) else list(by)
    numeric = [c for c in table.columns
               if c not in keys and c != "seed" and pd.api.types.is_numeric_dtype(table[c])]
    rows = []
    for key, g in table.groupby(keys, sort=False):
        n = len(g)
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        row["seeds"] = n
        t = stats.t.ppf(0.5 + confidence / 2, n - 1) if n > 1 else np.nan
        for c in numeric:
            x = g[c].astype(float).dropna()
            row[f"{c}_mean"] = float(x.mean()) if len(x) else np.nan
            row[f"{c}_ci"] = float(t * x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def make_dir(path: str | Path) -> Path:
    """Create the output folder ``path`` (and its parents) if needed and return it; a path
    that cannot be a folder (an existing file, /proc, no permission) is a one-line
    ``UserError`` naming it, not a traceback."""
    from specdec.errors import UserError

    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{p}: cannot write output there: it is a file, not a folder") from None
    except OSError as e:
        raise UserError(f"{p}: cannot create the output folder: {e.strerror}") from None
    return p


def write_table(df: pd.DataFrame, stem: str | Path) -> list[Path]:
    """Write ``stem.csv`` always and ``stem.parquet`` when pyarrow is importable."""
    stem = Path(stem)
    make_dir(stem.parent)
    paths = [stem.with_suffix(".csv")]
    df.to_csv(paths[0], index=False)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return paths
    paths.append(stem.with_suffix(".parquet"))
    df.to_parquet(paths[1], index=False)
    return paths


def json_records(df: pd.DataFrame) -> list[dict]:
    """The rows of ``df`` as JSON-ready dicts: numpy scalars become Python numbers, and NaN
    or infinity (which JSON cannot hold) become None."""

    def clean(v):
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and not np.isfinite(v):
            return None
        return v

    return [{k: clean(v) for k, v in r.items()} for r in df.to_dict("records")]
