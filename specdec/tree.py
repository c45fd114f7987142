"""Token trees (SpecInfer §3-4): construction, tree attention and verification.

A tree is stored flat in depth-first (pre-)order, node 0 being the root: the last token
already decided. Every node ``u`` stands for the candidate sequence ``S_u`` of tokens on
the path from the root to ``u`` (SpecInfer Def. 3.1). Depth-first order means a node's
ancestors all come before it and each subtree is a contiguous block, which is what lets a
shared KV cache hold the whole tree and the accepted path be compacted in order.

Tree attention (Def. 4.1) runs the whole tree through the model in one pass with

- a topology-aware causal mask: node i sees the cached context and its own ancestors
  (itself included) — siblings and other branches are masked;
- RoPE positions by depth: node i sits at position ``cache.length + depth[i]``, so
  siblings share a position, exactly as each would in its own sequence.

Verification follows SpecInfer's Algorithm 2: ``verify_greedy`` (VerifyGreedy) walks down
while the target's argmax is one of the children; ``verify_stochastic`` runs multi-step
speculative sampling (MSS) over each node's children in draw order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specdec.drafts import Drafter, rank_order
from specdec.errors import UserError
from specdec.model import KVCache, TinyTransformer
from specdec.mss import mss_sample
from specdec.sampling import probs_from_logits, sample


@dataclass
class TokenTree:
    """A token tree in depth-first order (node 0 is the root)."""

    tokens: list[int]
    parents: list[int]  # -1 for the root
    # Per node: the candidate tokens in the order they were proposed (top-k order when
    # greedy, draw order with duplicates when sampled — MSS needs it); empty for leaves.
    draws: list[list[int]] = field(default_factory=list)
    # Per node: the draft distribution its children were drawn from (None when greedy).
    q: list[np.ndarray | None] = field(default_factory=list)

    def add(self, token: int, parent: int) -> int:
        """Append a node (callers keep depth-first order); returns its index."""
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        self.draws.append([])
        self.q.append(None)
        return len(self.tokens) - 1

    @property
    def size(self) -> int:
        """Number of nodes, root included."""
        return len(self.tokens)

    def depths(self) -> np.ndarray:
        """int64 [n]: 0 for the root, parent's depth + 1 below."""
        depth = np.zeros(self.size, dtype=np.int64)
        for i in range(1, self.size):
            depth[i] = depth[self.parents[i]] + 1
        return depth

    def children(self, node: int) -> list[int]:
        """Child node indices of ``node`` in layout order."""
        return [i for i in range(node + 1, self.size) if self.parents[i] == node]

    def ancestor_mask(self) -> np.ndarray:
        """bool [n, n]: ``mask[i, j]`` iff node j is on the root-to-i path (i included)."""
        mask = np.eye(self.size, dtype=bool)
        for i in range(1, self.size):
            mask[i] |= mask[self.parents[i]]  # parents come first in depth-first order
        return mask

    def leaves(self) -> list[int]:
        """Nodes without children: one per candidate sequence."""
        has_child = set(self.parents[1:])
        return [i for i in range(self.size) if i not in has_child]

    def path(self, node: int) -> list[int]:
        """Node indices from the root to ``node``."""
        out = [node]
        while self.parents[out[-1]] >= 0:
            out.append(self.parents[out[-1]])
        return out[::-1]

    def path_tokens(self) -> int:
        """Tokens a path-by-path verification processes: Σ over candidates of |root..leaf|."""
        return sum(len(self.path(leaf)) for leaf in self.leaves())


def expansion_tree(
    drafter: Drafter,
    feed,
    widths,
    temperature: float = 0.0,
    rng: np.random.Generator | None = None,
) -> TokenTree:
    """Expansion-based tree ⟨k_1..k_m⟩ from one draft (SpecInfer §3).

    ``feed`` is what the draft has not seen yet, ending with the root token. Each node at
    depth i-1 gets k_i children: greedy (T = 0) the top-k_i tokens of the draft's logits
    (ties to the lower id); sampling, k_i independent draws from the draft's q at that node,
    duplicates merged into one node while ``draws`` keeps every draw in order for MSS.
    The drafter is walked depth-first and rolled back, so it ends holding ``feed``.
    """
    widths = [int(k) for k in widths]
    if not widths or min(widths) < 1:
        raise UserError(f"tree widths: need >= 1 levels of width >= 1, got {widths}")
    if temperature > 0 and rng is None:
        raise UserError("rng: a sampled tree (temperature > 0) needs a numpy Generator")
    feed = [int(t) for t in feed]
    tree = TokenTree([], [], [], [])
    root = tree.add(feed[-1], -1)

    def expand(node: int, logits: np.ndarray, depth: int) -> None:
        k = widths[depth]
        if temperature == 0:
            tree.draws[node] = [int(t) for t in rank_order(logits)[:k]]
            kids = tree.draws[node]
        else:
            q = probs_from_logits(logits, temperature)
            tree.q[node] = q
            tree.draws[node] = [sample(q, rng) for _ in range(k)]
            kids = list(dict.fromkeys(tree.draws[node]))  # unique, first-draw order
        for tok in kids:
            child = tree.add(tok, node)
            if depth + 1 < len(widths):
                expand(child, drafter.extend([tok])[-1], depth + 1)
                drafter.truncate(drafter.length - 1)

    expand(root, drafter.extend(feed)[-1], 0)
    return tree


def merge_tree(root: int, sequences) -> TokenTree:
    """Merge several drafts' guessed sequences into one tree (SpecInfer Def. 3.2).

    The result holds every sequence as a root-to-node path and shares common prefixes;
    children keep the order in which the sequences first proposed them.
    """
    trie: dict = {}
    for seq in sequences:
        level = trie
        for tok in seq:
            level = level.setdefault(int(tok), {})
    tree = TokenTree([], [], [], [])

    def place(token: int, parent: int, sub: dict) -> None:
        node = tree.add(token, parent)
        tree.draws[node] = list(sub)
        for tok, below in sub.items():
            place(tok, node, below)

    place(int(root), -1, trie)
    return tree


def tree_forward(model: TinyTransformer, tree: TokenTree, cache: KVCache) -> np.ndarray:
    """One pass over all nodes with the ancestor mask; logits ``[n_nodes, vocab]``.

    The cache must hold the context before the root; it grows by ``tree.size`` slots (all
    nodes, depth-first), to be compacted with :meth:`KVCache.compact` after verification.
    """
    positions = cache.length + tree.depths()  # [n] siblings share a position
    return model.forward_masked(tree.tokens, positions, tree.ancestor_mask(), cache, "all")


def verify_greedy(tree: TokenTree, target_logits: np.ndarray) -> tuple[list[int], int]:
    """SpecInfer Algorithm 2, VerifyGreedy: returns (accepted path node indices, next token).

    1. u <- root;
    2. while the target's argmax at u is the token of some child v: u <- v (accept it);
    3. emit the argmax at u (the correction, or the free token at a leaf).
    """
    node, path = 0, [0]
    while True:
        best = int(np.argmax(target_logits[node]))
        nxt = [c for c in tree.children(node) if tree.tokens[c] == best]
        if not nxt:
            return path, best
        node = nxt[0]
        path.append(node)


def verify_stochastic(
    tree: TokenTree, target_probs: np.ndarray, rng: np.random.Generator
) -> tuple[list[int], int]:
    """SpecInfer Algorithm 2 with multi-step speculative sampling at every node.

    1. u <- root;
    2. if u has children, run MSS with the target's p at u, the draft's q at u and the
       children's draws in draw order: on acceptance move to the accepted child and repeat;
    3. on rejection emit MSS's residual draw; at a leaf emit a draw from p at u.
    """
    node, path = 0, [0]
    while True:
        if not tree.draws[node]:
            return path, sample(target_probs[node], rng)
        index, token = mss_sample(target_probs[node], tree.q[node], tree.draws[node], rng)
        if index < 0:
            return path, int(token)
        node = next(c for c in tree.children(node) if tree.tokens[c] == int(token))
        path.append(node)
