"""SGLang's P/D flow (``disaggregation.flow: sglang``): the decode side allocates first, the
prefill side sends its KV chunk by chunk, and the first token rides along.

What SGLang 0.5.14 does (python/sglang/srt/disaggregation/, PyPI wheel; the router's
``select_pair`` sends a request to a prefill and a decode server at once):

- **The decode server allocates before the prefill starts.** Its ``DecodePreallocQueue``
  takes new requests first come first served at the start of each scheduler loop
  (``process_decode_queue``, before the step is formed; none while a retracted request
  waits to resume) and allocates KV for the prompt of each while a request slot is free
  (``req_to_token_pool``: ``max_running_requests`` plus ``disaggregation_decode_extra_
  slots``, by default twice a batch of at most 32, else none:
  arg_groups/pd_disaggregation_hook.py) and while the prompt's pages plus
  ``num_reserved_decode_tokens`` (512), and the prompt plus its output (clipped to 4,096)
  less the tokens the running requests hold, both fit in the free tokens less the larger
  of 512 per active request (running, allocated or transferred, and those allocated this
  loop) and the most any running request may still need (``pop_preallocated``,
  ``_allocatable_token_budgets``); the first that does not fit stops the queue.
- **The prefill server waits for that** (``PrefillBootstrapQueue.pop_bootstrapped``: a
  request joins its waiting queue once the decode side has sent the KV's destination;
  ``optimistic_prefill_retries`` is 0 by default), then prefills it as a request of one
  output token (``max_new_tokens = 1``).
- **It sends the KV chunk by chunk** (``send_kv_chunk``): after each chunk of a chunked
  prompt the pages it filled (a partial last page waits for the next chunk), and after the
  last chunk the rest, with the first output token. Each send crosses the link as its own
  transfer (latency included), one after another at each replica's NICs; the decode
  server sees the request arrive when the last one lands.
- **The decode server starts from the first token.** At the start of its next loop
  (``pop_transferred``, then ``get_new_prebuilt_batch``) the request joins the running
  batch while a slot is free, its prompt computed and its first token streamed then
  (``process_batch_result_prebuilt``): no token is recomputed, and that moment is its
  TTFT. The step that follows decodes it with the rest (its drafter's state came with the
  KV: SGLang sends EAGLE/MTP hidden states, so ``draft_kv: recompute`` is refused).
- **Under ``--scheduler-recv-interval``** (``sim.recv``) the decode server reads the
  router's new requests into its preallocation queue only at the loops its counter lets
  it, and the loop after a prebuilt batch (weight 1000) reads; the prefill server, all of
  whose batches are prefills, reads every loop.

Departures: the bootstrap handshake (once per pair of servers) takes no time; SGLang
frees a prefilled request's KV on the prefill server once its transfer is done, SpecSim
when the prefill ends (as for vLLM's flow); a request preempted on the decode side
recomputes its prompt there, where SGLang retracts it to a queue of its own; the decode
server's radix cache and HiCache (off by default in P/D) are not modelled.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sim.kernels.rules import blocks_for
from sim.replica import Replica
from sim.slots import COUNTS, EMITTED, RID

# SGLang's decode-side reservations (python/sglang/srt/server_args.py,
# ``num_reserved_decode_tokens``; disaggregation/decode.py, CLIP_MAX_NEW_TOKEN from
# SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, environ.py)
RESERVED_DECODE_TOKENS = 512
CLIP_MAX_NEW_TOKENS = 4096
# extra request slots for requests being received: twice a batch of at most this many
EXTRA_SLOTS_UP_TO = 32


def extra_slots(max_num_seqs: int) -> int:
    """SGLang's default ``disaggregation_decode_extra_slots`` for a decode server of
    ``max_num_seqs`` running requests (arg_groups/pd_disaggregation_hook.py)."""
    return 2 * max_num_seqs if max_num_seqs <= EXTRA_SLOTS_UP_TO else 0


class SglangPrefillReplica(Replica):
    """A prefill replica of SGLang's flow: a request waits until its decode replica has
    allocated for it (``bootstrapped``), and its KV leaves chunk by chunk."""

    def __init__(self, *args, pd, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pd = pd
        self.on_finish = lambda rids: pd.hand_off(self, rids)
        self.sent: dict[int, int] = {}  # request -> prompt tokens whose KV has left
        self.keep_off_fast_paths(pd.reference_only)
        # its batches are all extends (weight 1000), so SGLang's prefill server reads new
        # requests every loop whatever its --scheduler-recv-interval (sim.recv)
        self.recv = None

    def submit(self, rid: int) -> None:
        """Count ``rid`` here and queue it at its decode replica's allocation, not here."""
        self.accept(rid)
        self.pd.pair(self, rid)

    def bootstrapped(self, rid: int) -> None:
        """``rid``'s decode replica has allocated for it: it may be prefilled."""
        self.waiting.append(rid)
        self.wake()

    def finish_iteration(self, batch, start_at, draft_s, verify_s, bound) -> None:
        pre = batch.pre_slots
        rids = self.state[pre, RID].copy() if len(pre) else None
        super().finish_iteration(batch, start_at, draft_s, verify_s, bound)
        if rids is None:
            return
        bs = self.limits.block_size
        for s, rid in zip(pre.tolist(), rids.tolist(), strict=True):
            if self.active[s] and self.rid[s] == rid:  # a chunk, not its last: whole pages
                filled = int(self.prefilled[s])
                end = filled - filled % bs
                if end > self.sent.get(rid, 0):
                    self.pd.send_chunk(rid, self.index, end - self.sent.get(rid, 0))
                    self.sent[rid] = end

    def last_chunk(self, rid: int) -> int:
        """Prompt tokens whose KV leaves with ``rid``'s last chunk."""
        return int(self.table.prompt_tokens[rid]) - self.sent.pop(rid, 0)


class SglangDecodeReplica(Replica):
    """A decode replica of SGLang's flow (the module notes)."""

    def __init__(self, *args, pd, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pd = pd
        self.prealloc: deque[int] = deque()  # requests waiting for an allocation
        self.allocated: dict[int, int] = {}  # request -> its blocks, until it runs here
        self.arrived: deque[int] = deque()  # requests whose KV has landed, in order
        self.slots = self.limits.max_num_seqs + extra_slots(self.limits.max_num_seqs)
        self.keep_off_fast_paths(pd.reference_only)

    def enqueue(self, rid: int) -> None:
        """A new request: queue it for an allocation (taken at the loop's next start; under
        a recv interval once a loop reads it, ``sim.recv``)."""
        self.accept(rid)
        (self.prealloc if self.recv is None else self.recv.pending).append(rid)
        self.wake()

    def poll(self) -> None:
        """The loop's start: read new requests (every loop, or as ``--scheduler-recv-
        interval`` lets it), allocate for queued requests, then run those whose KV has
        landed."""
        if self.recv is not None:  # idle: no running batch and none to prebuild
            self.prealloc.extend(self.recv.receive(self.n_active == 0 and not self.arrived))
        if self.prealloc and not self.waiting:  # (none while a preempted one waits)
            self._allocate()
        if self.arrived and self._run_arrived() and self.recv is not None:
            # SGLang runs them as a PREBUILT batch, a loop of its own that the decode step
            # follows; that loop's weight (1000) makes the next loop read first
            self.recv.ran(prefill=True)
            self.prealloc.extend(self.recv.receive(False))
            if self.prealloc and not self.waiting:
                self._allocate()

    def _allocate(self) -> None:
        """SGLang's ``pop_preallocated`` (the module notes), first come first served."""
        bs = self.limits.block_size
        tab = self.table
        run = self.active.nonzero()[0]
        held = need = 0
        if len(run):
            rids = self.rid[run]
            prompts = tab.prompt_tokens[rids]
            held = int(np.add.reduce(prompts + self.emitted[run]))
            need = int(np.max(np.minimum(tab.output_tokens[rids], CLIP_MAX_NEW_TOKENS)
                              + prompts)) - held
        while self.prealloc and self.n_active + len(self.allocated) < self.slots:
            rid = self.prealloc[0]
            prompt = int(tab.prompt_tokens[rid])
            blocks = int(blocks_for(prompt, bs))
            active = self.n_active + len(self.allocated)
            budget = self.kv.free_blocks * bs - max(RESERVED_DECODE_TOKENS * active, need)
            out = min(int(tab.output_tokens[rid]), CLIP_MAX_NEW_TOKENS)
            if max(blocks * bs + RESERVED_DECODE_TOKENS, prompt + out - held) > budget:
                if not active:
                    raise RuntimeError(
                        f"decode replica {self.index}: request {rid}'s prompt ({prompt} "
                        f"tokens) and SGLang's {RESERVED_DECODE_TOKENS} reserved decode "
                        f"tokens do not fit its {self.kv.capacity_blocks} free KV blocks")
                return
            self.prealloc.popleft()
            self.kv.free_blocks -= blocks
            self.allocated[rid] = blocks
            self.pd.allocated(rid, self)

    def kv_arrived(self, rid: int) -> None:
        self.arrived.append(rid)
        self.wake()

    def _run_arrived(self) -> int:
        """SGLang's prebuilt batch: arrived requests join the running batch while a slot
        is free, their prompt computed and their first token out now; how many joined."""
        now = self.env.now
        done = []
        n_joined = 0
        while self.arrived and self.n_active < self.limits.max_num_seqs:
            rid = self.arrived.popleft()
            n_joined += 1
            inc = self.remote.pop(rid)
            blocks = self.allocated.pop(rid)
            s = self.admit(rid, inc.tokens, inc.tokens)
            self.log.first_scheduled_at[rid] = inc.first_scheduled_at
            self.state[s, COUNTS:] = inc.counters
            self.kv.returned(blocks)
            self.kv.take(s, blocks)
            self.state[s, EMITTED] = 1
            self.log.first_token_at[rid] = now
            self.last_chunk_at[s] = now
            if self.table.output_tokens[rid] <= 1:
                done.append(s)
        if done:
            self.finish(np.array(done, dtype=np.int64), now)
        return n_joined
