"""Draft shapes: a row of widths per level (a chain of γ is ``[1]*γ``, an expansion tree
⟨k1..km⟩ its k's, 0-padded), and what a shape implies for drafting and verifying."""

from __future__ import annotations

import numpy as np


def level_sizes(row: np.ndarray) -> np.ndarray:
    """int64 [m]: nodes at each level of a tree shape (1 per level for a chain; 0 past depth)."""
    return np.cumprod(row)


_SHAPES: dict[bytes, tuple[int, int, list[int]]] = {}


def shape_info(row: np.ndarray) -> tuple[int, int, list[int]]:
    """(depth, draft nodes below the root, tokens each serial draft pass feeds) of a shape.

    Nodes: γ for a chain of γ, Σ_j Π_{i<=j} k_i for a tree. Feeds: the root (1), then each
    level's nodes but the last. Memoised: policies reuse a handful of shapes.
    """
    key = row.tobytes()
    info = _SHAPES.get(key)
    if info is None:
        depth = int((row > 0).sum())
        sizes = [int(x) for x in level_sizes(row)]
        info = (depth, sum(sizes), [1] + sizes[: depth - 1] if depth else [])
        _SHAPES[key] = info
    return info


def tree_nodes(row: np.ndarray) -> int:
    """Draft nodes below the root: γ for a chain of γ, Σ_j Π_{i<=j} k_i for a tree."""
    return shape_info(row)[1]


def draft_feeds(row: np.ndarray) -> list[int]:
    """Tokens per sequence each serial draft pass feeds: the root, then each level's nodes."""
    return shape_info(row)[2]


_TREE_KEYS: dict[bytes, float | None] = {}


def tree_key_term(row: np.ndarray) -> float | None:
    """Σ_l n_l·(l + 1) over the levels of a tree verify (root l = 0), or None for a chain.

    Under the tree mask a node at depth l attends its context, its l ancestors and itself,
    so one sequence's verify attends ``(1 + nodes)·ctx + this`` keys
    (``hardware.draft.tree_attended_keys``). A chain's causal count is the same number,
    and chains keep the cost model's own causal sums (None), so their prices are unchanged.
    """
    key = row.tobytes()
    if key not in _TREE_KEYS:
        depth = shape_info(row)[0]
        sizes = [1] + [int(x) for x in level_sizes(row[:depth])]
        _TREE_KEYS[key] = (float(sum(n * (lvl + 1) for lvl, n in enumerate(sizes)))
                           if depth and int(row.max()) > 1 else None)
    return _TREE_KEYS[key]


def causal_keys(new: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """float [n]: keys a causal run of ``new`` tokens over ``ctx`` cached ones attends."""
    c = new.astype(np.float64)
    return c * ctx + 0.5 * c * (c + 1)
