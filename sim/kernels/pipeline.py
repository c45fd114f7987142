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
