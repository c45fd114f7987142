"""Iterations of a replica that admit, prefill, decode or speculate, several at once.

``sim.steady`` runs a replica's decode-only iterations in stretches; an iteration in which
someone waits or prefills goes through the reference path (the scheduler,
``Replica.price``, ``sim.step.advance``): about a hundred numpy calls. Where
the replica uses the compiled stretch, ``plan`` hands such iterations to
``steady_kernel.walk`` instead -- the vLLM v1 budget walk over the running rows, the
admissions from the waiting queue, the pricing sums and the advance, one iteration after
another on the batch's own rows -- and ``run`` writes what the reference would have: the
same admissions (slots, admission order, ``first_scheduled_at``), KV grants and
roll-backs, first tokens, inter-token gaps, finishes and iteration rows. A request admitted
after another finished takes the slot ``Replica.admit`` would give it (the walk keeps the
replica's free-slot stack as ``admit`` and ``finish`` use it).

A speculating replica walks too where ``params`` says so (a static policy, an adaptive one
(a chain for the batch, with ``max_width`` > 1 perhaps widened at its root into a tree
⟨k, 1, …, 1⟩, as ``AdaptiveGamma.shape`` prices and chooses them; with ``per_sequence``
each decoder its own γ at most the batch's, from its history, as
``AdaptiveGamma._per_sequence`` gives it) or a batch ladder (one keyed on the
step that last scheduled each sequence gives each its own γ: the walk's rows carry
``Replica.scheduled_in`` in a column past the state's; a sticky one switches a request off
for good, in its row's ``SPEC_OFF``), a
draft model or EAGLE head drafting serially -- one, or one per GPU of a TP
target -- or Medusa's heads, or a lookup drafter under a static policy, measured one-stage
timings, an acceptance model with ``kernel_tables``, or a task mix whose tasks' models
all have them): each decoder verifies the policy's
shape, the walk prices the draft's passes as ``sim.draft_pricing.shared_shape_seconds``
does (with a γ per decoder, as ``per_sequence_seconds`` does), and each verify's accepted
depth is drawn from the replica's own generator in running order (so the generator ends
where the reference path leaves it; a sampling trace's against its recorded acceptance) or
replayed from a greedy trace. A draft on its own GPU that drafts a static chain ahead
during the verify (``draft_overlap: parallel``, PEARL) walks too: each verify is drawn one
guess deeper and marks the request ready where the guess past the chain was right as well
(``sim.step._draw_ahead``), the walk prices each iteration as ``IterationPricer`` prices it
with the ready chains (their drafting done, what the last drafting ahead outlasted its
verify by added), and hands the pricer that excess back when it ends. A lookup drafter's
decoders find a
match each with the drafter's proposal rate, drawn in running order from the replica's
``propose_rng`` as ``Replica._proposals`` draws them; one without a match verifies its last
token only. Matches drawn for an iteration the walk stops before are taken back (``plan``
sets the generator back to where the iterations it ran left it): the reference path draws
them again. A draft the token budget would cut ends the walk, and a batch with a draft
behind its sequence (``draft_sync: catch_up`` after a cut) does not start one: the
reference path forms those batches.

Its iterations' time passes in two events (``sim.router.pass_iterations``: the clock jumps to
the start of the last, the delays summed as one timeout per iteration would sum them, and the
last runs on a timeout of its own), and with a closed loop also at the end of each that
finishes requests. The walk runs up to the next event of anyone else: the iteration that ends at
or after it is its last, and the event comes while it runs -- so the iterations before it
are written when the last of them ends, as the event finds them, and it is written at its
own end. One that would admit then is left to the reference path.

Arrivals are events too, but where the replica has an arrival feed (``Replica.feed``: one
replica, open loop, so every arrival comes to it at a time known in advance, or one of
several behind a round-robin router, which gets every n-th, and whose state the others'
events cannot change: the walk runs past those too) the walk runs past them: an arrival
only joins the queue, which nobody reads until an iteration starts, so the walk holds the
requests that arrive before the next other event (``ArrivalFeed.horizon``) with their
arrival times, and an iteration admits those that came before it started. An arrival at
the very instant an iteration ends (after the walk's first) may be seen by the next
iteration or not, as SimPy orders the two events: the walk stops there.
A closed loop that sends to this replica alone (``Replica.loop``, a
``sim.router.ClosedLoop``) is a feed too: the walk holds the requests still to be sent,
with the times of the sends made so far, and makes a send where a request finishes in it
(its think time the loop's next), as the loop does; the loop still sends each at its time
(the walk tells it of each iteration's finishes when that iteration ends: ``run``), and
SimPy's order at one instant is known for these (``ClosedLoop``), so the walk need not
stop at a send.
Without a feed (replicas behind a router that reads their load, or a closed loop over
several replicas) the next arrival ends the walk as any event does; a router that reads
the replicas only when a request arrives (all but round robin's) lets its horizon pass
over the other replicas' own events, which change nothing of its state (``Replica.peers``;
a closed loop's next send comes as any replica's request finishes, so there it does not).
Behind Dynamo's KV router (``kv_aware``) and llm-d's, which read each replica's pool when
a request arrives, mid-iteration, where
the reference path has made the iteration's grants and a walk writes them when it ends,
the walk also stops *before* an iteration an event would come in (``Replica.strict_walk``:
the reference path runs it). A walk without a feed is not tried where the next event
comes sooner than two steps as long as the replica's last (``Replica.step_s``): it would
run one step at most, at more than the reference path's cost.

Where the KV blocks run short the walk preempts as vLLM v1 does (``preempt_until_fits``,
``Replica.preempt``: the last running request goes back to the queue's front, to be
prefilled again with the tokens it emitted), and it admits and runs requests resumed after
a preemption, their recompute counted apart, those preempted before the walk included
(``Replica._resume``); ``_write`` puts those it leaves waiting back at the queue's front
with what they carry. A walk that preempted does not run into the iteration an event
comes in (it would be written in two parts). It stops before an iteration that would only
preempt (nothing left to run), or admit a request beyond those it was given: the reference
path takes those.

With prefix caching (``Replica.prefix``) the walk changes the cache as the reference
scheduler does, by the same functions (``sim.kernels.prefix``, on the pool's one array
``mem``): an admission looks up its prompt's cached blocks and prefills after them, the
grants take blocks off the free queue (evicting), prompt blocks are cached as their chunks
are scheduled, and a finished request's blocks are cached and freed; the replica's pool
then only takes the free count back (``Replica.retire`` with ``freed``). An iteration the
walk leaves to the reference path after making its scheduling changes (an admission when
the event comes, one it may not see) has them taken back from the replica's undo log.
With a CPU tier below the cache (``sim.offload``) the walk makes the tier's changes too, by
its functions (``sim.kernels.tier``): what the pool caches is offered to the tier, a
finished request's blocks are ranked anew, all taken back with an iteration it leaves to the
reference path; it stops before an admission whose blocks past its GPU hit are in the tier
(a load: the reference starts it) or being loaded (passed over), and does not start while
a loaded request waits to be admitted; a load's end is an event of the replica's own
(its horizon). The
walk's records are compared with the reference's for every shipped scenario
(``tests/sim/test_golden.py``).
"""

from __future__ import annotations

from itertools import islice

import numpy as np

from hardware.spec_cost import SPEC_FIELDS
from sim import gate, steady, steady_kernel
from sim.draft_pricing import one_level_deeper
from sim.kernels.base import SCHEDULED
from sim.kernels.prefix import LOG_PER_BLOCK, TIER_LOG
from sim.kernels.prefix import W_ as WIDTH
from sim.router import event_at, next_event_of, pass_iterations
from sim.shapes import draft_feeds, tree_key_term
from sim.slots import BLOCKS, COUNTS, DLAG, EMITTED, N_COLS, OUTPUT, RID, SPEC_OFF, STREAM, TARGET

_any = np.logical_or.reduce
_sum = np.add.reduce
# steady_kernel's bound codes 0..3; -1 (no bound recorded) names the last, ""
_NAMES = BOUND_NAMES = ("compute", "memory", "comm", "host", "")
BOUND_CODES = {name: code for code, name in enumerate(_NAMES[:4])}


class Walk:
    """``k`` iterations of a replica from ``start`` (each starts where the one before
    ended), as ``steady_kernel.walk`` planned them for ``rows``: the running slots then
    the requests it was given (waiting, or arriving during the walk), ``admitted`` of which
    it admits (all before the split, if there is one), each into ``slots``."""

    __slots__ = ("n", "start", "k", "alpha", "floats", "ints", "ng", "st", "last_end",
                 "first_at", "admitted", "adm_at", "finished", "finished_at", "free",
                 "n_free", "slots", "stack", "split", "excess", "resumed", "n_adm", "front",
                 "vacated", "preempts", "end", "n_fl", "ends", "dispatched", "fly", "fl_f",
                 "fl_i")

    def __init__(self, n: int, rows: np.ndarray, slots: np.ndarray, stack: np.ndarray,
                 start: float, got: tuple, resumed: int = 0, flight: tuple = ()):
        self.n, self.st, self.slots, self.stack, self.start = n, rows, slots, stack, start
        (self.k, self.alpha, self.floats, self.ints, self.ng, self.last_end, self.first_at,
         admitted, self.adm_at, self.finished, self.finished_at, free, n_free, _, _,
         self.split, self.excess, n_adm, self.front, self.vacated, preempts, end, n_fl,
         self.ends, dispatched) = got
        self.admitted, self.free, self.n_free = int(admitted), int(free), int(n_free)
        self.n_adm, self.preempts = int(n_adm), int(preempts)
        self.resumed = resumed  # of the queue's rows, the first resumed after a preemption
        # a pipeline's: when its last event came (it stops there), the micro-batches left
        # in flight (their rows' ids and takes, their times and counts: the kernel's) and
        # how many it dispatched
        self.end, self.n_fl, self.dispatched = float(end), int(n_fl), int(dispatched)
        self.fly, self.fl_f, self.fl_i = flight or (None, None, None)


def params(r) -> tuple | str:
    """``steady_kernel.walk``'s arguments for replica ``r`` that do not change during the
    run (the lookahead, then ``row`` to ``dp``), or the reason ``r`` never walks
    (``sim.gate.walk``'s, or what its timings and acceptance model lack).

    Without speculation: a replica of ``sim.steady`` (``sim.gate.steady``). With: a static
    policy (the same shape for every batch, nothing learned), an adaptive one
    (``AdaptiveGamma.walk_smoothing``: chains and trees widened at the root, its
    ``max_width``; per sequence or not) or a batch ladder, whatever its key
    (``BatchLadder.walk_ladder``, sticky or not; both with drafts kept in step every step), a
    draft drafting serially (a draft model or EAGLE
    head, one replica or one per GPU, on the target's GPUs or its own, or Medusa's heads;
    one draft on its own GPU drafting a static chain ahead during the verify, ``draft_overlap:
    parallel``) or a lookup drafter (n-gram, suffix:
    no draft model, a static policy, ``draft_sync: every_step``), one pipeline stage or
    several (a static shape, no lookup drafter, no drafting ahead: ``sim.gate.walk``), the
    vLLM v1 order, and an acceptance model with ``kernel_tables`` for the shape (an
    adaptive policy's widest tree; a task mix: each task's model). With a prefix cache or
    without (``_prefix``: the walk makes the cache's changes with its own functions,
    ``sim.kernels.prefix``). Either way the target's timing and the draft's must be ones
    the kernels price (``kernel_params``: measured, roofline or paper; a pipeline's target
    stage by stage, ``kernel_stages``: measured or roofline)."""
    why = gate.walk(r)
    if why is not None:
        return why
    if r.stages > 1:  # priced stage by stage (sim.kernels.base.stages_seconds)
        stages = _stages(r)
        if stages is None:
            return "a pipeline timing the kernels do not price stage by stage (paper)"
        target = stages[0][0]
    else:
        target = steady.kernel_params(r)
    if target is None:
        return steady.NOT_PRICED
    if not r.policy.uses_draft:
        return (0, *steady_kernel.walk_shape(False), target, target, _NO_SPEC)
    policy, draft = r.policy, r.pricer.draft
    adaptive = getattr(policy, "walk_smoothing", None)  # an adaptive policy
    ladder = getattr(policy, "walk_ladder", None)  # a batch ladder (sticky or not)
    varies = adaptive is not None or ladder is not None  # a shape per iteration
    row = policy.deepest_row if varies else policy.shape(1)
    if not (row > 0).any():  # it never drafts (a ladder of γ 0 only)
        return "a policy that never drafts"
    # an adaptive policy's widest root (its trees ⟨k, 1, …, 1⟩, k <= max_width): the
    # acceptance's tables are those of its widest tree, which cover every shape it drafts
    width = int(getattr(policy, "max_width", 1)) if adaptive is not None else 1
    widest = row
    if width > 1:
        widest = row.copy()
        widest[0] = width
    if draft is None:  # a lookup drafter (sim.gate.walk): no draft pass to price
        dp, reps, one_pass = target, 1, False
    else:
        kernel_params = getattr(draft.cost.timing, "kernel_params", None)
        dp = kernel_params() if kernel_params is not None else None
        if dp is None:
            return "a draft timing the kernels do not price (they price one stage)"
        reps, one_pass = draft.replicas, draft.one_pass
    if r.overlap:  # each verify drawn one guess deeper (sim.step._draw_ahead)
        widest = one_level_deeper(row[None])[0]
    tables = _kernel_tables(r.acceptance, widest)
    if tables is None:
        return f"an acceptance model without kernel tables ({type(r.acceptance).__name__})"
    feeds = np.array(draft_feeds(row), dtype=np.int64)
    return (r.lookahead, *steady_kernel.walk_shape(True, row, feeds, tree_key_term(row),
                                                   r.rng, tables, reps, one_pass, adaptive,
                                                   ladder, r.proposal_rate, r.propose_rng,
                                                   r.cpu_s_per_seq, r.sticky_off,
                                                   getattr(policy, "per_sequence", False),
                                                   width, r.overlap),
            target, dp, _spec_params(r))


def _stages(r) -> tuple | None:
    """A pipelined replica's stages as the walk prices them: each stage's ``kernel_params``,
    the hop's fixed and per-token seconds (``kernel_stages``), or None where its timing
    has none (the paper timing's stages count no sequences)."""
    fn = getattr(getattr(r.pricer.target, "timing", None), "kernel_stages", None)
    return None if fn is None else fn()


def _pipeline_args(r) -> tuple:
    """``steady_kernel.walk``'s stage arguments for replica ``r`` (stages, hop seconds),
    made once: none for one stage."""
    got = r._walk_stages
    if got is None:
        like = r._walk[_TARGET]  # the target's kernel_params: the stages' type
        if r.stages > 1:
            stages, fixed, per_token = _stages(r)
            got = (steady_kernel.stage_list(stages, like), float(fixed), float(per_token))
        else:
            got = (steady_kernel.stage_list((), like), 0.0, 0.0)
        r._walk_stages = got
    return got


def _kernel_tables(model, row: np.ndarray) -> tuple | None:
    """The ``kernel_tables`` of acceptance model ``model`` for shape ``row``, one per task,
    and its task bits (``steady_kernel.stack_tables``' arguments): a task mix's
    (``kernel_tasks``), else the model's own as one task; None where some has none."""
    tasks = getattr(model, "kernel_tasks", None)
    if tasks is not None:
        return tasks(row)
    one = model.kernel_tables(row)
    return None if one is None else ((one,), 0)


def compiled(r):
    """The compiled ``steady_kernel.walk`` for replica ``r`` once it uses the compiled
    kernels (``steady.use_kernels``), else None (for good without numba)."""
    fn = r._walk_kernel
    if fn is None and r._walk is not None and steady.use_kernels(r):
        fn = r._walk_kernel = steady_kernel.compiled_walk(draws=r._walk[_RNG] is not None)
    return fn


def plan(r, fn) -> Walk | None:
    """The next walk of replica ``r`` (``fn``: the compiled ``steady_kernel.walk``), or
    None (``r`` untouched): the reference path runs the iteration. With an arrival feed
    (``Replica.feed``) the walk also holds the requests that arrive before the next event
    of anyone else, and runs past their arrivals. A lookup drafter's ``propose_rng`` is
    left where the iterations the walk ran left it."""
    run = r.running_order() if r.n_active else _NO_ROWS
    n = len(run)
    st = r.state[run]
    if _any(st[:, DLAG]) or r.holding:
        # a draft behind its sequence (catch_up: the reference's draft pass ingests the
        # tokens it missed), or requests holding blocks while a CPU tier loads their KV or
        # once loaded: the reference admits them first (sim.offload), and counts them among
        # those that decide whether long_prefill_token_threshold caps (vLLM's
        # kv_holding_waiting), which the walk does not see
        return None
    horizon = None
    if r.feed is None and r.loop is None:
        # (an event's time may be an int: one specialisation)
        horizon = float(next_event_of(r))
        # a walk stops at the next event of anyone (before a step that admits and ends
        # then): where that event comes before two more steps as long as the last one could
        # end, it would run one step at most, at the cost of a few steps' bookkeeping
        if horizon - r.env.now < 2.0 * r.step_s:
            return None
    pipe = r.stages > 1
    skip = ()  # a pipeline's events of its own micro-batches in flight (the walk's)
    if pipe:  # (one with an arrival feed: sim.cluster.wire keeps the others off the walk)
        flight = r.walk_flight(run)
        if flight is None:
            return None
        fly_run, fl_f, fl_i, n_fl, skip = flight
    lim = r.limits
    queued = len(r.waiting)
    w = min(queued, MAX_ROWS)
    ids = np.fromiter(islice(r.waiting, w), dtype=np.int64, count=w)
    next_at = -np.inf if queued > w else np.inf  # -inf: one beyond them waits now
    resumed = 0  # the requests preempted before, at the queue's front (Replica.preempt)
    if r._resume:
        for rid in ids.tolist():
            if rid not in r._resume:
                break
            resumed += 1
        for i, rid in enumerate(ids[resumed:].tolist(), start=resumed):
            if rid in r._resume:  # (one behind the front: the reference's)
                ids, next_at = ids[:i], -np.inf
                break
    w = len(ids)
    feed = r.feed
    arr_at = np.full(w, -np.inf)
    loop = _loop(r, ids, next_at)  # the closed loop's sends to come, or None
    if loop is not None:
        horizon, ids, arr_at, next_at, looping = loop
        w = len(ids)
    elif feed is None:
        if horizon is None:  # (a closed loop's sends it cannot hold: the next ends it)
            horizon = float(next_event_of(r, skip))
    else:
        horizon, coming, times, beyond = feed.look(MAX_ROWS - w, skip)
        horizon = float(horizon)
        if next_at == np.inf:  # the queue is all here: then the arrivals, in order
            ids = np.concatenate((ids, coming))
            arr_at = np.concatenate((arr_at, times))
            w, next_at = len(ids), beyond
    rows = np.zeros((n + w, N_COLS + 1), dtype=np.int64)  # the state, then SCHEDULED
    rows[:n, :N_COLS] = st
    rows[:n, SCHEDULED] = r.scheduled_in[run]
    last = np.zeros(n + w)  # each row's last emission (a preempted one's before it)
    last[:n] = r.last_chunk_at[run]
    back = np.zeros(n + w, dtype=np.int64)  # whose admission resumes it (Replica.admit)
    slots = np.empty(n + w, dtype=np.int64)
    slots[:n] = run
    stack = np.empty(lim.max_num_seqs, dtype=np.int64)  # Replica._free_slots, with room
    free_slots = len(r._free_slots)
    stack[:free_slots] = r._free_slots
    if w:
        tab = r.table
        rows[n:, RID] = ids
        rows[n:, TARGET] = tab.prompt_tokens[ids]
        rows[n:, OUTPUT] = tab.output_tokens[ids]
        rows[n:, STREAM] = tab.stream[ids]
        for j, rid in enumerate(ids[:resumed].tolist()):  # prefill_target_of, admit
            emitted, counters, off, at = r._resume[rid]
            rows[n + j, TARGET] += emitted
            rows[n + j, EMITTED] = emitted
            rows[n + j, COUNTS:N_COLS] = counters
            rows[n + j, SPEC_OFF] = off
            last[n + j] = at
            back[n + j] = 1
    prompt = np.asarray(r.table.prompt_tokens[rows[:, RID]], dtype=np.int64)
    start = float(r.env.now)  # (0 before any timeout: an int, a second specialisation)
    shape = r._walk
    if shape[_MODE] in _LEARNS:  # the policy's α̂ now
        shape = (*shape[:_ALPHA], r.policy.alpha, *shape[_ALPHA + 1:])
    if shape[_AHEAD]:  # what the last drafting ahead outlasted its verify by
        shape = (*shape[:_EXCESS], r.pricer.ahead_excess, *shape[_EXCESS + 1:])
    # a lookup drafter's matches: where the walk stops before an iteration it drew them for,
    # the generator goes back to where the iterations it ran left it
    before = r.propose_rng.bit_generator.state if shape[_PROPOSE] >= 0.0 else None
    fly = np.zeros((n + w, 2), dtype=np.int64)  # each row's micro-batch in flight, its take
    if pipe:
        fly[:n] = fly_run
        free_at = np.array(r.free_at)
    else:
        free_at, fl_f, fl_i, n_fl = _NO_FREE, _NO_FL_F, _NO_FL_I, 0
    got = fn(rows, n, w, arr_at, next_at, slots, stack, free_slots, last,
             r.kv.free_blocks, r.kv.capacity_blocks, lim.block_size, r.v1, r.step_tokens,
             lim.chunk_tokens, lim.chunked_prefill, lim.max_num_seqs, shape[0], start,
             horizon, MAX_STEPS, r.on_finish is not None and loop is None, r.strict_walk,
             # (a pipeline records the bound whatever the pricer's setting: price_stages')
             r.pricer.record_bound or pipe, _gaps(r),
             *(steady_kernel.NO_LOOP if loop is None else looping),
             prompt, back, r._admitted, *shape[1:], *_prefix(r), *_pipeline_args(r), free_at,
             fly, fl_f, fl_i, n_fl)
    if before is not None and got[_SPARE]:
        r.propose_rng.bit_generator.state = before
        r.propose_rng.random(got[_SPARE - 1])  # the matches of the iterations it ran
    if pipe:  # something done: a dispatch or a completion (the walk's one at least)
        if not (got[0] or got[-1]):
            return None
        r.free_at = free_at.tolist()
        r.walk_took_flight()
        return Walk(n, rows, slots, stack, start, got, resumed, (fly, fl_f, fl_i))
    return Walk(n, rows, slots, stack, start, got, resumed) if got[0] else None


def _loop(r, ids: np.ndarray, next_at: float) -> tuple | None:
    """For a walk of replica ``r`` with its waiting requests ``ids`` (all of them
    where ``next_at`` is inf) and a closed loop that sends to it alone (``Replica.loop``):
    (the horizon; the requests held: the queue's, then the next ones to be sent, in order;
    when a step sees each; ``next_at``; the kernel's loop arguments), or None (the walk
    stops at the loop's next send, as at any event): no such loop, or more queued or to be
    sent than the walk holds."""
    loop = r.loop
    if loop is None or next_at != np.inf:
        return None
    got = loop.look()
    if got is None:
        return None
    horizon, at, seen, think, left = got
    w = len(ids)
    room = min(MAX_ROWS - w, left)
    tail = room < left  # requests past the ones held
    p = len(at)
    if p > room:
        if tail:
            return None
        at, seen = at[:room], seen[:room]  # the table is used up: these send nothing
        p = room
    first = loop.counter[0]
    ids = np.concatenate((ids, np.arange(first, first + room, dtype=np.int64)))
    arr_at = np.full(w + room, np.inf)
    arr_at[:w] = -np.inf
    arr_at[w:w + p] = seen
    sub_at = arr_at.copy()
    sub_at[w:w + p] = at
    return float(horizon), ids, arr_at, np.inf, (True, sub_at, think, w + p, int(tail))


def _spec_params(r) -> np.ndarray:
    """The speculative overheads ``IterationPricer.round_s`` adds, as the walk takes them."""
    p = r.pricer.spec_params
    return _NO_SPEC if p is None else p


_NO_SPEC = np.zeros(len(SPEC_FIELDS))

# where params' tuple holds the shape mode, the policy's α̂, the generator, a lookup
# drafter's proposal rate and whether a draft drafts ahead, with what its drafting ahead
# outlasted its verify by; where the walk's answer holds the matches it drew and did not use
_MODE, _ALPHA, _RNG, _PROPOSE, _AHEAD, _EXCESS = 7, 8, 14, 21, 24, 25
_TARGET = -3  # (then the draft's kernel_params and the speculative overheads)
_SPARE = 14
_LEARNS = (steady_kernel.ADAPTIVE, steady_kernel.ADAPTIVE_SEQ)  # modes whose α̂ the walk moves
MAX_STEPS = 256  # iterations per walk
MAX_ROWS = 256  # requests per walk besides the running ones (waiting or arriving)
GAPS = 1 << 15  # inter-token gaps per walk (a buffer per replica, reused)
_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_FREE = np.zeros(0)  # a walk of one stage: no stages coming free, no micro-batch in flight
_NO_FL_F = np.zeros((1, 4))
_NO_FL_I = np.zeros((1, 8), dtype=np.int64)
_NO_TIER = steady_kernel.NO_PREFIX[5:]


def _prefix(r) -> tuple:
    """The walk's prefix-cache arguments for replica ``r``: its cache's ``mem``, the
    prompts' block keys, their starts and their tokens, and its undo log (a buffer per
    replica, big enough for the changes of an iteration of many admissions); then its CPU
    tier's (``sim.offload``): the tier's ``mem``, an undo log of its own, its counts and
    the slots' offers (empty without a tier); or none."""
    cache = r.prefix
    if cache is None:
        return steady_kernel.NO_PREFIX
    if r._walk_log is None:
        lim = r.limits
        entries = LOG_PER_BLOCK * (4 * lim.max_batched_tokens // lim.block_size
                                   + 4 * lim.max_num_seqs + 8 * int(cache.mem[WIDTH]) + 256)
        r._walk_log = np.zeros(2 * entries + 1, dtype=np.int64)
        if r.offload is not None:  # (an offer writes up to TIER_LOG per block)
            r._walk_tlog = np.zeros(2 * TIER_LOG // LOG_PER_BLOCK * entries + 1,
                                    dtype=np.int64)
    tier = _NO_TIER if r.offload is None else (r.offload.tier.mem, r._walk_tlog,
                                                r.offload.tier.stats, cache.offered)
    return cache.mem, cache._keys, cache._starts, r.table.prompt_tokens, r._walk_log, *tier


def _gaps(r) -> np.ndarray:
    """Replica ``r``'s buffer for a walk's gaps (read by ``_write`` before the next walk)."""
    buf = r._walk_gaps
    if buf is None:
        buf = r._walk_gaps = np.empty(GAPS)
    return buf


def run(r, w: Walk):
    """Let walk ``w``'s iterations pass on replica ``r`` (``_pass``) and write them (a
    SimPy sub-generator: ``yield from``)."""
    if r.stages > 1:
        yield from _run_stages(r, w)
        return
    delays = (w.floats[2] + w.floats[3]).tolist()  # timeout(draft_s + verify_s)
    ints = w.ints
    ints[0] = r.index
    ints[8] = r.log.iterations.codes(_NAMES)[ints[8]]
    n, a = w.n, w.admitted
    rows = n + a  # the running rows, then those admitted (first come, first served)
    gaps = r._walk_gaps
    k, st, last, first, alive, ng, nf, free, stack, n_free = w.split
    told = [0]  # with a closed loop: the finished it was told of (each as its iteration ends)
    if k:  # the event comes during the last iteration: the ones before it, written first
        yield from _pass(r, w, delays[:k], told)
        alive, seen = alive[:rows].copy(), ~np.isnan(first[:rows])
        _write(r, w, alive, st, last, seen, 0, k, gaps[:ng], 0, nf, free, stack[:n_free])
        delays = delays[k:]
    else:
        alive, seen = np.ones(rows, dtype=bool), np.zeros(rows, dtype=bool)
    yield from _pass(r, w, delays, told)
    r.step_s = delays[-1]
    alive[w.finished[nf:]] = False
    alive[w.front] = False  # preempted, waiting (a walk that preempts is never split)
    _write(r, w, alive, w.st, w.last_end, ~np.isnan(w.first_at[:rows]) & ~seen, k, w.k,
           gaps[ng:w.ng], nf, len(w.finished), w.free, w.stack[:w.n_free])
    if r._walk[_MODE] in _LEARNS:  # what observe learned over the walk
        r.policy.alpha = w.alpha
    if r._walk[_AHEAD]:  # and what IterationPricer keeps of the drafting ahead
        r.pricer.ahead_excess = w.excess


def _run_stages(r, w: Walk):
    """``run`` for a pipelined replica: let time pass to each micro-batch's completion (one
    event at its end, as ``sim.pipeline`` makes it) and to the walk's last event, then
    write it (its admissions, finishes, rows and records) and hand the micro-batches left in
    flight back (``PipelinedReplica.walk_landed``)."""
    env = r.env
    ints = w.ints
    ints[0] = r.index
    ints[8] = r.log.iterations.codes(_NAMES)[ints[8]]
    for end in w.ends.tolist():
        yield event_at(env, end)
    if env.now < w.end:
        yield event_at(env, w.end)
    yield env.timeout(0)  # (arrivals at this instant, which the walk saw, join the queue)
    rows = w.n + w.admitted
    alive = np.ones(rows, dtype=bool)
    alive[w.finished] = False
    _write(r, w, alive, w.st, w.last_end, ~np.isnan(w.first_at[:rows]), 0, w.k,
           r._walk_gaps[:w.ng], 0, len(w.finished), w.free, w.stack[:w.n_free])
    r.walk_landed(w)


def _pass(r, w: Walk, delays: list[float], told: list[int]):
    """Let iterations of walk ``w`` pass, ``delays`` their durations; with a closed loop
    (``Replica.loop``, which the walk sent for) tell it of each one's finished requests as
    it ends, before the next starts, as ``Replica.retire`` tells it on the reference path
    (``told[0]``: how many of ``w.finished`` it was told of). Not one event per iteration
    (``pass_iterations``): nothing reads the replica between a walk's iterations (it ends
    before anyone else's next event; the arrivals it runs past only join the queue), so
    time jumps to the end of each iteration that finishes requests of a closed loop, and
    to the last."""
    env = r.env
    if r.loop is None:
        yield from pass_iterations(env, delays)
        return
    ends, t = [], env.now
    for delay in delays:
        t = t + delay  # as Environment.schedule adds a timeout's delay to now
        ends.append(t)
    ups = np.searchsorted(w.finished_at, ends, side="right").tolist()
    rids = w.st[w.finished, RID]
    done = 0  # iterations passed
    for i, upto in enumerate(ups):
        if upto > told[0]:  # (the clock at the end of iteration done - 1, or the start)
            yield from pass_iterations(env, delays[done:i + 1])
            done = i + 1
            r.on_finish(rids[told[0]:upto])
            told[0] = upto
    yield from pass_iterations(env, delays[done:])


def _write(r, w: Walk, alive: np.ndarray, st: np.ndarray, last: np.ndarray,
           first: np.ndarray, i0: int, i1: int, gaps: np.ndarray, f0: int, f1: int,
           free: int, stack: np.ndarray) -> None:
    """Write iterations ``i0:i1`` of walk ``w`` into replica ``r``: the admissions (in the
    first part), the finished ``f0:f1`` (``Replica.finish``: recorded, their slots and
    blocks freed), then the rows ``alive`` after them (``st``, ``last``: their rows and
    last emissions then, with the size of the step that last scheduled each:
    ``Replica.scheduled_in``; ``first``: whose first token came in these iterations), the KV
    pool's ``free`` blocks, the free-slot ``stack`` (the order ``Replica.admit`` and
    ``finish`` left it in), the ``gaps``, the iteration rows and the liveness guard."""
    log = r.log
    n, a = w.n, w.admitted
    slots = w.slots
    if not i0:
        if a:
            for _ in range(a):  # the queue's first a (arrivals during the walk only append)
                r.waiting.popleft()
            back = min(w.resumed, a)  # those resumed after a preemption: Replica.admit
            for rid in w.st[n:n + back, RID].tolist():
                del r._resume[rid]
            log.first_scheduled_at[w.st[n + back:n + a, RID]] = \
                w.adm_at[back:]  # the others' first: their iteration's start
        r._admitted += w.n_adm  # (ADMIT: each admitted row's, set by the walk)
        if len(w.vacated):  # slots preempted requests left (Replica.preempt)
            r.state[w.vacated] = 0
            r.active[w.vacated] = False
    if f1 > f0:
        fin = w.finished[f0:f1]
        done = w.st[fin]  # [F, N_COLS + 1]: a finished row is left as it finished
        # finish gives them back (with a prefix cache the walk has cached and freed them)
        freed = r.prefix is not None
        r.kv.free_blocks = free if freed else free - int(_sum(done[:, BLOCKS]))
        r.scheduled_in[slots[fin]] = done[:, SCHEDULED]
        r.retire(slots[fin], done[:, :N_COLS], w.finished_at[f0:f1], freed,
                 notify=r.loop is None)
    if _any(first):
        got = first.nonzero()[0]
        log.first_token_at[w.st[got, RID]] = w.first_at[got]
    rows = alive.nonzero()[0]
    at = slots[rows]
    now = st[rows]  # [R, N_COLS + 1]
    r.state[at] = now[:, :N_COLS]
    r.scheduled_in[at] = now[:, SCHEDULED]
    r.active[at] = True
    r.last_chunk_at[at] = last[rows]
    r.n_active = len(rows)
    r._order = None
    r._free_slots = stack.tolist()
    r.kv.free_blocks = free
    log.add_itl(gaps)
    for v in w.front.tolist() if i1 == w.k else ():  # preempted, at the queue's front
        row = w.st[v]
        rid = int(row[RID])
        r._resume[rid] = (int(row[EMITTED]), row[COUNTS:N_COLS].copy(), int(row[SPEC_OFF]),
                          float(w.last_end[v]))
        r.waiting.appendleft(rid)
    emitted = w.ints[7, i0:i1]
    if emitted.all():
        r.check_progress(1)
    else:
        for e in emitted.tolist():
            r.check_progress(e)
    log.iterations.extend_rows(w.floats[:, i0:i1], w.ints[:, i0:i1])
