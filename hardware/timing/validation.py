"""The validation table: public measurements against SpecSim's default timing.

``hardware/data/validation.csv`` holds public measurements (each row's ``source`` says
where: repository + path + commit, paper + table, vendor page; ``notes`` how the number was
converted and what was assumed) in :mod:`hardware.timing.rows`' columns, in four
categories:

- ``A`` batch-1 decode (TP 1-8, 16-, 8- and 4-bit weights, FP8),
- ``B`` batched decode: TPOT / ITL at a fixed client concurrency (batch 1-512, prompts
  200-20000 tokens),
- ``C`` max-load throughput, prefill included: static batches at the stated
  (throughput-maximising) size (output tokens/s per GPU), and offline ``trtllm-bench``
  runs with every request queued at once (total output tokens/s),
- ``D`` offloaded decode: weights streamed from host memory.

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

__all__ = ["VALIDATION_CSV", "CATEGORIES", "GROUP_FIELDS", "Validation", "validate",
           "group_summary"]

VALIDATION_CSV = DATA_DIR / "validation.csv"
# row fields ``specsim validate --by`` groups on
GROUP_FIELDS = ("category", "model", "gpu", "framework", "framework_version", "tp", "ep",
                "metric", "weight_bits")
CATEGORIES = {"A": "batch-1 decode", "B": "batched decode (TPOT at concurrency)",
              "C": "max-load throughput (static batch or trtllm-bench)",
              "D": "offloaded decode"}


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
