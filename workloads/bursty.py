"""Two-state bursty acceptance: easy and hard stretches of text (lecture §4.5).

Real text alternates between stretches where the draft keeps guessing right (templated
code) and stretches where it keeps guessing wrong (reasoning). Here every absolute output
position has a regime, easy or hard, with per-guess acceptance β_easy or β_hard. Regime
segments have geometric lengths with the given means, i.e. the regime is a two-state
Markov chain over positions that leaves easy with probability 1/easy_mean_tokens and hard
with probability 1/hard_mean_tokens per position.

The regimes live on one pre-generated *tape* (a ring of ``tape_tokens`` positions) shared
by all streams; a stream is a random offset into it. So position p of a stream always has
the same regime — re-guessing it after a rejection sees the same difficulty — while the
Bernoulli draws are fresh on each verify.

Why this matters: verifies crowd into hard stretches (an easy verify advances ~4.5 tokens,
a hard one ~1.4 at γ = 4), while the measured α̂ averages over checked guesses, most of
which sit in easy stretches. Plugging α̂ into E(α, γ) then overestimates tokens per verify
(~5 % for β = 0.95 / 0.3, equal halves, γ = 4). :meth:`expected_tokens` gives the exact
expectation for a verify at a *uniformly random* position, which is not the per-verify
average either; measure with :func:`workloads.measure.measure_chain`.
"""

from __future__ import annotations

import math

import numpy as np

from specdec.errors import UserError
from workloads.acceptance import (
    KERNEL_LEVELS,
    NO_RUNS,
    TABLE_DEPTH,
    AcceptanceModel,
    draw_leading_run,
    level_table,
    one_shape,
    within_tables,
)
from workloads.coverage import PowerCoverage, WidthModel, check_probability

EASY, HARD = 0, 1

_OFFSETS = np.arange(TABLE_DEPTH)


def _mean_tokens(field: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{field}: must be a number >= 1, got {value!r}") from None
    if not (v >= 1.0) or math.isinf(v):
        raise UserError(f"{field}: must be a finite number >= 1 (tokens), got {value!r}")
    return v


def regime_tape(
    easy_mean_tokens: float, hard_mean_tokens: float, tape_tokens: int, rng: np.random.Generator
) -> np.ndarray:
    """uint8 [tape_tokens]: EASY/HARD per position, geometric segments, stationary start.

    The first regime is drawn from the stationary distribution (easy with probability
    easy_mean / (easy_mean + hard_mean)); segment lengths alternate between geometric
    draws with the two means (support >= 1). The last segment is cut at the tape's end.
    """
    means = np.array([easy_mean_tokens, hard_mean_tokens])
    first = EASY if rng.random() < means[0] / means.sum() else HARD
    # enough segment pairs to cover the tape with overwhelming probability; top up if not
    n_pairs = int(tape_tokens / means.sum() * 1.2) + 16
    chunks: list[np.ndarray] = []
    covered = 0
    while covered < tape_tokens:
        lens = np.empty(2 * n_pairs, dtype=np.int64)  # alternating segment lengths
        lens[0::2] = rng.geometric(1.0 / means[first], n_pairs)
        lens[1::2] = rng.geometric(1.0 / means[1 - first], n_pairs)
        states = np.tile(np.array([first, 1 - first], dtype=np.uint8), n_pairs)
        chunks.append(np.repeat(states, lens))
        covered += int(lens.sum())
    return np.concatenate(chunks)[:tape_tokens]


class BurstyAcceptance(AcceptanceModel):
    """Easy/hard regimes on a shared tape; per-guess acceptance β of the guessed position.

    Guess j (0-based) of a verify at stream s, position p is for output token p + j and uses
    the regime at tape[(s + p + j) mod tape_tokens]. A level with k candidates succeeds
    with the width model's coverage of that β. The tape is drawn once, from ``rng``.
    """

    def __init__(
        self,
        easy_alpha: float,
        hard_alpha: float,
        easy_mean_tokens: float,
        hard_mean_tokens: float,
        rng: np.random.Generator,
        tape_tokens: int = 1 << 20,
        width_model: WidthModel | None = None,
    ) -> None:
        easy = check_probability("easy_alpha", easy_alpha)
        self.beta = np.array([easy, check_probability("hard_alpha", hard_alpha)])
        self.mean_tokens = np.array(
            [
                _mean_tokens("easy_mean_tokens", easy_mean_tokens),
                _mean_tokens("hard_mean_tokens", hard_mean_tokens),
            ]
        )
        if int(tape_tokens) != tape_tokens or tape_tokens < 1:
            raise UserError(f"tape_tokens: must be an integer >= 1, got {tape_tokens!r}")
        if tape_tokens < 100 * self.mean_tokens.max():
            raise UserError(
                f"tape_tokens: must be >= 100 x the longest mean segment "
                f"({100 * self.mean_tokens.max():.0f}), got {tape_tokens}"
            )
        self.width_model = width_model if width_model is not None else PowerCoverage(1.0)
        self.tape = regime_tape(self.mean_tokens[0], self.mean_tokens[1], int(tape_tokens), rng)
        # draw's lookups: coverage per (regime, width), and the tape extended so that a
        # verify's guesses never wrap around its end
        self._level_table = level_table(self.width_model, self.beta)  # [2, K + 1]
        self._ring = np.concatenate(
            (self.tape, self.tape[np.arange(TABLE_DEPTH) % self.tape.size]))  # [tape + depth]

    @property
    def easy_fraction(self) -> float:
        """Stationary share of easy positions: easy_mean / (easy_mean + hard_mean)."""
        return float(self.mean_tokens[0] / self.mean_tokens.sum())

    def new_streams(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """int64 [n]: uniform random offsets into the tape."""
        return rng.integers(0, self.tape.size, size=int(n), dtype=np.int64)

    def regimes(self, streams: np.ndarray, positions: np.ndarray, m: int) -> np.ndarray:
        """uint8 [B, m]: the regime of each guessed position (EASY = 0, HARD = 1)."""
        start = np.asarray(streams, dtype=np.int64) + np.asarray(positions, dtype=np.int64)
        idx = (start[:, None] + np.arange(m)) % self.tape.size  # [B, m]
        return self.tape[idx]

    def draw(self, streams, positions, widths, rng):
        """Accepted depth per sequence: leading run of per-level draws at each position's β.

        The level probabilities come from a table of coverage(β_regime, k) for every
        regime and width up to ``TABLE_WIDTH`` (the same numbers as computing them per
        call), indexed by regime and width; the regime of guess j is read from the tape
        extended by ``TABLE_DEPTH`` positions, so only the start wraps. Wider or deeper
        shapes (rare) take the direct path.
        """
        m = widths.shape[1]
        start = (streams + positions) % self.tape.size  # [B]
        if m <= TABLE_DEPTH:
            idx = start[:, None] + _OFFSETS[:m]  # [B, m] into the extended tape
            try:
                p = self._level_table[self._ring[idx], widths]  # [B, m]
            except IndexError:  # a level wider than the table
                pass
            else:
                return draw_leading_run(p, rng)
        beta = self.beta[self.regimes(start, np.zeros_like(start), m)]  # [B, m]
        return draw_leading_run(self.width_model.coverage(beta, widths), rng)

    def kernel_tables(self, row: np.ndarray) -> tuple | None:
        """:meth:`draw`'s table path as ``AcceptanceModel.kernel_tables`` (None for a shape
        it does not cover: deeper than ``TABLE_DEPTH`` or wider than ``TABLE_WIDTH``)."""
        if not within_tables(row):
            return None
        return KERNEL_LEVELS, 0.0, NO_RUNS, self._ring, int(self.tape.size), self._level_table

    @property
    def mean_alpha(self) -> float:
        """Position-averaged β (stationary mix). The α̂ measured per checked guess is higher."""
        return float(self.easy_fraction * self.beta[0] + (1 - self.easy_fraction) * self.beta[1])

    def expected_tokens(self, widths) -> float:
        """Exact E[accepted + 1] for a verify starting at a stationary-random position.

        Forward recursion over the regime chain: v_d[s] = P(levels 1..d accepted, regime of
        level d is s); v_1 = π ⊙ c(β, k_1), v_{d+1} = (v_d P) ⊙ c(β, k_{d+1}).
        """
        w = one_shape(widths)
        leave = 1.0 / self.mean_tokens  # [2]: per-position switch probabilities
        trans = np.array([[1 - leave[0], leave[0]], [leave[1], 1 - leave[1]]])  # [2, 2]
        v = np.array([self.easy_fraction, 1 - self.easy_fraction])
        total = 1.0
        for d, k in enumerate(w[0]):
            if k == 0:
                break
            if d > 0:
                v = v @ trans
            v = v * self.width_model.coverage(self.beta, np.full(2, k))
            total += float(v.sum())
        return total
