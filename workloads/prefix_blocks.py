"""Which KV blocks of which prompts hold the same tokens: keys for prefix caching.

SpecSim has no token ids, so a prompt's content is described by its ``RequestSpec.hash_ids``
(``hash_block_tokens`` tokens each): a Mooncake trace gives one id per 512 tokens of every
prompt; a synthetic workload with a shared system prompt gives one id (its group) for the
first ``shared_prefix_tokens`` tokens. Tokens past what the ids cover are the request's own.

:func:`prompt_block_keys` turns that into one integer key per *full* engine block of each
prompt (``block_size`` tokens; a partial last block is never cached, as in vLLM, whose
``hash_request_tokens`` hashes full blocks only). Two blocks get the same key iff they hold
the same tokens after the same prefix, as vLLM's chained block hash (``hash_block_tokens``
of the parent's hash and the block's tokens, ``vllm/v1/core/kv_cache_utils.py``) makes them
equal: the key of engine block j is interned from (key of block j - 1, the ids of the trace
blocks that block j reaches into that block j - 1 did not, j). So an engine block is shared
only when every trace block it overlaps, and every one before, is shared. This holds for any
block size: when ``block_size`` does not divide ``hash_block_tokens`` an engine block that
straddles two trace blocks is shared only with prompts that share both, and one larger than
a trace block covers several. A block that reaches past the ids (into the request's own
tokens) gets a key no other request has: it can be hit only by the request itself, after a
preemption.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workloads.requests import RequestSpec


def prompt_block_keys(specs: Sequence[RequestSpec], block_size: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(keys int64 [K], starts int64 [N + 1]): request i's full prompt blocks, in order, are
    ``keys[starts[i]:starts[i + 1]]`` (``prompt_tokens // block_size`` of them), every key
    >= 0. Keys are numbered by first appearance, so the same specs give the same keys."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    full = np.array([s.prompt_tokens // block_size for s in specs], dtype=np.int64)  # [N]
    starts = np.zeros(len(specs) + 1, dtype=np.int64)
    np.cumsum(full, out=starts[1:])
    keys = np.empty(int(starts[-1]), dtype=np.int64)
    interned: dict[tuple, int] = {}
    # (ids, trace block tokens, shared blocks) -> their keys: a chain already walked interns
    # nothing new, so a request that repeats one (a shared system prompt) copies its keys
    walked: dict[tuple, np.ndarray] = {}
    next_key = 0
    for i, s in enumerate(specs):
        n, at = int(full[i]), int(starts[i])
        shared = 0  # engine blocks whose tokens the ids cover
        if s.hash_ids and s.hash_block_tokens:
            t = int(s.hash_block_tokens)
            covered = min(len(s.hash_ids) * t, s.prompt_tokens)
            shared = min(n, covered // block_size)
            ids = tuple(s.hash_ids)
            chain = (ids, t, shared)
            seen = walked.get(chain)
            if seen is not None:
                keys[at:at + shared] = seen
            else:
                parent, reached = -1, 0  # the previous block's key; trace blocks it reached
                for j in range(shared):
                    last = ((j + 1) * block_size - 1) // t + 1  # trace blocks to block j's end
                    link = (parent, ids[reached:last], j)
                    key = interned.get(link)
                    if key is None:
                        key = interned[link] = next_key
                        next_key += 1
                    keys[at + j] = parent = key
                    reached = last
                walked[chain] = keys[at:at + shared]
        own = n - shared  # the request's own blocks: keys nobody else has
        keys[at + shared:at + n] = np.arange(next_key, next_key + own, dtype=np.int64)
        next_key += own
    return keys, starts


def unique_block_keys(prompt_tokens: np.ndarray, block_size: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`prompt_block_keys` for prompts that share nothing: every block its own key."""
    full = np.asarray(prompt_tokens, dtype=np.int64) // block_size  # [N]
    starts = np.zeros(len(full) + 1, dtype=np.int64)
    np.cumsum(full, out=starts[1:])
    return np.arange(int(starts[-1]), dtype=np.int64), starts
