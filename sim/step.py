"""What one finished iteration does to a replica's state, and what the draft must ingest.

``advance(r, batch)`` applies an iteration after its time has passed: prefill chunks fill
prompts (the pass that completes one samples its next token), then every decoding
sequence's accepted depth is drawn at once, ``accepted + 1`` tokens are emitted (capped at
the request's output) and the KV is rolled back to the root plus the accepted path (its
tail blocks returning to the pool in the lecture's paged KV, §3.2, exercise 8, but not in
vLLM v1: ``BlockManager.rolls_back``). It also keeps the per-request
counters, the inter-token gaps (ITL: the time between consecutive output chunks of a
request, a chunk carrying every token one verify emitted, as vLLM's benchmark measures it)
and, for a draft on its own GPU that drafts ahead, which sequences' next guesses are ready.

``draft_sync(r, batch)``: when a policy gives a sequence no draft this iteration (γ = 0:
a batch ladder, an adaptive policy), the draft model still has to ingest the tokens the
sequence emits, or its KV falls behind. ``every_step`` (vLLM v1, whose drafter runs every
step): each such sequence feeds its new token to the draft in the iteration's first draft
pass. ``catch_up``: the draft skips those iterations and, when the sequence speculates
again, ingests all it missed in its first pass. A request a sticky policy disabled for
good (vLLM v0) is never drafted for again, so its draft KV is never caught up.
"""

from __future__ import annotations

import numpy as np

from sim.draft_pricing import one_level_deeper
from sim.kernels import rules
from sim.shapes import shape_info
from sim.slots import (
    BLOCKS,
    COUNTS,
    DLAG,
    EMITTED,
    FILLED,
    KV,
    OUTPUT,
    READY,
    RESUMED,
    RID,
    SPEC_OFF,
    STREAM,
    TARGET,
)

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce
_any = np.logical_or.reduce

_EMPTY = np.zeros(0, dtype=np.int64)


def draft_sync(r, batch) -> tuple[int | np.ndarray | None, np.ndarray | None]:
    """(tokens each decoding sequence's draft ingests in the first draft pass beyond its
    root -- None, a scalar for all, or int64 [D] -- and, with overlap, bool [D]: whose
    guesses were drafted during the last verify)."""
    dec, row = batch.dec_slots, batch.row
    if not len(dec) or not r.policy.uses_draft or r.pricer.draft is None:
        return None, None
    ready = r.state[dec, READY].astype(bool) if r.overlap else None
    if r.draft_sync == "every_step":
        if row.ndim == 1:
            return (None if shape_info(row)[0] else 1), ready
        idle = (row[:, 0] == 0) & (r.state[dec, SPEC_OFF] == 0)  # [D]
        return (idle.astype(np.int64) if idle.any() else None), ready
    lag = r.state[dec, DLAG]  # catch_up: what each sequence's draft missed
    if not _any(lag):
        return None, ready
    speculating = (row[..., 0] > 0) if row.ndim == 2 else bool(shape_info(row)[0])
    return lag * speculating, ready


def advance(r, batch) -> tuple[int, int, int, int]:
    """Apply one finished iteration to replica ``r``; returns (emitted, accepted, drafted,
    prefill) tokens."""
    now = r.env.now
    log = r.log
    total_emitted = prefill = 0

    # Prefill chunks: the pass that completes a prompt samples the next token.
    pre, chunks = batch.pre_slots, batch.chunks
    pre_done = False
    if len(pre):
        prefill = int(_sum(chunks))
        sp = r.state[pre]  # [P, N_COLS]: gather once, scatter once below
        # recomputes after a preemption; any other prefilling request has emitted nothing
        resumed = _any(sp[:, RESUMED])
        if resumed:
            sp[:, COUNTS + 6] += chunks * sp[:, RESUMED]  # recomputed prefill tokens
        filled = sp[:, FILLED]
        filled += chunks  # (a view into sp)
        sp[:, KV] = batch.pre_context + chunks
        done = filled >= sp[:, TARGET]  # [P]
        pre_done = _any(done)
        if pre_done:
            if resumed:
                # first token: a request that emitted nothing before (not a recompute)
                first = done & (sp[:, EMITTED] == 0)
                again = done & ~first  # a recompute's first chunk after it was preempted
                if _any(again):
                    log.add_itl(now - r.last_chunk_at[pre[again]])
                sp[done, RESUMED] = 0
            else:
                first = done
            log.first_token_at[sp[first, RID]] = now
            r.last_chunk_at[pre[done]] = now
            sp[done, EMITTED] += 1
            total_emitted += int(_sum(done))
        r.state[pre] = sp

    # Verification: accepted guesses + 1 token, capped at the remaining output.
    dec, row = batch.dec_slots, batch.row
    drafted = accepted = 0
    if len(dec):
        st = r.state[dec]  # [D, N_COLS]: gather once, scatter once below
        acc, acc1, _, last, out, accepted, drafted = verify(r, st, row, batch.valid)
        kept = batch.dec_context + acc1  # the root plus the accepted path
        st[:, KV] = kept
        st[:, BLOCKS] = r.kv.rolled_back(st[:, BLOCKS], kept)
        r.state[dec] = st
        log.add_itl(now - r.last_chunk_at[dec])
        r.last_chunk_at[dec] = now
        total_emitted += out
        r.policy.observe(acc, row)
        fin = dec[last]
    else:
        fin = _EMPTY
    if pre_done:  # only a prompt completed now can have emitted its last token
        fin = np.concatenate((fin, pre[sp[:, EMITTED] >= sp[:, OUTPUT]]))
    if len(fin):
        r.finish(fin, now)
    return total_emitted, accepted, drafted, prefill


def verify(r, st: np.ndarray, row: np.ndarray, valid: np.ndarray | None = None):
    """The outcome of one verify for the decoding rows ``st`` ([D, N_COLS], written in
    place) with draft shape ``row`` ([m] or [D, m]): the counters, the accepted depths
    drawn, the tokens emitted (capped at each request's output), the draft's lag; returns
    (accepted [D], accepted + 1 [D], draft tokens verified (a scalar for all or [D]), who
    emitted its last token [D], tokens emitted, drafts accepted, drafted). ``valid`` int64
    [D]: the leading drafts a grammar allows (``sim.grammar``'s ``rejected``): the others
    are verified, never accepted, and not counted as drafted."""
    n = len(st)
    emitted = st[:, EMITTED]
    if row.ndim == 1:  # one shape for the batch: scalars
        depth, nodes, _ = shape_info(row)
        # verify steps, draft steps and drafted tokens: the same for every row
        st[:, COUNTS:COUNTS + 3] += _step_counts(row)
        drafted = n * nodes
        speculating = depth > 0
        widths = rows_of(row, n)
    else:  # a shape per sequence: arrays [D]
        depth = (row > 0).sum(axis=1)
        nodes = np.cumprod(row, axis=1).sum(axis=1)
        st[:, COUNTS] += 1
        st[:, COUNTS + 1] += depth > 0
        st[:, COUNTS + 2] += nodes
        drafted = int(_sum(nodes))
        speculating = bool(depth.any())
        widths = row
    if speculating:
        if r.overlap:
            acc = _draw_ahead(r, st, widths, depth)
        else:
            acc = r.acceptance.draw(st[:, STREAM], emitted, widths, r.rng)  # [D]
        if valid is not None:  # forbidden by the grammar: rejected, not drafted
            acc = np.minimum(acc, valid)
            forbidden = np.maximum(depth - valid, 0)  # [D] (chains: a node a level)
            st[:, COUNTS + 2] -= forbidden
            drafted -= int(_sum(forbidden))
        st[:, COUNTS + 3] += acc
        st[:, COUNTS + 4] += acc + (acc < depth)  # checked: accepted + first rejected
        accepted = int(_sum(acc))
        acc1 = acc + 1
    else:
        acc, acc1, accepted = _zeros(n), _ones(n), 0
    remaining = st[:, OUTPUT] - emitted  # [D]
    last = remaining <= acc1  # [D]: who emits its last token (capped there)
    if _any(last):
        step = rules.emitted(acc, remaining)  # [D]
        out = int(_sum(step))
    else:
        step, out = acc1, accepted + n
    emitted += step  # (a view into st)
    if r.draft_sync == "catch_up" and r.policy.uses_draft:
        st[:, DLAG] = np.where(depth > 0, 0, st[:, DLAG] + step)  # missed: the new tokens
    return acc, acc1, nodes, last, out, accepted, drafted


def _draw_ahead(r, st: np.ndarray, widths: np.ndarray, depth) -> np.ndarray:
    """Accepted depths when the draft drafts ahead during the verify (chains): the draft
    kept going past its last guess, so its next guesses are usable iff every guess was
    accepted and its guess for the bonus token was right -- drawn as one more chain level.
    Marks those sequences READY; returns int64 [D] accepted depths (at most ``depth``)."""
    d = np.asarray(depth)
    full = r.acceptance.draw(st[:, STREAM], st[:, EMITTED], one_level_deeper(widths),
                             r.rng)  # [D]
    st[:, READY] = full > d
    return np.minimum(full, d)


_ROWS: dict[tuple[bytes, int], np.ndarray] = {}
_STEP_COUNTS: dict[bytes, np.ndarray] = {}
_CONST: dict[tuple[int, int], np.ndarray] = {}


def _step_counts(row: np.ndarray) -> np.ndarray:
    """int64 [3]: what one verify with shape ``row`` adds to a sequence's verify steps,
    draft steps and drafted tokens (1, 1 if it drafts, its nodes)."""
    key = row.tobytes()
    counts = _STEP_COUNTS.get(key)
    if counts is None:
        depth, nodes, _ = shape_info(row)
        counts = _STEP_COUNTS[key] = np.array([1, int(depth > 0), nodes], dtype=np.int64)
    return counts


def _const(value: int, n: int) -> np.ndarray:
    """int64 [n] filled with ``value``: a cached read-only array (the caller never writes)."""
    out = _CONST.get((value, n))
    if out is None:
        out = _CONST[(value, n)] = np.full(n, value, dtype=np.int64)
        out.flags.writeable = False
    return out


def _zeros(n: int) -> np.ndarray:
    return _const(0, n)


def _ones(n: int) -> np.ndarray:
    return _const(1, n)


def rows_of(row: np.ndarray, n: int) -> np.ndarray:
    """int64 [n, m]: ``row`` for n sequences (a cached read-only broadcast of a private copy)."""
    key = (row.tobytes(), n)
    view = _ROWS.get(key)
    if view is None:
        view = np.broadcast_to(row.copy(), (n, len(row)))
        _ROWS[key] = view
    return view
