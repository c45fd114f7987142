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

Where the compiled walk can form the replica's micro-batches (``sim.gate.walk``: a static
shape, no lookup drafter, no drafting ahead; measured or roofline timings) it forms them
many at a time with their completions (``sim.steady_walk``, ``sim.kernels.walk``), taking
the micro-batches in flight over from the reference scheduler (``walk_flight``: their
events dropped, ``walk_took_flight``) and handing those it leaves in flight back as this
scheduler makes them (``walk_landed``: the same ``MicroBatch``, its end's event made anew:
one it took over keeps its place in SimPy's queue, one it dispatched comes after the events
made before the walk handed it back at the very same instant, where the reference's would
come after those made before its dispatch only: a departure where such a tie is read, which
the walk avoids by taking only replicas whose routers read nothing of them). A micro-batch
with a slot preempted in flight, a shape per sequence or placeholder drafts is not taken
over; nor are replicas without an arrival feed (behind a closed loop, or a router that
reads the replicas' load: ``sim.cluster.wire``), which the reference path runs.

Until December 2026 each stage was a SimPy process with an inbox and each link a
``Resource``: the same times to the last bit, but the end of a micro-batch was an event
made when its last stage started rather than when it was dispatched, so where it falls at
the very instant of another event (an arrival, another replica's step) the two may now run
in the other order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from heapq import heapify

import numpy as np

from sim import steady_walk
from sim.kernels.pipeline import pipeline_pass
from sim.replica import Replica
from sim.router import event_at
from sim.scheduling import Batch
from sim.shapes import tree_nodes
from sim.slots import FILLED, KV, TARGET
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
        # the micro-batches in flight, in the order dispatched: (end, MicroBatch, the event
        # that ends it)
        self.flight: list[tuple[float, MicroBatch, object]] = []
        # the queue ids of those a walk took over, by the id it gave each (walk_took_flight)
        self._taken: dict[int, int] = {}
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
        """The scheduler: dispatch micro-batches while fewer than ``stages`` are in flight
        (many at once, with their completions, where the compiled walk can form them:
        ``sim.steady_walk``)."""
        env = self.env
        while True:
            can_form = self.in_flight < self.stages and self._has_work()
            if self._walk is not None and (can_form or self.in_flight):
                # (with every stage busy the walk starts waiting, as the scheduler does)
                fn = steady_walk.compiled(self)
                walk = steady_walk.plan(self, fn) if fn is not None else None
                if walk is not None:
                    self.compiled_iterations += walk.k
                    yield from steady_walk.run(self, walk)
                    continue
            if can_form:
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
        self._fly(pipeline_pass(self.free_at, now, mb.draft_s, mb.stage_s, mb.hop_s), mb)

    def _fly(self, end: float, mb: MicroBatch, eid: int | None = None) -> None:
        """``mb`` in flight until ``end``, one event at that time (``eid``: the queue id of
        the event it had before a walk took it over)."""
        event = event_at(self.env, end, eid)
        event.callbacks.append(lambda _: self.complete(mb))
        self.flight.append((end, mb, event))

    def complete(self, mb: MicroBatch) -> None:
        """The last stage finished ``mb``: apply it, free its sequences, wake the scheduler."""
        self.flight.pop(0)  # (the first in flight: the stages serve in order)
        batch = _still_held(mb, self.epoch)
        self.finish_iteration(batch, mb.start_at, mb.draft_s, mb.verify_s, mb.bound)
        self.busy[batch.dec_slots] = False
        self.busy[batch.pre_slots] = False
        self.in_flight -= 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    # -- the compiled walk's side (sim.steady_walk) -------------------------------------
    def walk_flight(self, run: np.ndarray) -> tuple | None:
        """The micro-batches in flight as the walk takes them over, for the running slots
        ``run`` (its rows, in that order): (each row's micro-batch id, 0 for none, and
        what it took, int64 [R, 2]; their times float64 [S, 4] and counts int64 [S, 8], as
        ``sim.kernels.walk`` keeps them; how many; their events' ids), or None where one
        holds what the walk does not keep (a slot preempted in flight, a shape per
        sequence, placeholder drafts)."""
        n_st = self.stages
        fly = np.zeros((len(run), 2), dtype=np.int64)
        fl_f = np.zeros((n_st, 4))
        fl_i = np.zeros((n_st, 8), dtype=np.int64)
        if not self.flight:
            return fly, fl_f, fl_i, 0, ()
        row_of = np.full(self.limits.max_num_seqs, -1, dtype=np.int64)
        row_of[run] = np.arange(len(run))
        codes = steady_walk.BOUND_CODES
        for j, (end, mb, _) in enumerate(self.flight):
            b = mb.batch
            if b.row.ndim != 1 or len(b.pads) or _still_held(mb, self.epoch) is not b:
                return None
            dec, pre = row_of[b.dec_slots], row_of[b.pre_slots]
            nodes = tree_nodes(b.row)
            fly[dec, 0] = fly[pre, 0] = j + 1
            fly[dec, 1] = 1 + nodes
            fly[pre, 1] = b.chunks
            n_dec = len(dec)
            fl_f[j] = end, mb.start_at, mb.draft_s, mb.verify_s
            fl_i[j] = (j + 1, n_dec + len(pre), n_dec, int(b.chunks.sum()), b.verify_tokens,
                       n_dec * nodes, codes.get(mb.bound, -1), int(nodes > 0 and n_dec > 0))
        return fly, fl_f, fl_i, len(self.flight), tuple(id(e) for _, _, e in self.flight)

    def walk_took_flight(self) -> None:
        """A walk took the micro-batches in flight over (``walk_flight``'s, the walk's ids
        1, 2, ... in order): their events are dropped (the walk completes them, or hands
        them back with their queue ids: ``walk_landed``)."""
        self._taken = {}
        if self.flight:
            gone = {id(e): j for j, (_, _, e) in enumerate(self.flight, start=1)}
            queue = self.env._queue
            for item in queue:
                if id(item[3]) in gone:
                    self._taken[gone[id(item[3])]] = item[2]
            queue[:] = [item for item in queue if id(item[3]) not in gone]
            heapify(queue)
            self.flight = []

    def walk_landed(self, w) -> None:
        """After walk ``w`` was written (``steady_walk.run``): the micro-batches it left in
        flight, as the reference dispatches them (each with its end's event; one the walk
        took over keeps its place in the queue, so that it comes before the events at that
        instant made after its dispatch, as it would have)."""
        self.busy[:] = False
        self.in_flight = w.n_fl
        if not w.n_fl:
            return
        run = self.running_order()
        tag = np.zeros(self.limits.max_num_seqs, dtype=np.int64)
        took = np.zeros(self.limits.max_num_seqs, dtype=np.int64)
        held = w.fly[:, 0] > 0
        tag[w.slots[held]] = w.fly[held, 0]
        took[w.slots[held]] = w.fly[held, 1]
        st = self.state
        for j in range(w.n_fl):
            mine = run[tag[run] == w.fl_i[j, 0]]  # in running order
            decoding = st[mine, TARGET] == st[mine, FILLED]
            dec, pre = mine[decoding], mine[~decoding]
            batch = Batch(self.policy.shape(len(dec)), dec, st[dec, KV], pre, st[pre, KV],
                          took[pre])
            self.busy[mine] = True
            end, start, draft_s, verify_s = w.fl_f[j].tolist()
            mb = MicroBatch(batch, self.epoch[np.concatenate((dec, pre))], start, draft_s,
                            verify_s, (), 0.0, steady_walk.BOUND_NAMES[int(w.fl_i[j, 6])])
            self._fly(end, mb, self._taken.get(int(w.fl_i[j, 0])))


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
