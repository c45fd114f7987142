"""Speedup tables: the analytic one (lecture code 03 demo 2) and the hardware ones.

The hardware tables (code 03 demo 4, code 04 demo 5) price every pass with the cost model
at one batch size and context instead of assuming "verify costs one decode pass":

    speedup = tokens per iteration x decode_s / (draft_s + verify_s)

where ``decode_s`` is a plain decode pass of the whole batch (1 new token per sequence),
``verify_s`` one target pass over γ + 1 (chain) or all tree nodes (tree) per sequence, and
``draft_s`` the draft's passes (see :mod:`hardware.draft`); all at the same batch and
context. For a chain the tokens per iteration are ``E(α, γ)`` (i.i.d. acceptance); for a
tree they are measured tokens per verify, given by the caller. ``verify_ratio`` is
verify_s / decode_s and ``c`` is the draft's cost per draft pass over decode_s, the
lecture's c. When no row beats 1.0 the best choice is not to speculate: γ 0 / width 0 with
speedup 1.0.

Conventions that reproduce the lecture (all from the shipped catalog defaults):

- §4.2 / §7.1 / §7.2 (Llama-3-8B + Llama-3.2-1B, H100, α = 0.8): the draft runs at 16 bits on
  the target's GPU at the same batch, pass i of the chain at context + i. This gives c = 0.233
  (batch 1, context 1024), verify(γ=4) / decode = 3.68, γ = 4 0.727x, best γ = 1 1.031x at
  batch 256 / context 128, no speculation at batch 512, best 1.637x (γ = 2) at batch 256 /
  context 1024 and 1.739x (γ = 4) at batch 1.
- §7.3 (Llama-3-70B at 8-bit weights + Llama-3.2-1B at 16 bits, H200, ⟨k,1,1,1⟩): context
  1024 (the lecture's context elsewhere; it is what makes a batch-1 pass 18.69 ms), the
  tree drafted in 4 passes feeding 1, k, k, k tokens per sequence, and the verify priced
  with the tree's attention (each node sees its context and its ancestors,
  :func:`hardware.draft.tree_attended_keys`). Batch 1: 5 and 21 nodes both 18.69 ms;
  batch 16: narrowest 1.297x; batch 64: every tree below 1. The widest tree at batch 16
  comes out 0.629x, not the lecture's 0.64x. Its 336-token verify is compute-bound:
  67.47 ms of weight arithmetic (336 x 139.0 GFLOP at 692 TFLOP/s) + 1.31 ms of attention
  over the context (4 x layers x heads x d_head FLOPs per attended key) + 0.5 ms. Without
  the attention term the row is 0.640x and every other number of the lecture is unchanged
  (counting it per KV head, 1/8 of it under GQA, gives 0.639x, also 0.64), so the lecture's
  hw_model apparently prices FLOPs as 2 x params x tokens, or attention per KV head. The
  attention arithmetic is real (each of the 64 query heads does its own QK^T and AV), so
  the model keeps it (DESIGN.md's formula also counts it). No other convention closes the
  gap: the tree mask instead of a causal count changes the row by 1e-4, the draft's pass
  layout by less, an 8-bit draft breaks the 1.30x (1.37x), and no single context gives both
  (1.30 needs context <= ~1190, 0.64 >= ~1240).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import specdec
from hardware.cost import CostModel
from hardware.draft import (
    DraftSetup,
    chain_draft_seconds,
    tree_attended_keys,
    tree_draft_seconds,
    tree_nodes,
)
from hardware.spec_cost import SpecRound, serial_passes
from specdec.errors import UserError

__all__ = [
    "AnalyticRow",
    "ChainRow",
    "TreeRow",
    "analytic_table",
    "best_analytic",
    "chain_table",
    "best_chain",
    "tree_table",
    "best_tree",
]


@dataclass(frozen=True)
class AnalyticRow:
    """One γ of the analytic table: E(α, γ), speedup E/(γc + 1), arithmetic multiplier."""

    gamma: int
    expected_tokens: float
    speedup: float
    ops: float


@dataclass(frozen=True)
class ChainRow:
    """One γ of the hardware chain table (seconds are per iteration of the whole batch)."""

    gamma: int
    expected_tokens: float
    decode_s: float
    draft_s: float
    verify_s: float
    verify_ratio: float
    c: float
    speedup: float


@dataclass(frozen=True)
class TreeRow:
    """One tree width of the hardware tree table."""

    width: int
    tree: tuple[int, ...]
    nodes: int
    tokens_per_verify: float
    decode_s: float
    draft_s: float
    verify_s: float
    verify_ratio: float
    c: float
    speedup: float


def analytic_table(alpha: float, c: float, gamma_max: int) -> list[AnalyticRow]:
    """γ = 1..gamma_max of Leviathan et al.'s formulas (the core's functions)."""
    gammas = np.arange(1, _positive(gamma_max, "gamma_max") + 1)  # [G]
    e = specdec.expected_tokens(alpha, gammas)  # [G]
    s = specdec.walltime_speedup(alpha, gammas, c)  # [G]
    ops = specdec.ops_multiplier(alpha, gammas)  # [G]
    return [
        AnalyticRow(int(g), float(ei), float(si), float(oi))
        for g, ei, si, oi in zip(gammas, e, s, ops, strict=True)
    ]


def best_analytic(alpha: float, c: float, rows: list[AnalyticRow]) -> AnalyticRow:
    """The core's optimal γ among ``rows``, or γ 0 (speedup, E and ops all 1) if none pays."""
    gamma = specdec.optimal_gamma(alpha, c, max_gamma=len(rows))
    return rows[gamma - 1] if gamma > 0 else AnalyticRow(0, 1.0, 1.0, 1.0)


def chain_table(
    target: CostModel, draft: DraftSetup | None, batch: int, context: int, alpha: float,
    gamma_max: int, spec: SpecRound | None = None,
) -> list[ChainRow]:
    """γ = 1..gamma_max for a uniform batch (every sequence at ``context`` cached tokens);
    ``draft`` None: the guesses cost no GPU time (n-gram / prompt lookup on the CPU);
    ``spec``: what the engine spends around the passes (``hardware.spec_cost``), in
    ``draft_s`` (None: nothing, as on the lecture's paper GPU)."""
    batch, context = _positive(batch, "batch"), _non_negative(context, "context")
    ctx = np.full(batch, float(context))  # [batch]
    decode_s = target.uniform_pass_seconds(batch, 1, context)
    rows = []
    for gamma in range(1, _positive(gamma_max, "gamma_max") + 1):
        e = float(specdec.expected_tokens(alpha, gamma))
        timing = _timing(
            decode_s,
            (0.0 if draft is None else chain_draft_seconds(draft, gamma, ctx))
            + _round_s(spec, batch, draft, gamma, False),
            target.uniform_pass_seconds(batch, gamma + 1, context),
            e,
            gamma,
        )
        rows.append(ChainRow(gamma, e, *timing))
    return rows


def best_chain(rows: list[ChainRow]) -> ChainRow:
    """The fastest γ (ties to the smaller), or γ 0 with speedup 1.0 when none beats 1.0."""
    best = _best(rows, "gamma")
    d = rows[0].decode_s
    return best or ChainRow(0, 1.0, *_timing(d, 0.0, d, 1.0, 0))


def tree_table(
    target: CostModel,
    draft: DraftSetup | None,
    batch: int,
    context: int,
    trees: Sequence[tuple[int, Sequence[int]]],
    tokens_per_verify: Sequence[float],
    spec: SpecRound | None = None,
) -> list[TreeRow]:
    """One row per ``(width, ⟨k1..km⟩)`` with its measured tokens per verify (``spec``: as
    for :func:`chain_table`; a width above 1 is a tree)."""
    batch, context = _positive(batch, "batch"), _non_negative(context, "context")
    if len(trees) != len(tokens_per_verify):
        raise UserError(
            f"tokens-per-verify: need one value per tree ({len(trees)}), "
            f"got {len(tokens_per_verify)}"
        )
    ctx = np.full(batch, float(context))  # [batch]
    decode_s = target.uniform_pass_seconds(batch, 1, context)
    rows = []
    for (width, widths), tokens in zip(trees, tokens_per_verify, strict=True):
        nodes, depth = tree_nodes(widths), len(widths)
        if not 1.0 <= tokens <= depth + 1:
            raise UserError(
                f"tokens-per-verify: a verify of a depth-{depth} tree yields 1..{depth + 1} "
                f"tokens, got {tokens!r} for width {width}"
            )
        verify_s = target.uniform_pass_seconds(
            batch, nodes, context, keys=tree_attended_keys(widths, context)
        )
        draft_s = 0.0 if draft is None else tree_draft_seconds(draft, widths, ctx)
        draft_s += _round_s(spec, batch, draft, depth, max(widths) > 1)
        timing = _timing(decode_s, draft_s, verify_s, tokens, depth)
        rows.append(TreeRow(width, tuple(int(k) for k in widths), nodes, float(tokens), *timing))
    return rows


def best_tree(rows: list[TreeRow]) -> TreeRow:
    """The fastest width (ties to the narrower), or width 0 with speedup 1.0 if none pays."""
    best = _best(rows, "width")
    d = rows[0].decode_s
    return best or TreeRow(0, (), 1, 1.0, *_timing(d, 0.0, d, 1.0, 0))


def _round_s(spec: SpecRound | None, batch: int, draft: DraftSetup | None, depth: int,
             tree: bool) -> float:
    """The engine's speculative overheads of one round (``hardware.spec_cost``): the draft
    model or head runs ``depth`` serial passes, a one-pass drafter one, a CPU one none."""
    if spec is None:
        return 0.0
    return spec.seconds(batch, serial_passes(draft, depth), tree)


def _timing(
    decode_s: float, draft_s: float, verify_s: float, tokens: float, passes: int
) -> tuple[float, float, float, float, float, float]:
    """(decode_s, draft_s, verify_s, verify_ratio, c, speedup) of one row.

    ``c`` is the draft's time per pass over a decode pass (0 with no draft passes);
    ``speedup`` is ``tokens`` per iteration over one decode pass per token.
    """
    c = draft_s / (passes * decode_s) if passes else 0.0
    speedup = tokens * decode_s / (draft_s + verify_s)
    return decode_s, draft_s, verify_s, verify_s / decode_s, c, speedup


def _best(rows, key: str):
    """The row with the highest speedup (ties to the smaller ``key``), or None below 1.0."""
    best = max(rows, key=lambda r: (r.speedup, -getattr(r, key)))
    return best if best.speedup > 1.0 else None


def _positive(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserError(f"{name}: must be an integer >= 1, got {value!r}")
    return int(value)


def _non_negative(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise UserError(f"{name}: must be an integer >= 0, got {value!r}")
    return int(value)
