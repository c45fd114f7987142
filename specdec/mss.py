"""SpecInfer's multi-step speculative sampling (MSS) for one tree node, and its foils.

Lecture §6.4 / code 04 demo 3; SpecInfer (Miao et al. 2024) Algorithm 2, VerifyStochastic,
Theorems 4.2 and 4.3. A node's children are ``k`` candidates ``x_1..x_k``, each an
INDEPENDENT draw from the draft distribution ``q`` at that node (duplicates allowed: a tree
merges duplicate children into one node but keeps the draw order, and every draw still
performs its own check and residual update). With ``p_1 = p``:

1. for ``j = 1..k``: accept ``x_j`` with probability ``min(1, p_j(x_j) / q(x_j))``;
2. on rejection, ``p_{j+1} = norm(max(0, p_j − q))`` and go on with ``j + 1``;
3. when all ``k`` are rejected, draw the output from ``p_{k+1}``.

The output is exactly ``p`` (Thm 4.2), and the chance that some candidate is accepted is at
least naive sampling's (NS: draw from ``p``, accept if the draw is among the candidates;
Thm 4.3). For ``k = 1`` MSS is speculative sampling (:func:`specdec.sampling.speculative_sample`).

Note the residual chain ``p_1, p_2, ...`` does not depend on which candidates were drawn,
only on ``p`` and ``q``; so step ``j`` accepts with probability ``β_j = Σ min(p_j, q)``
whatever happened before, and ``P(some accepted) = 1 − Π_j (1 − β_j)``.

The correctness needs candidates drawn at random from ``q``: the proof multiplies
``P(candidate = x) = q(x)`` by ``min(1, p/q)`` to get ``min(p, q)``. Deterministic top-k
candidates with the same ratio rule are biased (kept below as a counter-example); the
correct treatment of deterministic candidates degenerates to NS. The biased variant is
:func:`specdec.counterexamples.wrong_topk_ratio_output_distribution`.
"""

from __future__ import annotations

import numpy as np

from specdec.errors import UserError
from specdec.sampling import as_distribution, as_pair, residual_distribution, sample

# Exact enumeration visits V**k candidate tuples; past this it is the wrong tool.
MAX_ENUMERATED_TUPLES = 1 << 20


def mss_sample(p, q, candidates, rng: np.random.Generator) -> tuple[int, int]:
    """Verify the ordered candidates ``x_1..x_k`` (iid draws from ``q``) against ``p``.

    Returns ``(j, token)``: ``j`` is the 0-based index of the accepted candidate and
    ``token`` the candidate, or ``j = -1`` and a draw from the last residual ``p_{k+1}``.
    """
    p, q = as_pair(p, q)
    xs = _check_candidates(candidates, q)
    p_j = p
    for j, x in enumerate(xs):
        # Step 1: u < p_j(x)/q(x), division-free; q(x) > 0 was checked.
        if rng.random() * q[x] < p_j[x]:
            return j, x
        # Step 2: rejected -> the residual becomes the target for the next candidate.
        p_j = residual_distribution(p_j, q)
    # Step 3: every candidate rejected.
    return -1, sample(p_j, rng)


def mss_residual_chain(p, q, k: int) -> np.ndarray:
    """The targets ``p_1 = p, ..., p_{k+1}`` of MSS, shape ``[k + 1, V]``."""
    p, q = as_pair(p, q)
    k = _check_k(k)
    chain = np.empty((k + 1, p.size))  # [k+1, V]
    chain[0] = p
    for j in range(k):
        chain[j + 1] = residual_distribution(chain[j], q)
    return chain


def mss_acceptance_probabilities(p, q, k_max: int) -> np.ndarray:
    """``P(some candidate accepted)`` for ``k = 1..k_max`` iid candidates, shape ``[k_max]``.

    Closed form ``1 − Π_{j<=k} (1 − β_j)`` with ``β_j = Σ min(p_j, q)`` (see the module note);
    the tests check it against the enumeration in :func:`mss_output_distribution`.
    """
    chain = mss_residual_chain(p, q, k_max)[:-1]  # [k_max, V] targets p_1..p_k_max
    q = as_distribution(q, "q")
    beta = np.minimum(chain, q[None, :]).sum(axis=1)  # [k_max] per-step acceptance
    return 1.0 - np.cumprod(1.0 - beta)


def mss_acceptance_probability(p, q, k: int) -> float:
    """Exact probability that one of ``k`` independent candidates is accepted by MSS."""
    if _check_k(k) == 0:
        return 0.0
    return float(mss_acceptance_probabilities(p, q, k)[-1])


def mss_output_distribution(p, q, k: int) -> np.ndarray:
    """Exact output distribution of MSS with ``k`` candidates, by enumerating all ``V^k`` tuples.

    Each tuple ``(x_1..x_k)`` has weight ``Π_j q(x_j)``; within it candidate ``j`` is reached
    with probability ``Π_{i<j} (1 − a_i)`` and accepted with ``a_j = min(1, p_j(x_j)/q(x_j))``;
    if none is, the output is a draw from ``p_{k+1}``. Equals ``p`` (Thm 4.2).
    """
    return _mss_enumerate(p, q, k)[0]


def mss_enumerated_acceptance_probability(p, q, k: int) -> float:
    """``P(some candidate accepted)`` by the ``V^k`` enumeration (checks the closed form)."""
    return _mss_enumerate(p, q, k)[1]


def naive_acceptance_probability(p, q, k: int) -> float:
    """NS: draw ``y ~ p``, accept if ``y`` is among ``k`` iid draws from ``q``.

    ``Σ_y p(y)·(1 − (1 − q(y))^k)``.
    """
    p, q = as_pair(p, q)
    k = _check_k(k)
    return float(np.sum(p * (1.0 - (1.0 - q) ** k)))


def naive_sample(p, candidates, rng: np.random.Generator) -> tuple[int, int]:
    """NS, which is also the correct verification of DETERMINISTIC candidates.

    Draw ``y ~ p``; return ``(first index of y among the candidates, y)``, or ``(-1, y)``.
    The output is ``p`` whatever the candidates are, because it is a plain draw from ``p``.
    """
    p = as_distribution(p)
    xs = _check_candidates(candidates, None, vocab=p.size)
    y = sample(p, rng)
    return (xs.index(y) if y in xs else -1), y


def deterministic_acceptance_probability(p, candidates) -> float:
    """Acceptance of deterministic candidates verified correctly (= NS): ``Σ_{x in set} p(x)``."""
    p = as_distribution(p)
    xs = _check_candidates(candidates, None, vocab=p.size)
    return float(p[sorted(set(xs))].sum())


def top_k_candidates(q, k: int) -> list[int]:
    """The ``k`` most likely draft tokens, best first (ties to the lower id); all need ``q > 0``."""
    q = as_distribution(q, "q")
    k = _check_k(k)
    if k > np.count_nonzero(q):
        raise UserError(f"k: {k} exceeds the {np.count_nonzero(q)} tokens with q > 0")
    return [int(i) for i in np.argsort(-q, kind="stable")[:k]]


def _mss_enumerate(p, q, k: int) -> tuple[np.ndarray, float]:
    p, q = as_pair(p, q)
    k = _check_k(k)
    vocab = p.size
    if vocab**k > MAX_ENUMERATED_TUPLES:
        raise UserError(
            f"k: enumerating {vocab}^{k} candidate tuples exceeds {MAX_ENUMERATED_TUPLES}"
        )
    chain = mss_residual_chain(p, q, k)  # [k+1, V]
    # a[j, x] = min(1, p_j(x)/q(x)); tokens with q(x) = 0 get weight 0 below anyway.
    with np.errstate(over="ignore"):  # a subnormal q(x) overflows to inf: min(1, inf) = 1
        ratio = np.divide(chain[:-1], q[None, :], out=np.zeros((k, vocab)), where=q[None, :] > 0)
    accept = np.minimum(ratio, 1.0)  # [k, V]
    if k == 0:  # one empty tuple: the output is a plain draw from p
        tuples = np.zeros((1, 0), dtype=np.int64)
    else:
        tuples = np.stack(np.unravel_index(np.arange(vocab**k), (vocab,) * k), axis=1)  # [N, k]
    weight = np.prod(q[tuples], axis=1)  # [N] = Π_j q(x_j)
    a = accept[np.arange(k)[None, :], tuples]  # [N, k] a_j(x_j) per tuple
    reach = np.cumprod(np.concatenate([np.ones((tuples.shape[0], 1)), 1.0 - a], axis=1), axis=1)
    # reach[:, j] = Π_{i<j} (1 − a_i): [N, k+1]; the last column is "all rejected".
    out = np.zeros(vocab)
    for j in range(k):
        np.add.at(out, tuples[:, j], weight * reach[:, j] * a[:, j])
    accepted = float(out.sum())
    all_rejected = float(np.sum(weight * reach[:, k]))
    return out + all_rejected * chain[k], accepted


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise UserError(f"k: must be an integer >= 0, got {k!r}")
    return int(k)


def _check_candidates(candidates, q, vocab: int | None = None) -> list[int]:
    vocab = q.size if q is not None else vocab
    arr = np.asarray(candidates).reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise UserError(f"candidates: must be integer token ids, got dtype {arr.dtype}")
    xs = [int(x) for x in arr]
    for x in xs:
        if not 0 <= x < vocab:
            raise UserError(f"candidates: token id must be in [0, {vocab}), got {x}")
        if q is not None and q[x] <= 0.0:
            raise UserError(f"candidates: token {x} has q = 0, so it cannot be a draw from q")
    return xs
