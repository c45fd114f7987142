"""Pipeline stages as a tandem queue: when a micro-batch leaves the last stage, written
once, here with the kernels' rules, for both drivers: ``sim.pipeline.PipelinedReplica``
calls it as it is, the compiled walk (``sim.kernels.walk``) a compiled copy, as it does
every function of ``sim.kernels`` it calls.

A replica of ``stages`` pipeline stages sends each micro-batch through stage 0, the link to
stage 1, stage 1, and so on: each stage and each inter-stage link serves one micro-batch
at a time, first come first served, and a stage starts its next micro-batch while the
activations of the last one travel (vLLM's virtual engines, Orca's micro-batches). As
every server is first come first served and the micro-batches enter in the order they
are dispatched, a later one never delays an earlier one: a micro-batch's times through
the stages are fixed when it is dispatched, from when each stage and each link comes free
(``free``: stage k at ``2k``, the link after it at ``2k + 1``), and the replica waits for
its end alone -- one event per micro-batch, not one per stage and hop.

The sums are the ones per-stage SimPy timeouts would make (``now + delay`` at each
start), so the times are the same to the last bit.
"""

from __future__ import annotations

import numpy as np

# what a pipelined scheduler that waits wakes for (pipeline_wait)
WAIT_STOP, WAIT_DONE, WAIT_ARRIVAL = 0, 1, 2


def pipeline_pass(free, start, draft_s, stage_s, hop_s):
    """When a micro-batch dispatched at ``start`` leaves the last of ``len(stage_s)``
    stages: stage k computes for ``stage_s[k]`` (stage 0 after the draft's ``draft_s``,
    drafted on its GPU), each hop takes ``hop_s``; each starts when the micro-batch gets
    there and its stage or link is free (``free``, updated: when each comes free after
    this micro-batch)."""
    t = start
    last = len(stage_s) - 1
    for k in range(last + 1):
        if free[2 * k] > t:
            t = free[2 * k]
        t = t + (stage_s[k] + draft_s if k == 0 else stage_s[k])
        free[2 * k] = t
        if k < last:
            if free[2 * k + 1] > t:
                t = free[2 * k + 1]
            t = t + hop_s
            free[2 * k + 1] = t
    return t


def pipeline_wait(fl_f, n_fl, stages, arr_at, nxt, n_wait, next_at, t, horizon):
    """What a pipelined scheduler waiting at ``t`` (every stage busy, or nothing to form)
    wakes for, and when: ``WAIT_DONE``, the oldest of the ``n_fl`` micro-batches in flight
    leaving the last stage (at ``fl_f[0, 0]``); ``WAIT_ARRIVAL``, with fewer than
    ``stages`` in flight, request ``nxt`` of the ``n_wait`` held arriving (at
    ``arr_at[nxt]``; past them, the next one at ``next_at``); ``WAIT_STOP`` where the next
    event is at or after ``horizon`` (someone else's), where none comes, or where two come
    at one instant (SimPy's order: the walk leaves it to the reference)."""
    done = fl_f[0, 0] if n_fl > 0 else np.inf
    comes = np.inf
    if n_fl < stages:
        if nxt < n_wait:
            comes = arr_at[nxt]
        elif next_at > t:
            comes = next_at
    if not (done < horizon or comes < horizon):
        return WAIT_STOP, t
    if done < comes:
        return WAIT_DONE, done
    if done == comes or (nxt + 1 < n_wait and arr_at[nxt + 1] == comes):
        return WAIT_STOP, t
    return WAIT_ARRIVAL, comes


def pipeline_pop(fl_f, fl_i, n_fl):
    """The oldest of the ``n_fl`` micro-batches in flight has left: the others move up."""
    for j in range(1, n_fl):
        fl_f[j - 1, :] = fl_f[j, :]
        fl_i[j - 1, :] = fl_i[j, :]
