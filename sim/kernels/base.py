"""What the compiled kernels share: the state columns they read, the measured timing's
pricer, a verify without a draft, an accepted depth drawn by an acceptance model's tables.

Plain Python here; ``sim.steady_kernel`` compiles them with numba (every function of
``sim.kernels`` is compiled with the others: see ``sim.steady_kernel`` for why one cache
serves them all).
"""

from __future__ import annotations

from hardware.timing.analytic import HOST_S, stage_parts
from sim import slots
from sim.kernels.rules import kept_blocks
from workloads import acceptance

# The state columns the kernel reads, written out here: numba bakes them into the compiled
# code, so a column moved in sim.slots must be moved here too (checked on import).
TARGET, FILLED, EMITTED, KV, OUTPUT, STREAM, BLOCKS, COUNTS = 1, 2, 3, 4, 5, 6, 7, 13
if (TARGET, FILLED, EMITTED, KV, OUTPUT, STREAM, BLOCKS, COUNTS) != (
        slots.TARGET, slots.FILLED, slots.EMITTED, slots.KV, slots.OUTPUT, slots.STREAM,
        slots.BLOCKS, slots.COUNTS):
    raise ImportError("sim/kernels/base.py: its state columns differ from sim/slots.py's")
# the acceptance kind drawn as one geometric run (workloads.acceptance, likewise written out)
GEOMETRIC = 2
# walk's shape modes besides a static policy's (0)
ADAPTIVE, LADDER = 1, 2
if GEOMETRIC != acceptance.KERNEL_GEOMETRIC:
    raise ImportError("sim/kernels/base.py: its acceptance kinds differ from "
                      "workloads/acceptance.py's")

# the scalars of a one-stage measured timing, in the order ``params[0]`` holds them
PARAM_NAMES = ("a0", "a_seq", "a_new", "a_kv", "a_key", "sol_per_token", "sol_per_key",
               "sol_weight", "sol_per_kv", "host_s", "fixed_s", "per_seq_s", "overlap",
               "sol_routed", "miss", "head_tokens_per_seq", "elem", "beside")


def bisect_left(g, x):
    """``bisect.bisect_left`` on a sorted float64 array."""
    lo, hi = 0, len(g)
    while lo < hi:
        mid = (lo + hi) // 2
        if g[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def interp(grid, vals, x):
    """``hardware.timing.measured._interp``."""
    if x <= grid[0]:
        return vals[0] * x / grid[0]
    i = bisect_left(grid, x)
    if i == len(grid):
        i -= 1
    x0, x1 = grid[i - 1], grid[i]
    return vals[i - 1] + (vals[i] - vals[i - 1]) * (x - x0) / (x1 - x0)


def pass_seconds(new, kv, keys, n, params, bound):
    """(seconds, bound code: 0 compute, 1 memory, 2 comm, 3 host; -1 without ``bound``) of
    one pass: ``seconds`` / ``seconds_bound`` of a one-stage timing whose ``kernel_params``
    are ``params``. A measured timing's are the scalars, the token grid, the per-token,
    lm_head and all-reduce tables, the decode kernel's table, batches and lengths; an
    analytic one's (roofline, paper) its stage vector and no grid: its formula,
    ``hardware.timing.analytic.stage_parts``."""
    p, grid, lin, head, allreduce, dec, dec_batches, dec_lengths = params
    if len(grid) == 0:
        compute, memory, comm, seconds = stage_parts(p, new, kv, keys, n)
        if not bound:
            return seconds, -1
        code, top = 0, compute  # base.largest
        if memory > top:
            code, top = 1, memory
        if comm > top:
            code, top = 2, comm
        if p[HOST_S] > top:
            code = 3
        return seconds, code
    # _stage_fixed: a pass of at most ``beside`` tokens reads lin's second half
    o = len(grid) if p[17] > 0.0 and new <= p[17] else 0
    i = bisect_left(grid, new)
    if i == 0:
        fixed = lin[o] * new / grid[0]
    else:
        if i == len(grid):
            i -= 1
        fixed = lin[o + i - 1] + (lin[o + i] - lin[o + i - 1]) * (new - grid[i - 1]) \
            / (grid[i] - grid[i - 1])
    fixed = fixed + p[0] + p[1] * n + p[2] * new
    # _stage_rest
    busy = fixed + p[3] * kv + p[4] * keys
    if len(head):
        cap = p[15] * n
        busy += interp(grid, head, new if new < cap else cap)
    if dec.shape[0] and n > 0:
        # aic.decode_row at n: the two columns around the mean KV length, then the slope
        length = kv / n
        j = bisect_left(dec_lengths, length)
        last = len(dec_lengths) - 1
        if n <= dec_batches[0]:
            b, w = 0, -1.0
        else:
            b = min(bisect_left(dec_batches, n), len(dec_batches) - 1)
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
    comm = interp(grid, allreduce, new) if len(allreduce) else 0.0
    code, top = 0, compute
    if memory > top:
        code, top = 1, memory
    if comm > top:
        code, top = 2, comm
    if host > top:
        code = 3
    return seconds, code


def decode_one(st, i, held, block_size, rolls_back):
    """Row ``i``'s verify without a draft (``sim.step.advance``): one token emitted, one
    verify step counted, the blocks it keeps of the ``held`` it had after the grant
    (``BlockManager.rolled_back``); returns those kept."""
    st[i, KV] += 1
    keep = kept_blocks(st[i, KV], held, block_size, rolls_back)
    st[i, BLOCKS] = keep
    st[i, EMITTED] += 1
    st[i, COUNTS] += 1
    return keep


def accepted_depth(rng, stream, position, row, ring, tape, table):
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
