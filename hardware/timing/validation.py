"""The validation table: public measurements against SpecSim's default timing.

``hardware/data/validation.csv`` holds public measurements (each row's ``source`` says
where: repository + path + commit, paper + table, vendor page; ``notes`` how the number was
converted and what was assumed) in :mod:`hardware.timing.rows`' columns, in these
categories:

- ``A`` batch-1 decode (TP 1-8, 16-, 8- and 4-bit weights, FP8),
- ``B`` batched decode: TPOT / ITL at a fixed client concurrency (batch 1-512, prompts
  200-20000 tokens),
- ``C`` max-load throughput, prefill included: static batches at the stated
  (throughput-maximising) size (output tokens/s per GPU), and offline ``trtllm-bench``
  runs with every request queued at once (total output tokens/s),
- ``D`` offloaded decode: weights streamed from host memory,
- ``F`` and ``G`` Blackwell batched decode (TPOT at concurrency) in FP8 and in NVFP4
  W4A4, nothing fitted on them (docs/timing.md, "Blackwell GPUs"),

and, in ``hardware/data/validation_spec.csv`` (:mod:`hardware.timing.spec_rows`' columns),

- ``E`` speculative decoding end to end: a run with speculation beside the same run
  without, the published acceptance length given, so that only timing and engine
  behaviour are tested; its error is that of the speedup and of the speculative TPOT
  (:func:`validate_spec`),

and, in ``hardware/data/validation_pd.csv`` (:mod:`hardware.timing.pd_rows`' columns),

- ``H`` disaggregated serving: runs with a prefill pool and a decode pool, each run's TTFT
  and TPOT priced apart (:mod:`hardware.timing.pd_serving`), nothing fitted on them
  (:func:`validate_pd`; docs/timing.md, "P/D: disaggregated-serving runs").

The split is fixed: a row is in the ``fit`` half the shipped parameters were fitted on
(``specsim calibrate``) when the CRC-32 of its conditions is even, held out otherwise
(docs/timing.md, "The split"); :func:`validate` reports both, and the held-out medians are
the accuracy SpecSim claims.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.catalog import DATA_DIR, Catalog
from hardware.timing.calibrate import predictions
from hardware.timing.rows import MeasuredRow, read_rows

__all__ = ["VALIDATION_CSV", "SPEC_VALIDATION_CSV", "PD_VALIDATION_CSV", "CATEGORIES",
           "GROUP_FIELDS", "Validation", "validate", "group_summary", "SpecValidation",
           "validate_spec", "PdValidation", "validate_pd", "pd_summary", "PD_LOAD_BAND"]

VALIDATION_CSV = DATA_DIR / "validation.csv"
SPEC_VALIDATION_CSV = DATA_DIR / "validation_spec.csv"
PD_VALIDATION_CSV = DATA_DIR / "validation_pd.csv"
# category H's TTFT is also reported for runs of at most this many requests in flight per
# prefill replica and for the rest (docs/timing.md: queueing is not priced)
PD_LOAD_BAND = 8
# row fields ``specsim validate --by`` groups on
GROUP_FIELDS = ("category", "model", "gpu", "framework", "framework_version", "tp", "ep",
                "metric", "weight_bits")
CATEGORIES = {"A": "batch-1 decode", "B": "batched decode (TPOT at concurrency)",
              "C": "max-load throughput (static batch or trtllm-bench)",
              "D": "offloaded decode",
              "E": "speculative decoding (speedup; speculative TPOT)",
              "F": "Blackwell batched decode (TPOT at concurrency)",
              "G": "Blackwell FP4 batched decode (TPOT at concurrency)",
              "H": "disaggregated serving (TTFT and TPOT; prefill and decode pools)"}


@dataclass(frozen=True)
class Validation:
    """Every row's prediction and error, and per category: rows, and median |error| on
    the fit half, the held-out half and all rows."""

    rows: list[MeasuredRow]
    predicted: np.ndarray
    error: np.ndarray  # predicted / measured - 1
    backends: list[str]
    summary: dict[str, dict[str, float | int]]


def validate(catalog: Catalog, rows: list[MeasuredRow] | None = None,
             timing: str = "auto") -> Validation:
    """Predict every row of the validation CSV (or ``rows``) with ``timing``."""
    rows = read_rows(VALIDATION_CSV) if rows is None else rows
    pred, backends = predictions(rows, catalog, timing)
    meas = np.array([r.measured for r in rows])
    err = pred / meas - 1.0
    summary: dict[str, dict[str, float | int]] = {}
    for cat in sorted({r.category for r in rows}):
        mine = np.array([r.category == cat for r in rows])
        test = mine & np.array([r.split == "test" for r in rows])
        fit = mine & ~test
        summary[cat] = {
            "rows": int(mine.sum()), "fit_rows": int(fit.sum()), "test_rows": int(test.sum()),
            "median_test": _median(err[test]), "median_fit": _median(err[fit]),
            "median_all": _median(err[mine]), "worst_test": _worst(err[test]),
        }
    return Validation(rows, pred, err, backends, summary)


def _median(e: np.ndarray) -> float:
    return float(np.median(np.abs(e))) if e.size else float("nan")


def _worst(e: np.ndarray) -> float:
    return float(np.max(np.abs(e))) if e.size else float("nan")


def group_summary(v: Validation, fields: tuple[str, ...]) -> list[dict]:
    """Per group of rows sharing ``fields`` (of :data:`GROUP_FIELDS`), sorted by them: the
    field values, rows and held-out rows, the median signed error (the group's bias), the
    median |error| over all its rows and over its held-out ones (NaN without any), and its
    worst |error|."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(v.rows):
        groups.setdefault(tuple(getattr(r, f) for f in fields), []).append(i)
    out = []
    for key in sorted(groups):
        idx = np.array(groups[key])
        err = v.error[idx]
        test = np.array([v.rows[i].split == "test" for i in idx])
        out.append({**dict(zip(fields, key, strict=True)), "rows": int(idx.size),
                    "test_rows": int(test.sum()), "median_signed": float(np.median(err)),
                    "median_all": _median(err), "median_test": _median(err[test]),
                    "worst": _worst(err)})
    return out


@dataclass(frozen=True)
class SpecValidation:
    """Category E: every row's prediction and its errors (predicted / measured - 1) of the
    speedup, of the speculative TPOT (NaN where only a speedup was published) and of the
    plain run's TPOT; ``summary`` by group (``all``, ``method:<m>``, ``framework:<f>``):
    rows, held-out rows, and the median |error| held out and on the fit half, the median
    signed error held out, of the speedup and the speculative TPOT."""

    rows: list
    predicted: list
    speedup_error: np.ndarray
    tpot_error: np.ndarray
    base_error: np.ndarray
    summary: dict[str, dict[str, float | int | None]]


def validate_spec(catalog: Catalog, rows=None, timing: str = "auto") -> SpecValidation:
    """Predict every row of ``validation_spec.csv`` (or ``rows``) with ``timing``."""
    from hardware.timing.spec_fit import errors, spec_predictions
    from hardware.timing.spec_rows import read_spec_rows

    rows = read_spec_rows(SPEC_VALIDATION_CSV) if rows is None else rows
    preds = spec_predictions(rows, catalog, timing)
    speed, tpot = errors(rows, preds)
    base = np.array([np.nan if r.metric == "speedup" else
                     p.metric(r)[0] / r.measured_base - 1.0 for r, p in zip(rows, preds,
                                                                             strict=True)])
    test = np.array([r.split == "test" for r in rows])
    groups: dict[str, np.ndarray] = {"all": np.ones(len(rows), dtype=bool)}
    for key in ("method", "framework"):
        for value in sorted({getattr(r, key) for r in rows}):
            groups[f"{key}:{value}"] = np.array([getattr(r, key) == value for r in rows])
    summary = {}
    for name, mine in groups.items():
        summary[name] = {
            "rows": int(mine.sum()), "test_rows": int((mine & test).sum()),
            "speedup_test": _nan_median(np.abs(speed[mine & test])),
            "speedup_fit": _nan_median(np.abs(speed[mine & ~test])),
            "speedup_signed_test": _nan_median(speed[mine & test]),
            "tpot_test": _nan_median(np.abs(tpot[mine & test])),
            "tpot_fit": _nan_median(np.abs(tpot[mine & ~test])),
            "base_test": _nan_median(np.abs(base[mine & test])),
        }
    return SpecValidation(rows, preds, speed, tpot, base, summary)


def _nan_median(e: np.ndarray) -> float | None:
    e = e[~np.isnan(e)]
    return float(np.median(e)) if e.size else None


@dataclass(frozen=True)
class PdValidation:
    """Category H: every run's prediction (:class:`hardware.timing.pd_serving.PdPrediction`)
    and the errors (predicted / measured - 1) of its TPOT and TTFT; ``summary`` by group
    (``all``, ``framework:<f>``, ``gpu:<g>``, ``precision:<p>``, ``load:<band>``): runs,
    held-out runs, and per metric the median |error| held out and on the fit half and the
    median signed error held out and over all the group's runs."""

    rows: list
    predicted: list
    tpot_error: np.ndarray
    ttft_error: np.ndarray
    summary: dict[str, dict[str, float | int | None]]


def _precision(r) -> str:
    return r.fp4_format or ("fp8" if r.compute_dtype == "fp8" else f"{r.weight_bits}-bit")


def _load(r) -> str:
    per = r.concurrency / r.prefill_workers
    return f"<={PD_LOAD_BAND}" if per <= PD_LOAD_BAND else f">{PD_LOAD_BAND}"


def validate_pd(catalog: Catalog, rows=None, timing: str = "auto") -> PdValidation:
    """Predict every run of ``validation_pd.csv`` (or ``rows``) with ``timing``."""
    from hardware.timing.pd_rows import read_pd_rows
    from hardware.timing.pd_serving import predict_pd

    rows = read_pd_rows(PD_VALIDATION_CSV) if rows is None else rows
    preds = [predict_pd(r, catalog, timing) for r in rows]
    tpot = np.array([p.tpot_s / r.measured_tpot - 1.0 for r, p in zip(rows, preds,
                                                                        strict=True)])
    ttft = np.array([p.ttft_s / r.measured_ttft - 1.0 for r, p in zip(rows, preds,
                                                                        strict=True)])
    return PdValidation(rows, preds, tpot, ttft, pd_summary(rows, tpot, ttft))


def pd_summary(rows, tpot: np.ndarray, ttft: np.ndarray) -> dict:
    """Category H's summary (``PdValidation.summary``) of runs ``rows`` whose TPOT and TTFT
    errors are ``tpot`` and ``ttft`` (also the simulated check's, ``sim.studies.
    validate_pd``)."""
    test = np.array([r.split == "test" for r in rows], dtype=bool)
    groups: dict[str, np.ndarray] = {"all": np.ones(len(rows), dtype=bool)}
    for key, of in (("framework", lambda r: r.framework), ("gpu", lambda r: r.gpu),
                    ("precision", _precision), ("load", _load)):
        for value in sorted({of(r) for r in rows}):
            groups[f"{key}:{value}"] = np.array([of(r) == value for r in rows], dtype=bool)
    summary = {}
    for name, mine in groups.items():
        s: dict[str, float | int | None] = {"rows": int(mine.sum()),
                                             "test_rows": int((mine & test).sum())}
        for metric, err in (("tpot", tpot), ("ttft", ttft)):
            s[f"{metric}_test"] = _nan_median(np.abs(err[mine & test]))
            s[f"{metric}_fit"] = _nan_median(np.abs(err[mine & ~test]))
            s[f"{metric}_signed_test"] = _nan_median(err[mine & test])
            s[f"{metric}_signed_all"] = _nan_median(err[mine])
        summary[name] = s
    return summary
