"""Measuring an acceptance model the way a serving log would.

Each of ``n_streams`` requests runs ``n_verifies`` chain verifies of γ guesses back to
back, advancing by the tokens each verify emits (accepted + 1). The result reports tokens
per verify (averaged over verifies) and α̂ = accepted guesses / checked guesses, where a
verify that accepts a < γ guesses checked a + 1 of them and one that accepts all checked γ.
This is the quantity lecture §4.5 plugs into E(α, γ) to show the formula's bias.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.errors import UserError
from workloads.acceptance import AcceptanceModel, chain_widths


@dataclass(frozen=True)
class ChainMeasurement:
    """Totals of a measurement run and the two averages derived from them."""

    verifies: int
    tokens: int
    accepted: int
    checked: int

    @property
    def tokens_per_verify(self) -> float:
        """Mean accepted + 1 per verify."""
        return self.tokens / self.verifies

    @property
    def alpha_hat(self) -> float:
        """Accepted guesses per checked guess."""
        return self.accepted / self.checked


def replay_chain(model: AcceptanceModel, gamma: int, n_streams: int, n_verifies: int,
                 rng: np.random.Generator) -> np.ndarray:
    """int64 [n_streams, n_verifies]: the accepted guesses of each verify of a γ-chain, each
    stream advancing by the tokens its verifies emit (accepted + 1)."""
    if gamma < 1:
        raise UserError(f"gamma: must be >= 1, got {gamma}")
    if n_streams < 1 or n_verifies < 1:
        raise UserError(f"n_streams, n_verifies: must be >= 1, got {n_streams}, {n_verifies}")
    streams = model.new_streams(n_streams, rng)  # [B]
    positions = np.zeros(n_streams, dtype=np.int64)  # [B]
    widths = np.broadcast_to(chain_widths(gamma), (n_streams, gamma))  # [B, γ]
    out = np.empty((n_streams, n_verifies), dtype=np.int64)  # [B, V]
    for v in range(n_verifies):
        a = model.accept(streams, positions, widths, rng)  # [B]
        out[:, v] = a
        positions += a + 1
    return out


def measure_chain(
    model: AcceptanceModel,
    gamma: int,
    n_streams: int,
    n_verifies: int,
    rng: np.random.Generator,
) -> ChainMeasurement:
    """Run ``n_verifies`` verifies of γ guesses on ``n_streams`` parallel streams."""
    acc = replay_chain(model, gamma, n_streams, n_verifies, rng)  # [B, V]
    return ChainMeasurement(acc.size, int((acc + 1).sum()), int(acc.sum()),
                            int(np.minimum(acc + 1, gamma).sum()))
