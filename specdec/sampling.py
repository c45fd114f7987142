"""Speculative sampling: the acceptance rule, the residual distribution and its exact output.

Lecture §2 / code 01, Leviathan et al. 2023 §2.3 and appendix A. Every sampling method
(greedy, temperature, top-k, top-p) is first "standardised" into a distribution ``p`` over
the vocabulary (:func:`probs_from_logits`); the rest of the module works on distributions.

Speculative sampling of one token (Leviathan et al., §2.3), with ``x ~ q`` already drawn:

1. draw ``u ~ U(0, 1)``;
2. if ``u < p(x) / q(x)`` accept ``x`` (always when ``q(x) <= p(x)``);
3. otherwise draw the token from the residual ``p'(x) = norm(max(0, p(x) - q(x)))``.

By the law of total probability the output is exactly ``p`` (appendix A.1)::

    P(out = x) = q(x)·min(1, p(x)/q(x)) + (1 - β)·max(0, p(x) - q(x)) / (1 - β)
               = min(p(x), q(x)) + max(0, p(x) - q(x)) = p(x),

where ``β = Σ_x min(p(x), q(x)) = 1 - TV(p, q)`` is the acceptance probability and ``1 - β``
is also the residual's normalising constant.

The variants the lecture warns about (§2.6: "resample from p after a rejection", one-round
rejection sampling) live in :mod:`specdec.counterexamples`.
"""

from __future__ import annotations

import numpy as np

from specdec.errors import UserError

# A distribution may miss 1 by float32 softmax rounding, never by more.
_SUM_TOL = 1e-6
# Slack for the nucleus cut: a cumulative mass that is top_p up to rounding counts as reached.
_TOP_P_TOL = 1e-12


def as_distribution(p, name: str = "p") -> np.ndarray:
    """``p`` as a float64 1-D probability vector; raise :class:`UserError` if it is not one.

    Checks: one axis, at least one entry, finite, non-negative, sums to 1 within 1e-6.
    """
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise UserError(f"{name}: must be a non-empty 1-D distribution, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0.0):
        raise UserError(f"{name}: entries must be finite and >= 0, got min {np.min(arr)!r}")
    total = float(arr.sum())
    if abs(total - 1.0) > _SUM_TOL:
        raise UserError(f"{name}: must sum to 1, got {total!r}")
    return arr


def as_pair(p, q) -> tuple[np.ndarray, np.ndarray]:
    """Validate a (target, draft) pair of distributions over the same vocabulary."""
    p_arr, q_arr = as_distribution(p, "p"), as_distribution(q, "q")
    if p_arr.shape != q_arr.shape:
        raise UserError(f"q: vocabulary size {q_arr.size} differs from p's {p_arr.size}")
    return p_arr, q_arr


def probs_from_logits(logits, temperature: float = 1.0, top_k=None, top_p=None) -> np.ndarray:
    """Turn logits into the sampling distribution, over the last axis (any leading shape).

    Steps: (1) ``temperature == 0`` is greedy: one-hot at the argmax (the first index on
    ties), and top-k/top-p are moot; (2) otherwise ``softmax(logits / T)``; (3) top-k keeps
    the ``k`` largest (ties to the lower index; ``k`` above the vocabulary keeps everything);
    (4) top-p keeps the smallest prefix of the sorted distribution whose mass is ``>= top_p``
    (nucleus); (5) renormalise. ``-inf`` logits are allowed (masked tokens).
    """
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim == 0 or z.shape[-1] == 0:
        raise UserError(f"logits: need a vocabulary axis with >= 1 entry, got shape {z.shape}")
    if np.any(np.isnan(z)) or np.any(z == np.inf):
        raise UserError("logits: NaN or +inf found; only finite values or -inf are allowed")
    if np.any(np.all(z == -np.inf, axis=-1)):
        raise UserError("logits: a row is all -inf, so no token can be sampled")
    t = _check_temperature(temperature)
    k = _check_top_k(top_k)
    top_p = _check_top_p(top_p)

    if t == 0.0:
        probs = np.zeros_like(z)  # [..., V]
        np.put_along_axis(probs, np.argmax(z, axis=-1)[..., None], 1.0, axis=-1)
        return probs

    # Shift before scaling: the max becomes 0, so a tiny T can only push the others to -inf
    # (probability 0, the greedy limit) and exp cannot overflow.
    with np.errstate(over="ignore"):
        z = (z - np.max(z, axis=-1, keepdims=True)) / t  # [..., V], all <= 0
    probs = np.exp(z)  # [..., V]; -inf -> 0
    vocab = z.shape[-1]
    if k is not None and k < vocab:
        order = np.argsort(-z, axis=-1, kind="stable")  # [..., V] token ids, best first
        keep = np.zeros(z.shape, dtype=bool)
        np.put_along_axis(keep, order[..., :k], True, axis=-1)
        probs = np.where(keep, probs, 0.0)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-probs, axis=-1, kind="stable")  # [..., V]
        sorted_p = np.take_along_axis(probs, order, axis=-1)  # [..., V] descending
        mass_before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass of strictly better ranks
        keep_sorted = mass_before < top_p - _TOP_P_TOL
        keep_sorted[..., 0] = True  # the nucleus is never empty
        keep = np.zeros(z.shape, dtype=bool)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    return probs


def sample(p, rng: np.random.Generator) -> int:
    """One draw from the 1-D distribution ``p`` by inverting its CDF with one uniform.

    A zero-probability token is never returned (``searchsorted(..., side="right")`` skips
    flat steps of the CDF).
    """
    p = as_distribution(p)
    cdf = np.cumsum(p)  # [V]
    idx = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    # u·total can round up to total itself; fall back to the last token with mass.
    return min(idx, int(np.flatnonzero(p)[-1]))


def acceptance_probability(p, q) -> float:
    """β = Σ_x min(p(x), q(x)) = 1 − TV(p, q): the chance a draft token is accepted (Thm 3.5)."""
    p, q = as_pair(p, q)
    return float(np.minimum(p, q).sum())


def total_variation(p, q) -> float:
    """TV(p, q) = ½ Σ_x |p(x) − q(x)|."""
    p, q = as_pair(p, q)
    return 0.5 * float(np.abs(p - q).sum())


def residual_distribution(p, q) -> np.ndarray:
    """The residual ``p' = norm(max(0, p − q))`` that a rejection samples from.

    Its mass ``Σ max(0, p − q) = 1 − β`` is zero only when ``p == q``. Then every draft token
    has ``p(x)/q(x) = 1`` and is accepted, so no rejection ever asks for this distribution;
    we return ``p`` (rather than dividing by zero) because it is the limit of the output
    either way and keeps the function total. Rounding can leave ``p <= q`` everywhere with
    ``p != q`` by an ulp; the same answer is right there too.
    """
    p, q = as_pair(p, q)
    excess = np.maximum(p - q, 0.0)  # [V]
    mass = excess.sum()
    if mass <= 0.0:
        return p.copy()
    return excess / mass


def speculative_sample(p, q, x: int, rng: np.random.Generator, lenience: float = 1.0):
    """Verify the draft token ``x ~ q`` against the target ``p``; return ``(accepted, token)``.

    Accept with probability ``min(1, p(x) / (l·q(x)))``, else draw from the residual
    ``norm(max(0, p − q))``. With ``l = 1`` (the default) this is Leviathan et al.'s rule and
    the output is exactly ``p``. With ``l < 1`` (appendix A.5, lossy) more drafts pass and no
    token's output probability exceeds ``p(x)/l``: see
    :func:`speculative_output_distribution`.
    """
    p, q = as_pair(p, q)
    x = check_draft_token(x, q)
    lenience = check_lenience(lenience)
    # Steps 1-2: u < p(x)/(l q(x)) written without the division; never accepts p(x) = 0.
    if rng.random() * lenience * q[x] < p[x]:
        return True, x
    # Step 3: rejection -> the residual.
    return False, sample(residual_distribution(p, q), rng)


def lenient_acceptance_probability(p, q, lenience: float = 1.0) -> float:
    """β_l = Σ_x q(x)·min(1, p(x)/(l q(x))) = Σ_x min(q(x), p(x)/l); β_1 = β."""
    p, q = as_pair(p, q)
    lenience = check_lenience(lenience)
    return float(np.minimum(q, p / lenience).sum())


def speculative_output_distribution(p, q, lenience: float = 1.0) -> np.ndarray:
    """The exact output distribution of :func:`speculative_sample`, by total probability.

    ``P(out = x) = min(q(x), p(x)/l) + (1 − β_l)·norm(max(0, p − q))(x)``. For ``l = 1``
    this is ``min(p, q) + max(0, p − q) = p``. For ``l < 1`` it is at most ``p(x)/l``: where
    ``q(x) >= p(x)`` the residual term is 0 and the first is ``<= p(x)/l``; where
    ``q(x) < p(x)`` the first term is ``q(x)`` and, since ``1 − β_l <= 1 − β``, the second
    is ``<= p(x) − q(x)``, so the sum is ``<= p(x) <= p(x)/l``.
    """
    p, q = as_pair(p, q)
    lenience = check_lenience(lenience)
    accepted = np.minimum(q, p / lenience)  # [V] P(draft is x and accepted)
    return accepted + (1.0 - accepted.sum()) * residual_distribution(p, q)


# --- Argument checks ---------------------------------------------------------------------


def check_lenience(lenience: float) -> float:
    """The lenience ``l`` must lie in (0, 1]; ``l = 1`` is lossless speculative sampling."""
    l_val = float(lenience)
    if not (0.0 < l_val <= 1.0):
        raise UserError(f"lenience: must be in (0, 1], got {lenience!r}")
    return l_val


def check_draft_token(x, q: np.ndarray) -> int:
    """``x`` as a token id that can be a draw from ``q``: an integer in range with q(x) > 0."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise UserError(f"x: must be an integer token id, got {x!r}")
    if not 0 <= int(x) < q.size:
        raise UserError(f"x: token id must be in [0, {q.size}), got {int(x)}")
    if q[int(x)] <= 0.0:
        raise UserError(f"x: token {int(x)} has draft probability 0, so it cannot be a draw from q")
    return int(x)


def _check_temperature(temperature) -> float:
    t = float(temperature)
    if not (np.isfinite(t) and t >= 0.0):
        raise UserError(f"temperature: must be finite and >= 0, got {temperature!r}")
    return t


def _check_top_k(top_k):
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise UserError(f"top_k: must be an integer >= 1 or None, got {top_k!r}")
    return int(top_k)


def _check_top_p(top_p):
    if top_p is None:
        return None
    val = float(top_p)
    if not (0.0 < val <= 1.0):
        raise UserError(f"top_p: must be in (0, 1] or None, got {top_p!r}")
    return val
