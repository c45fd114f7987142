"""The compiled kernels: many iterations of a replica in one call, the same records.

``stretch`` does, one iteration at a time, what ``sim.steady.plan_numpy`` does with arrays
-- price the iteration as ``hardware.timing.measured`` prices a one-stage pass (``_pass``:
the same operations in the same order as ``_stage_fixed``, ``_interp``, ``aic.decode_row``,
``_stage_rest``, ``base.largest``), stop at the next event of anyone else, grant each
sequence's block for its next token if the pool has them all, roll back, emit, and
release the blocks of the sequences that emit their last token -- on the batch's own copy
of its state rows. ``walk`` does what the reference path does for any iteration it can
form as vLLM v1's scheduler would (``sim.steady_walk``): the budget walk, admissions, the
target's and the draft's passes, the verifies' accepted depths, the advance.

They are compiled with numba when numba is installed (``SPECSIM_NUMBA=0`` turns that
off), each kind on its first use; without numba ``sim.steady`` plans its stretches with
numpy and everything else takes the reference path, and tests check that all give the
same records. They live in one file because numba's disk cache is keyed on a function's
own file: a kernel in another file would keep a stale copy of a helper changed here.

The timings' parameters come from ``MeasuredTiming.kernel_params``: scalars in
``PARAM_NAMES`` order, then the tables.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from sim import slots
from workloads import acceptance

# The state columns the kernel reads, written out here: numba bakes them into the compiled
# code, and its disk cache is keyed on this file's text alone, so a column moved in
# sim.slots must be moved here too (checked on import, or a stale cache would use the old
# layout).
TARGET, FILLED, EMITTED, KV, OUTPUT, STREAM, BLOCKS, COUNTS = 1, 2, 3, 4, 5, 6, 7, 13
if (TARGET, FILLED, EMITTED, KV, OUTPUT, STREAM, BLOCKS, COUNTS) != (
        slots.TARGET, slots.FILLED, slots.EMITTED, slots.KV, slots.OUTPUT, slots.STREAM,
        slots.BLOCKS, slots.COUNTS):
    raise ImportError("sim/steady_kernel.py: its state columns differ from sim/slots.py's")
# the acceptance kind drawn as one geometric run (workloads.acceptance, likewise written out)
GEOMETRIC = 2
# walk's shape modes besides a static policy's (0)
ADAPTIVE, LADDER = 1, 2
if GEOMETRIC != acceptance.KERNEL_GEOMETRIC:
    raise ImportError("sim/steady_kernel.py: its acceptance kinds differ from "
                      "workloads/acceptance.py's")

# the scalars of a one-stage measured timing, in the order ``params[0]`` holds them
PARAM_NAMES = ("a0", "a_seq", "a_new", "a_kv", "a_key", "sol_per_token", "sol_per_key",
               "sol_weight", "sol_per_kv", "host_s", "fixed_s", "per_seq_s", "overlap",
               "sol_routed", "miss", "head_tokens_per_seq", "elem")


def _bisect_left(g, x):
    """``bisect.bisect_left`` on a sorted float64 array."""
    lo, hi = 0, len(g)
    while lo < hi:
        mid = (lo + hi) // 2
        if g[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _interp(grid, vals, x):
    """``hardware.timing.measured._interp``."""
    if x <= grid[0]:
        return vals[0] * x / grid[0]
    i = _bisect_left(grid, x)
    if i == len(grid):
        i -= 1
    x0, x1 = grid[i - 1], grid[i]
    return vals[i - 1] + (vals[i] - vals[i - 1]) * (x - x0) / (x1 - x0)


def _pass(new, kv, keys, n, p, grid, lin, head, allreduce, dec, dec_batches, dec_lengths,
          bound):
    """(seconds, bound code: 0 compute, 1 memory, 2 comm, 3 host; -1 without ``bound``) of
    one pass: ``MeasuredTiming.seconds`` / ``seconds_bound`` of a one-stage timing."""
    # _stage_fixed
    i = _bisect_left(grid, new)
    if i == 0:
        fixed = lin[0] * new / grid[0]
    else:
        if i == len(grid):
            i -= 1
        fixed = lin[i - 1] + (lin[i] - lin[i - 1]) * (new - grid[i - 1]) / (grid[i] - grid[i - 1])
    fixed = fixed + p[0] + p[1] * n + p[2] * new
    # _stage_rest
    busy = fixed + p[3] * kv + p[4] * keys
    if len(head):
        cap = p[15] * n
        busy += _interp(grid, head, new if new < cap else cap)
    if dec.shape[0] and n > 0:
        # aic.decode_row at n: the two columns around the mean KV length, then the slope
        length = kv / n
        j = _bisect_left(dec_lengths, length)
        last = len(dec_lengths) - 1
        if n <= dec_batches[0]:
            b, w = 0, -1.0
        else:
            b = min(_bisect_left(dec_batches, n), len(dec_batches) - 1)
            w = (n - dec_batches[b - 1]) / (dec_batches[b] - dec_batches[b - 1])
        if j == 0:
            if w < 0.0:
                busy += dec[0, 0]
            else:
                busy += dec[b - 1, 0] + (dec[b, 0] - dec[b - 1, 0]) * w
        else:
            if j > last:
                j = last
            if w < 0.0:
                r0, r1 = dec[0, j - 1], dec[0, j]
            else:
                r0 = dec[b - 1, j - 1] + (dec[b, j - 1] - dec[b - 1, j - 1]) * w
                r1 = dec[b - 1, j] + (dec[b, j] - dec[b - 1, j]) * w
            slope = (r1 - r0) / (dec_lengths[j] - dec_lengths[j - 1])
            busy += r0 + slope * (length - dec_lengths[j - 1])
    host = p[9]
    if p[12] != 0.0:
        t = busy if busy > host else host
    else:
        t = busy + host
    seconds = t + p[10] + p[11] * n
    if not bound:
        return seconds, -1
    # base.largest of the speed-of-light compute and memory, the all-reduce and the host
    compute = p[5] * new + p[6] * keys
    memory = p[7] + p[8] * kv + p[13] * (1.0 - p[14] ** new) + p[16] * new
    comm = _interp(grid, allreduce, new) if len(allreduce) else 0.0
    code, top = 0, compute
    if memory > top:
        code, top = 1, memory
    if comm > top:
        code, top = 2, comm
    if host > top:
        code = 3
    return seconds, code


def _decode_one(st, i, held, block_size):
    """Row ``i``'s verify without a draft (``sim.step.advance``): one token emitted, one
    verify step counted, the KV rolled back to the blocks its tokens need, at most the
    ``held`` it had after the grant (``BlockManager.rolled_back``); returns those kept."""
    st[i, KV] += 1
    keep = (st[i, KV] + block_size - 1) // block_size
    if keep > held:
        keep = held
    st[i, BLOCKS] = keep
    st[i, EMITTED] += 1
    st[i, COUNTS] += 1
    return keep


def stretch(st, last_chunk, free, cap, block_size, now, horizon, max_steps, first_finish,
            straddle, bound, n_dec, chunks, first_delay, first_v, first_code,
            p, grid, lin, head, allreduce, dec, dec_batches, dec_lengths):
    """Plan a steady stretch of the decoding rows ``st`` (int64 [n, N_COLS], running order;
    updated in place to their state after it). Returns (k iterations; then, [k] each: end
    times, target seconds, bound codes, sequences decoding, KV blocks in use after each;
    the gaps (inter-token latencies) of every decoding sequence in every iteration; each
    sequence's last end; the finished rows, in the order they finish, and when; the pool's
    free blocks after the stretch, the finished sequences' blocks not yet returned).

    ``first_finish``: stop after the first iteration that finishes a sequence (a closed
    loop); ``straddle``: the iteration that ends at or after ``horizon`` is the stretch's
    last -- when it is the first, the stretch is that one iteration; else the last item
    returned says where the replica stops for the event before it runs (k_split > 0
    iterations before it; the rows' state then, their last ends, the gaps and finished
    rows so far, the free blocks less the finished ones' and those): ``sim.steady``
    splits the stretch there.

    With ``n_dec < n`` the first iteration is one the scheduler has formed and priced
    (``sim.steady.plan_admitted``): rows ``n_dec:`` prefill their whole prompt in it
    (``chunks`` [n - n_dec] tokens each) and sample their first token, the decoding rows'
    blocks are already granted, and it lasts ``first_delay`` (target ``first_v``, bound
    ``first_code``) whatever ``horizon`` is; the rest are steady.
    """
    n = st.shape[0]
    left = st[:, OUTPUT] - st[:, EMITTED]
    k_max = min(left.min() if first_finish else left.max(), max_steps)
    ends = np.empty(k_max)
    verify = np.empty(k_max)
    codes = np.empty(k_max, dtype=np.int64)
    batch = np.empty(k_max, dtype=np.int64)
    used = np.empty(k_max, dtype=np.int64)
    gaps = np.empty(n * k_max)
    last_end = np.empty(n)
    fin = np.empty(n, dtype=np.int64)
    fin_at = np.empty(n)
    alive = np.ones(n, dtype=np.bool_)
    m, nf, ng, k, held_by_finished = n, 0, 0, 0, 0
    t = now
    k_split, ng_split, nf_split, free_split, held_split = 0, 0, 0, 0, 0
    st_split = st[:0].copy()
    last_split = last_end[:0].copy()
    mixed = n_dec < n
    if mixed:
        m = n_dec  # the first iteration's decoding rows
    while k < k_max:
        stop = False
        if mixed and k == 0:  # formed, granted and priced by the scheduler: it runs
            v, code = first_v, first_code
            end = t + first_delay
            stop = not end < horizon
        else:
            ctx = 0
            extra = 0
            for i in range(n):
                if alive[i]:
                    ctx += st[i, KV]
                    e = (st[i, KV] + block_size) // block_size - st[i, BLOCKS]  # one more
                    if e > 0:
                        extra += e
            new = float(m)
            c = float(ctx)
            # CostModel.pass_seconds(_bound)_sums(n, c, c, n): kv = c + n, causal keys
            v, code = _pass(new, c + new, c + 0.5 * (new + new), new, p, grid, lin, head,
                            allreduce, dec, dec_batches, dec_lengths, bound)
            end = t + (0.0 + v)
            if not end < horizon:
                if not straddle or extra > free:
                    break
                stop = True
                if k:  # the state when it starts: where the replica stops for the event
                    k_split, ng_split, nf_split = k, ng, nf
                    st_split = st.copy()
                    last_split = last_end.copy()
                    free_split, held_split = free - held_by_finished, held_by_finished
            if extra > free:
                break  # someone must be preempted: the full scheduler
            free -= extra
        for i in range(n):
            if not alive[i]:
                continue
            if k == 0 and i >= n_dec:  # its prompt completes: the first token
                chunk = chunks[i - n_dec]
                st[i, FILLED] += chunk
                st[i, KV] += chunk
                st[i, EMITTED] += 1
                last_end[i] = end
                if st[i, EMITTED] >= st[i, OUTPUT]:
                    alive[i] = False
                    free += st[i, BLOCKS]
                    held_by_finished += st[i, BLOCKS]
                    fin[nf] = i
                    fin_at[nf] = end
                    nf += 1
                continue
            need = (st[i, KV] + block_size) // block_size
            held = st[i, BLOCKS] if st[i, BLOCKS] > need else need
            keep = _decode_one(st, i, held, block_size)
            free += held - keep
            gaps[ng] = end - (last_chunk[i] if k == 0 else ends[k - 1])
            ng += 1
            last_end[i] = end
            if st[i, EMITTED] >= st[i, OUTPUT]:
                alive[i] = False
                free += keep
                held_by_finished += keep
                fin[nf] = i
                fin_at[nf] = end
                nf += 1
        ends[k] = end
        verify[k] = v
        codes[k] = code
        batch[k] = m
        used[k] = cap - free
        m = n - nf
        t = end
        k += 1
        if stop or m == 0:
            break
    return (k, ends[:k], verify[:k], codes[:k], batch[:k], used[:k], gaps[:ng], last_end,
            fin[:nf], fin_at[:nf], free - held_by_finished,
            (k_split, st_split, last_split, ng_split, nf_split, free_split, held_split))


def _accepted(rng, stream, position, row, ring, tape, table):
    """``AcceptanceModel.draw`` for one sequence of a batch drawn in order, by the level
    table of ``kernel_tables``: m uniforms (one per level, as ``rng.random((B, m))`` takes
    them row by row) against the coverage of each guessed position's regime; the leading
    run of successes."""
    start = (stream + position) % tape
    acc = 0
    run = True
    for j in range(len(row)):
        u = rng.random()
        if run:
            if u < table[ring[start + j], row[j]]:
                acc += 1
            else:
                run = False
    return acc


def _draft_seconds(n_dec, n_pre, s_ctx, p_new, p_ctx, p_new_ctx, p_sq, feeds, tri, reps,
                   one_pass, group_n, group_ctx, dp):
    """``sim.draft_pricing.shared_shape_seconds`` of one iteration: every decoding sequence
    drafts the shape whose serial passes feed ``feeds`` tokens each (``tri`` >= 0: a tree),
    ``n_pre`` prefill chunks with their sums. One draft replica: the chunks ride in the
    first pass. ``reps`` > 1 (``hardware.draft.tree_draft_seconds``): sequences split round
    robin, group g holding ``group_n[g]`` of them with ``group_ctx[g]`` context, the
    slowest group's passes, then the chunks in a pass of their own. ``one_pass`` (Medusa's
    heads): one pass over every row, split over the replicas (``one_pass_seconds``)."""
    if one_pass:
        if n_dec == 0 or len(feeds) == 0:
            return 0.0
        rows = -(-(n_dec + n_pre) // reps)
        d, _ = _pass(float(rows), 0.0 + rows, 0.0, float(rows), dp[0], dp[1], dp[2], dp[3],
                     dp[4], dp[5], dp[6], dp[7], False)
        return d
    causal_pre = float(p_new_ctx) + 0.5 * float(p_sq + p_new)  # the chunks' causal keys
    if n_dec == 0:
        if not p_new:
            return 0.0
        d, _ = _pass(float(p_new), float(p_ctx + p_new), causal_pre, float(n_pre), dp[0],
                     dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7], False)
        return d
    d = 0.0
    if len(feeds) == 0:  # no guesses: each draft ingests its sequence's new token
        if reps > 1:  # (vLLM v1 drafts every step; draft_sync every_step) in one pass
            d, _ = _pass(float(n_dec), float(s_ctx + n_dec), float(s_ctx) + 0.5 * (2 * n_dec),
                         float(n_dec), dp[0], dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7],
                         False)
            if p_new:
                dj, _ = _pass(float(p_new), float(p_ctx + p_new), causal_pre, float(n_pre),
                              dp[0], dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7], False)
                d += dj
            return d
        new = n_dec + p_new  # with the prefill chunks
        d, _ = _pass(float(new), float(s_ctx + p_ctx + new),
                     float(s_ctx + p_new_ctx) + 0.5 * float(n_dec + p_sq + new),
                     float(n_dec + n_pre), dp[0], dp[1], dp[2], dp[3], dp[4], dp[5], dp[6],
                     dp[7], False)
        return d
    if reps > 1:
        for g in range(reps):
            b = group_n[g]
            if b == 0:
                break
            total = 0.0
            before = 0
            for j in range(len(feeds)):
                fj = feeds[j]
                dj, _ = _pass(float(b * fj), float(group_ctx[g] + b * before + b * fj),
                              float(fj * (group_ctx[g] + b * (j + 1))), float(b), dp[0],
                              dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7], False)
                total += dj
                before += fj
            if total > d:
                d = total
        if p_new:
            dj, _ = _pass(float(p_new), float(p_ctx + p_new), causal_pre, float(n_pre),
                          dp[0], dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7], False)
            d += dj
        return d
    before = 0
    for j in range(len(feeds)):
        fj = feeds[j]
        ctx = s_ctx + n_dec * before
        s_new, s_c, s_nc, s_sq = n_dec * fj, ctx, fj * ctx, n_dec * fj * fj
        m = n_dec
        if j == 0:
            m += n_pre
            s_new += p_new
            s_c += p_ctx
            s_nc += p_new_ctx
            s_sq += p_sq
        if tri < 0.0:
            dk = float(s_nc) + 0.5 * float(s_sq + s_new)
        else:
            dk = float(fj * (s_ctx + n_dec * (j + 1)))
            if j == 0:
                dk += causal_pre
        dj, _ = _pass(float(s_new), float(s_c + s_new), dk, float(m), dp[0], dp[1], dp[2],
                      dp[3], dp[4], dp[5], dp[6], dp[7], False)
        d += dj
        before += fj
    return d


def _adaptive_gamma(st, order, n_alive, alpha, max_g, reps, one_pass, group_n, group_ctx,
                    tp, dp):
    """``sim.policies.AdaptiveGamma.shape`` for chains (its ``price_chains``:
    ``IterationPricer.decode_chain_seconds``): over every decoding row (the scheduler asks
    the policy before its budget walk), the chain γ in 0..``max_g`` with the most expected
    tokens per second, D·E(α̂, γ) / seconds, the first on a tie."""
    nd, sc = 0, 0
    group_n[:] = 0
    group_ctx[:] = 0
    for o in range(n_alive):
        i = order[o]
        if st[i, TARGET] == st[i, FILLED]:
            if reps > 1:
                group_n[nd % reps] += 1
                group_ctx[nd % reps] += st[i, KV]
            nd += 1
            sc += st[i, KV]
    if nd == 0:
        return 0
    draft = np.zeros(max_g + 1)  # draft_pricing.chain_prefix_seconds
    if one_pass:
        rows = -(-nd // reps)
        one, _ = _pass(float(rows), 0.0 + rows, 0.0, float(rows), dp[0], dp[1], dp[2], dp[3],
                       dp[4], dp[5], dp[6], dp[7], False)
        draft[1:] = one
    elif reps > 1:  # hardware.draft.tree_draft_prefix_seconds of a chain
        for g in range(reps):
            b = group_n[g]
            if b == 0:
                break
            total = 0.0
            for j in range(max_g):
                dj, _ = _pass(float(b), float(group_ctx[g] + b * j + b),
                              float(group_ctx[g] + b * (j + 1)), float(b), dp[0], dp[1],
                              dp[2], dp[3], dp[4], dp[5], dp[6], dp[7], False)
                total += dj
                if total > draft[j + 1]:
                    draft[j + 1] = total
    else:
        total = 0.0
        for j in range(max_g):
            ctx = sc + nd * j
            dj, _ = _pass(float(nd), float(ctx + nd), float(ctx) + 0.5 * float(nd + nd),
                          float(nd), dp[0], dp[1], dp[2], dp[3], dp[4], dp[5], dp[6], dp[7],
                          False)
            total += dj
            draft[j + 1] = total
    best, best_rate, expected = 0, -1.0, 1.0  # policies.chain_expectations, term by term
    for g in range(max_g + 1):
        if g:
            expected = 1.0 + alpha * expected
        v = 1 + g
        new = nd * v
        seconds, _ = _pass(float(new), float(sc + new), float(v * sc) + 0.5 * float(nd * v * v
                                                                                     + new),
                           float(nd), tp[0], tp[1], tp[2], tp[3], tp[4], tp[5], tp[6], tp[7],
                           False)
        rate = nd * expected / (draft[g] + seconds)
        if rate > best_rate:
            best, best_rate = g, rate
    return best


def walk(st, n, n_wait, arr_at, next_at, slots, stack, n_free, last_chunk, free, cap,
         block_size, max_tokens, chunk_tokens, chunked, max_seqs, lookahead, now, horizon,
         max_steps, first_finish, bound, gaps, row, nodes, feeds, tri, reps, one_pass,
         mode, alpha, smoothing, ladder, by_running, rng, kind, p_geo, runs, ring, tape,
         table, tp, dp):
    """Plan iterations of a replica: the walk of ``sim.scheduling.vllm_v1.plan_vllm_v1``
    (each running row in order gets min(what it wants, the budget left): a decoder its
    verify, 1 + ``nodes`` tokens, a prefilling row the rest of its prompt, at most
    ``chunk_tokens``; the blocks for its tokens plus ``lookahead`` slots), then
    ``admit_waiting`` with what is left (first come first served, while a slot, the budget
    and the blocks for the first chunk last), priced as ``IterationPricer.price`` prices
    the batch (the target pass, and with a draft its ``shared_shape_seconds``), then
    ``sim.step.advance`` -- iteration after iteration, on the batch's own rows.

    ``st`` int64 [n + n_wait, N_COLS]: the running rows in running order, then ``n_wait``
    requests in queue order (RID, TARGET, OUTPUT, STREAM set), updated in place; each of
    these is in the queue from ``arr_at`` (float64 [n_wait]; -inf: it waits now), and the
    first request beyond them from ``next_at`` (-inf: one waits now; inf: none before
    ``horizon``). An arrival is seen by the iterations that start after it; one at the very
    end of an iteration (after the first) may come before or after the replica moves on,
    as SimPy orders the two events, so the walk stops there. ``slots`` int64 [n + n_wait]:
    the running rows' slots; an admitted row takes the slot ``Replica.admit`` would give
    it, the last of the free-slot stack ``stack`` (int64, ``n_free`` entries), and a
    finished row's slot goes back on it as ``Replica.finish`` puts it back (both updated in
    place). ``gaps`` float64: room for the inter-token gaps (the walk stops before an
    iteration whose gaps would not fit).

    Speculation (``nodes`` > 0): every decoder drafts the shape ``row`` (int64 [m]); the
    draft's serial passes feed ``feeds`` tokens per sequence each, on ``reps`` replicas of
    the draft, or its heads run in one pass (``one_pass``: ``_draft_seconds``). ``mode`` 1
    (``ADAPTIVE``): each iteration's chain is ``AdaptiveGamma``'s (``_adaptive_gamma``,
    ``row`` the deepest: its γ ones), its α̂ folded in after each verify as ``observe``
    folds it (EMA weight ``smoothing``, from ``alpha``); ``mode`` 2 (``LADDER``): the chain
    of ``ladder[batch size]`` (``BatchLadder``: the running requests with ``by_running``,
    else the decoding ones; its last γ past its end); with either, γ = 0 feeds each draft
    its new token (``draft_sync: every_step``). A tree's
    verify attends ``tri`` (``sim.shapes.tree_key_term``; < 0 for a chain: causal); each
    decoder's accepted depth comes from the acceptance model's ``kernel_tables``
    (``kind``, ``p_geo``, ``runs``, ``ring``, ``tape``, ``table``):
    drawn from ``rng`` (a ``numpy.random.Generator``, the replica's) in running order --
    one uniform per level against ``table`` (``_accepted``), or one geometric draw with
    success probability ``p_geo`` (``kind`` 2) -- or, with ``rng`` None, the replayed run
    ``runs[(stream + position) % tape]``, each capped at the depth;
    ``tp`` and ``dp`` are the target's and the draft's timing parameters
    (``MeasuredTiming.kernel_params``). Without speculation ``rng`` is None and ``runs``,
    ``dp`` unused.

    It stops *before* an iteration it cannot form as the scheduler would (a preemption, a
    draft cut by the budget, a request beyond those it holds to admit, nothing to
    schedule) or that admits and ends at or after ``horizon``; after an iteration that
    ends there (the event comes while it runs), after ``max_steps``, with
    ``first_finish`` after the first that finishes a request, or when nobody is left.

    Returns (k; the policy's α̂ after it (``alpha`` but with ``ADAPTIVE``); the iteration
    rows, float64 [4, k] and int64 [10, k]: the fields of
    ``sim.log.IterationLog``'s tables in its order, the bound as a code (0 compute, 1
    memory, 2 comm, 3 host, -1 none), the replica left 0; the number of gaps; [n + n_wait]
    each row's last emission and its first token's time (NaN: none in the walk); the rows
    admitted and the iteration of each; the finished rows in the order they finish and
    when; the pool's free blocks and the stack's free slots after it; and where the replica
    stops for the event before the last iteration, if it comes after others: k_split > 0
    iterations before it, the rows, last emissions, first tokens and rows alive then, the
    gaps and finished rows so far, the free blocks, the stack and its free slots then).
    """
    rows = st.shape[0]
    verify = 1 + nodes
    depth = 0
    for j in range(len(row)):
        if row[j] > 0:
            depth += 1
    max_g = depth
    row = row.copy()  # this iteration's shape (adaptive: a chain of the policy's γ)
    all_feeds = feeds
    floats = np.zeros((4, max_steps))  # the iteration rows' float and int fields
    ints = np.zeros((10, max_steps), dtype=np.int64)
    last_end = np.zeros(rows)
    last_end[:n] = last_chunk
    first_at = np.full(rows, np.nan)
    adm_iter = np.empty(max(n_wait, 1), dtype=np.int64)
    fin = np.empty(rows, dtype=np.int64)
    fin_at = np.empty(rows)
    take = np.zeros(rows, dtype=np.int64)
    decoding = np.zeros(rows, dtype=np.bool_)
    alive = np.zeros(rows, dtype=np.bool_)
    alive[:n] = True
    order = np.arange(rows)  # the rows alive, in running order: the first n_alive
    prefilling = np.empty(rows, dtype=np.int64)  # an iteration's prefill rows, in order
    group_n = np.zeros(max(reps, 1), dtype=np.int64)  # decoders per draft replica
    group_ctx = np.zeros(max(reps, 1), dtype=np.int64)  # and their context
    n_alive, adm, k, ng, nf = n, 0, 0, 0, 0
    t = now
    k_split, ng_split, nf_split, free_split, nfs_split = 0, 0, 0, 0, 0
    st_split = st[:0].copy()
    last_split = last_end[:0].copy()
    first_split = first_at[:0].copy()
    alive_split = alive[:0].copy()
    stack_split = stack[:0].copy()
    while k < max_steps and n_alive + (n_wait - adm) > 0:
        if mode:  # the policy's shape for this iteration (asked first, as it is)
            if mode == ADAPTIVE:
                g = _adaptive_gamma(st, order, n_alive, alpha, max_g, reps, one_pass,
                                    group_n, group_ctx, tp, dp)
            else:
                size = n_alive
                if not by_running:  # the decoding rows
                    size = 0
                    for o in range(n_alive):
                        if st[order[o], TARGET] == st[order[o], FILLED]:
                            size += 1
                g = ladder[size if size < len(ladder) else len(ladder) - 1]
            nodes, depth, verify, feeds = g, g, 1 + g, all_feeds[:g]
            for j in range(max_g):
                row[j] = 1 if j < g else 0
        # 1. the budget walk in running order, and the blocks for each scheduled row
        budget = max_tokens
        extra = 0
        cut = False
        n_dec, s_ctx, n_pre, p_new, p_ctx, p_new_ctx, p_sq = 0, 0, 0, 0, 0, 0, 0
        group_n[:] = 0
        group_ctx[:] = 0
        for o in range(n_alive):
            i = order[o]
            take[i] = 0
            left = st[i, TARGET] - st[i, FILLED]
            want = verify if left == 0 else (left if left < chunk_tokens else chunk_tokens)
            got = want if want < budget else budget
            if got <= 0:
                continue
            if left == 0 and got < want:
                cut = True  # its draft is cut to fit: a shape of its own
                break
            take[i] = got
            budget -= got
            e = (st[i, KV] + got + lookahead + block_size - 1) // block_size - st[i, BLOCKS]
            if e > 0:
                extra += e
            decoding[i] = left == 0
            if left == 0:
                if reps > 1:  # the draft replica this decoder's drafts go to
                    group_n[n_dec % reps] += 1
                    group_ctx[n_dec % reps] += st[i, KV]
                n_dec += 1
                s_ctx += st[i, KV]
            else:
                prefilling[n_pre] = i
                n_pre += 1
                p_new += got
                p_ctx += st[i, KV]
                p_new_ctx += got * st[i, KV]
                p_sq += got * got
        if cut or extra > free or ng + n_dec > len(gaps):
            break  # someone must be preempted (the full scheduler), or no room for gaps
        # 3. admissions (nobody was preempted), counted before anything changes
        f = free - extra
        a = 0
        beyond = False
        while n_alive + a < max_seqs and budget > 0:
            w = adm + a
            came = next_at if w == n_wait else arr_at[w]
            if not came < t:  # not in the queue yet: at the iteration's start, unsure
                beyond = came == t and k > 0
                break
            if w == n_wait:
                beyond = True  # a request the walk does not hold
                break
            chunk = st[n + w, TARGET]
            if chunked:
                if chunk_tokens < chunk:
                    chunk = chunk_tokens
                if budget < chunk:
                    chunk = budget
            need = (chunk + block_size - 1) // block_size
            if chunk > budget or need > f:
                break
            take[n + w] = chunk
            a += 1
            budget -= chunk
            f -= need
            n_pre += 1
            p_new += chunk
            p_sq += chunk * chunk
        if beyond or n_dec + n_pre == 0:
            break  # a request the walk does not hold or may not see, or nothing to run
        # IterationPricer.price: the target pass of the verifies and the prefill chunks
        new = n_dec * verify + p_new
        if tri < 0.0:  # CostModel's causal count
            keys = float(verify * s_ctx + p_new_ctx) + 0.5 * float(n_dec * verify * verify
                                                                    + p_sq + new)
        else:  # the tree mask
            keys = (float(verify * s_ctx) + n_dec * tri + float(p_new_ctx)
                    + 0.5 * float(p_sq + p_new))
        v, code = _pass(float(new), float(s_ctx + p_ctx + new), keys, float(n_dec + n_pre),
                        tp[0], tp[1], tp[2], tp[3], tp[4], tp[5], tp[6], tp[7], bound)
        # ... and the draft's passes (draft_pricing.shared_shape_seconds)
        d = 0.0
        if nodes > 0 or mode:
            d = _draft_seconds(n_dec, n_pre, s_ctx, p_new, p_ctx, p_new_ctx, p_sq, feeds, tri,
                               reps, one_pass, group_n, group_ctx, dp)
        end = t + (d + v)
        last = not end < horizon
        if last and a:
            break  # an admission when the event comes: the scheduler's
        if last and k:  # the state when it starts: where the replica stops for the event
            k_split, ng_split, nf_split = k, ng, nf
            st_split = st.copy()
            last_split = last_end.copy()
            first_split = first_at.copy()
            alive_split = alive.copy()
            free_split, nfs_split = free, n_free
            stack_split = stack.copy()
        # the iteration runs: admissions, grants (below), then sim.step.advance
        pre_running = n_pre - a  # the running rows' prefills; then the admitted rows'
        for j in range(a):
            i = n + adm + j
            prefilling[pre_running + j] = i
            order[n_alive + j] = i
            alive[i] = True
            decoding[i] = False
            st[i, BLOCKS] = (take[i] + block_size - 1) // block_size
            adm_iter[adm + j] = k
            n_free -= 1
            slots[i] = stack[n_free]
        free = f
        adm += a
        n_alive += a
        out = 0
        accepted = 0
        short = 0  # verifies that rejected a guess (AdaptiveGamma.observe's "checked")
        fin_before = nf
        running = n_alive  # the rows of this iteration: order[:running]
        for o in range(running):  # decoders, in running order
            i = order[o]
            if take[i] == 0 or not decoding[i]:
                continue
            held = (st[i, KV] + take[i] + lookahead + block_size - 1) // block_size
            if held < st[i, BLOCKS]:
                held = st[i, BLOCKS]  # the grant: blocks for the verify and the lookahead
            if nodes == 0 and not mode:
                keep = _decode_one(st, i, held, block_size)
                out += 1
            elif nodes == 0:  # the policy's γ = 0 this iteration: a verify of one token
                st[i, COUNTS] += 1
                left = st[i, OUTPUT] - st[i, EMITTED]
                out += 1 if 1 < left else left
                st[i, EMITTED] += 1 if 1 < left else left
                st[i, KV] += 1
                keep = (st[i, KV] + block_size - 1) // block_size
                if keep > held:
                    keep = held
                st[i, BLOCKS] = keep
            else:  # the verify: counters, the accepted depth, emit, roll the KV back
                if rng is None:  # a replayed run (no draws)
                    acc = runs[(st[i, STREAM] + st[i, EMITTED]) % tape]
                elif kind == GEOMETRIC:  # the run before the first rejection, at once
                    acc = rng.geometric(p_geo) - 1
                else:
                    acc = _accepted(rng, st[i, STREAM], st[i, EMITTED], row, ring, tape,
                                    table)
                if acc > depth:
                    acc = depth
                st[i, COUNTS] += 1
                st[i, COUNTS + 1] += 1
                st[i, COUNTS + 2] += nodes
                st[i, COUNTS + 3] += acc
                st[i, COUNTS + 4] += acc + (1 if acc < depth else 0)
                accepted += acc
                short += 1 if acc < depth else 0
                left = st[i, OUTPUT] - st[i, EMITTED]
                out += acc + 1 if acc + 1 < left else left
                st[i, EMITTED] += acc + 1 if acc + 1 < left else left
                st[i, KV] += acc + 1
                keep = (st[i, KV] + block_size - 1) // block_size
                if keep > held:
                    keep = held
                st[i, BLOCKS] = keep
            free += held - keep
            gaps[ng] = end - last_end[i]
            ng += 1
            last_end[i] = end
            if st[i, EMITTED] >= st[i, OUTPUT]:
                alive[i] = False
                n_alive -= 1
                free += keep
                fin[nf], fin_at[nf] = i, end
                nf += 1
        for o in range(n_pre):  # prefill chunks: running ones in order, then admitted
            i = prefilling[o]
            if o < pre_running:  # the grant (an admitted row took its blocks above)
                need = (st[i, KV] + take[i] + lookahead + block_size - 1) // block_size
                if need > st[i, BLOCKS]:
                    st[i, BLOCKS] = need
            st[i, FILLED] += take[i]
            st[i, KV] += take[i]
            take[i] = 0
            if st[i, FILLED] >= st[i, TARGET]:  # the pass that completes it samples a token
                st[i, EMITTED] += 1
                out += 1
                first_at[i] = end
                last_end[i] = end
                if st[i, EMITTED] >= st[i, OUTPUT]:
                    alive[i] = False
                    n_alive -= 1
                    free += st[i, BLOCKS]
                    fin[nf], fin_at[nf] = i, end
                    nf += 1
        if mode == ADAPTIVE and nodes > 0 and n_dec > 0 and accepted + short > 0:  # observe
            alpha += smoothing * (accepted / (accepted + short) - alpha)
        if nf > fin_before:
            for j in range(fin_before, nf):  # Replica.finish: the slots back, in that order
                stack[n_free] = slots[fin[j]]
                n_free += 1
            kept = 0
            for o in range(running):  # the finished leave the running order
                if alive[order[o]]:
                    order[kept] = order[o]
                    kept += 1
        floats[0, k] = t  # start_at, duration_s, draft_s, verify_s
        floats[1, k] = end - t
        floats[2, k] = d
        floats[3, k] = v
        ints[1, k] = n_dec + n_pre  # batch_size, decode_seqs, prefill_tokens,
        ints[2, k] = n_dec  # verify_tokens, drafted_tokens, accepted_tokens,
        ints[3, k] = p_new  # emitted_tokens, the bound's code, KV blocks used
        ints[4, k] = n_dec * verify
        ints[5, k] = n_dec * nodes
        ints[6, k] = accepted
        ints[7, k] = out
        ints[8, k] = code
        ints[9, k] = cap - free
        t = end
        k += 1
        if last or (first_finish and nf > fin_before):
            break
    return (k, alpha, floats[:, :k], ints[:, :k], ng, last_end, first_at, adm,
            adm_iter[:adm], fin[:nf], fin_at[:nf], free, n_free,
            (k_split, st_split, last_split, first_split, alive_split, ng_split, nf_split,
             free_split, stack_split, nfs_split))


def compiled():
    """``stretch`` compiled by numba (cached on disk where a cache folder is writable), or
    None without numba, with ``SPECSIM_NUMBA=0`` or when numba cannot compile it (the same
    ``stretch`` each call: compiled once per process, on a one-row stretch here, so that
    a failure shows before any record depends on it)."""
    if "stretch" not in _BUILT:
        _BUILT["stretch"] = _build(_jit_stretch)
    return _BUILT["stretch"]


def compiled_walk(draws: bool = False):
    """``walk`` compiled for a replica whose acceptance is drawn from its generator
    (``draws``: ``rng`` a generator) or that draws nothing (``rng`` None: no speculation,
    or replayed runs), as ``compiled`` compiles ``stretch`` -- each kind on its first use
    (a few seconds the first time, then read from numba's cache) -- or None where that
    is."""
    key = "walk+rng" if draws else "walk"
    if key not in _BUILT:
        _BUILT[key] = _build(lambda numba, cache: _jit_walk(numba, cache, draws))
    return _BUILT[key]


def available() -> bool:
    """Whether numba is installed and not turned off (``SPECSIM_NUMBA=0``): the kernels can
    be had, unless numba fails to compile them (known when one is built)."""
    return (os.environ.get("SPECSIM_NUMBA", "1") != "0"
            and importlib.util.find_spec("numba") is not None)


def _build(jit_one):
    """``jit_one(numba, cache)``'s kernel, compiled without a cache where it cannot be
    cached, or None (no numba, ``SPECSIM_NUMBA=0``, or numba cannot compile it)."""
    if os.environ.get("SPECSIM_NUMBA", "1") == "0":
        return None
    try:
        import numba
    except ImportError:
        return None
    for cache in (True, False):
        try:
            return jit_one(numba, cache)
        except Exception:  # noqa: BLE001 -- numba's errors have no common base
            continue  # no writable cache: compile again without one
    return None


def _jitted(numba, cache: bool, fn):
    """``fn`` jitted, the helpers it calls first (it finds them as globals)."""
    jit = numba.njit(cache=cache, nogil=True)
    g = globals()
    for name, helper in _PYTHON.items():
        if g[name] is helper:
            g[name] = jit(helper)
    return jit(fn)


_GRID = np.array([1.0, 1e9])  # the warm-ups' timing: two grid points, one second per token
_PARAMS = (np.zeros(len(PARAM_NAMES)), _GRID, _GRID, np.zeros(0), np.zeros(0),
           np.zeros((0, 1)), np.ones(1), np.ones(1))


def _jit_stretch(numba, cache: bool):
    """``stretch`` jitted and run once on a one-row stretch with the argument types
    ``sim.steady`` passes."""
    kernel = _jitted(numba, cache, stretch)
    st = np.zeros((1, slots.N_COLS), dtype=np.int64)
    st[0, OUTPUT] = 1
    kernel(st, np.zeros(1), 1, 1, 16, 0.0, 1.0, 1, False, True, True, 1,
           np.zeros(0, dtype=np.int64), 0.0, 0.0, 0, *_PARAMS)
    return kernel


def _jit_walk(numba, cache: bool, draws: bool):
    """``walk`` jitted and run once, as ``sim.steady_walk`` calls it for a replica whose
    acceptance is drawn (``draws``: speculating) or not (not speculating): one waiting
    request of two prompt and two output tokens."""
    kernel = _jitted(numba, cache, walk)
    st = np.zeros((1, slots.N_COLS), dtype=np.int64)
    st[0, TARGET] = st[0, OUTPUT] = 2
    kernel(st, 0, 1, np.full(1, -np.inf), np.inf, np.zeros(1, dtype=np.int64),
           np.zeros(1, dtype=np.int64), 1, np.zeros(0), 4, 4, 16, 4, 4, True, 1, 1, 0.0, 1.0,
           2, False, True, np.empty(4), *walk_shape(draws), _PARAMS, _PARAMS)
    return kernel


def walk_shape(spec: bool, row=None, feeds=None, tri=None, rng=None, tables=None,
               reps: int = 1, one_pass: bool = False, smoothing: float | None = None,
               ladder: tuple | None = None) -> tuple:
    """``walk``'s arguments from ``row`` to ``table``: the defaults without speculation (no
    draft, ``rng`` None), else the ones given (``tri`` None: a chain; ``tables``:
    ``AcceptanceModel.kernel_tables``, whose kind decides whether ``rng`` is used;
    ``smoothing``: an adaptive policy's, its α̂ then given per walk: 0.0 here; ``ladder``:
    a batch ladder's γ by batch size and whether the size counts the running requests)."""
    if not spec:
        return (_NO_ROW, 0, _NO_ROW, -1.0, 1, False, 0, 0.0, 0.0, _NO_ROW, False, None, 0,
                0.0, _NO_ROW, np.zeros(1, dtype=np.uint8), 1, np.zeros((1, 1)))
    if row is None:  # a chain of one guess, always accepted (the warm-up)
        row, feeds, rng = np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64), \
            np.random.default_rng(0)
        tables = (acceptance.KERNEL_LEVELS, 0.0, _NO_ROW, np.zeros(2, dtype=np.uint8), 1,
                  np.ones((1, 2)))
    nodes = int(np.cumprod(row).sum())
    draws = tables[0] != acceptance.KERNEL_RUNS
    mode = ADAPTIVE if smoothing is not None else LADDER if ladder is not None else 0
    steps, by_running = ladder if ladder is not None else (_NO_ROW, False)
    return (row, nodes, feeds, -1.0 if tri is None else float(tri), int(reps),
            bool(one_pass), mode, 0.0, 0.0 if smoothing is None else float(smoothing),
            np.asarray(steps, dtype=np.int64), bool(by_running), rng if draws else None,
            *tables)


_NO_ROW = np.zeros(0, dtype=np.int64)


_PYTHON = {name: globals()[name] for name in ("_bisect_left", "_interp", "_pass",
                                              "_decode_one", "_accepted", "_draft_seconds",
                                              "_adaptive_gamma")}
_BUILT: dict = {}  # "stretch", "walk", "walk+rng": the compiled kernels (None: not to be had)
