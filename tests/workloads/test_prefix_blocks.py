"""``workloads.prefix_blocks``: which prompt blocks hold the same tokens, numbered by first
appearance (the prefix cache's content keys)."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.prefix_blocks import prompt_block_keys, unique_block_keys
from workloads.requests import RequestSpec


def _spec(i: int, prompt: int, ids=None, t=None) -> RequestSpec:
    return RequestSpec(i, float(i), prompt, 4, "default", ids, t)


def test_keys_by_hand_a_repeated_chain_takes_the_keys_it_was_given_first():
    """Blocks of 16 tokens over trace blocks of 32: a block's key links the key before it,
    the trace ids it reaches into and its place; the request's own blocks get fresh keys."""
    specs = [
        _spec(0, 80, (7,), 32),     # 5 blocks, 2 covered by id 7: keys 0, 1; own 2, 3, 4
        _spec(1, 40),               # no ids: own 5, 6
        _spec(2, 48, (7,), 32),     # id 7's two blocks again: 0, 1; own 7
        _spec(3, 100, (7, 9), 32),  # 0, 1, then id 9's blocks 8, 9; own 10, 11
        _spec(4, 100, (7, 9), 32),  # all of request 3's chain again: 0, 1, 8, 9; own 12, 13
    ]
    keys, starts = prompt_block_keys(specs, 16)
    assert starts.tolist() == [0, 5, 7, 10, 16, 22]
    assert keys.tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1, 7, 0, 1, 8, 9, 10, 11,
                             0, 1, 8, 9, 12, 13]


def test_a_shared_system_prompt_keys_each_groups_blocks_once():
    """SGLang's generated-shared-prefix shape (workloads.requests: hash_ids (group,) over the
    prefix's tokens): every request of a group starts with the same keys, no other group
    has them, and every other block is the request's own."""
    rng = np.random.default_rng(5)
    groups = rng.integers(0, 3, 40)
    specs = [_spec(i, 64 + int(extra), (int(g),), 64)
             for i, (g, extra) in enumerate(zip(groups, rng.integers(1, 50, 40), strict=True))]
    keys, starts = prompt_block_keys(specs, 16)
    heads = {}
    rest = []
    for i, g in enumerate(groups.tolist()):
        mine = keys[starts[i]:starts[i + 1]]
        heads.setdefault(g, mine[:4].tolist())
        assert mine[:4].tolist() == heads[g]
        rest.extend(mine[4:].tolist())
    firsts = [k for h in heads.values() for k in h]
    assert len(set(firsts)) == 12 and not set(firsts) & set(rest)
    assert len(set(rest)) == len(rest)


def test_unique_keys_are_numbered_by_place_and_bad_blocks_refused():
    keys, starts = unique_block_keys(np.array([33, 16, 5]), 16)
    assert keys.tolist() == [0, 1, 2] and starts.tolist() == [0, 2, 3, 3]
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        prompt_block_keys([_spec(0, 10)], 0)
