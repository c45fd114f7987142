"""Pipeline-parallel replicas: stages on different GPUs, several micro-batches in flight.

A replica whose target is split into ``pp`` stages sends each micro-batch through the
stages: each computes its share of the pass, then sends the activations over the link to
the next stage (each inter-stage link carries one transfer at a time, and the stage goes on
with its next micro-batch meanwhile); when the micro-batch leaves the last stage the
replica applies it. Every stage and link serves first come first served, so a
micro-batch's times through them are fixed when it is dispatched (a tandem queue:
``sim.kernels.pipeline.pipeline_pass``, the one rule both engine paths use); the replica
keeps when each stage and link comes free and waits for the micro-batch's end alone, one
event at that exact time. The replica's scheduler keeps up to ``pp`` micro-batches in
flight, as Orca and vLLM do (vLLM's "virtual engines"): a sequence in flight is not
scheduled again until its verify has left the last stage, so its next iteration always
sees its accepted tokens.

A sequence in flight is still running, so it can be preempted (as in vLLM v1, where
in-flight requests stay in ``running``): its blocks are freed at once and what its
micro-batch computed is discarded when the micro-batch comes back (a per-slot epoch tells a
returning micro-batch which of its slots still hold the tenant it was built for). vLLM
instead appends the tokens such a step sampled to the preempted request; SpecSim recomputes
them, which only costs time in a rare case.

The draft (co-located) runs at the start of a micro-batch, on the first stage's GPU, before
the target's first stage: its passes are added to stage 0's time. Per-stage times and the
hop time come from the cost model's ``pass_cost`` (``stage_s``, ``hop_s``).

Until December 2026 each stage was a SimPy process with an inbox and each link a
``Resource``: the same times to the last bit, but the end of a micro-batch was an event
made when its last stage started rather than when it was dispatched, so where it falls at
the very instant of another event (an arrival, another replica's step) the two may now run
in the other order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sim.kernels.pipeline import pipeline_pass
from sim.replica import Replica
from sim.router import event_at
from sim.scheduling import Batch
from sim.step import draft_sync


@dataclass(frozen=True)
class MicroBatch:
    """A batch in flight through the stages, with its prices."""

    batch: Batch
    epochs: np.ndarray  # int64 [D + P]: the slots' epochs at dispatch (decoders, then prefills)
    start_at: float
    draft_s: float
    verify_s: float
    stage_s: tuple[float, ...]
    hop_s: float
    bound: str


class PipelinedReplica(Replica):
    """A replica whose target runs as ``stages`` pipeline stages (see module docstring)."""

    def __init__(self, *args, stages: int, **kwargs) -> None:
        self.stages = int(stages)
        super().__init__(*args, **kwargs)
        self.busy = np.zeros(self.limits.max_num_seqs, dtype=bool)
        self.epoch = np.zeros(self.limits.max_num_seqs, dtype=np.int64)  # + 1 per preemption
        self.in_flight = 0
        # when stage k (at 2k) and the link after it (2k + 1) come free (pipeline_pass)
        self.free_at = [0.0] * (2 * self.stages - 1)

    def schedulable(self) -> np.ndarray:
        """Running sequences not already in flight."""
        return self.active & ~self.busy

    def preempt(self, s: int) -> None:
        """Preempt slot ``s``; if it is in flight, its micro-batch's result will be dropped."""
        if self.busy[s]:
            self.busy[s] = False
            self.epoch[s] += 1
        super().preempt(s)

    def _has_work(self) -> bool:
        return bool(self.waiting) or bool(self.schedulable().any())

    def run(self):
        """The scheduler: dispatch micro-batches while fewer than ``stages`` are in flight."""
        env = self.env
        while True:
            if self.in_flight < self.stages and self._has_work():
                batch = self.form_batch()
                if not batch.empty:
                    self._dispatch(batch)
                    continue
                if batch.preempted:  # nothing admitted in the step that preempted: again
                    self.check_progress(0)
                    continue
            self._wake = env.event()
            yield self._wake
            self._wake = None

    def _dispatch(self, batch: Batch) -> None:
        dec, pre = batch.dec_slots, batch.pre_slots
        sync, _ = draft_sync(self, batch)
        draft_s, cost = self.pricer.price_stages(
            batch.row, batch.dec_context, batch.pre_context, batch.priced_chunks, sync=sync
        )
        if self.cpu_s_per_seq and self.policy.uses_draft:  # CPU drafting, as Replica.price
            draft_s += self.cpu_s_per_seq * len(dec)
        self.busy[dec] = True
        self.busy[pre] = True
        self.in_flight += 1
        epochs = self.epoch[np.concatenate((dec, pre))]
        now = self.env.now
        mb = MicroBatch(batch, epochs, now, draft_s, float(cost.seconds), tuple(cost.stage_s),
                        float(cost.hop_s), str(cost.bound))
        end = pipeline_pass(self.free_at, now, mb.draft_s, mb.stage_s, mb.hop_s)
        event_at(self.env, end).callbacks.append(lambda _: self.complete(mb))

    def complete(self, mb: MicroBatch) -> None:
        """The last stage finished ``mb``: apply it, free its sequences, wake the scheduler."""
        batch = _still_held(mb, self.epoch)
        self.finish_iteration(batch, mb.start_at, mb.draft_s, mb.verify_s, mb.bound)
        self.busy[batch.dec_slots] = False
        self.busy[batch.pre_slots] = False
        self.in_flight -= 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()


def _still_held(mb: MicroBatch, epoch: np.ndarray) -> Batch:
    """``mb``'s batch without the slots preempted while it was in flight."""
    b = mb.batch
    n_dec = len(b.dec_slots)
    ok = epoch[np.concatenate((b.dec_slots, b.pre_slots))] == mb.epochs
    if ok.all():
        return b
    d, p = ok[:n_dec], ok[n_dec:]
    return replace(b, row=b.row[d] if b.row.ndim == 2 else b.row, dec_slots=b.dec_slots[d],
                   dec_context=b.dec_context[d], pre_slots=b.pre_slots[p],
                   pre_context=b.pre_context[p], chunks=b.chunks[p],
                   pads=b.pads[p] if len(b.pads) else b.pads)
