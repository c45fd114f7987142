"""``sim.steady``'s stretch compiled: one call plans a whole steady stretch."""

from __future__ import annotations

import numpy as np

from sim.kernels.base import BLOCKS, EMITTED, FILLED, KV, OUTPUT, decode_one, pass_seconds
from sim.kernels.rules import ROLLS_BACK, grant


def stretch(st, last_chunk, free, cap, block_size, v1, now, horizon, max_steps, first_finish,
            straddle, bound, n_dec, chunks, first_delay, first_v, first_code,
            p, grid, lin, head, allreduce, dec, dec_batches, dec_lengths):
    """Plan a steady stretch of the decoding rows ``st`` (int64 [n, N_COLS], running order;
    updated in place to their state after it). Returns (k iterations; then, [k] each: end
    times, target seconds, bound codes, sequences decoding, KV blocks in use after each;
    the gaps (inter-token latencies) of every decoding sequence in every iteration; each
    sequence's last end; the finished rows, in the order they finish, and when; the pool's
    free blocks after the stretch, the finished sequences' blocks not yet returned).

    ``v1``: which of vLLM v1's rules apply (``SchedulerLimits.v1``). ``first_finish``: stop
    after the first iteration that finishes a sequence (a closed loop); ``straddle``: the
    iteration that ends at or after ``horizon`` is the stretch's
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
    params = (p, grid, lin, head, allreduce, dec, dec_batches, dec_lengths)
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
                    extra += grant(st[i, KV], 1, 0, st[i, BLOCKS], block_size)  # one more
            new = float(m)
            c = float(ctx)
            # CostModel.pass_seconds(_bound)_sums(n, c, c, n): kv = c + n, causal keys
            v, code = pass_seconds(new, c + new, c + 0.5 * (new + new), new, params, bound)
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
            held = st[i, BLOCKS] + grant(st[i, KV], 1, 0, st[i, BLOCKS], block_size)
            keep = decode_one(st, i, held, block_size, v1[ROLLS_BACK])
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
