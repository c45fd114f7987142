"""The scheduler's answer for a decode-only iteration, formed with a handful of array ops.

Most iterations of a loaded replica have nobody prefilling from an earlier iteration:
every running sequence decodes with the policy's one shape. For such an iteration the
vLLM v1 walk of ``sim.scheduling.vllm_v1.plan_vllm_v1`` reduces to arithmetic on the
running rows -- each wants 1 + the shape's nodes, which fits the token budget whole or not
at all, and gets the blocks for its tokens plus the lookahead slots if the pool has them for
everyone -- followed by the walk's own admissions of waiting requests with the budget left
(``admit_waiting``, as the walk calls it when nobody was preempted). ``plan(r)`` does
exactly that and returns the same ``Batch`` with the same KV grants and admissions; when
anything else could happen (a prefill under way, the budget cut, a preemption) it returns
None *before changing anything* and the full scheduler runs. The
iteration is then priced, timed and applied (``sim.step.advance``) as any other: one event
per iteration, the same records. A run's path without ``decode_step``
(``sim.engine_path``) turns it off; a test runs every shipped scenario both ways and
compares every record.

It covers a replica whose policy's shape depends only on the batch size (the policy says
so with ``by_batch_size``: none, fixed γ, trees, a non-sticky batch ladder) on one pipeline
stage, without a prefix cache (whose LRU changes as blocks are granted), a lookup drafter's
per-step matches or a draft running ahead; ``sim.gate.decode_step`` says so once per replica.
"""

from __future__ import annotations

import numpy as np

from sim.kv import blocks_for
from sim.scheduling.common import NONE, Batch, admit_waiting
from sim.shapes import shape_info
from sim.slots import BLOCKS, FILLED, KV, TARGET

_sum = np.add.reduce
_any = np.logical_or.reduce



def decoding_rows(r, admitting: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """(the running slots in running order, int64 [R] read-only; a copy of their state
    rows, [R, N_COLS]) when every running sequence of ``r`` decodes and nobody waits (or,
    ``admitting``, whether or not someone waits), else None (``sim.steady`` starts from the
    same)."""
    if (r.waiting and not admitting) or not r.n_active:
        return None
    run = r.running_order()
    st = r.state[run]
    if _any(st[:, TARGET] != st[:, FILLED]):
        return None  # someone prefills
    return run, st


def decoding_shape(r, admitting: bool = False
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int] | None:
    """``decoding_rows`` with the policy's shape for them, its depth and draft nodes, when
    every sequence's verify fits the token budget whole; else None (the budget walk cuts
    someone's draft, or someone prefills, or -- unless ``admitting`` -- someone waits).
    ``sim.spec_stretch`` starts from it."""
    rows = decoding_rows(r, admitting)
    if rows is None:
        return None
    run, st = rows
    row = r.policy.shape(len(run), running=r.n_active)
    depth, nodes, _ = shape_info(row)
    if len(run) * (1 + nodes) > r.limits.max_batched_tokens:
        return None
    return run, st, row, depth, nodes


def plan(r) -> Batch | None:
    """The batch ``plan_vllm_v1`` forms when every running sequence of ``r`` decodes and
    all of them fit whole (same KV grants, then the same admissions from the waiting queue
    with the budget left), or None -- with ``r`` untouched -- otherwise."""
    shaped = decoding_shape(r, admitting=True)
    if shaped is None:
        return None
    run, st, row, _, nodes = shaped
    verify = 1 + nodes
    lim = r.limits
    kv = st[:, KV]
    held = st[:, BLOCKS]
    extra = blocks_for(kv + (verify + r.lookahead), lim.block_size) - held  # [R] to add
    np.maximum(extra, 0, out=extra)
    if int(_sum(extra)) > r.kv.free_blocks:
        return None  # someone must be preempted
    r.kv.grant(run, held, extra)
    # step 3 of the walk: nobody was preempted, so waiting requests are admitted
    budget = lim.max_batched_tokens - len(run) * verify
    if r.waiting and budget > 0 and r.n_active < lim.max_num_seqs:
        pre, chunks, cached = admit_waiting(r, lim, budget)
        return Batch(row, run, kv, pre, cached, chunks, False)
    return Batch(row, run, kv, NONE, NONE, NONE, False)
