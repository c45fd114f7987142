"""The draft's serial passes of one iteration, priced by its cost model.

The draft is autoregressive: a chain of γ needs γ serial passes and an expansion tree
⟨k1..km⟩ needs m, pass j feeding every decoding sequence that level's nodes (1 for the
root, then k1, k1·k2, ...) after the nodes fed before it (lecture §3.1, §6.2). The first
pass also carries the draft's share of the prefill chunks, so its KV exists when a
sequence starts decoding, and the tokens a sequence's draft still has to ingest (``sync``:
the draft keeping up with iterations it did not draft for, see ``sim.step``). A tree's
level-j nodes attend their context, j ancestors and themselves (the tree mask).

``draft`` is a ``hardware.draft.DraftSetup``: with one replica the sums are formed here;
with several (a draft on each of the target's GPUs, sequences split round robin)
``hardware.draft`` prices the levels and the prefill is one extra pass.

A ``one_pass`` drafter (Medusa's heads) is not autoregressive: when any decoding sequence
speculates, its heads run once on the last hidden state of every sequence in the batch
(vLLM's Medusa proposer takes one row per scheduled request, vllm/v1/spec_decode/medusa.py)
and propose every position of any chain or tree; it keeps no KV, so it ingests nothing.

A ``block`` drafter (DFlash) is one-pass too, but its pass attends: when any decoding sequence
speculates, every row of the batch (decoding and prefilling, as vLLM's DFlash proposer takes
every scheduled request) feeds K + 1 queries -- the bonus token and a mask per draft
position, K the deepest shape's depth (vLLM's ``num_speculative_tokens``) -- attending its
context and the block (``hardware.draft.block_pass``). Its context KV is projected from the
target's hidden states, not drafted, so it ingests nothing and prices no prefill pass.
"""

from __future__ import annotations

import numpy as np

from hardware.cost import batch_pass
from hardware.draft import block_pass, head_pass, parallel_prefill_pass
from sim.shapes import causal_keys, draft_feeds, tree_key_term

# ndarray.sum() goes through Python wrappers; the ufunc reduce is ~1 µs cheaper per call
_sum = np.add.reduce


def prefill_sums(pre_context: np.ndarray, pre_chunks: np.ndarray) -> tuple:
    """(Σ new, Σ ctx, Σ new·ctx, Σ new²) of the prefill chunks."""
    if not len(pre_chunks):
        return 0.0, 0.0, 0.0, 0.0
    c = pre_chunks.astype(np.float64)
    return float(_sum(c)), float(_sum(pre_context)), float(c @ pre_context), float(c @ c)


# the columns of draft_passes' rows
NEW, KV, KEYS, SEQS, GROUP, LEVEL, SECONDS = range(7)


def passes_capacity(depth: int, replicas: int) -> int:
    """The most rows ``draft_passes`` fills for shapes of ``depth`` serial levels."""
    return max(replicas, 1) * max(depth, 1) + 2


def shared_shape_seconds(draft, row: np.ndarray, dec_context: np.ndarray, pre_sums: tuple,
                         n_pre: int, sync: int | None = None,
                         s_ctx: float | None = None) -> float:
    """Seconds of the draft passes when every decoding sequence has shape ``row`` (1-D):
    ``draft_passes`` priced by the draft's cost model, combined by ``draft_total``.

    ``sync``: tokens each decoding sequence's draft ingests in the first pass besides its
    root (only for a shape with no levels: every sequence keeps its draft's KV in step);
    ``s_ctx``: float(Σ dec_context), when the caller has it.
    """
    n_dec = len(dec_context)
    feeds = draft_feeds(row) if n_dec else []
    if draft.one_pass and not (n_dec and row.size and row[0] > 0):
        feeds = []  # the heads run only when a sequence speculates
    if s_ctx is None:
        s_ctx = float(_sum(dec_context))
    group_n, group_ctx = _replica_groups(dec_context, draft.replicas)
    passes = np.empty((passes_capacity(len(feeds), draft.replicas), 7))
    k = draft_passes(passes, n_dec, s_ctx, feeds, tree_key_term(row) is not None, sync or 0,
                     draft.replicas, group_n, group_ctx, draft.one_pass, n_pre, *pre_sums,
                     draft.block, _parallel(draft))
    _price(draft.cost, passes, k)
    return draft_total(passes, k)


def chain_prefix_seconds(draft, depth: int, dec_context: np.ndarray) -> list[float]:
    """[``shared_shape_seconds`` of ``chain(γ, depth)`` for γ = 0..depth] for decoding
    sequences alone (no prefill, nothing to ingest): ``draft_prefix`` of the deepest
    chain's passes, so the very same floats (the adaptive policy prices every γ of an
    iteration with one chain's passes)."""
    n_dec = len(dec_context)
    if not n_dec or not depth:
        return [0.0] * (depth + 1)
    group_n, group_ctx = _replica_groups(dec_context, draft.replicas)
    passes = np.empty((passes_capacity(depth, draft.replicas), 7))
    if draft.block:  # no prefix of passes: a block as deep as each γ
        out = [0.0]
        for g in range(1, depth + 1):
            k = draft_passes(passes, n_dec, float(_sum(dec_context)), [1] * g, False, 0,
                             draft.replicas, group_n, group_ctx, True, 0, 0.0, 0.0, 0.0, 0.0,
                             True, _parallel(draft))
            _price(draft.cost, passes, k)
            out.append(draft_total(passes, k))
        return out
    k = draft_passes(passes, n_dec, float(_sum(dec_context)), [1] * depth, False, 0,
                     draft.replicas, group_n, group_ctx, draft.one_pass, 0, 0.0, 0.0, 0.0,
                     0.0)
    _price(draft.cost, passes, k)
    out = np.zeros(depth + 1)
    draft_prefix(passes, k, out)
    return out.tolist()


def _parallel(draft) -> int:
    """``draft_passes``' ``parallel``: the setup's (PARD 0, P-EAGLE 1), -1 for none."""
    p = getattr(draft, "parallel", None)
    return -1 if p is None else int(p)


def _replica_groups(dec_context: np.ndarray, replicas: int) -> tuple:
    """(sequences, Σ context) per draft replica, the sequences split round robin."""
    if replicas <= 1:
        return _ONE, _ONE
    n = np.zeros(replicas, dtype=np.int64)
    ctx = np.zeros(replicas)
    for g in range(min(replicas, len(dec_context))):
        n[g] = len(dec_context[g::replicas])
        ctx[g] = float(dec_context[g::replicas].sum())
    return n, ctx


_ONE = np.zeros(1, dtype=np.int64)


def _price(cost, passes: np.ndarray, k: int) -> None:
    """Each row's seconds on ``cost``, into its SECONDS column."""
    for i, (new, kv, keys, seqs) in enumerate(passes[:k, :SEQS + 1].tolist()):
        passes[i, SECONDS] = cost.pass_seconds_at(new, kv, keys, seqs)


def draft_passes(out, n_dec, s_ctx, feeds, tree, extra, reps, group_n, group_ctx, one_pass,
                 n_pre, p_new, p_ctx, p_new_ctx, p_sq, block=False, parallel=-1):
    """The draft's passes of one iteration in which every one of ``n_dec`` decoding
    sequences (``s_ctx`` context in all) drafts the shape whose serial passes feed
    ``feeds`` tokens each (``tree``: the nodes of a token tree), beside ``n_pre`` prefill
    chunks with sums (``p_new``, ``p_ctx``, ``p_new_ctx``, ``p_sq``): each a row of
    ``out`` (``passes_capacity`` rows of 7 columns), its ``hardware.cost.batch_pass``
    numbers, its GROUP and its LEVEL; returns how many. The one statement of which passes
    run, for the reference pricer and the compiled kernels alike:

    - one draft replica: pass j feeds every sequence level j's nodes after those fed
      before; the chunks ride in the first pass (their KV then exists when a sequence
      starts decoding). With no levels the draft ingests ``extra`` tokens per sequence
      there (keeping up with iterations it did not draft for, ``sim.step``).
    - ``reps`` > 1 (a draft on each of the target's GPUs): group g holds ``group_n[g]``
      sequences with ``group_ctx[g]`` context (split round robin), its own passes (tree
      keys, ``hardware.draft.tree_draft_seconds``); the ingest and the chunks are passes
      of their own after them (GROUP -1).
    - ``one_pass`` (Medusa's heads): one pass over every row, split over the replicas,
      when any sequence speculates (``hardware.draft.head_pass``).
    - ``block`` (with ``one_pass``; DFlash): one pass when any sequence speculates, each
      row ``len(feeds)`` + 1 queries over its context (``hardware.draft.block_pass``); the
      prefilling rows' queries follow their chunks (Σ context ``p_ctx + p_new``), in the
      pass with one replica, in a pass of their own after the groups with several.
      ``parallel`` >= 0 (vLLM's parallel drafting, PARD 0, P-EAGLE 1: ``DraftSetup.parallel``):
      each decoding row re-feeds its 1 + ``len(feeds)`` step tokens and then
      ``len(feeds)`` - ``parallel`` new queries, a causal run; each prefilling row its chunk
      and as many new queries after it (``hardware.draft.parallel_prefill_pass``).

    ``draft_total`` combines their seconds: the slowest group, then the passes after."""
    k = 0
    if block:
        if n_dec == 0 or len(feeds) == 0:
            return k
        depth = len(feeds)
        if parallel >= 0:  # PARD / P-EAGLE: the chunks themselves, then their new queries
            pre = parallel_prefill_pass(depth, parallel, p_new, p_ctx, p_new_ctx, p_sq, n_pre)
            if reps <= 1:
                return _row(out, k, _plus(block_pass(depth, s_ctx, n_dec, parallel), pre),
                            0, 0)
        elif reps <= 1:
            return _row(out, k, block_pass(depth, s_ctx + (p_ctx + p_new), n_dec + n_pre), 0,
                        0)
        for g in range(reps):
            if group_n[g] == 0:
                break
            k = _row(out, k, block_pass(depth, group_ctx[g], group_n[g],
                                        parallel if parallel >= 0 else None), g, 0)
        if n_pre > 0:
            k = _row(out, k, pre if parallel >= 0 else block_pass(depth, p_ctx + p_new, n_pre),
                     -1, 0)
        return k
    if one_pass:
        if n_dec > 0 and len(feeds) > 0:
            k = _row(out, k, head_pass(n_dec + n_pre, reps), 0, 0)
        return k
    if n_dec == 0 or (len(feeds) == 0 and extra == 0):
        if p_new > 0:  # the chunks alone
            k = _row(out, k, batch_pass(0, 0, 0, 0.0, 0, False, p_new, p_ctx, p_new_ctx, p_sq,
                                        n_pre), 0, 0)
        return k
    if reps > 1:
        if len(feeds) == 0:  # each sequence's missed tokens
            k = _row(out, k, batch_pass(extra, 0, 0, s_ctx, n_dec, False, 0.0, 0.0, 0.0, 0.0,
                                        0), -1, 0)
        for g in range(reps):
            b = group_n[g]
            if b == 0:
                break
            before = 0
            for j in range(len(feeds)):
                k = _row(out, k, batch_pass(feeds[j], before, j, group_ctx[g], b, True, 0.0,
                                            0.0, 0.0, 0.0, 0), g, j)
                before += feeds[j]
        if p_new > 0:
            k = _row(out, k, batch_pass(0, 0, 0, 0.0, 0, False, p_new, p_ctx, p_new_ctx, p_sq,
                                        n_pre), -1, 0)
        return k
    if len(feeds) == 0:  # the ingest, with the chunks
        return _row(out, k, batch_pass(extra, 0, 0, s_ctx, n_dec, False, p_new, p_ctx,
                                       p_new_ctx, p_sq, n_pre), 0, 0)
    before = 0
    for j in range(len(feeds)):
        if j == 0:
            k = _row(out, k, batch_pass(feeds[j], before, j, s_ctx, n_dec, tree, p_new, p_ctx,
                                        p_new_ctx, p_sq, n_pre), 0, j)
        else:
            k = _row(out, k, batch_pass(feeds[j], before, j, s_ctx, n_dec, tree, 0.0, 0.0,
                                        0.0, 0.0, 0), 0, j)
        before += feeds[j]
    return k


def _plus(a, b):
    """Two passes' four numbers as one pass: the sums, and the rows of both."""
    return a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]


def _row(out, k, numbers, group, level):
    """Row ``k`` of ``out``: a pass's four numbers, its group and level; returns k + 1."""
    out[k, NEW] = numbers[0]
    out[k, KV] = numbers[1]
    out[k, KEYS] = numbers[2]
    out[k, SEQS] = numbers[3]
    out[k, GROUP] = group
    out[k, LEVEL] = level
    return k + 1


def draft_total(passes, k):
    """Seconds of the first ``k`` ``draft_passes`` (SECONDS filled in): the slowest
    group's passes summed in order, then each pass after them (GROUP -1)."""
    worst, total, group = 0.0, 0.0, -1.0
    for i in range(k):
        g = passes[i, GROUP]
        if g < 0.0:
            continue
        if g != group:
            if total > worst:
                worst = total
            total, group = 0.0, g
        total += passes[i, SECONDS]
    if total > worst:
        worst = total
    for i in range(k):
        if passes[i, GROUP] < 0.0:
            worst += passes[i, SECONDS]
    return worst


def draft_prefix(passes, k, out):
    """``out[γ]`` (γ = 0..len(out) - 1): ``draft_total`` of the passes of levels below γ
    alone -- each group's running sum, its slowest group -- for passes of decoding
    sequences only (no GROUP -1); a group's sum holds past its last level."""
    out[:] = 0.0
    total, group = 0.0, -1.0
    for i in range(k):
        g = passes[i, GROUP]
        if g != group:
            total, group = 0.0, g
        total += passes[i, SECONDS]
        level = int(passes[i, LEVEL]) + 1
        if level < len(out) and total > out[level]:
            out[level] = total
    for j in range(1, len(out)):
        if out[j] < out[j - 1]:
            out[j] = out[j - 1]


def chain_rows_passes(out, n_dec, s_ctx, n_pre, p_new, p_ctx, p_new_ctx, p_sq, levels_n,
                      levels_ctx, depth, n_idle, c_idle, reps):
    """The draft's passes when each of the ``n_dec`` decoding sequences (``s_ctx`` context
    in all) drafts a chain of its own γ, at least one γ > 0 and the deepest ``depth``,
    every sequence at γ = 0 ingesting its new token (``draft_sync: every_step``;
    ``n_idle`` of them, ``c_idle`` context), beside ``n_pre`` prefill chunks with their
    sums; written into ``out`` as ``draft_passes`` writes its rows, their count returned.
    ``levels_n[g, j]``, ``levels_ctx[g, j]``: the sequences of draft replica g (split
    round robin) whose γ is past j, and their context.

    - one draft replica: pass 0 feeds every sequence one token (its root, or the token a
      γ = 0 sequence ingests) with the prefill chunks; pass j > 0 one token to each
      sequence whose γ is past j, after the j it fed before (the shallower drop out);
    - ``reps`` > 1: each replica's passes, as above without the ingest and the chunks (the
      slowest replica's sum counts, ``draft_total``), then the ingest of the γ = 0
      sequences and the chunks, each a pass of its own (GROUP -1).

    ``per_sequence_seconds`` (the reference pricer) and the compiled walk
    (``sim.kernels.drafting.chain_rows_seconds``) both price these rows. Medusa's heads
    and a block drafter run one pass whatever the shapes (``draft_passes``)."""
    if reps > 1:
        k = 0
        for g in range(reps):
            for j in range(depth):
                if levels_n[g, j] == 0:
                    break
                k = _row(out, k, batch_pass(1, j, j, levels_ctx[g, j], levels_n[g, j],
                                               False, 0.0, 0.0, 0.0, 0.0, 0), g, j)
        if n_idle > 0:  # the γ = 0 sequences' new tokens
            k = _row(out, k, batch_pass(1, 0, 0, c_idle, n_idle, False, 0.0, 0.0, 0.0,
                                           0.0, 0), -1, 0)
        if n_pre > 0:
            k = _row(out, k, batch_pass(0, 0, 0, 0.0, 0, False, p_new, p_ctx, p_new_ctx,
                                           p_sq, n_pre), -1, 0)
    else:
        k = _row(out, 0, batch_pass(1, 0, 0, s_ctx, n_dec, False, p_new, p_ctx, p_new_ctx,
                                       p_sq, n_pre), 0, 0)
        for j in range(1, depth):
            k = _row(out, k, batch_pass(1, j, j, levels_ctx[0, j], levels_n[0, j], False,
                                           0.0, 0.0, 0.0, 0.0, 0), 0, j)
    return k


def _chain_rows_seconds(draft, gam: np.ndarray, dec_context: np.ndarray,
                        pre_context: np.ndarray, pre_chunks: np.ndarray,
                        idle: np.ndarray) -> float:
    """``chain_rows_passes`` priced on ``draft``'s cost model for chains of ``gam`` [D]
    draft tokens (``idle`` bool [D]: a γ = 0 sequence whose draft ingests its token)."""
    reps = max(draft.replicas, 1)
    depth = int(gam.max())
    levels_n = np.zeros((reps, depth), dtype=np.int64)
    levels_ctx = np.zeros((reps, depth), dtype=np.int64)
    for g in range(min(reps, len(gam))):
        mine, ctx = gam[g::reps], dec_context[g::reps]
        for j in range(depth):
            live = mine > j
            levels_n[g, j] = int(_sum(live))
            levels_ctx[g, j] = int(_sum(ctx[live]))
    p_new, p_ctx, p_new_ctx, p_sq = prefill_sums(pre_context, pre_chunks)
    out = np.empty((passes_capacity(depth, reps), 7))
    k = chain_rows_passes(out, len(gam), int(_sum(dec_context)), len(pre_chunks), p_new, p_ctx,
                          p_new_ctx, p_sq, levels_n, levels_ctx, depth, int(_sum(idle)),
                          int(_sum(dec_context[idle])), reps)
    _price(draft.cost, out, k)
    return draft_total(out, k)


def per_sequence_seconds(draft, widths: np.ndarray, dec_context: np.ndarray,
                         pre_context: np.ndarray, pre_chunks: np.ndarray,
                         sync: np.ndarray | None = None) -> float:
    """Seconds of the draft passes with a shape per decoding sequence (widths [D, m]):
    sequences with shallower shapes drop out of later passes; ``sync`` int64 [D] adds the
    tokens each sequence's draft ingests in the first pass."""
    dcost = draft.cost
    if draft.block:  # one block as deep as the deepest shape, over every row
        depth = int((widths > 0).sum(axis=1).max(initial=0))
        group_n, group_ctx = _replica_groups(dec_context, draft.replicas)
        passes = np.empty((passes_capacity(1, draft.replicas), 7))
        k = draft_passes(passes, len(dec_context), float(_sum(dec_context)), [1] * depth,
                         False, 0, draft.replicas, group_n, group_ctx, True, len(pre_chunks),
                         *prefill_sums(pre_context, pre_chunks), True, _parallel(draft))
        _price(dcost, passes, k)
        return draft_total(passes, k)
    if draft.one_pass:
        from hardware.draft import one_pass_seconds

        speculating = bool(widths.size and (widths[:, 0] > 0).any())
        return one_pass_seconds(draft, len(dec_context) + len(pre_chunks)) \
            if speculating else 0.0
    gam = (widths > 0).sum(axis=1)  # [D]
    if len(gam) and int(gam.max()) > 0 and not (widths > 1).any():
        # chains, the draft of every sequence at γ = 0 ingesting its token (every_step)
        # and no other: the passes the compiled walk prices
        extra = np.zeros(len(gam), dtype=np.int64) if sync is None else sync
        if (extra[gam > 0] == 0).all() and (extra[gam == 0] == 1).all():
            return _chain_rows_seconds(draft, gam, dec_context, pre_context, pre_chunks,
                                       extra > 0)
    if widths.shape[1] == 0:  # no levels at all: at most the ingest pass
        widths = np.zeros((len(dec_context), 1), dtype=np.int64)
    from hardware.draft import level_feeds

    feed = level_feeds(widths)  # [D, m]: tokens pass j feeds per sequence
    if sync is not None:
        feed[:, 0] += sync
    if draft.replicas > 1:
        from hardware.draft import chain_draft_seconds, tree_rows_draft_seconds

        total = tree_rows_draft_seconds(draft, widths, dec_context) if (widths > 1).any() \
            else chain_draft_seconds(draft, (widths > 0).sum(axis=1), dec_context)
        if sync is not None and (sync > 0).any():
            total += dcost.pass_seconds(sync[sync > 0], dec_context[sync > 0])
        if len(pre_chunks):
            total += dcost.pass_seconds(pre_chunks, pre_context)
        return total
    before = np.cumsum(feed, axis=1) - feed  # [D, m]: nodes fed before pass j
    tree = bool((widths > 1).any())
    total = 0.0
    for j in range(widths.shape[1]):
        live = feed[:, j] > 0
        new_j, ctx_j = feed[live, j], dec_context[live] + before[live, j]
        # level-j nodes attend their context, j ancestors and themselves
        keys = new_j * (dec_context[live] + j + 1.0) if tree else None
        if j == 0 and len(pre_chunks):
            new_j = np.concatenate((new_j, pre_chunks))
            ctx_j = np.concatenate((ctx_j, pre_context))
            if keys is not None:
                keys = np.concatenate((keys, causal_keys(pre_chunks, pre_context)))
        if len(new_j):
            total += dcost.pass_seconds(new_j, ctx_j, keys)
    return total


def one_level_deeper(widths: np.ndarray) -> np.ndarray:
    """int64 [D, m + 1]: each speculating chain extended by one guess (the draft drafting
    past its last guess while the verify runs)."""
    depth = (widths > 0).sum(axis=1)  # [D]
    out = np.concatenate((widths, np.zeros((len(widths), 1), dtype=np.int64)), axis=1)
    out[np.arange(len(widths)), depth] = depth > 0
    return out
