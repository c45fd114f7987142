"""The paged KV cache: fixed-size blocks, allocated per sequence, rolled back after verify.

A sequence holding ``n`` tokens of KV owns ``ceil(n / block_size)`` blocks. Verifying a
draft writes the last token plus the guesses (tree nodes) into the cache, which may need new
blocks; after verification the cache is cut back to what was kept and, in the lecture's
paged KV (§3.2 and exercise 8), whole tail blocks go back to the pool (``rolls_back``).
vLLM v1 keeps them with the request until it is freed: the next tokens are written over the
rejected drafts' slots (``sim.kernels.rules.kept_blocks``). Preemption by recompute frees
every block of the victim. The pool never goes negative nor above its capacity; a request for more
blocks than are free is a scheduler bug, not user input, so it raises ``RuntimeError``.
"""

from __future__ import annotations

import numpy as np

from sim.kernels.rules import blocks_for, grant, kept_blocks

__all__ = ["BlockManager", "blocks_for"]

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce


class BlockManager:
    """A pool of ``capacity_blocks`` KV blocks shared by the slots of one replica.

    ``blocks[slot]`` is how many blocks the sequence in that slot owns; ``free_blocks`` is
    what remains in the pool. All methods take arrays of slots and token counts so that a
    whole batch is handled in one call.
    """

    def __init__(self, capacity_blocks: int, block_size: int, n_slots: int,
                 blocks: np.ndarray | None = None, rolls_back: bool = True) -> None:
        if capacity_blocks < 1 or block_size < 1:
            raise ValueError("KV pool needs at least one block of at least one token")
        self.capacity_blocks = int(capacity_blocks)
        self.block_size = int(block_size)
        # int64 [n_slots]; the owner may pass a (column) view of its own state array
        self.blocks = np.zeros(n_slots, dtype=np.int64) if blocks is None else blocks
        self.free_blocks = int(capacity_blocks)
        # whether a verify's rejected tail blocks go back to the pool (vLLM v1: no)
        self.rolls_back = int(rolls_back)

    @property
    def used_blocks(self) -> int:
        """Blocks currently owned by sequences."""
        return self.capacity_blocks - self.free_blocks

    def extra_needed(self, slots: np.ndarray, tokens: np.ndarray | int) -> np.ndarray:
        """int64 [n]: blocks each slot must add to hold ``tokens`` tokens (0 if it has them)."""
        return grant(tokens, 0, 0, self.blocks[slots], self.block_size)

    def grow(self, slots: np.ndarray, extra: np.ndarray) -> None:
        """Add ``extra[i]`` blocks to ``slots[i]`` (from :meth:`extra_needed`)."""
        self.grant(slots, self.blocks[slots], extra)

    def grant(self, slots: np.ndarray, held: np.ndarray, extra: np.ndarray) -> None:
        """:meth:`grow` given the slots' ``held`` blocks (the engine gathers them itself)."""
        total = int(_sum(extra))
        if total > self.free_blocks:
            raise RuntimeError(f"KV pool overdrawn: need {total} blocks, {self.free_blocks} free")
        self.blocks[slots] = held + extra
        self.free_blocks -= total

    def take(self, slot: int, n: int) -> None:
        """Give ``n`` blocks to ``slot`` (an admission's first chunk)."""
        if n > self.free_blocks:
            raise RuntimeError(f"KV pool overdrawn: need {n} blocks, {self.free_blocks} free")
        self.blocks[slot] += n
        self.free_blocks -= n

    def returned(self, n: int) -> None:
        """Take back ``n`` blocks of sequences whose counts the caller has already cleared."""
        self.free_blocks += n
        if self.free_blocks > self.capacity_blocks:
            raise RuntimeError(f"KV pool over capacity: {self.free_blocks} free of "
                               f"{self.capacity_blocks}")

    def shrink(self, slots: np.ndarray, tokens: np.ndarray) -> None:
        """Roll each slot back to ``tokens`` tokens, returning whole tail blocks to the pool
        (with ``rolls_back``)."""
        self.blocks[slots] = self.rolled_back(self.blocks[slots], tokens)

    def rolled_back(self, held: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Blocks to keep for ``tokens`` tokens, given ``held`` (gathered by the caller, who
        writes the result back): with ``rolls_back``, whole tail blocks return to the pool."""
        if not self.rolls_back:  # rules.kept_blocks keeps them all: spare the arithmetic
            return held
        keep = kept_blocks(tokens, held, self.block_size, self.rolls_back)
        self.free_blocks += int(_sum(held - keep))
        return keep

    def release(self, slots: np.ndarray | int) -> None:
        """Free every block of the given slots (request finished or preempted)."""
        self.free_blocks += int(np.sum(self.blocks[slots]))
        self.blocks[slots] = 0

    def free_slots(self, slots: np.ndarray, held: np.ndarray) -> None:
        """Take back the ``held`` blocks of finished ``slots`` whose counts the caller has
        already cleared."""
        self.returned(int(_sum(held)))
