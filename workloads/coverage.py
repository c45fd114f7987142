"""Width models: how likely a level with k candidates is to contain the accepted token.

SpecInfer's observation (lecture §6.1) is that when the draft's top-1 guess is wrong, the
target's token is often among the draft's top-k. An acceptance model with a per-guess α
needs a rule for a level that offers k candidates; this module provides it.

:class:`PowerCoverage` uses ``1 − (1 − α)^{k^θ}``:

* θ = 1 is k *independent* candidates, each accepted with α — the right idealisation for
  multi-step speculative sampling (MSS), whose candidates are drawn independently and
  whose acceptance is at least that of naive sampling (SpecInfer theorem 4.3);
* θ < 1 models diminishing returns: greedy top-k candidates are not independent (the
  2nd-best guess is worse than the best), so each extra candidate adds less. SpecInfer's
  Table 1 coverage (greedy top-1 ≈ 62–70 %, top-5 ≈ 82–89 %) corresponds to θ ≈ 0.5–0.6;
* k = 1 gives α for every θ, so θ only matters where a tree widens, and one parameter
  fits a whole width sweep (see :mod:`workloads.calibration`).

It is smooth and monotone in both α and k, which makes calibration by bisection sound.
:class:`CoverageTable` instead takes measured coverage per k directly.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence

import numpy as np

from specdec.errors import UserError


def check_probability(field: str, value: float) -> float:
    """Return ``value`` as a float in [0, 1] or raise a one-line UserError naming ``field``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{field}: must be a number in [0, 1], got {value!r}") from None
    if not (0.0 <= v <= 1.0):  # also refuses NaN
        raise UserError(f"{field}: must be in [0, 1], got {value!r}")
    return v


class WidthModel(abc.ABC):
    """Maps a per-guess acceptance α and a level width k to that level's success chance."""

    @abc.abstractmethod
    def coverage(self, alpha: np.ndarray, k: np.ndarray) -> np.ndarray:
        """float [...]: P(level accepted) for per-guess α and width k (0 where k == 0)."""


class PowerCoverage(WidthModel):
    """Coverage ``1 − (1 − α)^{k^θ}``; θ = 1 means independent candidates."""

    def __init__(self, theta: float = 1.0) -> None:
        try:
            t = float(theta)
        except (TypeError, ValueError):
            raise UserError(f"theta: must be a number >= 0, got {theta!r}") from None
        if not (t >= 0.0) or math.isinf(t):
            raise UserError(f"theta: must be a finite number >= 0, got {theta!r}")
        self.theta = t

    def coverage(self, alpha: np.ndarray, k: np.ndarray) -> np.ndarray:
        """``1 − (1 − α)^{k^θ}`` elementwise, 0 where k == 0."""
        a = np.asarray(alpha, dtype=np.float64)
        kk = np.asarray(k, dtype=np.float64)
        if self.theta == 1.0:
            # the C library's pow, element by element, as Python's ** and the compiled
            # walk's scalar coverage (sim.policies.tree_tokens) take it: numpy's power runs
            # a SIMD approximation on some CPUs (AVX-512), a few ulps off (about one element
            # in 20), which would make the coverage depend on the machine. (theta != 1 and
            # CoverageTable still take numpy's: no compiled copy to agree with; their last
            # ulps may differ from machine to machine.) About 17x numpy's time, on the
            # tables and the fallbacks only: no step calls it.
            base, kk = np.broadcast_arrays(1.0 - a, kk)
            out = 1.0 - np.array([b ** e for b, e in zip(base.ravel().tolist(),
                                                        kk.ravel().tolist(), strict=True)],
                                 dtype=np.float64).reshape(base.shape)
        else:
            eff = np.power(kk, self.theta, where=kk > 0, out=np.zeros_like(kk))
            out = 1.0 - np.power(1.0 - a, eff)
        return np.where(kk > 0, out, 0.0)

    def __repr__(self) -> str:
        return f"PowerCoverage(theta={self.theta:g})"


class CoverageTable(WidthModel):
    """Measured coverage per width, scaled to the current α.

    ``table[k-1]`` is the measured P(level accepted) with k candidates at the reference
    per-guess rate ``table[0]``. For another α, the coverage keeps the same *effective
    number of independent candidates* n_k = ln(1 − c_k) / ln(1 − c_1):
    coverage = 1 − (1 − α)^{n_k}. Widths beyond the table are refused, not extrapolated.
    """

    def __init__(self, table: Sequence[float]) -> None:
        c = np.asarray(table, dtype=np.float64)
        if c.ndim != 1 or c.size == 0:
            raise UserError(f"coverage table: must be a non-empty list, got {table!r}")
        for i, v in enumerate(c):
            check_probability(f"coverage[{i + 1}]", float(v))
        if not (0.0 < c[0] < 1.0):
            raise UserError(f"coverage[1]: must be strictly between 0 and 1, got {c[0]:g}")
        if np.any(np.diff(c) < 0) or c[-1] >= 1.0:
            raise UserError(f"coverage table: must be non-decreasing and < 1, got {c.tolist()}")
        self.table = c
        # [K]: effective independent candidates per width; n_1 = 1 by construction
        self.effective = np.log1p(-c) / np.log1p(-c[0])

    def coverage(self, alpha: np.ndarray, k: np.ndarray) -> np.ndarray:
        """``1 − (1 − α)^{n_k}`` elementwise, 0 where k == 0."""
        kk = np.asarray(k, dtype=np.int64)
        if kk.size and kk.max() > self.table.size:
            raise UserError(
                f"width {int(kk.max())}: beyond the coverage table (max {self.table.size})"
            )
        eff = np.concatenate([[0.0], self.effective])[kk]  # [...]: n_k, 0 for k = 0
        out = 1.0 - np.power(1.0 - np.asarray(alpha, dtype=np.float64), eff)
        return np.where(kk > 0, out, 0.0)
