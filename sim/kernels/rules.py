"""vLLM v1's scheduling rules, each written once, for both drivers of an iteration.

The reference scheduler (``sim.scheduling``, ``sim.kv``, ``sim.step``) applies them to a
batch's arrays; the compiled kernels (``sim.kernels.walk``, ``sim.kernels.stretch``) to
one row at a time, as scalars. Each is arithmetic that gives the same values on an int64
array and on an int64 scalar, so that the one function serves both (``sim.steady_kernel``
compiles a copy of it with the kernels; the reference calls it as it is).

What each stands for in vLLM (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``;
``vllm/v1/core/kv_cache_manager.py``, ``allocate_slots``):

- ``blocks_for``: the blocks that hold a number of tokens (``cdiv(num_tokens,
  block_size)``);
- ``wanted``: what a running request asks of the token budget: a decoder its verify
  (1 + its draft tokens), a prefilling request the rest of its prompt, either at most
  ``chunk_tokens`` (``long_prefill_token_threshold``, which cuts a verify too);
- ``most_tokens``: the most tokens one request may take in a step: ``chunk_tokens``
  (``long_prefill_token_threshold``) with chunked prefill, else the whole budget, as also
  in vLLM 0.33 when the step starts with one request running or waiting in all (the
  threshold is computed once per step, ``num_eligible > 1``);
- ``share``: what it gets: what it asks, at most what the budget has left less the input
  slots its drafter takes beside its tokens (its draft tokens cut where the budget runs
  out);
- ``spent``: what a scheduled request takes of the budget: its tokens and those slots
  (vLLM 0.33's ``input_budget``; ``max_num_new_slots_for_drafting``: 1 for a draft
  model, 0 for EAGLE, MTP, Medusa and n-gram);
- ``grant``: the blocks a scheduled request must add so that it holds its computed tokens,
  the ones scheduled now and ``lookahead`` slots for the next verify's drafts
  (``num_lookahead_tokens``); none where it holds them already;
- ``first_chunk``: an admitted request's first chunk: the rest of its prompt, with chunked
  prefill at most ``chunk_tokens`` and what the budget has left;
- ``admission``: whether that chunk is admitted and the blocks it takes: it must fit the
  budget and the free blocks (with its lookahead slots and a padded admission's
  placeholders, from 0.33), and from 0.20 the whole prompt's blocks must be free
  (``scheduler_reserve_full_isl``: ``KVCacheManager.allocate_slots`` with
  ``full_sequence_must_fit``);
- ``kept_blocks``: after a verify, the blocks a request keeps: vLLM v1 keeps every block
  it holds until the request is freed or preempted (the rejected drafts' slots are
  written over by the tokens that follow: ``single_type_kv_cache_manager.py``,
  ``allocate_new_blocks`` only extends a request's blocks); with ``rolls_back`` (the
  lecture's paged KV, §3.2, and the other orders) the rejected drafts' whole tail blocks
  go back to the pool;
- ``padding``: the placeholder draft tokens vLLM 0.33 adds to an admitted request with one
  token to compute (a prompt of one token, or one whose cached blocks leave one), so that
  the step's verifies keep one shape for the captured CUDA graph: ``num_speculative_tokens``
  of them, rejected by the sampler; only where a running request was scheduled in the step
  or part of the prompt was cached, and not in a step that continues a running request's
  prefill
  (``Scheduler.schedule``'s waiting loop, "Pad new decode requests"); a padded request that
  does not fit the budget stops the admissions;
- ``emitted``: the tokens a verify emits: the accepted drafts and the bonus token, at most
  what the request has left to write.
"""

from __future__ import annotations

import numpy as np

# Which of vLLM v1's rules apply, as the drivers read them: an int64 array (so that a
# compiled kernel takes it as one argument; ``SchedulerLimits.v1``), indexed by these.
ROLLS_BACK = 0  # 1: a verify's rejected whole tail blocks go back to the pool (not vLLM)
FULL_ISL = 1  # 1: a waiting request is admitted only if its whole prompt fits (0.20 on)
NEW_LOOKAHEAD = 2  # 1: an admitted request reserves lookahead slots (0.33)
LONE_UNCAPPED = 3  # 1: no chunk_tokens cap when one request runs or waits in all (0.33)
DRAFT_SLOTS = 4  # input slots each scheduled request takes beside its tokens (0.33)
PAD_TOKENS = 5  # placeholder drafts of a one-token admission (0.33: ``padding``)
N_V1 = 6


def blocks_for(tokens, block_size):
    """Blocks that hold ``tokens`` tokens of KV: ceil(tokens / block_size)."""
    return (tokens + (block_size - 1)) // block_size


def wanted(left, verify, chunk_tokens):
    """Tokens a running request asks for: ``verify`` where its prompt is done (``left``,
    the prompt tokens it has still to prefill, is 0), else ``left``; at most
    ``chunk_tokens``."""
    return np.minimum(left + (left == 0) * verify, chunk_tokens)


def most_tokens(requests, chunk_tokens, budget, chunked, lone_uncapped):
    """The most tokens one request may take in a step that starts with ``requests``
    running or waiting (scalars)."""
    if not chunked or (lone_uncapped and requests <= 1):
        return budget
    return chunk_tokens


def share(want, budget, slots):
    """Tokens a request that asks ``want`` gets with ``budget`` left and ``slots`` input
    slots to take beside them (0 when nothing is left)."""
    return np.minimum(want, np.maximum(budget - slots, 0))


def spent(tokens, slots):
    """The budget a request scheduled for ``tokens`` tokens (none: 0) takes, with the
    ``slots`` input slots its drafter takes beside them."""
    return tokens + slots * (tokens > 0)


def grant(computed, scheduled, lookahead, held, block_size):
    """Blocks to add to the ``held`` ones of a request with ``computed`` tokens in its KV
    and ``scheduled`` more now, so that they hold those and ``lookahead`` slots (0 where
    they do)."""
    return np.maximum((computed + scheduled + lookahead + (block_size - 1)) // block_size
                      - held, 0)


def first_chunk(todo, chunk_tokens, budget, chunked):
    """An admitted request's first chunk of the ``todo`` prompt tokens it has to prefill
    with ``budget`` left for its tokens (scalars)."""
    if not chunked:
        return todo
    chunk = todo if todo < chunk_tokens else chunk_tokens
    return chunk if chunk < budget else budget


def admission(target, cached, chunk, pads, ahead, hit, idle, free, budget, full_isl,
              block_size):
    """The blocks an admission takes (scalars): its cached tokens, first ``chunk`` and
    ``pads`` placeholder drafts with ``ahead`` lookahead slots, less the ``hit`` cached
    blocks it found; -1 where it does not fit: its tokens past what the ``budget`` has left
    (input slots taken off), or its blocks and the ``idle`` cached blocks it takes out of
    the free queue past the ``free`` blocks, or with ``full_isl`` (vLLM's
    ``scheduler_reserve_full_isl``) the blocks of its whole ``target`` prompt past them."""
    need = (cached + chunk + pads + ahead + (block_size - 1)) // block_size - hit
    if chunk + pads > budget or need + idle > free:
        return -1
    if full_isl and (target + (block_size - 1)) // block_size - hit + idle > free:
        return -1
    return need


def padding(todo, cached, pad_tokens, scheduled, prefilling):
    """Placeholder draft tokens an admitted request with ``todo`` tokens to compute and
    ``cached`` of them found in the prefix cache takes beside them, in a step that has
    scheduled ``scheduled`` running requests, ``prefilling`` of them continuing their
    prefill: ``pad_tokens`` (the release's and the drafter's) where it has one token to
    compute, no running request's prefill continues and a running request was scheduled or
    part of its prompt was cached, else 0 (scalars)."""
    if todo == 1 and prefilling == 0 and (scheduled > 0 or cached > 0):
        return pad_tokens
    return 0


def kept_blocks(tokens, held, block_size, rolls_back):
    """Blocks a request keeps of the ``held`` ones once its KV is cut back to ``tokens``:
    all of them, or with ``rolls_back`` (0 or 1) those that hold ``tokens``."""
    return held - rolls_back * (held - np.minimum((tokens + (block_size - 1)) // block_size,
                                                   held))


def emitted(accepted, left):
    """Tokens a verify that accepted ``accepted`` drafts emits to a request with ``left``
    output tokens still to write."""
    return np.minimum(accepted + 1, left)
