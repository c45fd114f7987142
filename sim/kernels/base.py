"""What the compiled kernels share: the state columns they read, the measured timing's
pricer, a verify without a draft, an accepted depth drawn by an acceptance model's tables.

Plain Python here; ``sim.steady_kernel`` compiles them with numba (every function of
``sim.kernels`` is compiled with the others: see ``sim.steady_kernel`` for why one cache
serves them all).
"""

from __future__ import annotations

from hardware.timing.analytic import HOST_S, stage_parts
from hardware.timing.measured import (
    pass_decode,
    pass_decode_weight,
    pass_fixed,
    pass_light,
    pass_table,
    pass_total,
)
from sim import slots
from sim.kernels.rules import kept_blocks
from workloads import acceptance

# The state columns the kernel reads, written out here: numba bakes them into the compiled
# code, so a column moved in sim.slots must be moved here too (checked on import).
RID, TARGET, FILLED, EMITTED, KV, OUTPUT, STREAM, BLOCKS, COUNTS = 0, 1, 2, 3, 4, 5, 6, 7, 13
CACHED = 20  # the prompt tokens a request's first admission found in the prefix cache
SPEC_OFF = 10  # a sticky ladder switched the request's speculation off for good
READY = 12  # a draft drafting ahead has the request's next guesses (draft_overlap: parallel)
ADMIT = 8  # the replica's admission count when the request (re)entered the running set
RESUMED = 9  # 1 while a preempted request re-prefills (its recompute counted apart)
# The walk's rows carry one column past the state's: the number of requests scheduled by
# the step that last scheduled the row (``Replica.scheduled_in``, what a batch ladder keyed
# on ``scheduled`` reads).
SCHEDULED = 21
if (RID, TARGET, FILLED, EMITTED, KV, OUTPUT, STREAM, BLOCKS, COUNTS, CACHED, SPEC_OFF,
        READY, ADMIT, RESUMED, SCHEDULED) != (
            slots.RID, slots.TARGET, slots.FILLED, slots.EMITTED, slots.KV, slots.OUTPUT,
            slots.STREAM, slots.BLOCKS, slots.COUNTS, slots.CACHED, slots.SPEC_OFF, slots.READY,
            slots.ADMIT, slots.RESUMED, slots.N_COLS):
    raise ImportError("sim/kernels/base.py: its state columns differ from sim/slots.py's")
# the acceptance kinds (workloads.acceptance, likewise written out): level draws against a
# table, replayed runs, a geometric run
LEVELS, RUNS, GEOMETRIC, SAMPLED = 0, 1, 2, 3
# the columns of a stack of acceptance tables' ``meta`` (one row per task): the kind, the
# tape, and where the task's runs, ring and table rows start in the stack's arrays
KIND, TAPE, RUNS_AT, RING_AT, TABLE_AT = 0, 1, 2, 3, 4
# walk's shape modes besides a static policy's (0): an adaptive policy's chain for the
# batch, a batch ladder's, and an adaptive policy's chain per sequence (``per_sequence``)
ADAPTIVE, LADDER, ADAPTIVE_SEQ = 1, 2, 3
# what a batch ladder's size counts (``BatchLadder.key``, in this order): the sequences
# decoding in the step, the requests running as it starts, or -- per sequence -- the
# requests scheduled by the step that last scheduled it
LADDER_KEYS = ("decoding", "running", "scheduled")
BY_DECODING, BY_RUNNING, BY_SCHEDULED = 0, 1, 2
if (LEVELS, RUNS, GEOMETRIC, SAMPLED) != (acceptance.KERNEL_LEVELS, acceptance.KERNEL_RUNS,
                                          acceptance.KERNEL_GEOMETRIC,
                                          acceptance.KERNEL_SAMPLED):
    raise ImportError("sim/kernels/base.py: its acceptance kinds differ from "
                      "workloads/acceptance.py's")

# the scalars of a one-stage measured timing, in the order ``params[0]`` holds them
PARAM_NAMES = ("a0", "a_seq", "a_new", "a_kv", "a_key", "sol_per_token", "sol_per_key",
               "sol_weight", "sol_per_kv", "host_s", "fixed_s", "per_seq_s", "overlap",
               "sol_routed", "miss", "head_tokens_per_seq", "elem", "beside")


def pass_seconds(new, kv, keys, n, params, bound):
    """(seconds, bound code: 0 compute, 1 memory, 2 comm, 3 host; -1 without ``bound``) of
    one pass: ``seconds`` / ``seconds_bound`` of a one-stage timing whose ``kernel_params``
    are ``params`` (``pass_parts``)."""
    seconds, compute, memory, comm, host = pass_parts(new, kv, keys, n, params, bound)
    return seconds, bound_code(compute, memory, comm, host) if bound else -1


def pass_parts(new, kv, keys, n, params, parts):
    """(seconds, compute, memory, comm, host) of one stage's pass, its timing's
    ``kernel_params`` ``params``; with ``parts`` False a measured stage's parts are left 0.
    A measured timing's are the scalars, the token grid, the per-token, lm_head and
    all-reduce tables, the decode kernel's table, batches and lengths, priced by the
    measured timing's own pass functions (``hardware.timing.measured``, ``pass_fixed`` ...;
    compute and memory their speed of light, comm the all-reduce); an analytic one's
    (roofline, paper) its stage vector and no grid: its formula,
    ``hardware.timing.analytic.stage_parts``."""
    p, grid, lin, head, allreduce, dec, dec_batches, dec_lengths = params
    if len(grid) == 0:
        compute, memory, comm, seconds = stage_parts(p, new, kv, keys, n)
        return seconds, compute, memory, comm, p[HOST_S]
    b, w = pass_decode_weight(n, dec, dec_batches)
    busy = pass_fixed(new, n, p, grid, lin) + p[3] * kv + p[4] * keys
    busy += pass_table(new if new < p[15] * n else p[15] * n, grid, head)
    busy += pass_decode(kv, n, b, w, dec, dec_lengths)
    seconds = pass_total(busy, n, p)
    if not parts:
        return seconds, 0.0, 0.0, 0.0, 0.0
    compute, memory = pass_light(new, kv, keys, p)
    return seconds, compute, memory, pass_table(new, grid, allreduce), p[9]


def bound_code(compute, memory, comm, host):
    """``hardware.timing.base.largest`` as a code: 0 compute, 1 memory, 2 comm, 3 host."""
    code, top = 0, compute
    if memory > top:
        code, top = 1, memory
    if comm > top:
        code, top = 2, comm
    if host > top:
        code = 3
    return code


def stages_seconds(new, kv, keys, n, stages, hop_fixed, hop_token, bound, stage_s):
    """(seconds, bound code, hop seconds) of one pass through a pipeline's stages, as a
    pipeline timing's ``breakdown`` gives them (measured or roofline): each stage's
    seconds in ``stage_s`` (float64 [S], written) by ``pass_parts`` on that stage's
    ``kernel_params`` (``stages``, a tuple, one per stage), the pass's seconds their sum
    plus S - 1 hops of ``hop_fixed`` + ``hop_token`` x new, its bound the largest of
    compute, memory, comm (the hops' included) and host summed over the stages; -1 without
    ``bound``."""
    compute, memory, comm, host = 0.0, 0.0, 0.0, 0.0
    seconds = 0.0
    for k in range(len(stages)):
        s_s, c_s, m_s, x_s, h_s = pass_parts(new, kv, keys, n, stages[k], bound)
        compute += c_s
        memory += m_s
        comm += x_s
        host += h_s
        stage_s[k] = s_s
        seconds += s_s
    hops = len(stages) - 1
    hop_s = hop_fixed + hop_token * new if hops else 0.0
    comm += hops * hop_s
    seconds += hops * hop_s
    return seconds, bound_code(compute, memory, comm, host) if bound else -1, hop_s


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


def accepted_depth(rng, stream, position, row, meta, p_geo, runs, ring, table, bits, geo):
    """``AcceptanceModel.draw`` for one sequence of a batch drawn in order, by its task's
    tables (a stack of ``kernel_tables``, one per task: ``sim.steady_kernel.stack_tables``;
    the task is the stream's low ``bits`` bits, its own stream the rest; one task and no
    bits for a model without tasks): a replayed run (with ``rng`` None, every task's), one
    geometric draw (``geo``: this task's rows of the call are drawn so), or m uniforms (one
    per level, as ``rng.random((B, m))`` takes them row by row) against the coverage of
    each guessed position's regime -- or, ``SAMPLED``, against a sampling trace's recorded
    acceptance at the guessed position, inside the sequence the verify starts in
    (``specdec.traces.replay_tree_sampled``) -- the depth the leading run of successes.
    Not capped at the depth."""
    task = stream & ((1 << bits) - 1)
    start = ((stream >> bits) + position) % meta[task, TAPE]
    if rng is None:
        return runs[meta[task, RUNS_AT] + start]
    if meta[task, KIND] == RUNS:
        return runs[meta[task, RUNS_AT] + start]
    if geo:
        return rng.geometric(p_geo[task]) - 1
    rows = meta[task, TABLE_AT]
    acc = 0
    run = True
    if meta[task, KIND] == SAMPLED:
        end = runs[meta[task, RUNS_AT] + start]  # the end of the recorded sequence
        for j in range(len(row)):
            u = rng.random()
            if run:
                if start + j < end and u < table[rows + start + j, row[j]]:
                    acc += 1
                else:
                    run = False
        return acc
    at = meta[task, RING_AT] + start
    for j in range(len(row)):
        u = rng.random()
        if run:
            if u < table[rows + ring[at + j], row[j]]:
                acc += 1
            else:
                run = False
    return acc
