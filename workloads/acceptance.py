"""The acceptance-model contract the engine calls, and the two level-wise models.

A verification is described by its *widths*: per level the number of candidates the draft
offers there. A chain of γ guesses is ``[1]*γ``; an expansion tree ⟨k1..km⟩ (SpecInfer
§6.2) is its k's. Rows of a batch are padded with 0 past their depth. A model returns the
accepted depth ``a`` per sequence (0 <= a <= depth); the verify then emits ``a + 1`` tokens.

Acceptance may depend on the *absolute* output position (a regime tape or a recorded
trace), so re-guessing a position after a rejection sees the same difficulty there; the
Bernoulli draws themselves are fresh on every verify.

This module holds the abstract interface and the two models whose level probabilities do
not depend on the position: i.i.d. α (lecture §4.1) and per-guess conditional rates (the
vLLM-style view; marginal rates are converted to conditionals here).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np

from specdec.errors import UserError
from workloads.coverage import PowerCoverage, WidthModel, check_probability

# AcceptanceModel.kernel_tables' kinds: level draws against a table, replayed runs, a
# geometric run, level draws against a recorded trace's positions; and the widest level and
# deepest shape its tables cover
KERNEL_LEVELS, KERNEL_RUNS, KERNEL_GEOMETRIC, KERNEL_SAMPLED = 0, 1, 2, 3
TABLE_WIDTH = 16
TABLE_DEPTH = 64
NO_RUNS = np.zeros(0, dtype=np.int64)


class AcceptanceModel(abc.ABC):
    """Draws accepted depths for a whole batch of verifications at once."""

    @abc.abstractmethod
    def new_streams(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """int64 [n]: an opaque stream id per new request (e.g. an offset into a tape/trace)."""

    def accept(
        self,
        streams: np.ndarray,
        positions: np.ndarray,
        widths: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """Accepted depth per sequence, vectorised over the batch.

        streams int64 [B]; positions int64 [B] = output tokens the request has emitted so
        far (the first guess is for output token ``positions``); widths int64 [B, m]: per
        level the number of candidates, rows padded with 0 past their depth (a depth-0 row
        means no speculation and gets 0). Returns int64 [B] with 0 <= a_i <= depth_i.
        Validates its inputs (UserError on bad widths), then calls :meth:`draw`.
        """
        s = np.asarray(streams, dtype=np.int64)
        return self.draw(s, np.asarray(positions, dtype=np.int64),
                         check_widths(widths, batch=s.size), rng)

    @abc.abstractmethod
    def draw(self, streams: np.ndarray, positions: np.ndarray, widths: np.ndarray,
             rng: np.random.Generator) -> np.ndarray:
        """:meth:`accept` without validation: the engine's hot path.

        The caller guarantees int64 streams and positions [B] and valid int64 widths
        [B, m] (entries >= 0, no gap inside a row; a read-only broadcast view is fine).
        Same draws from ``rng`` as :meth:`accept`, so both give the same depths.
        """

    def kernel_tables(self, row: np.ndarray) -> tuple | None:
        """What a compiled engine needs to give this model's depths for shape ``row`` one
        sequence at a time, as :meth:`draw` gives them (the same draws from the same
        generator, in batch order) -- (kind, p, runs int64, ring uint8, tape L, level table
        float [R, K + 1]) -- or None: only :meth:`draw`. For a verify at stream s,
        position t:

        - ``KERNEL_LEVELS``: guess j is accepted when a fresh uniform is below
          ``table[ring[(s + t) % L + j], row[j]]``, one uniform per level of the row, the
          depth being the leading run (``sim.kernels.base.accepted_depth``);
        - ``KERNEL_RUNS``: nothing is drawn; the depth is ``min(depth, runs[(s + t) % L])``;
        - ``KERNEL_GEOMETRIC``: one geometric draw with success probability ``p``, less
          one, capped at the depth;
        - ``KERNEL_SAMPLED``: as ``KERNEL_LEVELS``, one uniform per level, but guess j is
          accepted when it is below ``table[start + j, row[j]]`` (a row per position of a
          trace of ``tape`` positions, ``start = (s + t) % tape``) and ``start + j`` is
          before ``runs[start]`` (the end of ``start``'s recorded sequence).

        A ``KERNEL_LEVELS`` model with ``p`` > 0 draws one geometric run instead where every
        row of a :meth:`draw` call is a chain (:class:`IIDAcceptance`: a task mix asks it
        for some rows of a batch only, which may all be chains where ``row`` is a tree).
        """
        return None

    @property
    @abc.abstractmethod
    def mean_alpha(self) -> float:
        """Prior per-guess acceptance probability, for adaptive policies."""

    @abc.abstractmethod
    def expected_tokens(self, widths: Sequence[int] | np.ndarray) -> float:
        """Exact expected tokens per verify (accepted + 1) for one shape.

        For position-dependent models this is the expectation for a verify that starts at a
        uniformly random position of the stream; measured per-verify averages can differ
        (lecture §4.5: verifies crowd into hard stretches).
        """


def chain_widths(gamma: int | np.ndarray, max_depth: int | None = None) -> np.ndarray:
    """Widths for chains: int64 [m] for a scalar γ, int64 [B, m] for an array of γ's.

    ``chain_widths(3) == [1, 1, 1]``; for an array, row i is ``[1]*γ_i`` padded with 0
    to ``max_depth`` (default: the largest γ).
    """
    g = np.asarray(gamma, dtype=np.int64)
    if np.any(g < 0):
        raise UserError(f"gamma: must be >= 0, got {int(g.min())}")
    m = int(g.max(initial=0)) if max_depth is None else int(max_depth)
    out = (np.arange(m)[None, :] < g.reshape(-1, 1)).astype(np.int64)  # [B, m]
    return out[0] if g.ndim == 0 else out


def check_widths(widths: np.ndarray, batch: int | None = None) -> np.ndarray:
    """Validate a widths array as int64 [B, m]: entries >= 0 and no gap inside a row.

    A 1-D array is taken as one shape (B = 1). A row such as ``[1, 0, 2]`` is refused: the
    depth of a row is its count of leading positive entries.
    """
    w = np.asarray(widths)
    if w.ndim == 1:
        w = w[None, :]
    if w.ndim != 2:
        raise UserError(f"widths: must be a [B, m] array, got shape {w.shape}")
    if w.dtype != np.int64:  # the engine passes int64; anything else is checked and cast
        if w.size and not np.issubdtype(w.dtype, np.integer):
            if not np.all(np.equal(np.mod(w, 1), 0)):
                raise UserError("widths: must be integers")
        w = w.astype(np.int64)
    if batch is not None and w.shape[0] != batch:
        raise UserError(f"widths: {w.shape[0]} rows for a batch of {batch}")
    if w.size == 0:
        return w
    if w.min() < 0:
        raise UserError(f"widths: must be >= 0, got {int(w.min())}")
    active = w > 0
    if np.any(active[:, 1:] > active[:, :-1]):
        raise UserError("widths: a 0 (end of depth) is followed by a positive width")
    return w


def one_shape(widths) -> np.ndarray:
    """Validate widths that must describe a single shape; int64 [1, m]."""
    w = check_widths(widths)
    if w.shape[0] != 1:
        raise UserError(f"widths: one shape expected, got {w.shape[0]} rows")
    return w


def shared_row(widths: np.ndarray) -> list[int] | None:
    """The one row of ``widths`` [B, m] when it is a broadcast view of it (stride 0 over
    the batch, as the engine passes a batch's one shape), as a list; else None (its rows
    may differ, or there are none)."""
    if widths.ndim == 2 and len(widths) and widths.strides[0] == 0:
        return widths[0].tolist()
    return None


def depths(widths: np.ndarray) -> np.ndarray:
    """int64 [B]: the depth of each row (its count of positive widths)."""
    return (np.asarray(widths) > 0).sum(axis=1).astype(np.int64)


def draw_leading_run(level_p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Accepted depth from conditional per-level probabilities, one draw per level.

    level_p float [B, m]: P(level i accepted | levels < i accepted), 0 past a row's depth.
    Returns int64 [B]: the length of the leading run of successes.
    """
    ok = rng.random(level_p.shape) < level_p  # [B, m]; p = 0 never succeeds
    return np.add.reduce(np.logical_and.accumulate(ok, axis=1), axis=1)  # [B] int64


def expected_from_levels(level_p: np.ndarray) -> np.ndarray:
    """Exact E[accepted + 1] per row: 1 + Σ_d Π_{i<=d} p_i.   [B, m] -> [B]"""
    return 1.0 + np.cumprod(level_p, axis=1).sum(axis=1)


class IIDAcceptance(AcceptanceModel):
    """Every guess is accepted independently with probability α (lecture §4.1).

    A level with k candidates succeeds with the width model's coverage (default
    :class:`PowerCoverage` with θ = 1: k independent candidates, 1 − (1 − α)^k).
    For a chain the expected tokens per verify are E(α, γ) = (1 − α^{γ+1}) / (1 − α).
    Streams carry no state: every position is alike.
    """

    def __init__(self, alpha: float, width_model: WidthModel | None = None) -> None:
        self.alpha = check_probability("alpha", alpha)
        self.width_model = width_model if width_model is not None else PowerCoverage(1.0)
        self._table = level_table(self.width_model, np.array([self.alpha]))  # [1, K + 1]

    def new_streams(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """int64 [n] zeros: i.i.d. acceptance needs no per-request state."""
        return np.zeros(_count(n), dtype=np.int64)

    def level_probs(self, widths: np.ndarray) -> np.ndarray:
        """float [B, m]: per-level success probability (0 past a row's depth)."""
        return self._level_probs(check_widths(widths))

    def _level_probs(self, w: np.ndarray) -> np.ndarray:
        if w.size and w.max() <= TABLE_WIDTH:  # coverage(α, k) looked up: the same numbers
            return self._table[0, w]
        return self.width_model.coverage(np.full(w.shape, self.alpha), w)

    def kernel_tables(self, row: np.ndarray) -> tuple | None:
        """``AcceptanceModel.kernel_tables``: a chain is one geometric draw (``draw``'s),
        another shape one uniform per level against coverage(α, k)."""
        if not within_tables(row):
            return None
        ring = np.zeros(len(row), dtype=np.uint8)  # one level probability for all levels
        p = 1.0 - self.alpha if self.alpha < 1.0 else 0.0  # draw's geometric run, for chains
        if int(row.max()) <= 1 and p > 0.0:
            return KERNEL_GEOMETRIC, p, NO_RUNS, ring, 1, self._table
        return KERNEL_LEVELS, p, NO_RUNS, ring, 1, self._table

    def draw(self, streams, positions, widths, rng):
        """Accepted depth per sequence: the leading run of independent level successes.

        Chains take one draw per sequence: the run before the first rejection is
        Geometric(1 − α) − 1, capped at γ — the same law as γ Bernoulli draws.
        """
        w = widths
        if w.size and w.max() <= 1 and self.alpha < 1.0:
            run = rng.geometric(1.0 - self.alpha, size=w.shape[0]) - 1  # [B]
            return np.minimum(run, depths(w))
        return draw_leading_run(self._level_probs(w), rng)

    @property
    def mean_alpha(self) -> float:
        """The α itself."""
        return self.alpha

    def expected_tokens(self, widths) -> float:
        """1 + Σ_d Π_{i<=d} coverage(α, k_i); E(α, γ) for a chain."""
        return float(expected_from_levels(self.level_probs(one_shape(widths)))[0])


class PositionalAcceptance(AcceptanceModel):
    """Per-guess *conditional* rates: α_i = P(guess i accepted | guesses 1..i−1 accepted).

    Guesses past the end of the table reuse its last rate (documented, not an error: an
    adaptive policy may try a deeper γ than the table was measured at). Levels with k
    candidates use the width model on that level's α_i.
    """

    def __init__(self, rates: Sequence[float], width_model: WidthModel | None = None) -> None:
        r = np.asarray(rates, dtype=np.float64)
        if r.ndim != 1 or r.size == 0:
            raise UserError(f"rates: must be a non-empty list of probabilities, got {rates!r}")
        for i, v in enumerate(r):
            check_probability(f"rates[{i}]", float(v))
        self.rates = r
        self.width_model = width_model if width_model is not None else PowerCoverage(1.0)
        self._mean_alpha: float | None = None  # solved on first use, then cached
        self._table = level_table(self.width_model, r)  # [rates, K + 1]

    @classmethod
    def from_marginals(
        cls, marginals: Sequence[float], width_model: WidthModel | None = None
    ) -> PositionalAcceptance:
        """Build from vLLM-style marginal rates m_i = P(guess i accepted).

        m_i already includes having accepted guesses 1..i−1, so the conditionals are
        α_1 = m_1 and α_i = m_i / m_{i−1}. Marginals must be non-increasing (a guess cannot
        be accepted more often than its predecessor). Once a marginal is 0 every later one
        is 0 and its conditional is taken as 0.
        """
        m = np.asarray(marginals, dtype=np.float64)
        if m.ndim != 1 or m.size == 0:
            raise UserError(f"marginals: must be a non-empty list, got {marginals!r}")
        for i, v in enumerate(m):
            check_probability(f"marginals[{i}]", float(v))
        for i in range(1, m.size):
            if m[i] > m[i - 1]:
                raise UserError(
                    f"marginals[{i}]: must be <= marginals[{i - 1}] = {m[i - 1]:g} "
                    f"(marginal rates are non-increasing), got {m[i]:g}"
                )
        prev = np.concatenate([[1.0], m[:-1]])  # [n]: m_{i-1}, with m_0 = 1
        cond = np.divide(m, prev, out=np.zeros_like(m), where=prev > 0)
        return cls(cond, width_model)

    def new_streams(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """int64 [n] zeros: the rates depend on the guess index only."""
        return np.zeros(_count(n), dtype=np.int64)

    def level_probs(self, widths: np.ndarray) -> np.ndarray:
        """float [B, m]: α_i through the width model per level (0 past a row's depth)."""
        return self._level_probs(check_widths(widths))

    def _level_probs(self, w: np.ndarray) -> np.ndarray:
        idx = np.minimum(np.arange(w.shape[1]), self.rates.size - 1)  # [m]
        if w.size and w.max() <= TABLE_WIDTH:  # coverage(α_i, k) looked up: the same numbers
            return self._table[idx, w]
        alpha = np.broadcast_to(self.rates[idx], w.shape)  # [B, m]
        return self.width_model.coverage(alpha, w)

    def kernel_tables(self, row: np.ndarray) -> tuple | None:
        """``AcceptanceModel.kernel_tables``: one uniform per level against coverage(α_i,
        k), level i's rate the table's i-th (its last past its end)."""
        if not within_tables(row) or self.rates.size > 256:
            return None
        ring = np.minimum(np.arange(len(row)), self.rates.size - 1).astype(np.uint8)
        return KERNEL_LEVELS, 0.0, NO_RUNS, ring, 1, self._table

    def draw(self, streams, positions, widths, rng):
        """Accepted depth per sequence, one fresh Bernoulli draw per level."""
        return draw_leading_run(self._level_probs(widths), rng)

    @property
    def mean_alpha(self) -> float:
        """The i.i.d. α with the same expected tokens for a chain as long as the table."""
        if self._mean_alpha is None:
            chain = chain_widths(self.rates.size)
            self._mean_alpha = solve_alpha(self.expected_tokens(chain), chain)
        return self._mean_alpha

    def expected_tokens(self, widths) -> float:
        """1 + Σ_d Π_{i<=d} coverage(α_i, k_i)."""
        return float(expected_from_levels(self.level_probs(one_shape(widths)))[0])


def level_table(width_model: WidthModel, alphas: np.ndarray) -> np.ndarray:
    """float [len(alphas), TABLE_WIDTH + 1]: ``width_model``'s coverage of each α with 0..K
    candidates (what ``draw`` looks up instead of computing per call: the same numbers)."""
    k = np.arange(TABLE_WIDTH + 1)  # [K + 1]
    return width_model.coverage(np.repeat(alphas, k.size).reshape(len(alphas), -1),
                                np.tile(k, (len(alphas), 1)))


def within_tables(row: np.ndarray) -> bool:
    """Whether a shape is within the level tables: 1 to TABLE_DEPTH levels, none wider than
    TABLE_WIDTH."""
    return 0 < len(row) <= TABLE_DEPTH and int(row.max()) <= TABLE_WIDTH


def _count(n: int) -> int:
    if int(n) != n or n < 0:
        raise UserError(f"n: must be an integer >= 0, got {n!r}")
    return int(n)


def expected_iid(alpha: float, widths, width_model: WidthModel | None = None) -> float:
    """Exact expected tokens per verify of the i.i.d. model with α for one shape."""
    return IIDAcceptance(alpha, width_model).expected_tokens(widths)


def solve_alpha(
    mean_tokens: float, widths, width_model: WidthModel | None = None, tol: float = 1e-14
) -> float:
    """The α at which the i.i.d. model yields ``mean_tokens`` per verify for ``widths``.

    Bisection on the exact expected value (strictly increasing in α from 1 at α = 0 to
    depth + 1 at α = 1). A target outside [1, depth + 1] is a UserError.
    """
    w = one_shape(widths)
    depth = int(depths(w)[0])
    target = float(mean_tokens)
    if not (1.0 <= target <= depth + 1.0):
        raise UserError(
            f"mean_tokens: must be in [1, {depth + 1}] for depth {depth}, got {mean_tokens!r}"
        )
    wm = width_model if width_model is not None else PowerCoverage(1.0)
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if expected_iid(mid, w, wm) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
