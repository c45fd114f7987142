"""Closed-form analysis of speculative decoding under i.i.d. acceptance (lecture §4, code 03).

Leviathan et al. 2023 §3.3–3.5. Assume every draft guess is accepted independently with
probability α; one iteration drafts γ tokens (γ draft passes, each costing ``c`` target
passes) and verifies them in one target pass. Then

- expected tokens per iteration (eq. 1): ``E(α, γ) = (1 − α^{γ+1}) / (1 − α)``, which
  runs from 1 (α = 0) to γ + 1 (α → 1) and tends to ``1/(1 − α)`` as γ → ∞;
- wall-time speedup (Thm 3.8): ``S(α, γ, c) = E(α, γ) / (γc + 1)``;
- total arithmetic multiplier (Thm 3.11): ``(1 − α)(γĉ + γ + 1) / (1 − α^{γ+1})``, where
  ``ĉ`` is the draft's arithmetic per token relative to the target's;
- Corollary 3.9: some γ gives ``S > 1`` iff ``α > c``, and then γ = 1 already gives
  ``S = (1 + α)/(1 + c)``.

Every function takes scalars or numpy arrays and broadcasts (the simulator's adaptive
policy calls them over a whole batch); 0-d results come back as numpy scalars.
"""

from __future__ import annotations

import numpy as np

from specdec.errors import UserError

# Up to this γ, E is summed term by term (cheap, and exact at the edges).
_HORNER_MAX_GAMMA = 64


def expected_tokens(alpha, gamma):
    """``E(α, γ) = (1 − α^{γ+1}) / (1 − α) = Σ_{i=0..γ} α^i``; the α → 1 limit is ``γ + 1``.

    For γ <= 64 the finite sum is evaluated by Horner's rule (``E ← 1 + α·E``, γ times):
    every term is positive, so it is accurate to a few ulp, exactly 1 at γ = 0 and exactly
    γ + 1 at α = 1, and non-decreasing in γ even after rounding. Longer γ uses
    ``−expm1((γ+1)·log α) / (1 − α)``, which avoids the textbook form's cancellation near 1.
    """
    a, g = np.broadcast_arrays(_alpha(alpha), _gamma(gamma))
    horner = np.ones(a.shape)
    for step in range(int(min(np.max(g, initial=0.0), _HORNER_MAX_GAMMA))):
        horner = np.where(step < g, 1.0 + a * horner, horner)
    if not np.any(g > _HORNER_MAX_GAMMA):
        return _scalar(horner)
    with np.errstate(divide="ignore", invalid="ignore"):
        geometric = -np.expm1((g + 1.0) * np.log(a)) / (1.0 - a)  # log 0 = -inf gives 1
    closed = np.where(a == 1.0, g + 1.0, geometric)
    return _scalar(np.where(g <= _HORNER_MAX_GAMMA, horner, closed))


def walltime_speedup(alpha, gamma, c):
    """``S(α, γ, c) = E(α, γ) / (γc + 1)`` (Thm 3.8): tokens per iteration over its cost.

    ``c`` is the draft pass time over the target pass time; verifying γ + 1 tokens is taken
    to cost one target decode pass (lecture §7 covers when that fails).
    """
    g, cost = _gamma(gamma), _cost(c, "c")
    return _scalar(expected_tokens(alpha, g) / (g * cost + 1.0))


def ops_multiplier(alpha, gamma, c_hat=0.0):
    """``(1 − α)(γĉ + γ + 1) / (1 − α^{γ+1}) = (γĉ + γ + 1) / E(α, γ)`` (Thm 3.11).

    The target computes γ + 1 positions per iteration and the draft γ (each ``ĉ`` of a
    target position's arithmetic), for ``E`` tokens out; 1 means no extra arithmetic.
    """
    g, c_hat = _gamma(gamma), _cost(c_hat, "c_hat")
    return _scalar((g * c_hat + g + 1.0) / expected_tokens(alpha, g))


def speedup_lower_bound(alpha, c):
    """``(1 + α) / (1 + c)`` (Corollary 3.9): the γ = 1 speedup, so a lower bound on the best.

    It exceeds 1, i.e. guarantees a speedup, exactly when ``α > c``.
    """
    return _scalar((1.0 + _alpha(alpha)) / (1.0 + _cost(c, "c")))


def optimal_gamma(alpha, c, max_gamma: int = 16):
    """The γ in ``1..max_gamma`` maximising ``S(α, γ, c)``, or 0 ("do not speculate").

    Enumerates γ (ties go to the smaller γ). Returns 0 exactly when no γ >= 1 speeds up,
    which by Corollary 3.9 happens iff ``α <= c`` (then ``E <= 1 + γα <= 1 + γc``); the
    condition is applied directly so that rounding at ``α = c`` cannot flip it.
    """
    a, cost = np.broadcast_arrays(_alpha(alpha), _cost(c, "c"))
    gammas = np.arange(1, _max_gamma(max_gamma) + 1)  # [G]
    speedups = walltime_speedup(a[..., None], gammas, cost[..., None])  # [..., G]
    best = np.argmax(speedups, axis=-1) + 1  # [...]
    result = np.where(a > cost, best, 0)
    return int(result) if result.ndim == 0 else result


def optimal_speedup(alpha, c, max_gamma: int = 16):
    """``S`` at :func:`optimal_gamma`; 1.0 where the answer is "do not speculate" (γ = 0)."""
    a, cost = np.broadcast_arrays(_alpha(alpha), _cost(c, "c"))
    gamma = np.asarray(optimal_gamma(a, cost, max_gamma))
    return _scalar(np.where(gamma > 0, walltime_speedup(a, gamma, cost), 1.0))


def _alpha(alpha) -> np.ndarray:
    a = np.asarray(alpha, dtype=np.float64)
    if not np.all((a >= 0.0) & (a <= 1.0)):  # also false for NaN
        raise UserError(f"alpha: must be in [0, 1], got {_worst(a, (a >= 0) & (a <= 1))}")
    return a


def _gamma(gamma) -> np.ndarray:
    g = np.asarray(gamma, dtype=np.float64)
    ok = np.isfinite(g) & (g >= 0) & (g == np.floor(g))
    if not np.all(ok):
        raise UserError(f"gamma: must be an integer >= 0, got {_worst(g, ok)}")
    return g


def _cost(c, name: str) -> np.ndarray:
    arr = np.asarray(c, dtype=np.float64)
    ok = np.isfinite(arr) & (arr >= 0.0)
    if not np.all(ok):
        raise UserError(f"{name}: must be finite and >= 0, got {_worst(arr, ok)}")
    return arr


def _max_gamma(max_gamma) -> int:
    if isinstance(max_gamma, bool) or not isinstance(max_gamma, (int, np.integer)):
        raise UserError(f"max_gamma: must be an integer >= 1, got {max_gamma!r}")
    if max_gamma < 1:
        raise UserError(f"max_gamma: must be an integer >= 1, got {max_gamma}")
    return int(max_gamma)


def _worst(arr: np.ndarray, ok: np.ndarray) -> str:
    """The first offending value, for a one-line message."""
    return repr(float(arr[~ok].reshape(-1)[0]))


def _scalar(x):
    """0-d arrays become numpy scalars so scalar callers get a number back."""
    x = np.asarray(x)
    return x[()] if x.ndim == 0 else x
