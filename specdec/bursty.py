"""When the i.i.d. formula is wrong: bursty acceptance (lecture §4.5, code 03 demo 3).

Real text alternates easy stretches (templated code: the draft is right again and again)
with hard ones (reasoning: it is wrong again and again). The experiment: every position of
a long output stream lies in an easy segment (acceptance probability β = 0.95) or a hard
one (β = 0.3), half of the positions each, with geometric segment lengths. Run speculative
decoding with γ = 4 over the stream and compare the measured tokens per verify with the
i.i.d. formula ``E(α̂, γ)`` fed the measured acceptance rate α̂.

The formula OVER-estimates, by about 5%. An easy iteration advances about
``E(0.95, 4) ≈ 4.5`` positions and a hard one ``E(0.3, 4) ≈ 1.4``, so about three quarters
of the iterations happen in hard segments, and tokens per verify (an average over
iterations) is dominated by them; α̂ (an average over checked guesses) weights the easy
segments, which check more guesses per iteration, more heavily. Jensen's inequality on the
convex ``E(β, γ)`` suggests the opposite direction, which is why the lecture calls it out.

Mean segment length: 64 positions by default — a paragraph or a code block, long against
one iteration (<= γ + 1 = 5 positions) so that iterations rarely straddle a boundary, as in
the lecture's picture of acceptance in patches. The effect needs segments longer than an
iteration: at mean length 2 the states are i.i.d. per position and the formula is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.analysis import expected_tokens
from specdec.errors import UserError


@dataclass(frozen=True)
class BurstyResult:
    """Measurements of one bursty run; ``formula_overestimate = formula / measured − 1``."""

    alpha_hat: float  # accepted guesses / checked guesses
    tokens_per_verify: float  # positions advanced / iterations (accepted + 1 per iteration)
    formula_tokens: float  # E(alpha_hat, gamma), the i.i.d. prediction
    formula_overestimate: float
    hard_iteration_share: float  # fraction of iterations that start in a hard segment
    iterations: int
    positions: int


def two_state_segments(
    n_positions: int, mean_segment_len: float, rng: np.random.Generator
) -> np.ndarray:
    """Easy/hard flags, shape ``[n_positions]`` (True = easy), half each in the long run.

    A two-state Markov chain that switches after each position with probability
    ``1/mean_segment_len``, so segment lengths are geometric with that mean in both states;
    the first state is drawn from the stationary (½, ½) distribution.
    """
    if isinstance(n_positions, bool) or not isinstance(n_positions, (int, np.integer)):
        raise UserError(f"n_positions: must be an integer >= 1, got {n_positions!r}")
    if n_positions < 1:
        raise UserError(f"n_positions: must be an integer >= 1, got {n_positions}")
    if not (np.isfinite(mean_segment_len) and mean_segment_len >= 1.0):
        raise UserError(f"mean_segment_len: must be >= 1, got {mean_segment_len!r}")
    switch = rng.random(n_positions) < 1.0 / mean_segment_len  # [n] switch before position t
    switch[0] = rng.random() < 0.5  # stationary start: easy or hard with probability ½
    return np.cumsum(switch) % 2 == 0  # [n] even number of switches so far = easy


def run_lengths(accept: np.ndarray) -> np.ndarray:
    """``out[t]`` = number of consecutive True entries of ``accept`` starting at ``t``."""
    n = accept.size
    # Index of the first False at or after t (n if none), via a reverse running minimum.
    false_at = np.where(accept, n, np.arange(n))  # [n]
    next_false = np.minimum.accumulate(false_at[::-1])[::-1]  # [n]
    return next_false - np.arange(n)


def bursty_acceptance_experiment(
    rng: np.random.Generator,
    n_positions: int = 400_000,
    gamma: int = 4,
    easy_beta: float = 0.95,
    hard_beta: float = 0.3,
    mean_segment_len: float = 64.0,
) -> BurstyResult:
    """Simulate speculative decoding over a bursty stream; see the module docstring.

    Every stream position is checked at most once (an accepted guess, the rejected guess
    that the correction token replaces, or the free bonus token), so one Bernoulli(β_t) draw
    per position decides the whole run. An iteration starting at position ``t``:

    1. accepts ``n = min(run of accepted positions from t, γ)`` guesses;
    2. checked ``n + 1`` guesses if ``n < γ`` (the (n+1)-th was rejected), else γ;
    3. emits ``n + 1`` tokens (the correction or the bonus) and moves to ``t + n + 1``.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
        raise UserError(f"gamma: must be an integer >= 1, got {gamma!r}")
    for name, beta in (("easy_beta", easy_beta), ("hard_beta", hard_beta)):
        if not 0.0 <= beta <= 1.0:
            raise UserError(f"{name}: must be in [0, 1], got {beta!r}")
    easy = two_state_segments(n_positions, mean_segment_len, rng)  # [n]
    if n_positions <= gamma:
        raise UserError(f"n_positions: must exceed gamma = {gamma}, got {n_positions}")
    beta = np.where(easy, easy_beta, hard_beta)  # [n]
    accept = rng.random(n_positions) < beta  # [n] would a guess at t be accepted
    runs = run_lengths(accept)  # [n]

    starts = []
    t = 0
    while t < n_positions - gamma:  # drop a final iteration that would run off the stream
        starts.append(t)
        t += min(int(runs[t]), gamma) + 1
    starts = np.asarray(starts)  # [iterations]
    accepted = np.minimum(runs[starts], gamma)  # [iterations]
    checked = np.where(accepted < gamma, accepted + 1, gamma)  # [iterations]

    alpha_hat = float(accepted.sum() / checked.sum())
    measured = float(np.mean(accepted + 1))
    formula = float(expected_tokens(alpha_hat, gamma))
    return BurstyResult(
        alpha_hat=alpha_hat,
        tokens_per_verify=measured,
        formula_tokens=formula,
        formula_overestimate=formula / measured - 1.0,
        hard_iteration_share=float(np.mean(~easy[starts])),
        iterations=int(starts.size),
        positions=int(t),
    )
