"""The CPU tier's rules (``sim.offload``), as plain functions on its int64 arrays.

The tier is a ``sim.kernels.prefix`` cache (``tm``) whose free queue is the LRU order;
each block identity of the GPU pool (``pc_ident`` of its ``pm``, ``keys``, ``starts``) has
at most one copy there. ``stats`` holds its counts (``T_FREE``: blocks in the queue, never
used or evictable; ``T_STORED``: blocks stored; ``T_DROPPED``: offers dropped; ``T_PEAK``:
the most blocks held at once); ``offered`` each GPU slot's blocks offered so far. Every
change goes through ``pc_put`` with the log ``tlog`` (empty: none noted), so that a walk
can take an iteration's changes back (``tier_back``). ``sim.offload.CpuTier`` and
``Loads`` call these as Python, the compiled walk (``sim.kernels.walk``) compiled: one
rule, written once.
"""

from __future__ import annotations

import numpy as np

from sim.kernels.prefix import (
    CACHED,
    DONE,
    DROP_LAST_HIT,
    REF,
    T_HEAD,
    pc_find,
    pc_ident,
    pc_link,
    pc_new_copy,
    pc_node,
    pc_pop,
    pc_put,
    pc_undo,
    pc_unlink,
)

T_FREE, T_STORED, T_DROPPED, T_PEAK = 0, 1, 2, 3
N_STATS = 4


def tier_copy(tm, key, nxt):
    """The tier's copy of identity (``key``, ``nxt``), or -1."""
    t = pc_find(tm, key, nxt)
    return -1 if t < 0 else tm[t + T_HEAD]


def tier_refs(tm, c):
    """Loads that hold copy ``c``."""
    return tm[pc_node(tm, c) + REF]


def tier_idents(pm, keys, starts, rid, a, b):
    """int64 [b - a, 2]: (key, next) of request ``rid``'s blocks ``a`` to ``b`` - 1, as the
    GPU pool keys them."""
    out = np.empty((max(b - a, 0), 2), dtype=np.int64)
    for j in range(a, b):
        key, nxt = pc_ident(pm, keys, starts, rid, j)
        out[j - a, 0] = key
        out[j - a, 1] = nxt
    return out


def tier_offer(tm, tlog, stats, idents):
    """Store the blocks ``idents`` (int64 [n, 2], one request's in block order) that the
    tier lacks and make them all the most recently used, the first last (a request's tail
    is evicted first); drop the offer (``T_DROPPED``) where the new ones find no free or
    evictable block. A copy being loaded stays out of the queue."""
    n = len(idents)
    copies = np.empty(n, dtype=np.int64)
    new, idle = 0, 0
    for j in range(n):
        c = tier_copy(tm, idents[j, 0], idents[j, 1])
        copies[j] = c
        if c < 0:
            new += 1
    for j in range(n):  # out of the queue while room is made: the offer's own are kept
        c = copies[j]
        if c >= 0 and tier_refs(tm, c) == 0:
            pc_unlink(tm, tlog, c)
            idle += 1
    if new > stats[T_FREE] - idle:
        for j in range(n - 1, -1, -1):  # back, as they were
            c = copies[j]
            if c >= 0 and tier_refs(tm, c) == 0:
                pc_link(tm, tlog, c, 0)
        stats[T_DROPPED] += 1
        return
    if new:
        pc_pop(tm, tlog, new)
    for j in range(n - 1, -1, -1):
        c = copies[j]
        if c < 0:
            c = pc_new_copy(tm, tlog, idents[j, 0], idents[j, 1])
            pc_put(tm, tlog, pc_node(tm, c) + REF, 0)
        elif tier_refs(tm, c):
            continue  # being loaded: back in the queue when its load ends
        pc_link(tm, tlog, c, 0)
    # (free as before: a popped block for each new copy, the idle ones back in)
    stats[T_STORED] += new
    if tm[CACHED] > stats[T_PEAK]:
        stats[T_PEAK] = tm[CACHED]


def tier_offer_slot(tm, tlog, stats, offered, pm, keys, starts, slot, rid):
    """Offer the tier GPU slot ``slot``'s (request ``rid``'s) blocks the pool has cached
    since its last offer, of its prompt's full blocks only: vLLM 0.33 offloads at most a
    request's prompt tokens (``OffloadingConnectorScheduler._calc_num_offloadable_tokens``
    with ``offload_prompt_only``, ``CPUOffloadingSpec``'s default True)."""
    done = min(pm[pm[DONE] + slot], starts[rid + 1] - starts[rid])
    a = offered[slot]
    if done > a:
        tier_offer(tm, tlog, stats, tier_idents(pm, keys, starts, rid, a, done))
        offered[slot] = done


def tier_touch(tm, tlog, idents):
    """Make the held, unpinned blocks of ``idents`` the most recently used, the first last
    (a finished request's blocks ranked anew)."""
    for j in range(len(idents) - 1, -1, -1):
        c = tier_copy(tm, idents[j, 0], idents[j, 1])
        if c >= 0 and tier_refs(tm, c) == 0:
            pc_unlink(tm, tlog, c)
            pc_link(tm, tlog, c, 0)


def tier_held(tm, idents):
    """(how many of ``idents``, from the first, the tier holds; whether one of those is
    being loaded)."""
    n, busy = 0, False
    for j in range(len(idents)):
        c = tier_copy(tm, idents[j, 0], idents[j, 1])
        if c < 0:
            break
        n += 1
        if tier_refs(tm, c) > 0:
            busy = True
    return n, busy


def tier_lookup(tm, pm, keys, starts, rid, tokens, hit, block_size):
    """(CPU blocks after the ``hit`` GPU blocks of request ``rid`` about to prefill
    ``tokens`` tokens, at most to ⌊(tokens - 1) / block_size⌋ in all, less the last where
    the GPU lookup drops its last hit; whether one of them is being loaded)."""
    cap = (tokens - 1) // block_size
    if cap <= hit:
        return 0, False
    n, busy = tier_held(tm, tier_idents(pm, keys, starts, rid, hit, cap))
    if n and pm[DROP_LAST_HIT]:
        n -= 1
    return n, busy


def tier_finished(tm, tlog, offered, pm, keys, starts, slot, rid):
    """Request ``rid`` (in GPU slot ``slot``) finished: the blocks it offered are ranked
    anew, the first last (``tier_touch``)."""
    tier_touch(tm, tlog, tier_idents(pm, keys, starts, rid, 0, offered[slot]))


def caches_back(pc, plog, tm, tlog, stats, saved, offered, before):
    """Take an iteration's changes to the GPU prefix cache (``plog``) back, and with a CPU
    tier (``tm`` not empty) the tier's too (``tier_back``)."""
    pc_undo(pc, plog)
    if len(tm):
        tier_back(tm, tlog, stats, saved, offered, before)


def tier_back(tm, tlog, stats, saved, offered, before):
    """Take an iteration's tier changes back: the tier's cells (``tlog``), its counts
    (``saved``) and the slots' offers (``before``)."""
    pc_undo(tm, tlog)
    stats[:] = saved
    offered[:] = before

