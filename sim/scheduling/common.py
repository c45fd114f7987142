"""What the scheduling orders share: the limits, the batch they form, admission from the
waiting queue and the preemption loop."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from sim.kernels import rules
from sim.kernels.rules import blocks_for, first_chunk
from sim.shapes import tree_nodes
from sim.slots import COUNTS

HISTORY = slice(COUNTS + 3, COUNTS + 5)  # per-request accepted and checked tokens so far
NONE = np.zeros(0, dtype=np.int64)

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce


@dataclass(frozen=True)
class SchedulerLimits:
    """A replica's batching limits, as vLLM names them (``max_num_seqs``,
    ``max_num_batched_tokens``, chunked prefill with ``chunk_tokens`` per request per step,
    vLLM's ``long_prefill_token_threshold``), the KV block size, the scheduling order
    (``vllm_v1``, ``decode_first`` or ``prefill_first``, see ``sim.scheduling``) and
    whether the KV pool caches prompt blocks by content (vLLM's ``enable_prefix_caching``,
    ``sim.prefix_cache``)."""

    max_num_seqs: int
    max_batched_tokens: int
    chunked_prefill: bool
    chunk_tokens: int
    block_size: int = 16
    order: str = "vllm_v1"
    prefix_caching: bool = False
    vllm_release: str = "0.33"
    reserve_full_isl: bool | None = None  # None: the release's default
    async_scheduling: bool = False  # vLLM's: step n + 1 scheduled while step n runs
    # a CPU tier below the prefix cache (sim.offload.TierSpec: vLLM's
    # --kv-offloading-size), or None
    offload: object | None = None
    # SGLang's --scheduler-recv-interval: loops between reads of new requests (sim.recv)
    recv_interval: int = 1

    @cached_property
    def rolls_back(self) -> bool:
        """Whether a verify's rejected tail blocks go back to the pool: not in vLLM v1,
        which keeps a request's blocks until it is freed (``rules.kept_blocks``)."""
        return self.order != "vllm_v1"

    def _since(self, release: str) -> bool:
        """Whether the order is vLLM v1's as ``release`` or a later one has it."""
        if self.order != "vllm_v1":
            return False
        return _release(self.vllm_release) >= _release(release)

    @cached_property
    def full_isl(self) -> bool:
        """Whether a waiting request is admitted only when KV for its whole prompt fits
        (vLLM's ``scheduler_reserve_full_isl``, on by default from 0.20; 0.11 checks the
        first chunk)."""
        if self.reserve_full_isl is not None and self.order == "vllm_v1":
            return self.reserve_full_isl
        return self._since("0.20")

    @cached_property
    def new_lookahead(self) -> bool:
        """Whether an admitted request reserves lookahead slots for its drafts, as running
        ones do (0.33; 0.11 to 0.20 give it none)."""
        return self._since("0.33")

    @cached_property
    def lone_uncapped(self) -> bool:
        """Whether ``chunk_tokens`` (``long_prefill_token_threshold``) caps nobody in a step
        that starts with one request running or waiting in all (0.33; before, it always
        capped)."""
        return self._since("0.33")

    @cached_property
    def unhashed_first(self) -> bool:
        """Whether freed blocks with no cache hash go to the head of the free queue, to be
        reused first (0.33; before, to the tail)."""
        return self._since("0.33")

    @cached_property
    def pads_admissions(self) -> bool:
        """Whether an admitted request with one token to compute is padded to a verify of
        1 + ``num_speculative_tokens`` with placeholder drafts (``rules.padding``; 0.33,
        none before)."""
        return self._since("0.33")

    @cached_property
    def drops_eagle_block(self) -> bool:
        """Whether a prefix-cache hit loses its last block under an EAGLE-type drafter (up
        to 0.20, and 0.33 with a KV connector: the CPU tier's; 0.33 otherwise hashes each
        block with the token after it instead)."""
        return self.order == "vllm_v1" and not self.hashes_next_token

    @cached_property
    def hashes_next_token(self) -> bool:
        """Whether an EAGLE-type drafter's prefix-cache blocks are hashed with the token
        after them (0.33's ``num_hash_lookahead_tokens``, which is 0 with a KV connector:
        "KV connectors ... keep the legacy hashes", ``VllmConfig``, vllm/config/vllm.py in
        the 0.33.0 wheel; the CPU tier's ``OffloadingConnector`` is one)."""
        return self._since("0.33") and self.offload is None

    def cap(self, requests: int) -> int:
        """The most tokens one request may take in a step that starts with ``requests``
        running or waiting (``rules.most_tokens``)."""
        return rules.most_tokens(requests, self.chunk_tokens, self.max_batched_tokens,
                                 self.chunked_prefill, self.lone_uncapped)

    def step_budget(self, slots: int) -> tuple[int, int]:
        """(the step's token budget, the input slots each scheduled request takes from it
        beside its tokens) for a drafter that takes ``slots`` (vLLM's
        ``max_num_new_slots_for_drafting``): 0.33 charges them per scheduled request;
        0.20 took them for ``max_num_seqs`` requests off the budget up front; 0.11 had
        none."""
        if not slots or not self._since("0.20"):
            return self.max_batched_tokens, 0
        if self._since("0.33"):
            return self.max_batched_tokens, slots
        return self.max_batched_tokens - slots * self.max_num_seqs, 0

    @cached_property
    def v1(self) -> np.ndarray:
        """int64 [rules.N_V1]: which of vLLM v1's rules apply, as the kernels take them."""
        out = np.zeros(rules.N_V1, dtype=np.int64)
        out[rules.ROLLS_BACK] = self.rolls_back
        out[rules.FULL_ISL] = self.full_isl
        out[rules.NEW_LOOKAHEAD] = self.new_lookahead
        out[rules.LONE_UNCAPPED] = self.lone_uncapped
        return out  # (DRAFT_SLOTS, PAD_TOKENS: the replica's, with its drafter)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


@dataclass(frozen=True)
class Batch:
    """One iteration's work.

    row int64 [m]: the draft shape of every decoding sequence (or int64 [D, m]: one per
    sequence, from a per-sequence policy or a truncated verify); dec_slots, dec_context
    int64 [D]: the decoding sequences and their cached tokens; pre_slots, pre_context,
    chunks int64 [P]: the prefilling sequences, their cached tokens and their chunks;
    pads int64 [P] (or empty: none): the placeholder draft tokens each takes beside its
    chunk (``rules.padding``: priced in the pass, rejected). ``preempted``: whether forming
    it preempted a sequence. Under a grammar (``sim.grammar``): ``drafted`` int64 [D, m],
    the shapes the draft drafted where the engine dropped drafts the grammar forbids from
    ``row`` (the draft is priced at them), and ``valid`` int64 [D], the leading drafts the
    grammar allows where the engine verifies and rejects the others; None: neither.
    """

    row: np.ndarray
    dec_slots: np.ndarray
    dec_context: np.ndarray
    pre_slots: np.ndarray
    pre_context: np.ndarray
    chunks: np.ndarray
    preempted: bool = False
    pads: np.ndarray = field(default_factory=lambda: NONE)
    drafted: np.ndarray | None = None
    valid: np.ndarray | None = None

    @property
    def verify_tokens(self) -> int:
        """Tokens the decoding sequences put into the target pass (root + nodes each), and
        the placeholder drafts of padded admissions."""
        pads = int(_sum(self.pads)) if len(self.pads) else 0
        if self.row.ndim == 1:
            return len(self.dec_slots) * (1 + tree_nodes(self.row)) + pads
        return int(_sum(1 + np.cumprod(self.row, axis=1).sum(axis=1))) + pads

    @property
    def priced_chunks(self) -> np.ndarray:
        """int64 [P]: the tokens each prefilling sequence puts into the target pass (its
        chunk and its placeholder drafts)."""
        return self.chunks + self.pads if len(self.pads) else self.chunks

    @property
    def empty(self) -> bool:
        """True when nothing runs."""
        return len(self.dec_slots) == 0 and len(self.pre_slots) == 0


def admit_waiting(r, lim: SchedulerLimits, budget: int, reserved: int | None = None,
                  output_clip: int = 0, cap: int | None = None, pad: int = 0,
                  scheduled: int = 0, prefilling: int = 0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Admit waiting requests first come first served while a slot (``max_num_seqs``), the
    token budget and free blocks for the first chunk last; returns (slots, chunks, cached
    tokens, placeholder drafts) int64. With ``reserved`` (blocks already spoken for) a
    request is admitted only while the free blocks hold, beside those, its whole prompt
    and up to ``output_clip`` of the output it has left, as SGLang's ``PrefillAdder``
    admits (``rem_total_tokens``), so a prompt once started can finish.

    In vLLM v1's order from 0.20 (``lim.full_isl``) a request is admitted only while the
    free blocks hold its whole prompt (``scheduler_reserve_full_isl``; only its first chunk
    is allocated), and from 0.33 (``lim.new_lookahead``) its first chunk comes with
    ``r.lookahead`` slots for its drafts, as a running request's tokens do (before, a new
    request reserved none); without chunked prefill its whole prompt must fit; with it, its
    first chunk is at most ``cap`` (default ``lim.chunk_tokens``). With
    prefix caching (``r.prefix``) its leading cached blocks are looked up first (vLLM's
    ``get_computed_blocks``): they skip prefill, and those no request references must come
    out of the free blocks too; then the full prompt blocks of its first chunk are cached at
    once, so the next request admitted in this step can hit them. With ``pad`` (vLLM 0.33
    with speculation) a request with one token to compute takes ``rules.padding``'s
    placeholder drafts beside it, in the budget and the blocks; one that cannot stops the
    admissions (``scheduled``: the running requests scheduled in the step, ``prefilling``
    those of them that continue their prefill). On a P/D decode replica
    (``sim.disagg.DecodeReplica``) a waiting request whose prompt KV is on a prefill
    replica holds blocks for it and starts loading it instead (``start_load``; taking no
    slot and no budget), and those whose KV has arrived are admitted first, in the order
    they started, with all but their last prompt token computed (vLLM's
    ``kv_holding_waiting``). With a CPU tier below the prefix cache (``r.offload``,
    ``sim.offload``) a waiting request whose blocks past its GPU hit are in the tier holds
    blocks for both and starts loading them the same way (``start_load``), and is admitted
    first once loaded, its prefill starting after them; one whose CPU hit another request
    is loading is passed over this step."""
    new_slots, new_chunks, new_cached, new_pads = [], [], [], []
    cache = r.prefix
    bs = lim.block_size
    ahead = r.lookahead if lim.new_lookahead else 0
    cap = lim.chunk_tokens if cap is None else cap
    slots = r.draft_slots
    # a P/D decode replica (sim.disagg.DecodeReplica) first admits, in order, the requests
    # holding blocks whose KV has arrived (vLLM drains kv_holding_waiting first)
    ready = deque(rid for rid in r.holding if rid in r.loaded) if r.loaded else None
    tier = r.offload
    skipped = []  # waiting requests passed over this step (a CPU hit still loading)
    while (ready or r.waiting) and r.n_active < lim.max_num_seqs and budget > slots:
        queue = ready or r.waiting
        rid = queue[0]
        if queue is r.waiting and r.remote and rid in r.remote:
            # its prompt's KV is on a prefill replica: hold blocks for it while it loads
            if not r.start_load(rid):
                break
            r.waiting.popleft()
            continue
        target = r.prefill_target_of(rid)
        hit = idle = held = 0
        if queue is ready:  # its held blocks back to the pool, to be taken as its own
            cached = r.release_hold(rid)
            held = r.held_blocks(rid)  # (a CPU tier's: they stay its own)
        else:
            if cache is not None:
                hit, idle = cache.lookup(rid, target)
            if tier is not None:  # blocks past its GPU hit in the CPU tier: load them
                more, busy = tier.lookup(rid, target, hit)
                if busy:  # another request loads some of them: it waits (vLLM)
                    skipped.append(r.waiting.popleft())
                    continue
                if more:
                    if not r.start_load(rid, hit, idle, more):
                        break
                    r.waiting.popleft()
                    continue
            cached = hit * bs
        todo = target - cached
        chunk = first_chunk(todo, cap, budget - slots, lim.chunked_prefill)
        pads = rules.padding(todo, cached, pad, scheduled, prefilling) if pad else 0
        need = rules.admission(target, cached, chunk, pads, ahead, hit + held, idle,
                               r.kv.free_blocks, budget - slots, lim.full_isl, bs)
        if need < 0:
            if queue is ready:
                r.hold_again(rid)
            break
        if reserved is not None:
            left = int(r.table.output_tokens[rid]) - (target - int(r.table.prompt_tokens[rid]))
            whole = int(blocks_for(target + min(max(left, 0), output_clip), bs)) - hit - held
            if whole + idle + reserved > r.kv.free_blocks:
                if queue is ready:
                    r.hold_again(rid)
                break
            reserved += whole - need
        queue.popleft()
        if queue is ready:
            r.unhold(rid)
        slot = r.admit(rid, target, cached)
        if held:
            r.take_hold(rid, slot)
        if hit:
            cache.attach(slot, rid, hit)
        r.kv.take(slot, need)
        if cache is not None:
            cache.cache(np.array([slot]), np.array([rid]), np.array([cached + chunk]),
                        np.array([target]))
        new_slots.append(slot)
        new_chunks.append(chunk)
        new_cached.append(cached)
        new_pads.append(pads)
        budget -= chunk + pads + slots
    if skipped:  # back at the front, in their order (vLLM's step_skipped_waiting)
        r.waiting.extendleft(reversed(skipped))
    if not new_slots:
        return NONE, NONE, NONE, NONE
    return (np.array(new_slots, dtype=np.int64), np.array(new_chunks, dtype=np.int64),
            np.array(new_cached, dtype=np.int64), np.array(new_pads, dtype=np.int64))


def budgeted_chunks(remaining: np.ndarray, limits: SchedulerLimits, budget: int) -> np.ndarray:
    """int64 [P]: each prefilling sequence's chunk under the token budget, in priority order."""
    want = np.minimum(remaining, limits.chunk_tokens) if limits.chunked_prefill else remaining
    before = want.cumsum() - want  # tokens taken by higher-priority chunks
    if limits.chunked_prefill:  # a partial chunk fills the budget
        return np.minimum(np.maximum(budget - before, 0), want)
    return np.where(before + want <= budget, want, 0)


def cache_prefills(r, pre: np.ndarray, context: np.ndarray, chunks: np.ndarray) -> None:
    """With prefix caching, cache the full prompt blocks that the running requests' prefill
    chunks just scheduled complete (before admissions: vLLM's ``allocate_slots`` caches
    them as it schedules, so a waiting request admitted in the same step hits them)."""
    if r.prefix is not None and len(pre):
        rids = r.rid[pre]
        r.prefix.cache(pre, rids, context + chunks, r.table.prompt_tokens[rids] + r.emitted[pre])


def preempt_until_fits(r, order: np.ndarray, slots: np.ndarray, extra: np.ndarray
                       ) -> np.ndarray:
    """vLLM's preemption loop over the running slots ``order`` (front = highest priority);
    returns the slots of ``slots`` that got their blocks, in ``order``.

    Walk ``order``; while the current scheduled sequence cannot get the ``extra`` blocks it
    must add (``rules.grant``), preempt the last one still running (possibly itself).
    Running sequences not being scheduled (unscheduled, or in flight in a pipeline) need no
    new blocks but can be victims, as in vLLM, where in-flight requests stay in
    ``running``: so a sequence never preempts one ahead of it, and the front one always
    makes progress. A sequence preempts itself only when it is the last one left, so
    nothing behind it is scheduled.
    """
    want = dict(zip(slots.tolist(), extra.tolist(), strict=True))
    alive = order.tolist()
    kv = r.kv
    free = kv.free_blocks
    i = 0
    granted = []
    while i < len(alive):
        s = alive[i]
        if s not in want:
            i += 1
            continue
        need = want[s]  # (a victim's release leaves the others' blocks as they are)
        while need > free:
            victim = alive.pop()
            before = kv.free_blocks
            r.preempt(victim)
            free += kv.free_blocks - before  # (blocks shared with others stay in use)
            if victim == s:
                break
        else:
            free -= need
            granted.append(s)
            i += 1
    return np.array(granted, dtype=np.int64)


def truncate_rows(rows: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """int64 [D, m]: each shape cut to at most ``nodes[d]`` draft nodes, whole levels only
    (a chain keeps its first ``nodes`` guesses; a tree its levels that fit entirely)."""
    fits = np.cumsum(np.cumprod(rows, axis=1), axis=1) <= nodes[:, None]  # [D, m]
    return np.where(fits, rows, 0)
