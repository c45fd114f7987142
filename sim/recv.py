"""SGLang's ``--scheduler-recv-interval``: while busy, its scheduler reads new requests
only every N-th loop (``scheduler.recv_interval``; 1 = every loop, nothing held back).

What SGLang 0.5.8.post1 and 0.5.14 do (PyPI wheels, identical here:
python/sglang/srt/managers/scheduler_recv_skipper.py, ``SchedulerRecvSkipper``; its weights
in python/sglang/srt/environ.py; the loops in managers/scheduler.py,
``event_loop_normal`` / ``event_loop_overlap``, and disaggregation/decode.py,
``event_loop_*_disagg_decode``):

- Every loop starts with ``recv_requests``. With an interval N > 1 it first adds the weight
  of the *last* loop's batch to a counter (``last_batch.forward_mode``): 1 for a decode or
  a speculative verify (``DECODE``, ``TARGET_VERIFY``), 1 for no batch (an idle loop), 1000
  for anything else (an extend or mixed prefill batch, a P/D decode server's ``PREBUILT``
  batch of requests whose KV has arrived). Only when the counter reaches N does it read the
  socket, and the counter goes back to 0; otherwise the loop reads nothing and new requests
  stay in the socket. The counter starts at 0; nothing else resets it.
- So a busy server of decode steps reads every N steps, and the loop after a prefill reads
  at once. An idle server spins loops without a batch, each counting 1, so it reads within
  N loops that do no GPU work: SpecSim prices no such loop, so an idle replica reads at
  once (``receive``'s ``idle``).
- SGLang refuses the knob with data-parallel attention (the skipper asserts it off).
- On a P/D decode server the socket brings the router's new requests, which join the
  preallocation queue only once read (``process_input_requests``); the preallocation and
  the transfer polls (``process_decode_queue``) run every loop regardless. A prefill
  server's batches are all extends, so it reads every loop whatever N (SpecSim holds
  nothing back there: ``sim.pd_sglang``).

SpecSim's replica loop is SGLang's without the overlap: the weight of the step it formed
last (``ran``) is counted at the next loop's start (``Replica.poll``).
"""

from __future__ import annotations

from collections import deque

# SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE, _TARGET_VERIFY and _NONE; _DEFAULT, the
# weight of every other forward mode (extend, mixed, prebuilt): environ.py, SGLang 0.5.8.post1
DECODE_WEIGHT = 1
OTHER_WEIGHT = 1000


class RecvInterval:
    """One replica's held-back requests and SGLang's recv counter (module notes)."""

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.counter = 0
        self.pending: deque[int] = deque()  # submitted, not yet read by the scheduler
        self.last: int | None = None  # the weight of the step formed since the last loop

    def ran(self, prefill: bool) -> None:
        """The loop formed a step: one with a prefill (an extend, or SGLang's prebuilt
        batch) or a decode-only step."""
        self.last = OTHER_WEIGHT if prefill else DECODE_WEIGHT

    def receive(self, idle: bool) -> list[int]:
        """A loop starts: the requests SGLang's ``recv_requests`` reads now, oldest first
        (none where the counter is short of the interval). ``idle``: the replica has
        nothing to run, so SGLang would spin idle loops until it reads."""
        weight, self.last = self.last, None
        if weight is not None and not idle:
            self.counter += weight
            if self.counter < self.interval:
                return []
        # a step's weight reached the interval, or no step ran (idle loops, each 1)
        self.counter = 0
        out = list(self.pending)
        self.pending.clear()
        return out
