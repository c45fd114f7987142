"""The variants the lecture warns about, each with its exact output, so tests can show them.

Kept only as counter-examples; decoding never calls them.

- Error A (lecture §2.6): the ratio test, but a rejection redraws from ``p`` instead of the
  residual. Output ``min(p, q) + (1 − β)·p``: the overlap counts twice. WRONG.
- One-round rejection sampling (Leviathan et al., appendix A.2): accept ``x ~ q`` with
  probability ``p(x)/(M q(x))``, ``M = max p/q``, else draw from ``p``. Exact, but it
  accepts only ``1/M <= β``: the residual is what makes speculative sampling cheap.
- Deterministic top-k candidates with MSS's ratio rule (lecture §6.4, last column): the
  proof of MSS needs random candidates; fixed ones make the output biased (the lecture
  measures mean TV 0.24–0.34). WRONG; the right treatment is naive sampling
  (:func:`specdec.mss.naive_sample`).
"""

from __future__ import annotations

import numpy as np

from specdec.mss import mss_residual_chain, mss_sample, top_k_candidates
from specdec.sampling import as_pair, check_draft_token, sample

# --- Lecture §2.6 / appendix A.2: one token -------------------------------------------


def wrong_resample_from_p_sample(p, q, x: int, rng: np.random.Generator):
    """WRONG (lecture §2.6, error A): the ratio test, but a rejection redraws from ``p``.

    Kept only as a counter-example; the output is :func:`wrong_resample_from_p_output_distribution`,
    not ``p``.
    """
    p, q = as_pair(p, q)
    x = check_draft_token(x, q)
    if rng.random() * q[x] < p[x]:
        return True, x
    return False, sample(p, rng)


def wrong_resample_from_p_output_distribution(p, q) -> np.ndarray:
    """Exact output of error A: ``min(p, q) + (1 − β)·p``, which is not ``p``.

    The overlap ``min(p, q)`` is counted twice (once through acceptance, once inside the
    redraw), so the output leans towards tokens both models like; it equals ``p`` only when
    ``β = 1`` or ``min(p, q) = β·p``.
    """
    p, q = as_pair(p, q)
    overlap = np.minimum(p, q)  # [V]
    return overlap + (1.0 - overlap.sum()) * p


def one_round_rejection_bound(p, q) -> float:
    """``M = max_x p(x)/q(x)`` over tokens with ``p(x) > 0`` (``inf`` if q misses one)."""
    p, q = as_pair(p, q)
    support = p > 0.0
    if np.any(q[support] <= 0.0):
        return float("inf")
    with np.errstate(over="ignore"):  # a subnormal q(x) overflows to M = inf, as it should
        return float(np.max(p[support] / q[support]))


def one_round_rejection_sample(p, q, x: int, rng: np.random.Generator):
    """Correct but worse (appendix A.2): accept ``x ~ q`` w.p. ``p(x)/(M q(x))``, else draw from p.

    The output is exactly ``p`` (``q·p/(Mq) + (1 − 1/M)·p = p``) but the acceptance
    probability is ``1/M <= β``: see :func:`one_round_rejection_acceptance_probability`.
    """
    p, q = as_pair(p, q)
    x = check_draft_token(x, q)
    m = one_round_rejection_bound(p, q)
    if rng.random() * m * q[x] < p[x]:  # m = inf never accepts
        return True, x
    return False, sample(p, rng)


def one_round_rejection_acceptance_probability(p, q) -> float:
    """``Σ_x q(x)·p(x)/(M q(x)) = 1/M``: never above β, since ``q >= p/M`` everywhere
    gives ``min(p, q) >= p/M`` and so ``β >= 1/M`` (appendix A.2)."""
    return 1.0 / one_round_rejection_bound(p, q)


def one_round_rejection_output_distribution(p, q) -> np.ndarray:
    """Exact output of :func:`one_round_rejection_sample` by total probability.

    ``P(out = x) = q(x)·p(x)/(M q(x)) + (1 − Σ accepted)·p(x) = p(x)/M + (1 − 1/M)·p(x)``.
    """
    p, q = as_pair(p, q)
    m = one_round_rejection_bound(p, q)
    ratio = np.divide(p / m, q, out=np.zeros_like(p), where=q > 0.0)  # [V]; m = inf -> 0
    accepted = q * np.minimum(ratio, 1.0)  # [V] P(draft is x and accepted)
    return accepted + (1.0 - accepted.sum()) * p


# --- Lecture §6.4: deterministic candidates at a tree node --------------------------------


def wrong_topk_ratio_output_distribution(p, q, k: int) -> np.ndarray:
    """WRONG (lecture §6.4, last column): MSS's ratio rule on deterministic top-k candidates.

    The candidates are :func:`top_k_candidates` instead of random draws, checked exactly as
    in :func:`mss_sample`. Exact output: candidate ``c_j`` receives
    ``Π_{i<j}(1 − a_i)·a_j`` with ``a_j = min(1, p_j(c_j)/q(c_j))``, the rest goes to
    ``p_{k+1}``. Biased in general (the lecture measures mean TV 0.24–0.34).
    """
    p, q = as_pair(p, q)
    xs = top_k_candidates(q, k)
    chain = mss_residual_chain(p, q, len(xs))  # [k+1, V]
    out = np.zeros_like(p)  # [V]
    reach = 1.0
    for j, x in enumerate(xs):
        a = min(1.0, chain[j, x] / q[x])
        out[x] += reach * a
        reach *= 1.0 - a
    return out + reach * chain[-1]


def wrong_topk_ratio_sample(p, q, k: int, rng: np.random.Generator) -> tuple[int, int]:
    """WRONG: :func:`mss_sample` fed the deterministic top-k of ``q``; a counter-example."""
    return mss_sample(p, q, top_k_candidates(q, k), rng)
