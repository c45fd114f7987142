"""The prefix cache's rules (``sim.prefix_cache``), each written once, on one int64 array.

vLLM v1's block pool (lookup, attach, caching, the free queue, eviction) as scalar
functions over ``mem``, one int64 array that holds the whole cache: the reference pool
(``sim.prefix_cache.PrefixCachingBlockManager``) calls them as they are, the compiled walk
(``sim.kernels.walk``) calls compiled copies of them (``sim.steady_kernel``). What each
does in vLLM is in ``sim.prefix_cache``'s docstring; here is how ``mem`` holds it.

- every node of the free queue has a record of ``STRIDE`` cells at ``NODES + STRIDE *
  node`` (a cache line: one miss per node): a cached block is a **copy** ``c`` (0 <= c <
  C, C the pool's blocks) with its neighbours in the queue (``PREV``, ``NEXT``), its
  references (``REF``), its identity (``KEY``, and ``NXT``: the key of the block after it
  under ``next_token_hash``, else 0) and the next copy of the same identity (``CHAIN``,
  -1 at the end; the first cached first); a **run** of uncached blocks is a node C..2C-1
  with its neighbours and its blocks (``COUNT``). Free ids wait on two stacks
  (``COPIES``, ``RUNS``). The queue runs from the sentinel 2C's ``NEXT`` (its head, the
  least recently freed) to its ``PREV`` (its tail); it holds at most C blocks, so at most
  C runs;
- identities map to their chains of copies in an open-addressing table of ``T_STRIDE``
  cells per slot at ``TABLE`` (linear probing, deletion by backward shift; ``T_KEY``,
  ``T_NXT``, ``T_HEAD`` (-1: empty), ``T_TAIL``);
- slot ``s``'s cached copies, in block order, are ``HELD[s * W:s * W + DONE[s]]``.

Every write goes through ``pc_put``, which with a ``log`` (a non-empty int64 array) first
notes the cell's old value: ``pc_undo`` puts them back, so that the compiled walk can take
back the caching and admissions of an iteration it hands to the reference path after all
(``pc_room``: what is left of the log). The reference pool passes an empty log.
"""

from __future__ import annotations

import numpy as np

# mem's header: its sizes, the rules that apply, counters, then where each part starts
C_, S_, W_, MASK_, BS_, UNHASHED_FIRST, DROP_LAST_HIT, NEXT_TOKEN_HASH, OUT_ = range(9)
EVICTED, CACHED, N_COPIES, N_RUNS = range(9, 13)
NODES, COPIES, RUNS, TABLE, HELD, DONE = range(13, 19)
HEADER = 19
# a node's record (a copy's or a run's), and a table slot's
PREV, NEXT, COUNT, REF, KEY, NXT, CHAIN = range(7)
STRIDE = 8
T_KEY, T_NXT, T_HEAD, T_TAIL = range(4)
T_STRIDE = 4
# the most log entries one block's change writes (a pop's eviction, with a short shift)
LOG_PER_BLOCK = 24
# the most a CPU tier's offer of one block writes (sim.kernels.tier: unlink, pop, a new
# copy and its references, link)
TIER_LOG = 3 * LOG_PER_BLOCK


def pc_new(capacity, block_size, n_slots, width, unhashed_first, drop_last_hit,
           next_token_hash, out_base):
    """A fresh cache's ``mem``: ``capacity`` blocks in one run in the free queue; ``width``
    blocks at most cached per slot; the flags as ``sim.prefix_cache`` describes them;
    ``out_base`` the first key of requests' output blocks (above every prompt key)."""
    c = capacity
    table = 8
    while table < 2 * c:
        table *= 2
    sizes = (STRIDE * (2 * c + 1), c, c, T_STRIDE * table, n_slots * width, n_slots)
    mem = np.zeros(HEADER + STRIDE + sum(sizes), dtype=np.int64)
    at = HEADER + (-(mem.ctypes.data // 8 + HEADER)) % STRIDE  # records on cache lines
    for field, size in zip(range(NODES, DONE + 1), sizes, strict=True):
        mem[field] = at
        at += size
    mem[C_], mem[S_], mem[W_], mem[MASK_], mem[BS_] = c, n_slots, width, table - 1, block_size
    mem[UNHASHED_FIRST], mem[DROP_LAST_HIT] = unhashed_first, drop_last_hit
    mem[NEXT_TOKEN_HASH], mem[OUT_] = next_token_hash, out_base
    mem[mem[COPIES]:mem[COPIES] + c] = np.arange(c - 1, -1, -1)  # copy 0 taken first
    mem[mem[RUNS]:mem[RUNS] + c - 1] = np.arange(2 * c - 1, c, -1)  # run C is the first
    mem[N_COPIES], mem[N_RUNS] = c, c - 1
    mem[mem[TABLE] + T_HEAD:mem[TABLE] + T_STRIDE * table:T_STRIDE] = -1
    sentinel, run = mem[NODES] + STRIDE * 2 * c, mem[NODES] + STRIDE * c
    mem[sentinel + NEXT] = mem[sentinel + PREV] = c
    mem[run + NEXT] = mem[run + PREV] = 2 * c
    mem[run + COUNT] = c
    return mem


def pc_put(mem, log, at, value):
    """``mem[at] = value``, its old value noted in ``log`` (when ``log`` is not empty)."""
    if len(log):
        n = log[0]
        if 2 * n + 3 > len(log):
            raise RuntimeError("prefix cache: the walk's undo log is full")
        log[2 * n + 1] = at
        log[2 * n + 2] = mem[at]
        log[0] = n + 1
    mem[at] = value


def pc_room(log):
    """Entries ``log`` can still note."""
    return (len(log) - 1) // 2 - log[0]


def pc_undo(mem, log):
    """Put back every cell ``log`` noted, the last first; the log is empty after."""
    for j in range(log[0] - 1, -1, -1):
        mem[log[2 * j + 1]] = log[2 * j + 2]
    log[0] = 0


def pc_node(mem, node):
    """Where ``node``'s record starts in ``mem``."""
    return mem[NODES] + STRIDE * node


# -- identities and the table of copies --------------------------------------------------
def pc_ident(mem, keys, starts, rid, j):
    """(key, next) of request ``rid``'s block ``j``: its prompt block's key (``keys`` empty:
    prompts that share nothing, each block keyed by its place, ``starts[rid] + j``), or
    past its full prompt blocks an output key of its own; with ``next_token_hash`` the
    next prompt block's key, or -(rid + 1) for its own tail or output (else 0)."""
    a = starts[rid]
    n_prompt = starts[rid + 1] - a
    own = len(keys) == 0
    if j < n_prompt:
        key = a + j if own else keys[a + j]
    else:
        key = mem[OUT_] + (rid << 40) + j
    nxt = 0
    if mem[NEXT_TOKEN_HASH]:
        if j + 1 < n_prompt:
            nxt = a + j + 1 if own else keys[a + j + 1]
        else:
            nxt = -(rid + 1)
    return key, nxt


def pc_home(mem, key, nxt):
    """The table slot where identity (``key``, ``nxt``) is first looked for: its 24-bit
    parts times odd constants (keys are numbered densely: this spreads them), folded (no
    product reaches 2**63, so Python and compiled code agree)."""
    m = 0xFFFFFF
    h = ((key & m) * 0x9E3779B1 + ((key >> 24) & m) * 0x85EBCA77
         + ((key >> 40) & m) * 0x27D4EB2F + (nxt & m) * 0xC2B2AE3D)
    return (h ^ (h >> 29)) & mem[MASK_]


def pc_find(mem, key, nxt):
    """Where the table slot of (``key``, ``nxt``) starts, or -1 where no copy of it is
    cached."""
    table, mask = mem[TABLE], mem[MASK_]
    h = pc_home(mem, key, nxt)
    while True:
        t = table + T_STRIDE * h
        if mem[t + T_HEAD] < 0:
            return -1
        if mem[t + T_KEY] == key and mem[t + T_NXT] == nxt:
            return t
        h = (h + 1) & mask


def pc_first(mem, keys, starts, rid, j):
    """The first cached copy of request ``rid``'s block ``j`` (vLLM's ``get_one_block``),
    or -1."""
    key, nxt = pc_ident(mem, keys, starts, rid, j)
    t = pc_find(mem, key, nxt)
    return -1 if t < 0 else mem[t + T_HEAD]


def pc_forget(mem, log, c):
    """Take copy ``c`` out of its identity's chain (and the identity out of the table with
    its last copy): ``c`` was evicted."""
    table, mask = mem[TABLE], mem[MASK_]
    rec = pc_node(mem, c)
    t = pc_find(mem, mem[rec + KEY], mem[rec + NXT])
    after = mem[rec + CHAIN]
    if mem[t + T_HEAD] != c:  # a later copy: unlink it from the one before
        p = mem[t + T_HEAD]
        while mem[pc_node(mem, p) + CHAIN] != c:
            p = mem[pc_node(mem, p) + CHAIN]
        pc_put(mem, log, pc_node(mem, p) + CHAIN, after)
        if after < 0:
            pc_put(mem, log, t + T_TAIL, p)
        return
    if after >= 0:
        pc_put(mem, log, t + T_HEAD, after)
        return
    # its last copy: empty slot h, shifting back the entries that probed past it
    h = (t - table) // T_STRIDE
    j = h
    while True:
        j = (j + 1) & mask
        u = table + T_STRIDE * j
        if mem[u + T_HEAD] < 0:
            break
        k = pc_home(mem, mem[u + T_KEY], mem[u + T_NXT])
        if (k <= h or k > j) if h <= j else (k <= h and k > j):  # k not in (h, j]
            for f in range(T_STRIDE):
                pc_put(mem, log, t + f, mem[u + f])
            h, t = j, u
    pc_put(mem, log, t + T_HEAD, -1)


def pc_new_copy(mem, log, key, nxt):
    """A new copy of (``key``, ``nxt``) with one reference, last in its identity's chain."""
    n = mem[N_COPIES] - 1
    if n < 0:
        raise RuntimeError("prefix cache: more cached blocks than the pool holds")
    c = mem[mem[COPIES] + n]
    rec = pc_node(mem, c)
    pc_put(mem, log, N_COPIES, n)
    pc_put(mem, log, rec + REF, 1)
    pc_put(mem, log, rec + KEY, key)
    pc_put(mem, log, rec + NXT, nxt)
    pc_put(mem, log, rec + CHAIN, -1)
    pc_put(mem, log, CACHED, mem[CACHED] + 1)
    t = pc_find(mem, key, nxt)
    if t >= 0:
        pc_put(mem, log, pc_node(mem, mem[t + T_TAIL]) + CHAIN, c)
        pc_put(mem, log, t + T_TAIL, c)
        return c
    h = pc_home(mem, key, nxt)
    t = mem[TABLE] + T_STRIDE * h
    while mem[t + T_HEAD] >= 0:
        h = (h + 1) & mem[MASK_]
        t = mem[TABLE] + T_STRIDE * h
    pc_put(mem, log, t + T_KEY, key)
    pc_put(mem, log, t + T_NXT, nxt)
    pc_put(mem, log, t + T_HEAD, c)
    pc_put(mem, log, t + T_TAIL, c)
    return c


# -- the free queue ----------------------------------------------------------------------
def pc_link(mem, log, node, head):
    """Put ``node`` at the tail of the free queue, or at its ``head``."""
    sentinel = 2 * mem[C_]
    end = pc_node(mem, sentinel)
    if head:
        a, b = sentinel, mem[end + NEXT]
    else:
        a, b = mem[end + PREV], sentinel
    rec = pc_node(mem, node)
    pc_put(mem, log, pc_node(mem, a) + NEXT, node)
    pc_put(mem, log, rec + PREV, a)
    pc_put(mem, log, rec + NEXT, b)
    pc_put(mem, log, pc_node(mem, b) + PREV, node)


def pc_unlink(mem, log, node):
    """Take ``node`` out of the free queue."""
    rec = pc_node(mem, node)
    a, b = mem[rec + PREV], mem[rec + NEXT]
    pc_put(mem, log, pc_node(mem, a) + NEXT, b)
    pc_put(mem, log, pc_node(mem, b) + PREV, a)


def pc_pop(mem, log, n):
    """Take ``n`` blocks off the head of the free queue, evicting cached ones."""
    c_ = mem[C_]
    end = pc_node(mem, 2 * c_)
    while n > 0:
        node = mem[end + NEXT]
        if node == 2 * c_:
            raise RuntimeError("prefix cache: the free queue is empty")
        rec = pc_node(mem, node)
        if node < c_:  # a cached copy: its content is forgotten
            pc_unlink(mem, log, node)
            pc_forget(mem, log, node)
            top = mem[N_COPIES]
            pc_put(mem, log, mem[COPIES] + top, node)
            pc_put(mem, log, N_COPIES, top + 1)
            pc_put(mem, log, CACHED, mem[CACHED] - 1)
            pc_put(mem, log, EVICTED, mem[EVICTED] + 1)
            n -= 1
        elif mem[rec + COUNT] > n:
            pc_put(mem, log, rec + COUNT, mem[rec + COUNT] - n)
            n = 0
        else:
            n -= mem[rec + COUNT]
            pc_unlink(mem, log, node)
            top = mem[N_RUNS]
            pc_put(mem, log, mem[RUNS] + top, node)
            pc_put(mem, log, N_RUNS, top + 1)


def pc_push_run(mem, log, n, head):
    """Put ``n`` uncached blocks at the tail, or the ``head``, of the free queue (added to
    a run already there)."""
    if n <= 0:
        return
    c_ = mem[C_]
    sentinel = pc_node(mem, 2 * c_)
    end = mem[sentinel + NEXT] if head else mem[sentinel + PREV]
    if end >= c_ and end != 2 * c_:
        rec = pc_node(mem, end)
        pc_put(mem, log, rec + COUNT, mem[rec + COUNT] + n)
        return
    top = mem[N_RUNS] - 1
    run = mem[mem[RUNS] + top]
    pc_put(mem, log, N_RUNS, top)
    pc_put(mem, log, pc_node(mem, run) + COUNT, n)
    pc_link(mem, log, run, head)


def pc_free_slot(mem, log, s, held):
    """Drop slot ``s``'s references to its ``held`` blocks: its own (uncached) ones go to
    the free queue as one run, then its cached copies left without references, the last
    first (vLLM frees a request's blocks in reverse); returns the blocks freed."""
    done = mem[mem[DONE] + s]
    own = held - done
    pc_push_run(mem, log, own, mem[UNHASHED_FIRST])
    freed = own
    base = mem[HELD] + s * mem[W_]
    for j in range(done - 1, -1, -1):
        c = mem[base + j]
        rec = pc_node(mem, c)
        r = mem[rec + REF] - 1
        if r < 0:
            raise RuntimeError("prefix cache: a block with negative references")
        pc_put(mem, log, rec + REF, r)
        if r == 0:
            pc_link(mem, log, c, False)
            freed += 1
    pc_put(mem, log, mem[DONE] + s, 0)
    return freed


# -- prefix caching ----------------------------------------------------------------------
def pc_lookup(mem, keys, starts, rid, tokens):
    """(hit blocks, of them unreferenced) for request ``rid`` about to prefill ``tokens``
    tokens: its longest run of leading cached blocks, at most (tokens - 1) // block_size,
    less its last with ``drop_last_hit``."""
    cap = (tokens - 1) // mem[BS_]
    hit, idle, last_idle = 0, 0, 0
    for j in range(cap):
        c = pc_first(mem, keys, starts, rid, j)
        if c < 0:
            break
        hit += 1
        last_idle = 1 if mem[pc_node(mem, c) + REF] == 0 else 0
        idle += last_idle
    if mem[DROP_LAST_HIT] and hit > 0:
        hit -= 1
        idle -= last_idle
    return hit, idle


def pc_attach(mem, log, keys, starts, s, rid, hit):
    """Give empty slot ``s`` (request ``rid``) references to the first copies of its first
    ``hit`` blocks (``pc_lookup``); returns how many of them left the free queue."""
    base = mem[HELD] + s * mem[W_]
    taken = 0
    for j in range(hit):
        c = pc_first(mem, keys, starts, rid, j)
        rec = pc_node(mem, c)
        pc_put(mem, log, base + j, c)
        if mem[rec + REF] == 0:
            pc_unlink(mem, log, c)
            taken += 1
        pc_put(mem, log, rec + REF, mem[rec + REF] + 1)
    pc_put(mem, log, mem[DONE] + s, hit)
    return taken


def pc_cache_upto(mem, log, keys, starts, s, rid, upto):
    """Cache slot ``s``'s (request ``rid``'s) leading ``upto`` blocks, each a copy of its
    own (a key cached meanwhile by another request gets a second copy)."""
    done = mem[mem[DONE] + s]
    if upto <= done:
        return
    if upto > mem[W_]:
        raise RuntimeError("prefix cache: a slot caches more blocks than its width")
    base = mem[HELD] + s * mem[W_]
    for j in range(done, upto):
        key, nxt = pc_ident(mem, keys, starts, rid, j)
        pc_put(mem, log, base + j, pc_new_copy(mem, log, key, nxt))
    pc_put(mem, log, mem[DONE] + s, upto)


def pc_cache(mem, log, keys, starts, s, rid, computed, known):
    """Cache the full prompt blocks of slot ``s`` (request ``rid``) that ``computed``
    tokens complete, of the ``known`` tokens it has (< 0: more than it holds; with
    ``next_token_hash`` a block waits for the token after it)."""
    if mem[NEXT_TOKEN_HASH] and known >= 0 and computed > known - 1:
        computed = known - 1
    n_prompt = starts[rid + 1] - starts[rid]
    upto = computed // mem[BS_]
    pc_cache_upto(mem, log, keys, starts, s, rid, upto if upto < n_prompt else n_prompt)


def pc_keep_committed(mem, log, keys, starts, s, rid, kv_tokens, known):
    """Cache slot ``s``'s (request ``rid``'s) full blocks of its ``kv_tokens`` committed
    tokens, of the ``known`` tokens it has (< 0: more than it holds), before it is freed."""
    if known >= 0 and kv_tokens > known - mem[NEXT_TOKEN_HASH]:
        kv_tokens = known - mem[NEXT_TOKEN_HASH]
    pc_cache_upto(mem, log, keys, starts, s, rid, kv_tokens // mem[BS_])
