"""Automatic prefix caching: the KV pool keeps full committed blocks by content, as vLLM v1.

vLLM v1's KV manager (``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``,
``kv_cache_utils.py``) gives every full block a hash of its tokens chained to its prefix's
hash. A request's longest run of leading blocks whose hashes are cached is its hit: those
blocks are shared by reference (``ref_cnt``) and its prefill starts after them. A block whose
last reference goes is not forgotten: it joins the tail of one free queue
(``FreeKVCacheBlockQueue``: a request's blocks are freed in reverse, so its last blocks are
evicted first) and stays findable until allocation pops it from the head of that queue, the
least recently freed block, and evicts its hash. SpecSim keeps the same structure with the
content keys of ``workloads.prefix_blocks`` in place of hashes of token ids:

- **lookup** (``get_computed_blocks``): the leading cached keys of a request's prompt (for
  a request resumed after a preemption, then of its committed output), at most
  ⌊(tokens - 1) / block_size⌋ blocks, since the last token is always recomputed to
  get its logits (``max_cache_hit_length = request.num_tokens - 1``); a hit on a block with
  no references takes it out of the free queue, so it costs a free block (``touch``). With
  an EAGLE-type drafter (EAGLE, EAGLE-3, MTP) vLLM up to 0.20 drops the hit's last block,
  whose tokens' hidden states the draft needs (``drop_last_hit``); 0.33 instead hashes each
  block with the token after it (``num_hash_lookahead_tokens`` 1), so a block is a hit
  only where the prompts also agree on the token after it (``next_token_hash``). The keys
  say which blocks match, not where prompts part: SpecSim takes them to part at a block's
  first token, so a block is keyed with the key of the block after it in its prompt, or,
  for a prompt's last full block and its output blocks, with the request itself (its own
  tail or output follows): a copy is found only where that agrees too, and each such
  (key, next) pair has its copies, as each of vLLM's hashes has;
- **caching** (``cache_blocks``): when a prefill chunk is scheduled, the full prompt blocks
  it completes are cached at once (so a request admitted later in the same step can hit
  them, as in vLLM). vLLM caches only tokens that are computed and committed
  (``num_tokens_to_cache = min(..., request.num_tokens)``, which excludes draft tokens), so
  a block holding a speculative token is never cached. SpecSim caches a request's full
  blocks of committed output (prompt + accepted tokens, ``kv_tokens`` after the verify's
  roll-back) when it is **preempted** (:meth:`keep_committed`), with keys no other request
  has: without token ids only the request itself can hit its output, and it can do so only
  after it has released it, so caching output blocks as they fill (vLLM) or at the
  preemption gives the same hits. A **finished** request's full blocks of its computed
  tokens (prompt and output but its last token) are cached when it leaves too: no one can
  hit its output (multi-turn conversations are not modelled), but as cached blocks they
  go to the tail of the free queue, where vLLM puts them, not to its head;
- **free / preempt**: references drop; blocks left with none join the free queue: its
  cached blocks at the tail from the last to the first, and its own (unshared, uncached)
  blocks -- the partial last block, blocks past its committed tokens -- at the head, to be
  reused first (vLLM 0.33's ``BlockPool.free_blocks``: "LIFO reuse of non-cached blocks";
  ``unhashed_first``), or, as up to 0.20, at the tail before its cached ones;
- **allocate**: blocks come off the head of the free queue; a cached block taken there is
  evicted.

The cache lives in one int64 array whose functions (``sim.kernels.prefix``: the free queue
as a doubly linked list of cached blocks and runs of uncached ones, runs freed one after
the other merged, so the decode path costs a node or two per iteration; a table from each
key to its cached copies) are the one statement of these rules: this pool calls them as
Python, the compiled walk (``sim.steady_walk``) compiled. ``free_blocks`` counts every
block in the queue (vLLM's ``get_num_free_blocks``: evictable cached blocks are free), so
the schedulers are unchanged.

A block computed while an identical one is cached is cached too: vLLM does not
de-duplicate (``BlockHashToBlockMap``: a hash maps to every block that holds it, and a
lookup takes the first of them still cached, ``get_one_block``), so each copy keeps its own
references and its own place in the free queue, and the key stays a hit while any copy
lives.

Departures from vLLM: no token ids are hashed (the workload says which prompts share what),
so keys are exact and hash collisions are not modelled; no multi-modal, LoRA or cache-salt
extra keys.
"""

from __future__ import annotations

import numpy as np

from sim.kernels import prefix as pc
from sim.kernels.prefix import (
    pc_attach,
    pc_cache,
    pc_free_slot,
    pc_keep_committed,
    pc_lookup,
    pc_new,
    pc_pop,
    pc_push_run,
)
from sim.kernels.rules import kept_blocks
from sim.kv import BlockManager

_sum = np.add.reduce
_NO_LOG = np.zeros(0, dtype=np.int64)  # the reference path takes nothing back


def _as_is(fn):
    return fn


class PrefixCachingBlockManager(BlockManager):
    """A KV pool with hash-addressed (here: content-keyed), reference-counted prompt blocks
    and LRU eviction of unreferenced ones (see the module docstring).

    ``keys``, ``starts``: the prompts' block keys (``RequestTable.block_keys`` and
    ``block_starts``): request ``rid``'s full prompt blocks are ``keys[starts[rid]:
    starts[rid + 1]]`` (``keys`` empty: prompts that share nothing, each block its own
    key, ``starts[rid] + j``, as ``workloads.prefix_blocks.unique_block_keys`` numbers
    them, without the array). ``blocks[slot]`` counts every block a slot's sequence uses, shared
    ones included; ``free_blocks`` the blocks in the free queue (free or evictable).
    ``width``: the most blocks one slot may cache (default: the pool's); ``mem`` holds the
    cache (``sim.kernels.prefix``).
    """

    def __init__(self, capacity_blocks: int, block_size: int, n_slots: int,
                 keys: np.ndarray, starts: np.ndarray, blocks: np.ndarray | None = None,
                 rolls_back: bool = True, unhashed_first: bool = False,
                 drop_last_hit: bool = False, next_token_hash: bool = False,
                 width: int | None = None) -> None:
        super().__init__(capacity_blocks, block_size, n_slots, blocks, rolls_back)
        # freed uncached blocks go to the head of the free queue (vLLM 0.33), not the tail
        self.unhashed_first = int(unhashed_first)
        # a hit loses its last block (vLLM up to 0.20 with an EAGLE-type drafter, whose
        # draft needs the hidden states of the last block's tokens recomputed)
        self.drop_last_hit = int(drop_last_hit)
        # a block is hashed with the token after it (vLLM 0.33 with an EAGLE-type drafter)
        self.next_token_hash = int(next_token_hash)
        if len(keys) and int(keys.min()) < 0:
            raise ValueError("block keys must be >= 0")
        self._keys = np.ascontiguousarray(keys, dtype=np.int64)
        self._starts = np.ascontiguousarray(starts, dtype=np.int64)
        # request rid's block j past its full prompt blocks has key out + rid * 2**40 + j:
        # above every prompt key, distinct per (rid, j) (a request holds < 2**40 blocks)
        out = self._out = int(keys.max()) + 1 if len(keys) else int(starts[-1])
        cap = self.capacity_blocks
        width = cap if width is None else max(1, min(int(width), cap))
        # how its kernel helpers are called: as they are (the reference path), or compiled
        # (steady_kernel.fast) where the replica's engine path may take the kernels
        self.helpers = _as_is
        self.mem = pc_new(cap, self.block_size, n_slots, width, self.unhashed_first,
                          self.drop_last_hit, self.next_token_hash, out)
        # the same memory as Python sees it fastest (an element a Python int, not a numpy
        # scalar): what this pool passes the functions; the compiled walk takes the arrays
        self._m, self._k, self._s = (memoryview(a) for a in (self.mem, self._keys,
                                                               self._starts))
        # a CPU tier below it (``sim.offload.Loads``, which sets these): what it is
        # offered as blocks are cached, and each slot's blocks offered so far
        self.tier = None
        self.offered: np.ndarray | None = None

    @property
    def evicted_blocks(self) -> int:
        """Cached blocks evicted so far."""
        return int(self.mem[pc.EVICTED])

    # -- BlockManager, with the free queue -------------------------------------------
    def grant(self, slots: np.ndarray, held: np.ndarray, extra: np.ndarray) -> None:
        total = int(_sum(extra))
        if total > self.free_blocks:
            raise RuntimeError(f"KV pool overdrawn: need {total} blocks, {self.free_blocks} free")
        if total:
            self.helpers(pc_pop)(self._m, _NO_LOG, total)
        self.blocks[slots] = held + extra
        self.free_blocks -= total

    def take(self, slot: int, n: int) -> None:
        if n > self.free_blocks:
            raise RuntimeError(f"KV pool overdrawn: need {n} blocks, {self.free_blocks} free")
        if n:
            self.helpers(pc_pop)(self._m, _NO_LOG, n)
        self.blocks[slot] += n
        self.free_blocks -= n

    def returned(self, n: int) -> None:
        raise RuntimeError("prefix cache: blocks go back per slot (free_slots), not as a count")

    def rolled_back(self, held: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        if not self.rolls_back:  # rules.kept_blocks keeps them all: spare the arithmetic
            return held
        keep = kept_blocks(tokens, held, self.block_size, self.rolls_back)
        n = int(_sum(held - keep))
        # blocks of rejected draft tokens: uncached
        pc_push_run(self._m, _NO_LOG, n, self.unhashed_first)
        self.free_blocks += n
        return keep

    def release(self, slots: np.ndarray | int) -> None:
        for s in np.atleast_1d(slots).tolist():
            self.free_blocks += int(self.helpers(pc_free_slot)(self._m, _NO_LOG, s,
                                                               int(self.blocks[s])))
            self.blocks[s] = 0
        if self.tier is not None:
            self.offered[slots] = 0

    def free_slots(self, slots: np.ndarray, held: np.ndarray) -> None:
        for s, h in zip(slots.tolist(), held.tolist(), strict=True):
            self.free_blocks += int(self.helpers(pc_free_slot)(self._m, _NO_LOG, s, h))
        if self.tier is not None:
            self.offered[slots] = 0
        if self.free_blocks > self.capacity_blocks:
            raise RuntimeError(f"KV pool over capacity: {self.free_blocks} free of "
                               f"{self.capacity_blocks}")

    # -- prefix caching ---------------------------------------------------------------
    def lookup(self, rid: int, tokens: int) -> tuple[int, int]:
        """(hit blocks, of them unreferenced) for request ``rid`` about to prefill
        ``tokens`` tokens: its longest run of leading cached blocks, prompt blocks then (after
        a preemption) committed output blocks, at most ⌊(tokens - 1) / block_size⌋ (the
        last token is always recomputed), less its last with ``drop_last_hit``."""
        hit, idle = self.helpers(pc_lookup)(self._m, self._k, self._s, rid, tokens)
        return int(hit), int(idle)

    def attach(self, slot: int, rid: int, hit: int) -> None:
        """Give empty ``slot`` (request ``rid``) references to its first ``hit`` prompt
        blocks, found cached by :meth:`lookup` (each key's first cached copy, as vLLM's
        ``get_one_block``); unreferenced ones leave the free queue."""
        attach = self.helpers(pc_attach)
        self.free_blocks -= int(attach(self._m, _NO_LOG, self._k, self._s, slot, rid, hit))
        self.blocks[slot] = hit

    def cache(self, slots: np.ndarray, rids: np.ndarray, computed: np.ndarray,
              known: np.ndarray | None = None) -> None:
        """Cache the full prompt blocks of ``slots`` (requests ``rids``) that ``computed``
        tokens (after the chunk just scheduled) complete, of the ``known`` tokens each
        request has (a block hashed with the token after it waits for that token: a
        prompt's last block for the first output token, as vLLM's block hasher does;
        default: more than they hold)."""
        known = [-1] * len(slots) if known is None else known.tolist()
        for s, rid, c, k in zip(slots.tolist(), rids.tolist(), computed.tolist(), known,
                                strict=True):
            self.helpers(pc_cache)(self._m, _NO_LOG, self._k, self._s, s, rid, c, k)
            if self.tier is not None:  # stored as computed (sim.offload)
                self.tier.offer_slot(s, rid)

    def keep_committed(self, slot: int, rid: int, kv_tokens: int,
                       known: int | None = None) -> None:
        """Before ``slot`` (request ``rid``) is preempted: cache its full blocks of the
        ``kv_tokens`` committed tokens it holds (prompt and accepted output; the draft
        tokens a verify wrote past them were rolled back and are never cached), of the
        ``known`` tokens the request has (default: more than it holds): a block hashed with
        the token after it needs that token too (an output not back yet under async
        scheduling)."""
        keep = self.helpers(pc_keep_committed)
        keep(self._m, _NO_LOG, self._k, self._s, slot, rid, kv_tokens,
             -1 if known is None else known)
        if self.tier is not None:  # stored as computed (sim.offload)
            self.tier.offer_slot(slot, rid)

    def move(self, src: int, dst: int) -> None:
        """Move slot ``src``'s blocks, the copies it references (in block order) and what
        it offered a tier below into empty slot ``dst``; ``src`` is left empty (a CPU-tier
        load's blocks, held apart while they loaded, ``sim.offload``)."""
        m, width = self.mem, int(self.mem[pc.W_])
        done = int(m[m[pc.DONE] + src])
        if int(self.blocks[dst]) or int(m[m[pc.DONE] + dst]):
            raise RuntimeError(f"prefix cache: slot {dst} is not empty")
        a, b = int(m[pc.HELD]) + src * width, int(m[pc.HELD]) + dst * width
        m[b:b + done] = m[a:a + done]
        m[m[pc.DONE] + dst], m[m[pc.DONE] + src] = done, 0
        self.blocks[dst], self.blocks[src] = self.blocks[src], 0
        if self.offered is not None:
            self.offered[dst], self.offered[src] = self.offered[src], 0

    # -- checks -----------------------------------------------------------------------
    def _at(self, node: int, field: int) -> int:
        """A field of ``node``'s record (``sim.kernels.prefix``: PREV ... CHAIN)."""
        return int(self.mem[int(self.mem[pc.NODES]) + pc.STRIDE * node + field])

    def _copies(self) -> dict[int, tuple[int, int]]:
        """{copy: (key, next)} of every cached copy, each identity's in chain order."""
        m = self.mem
        out = {}
        for h in range(int(m[pc.MASK_]) + 1):
            t = int(m[pc.TABLE]) + pc.T_STRIDE * h
            c = int(m[t + pc.T_HEAD])
            ident = (int(m[t + pc.T_KEY]), int(m[t + pc.T_NXT]))
            while c >= 0:
                if c in out:
                    raise RuntimeError(f"prefix cache: copy {c} is in two chains")
                out[c] = ident
                c = self._at(c, pc.CHAIN)
        return out

    def reference_counts(self) -> dict[int, int]:
        """{copy: references} of every cached copy (0: in the free queue)."""
        return {c: self._at(c, pc.REF) for c in self._copies()}

    def cached_blocks(self) -> int:
        """Blocks whose content is cached (referenced or waiting in the free queue)."""
        return int(self.mem[pc.CACHED])

    def cached_keys(self) -> list[int]:
        """The key of each cached block (a key as often as it has copies)."""
        return [key for key, _ in self._copies().values()]

    def references(self, key: int) -> int:
        """The references to ``key``'s cached copies (0: none, or none cached)."""
        return sum(self._at(c, pc.REF) for c, (k, _) in self._copies().items() if k == key)

    def _queue(self) -> list[tuple[int, int]]:
        """The free queue, head first: (node, blocks) (a copy < capacity, else a run)."""
        cap = self.capacity_blocks
        out, node = [], self._at(2 * cap, pc.NEXT)
        while node != 2 * cap:
            if len(out) > 2 * cap:
                raise RuntimeError("prefix cache: the free queue does not end")
            out.append((node, 1 if node < cap else self._at(node, pc.COUNT)))
            node = self._at(node, pc.NEXT)
        return out

    def check(self) -> None:
        """Raise ``RuntimeError`` unless the pool's accounting holds: the free queue holds
        ``free_blocks`` blocks, free + used = capacity (a shared block counted once), every
        reference count is the number of slots holding the block and never negative, a
        cached block is in the free queue iff nothing references it, and the copies of
        each key are those with that key."""
        m, cap = self.mem, self.capacity_blocks
        copies = self._copies()
        if any((self._at(c, pc.KEY), self._at(c, pc.NXT)) != ident
               for c, ident in copies.items()) or len(copies) != int(m[pc.CACHED]) \
                or len(copies) + int(m[pc.N_COPIES]) != cap:
            raise RuntimeError("prefix cache: the copies and their keys disagree")
        queue = self._queue()
        if sum(n for _, n in queue) != self.free_blocks:
            raise RuntimeError(f"free queue holds {sum(n for _, n in queue)} blocks, "
                               f"free_blocks {self.free_blocks}")
        if sum(1 for node, _ in queue if node >= cap) + int(m[pc.N_RUNS]) != cap:
            raise RuntimeError("prefix cache: runs lost")
        queued = {node for node, _ in queue if node < cap}
        counts: dict[int, int] = {}
        own = 0
        width = int(m[pc.W_])
        for s in range(len(self.blocks)):
            done = int(m[m[pc.DONE] + s])
            own += int(self.blocks[s]) - done
            if int(self.blocks[s]) < done:
                raise RuntimeError(f"slot {s} holds {done} cached blocks of "
                                   f"{int(self.blocks[s])}")
            for j in range(done):
                c = int(m[m[pc.HELD] + s * width + j])
                counts[c] = counts.get(c, 0) + 1
        for c in copies:
            r = self._at(c, pc.REF)
            if r < 0 or r != counts.get(c, 0):
                raise RuntimeError(f"block {copies[c][0]} (copy {c}): {r} references, held "
                                   f"by {counts.get(c, 0)}")
            if (r == 0) != (c in queued):
                raise RuntimeError(f"block {copies[c][0]} (copy {c}): {r} references, in "
                                   f"free queue {c in queued}")
        if set(counts) - set(copies) or queued - set(copies):
            raise RuntimeError("a slot or the free queue holds a block that is not cached")
        used = own + sum(1 for c in copies if self._at(c, pc.REF) > 0)
        if used + self.free_blocks != cap:
            raise RuntimeError(f"{used} used + {self.free_blocks} free != {cap} blocks")
