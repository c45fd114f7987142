"""Replaying acceptance traces recorded with the numpy core (DESIGN "Acceptance traces").

A trace (``specdec.traces.AcceptanceTrace``) holds, per position t of the target's own
output: ``ranks[t]``, the rank of the target's token in the draft's distribution given the
true prefix; ``accept_prob[t, k-1]``, the probability that MSS with k independent
candidates accepts there; and ``sequence[t]``, the recorded run t belongs to.

* Greedy replay is exact and deterministic: level j of a shape ⟨k1..km⟩ succeeds iff
  ``ranks[t + j] < k_{j+1}`` (the target's token is among the draft's top-k), so a chain
  accepts the leading run of rank-0 positions and a tree stops at the first level whose
  rank is not covered — what real greedy verification would do. The core's
  :func:`specdec.traces.replay_chain` (O(1) per sequence, from precomputed runs) answers
  batches of chains, :func:`specdec.traces.replay_tree` anything wider.
* Sampling replay draws each level with ``accept_prob[t + j, k_{j+1} − 1]``
  (:func:`specdec.traces.replay_tree_sampled`).

The trace is a ring of its sequences: a stream starts at a uniform random offset and walks
on through the following sequences (wrapping at the end), but a single verify never
crosses a sequence boundary — the run stops at the last position of its sequence.
"""

from __future__ import annotations

import numpy as np

from specdec.errors import UserError
from specdec.traces import AcceptanceTrace, replay_chain, replay_tree, replay_tree_sampled
from workloads.acceptance import (
    KERNEL_RUNS,
    KERNEL_SAMPLED,
    AcceptanceModel,
    check_widths,
    depths,
    expected_from_levels,
    one_shape,
    shared_row,
)

MODES = ("greedy", "sampling")
# kernel_tables' level table and ring, unused when the runs are replayed
_NO_RING = np.zeros(1, dtype=np.uint8)
_NO_TABLE = np.zeros((1, 1))


def positions_left(sequence: np.ndarray) -> np.ndarray:
    """int64 [n]: positions from t to the end of t's sequence, t included (>= 1)."""
    seq = np.asarray(sequence)
    n = seq.size
    ends = np.flatnonzero(np.append(seq[1:] != seq[:-1], True))  # [S]: last index of each run
    run_end = ends[np.searchsorted(ends, np.arange(n))]  # [n]: last index of t's run
    return (run_end - np.arange(n) + 1).astype(np.int64)


class TraceAcceptance(AcceptanceModel):
    """Acceptance replayed from a recorded trace, ``mode`` 'greedy' or 'sampling'.

    Stream ids are offsets into the trace; guess j of a verify at position p of stream s
    is trace position (s + p + j) mod n. ``trace`` is an :class:`AcceptanceTrace` or any
    object with its four fields (ranks, accept_prob, sequence, meta), converted to one.
    ``source`` (e.g. the trace file's path) prefixes error messages.
    """

    def __init__(self, trace, mode: str = "greedy", source: str | None = None) -> None:
        if mode not in MODES:
            raise UserError(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
        ranks = np.asarray(trace.ranks)
        prob = np.asarray(trace.accept_prob, dtype=np.float64)
        seq = np.asarray(trace.sequence)
        src = source or "trace"
        n = ranks.size
        if n == 0 or ranks.ndim != 1 or seq.shape != (n,):
            raise UserError(f"{src}: ranks and sequence must be 1-D of one non-zero length")
        if ranks.min() < 0:
            raise UserError(f"{src}: ranks: must be >= 0, got {int(ranks.min())}")
        if prob.ndim != 2 or prob.shape[0] != n or prob.shape[1] < 1:
            raise UserError(f"{src}: accept_prob: must be [{n}, K >= 1], got {prob.shape}")
        if not np.all((prob >= 0) & (prob <= 1)):
            raise UserError(f"{src}: accept_prob: values must be in [0, 1]")
        if not isinstance(trace, AcceptanceTrace):
            trace = AcceptanceTrace(
                ranks.astype(np.int32), prob, seq.astype(np.int32), dict(trace.meta)
            )
        self.trace = trace
        self.mode = mode
        self.ranks = ranks.astype(np.int64)
        self.accept_prob = prob
        self.left = positions_left(seq)  # [n]
        self.source = src
        self._mean_alpha = float(
            np.mean(self.ranks == 0) if mode == "greedy" else self.accept_prob[:, 0].mean()
        )
        self._sampled = None  # kernel_tables' of the sampling mode, made on first use

    @property
    def size(self) -> int:
        """Trace positions n."""
        return int(self.ranks.size)

    @property
    def max_width(self) -> int:
        """Widest level the sampling mode can replay (K of accept_prob)."""
        return int(self.accept_prob.shape[1])

    def new_streams(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """int64 [n]: uniform random offsets into the trace."""
        return rng.integers(0, self.size, size=int(n), dtype=np.int64)

    def _levels(self, start: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Trace indices [B, m] of each level and whether the level is inside the sequence."""
        idx = (start[:, None] + np.arange(w.shape[1])) % self.size  # [B, m]
        inside = np.arange(w.shape[1]) < self.left[start][:, None]  # [B, m]
        return idx, inside & (w > 0)

    def level_probs(self, start: np.ndarray, widths: np.ndarray) -> np.ndarray:
        """float [B, m]: per-level success probability at trace offsets ``start`` [B].

        Greedy: 1.0 where the rank is covered (rank < k), else 0.0. Sampling: the recorded
        MSS acceptance with k candidates. 0 past the row's depth or its sequence.
        """
        w = check_widths(widths, batch=start.size)
        idx, live = self._levels(start, w)
        if self.mode == "greedy":
            return (live & (self.ranks[idx] < w)).astype(np.float64)
        if w.size and w.max() > self.max_width:
            raise UserError(
                f"{self.source}: width {int(w.max())} exceeds the trace's "
                f"K = {self.max_width} recorded candidates"
            )
        k = np.maximum(w, 1) - 1  # [B, m]: column of accept_prob (masked where w == 0)
        return np.where(live, self.accept_prob[idx, k], 0.0)

    def draw(self, streams, positions, widths, rng):
        """Greedy: the exact replayed depth (no draws). Sampling: one draw per level."""
        start = (streams + positions) % self.size  # [B]
        w = widths
        if self.mode == "greedy":
            one = shared_row(w)
            if one is not None and max(one, default=0) <= 1:  # one chain for every row
                return np.minimum(sum(one), self.trace.run0[start])  # replay_chain's
            if w.size == 0 or w.max() <= 1:  # chains (the common case): O(1) per sequence
                return replay_chain(self.trace, start, depths(w))
            return replay_tree(self.trace, start, w)
        if w.size and w.max() > self.max_width:
            raise UserError(
                f"{self.source}: width {int(w.max())} exceeds the trace's "
                f"K = {self.max_width} recorded candidates"
            )
        return replay_tree_sampled(self.trace, start, w, rng)

    def kernel_tables(self, row: np.ndarray) -> tuple | None:
        """``AcceptanceModel.kernel_tables``: greedy chains the run of rank-0 positions
        from each trace position (``replay_chain``, no draws); the sampling mode, any shape
        it can replay (no level wider than its K), ``replay_tree_sampled``'s draws: one
        uniform per level against the recorded acceptance of the level's width, at positions
        inside the verify's sequence. None for greedy trees."""
        if not len(row):
            return None
        if self.mode == "sampling":
            if int(row.max()) > self.max_width:
                return None  # (draw says why)
            if self._sampled is None:
                table = np.zeros((self.size, self.max_width + 1))  # [n, K + 1]: width 0 fails
                table[:, 1:] = self.accept_prob
                self._sampled = (KERNEL_SAMPLED, 0.0, self.trace.seq_end, _NO_RING,
                                 self.size, table)
            return self._sampled
        if int(row.max()) > 1:
            return None
        return KERNEL_RUNS, 0.0, self.trace.run0, _NO_RING, self.size, _NO_TABLE

    @property
    def mean_alpha(self) -> float:
        """Greedy: share of rank-0 positions. Sampling: mean one-candidate acceptance."""
        return self._mean_alpha

    def expected_tokens(self, widths) -> float:
        """Exact mean of accepted + 1 over verifies starting at every trace position."""
        w = one_shape(widths)
        start = np.arange(self.size, dtype=np.int64)  # [n]
        rows = np.broadcast_to(w, (self.size, w.shape[1]))  # [n, m]
        return float(expected_from_levels(self.level_probs(start, rows)).mean())
