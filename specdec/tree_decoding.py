"""Tree-based speculative decoding (SpecInfer): speculate a token tree, verify it in one pass.

One iteration, with the prefix ``x`` whose last token (the root) is not yet cached:

1. speculate: the draft builds an expansion tree ⟨k_1..k_m⟩ below the root
   (:func:`specdec.tree.expansion_tree`) — or several drafts' chains are merged
   (:func:`merge_tree_decode`);
2. one target pass over every node with tree attention (:func:`specdec.tree.tree_forward`);
3. verify: VerifyGreedy (T = 0) or MSS at every node (T > 0) picks the accepted path and
   the next token;
4. compact the accepted path's K/V into contiguous slots and drop the rest; the draft,
   rolled back to the root by the depth-first walk, owes the accepted tokens;
5. return ``x + accepted path tokens + t``.

The KV invariant is the chain's: between iterations both caches hold all but the last
token, except that the draft may owe pending tokens (here: the whole accepted path).
"""

from __future__ import annotations

import numpy as np

from specdec.decoding import (
    DecodeResult,
    check_decode_args,
    finish,
    prefill,
    record_iteration,
)
from specdec.drafts import Drafter, rank_order
from specdec.errors import UserError
from specdec.model import TinyTransformer
from specdec.sampling import probs_from_logits
from specdec.tree import (
    TokenTree,
    expansion_tree,
    merge_tree,
    tree_forward,
    verify_greedy,
    verify_stochastic,
)


def _verify_and_advance(
    target: TinyTransformer, cache, tree: TokenTree, temperature, rng
) -> tuple[list[int], int, int]:
    """Steps 2-4 for one tree: returns (accepted tokens below the root, next token, verify
    length: the target cache's length right after the tree pass)."""
    base = cache.length
    logits = tree_forward(target, tree, cache)  # Step 2: [n_nodes, vocab]
    verify_len = cache.length
    if temperature == 0:  # Step 3
        path, t = verify_greedy(tree, logits)
    else:
        path, t = verify_stochastic(tree, probs_from_logits(logits, temperature), rng)
    cache.compact(base, np.asarray(path))  # Step 4: slots base .. base + len(path) - 1
    return [tree.tokens[i] for i in path[1:]], t, verify_len


def tree_decode(
    target: TinyTransformer,
    drafter: Drafter,
    prompt,
    max_new_tokens: int,
    widths,
    temperature: float = 0.0,
    rng: np.random.Generator | None = None,
) -> DecodeResult:
    """SpecInfer-style decoding with an expansion tree ⟨k_1..k_m⟩ per iteration.

    ``draft_calls`` counts one draft pass per tree level (a real system expands a level in
    one batched pass); ``guesses`` is the number of nodes below the root.
    """
    widths = [int(k) for k in widths]
    nodes = 1 + int(np.sum(np.cumprod(widths)))  # a full ⟨k_1..k_m⟩ tree, root included
    prompt = check_decode_args(target, prompt, max_new_tokens, temperature, rng, nodes)
    cache = prefill(target, drafter, prompt)
    seq = list(prompt)
    result = DecodeResult([])
    while len(seq) - len(prompt) < max_new_tokens:
        base, draft_before = cache.length, drafter.length
        # Step 1: the tree; the draft first consumes what it owes, ending with the root.
        tree = expansion_tree(drafter, seq[drafter.length :], widths, temperature, rng)
        accepted, t, verify_len = _verify_and_advance(target, cache, tree, temperature, rng)
        record_iteration(result, len(seq) - len(prompt), tree.size - 1, len(accepted),
                         len(widths), (base, verify_len, draft_before), cache, drafter)
        seq += accepted + [t]  # Step 5
    return finish(result, seq, len(prompt), max_new_tokens)


def merge_tree_decode(
    target: TinyTransformer,
    drafters: list[Drafter],
    prompt,
    max_new_tokens: int,
    gamma: int,
) -> DecodeResult:
    """Greedy decoding over merge-based trees: each draft guesses a chain of γ, merged.

    The drafts could run in parallel (SpecInfer puts them on different GPUs), so
    ``draft_calls`` counts γ passes per iteration, not γ per draft. ``pending`` reports
    the first draft's debt (every draft owes the same tokens).
    """
    if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
        raise UserError(f"gamma: must be an integer >= 1, got {gamma!r}")
    if not drafters:
        raise UserError("drafters: merge-based trees need at least one draft")
    prompt = check_decode_args(target, prompt, max_new_tokens, 0.0, None,
                               1 + gamma * len(drafters))
    cache = prefill(target, drafters, prompt)
    seq = list(prompt)
    result = DecodeResult([])
    while len(seq) - len(prompt) < max_new_tokens:
        base, draft_before = cache.length, drafters[0].length
        chains = []
        for d in drafters:  # Step 1: each draft guesses γ tokens greedily, then rolls back
            feed, chain = seq[d.length :], []
            for _ in range(gamma):
                chain.append(int(rank_order(d.extend(feed)[-1])[0]))
                feed = [chain[-1]]
            d.truncate(len(seq))  # back to holding the root
            chains.append(chain)
        tree = merge_tree(seq[-1], chains)
        accepted, t, verify_len = _verify_and_advance(target, cache, tree, 0.0, None)
        record_iteration(result, len(seq) - len(prompt), tree.size - 1, len(accepted), gamma,
                         (base, verify_len, draft_before), cache, drafters[0])
        seq += accepted + [t]  # Step 5
    return finish(result, seq, len(prompt), max_new_tokens)
