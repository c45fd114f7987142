"""Calibrating acceptance models to published mean acceptance lengths.

Papers report *tokens per verify* (accepted + 1) for a γ or a tree shape, not α. Two tools:

* :func:`~workloads.acceptance.solve_alpha` inverts the exact expected tokens of the i.i.d.
  model for one shape by bisection (E is strictly increasing in α), e.g. α from E(α, γ);
* :func:`fit_width_sweep` fits a per-guess α *and* the width parameter θ of
  :class:`~workloads.coverage.PowerCoverage` to a sweep over tree widths, such as
  SpecInfer's Table 2 (LLaMA-7B target, LLaMA-68M draft, depth-8 trees expanded at level 3,
  widths 1..5), and reports the residuals. Least squares over a grid refined by zooming;
  no optimiser library is needed for two bounded parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specdec.errors import UserError
from workloads.acceptance import (
    IIDAcceptance,
    check_widths,
    depths,
    expected_from_levels,
    solve_alpha,
)
from workloads.coverage import PowerCoverage, WidthModel

# SpecInfer Table 2 (lecture §6.6): tokens per verify for trees <1,1,w,1,1,1,1,1>, w = 1..5.
SPECINFER_TABLE2: dict[str, dict[int, float]] = {
    "greedy": {1: 2.95, 2: 3.07, 3: 3.21, 4: 3.33, 5: 3.43},
    "stochastic": {1: 1.79, 2: 2.11, 3: 2.26, 4: 2.32, 5: 2.38},
}


def specinfer_tree(width: int, depth: int = 8, expand_level: int = 3) -> np.ndarray:
    """int64 [depth]: the expansion ⟨1,1,w,1,...⟩ SpecInfer's Table 2 uses (level 1-based)."""
    if not 1 <= expand_level <= depth:
        raise UserError(f"expand_level: must be in 1..{depth}, got {expand_level}")
    if width < 1:
        raise UserError(f"width: must be >= 1, got {width}")
    w = np.ones(depth, dtype=np.int64)
    w[expand_level - 1] = width
    return w


def calibrate_iid(
    mean_tokens: float, widths, width_model: WidthModel | None = None
) -> IIDAcceptance:
    """An :class:`IIDAcceptance` reproducing ``mean_tokens`` per verify for ``widths``."""
    return IIDAcceptance(solve_alpha(mean_tokens, widths, width_model), width_model)


@dataclass(frozen=True)
class WidthFit:
    """Result of :func:`fit_width_sweep`: parameters, predictions and residuals."""

    alpha: float
    theta: float
    widths: tuple[int, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]

    @property
    def residuals(self) -> tuple[float, ...]:
        """measured − predicted, per width."""
        return tuple(m - p for m, p in zip(self.measured, self.predicted, strict=True))

    @property
    def rmse(self) -> float:
        """Root-mean-square residual in tokens per verify."""
        return float(np.sqrt(np.mean(np.square(self.residuals))))

    def model(self) -> IIDAcceptance:
        """The fitted i.i.d. model with its power-coverage width model."""
        return IIDAcceptance(self.alpha, PowerCoverage(self.theta))


def _predict(alpha: np.ndarray, theta: np.ndarray, shapes: np.ndarray) -> np.ndarray:
    """Expected tokens for every (α, θ) pair and shape.  [P], [P], [S, m] -> [P, S]"""
    a = alpha[:, None, None]  # [P, 1, 1]
    k = shapes[None, :, :].astype(np.float64)  # [1, S, m]
    eff = np.power(k, theta[:, None, None])  # [P, S, m]
    level = np.where(k > 0, 1.0 - np.power(1.0 - a, eff), 0.0)  # [P, S, m]
    return 1.0 + np.cumprod(level, axis=2).sum(axis=2)  # [P, S]


def fit_width_sweep(
    measured: Mapping[int, float],
    shape=specinfer_tree,
    theta_max: float = 4.0,
    rounds: int = 14,
) -> WidthFit:
    """Fit α and θ of ``1 − (1 − α)^{k^θ}`` to tokens per verify measured per width.

    ``measured`` maps a width to tokens per verify; ``shape(width)`` gives that width's tree
    (default: SpecInfer's depth-8 tree expanded at level 3). Minimises the sum of squared
    residuals over α ∈ [0, 1], θ ∈ [0, theta_max] by a 41×41 grid, zoomed ``rounds`` times
    around the best point (each round shrinks the box four-fold).
    """
    if len(measured) < 2:
        raise UserError(f"measured: need at least 2 widths to fit α and θ, got {len(measured)}")
    ws = sorted(int(w) for w in measured)
    shapes = [np.asarray(shape(w), dtype=np.int64) for w in ws]
    m = max(s.size for s in shapes)
    table = np.zeros((len(ws), m), dtype=np.int64)  # [S, m]
    for i, s in enumerate(shapes):
        table[i, : s.size] = s
    check_widths(table)
    y = np.array([float(measured[w]) for w in ws])  # [S]
    for w, v in zip(ws, y, strict=True):
        if not (1.0 <= v <= depths(table[ws.index(w)][None, :])[0] + 1.0):
            raise UserError(f"measured[{w}]: tokens per verify out of range, got {v:g}")
    a_lo, a_hi, t_lo, t_hi = 0.0, 1.0, 0.0, float(theta_max)
    best_a = best_t = 0.0
    for _ in range(rounds):
        a_grid = np.linspace(a_lo, a_hi, 41)
        t_grid = np.linspace(t_lo, t_hi, 41)
        aa, tt = np.meshgrid(a_grid, t_grid, indexing="ij")  # [41, 41]
        sse = np.square(_predict(aa.ravel(), tt.ravel(), table) - y).sum(axis=1)  # [P]
        j = int(np.argmin(sse))
        best_a, best_t = float(aa.ravel()[j]), float(tt.ravel()[j])
        a_half, t_half = (a_hi - a_lo) / 8, (t_hi - t_lo) / 8
        a_lo, a_hi = max(0.0, best_a - a_half), min(1.0, best_a + a_half)
        t_lo, t_hi = max(0.0, best_t - t_half), min(theta_max, best_t + t_half)
    pred = _predict(np.array([best_a]), np.array([best_t]), table)[0]  # [S]
    return WidthFit(
        alpha=best_a,
        theta=best_t,
        widths=tuple(ws),
        measured=tuple(float(v) for v in y),
        predicted=tuple(float(v) for v in pred),
    )


def fit_specinfer_table2(mode: str = "greedy") -> WidthFit:
    """Fit α and θ to SpecInfer's Table 2 (``mode`` 'greedy' or 'stochastic')."""
    if mode not in SPECINFER_TABLE2:
        raise UserError(f"mode: must be one of {sorted(SPECINFER_TABLE2)}, got {mode!r}")
    return fit_width_sweep(SPECINFER_TABLE2[mode])


def level_expected(level_p: Sequence[float]) -> float:
    """Exact tokens per verify for one row of conditional level probabilities."""
    return float(expected_from_levels(np.asarray(level_p, dtype=np.float64)[None, :])[0])
