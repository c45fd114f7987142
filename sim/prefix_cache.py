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

The free queue is an ``OrderedDict`` whose entries are either one cached block (its copy
id, >= 0) or a run of uncached blocks (a negative id and a count): runs freed one after the
other merge, so the decode path (blocks taken and rolled back every iteration) costs a dict
operation or two per iteration, and the per-block work is at admission, at the scheduling of
prompt chunks and at release. ``free_blocks`` counts every block in the queue (vLLM's
``get_num_free_blocks``: evictable cached blocks are free), so the schedulers are unchanged.

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

from collections import OrderedDict

import numpy as np

from sim.kernels.rules import kept_blocks
from sim.kv import BlockManager

_sum = np.add.reduce


class PrefixCachingBlockManager(BlockManager):
    """A KV pool with hash-addressed (here: content-keyed), reference-counted prompt blocks
    and LRU eviction of unreferenced ones (see the module docstring).

    ``keys``, ``starts``: the prompts' block keys (``RequestTable.block_keys`` and
    ``block_starts``): request ``rid``'s full prompt blocks are ``keys[starts[rid]:
    starts[rid + 1]]``. ``blocks[slot]`` counts every block a slot's sequence uses, shared
    ones included; ``free_blocks`` the blocks in the free queue (free or evictable).
    """

    def __init__(self, capacity_blocks: int, block_size: int, n_slots: int,
                 keys: np.ndarray, starts: np.ndarray, blocks: np.ndarray | None = None,
                 rolls_back: bool = True, unhashed_first: bool = False,
                 drop_last_hit: bool = False, next_token_hash: bool = False) -> None:
        super().__init__(capacity_blocks, block_size, n_slots, blocks, rolls_back)
        # freed uncached blocks go to the head of the free queue (vLLM 0.33), not the tail
        self.unhashed_first = unhashed_first
        # a hit loses its last block (vLLM up to 0.20 with an EAGLE-type drafter, whose
        # draft needs the hidden states of the last block's tokens recomputed)
        self.drop_last_hit = drop_last_hit
        # a block is hashed with the token after it (vLLM 0.33 with an EAGLE-type drafter)
        self.next_token_hash = next_token_hash
        if len(keys) and int(keys.min()) < 0:
            raise ValueError("block keys must be >= 0")
        self._keys, self._starts = keys, starts
        # a cached block is a copy, id >= 0, of a key: copy -> references (0: in the free
        # queue), copy -> its key, key -> its first cached copy (the one a lookup finds)
        # and, for the few keys with more, key -> the others, the first cached first
        self._ref: dict[int, int] = {}
        self._key: dict[int, int] = {}
        self._first: dict[int, int] = {}
        self._more: dict[int, list[int]] = {}
        self._next_copy = 0
        # the free queue, least recently freed first: id >= 0 -> 1 (a cached copy),
        # id < 0 -> a run of that many uncached blocks
        self._queue: OrderedDict[int, int] = OrderedDict({-1: self.capacity_blocks})
        self._next_run = -2
        self._held: list[list[int]] = [[] for _ in range(n_slots)]  # cached copies, in order
        self._done = [0] * n_slots  # leading blocks each slot has found, cached or computed
        # request rid's block j past its full prompt blocks has key _out + rid * 2**40 + j:
        # above every prompt key, distinct per (rid, j) (a request holds < 2**40 blocks)
        self._out = int(keys.max()) + 1 if len(keys) else 0
        self.evicted_blocks = 0  # cached blocks evicted so far

    # -- the free queue ---------------------------------------------------------------
    def _pop(self, n: int) -> None:
        """Take ``n`` blocks off the head of the free queue, evicting cached ones."""
        q = self._queue
        while n:
            c, count = q.popitem(last=False)
            if c >= 0:  # a cached copy: its content is forgotten
                del self._ref[c]
                key = self._key.pop(c)
                more = self._more.get(key)
                if more is None:
                    del self._first[key]
                else:
                    if self._first[key] == c:
                        self._first[key] = more.pop(0)
                    else:
                        more.remove(c)
                    if not more:
                        del self._more[key]
                self.evicted_blocks += 1
                n -= 1
            elif count > n:
                q[c] = count - n
                q.move_to_end(c, last=False)
                n = 0
            else:
                n -= count

    def _push_run(self, n: int, head: bool = False) -> None:
        """Put ``n`` uncached blocks at the tail, or the ``head``, of the free queue (merged
        with a run already there)."""
        if n <= 0:
            return
        q = self._queue
        end = (next(iter(q)) if head else next(reversed(q))) if q else 0
        if end < 0:
            q[end] += n
        else:
            q[self._next_run] = n
            if head:
                q.move_to_end(self._next_run, last=False)
            self._next_run -= 1

    def _free_slot(self, s: int, held: int) -> int:
        """Drop slot ``s``'s references to its ``held`` blocks; returns the blocks freed."""
        copies = self._held[s]
        own = held - len(copies)
        self._push_run(own, self.unhashed_first)
        freed = own
        ref, q = self._ref, self._queue
        for c in reversed(copies):  # vLLM frees a request's blocks last first
            r = ref[c] - 1
            if r < 0:
                raise RuntimeError(f"prefix cache: block {self._key[c]} has negative "
                                   "references")
            ref[c] = r
            if r == 0:
                q[c] = 1
                freed += 1
        self._held[s] = []
        self._done[s] = 0
        return freed

    # -- BlockManager, with the free queue -------------------------------------------
    def grant(self, slots: np.ndarray, held: np.ndarray, extra: np.ndarray) -> None:
        total = int(_sum(extra))
        if total > self.free_blocks:
            raise RuntimeError(f"KV pool overdrawn: need {total} blocks, {self.free_blocks} free")
        self._pop(total)
        self.blocks[slots] = held + extra
        self.free_blocks -= total

    def take(self, slot: int, n: int) -> None:
        if n > self.free_blocks:
            raise RuntimeError(f"KV pool overdrawn: need {n} blocks, {self.free_blocks} free")
        self._pop(n)
        self.blocks[slot] += n
        self.free_blocks -= n

    def returned(self, n: int) -> None:
        raise RuntimeError("prefix cache: blocks go back per slot (free_slots), not as a count")

    def rolled_back(self, held: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        if not self.rolls_back:  # rules.kept_blocks keeps them all: spare the arithmetic
            return held
        keep = kept_blocks(tokens, held, self.block_size, self.rolls_back)
        n = int(_sum(held - keep))
        self._push_run(n, self.unhashed_first)  # blocks of rejected draft tokens: uncached
        self.free_blocks += n
        return keep

    def release(self, slots: np.ndarray | int) -> None:
        for s in np.atleast_1d(slots).tolist():
            self.free_blocks += self._free_slot(s, int(self.blocks[s]))
            self.blocks[s] = 0

    def free_slots(self, slots: np.ndarray, held: np.ndarray) -> None:
        for s, h in zip(slots.tolist(), held.tolist(), strict=True):
            self.free_blocks += self._free_slot(s, h)
        if self.free_blocks > self.capacity_blocks:
            raise RuntimeError(f"KV pool over capacity: {self.free_blocks} free of "
                               f"{self.capacity_blocks}")

    # -- prefix caching ---------------------------------------------------------------
    def lookup(self, rid: int, tokens: int) -> tuple[int, int]:
        """(hit blocks, of them unreferenced) for request ``rid`` about to prefill
        ``tokens`` tokens: its longest run of leading cached blocks, prompt blocks then (after
        a preemption) committed output blocks, at most ⌊(tokens - 1) / block_size⌋ (the
        last token is always recomputed), less its last with ``drop_last_hit``."""
        cap = (tokens - 1) // self.block_size
        ref, copies = self._ref, self._first
        found = []  # the references of its leading cached blocks (each key's first copy)
        for key in self._keys_of(rid, 0, cap):
            c = copies.get(key)
            if c is None:
                break
            found.append(ref[c])
        if self.drop_last_hit and found:
            found.pop()
        return len(found), sum(r == 0 for r in found)

    def _keys_of(self, rid: int, lo: int, hi: int) -> list:
        """The keys of request ``rid``'s blocks ``lo`` to ``hi`` - 1 (prompt, then output);
        with ``next_token_hash`` each with the token after the block: (key, the next prompt
        block's key, or -(rid + 1) for the request's own tail or output)."""
        a = int(self._starts[rid])
        n_prompt = int(self._starts[rid + 1]) - a
        keys = self._keys[a + lo:a + min(hi, n_prompt)].tolist()
        if hi > n_prompt:
            base = self._out + (rid << 40)
            keys += range(base + max(lo, n_prompt), base + hi)
        if not self.next_token_hash:
            return keys
        nxt = self._keys[a + lo + 1:a + min(hi, n_prompt - 1) + 1].tolist()  # prompt's next
        own = -(rid + 1)
        return [(k, nxt[i] if i < len(nxt) else own) for i, k in enumerate(keys)]

    def attach(self, slot: int, rid: int, hit: int) -> None:
        """Give empty ``slot`` (request ``rid``) references to its first ``hit`` prompt
        blocks, found cached by :meth:`lookup` (each key's first cached copy, as vLLM's
        ``get_one_block``); unreferenced ones leave the free queue."""
        first = self._first
        held = [first[key] for key in self._keys_of(rid, 0, hit)]
        ref, q = self._ref, self._queue
        for c in held:
            r = ref[c]
            if r == 0:
                del q[c]
                self.free_blocks -= 1
            ref[c] = r + 1
        self._held[slot] = held
        self._done[slot] = hit
        self.blocks[slot] = hit

    def cache(self, slots: np.ndarray, rids: np.ndarray, computed: np.ndarray,
              known: np.ndarray | None = None) -> None:
        """Cache the full prompt blocks of ``slots`` (requests ``rids``) that ``computed``
        tokens (after the chunk just scheduled) complete, of the ``known`` tokens each
        request has (a block hashed with the token after it waits for that token: a
        prompt's last block for the first output token, as vLLM's block hasher does;
        default: more than they hold)."""
        if self.next_token_hash and known is not None:
            computed = np.minimum(computed, known - 1)
        for s, rid, c in zip(slots.tolist(), rids.tolist(), computed.tolist(), strict=True):
            n_prompt = int(self._starts[rid + 1] - self._starts[rid])
            self._cache_upto(s, rid, min(c // self.block_size, n_prompt))

    def keep_committed(self, slot: int, rid: int, kv_tokens: int,
                       known: int | None = None) -> None:
        """Before ``slot`` (request ``rid``) is preempted: cache its full blocks of the
        ``kv_tokens`` committed tokens it holds (prompt and accepted output; the draft
        tokens a verify wrote past them were rolled back and are never cached), of the
        ``known`` tokens the request has (default: more than it holds): a block hashed with
        the token after it needs that token too (an output not back yet under async
        scheduling)."""
        if known is not None:
            kv_tokens = min(kv_tokens, known - self.next_token_hash)
        self._cache_upto(slot, rid, kv_tokens // self.block_size)

    def _cache_upto(self, s: int, rid: int, upto: int) -> None:
        """Cache slot ``s``'s leading ``upto`` blocks, each a copy of its own (a key another
        request has cached meanwhile gets a second copy)."""
        done = self._done[s]
        if upto <= done:
            return
        ref, held, key_of, first = self._ref, self._held[s], self._key, self._first
        c = self._next_copy
        for key in self._keys_of(rid, done, upto):
            ref[c] = 1
            key_of[c] = key
            if key in first:
                self._more.setdefault(key, []).append(c)
            else:
                first[key] = c
            held.append(c)
            c += 1
        self._next_copy = c
        self._done[s] = upto

    # -- checks -----------------------------------------------------------------------
    def cached_blocks(self) -> int:
        """Blocks whose content is cached (referenced or waiting in the free queue)."""
        return len(self._ref)

    def cached_keys(self) -> list[int]:
        """The key of each cached block (a key as often as it has copies)."""
        return [_block_key(k) for k in self._key.values()]

    def references(self, key: int) -> int:
        """The references to ``key``'s cached copies (0: none, or none cached)."""
        return sum(self._ref[c] for c, k in self._key.items() if _block_key(k) == key)

    def _copies_of(self, key: int) -> list[int]:
        """``key``'s cached copies, the first cached first."""
        first = self._first.get(key)
        return [] if first is None else [first, *self._more.get(key, ())]

    def check(self) -> None:
        """Raise ``RuntimeError`` unless the pool's accounting holds: the free queue holds
        ``free_blocks`` blocks, free + used = capacity (a shared block counted once), every
        reference count is the number of slots holding the block and never negative, a
        cached block is in the free queue iff nothing references it, and the copies of
        each key are those with that key."""
        q, ref = self._queue, self._ref
        copies = {k: self._copies_of(k) for k in self._first}
        if set(self._more) - set(self._first) \
                or sorted(c for cs in copies.values() for c in cs) != sorted(self._key) \
                or any(self._key[c] != k for k, cs in copies.items() for c in cs) \
                or set(self._key) != set(ref):
            raise RuntimeError("prefix cache: the copies and their keys disagree")
        if sum(q.values()) != self.free_blocks:
            raise RuntimeError(f"free queue holds {sum(q.values())} blocks, free_blocks "
                               f"{self.free_blocks}")
        counts: dict[int, int] = {}
        own = 0
        for s, held in enumerate(self._held):
            own += int(self.blocks[s]) - len(held)
            if int(self.blocks[s]) < len(held):
                raise RuntimeError(f"slot {s} holds {len(held)} cached blocks of "
                                   f"{int(self.blocks[s])}")
            for c in held:
                counts[c] = counts.get(c, 0) + 1
        for c, r in ref.items():
            if r < 0 or r != counts.get(c, 0):
                raise RuntimeError(f"block {self._key[c]} (copy {c}): {r} references, held "
                                   f"by {counts.get(c, 0)}")
            if (r == 0) != (c in q):
                raise RuntimeError(f"block {self._key[c]} (copy {c}): {r} references, in "
                                   f"free queue {c in q}")
        if set(counts) - set(ref):
            raise RuntimeError("a slot holds a block that is not cached")
        used = own + sum(1 for r in ref.values() if r > 0)
        if used + self.free_blocks != self.capacity_blocks:
            raise RuntimeError(f"{used} used + {self.free_blocks} free != "
                               f"{self.capacity_blocks} blocks")


def _block_key(ident) -> int:
    """The block key of a cached copy's identity (``_keys_of``: a key, or with
    ``next_token_hash`` a (key, next) pair)."""
    return ident[0] if isinstance(ident, tuple) else ident
