"""The paged KV pool: exercise 8 of the lecture, exactly."""

import numpy as np
import pytest

from sim.kv import BlockManager, blocks_for


def test_exercise_8_rollback():
    kv = BlockManager(capacity_blocks=100, block_size=16, n_slots=1)
    s = np.array([0])
    kv.grow(s, kv.extra_needed(s, np.array([1000])))
    assert kv.blocks[0] == 63 and kv.free_blocks == 37  # last block holds 8 tokens
    # γ = 7: the last token + 7 guesses fill block 63 exactly
    kv.grow(s, kv.extra_needed(s, np.array([1008])))
    assert kv.blocks[0] == 63
    kv.shrink(s, np.array([1003]))  # 1000 + 1 + 2 accepted
    assert kv.blocks[0] == 63
    # γ = 15 from 1003 tokens: 1019 -> needs block 64
    kv.grow(s, kv.extra_needed(s, np.array([1003 + 16])))
    assert kv.blocks[0] == 64 and kv.free_blocks == 36
    kv.shrink(s, np.array([1003 + 3]))  # 2 accepted: block 64 freed whole
    assert kv.blocks[0] == 63 and kv.free_blocks == 37
    kv.release(0)
    assert kv.blocks[0] == 0 and kv.free_blocks == 100


def test_the_lectures_literal_gamma_15_case():
    # 1000 cached, γ = 15 writes 16 tokens -> 1016 tokens, 64 blocks; rollback to 1003.
    kv = BlockManager(100, 16, 1)
    s = np.array([0])
    kv.grow(s, kv.extra_needed(s, np.array([1016])))
    assert kv.blocks[0] == 64
    kv.shrink(s, np.array([1003]))
    assert kv.blocks[0] == 63


def test_blocks_for_is_ceiling():
    assert blocks_for(np.array([0, 1, 15, 16, 17, 32, 1003]), 16).tolist() == [0, 1, 1, 1, 2, 2, 63]
    assert blocks_for(1016, 16) == 64  # exercise 8: 1000 + 16 tokens need a 64th block


def test_overdraw_is_a_bug_not_silently_clamped():
    kv = BlockManager(2, 16, 2)
    with pytest.raises(RuntimeError):
        kv.grow(np.array([0, 1]), kv.extra_needed(np.array([0, 1]), np.array([32, 1])))
    assert kv.free_blocks == 2


def test_admission_takes_and_finish_returns_within_capacity():
    kv = BlockManager(3, 16, 2)
    kv.take(1, 2)
    assert kv.blocks.tolist() == [0, 2] and kv.free_blocks == 1
    with pytest.raises(RuntimeError):
        kv.take(0, 2)  # only one block free
    kv.blocks[1] = 0  # the engine clears a finished slot, then hands its blocks back
    kv.returned(2)
    assert kv.free_blocks == 3
    with pytest.raises(RuntimeError):
        kv.returned(1)  # more than was ever taken: over capacity
