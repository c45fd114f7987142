"""``sim.steady_walk``'s walk compiled: many iterations of a replica in one call."""

from __future__ import annotations

import numpy as np

from hardware.cost import verify_pass
from hardware.spec_cost import round_seconds
from sim.draft_pricing import passes_capacity
from sim.kernels.base import (
    ADAPTIVE,
    ADAPTIVE_SEQ,
    ADMIT,
    BLOCKS,
    BY_DECODING,
    BY_SCHEDULED,
    CACHED,
    COUNTS,
    EMITTED,
    FILLED,
    GEOMETRIC,
    KIND,
    KV,
    LADDER,
    LEVELS,
    OUTPUT,
    READY,
    RESUMED,
    RID,
    SCHEDULED,
    SPEC_OFF,
    STREAM,
    TARGET,
    accepted_depth,
    decode_one,
    pass_seconds,
    stages_seconds,
)
from sim.kernels.drafting import adaptive_gamma, chain_rows_seconds, draft_seconds, root_tree
from sim.kernels.pipeline import (
    WAIT_ARRIVAL,
    WAIT_STOP,
    pipeline_pass,
    pipeline_pop,
    pipeline_wait,
)
from sim.kernels.prefix import (
    LOG_PER_BLOCK,
    TIER_LOG,
    UNHASHED_FIRST,
    pc_attach,
    pc_cache,
    pc_free_slot,
    pc_keep_committed,
    pc_lookup,
    pc_pop,
    pc_push_run,
    pc_room,
)
from sim.kernels.rules import (
    DRAFT_SLOTS,
    FULL_ISL,
    LONE_UNCAPPED,
    NEW_LOOKAHEAD,
    PAD_TOKENS,
    ROLLS_BACK,
    admission,
    blocks_for,
    emitted,
    first_chunk,
    grant,
    kept_blocks,
    most_tokens,
    padding,
    share,
    spent,
    wanted,
)
from sim.kernels.tier import caches_back, tier_finished, tier_lookup, tier_offer_slot
from sim.policies import cost_ratio, sequence_gamma


def walk(st, n, n_wait, arr_at, next_at, slots, stack, n_free, last_chunk, free, cap,
         block_size, v1, max_tokens, chunk_tokens, chunked, max_seqs, lookahead, now,
         horizon, max_steps, first_finish, strict, bound, gaps, loop, sub_at, think, filled,
         tail, prompt_len, resumes, adm_base, row, nodes, feeds, tri, reps,
         one_pass,
         mode, alpha, smoothing, width, ladder, key, sticky, rng, meta, p_geo, runs, ring, table,
         bits,
         propose, prng, host_s, ahead, excess, tp, dp, sp, pc, pkeys, pstarts, prompts, plog,
         tm, tlog, tstats, offered, stages, hop_fixed, hop_token, free_at, fly, fl_f, fl_i,
         n_fl):
    """Plan iterations of a replica: the walk of ``sim.scheduling.vllm_v1.plan_vllm_v1``
    (each running row in order gets min(what it wants, the budget left): a decoder its
    verify, 1 + ``nodes`` tokens, a prefilling row the rest of its prompt, either at most
    ``chunk_tokens`` (``SchedulerLimits.cap``); the blocks for its tokens plus
    ``lookahead`` slots), then
    ``admit_waiting`` with what is left (first come first served, while a slot, the budget
    and the blocks for the first chunk, with ``v1``'s rules its lookahead and its whole
    prompt, last; an admission ``rules.padding`` pads is left to the reference), priced
    as ``IterationPricer.price`` prices
    the batch (the target pass, and with a draft its ``shared_shape_seconds``), then
    ``sim.step.advance`` -- iteration after iteration, on the batch's own rows.

    ``st`` int64 [n + n_wait, N_COLS + 1]: the running rows in running order (their last
    column ``SCHEDULED``: ``Replica.scheduled_in``), then ``n_wait`` requests in queue order
    (RID, TARGET, OUTPUT, STREAM set), updated in place; each of
    these is in the queue from ``arr_at`` (float64 [n_wait]; -inf: it waits now), and the
    first request beyond them from ``next_at`` (-inf: one waits now; inf: none before
    ``horizon``). An arrival is seen by the iterations that start after it; one at the very
    end of an iteration (after the first) may come before or after the replica moves on,
    as SimPy orders the two events, so the walk stops there. ``slots`` int64 [n + n_wait]:
    the running rows' slots; an admitted row takes the slot ``Replica.admit`` would give
    it, the last of the free-slot stack ``stack`` (int64, ``n_free`` entries), and a
    finished row's slot goes back on it as ``Replica.finish`` puts it back (both updated in
    place). ``v1`` int64: which of vLLM v1's rules apply (``SchedulerLimits.v1``, indexed
    by ``sim.kernels.rules``' constants). ``gaps`` float64: room for the inter-token gaps
    (the walk stops before an iteration whose gaps would not fit).

    A closed loop (``loop``: a ``sim.router.ClosedLoop`` that sends to this replica
    alone): each finished row sends the next request after a think time, the next of
    ``think`` in the order rows finish. The held requests past the queue are the ones still
    to be sent, in the order they will be sent (ids in that order); the first ``filled``
    rows (the queue's, then the sends made before the walk) have their send's time in
    ``sub_at`` and ``arr_at`` holds when a step that starts then sees each (the send's time,
    or just after it for a send made with no think time, which the step formed at that
    finish does not see); a send the walk makes goes in its place by time (after those made
    before it at the same time: SimPy's order), past the rows held it sends nothing where
    ``tail`` is 0 (the table is used up) and the walk stops before an iteration whose
    finishes might not fit where it is 1. With ``loop`` a row is seen by a step that starts
    at or after ``arr_at`` (no order to be unsure of).

    Speculation (``nodes`` > 0): every decoder drafts the shape ``row`` (int64 [m]); the
    draft's serial passes feed ``feeds`` tokens per sequence each, on ``reps`` replicas of
    the draft, or its heads run in one pass (``one_pass``: ``draft_seconds``). ``mode`` 1
    (``ADAPTIVE``): each iteration's chain is ``AdaptiveGamma``'s (``adaptive_gamma``,
    ``row`` the deepest: its γ ones), with ``width`` > 1 (its ``max_width``) perhaps
    widened at the root into the tree ⟨k, 1, …, 1⟩ (k <= ``width``: the verify under the
    tree mask, the draft's passes feeding k nodes a level, ``root_tree``), its α̂ folded
    in after each verify as ``observe`` folds it (EMA weight ``smoothing``, from
    ``alpha``; after a tree, over its levels 2 and deeper); ``mode`` 2 (``LADDER``): the chain
    of ``ladder[batch size]`` (``BatchLadder``; its last γ past its end), the size as
    ``key`` counts it (``base.LADDER_KEYS``): the decoding rows (``BY_DECODING``) or the
    running ones (``BY_RUNNING``) as the iteration starts, one γ for the batch; or, with
    ``BY_SCHEDULED``, each decoder's own: the requests scheduled by the iteration that last
    scheduled it (its ``SCHEDULED`` column, which each iteration sets on every row it
    schedules to its batch size, as ``Replica.form_batch`` does). With ``sticky`` (vLLM
    v0's sticky ladder) a decoder's γ is 0 once the ladder gave it 0 (its ``SPEC_OFF``, set
    for every decoding row the ladder gives 0 as ``Replica.draft_shapes`` sets it), each
    decoder's own whatever the key; an iteration with rows switched off beside others
    drafting prices only the drafting rows' passes (``per_sequence_seconds``' general path,
    whose rows switched off feed the draft nothing; with ``reps`` > 1 the walk stops
    before it). ``mode`` 3 (``ADAPTIVE_SEQ``, ``AdaptiveGamma`` with ``per_sequence``):
    the batch's chain as with ``ADAPTIVE``, then each decoder's own γ at most its depth
    (``sim.policies.sequence_gamma`` of the decoder's accepted and checked guesses so far,
    α̂ and the batch's ``cost_ratio``), α̂ folded in after each verify over the decoders'
    own chains. Decoders of different γ
    are priced as ``IterationPricer.price`` prices a shape per sequence (each verify a
    causal run of its own; the draft's passes ``chain_rows_seconds``, the engine's
    overheads for those with γ > 0 and the deepest's passes) and each draws its depth on
    its own chain, a γ = 0 one on a row of zeros where another drafts (as
    ``sim.step.verify`` draws a batch's rows). With any of them, γ = 0 feeds each draft its
    new token (``draft_sync: every_step``). A tree's
    verify attends ``tri`` (``sim.shapes.tree_key_term``; < 0 for a chain: causal); each
    decoder's accepted depth comes from the acceptance model's ``kernel_tables``, one per
    task (``meta``, ``p_geo``, ``runs``, ``ring``, ``table``, ``bits``:
    ``sim.steady_kernel.stack_tables``; one task for a model without tasks), as
    ``TaskMixAcceptance.draw`` asks each task's model for its rows: the tasks in order, each
    task's decoders in running order -- drawn from ``rng`` (a ``numpy.random.Generator``,
    the replica's): one uniform per level against the task's table (``accepted_depth``), or
    one geometric draw with success probability ``p_geo`` (a ``GEOMETRIC`` task, or a
    ``LEVELS`` one with ``p_geo`` > 0 whose decoders in this verify all have chains, as
    ``IIDAcceptance.draw`` decides on the rows it is given) -- or, with ``rng`` None, the
    replayed run, each capped at the depth;
    ``tp`` and ``dp`` are the target's and the draft's timing parameters
    (their ``kernel_params``: measured or analytic), ``sp`` the framework's speculative overheads
    (``hardware.spec_cost.round_seconds``'s parameters, added to the drafting of every
    iteration whose decoders verify drafts, as ``IterationPricer.price`` adds them).
    Without speculation ``rng`` is None and ``runs``, ``dp`` unused.

    A lookup drafter (n-gram, suffix: ``propose`` >= 0, no draft model, a static ``row``):
    at the start of each iteration every decoding row, in running order, finds a match
    with probability ``propose``, one uniform each from ``prng`` (the replica's
    ``propose_rng``, as ``Replica._proposals`` draws them before the scheduler's budget
    walk); one without a match asks for and verifies its last token only. The pass prices
    such a row as ``IterationPricer.price`` prices a shape of zeros (one token, causal: the
    sums of a one-token chunk); the drafting is no pass, the engine's overheads for the rows
    with a match (``round_seconds``, no serial draft pass) and ``host_s`` host seconds per
    decoder (``Replica.price``); where some row verifies a draft, every row's depth is drawn
    (a row without a match on a shape of zeros: the uniforms of its row of the batch's draw,
    accepting nothing). With ``propose`` < 0 every decoder drafts ``row`` and ``prng`` is
    never drawn from.

    A draft on its own GPU drafting ahead during the verify (``ahead``: ``draft_overlap:
    parallel``, a static chain, one draft replica drafting serially): each verify's depth
    is drawn on the chain one guess deeper, the row's ``READY`` set where every guess and
    the guess past them were right (``sim.step._draw_ahead``); an iteration with decoders
    is priced as ``IterationPricer._per_sequence`` prices it with ``ready``: each verify a
    causal run of its own, the draft's serial passes over the decoders not ready and the
    prefill chunks (``chain_rows_seconds``), plus ``excess`` -- what the last drafting
    ahead outlasted its verify by -- where some decoder is ready, the engine's overheads
    over the serial passes that ran; then ``excess`` becomes this iteration's drafting
    ahead (every decoder's chain one deeper) less its verify, at least 0. One without
    decoders is priced as without ``ahead``, ``excess`` kept.

    With a prefix cache (``pc`` not empty: ``sim.prefix_cache``'s ``mem``, the prompts'
    block keys ``pkeys`` and ``pstarts``, their tokens ``prompts``: a request resumed
    after a preemption prefilled its output too), each iteration makes the cache's changes as the
    scheduler makes them, by the same functions (``sim.kernels.prefix``): the grants' blocks
    off the free queue, the running rows' prompt blocks cached, then each admission's
    lookup (its prefill starts after its hit, ``CACHED``), references, blocks and first
    chunk's blocks cached; after the advance, a finished row's blocks of computed tokens
    cached and its blocks freed (``Replica.finish``). Those of an iteration it stops
    before after all are taken back from the log ``plog`` (where it is too short for them,
    it stops before making them). With a CPU tier (``tm`` not empty: its ``mem``, its log
    ``tlog``, its counts ``tstats`` and each slot's blocks ``offered`` so far), each block
    the pool caches is offered to it as ``Loads.offer_slot`` offers it, a finished row's
    ranked anew (``Loads.finished``), by ``sim.kernels.tier``'s functions, an iteration it
    stops before taken back (``tier_back``); it stops before an admission with blocks
    past its GPU hit in the tier or being loaded (``tier_lookup``: a load to start, or a
    request passed over).

    Where the blocks run short it preempts as ``preempt_until_fits`` does (vLLM v1: in
    running order, while a scheduled row cannot get its blocks, the last row still running
    is preempted by recompute, perhaps the row itself; nobody is admitted in that step),
    as ``Replica.preempt`` does: its committed blocks cached (with a prefix cache) and its
    blocks freed, its slot back on the stack, the row to the queue's front (``front``, the
    last preempted first) with its emitted tokens and counters (one more preemption), to
    prefill its prompt and output again (``prompt_len`` + emitted: ``prefill_target_of``).
    The waiting rows whose admission resumes them (``resumes``, 1: the queue's preempted
    ones at the start, ``Replica._resume``'s, and those it preempts) come back with their
    counters and cached tokens (``RESUMED`` set: their prefill is counted as recompute, and
    the pass that completes it gives an inter-token gap since their last token, not a first
    token, as ``sim.step.advance`` does). Each admission numbers its row's ``ADMIT`` on
    from ``adm_base`` (``Replica._admitted``).

    It stops *before* an iteration it cannot form as the scheduler would (a draft cut by
    the budget, a request beyond those it holds to admit, nothing to schedule, a step that
    would only preempt) or that admits and ends at or after ``horizon`` (with ``strict``,
    any that ends there, and any that preempts: a router that reads the pool while an
    iteration runs, Dynamo's KV router, sees it as the reference path leaves it, its grants
    made; and, after a preemption, any iteration the event would split the walk before);
    after an iteration that ends there (the event comes while it runs), after
    ``max_steps``, with ``first_finish`` after the first that finishes a request, or when
    nobody is left.

    A pipelined replica (``stages``: its stages' ``kernel_params``, a typed list; empty for
    one stage) keeps up to ``len(stages)`` micro-batches in flight (``sim.pipeline``): a
    batch is formed from the running rows not in flight, priced stage by stage
    (``stages_seconds``; the draft on stage 0) and dispatched through the stages and links
    (``pipeline_pass`` on ``free_at``, when each comes free), its rows tagged in ``fly``
    (int64 [rows, 2]: the micro-batch's id, 0 for none, and what the row took) and its
    times and counts kept in ``fl_f`` (float64 [S, 4]: its end, start, draft and verify
    seconds) and ``fl_i`` (int64 [S, 8]: its id, batch size, decoders, prefill tokens,
    verify and drafted tokens, bound code, whether it draws), ``n_fl`` of them, oldest
    first (those given are in flight as the walk starts, handed over by the reference
    scheduler); the scheduler forms again at once, and where every stage is busy or nothing
    is formed it waits for the next event: the oldest micro-batch leaving the last stage
    (its rows advanced as ``finish_iteration`` advances them, its record written then) or,
    with a stage free, an arrival. A pipeline's walk stops before an event at or after
    ``horizon`` (its micro-batches still in flight then handed back: the arrays, updated
    in place), at two events at one instant, before a step that would preempt, and after
    ``max_steps`` completions; the grants of a step are made as it is dispatched.

    Returns (k; the policy's α̂ after it (``alpha`` but with ``ADAPTIVE``); the iteration
    rows, float64 [4, k] and int64 [10, k]: the fields of ``sim.log.IterationLog``'s tables
    in its order, the bound as a code (0 compute, 1 memory, 2 comm, 3 host, -1 none), the
    replica left 0; the number of gaps; [n + n_wait] each row's last emission and its first
    token's time (NaN: none in the walk); the rows admitted and when the iteration of each
    starts; the finished rows in the order they finish and when; the pool's free blocks and
    the stack's free slots after it; and where the replica stops for the event before the
    last iteration, if it comes after others: k_split > 0 iterations before it, the rows,
    last emissions, first tokens and rows alive then, the gaps and finished rows so far, the
    free blocks, the stack and its free slots then; before that, the matches drawn from
    ``prng`` for the iterations it ran and for the one it stopped before, which the caller
    takes back: the reference path draws them again; then ``excess`` after the iterations it
    ran; the admissions in all; the rows preempted and still waiting, in the order
    preempted; the slots preempted rows left, in order; the preemptions; when it stopped (a
    pipeline's last event); the micro-batches left in flight; when each iteration it wrote
    ended; the micro-batches it dispatched).
    """
    rows = st.shape[0]
    caching = len(pc) > 0
    tiered = len(tm) > 0  # a CPU tier below the prefix cache (sim.kernels.tier)
    t_saved = tstats.copy()  # its counts and the slots' offers as an iteration starts
    o_saved = offered.copy()
    no_tlog = tlog[:0].copy()
    hits = np.zeros(rows, dtype=np.int64)  # each admitted row's cached tokens
    no_log = plog[:0].copy()  # the changes of an iteration that runs are not taken back
    new_ahead = lookahead if v1[NEW_LOOKAHEAD] else 0  # an admission's lookahead slots
    in_slots = v1[DRAFT_SLOTS]  # input slots a scheduled request takes beside its tokens
    verify = 1 + nodes
    depth = 0
    for j in range(len(row)):
        if row[j] > 0:
            depth += 1
    max_g = depth
    deeper = np.zeros(len(row) + 1, dtype=np.int64)  # ahead: the chain drawn, one deeper
    if ahead:
        deeper[:depth + 1] = 1
    row = row.copy()  # this iteration's shape (adaptive: a chain of the policy's γ)
    all_feeds = feeds
    floats = np.zeros((4, max_steps))  # the iteration rows' float and int fields
    ints = np.zeros((10, max_steps), dtype=np.int64)
    last_end = np.zeros(rows)
    last_end[:len(last_chunk)] = last_chunk
    first_at = np.full(rows, np.nan)
    adm_at = np.empty(max(n_wait, 1))  # when each admitted row's iteration starts
    gen = 0  # a closed loop's think times taken
    # preemption: the rows preempted and waiting at the queue's front (the last preempted
    # on top, last), the slots they left, the rows admitted in order (Replica.admit's
    # count: ADMIT), each iteration's victims, and each row's grant and verify this step
    front = np.empty(rows, dtype=np.int64)
    n_front, n_old, n_adm, preempts = 0, 0, 0, 0
    old_slots = np.empty(2 * rows + 16, dtype=np.int64)  # (a walk that fills it stops)
    victims = np.empty(rows, dtype=np.int64)
    new_rows = np.empty(rows, dtype=np.int64)  # an iteration's admitted rows, in order
    need_of = np.zeros(rows, dtype=np.int64)
    ver = np.zeros(rows, dtype=np.int64)
    fin = np.empty(rows, dtype=np.int64)
    fin_at = np.empty(rows)
    take = np.zeros(rows, dtype=np.int64)
    acc_of = np.zeros(rows, dtype=np.int64)  # each decoder's accepted depth this iteration
    task_mask = (1 << bits) - 1
    found = np.ones(rows, dtype=np.bool_)  # whose decoder drafts this iteration (a match)
    no_row = np.zeros_like(row)  # the shape of a decoder without a match
    # a ladder keyed on the step that last scheduled each row: a γ per decoder, its chain
    # (or a sticky ladder: each decoder's γ the ladder's, 0 once it was switched off; or
    # an adaptive policy per sequence: each decoder's own γ <= the batch's)
    per_row = (mode == LADDER and (key == BY_SCHEDULED or sticky)) or mode == ADAPTIVE_SEQ
    by_step = mode == LADDER and key == BY_SCHEDULED  # no γ for the batch
    # a sticky ladder's γ for the batch (keyed on the running or decoding rows), or the
    # adaptive policy's, the most a sequence drafts (ADAPTIVE_SEQ)
    g_all = 0
    c_seq = 0.0  # ADAPTIVE_SEQ: this batch's draft-to-verify cost ratio (cost_ratio)
    gam = np.zeros(rows, dtype=np.int64)  # each decoder's γ this iteration (per_row)
    chains = np.zeros((max_g + 1, len(row)), dtype=np.int64)  # [γ, m]: the chain of each γ
    for g in range(max_g + 1):
        chains[g, :g] = 1
    levels = max(max_g + (1 if ahead else 0), 1)  # (ahead: its chain one deeper too)
    levels_n = np.zeros((max(reps, 1), levels), dtype=np.int64)  # per draft replica
    levels_ctx = np.zeros((max(reps, 1), levels), dtype=np.int64)  # and level
    proposed, spare = 0, 0  # matches drawn for the iterations run, and for one not run
    decoding = np.zeros(rows, dtype=np.bool_)
    alive = np.zeros(rows, dtype=np.bool_)
    alive[:n] = True
    order = np.arange(rows)  # the rows alive, in running order: the first n_alive
    prefilling = np.empty(rows, dtype=np.int64)  # an iteration's prefill rows, in order
    group_n = np.zeros(max(reps, 1), dtype=np.int64)  # decoders per draft replica
    group_ctx = np.zeros(max(reps, 1), dtype=np.int64)  # and their context
    passes = np.empty((passes_capacity(max(levels, len(feeds)), reps), 7))  # the draft's
    ones = np.ones(max_g, dtype=np.int64)  # the adaptive policy's deepest chain's feeds
    chain_s = np.zeros(max_g + 1)  # and its seconds per γ
    tree_feeds = np.zeros(max(max_g, 1), dtype=np.int64)  # its tree's feeds (width > 1)
    n_alive, adm, k, ng, nf = n, 0, 0, 0, 0
    t = now
    k_split, ng_split, nf_split, free_split, nfs_split = 0, 0, 0, 0, 0
    st_split = st[:0].copy()
    last_split = last_end[:0].copy()
    first_split = first_at[:0].copy()
    alive_split = alive[:0].copy()
    stack_split = stack[:0].copy()
    # a pipeline (sim.pipeline): up to n_st micro-batches in flight, each a row of fl_f /
    # fl_i in the order dispatched, its rows tagged in fly (its id, their take)
    n_st = len(stages)
    pipe = n_st > 0
    stage_s = np.zeros(max(n_st, 1))
    hop_s = 0.0
    forming = True  # (pipe) the scheduler forms at t: as the walk starts
    why = 0  # (pipe) why it forms at t: 0 the walk's start, 1 a completion, 2 an arrival
    nxt = 0  # (pipe) the next request of the queue whose arrival is still to come
    while nxt < n_wait and arr_at[nxt] < t:
        nxt += 1
    ends = np.empty(max_steps)  # when each iteration written ends
    last_id, pending, dispatched = 0, 0, 0  # the last id given, gaps owed, dispatches
    for j in range(n_fl):
        last_id = fl_i[j, 0] if fl_i[j, 0] > last_id else last_id
        pending += fl_i[j, 1]
    for i in range(rows):  # the rows in flight: what they took, whether they decode
        if fly[i, 0] > 0:
            take[i] = fly[i, 1]
            decoding[i] = st[i, TARGET] == st[i, FILLED]
    cur = 0  # the iteration a pass applies: 0 one it forms, else a micro-batch's id
    rec_start, rec_d, rec_v, end = t, 0.0, 0.0, t
    rec_bs, rec_dec, rec_pre, rec_ver, rec_drafted, rec_code, rec_draws = 0, 0, 0, 0, 0, -1, 0
    while True:
        if not pipe and not (k < max_steps and n_alive + n_front + (n_wait - adm) > 0):
            break
        cur = 0
        if pipe and not forming:  # it waits: for a completion, or an arrival if one fits
            if k >= max_steps:
                break
            woken, at = pipeline_wait(fl_f, n_fl, n_st, arr_at, nxt, n_wait, next_at, t,
                                      horizon)
            if woken == WAIT_STOP:
                break
            t, forming = at, True
            if woken == WAIT_ARRIVAL:  # (past those held: the form stops at it)
                nxt += 1
                why = 2
                continue
            cur = fl_i[0, 0]  # micro-batch fl[0] leaves the last stage: applied below
            end, rec_start, rec_d, rec_v = fl_f[0, 0], fl_f[0, 1], fl_f[0, 2], fl_f[0, 3]
            rec_bs, rec_dec, rec_pre = fl_i[0, 1], fl_i[0, 2], fl_i[0, 3]
            rec_ver, rec_drafted, rec_code, rec_draws = fl_i[0, 4], fl_i[0, 5], fl_i[0, 6], \
                fl_i[0, 7]
            pipeline_pop(fl_f, fl_i, n_fl)
            n_fl -= 1
            pending -= rec_bs
            why = 1
        elif pipe and n_fl == n_st:
            forming = False
            continue
        if cur == 0:  # the step the scheduler forms now
            if pipe and forming:  # requests that came before t are in the queue
                while nxt < n_wait and arr_at[nxt] < t:
                    nxt += 1
                if why == 1 and ((nxt < n_wait and arr_at[nxt] == t)
                                 or (nxt == n_wait and next_at == t)):
                    break  # one comes at the instant a completion wakes it: SimPy's order
            # an arrival at t is in the queue when its own wake forms the step (a closed loop's
            # sends at t always are); one at the end of an iteration may be or not
            seen_now = loop or (pipe and why == 2)
            unsure_now = (why == 1) if pipe else (k > 0 and not loop)
            if loop:  # room for a send per row that might finish in it, and its think time
                most_fin = n_alive + n_front + (filled - adm)
                if len(think) - gen < most_fin or (tail and filled + most_fin > n_wait):
                    break
            if tiered:  # what an iteration the walk leaves to the reference takes back
                tlog[0] = 0
                t_saved[:] = tstats
                o_saved[:] = offered
            if mode and not by_step:  # the policy's shape (first)
                wk = 1  # the root's width (an adaptive policy's tree ⟨wk, 1, …, 1⟩)
                if mode == ADAPTIVE or mode == ADAPTIVE_SEQ:
                    g, wk = adaptive_gamma(st, order, n_alive, alpha, max_g, width, reps,
                                           one_pass, group_n, group_ctx, tp, dp, sp, passes, ones,
                                           chain_s, tree_feeds)
                    if mode == ADAPTIVE_SEQ and g > 0:  # AdaptiveGamma._per_sequence's c
                        c_seq = cost_ratio(chain_s)
                else:
                    size = n_alive
                    if key == BY_DECODING:  # the decoding rows
                        size = 0
                        for o in range(n_alive):
                            if st[order[o], TARGET] == st[order[o], FILLED]:
                                size += 1
                    g = ladder[size if size < len(ladder) else len(ladder) - 1]
                if per_row:  # sticky: each decoder's, unless it was switched off; per sequence:
                    g_all = g  # each decoder's own, at most this
                else:
                    nodes, depth, verify, feeds, tri = g, g, 1 + g, all_feeds[:g], -1.0
                    for j in range(max_g):
                        row[j] = 1 if j < g else 0
                    if wk > 1:  # the chain widened at its root: a tree
                        row[0] = wk
                        tri = root_tree(wk, g, tree_feeds)
                        nodes, verify, feeds = wk * g, 1 + wk * g, tree_feeds[:g]
            # the most tokens a request may take this step (long_prefill_token_threshold, which
            # cuts a verify too): it counts the requests running or waiting as the step starts
            requests = n_alive + min(n_front, 2)  # (the preempted wait at the front)
            if v1[LONE_UNCAPPED] and n_alive <= 1 and chunked and chunk_tokens < max_tokens:
                # one running or none, and the cap would bind: how many wait (up to 2)?
                unsure = False
                for w in range(adm, min(adm + 2 - min(n_front, 2), n_wait + 1)):
                    came = next_at if w == n_wait else arr_at[w]
                    if came < t or (seen_now and came == t):
                        requests += 1
                    else:
                        # in the queue or not: SimPy's order (a closed loop's is known)
                        unsure = came == t and unsure_now and not seen_now
                        break
                if unsure:
                    break
            most = most_tokens(requests, chunk_tokens, max_tokens, chunked, v1[LONE_UNCAPPED])
            if propose >= 0.0:  # a lookup drafter: which decoders find a match this step
                spare = 0
                for o in range(n_alive):
                    i = order[o]
                    if st[i, TARGET] == st[i, FILLED]:
                        found[i] = prng.random() < propose
                        spare += 1
            # 1. the budget walk in running order, and the blocks for each scheduled row
            budget = max_tokens
            extra = 0
            cut = False
            n_dec, s_ctx, n_pre, p_new, p_ctx, p_new_ctx, p_sq = 0, 0, 0, 0, 0, 0, 0
            n_spec, c_dec = 0, 0  # decoders of the shared shape; every decoder's context
            # the decoders that verify a shape of their own (a lookup drafter's without a match,
            # or a γ per decoder): their count and sums, a prefill chunk's of their verify
            o_n, o_new, o_ctx, o_new_ctx, o_sq = 0, 0, 0, 0, 0
            # a γ per decoder: those with γ > 0, Σ γ, the deepest; those at γ = 0, their context
            n_draft, drafts, deepest, n_idle, c_idle = 0, 0, 0, 0, 0
            n_cold, c_cold, n_ready = 0, 0, 0  # ahead: the decoders not ready, their context
            group_n[:] = 0
            group_ctx[:] = 0
            if per_row:
                levels_n[:] = 0
                levels_ctx[:] = 0
            for o in range(n_alive):  # 1. the budget walk: each running row's take
                i = order[o]
                if fly[i, 0] > 0:
                    continue  # in flight: not scheduled until its micro-batch is back
                take[i] = 0
                left = st[i, TARGET] - st[i, FILLED]
                if per_row and left == 0:  # BatchLadder.shape: its last step's size, its γ
                    if mode == ADAPTIVE_SEQ:  # AdaptiveGamma._per_sequence, from its history
                        gam[i] = 0 if g_all == 0 else sequence_gamma(
                            st[i, COUNTS + 3], st[i, COUNTS + 4], alpha, c_seq, g_all)
                    elif key == BY_SCHEDULED:
                        size = st[i, SCHEDULED]
                        gam[i] = ladder[size if size < len(ladder) else len(ladder) - 1]
                    else:
                        gam[i] = g_all
                    if sticky and st[i, SPEC_OFF]:  # Replica.draft_shapes: none once switched off
                        gam[i] = 0
                    verify_i = 1 + gam[i]
                else:
                    verify_i = verify if found[i] else 1
                want = wanted(left, verify_i, most)
                got = share(want, budget, in_slots)
                if got <= 0:
                    continue
                if left == 0 and got < verify_i:
                    cut = True  # its draft is cut to fit: a shape of its own
                    break
                take[i] = got
                ver[i] = verify_i
                budget -= spent(got, in_slots)
                need_of[i] = grant(st[i, KV], got, lookahead, st[i, BLOCKS], block_size)
                extra += need_of[i]
            if cut:
                break  # the full scheduler cuts the draft
            # 2. the blocks for each scheduled row; where they are short, vLLM's preemption
            # (preempt_until_fits): while a row in running order cannot get its blocks, the
            # last row still running is preempted by recompute (perhaps the row itself). The
            # victims' blocks (with a prefix cache: cached, then freed) are logged; the rows
            # change once the iteration is sure to run (below)
            n_run = n_alive  # the rows that keep running: order[:n_run]
            n_vic = 0
            if caching:
                plog[0] = 0
            f = free - extra  # the free blocks after the grants (and the admissions below)
            if extra > free:
                if strict or pipe or n_old + n_alive > len(old_slots):
                    break  # (a router reads the pool mid-iteration: the reference's)
                f = free
                short = False  # a log too short to take a victim's changes back
                o = 0
                while o < n_run:
                    i = order[o]
                    if take[i] == 0:
                        o += 1
                        continue
                    while need_of[i] > f:
                        n_run -= 1
                        vic = order[n_run]
                        victims[n_vic] = vic
                        n_vic += 1
                        if caching:  # Replica.preempt: its committed blocks cached, then freed
                            if pc_room(plog) < LOG_PER_BLOCK * (2 * st[vic, BLOCKS] + 4) or (
                                    tiered and pc_room(tlog) < TIER_LOG * (st[vic, BLOCKS] + 1)):
                                short = True
                                break
                            pc_keep_committed(pc, plog, pkeys, pstarts, slots[vic], st[vic, RID],
                                              st[vic, KV], prompt_len[vic] + st[vic, EMITTED])
                            if tiered:  # (keep_committed offers them the CPU tier)
                                tier_offer_slot(tm, tlog, tstats, offered, pc, pkeys, pstarts,
                                                slots[vic], st[vic, RID])
                            f += pc_free_slot(pc, plog, slots[vic], st[vic, BLOCKS])
                            if tiered:  # (release: the slot's offers start again)
                                offered[slots[vic]] = 0
                        else:
                            f += st[vic, BLOCKS]
                        if vic == i:
                            break
                    if short:
                        break
                    if o < n_run:  # it got its blocks
                        f -= need_of[i]
                        o += 1
                extra, n_sched = 0, 0
                for o in range(n_run):
                    if take[order[o]] > 0:
                        extra += need_of[order[o]]
                        n_sched += 1
                for x in range(n_vic):
                    take[victims[x]] = 0
                if short or n_sched == 0:
                    if caching:
                        caches_back(pc, plog, tm, tlog, tstats, t_saved, offered, o_saved)
                    break  # (or nobody left to run: the reference's step that only preempts)
            for o in range(n_run):  # the batch: each scheduled row's part of the passes
                i = order[o]
                got = take[i]
                if got == 0 or fly[i, 0] > 0:
                    continue
                verify_i = ver[i]
                left = st[i, TARGET] - st[i, FILLED]
                decoding[i] = left == 0
                if left == 0:
                    ctx = st[i, KV]
                    grp = n_dec % reps  # the draft replica this decoder's drafts go to
                    if reps > 1:
                        group_n[grp] += 1
                        group_ctx[grp] += ctx
                    n_dec += 1
                    c_dec += ctx
                    if ahead:  # a causal run of its own (_per_sequence), its readiness
                        drafts += nodes
                        if st[i, READY]:
                            n_ready += 1
                        else:
                            n_cold += 1
                            c_cold += ctx
                    if found[i] and not per_row and not ahead:
                        n_spec += 1
                        s_ctx += ctx
                    else:
                        o_n += 1
                        o_new += verify_i
                        o_ctx += ctx
                        o_new_ctx += verify_i * ctx
                        o_sq += verify_i * verify_i
                    if per_row:
                        g = gam[i]
                        if g > 0:
                            n_draft += 1
                            drafts += g
                            deepest = g if g > deepest else deepest
                        else:
                            n_idle += 1
                            c_idle += ctx
                        for j in range(g):  # the draft passes that feed it
                            levels_n[grp, j] += 1
                            levels_ctx[grp, j] += ctx
                else:
                    prefilling[n_pre] = i
                    n_pre += 1
                    p_new += got
                    p_ctx += st[i, KV]
                    p_new_ctx += got * st[i, KV]
                    p_sq += got * got
            # a sticky ladder's requests switched off beside others drafting: the reference
            # prices each row's own passes, those switched off feeding none
            # (per_sequence_seconds' general path), here one draft replica's alone (where none
            # drafts, plan_vllm_v1 makes the rows one shape of zeros: each draft ingests its
            # token, as without a sticky ladder)
            off_rows = sticky and n_idle > 0 and n_draft > 0
            if off_rows and reps > 1 and not one_pass:
                if caching:
                    caches_back(pc, plog, tm, tlog, tstats, t_saved, offered, o_saved)
                break
            if caching:  # the grants (BlockManager.grant), then cache_prefills
                blocks_new = p_new // block_size
                if pc_room(plog) < LOG_PER_BLOCK * (extra + blocks_new + n_pre + 1) or (
                        tiered and pc_room(tlog) < TIER_LOG * (blocks_new + 2 * n_pre + 1)):
                    caches_back(pc, plog, tm, tlog, tstats, t_saved, offered, o_saved)
                    break  # a log too short to take them back
                pc_pop(pc, plog, extra)
                for o in range(n_pre):
                    i = prefilling[o]
                    pc_cache(pc, plog, pkeys, pstarts, slots[i], st[i, RID], st[i, KV] + take[i],
                             prompts[st[i, RID]] + st[i, EMITTED])
                    if tiered:  # (the pool's cache offers the CPU tier what it cached)
                        tier_offer_slot(tm, tlog, tstats, offered, pc, pkeys, pstarts, slots[i],
                                        st[i, RID])
            # 3. admissions, only where nobody was preempted: the preempted at the queue's
            # front first (the last preempted first), then the queue; counted before anything
            # changes (but the prefix cache, whose changes the log takes back)
            a, aq, af = 0, 0, 0  # admitted: in all, from the queue, from the front
            beyond = False
            pad = v1[PAD_TOKENS]
            scheduled, running_pre = n_dec + n_pre, n_pre
            while n_vic == 0 and n_alive + a < max_seqs and budget > in_slots:
                from_front = af < n_front
                if from_front:
                    i = front[n_front - 1 - af]
                else:
                    w = adm + aq
                    came = next_at if w == n_wait else arr_at[w]
                    if not (came < t or (seen_now and came == t)):
                        # not in the queue yet: at the iteration's start, unsure (but a loop's)
                        beyond = came == t and unsure_now and not seen_now
                        break
                    if w == n_wait:
                        beyond = True  # a request the walk does not hold
                        break
                    i = n + w
                target = st[i, TARGET]
                hit, idle = 0, 0
                if caching:  # its leading cached blocks (admit_waiting)
                    if pc_room(plog) < LOG_PER_BLOCK * (2 * blocks_for(target + new_ahead,
                                                                       block_size) + 4):
                        beyond = True  # a log too short to take it back
                        break
                    hit, idle = pc_lookup(pc, pkeys, pstarts, st[i, RID], target)
                    if tiered:
                        more, busy = tier_lookup(tm, pc, pkeys, pstarts, st[i, RID], target, hit,
                                                 block_size)
                        if more > 0 or busy or pc_room(tlog) < TIER_LOG * (
                                blocks_for(target, block_size) + 1):
                            # a load from the tier, or a request passed over while another
                            # loads its blocks: the reference's (or a log too short)
                            beyond = True
                            break
                cached = hit * block_size
                todo = target - cached
                if pad and padding(todo, cached, pad, scheduled, running_pre):
                    beyond = True  # padded to a verify: the reference forms it
                    break
                chunk = first_chunk(todo, most, budget - in_slots, chunked)
                need = admission(target, cached, chunk, 0, new_ahead, hit, idle, f,
                                 budget - in_slots, v1[FULL_ISL], block_size)
                if need < 0:
                    break
                if caching:  # in the slot Replica.admit gives it: attach, take, cache
                    s = stack[n_free - 1 - a]
                    if hit > 0:
                        f -= pc_attach(pc, plog, pkeys, pstarts, s, st[i, RID], hit)
                    pc_pop(pc, plog, need)
                    pc_cache(pc, plog, pkeys, pstarts, s, st[i, RID], cached + chunk, target)
                    if tiered:
                        tier_offer_slot(tm, tlog, tstats, offered, pc, pkeys, pstarts, s,
                                        st[i, RID])
                take[i] = chunk
                hits[i] = cached
                new_rows[a] = i
                a += 1
                if from_front:
                    af += 1
                else:
                    adm_at[adm + aq] = t
                    aq += 1
                budget -= spent(chunk, in_slots)
                f -= need
                n_pre += 1
                p_new += chunk
                p_ctx += cached
                p_new_ctx += chunk * cached
                p_sq += chunk * chunk
            if pipe and not beyond and n_dec + n_pre == 0:
                if caching:
                    caches_back(pc, plog, tm, tlog, tstats, t_saved, offered, o_saved)
                forming = False  # nothing to dispatch: it waits for the next event
                continue
            if beyond or n_dec + n_pre == 0 or ng + pending + n_dec + n_pre > len(gaps):
                if caching:
                    caches_back(pc, plog, tm, tlog, tstats, t_saved, offered, o_saved)
                # a request the walk does not hold or may not see, nothing to run, or no room
                # for the gaps (a decoder's, a recompute's that ends)
                break
            # IterationPricer.price: the target pass of the verifies and the prefill chunks (a
            # decoder with a shape of its own, a chain (causal), is priced as a chunk of its
            # verify; integer sums, so the same floats as _per_sequence's arrays give)
            new, kv, keys, seqs = verify_pass(verify, tri, s_ctx, n_spec, p_new + o_new,
                                              p_ctx + o_ctx, p_new_ctx + o_new_ctx, p_sq + o_sq,
                                              n_pre + o_n)
            if pipe:  # each stage's seconds and the hop's (price_stages)
                v, code, hop_s = stages_seconds(new, kv, keys, seqs, stages, hop_fixed,
                                                hop_token, bound, stage_s)
            else:
                v, code = pass_seconds(new, kv, keys, seqs, tp, bound)
            # ... and the draft's passes (draft_pricing.shared_shape_seconds)
            d = 0.0
            over = 0.0  # ahead: what this iteration's drafting ahead outlasts its verify by
            if propose >= 0.0:  # no draft pass (serial_passes of a CPU drafter: none)
                d += round_seconds(sp, n_spec, 0, tri >= 0.0)
                if host_s:  # Replica.price: the host's drafting, every decoder
                    d += host_s * n_dec
            elif per_row:  # _per_sequence: draft_pricing.per_sequence_seconds, round_s
                if off_rows and not one_pass:  # only the drafting rows' passes (and the chunks')
                    d = chain_rows_seconds(n_draft, levels_ctx[0, 0], n_pre, p_new, p_ctx,
                                           p_new_ctx, p_sq, levels_n, levels_ctx, deepest, 0, 0,
                                           1, dp, passes)
                elif one_pass or n_draft == 0:  # the heads' one pass, or no draft: no shapes
                    d = draft_seconds(n_dec, n_pre, c_dec, p_new, p_ctx, p_new_ctx, p_sq,
                                      all_feeds[:1 if n_draft else 0], tri, reps, one_pass,
                                      group_n, group_ctx, dp, passes)
                else:
                    d = chain_rows_seconds(n_dec, c_dec, n_pre, p_new, p_ctx, p_new_ctx, p_sq,
                                           levels_n, levels_ctx, deepest, n_idle, c_idle, reps,
                                           dp, passes)
                if n_draft > 0:
                    d += round_seconds(sp, n_draft, 1 if one_pass else deepest, False)
            elif ahead and n_dec > 0:  # IterationPricer._per_sequence with ``ready``
                if n_cold > 0:  # the chains not drafted ahead, beside the prefill chunks
                    levels_n[0, :depth] = n_cold
                    levels_ctx[0, :depth] = c_cold
                    d = chain_rows_seconds(n_cold, c_cold, n_pre, p_new, p_ctx, p_new_ctx, p_sq,
                                           levels_n, levels_ctx, depth, 0, 0, 1, dp, passes)
                elif n_pre > 0:  # every chain drafted ahead: the chunks' pass alone
                    d = chain_rows_seconds(0, 0, n_pre, p_new, p_ctx, p_new_ctx, p_sq, levels_n,
                                           levels_ctx, 1, 0, 0, 1, dp, passes)
                d = d + (excess if n_ready > 0 else 0.0)
                # the drafting ahead during this verify: every chain one guess deeper
                levels_n[0, :depth + 1] = n_dec
                levels_ctx[0, :depth + 1] = c_dec
                over = chain_rows_seconds(n_dec, c_dec, 0, 0, 0, 0, 0, levels_n, levels_ctx,
                                          depth + 1, 0, 0, 1, dp, passes) - v
                d += round_seconds(sp, n_dec, depth if n_cold > 0 else 0, False)
            elif nodes > 0 or mode:
                d = draft_seconds(n_dec, n_pre, s_ctx, p_new, p_ctx, p_new_ctx, p_sq, feeds, tri,
                                  reps, one_pass, group_n, group_ctx, dp, passes)
                if nodes > 0:  # the engine's work around the passes (IterationPricer.round_s)
                    d += round_seconds(sp, n_dec, 1 if one_pass else len(feeds), tri >= 0.0)
            end = t + (d + v)
            last = not end < horizon and not pipe  # (a pipeline dispatches before the horizon)
            if last and (a or strict or n_vic or (k and preempts)):
                if caching:
                    caches_back(pc, plog, tm, tlog, tstats, t_saved, offered, o_saved)
                # an admission or a preemption when the event comes (the scheduler's, made as
                # the step is formed, before it runs), a router reads, or a split (the
                # iterations before the event written first) after a preemption
                break
            if last and k:  # the state when it starts: where the replica stops for the event
                k_split, ng_split, nf_split = k, ng, nf
                st_split = st.copy()
                last_split = last_end.copy()
                first_split = first_at.copy()
                alive_split = alive.copy()
                free_split, nfs_split = free, n_free
                stack_split = stack.copy()
            # the iteration runs: admissions, grants (below), then sim.step.advance
            proposed += spare
            spare = 0
            if ahead and n_dec > 0:
                excess = over if over > 0.0 else 0.0
            if sticky:  # Replica.draft_shapes: a decoder the ladder gives γ = 0 is off for good
                for o in range(n_alive):
                    i = order[o]
                    if st[i, TARGET] == st[i, FILLED] and gam[i] == 0:
                        st[i, SPEC_OFF] = 1
            for x in range(n_vic):  # Replica.preempt: to the queue's front, its slot freed
                vic = victims[x]
                st[vic, COUNTS + 5] += 1  # (its emitted tokens and counters go with it)
                st[vic, FILLED] = 0
                st[vic, KV] = 0
                st[vic, BLOCKS] = 0
                st[vic, READY] = 0
                st[vic, RESUMED] = 0
                st[vic, TARGET] = prompt_len[vic] + st[vic, EMITTED]  # (prefill_target_of)
                resumes[vic] = 1
                alive[vic] = False
                stack[n_free] = slots[vic]
                n_free += 1
                old_slots[n_old] = slots[vic]
                n_old += 1
                front[n_front] = vic
                n_front += 1
            preempts += n_vic
            n_alive = n_run
            for j in range(a):
                i = new_rows[j]
                order[n_alive + j] = i
                alive[i] = True
                decoding[i] = False
                st[i, FILLED] = st[i, KV] = hits[i]
                if resumes[i]:  # resumed: its counters (and cached tokens) came back with it
                    st[i, RESUMED] = 1
                else:
                    st[i, CACHED] = hits[i]
                st[i, BLOCKS] = blocks_for(hits[i] + take[i] + new_ahead, block_size)
                n_adm += 1
                st[i, ADMIT] = adm_base + n_adm
                n_free -= 1
                slots[i] = stack[n_free]
            free = f
            adm += aq
            n_front -= af
            n_alive += a
            # the rows it schedules: their grants (an admitted row took its blocks above), the
            # step's size (Replica.form_batch), their micro-batch
            size = n_dec + n_pre
            last_id += 1
            for o in range(n_alive):
                i = order[o]
                if take[i] == 0 or fly[i, 0] > 0:
                    continue
                if o < n_alive - a:
                    st[i, BLOCKS] += need_of[i]
                st[i, SCHEDULED] = size
                fly[i, 0], fly[i, 1] = last_id, take[i]
            # whether its verifies draw depths: some decoder verifies a draft
            if per_row:
                draws = n_draft > 0
            elif ahead:
                draws = n_dec > 0
            else:
                draws = not ((nodes == 0 and not mode) or n_spec == 0)
            rec_start, rec_d, rec_v, rec_code = t, d, v, code
            rec_bs, rec_dec, rec_pre = size, n_dec, p_new
            rec_ver, rec_drafted, rec_draws = n_spec * verify + o_new, n_spec * nodes + drafts, \
                1 if draws else 0
            if pipe:  # in flight until it leaves the last stage (pipeline_pass)
                end = pipeline_pass(free_at, t, d, stage_s[:n_st], hop_s)
                fl_f[n_fl, 0], fl_f[n_fl, 1], fl_f[n_fl, 2], fl_f[n_fl, 3] = end, t, d, v
                fl_i[n_fl, 0], fl_i[n_fl, 1], fl_i[n_fl, 2] = last_id, size, n_dec
                fl_i[n_fl, 3], fl_i[n_fl, 4], fl_i[n_fl, 5] = p_new, rec_ver, rec_drafted
                fl_i[n_fl, 6], fl_i[n_fl, 7] = code, rec_draws
                n_fl += 1
                pending += size
                dispatched += 1
                continue  # and it forms again at t
            cur = last_id
        out = 0
        accepted = 0
        short = 0  # verifies that rejected a guess (AdaptiveGamma.observe's "checked")
        # an adaptive policy's tree: observe counts its chain levels (2 and deeper) alone
        rooted = mode == ADAPTIVE and row[0] > 1
        chain_acc, chain_short = 0, 0  # their accepted guesses, and the rejecting verifies
        fin_before = nf
        back = 0  # blocks of rejected drafts the verifies give back (with rolls_back)
        running = n_alive  # its rows are among order[:running] (fly: its id)
        draws = rec_draws > 0
        if draws and (nodes > 0 or per_row):  # the depths, task after task (a task mix's)
            wide = False  # a static shape wider than a chain (per_row: chains)
            if not per_row:
                for j in range(len(row)):
                    if row[j] > 1:
                        wide = True
            for tsk in range(len(p_geo)):
                geo = meta[tsk, KIND] == GEOMETRIC
                if meta[tsk, KIND] == LEVELS and p_geo[tsk] > 0.0:
                    geo = True  # unless one of its decoders verifies a wide shape
                    if wide:
                        for o in range(running):
                            i = order[o]
                            if (fly[i, 0] == cur and decoding[i] and found[i]
                                    and (st[i, STREAM] & task_mask) == tsk):
                                geo = False
                                break
                for o in range(running):
                    i = order[o]
                    if fly[i, 0] != cur or not decoding[i]:
                        continue
                    if (st[i, STREAM] & task_mask) != tsk:
                        continue
                    if per_row:
                        shape = chains[gam[i]]
                    elif ahead:  # the chain one deeper (sim.step._draw_ahead)
                        shape = deeper
                    elif found[i]:
                        shape = row
                    else:
                        shape = no_row
                    acc_of[i] = accepted_depth(rng, st[i, STREAM], st[i, EMITTED], shape,
                                               meta, p_geo, runs, ring, table, bits, geo)
        for o in range(running):  # sim.step.advance: a recompute whose prefill ends: its gap
            i = order[o]
            if fly[i, 0] != cur or decoding[i]:
                continue
            if (st[i, RESUMED] and st[i, EMITTED] > 0
                    and st[i, FILLED] + take[i] >= st[i, TARGET]):
                gaps[ng] = end - last_end[i]
                ng += 1
        for o in range(running):  # decoders, in running order
            i = order[o]
            if fly[i, 0] != cur or not decoding[i]:
                continue
            fly[i, 0] = 0
            held = st[i, BLOCKS]  # (granted as it was scheduled)
            if not draws:  # no draft in the batch: no draws
                keep = decode_one(st, i, held, block_size, v1[ROLLS_BACK])
                out += 1
            elif nodes == 0 and not per_row:  # the policy's γ = 0 this iteration: one token
                st[i, COUNTS] += 1
                step = emitted(0, st[i, OUTPUT] - st[i, EMITTED])
                out += step
                st[i, EMITTED] += step
                st[i, KV] += 1
                keep = kept_blocks(st[i, KV], held, block_size, v1[ROLLS_BACK])
                st[i, BLOCKS] = keep
            else:  # the verify: counters, the accepted depth, emit, roll the KV back
                # (a lookup drafter's decoder without a match: a shape of zeros, drawn too; a
                # γ per decoder: its chain, a γ = 0 one a row of zeros, drawn too)
                if per_row:
                    deep, drafted = gam[i], gam[i]
                elif found[i]:
                    deep, drafted = depth, nodes
                else:
                    deep, drafted = 0, 0
                acc = acc_of[i]  # (drawn above, on the same shape)
                if ahead:  # every guess right, and the one drafted past them
                    st[i, READY] = 1 if acc > deep else 0
                if acc > deep:
                    acc = deep
                st[i, COUNTS] += 1
                st[i, COUNTS + 1] += 1 if deep > 0 else 0
                st[i, COUNTS + 2] += drafted
                st[i, COUNTS + 3] += acc
                st[i, COUNTS + 4] += acc + (1 if acc < deep else 0)
                accepted += acc
                short += 1 if acc < deep else 0
                if rooted and acc >= 1:  # past the root's level
                    chain_acc += acc - 1
                    chain_short += 1 if acc < deep else 0
                step = emitted(acc, st[i, OUTPUT] - st[i, EMITTED])
                out += step
                st[i, EMITTED] += step
                st[i, KV] += acc + 1
                keep = kept_blocks(st[i, KV], held, block_size, v1[ROLLS_BACK])
                st[i, BLOCKS] = keep
            free += held - keep
            back += held - keep
            gaps[ng] = end - last_end[i]
            ng += 1
            last_end[i] = end
            if st[i, EMITTED] >= st[i, OUTPUT]:
                alive[i] = False
                n_alive -= 1
                if not caching:  # (the cache frees them below)
                    free += keep
                fin[nf], fin_at[nf] = i, end
                nf += 1
        for o in range(running):  # prefill chunks: running ones in order, then admitted
            i = order[o]
            if fly[i, 0] != cur or decoding[i]:
                continue
            fly[i, 0] = 0
            st[i, FILLED] += take[i]
            st[i, KV] += take[i]
            if st[i, RESUMED]:  # recomputed prefill tokens
                st[i, COUNTS + 6] += take[i]
            take[i] = 0
            if st[i, FILLED] >= st[i, TARGET]:  # the pass that completes it samples a token
                if st[i, EMITTED] == 0:  # its first (not a recompute's: its gap, above)
                    first_at[i] = end
                st[i, RESUMED] = 0
                st[i, EMITTED] += 1
                out += 1
                last_end[i] = end
                if st[i, EMITTED] >= st[i, OUTPUT]:
                    alive[i] = False
                    n_alive -= 1
                    if not caching:
                        free += st[i, BLOCKS]
                    fin[nf], fin_at[nf] = i, end
                    nf += 1
        if caching:  # BlockManager.rolled_back's run, then Replica.finish (retire)
            pc_push_run(pc, no_log, back, pc[UNHASHED_FIRST])
            for j in range(fin_before, nf):  # its full blocks of computed tokens cached
                i = fin[j]
                pc_keep_committed(pc, no_log, pkeys, pstarts, slots[i], st[i, RID],
                                  prompts[st[i, RID]] + st[i, EMITTED] - 1, -1)
                if tiered:  # offered to the CPU tier, then ranked anew (Loads.finished)
                    tier_offer_slot(tm, no_tlog, tstats, offered, pc, pkeys, pstarts,
                                    slots[i], st[i, RID])
                    tier_finished(tm, no_tlog, offered, pc, pkeys, pstarts, slots[i],
                                  st[i, RID])
            for j in range(fin_before, nf):  # then its blocks freed
                i = fin[j]
                free += pc_free_slot(pc, no_log, slots[i], st[i, BLOCKS])
                if tiered:
                    offered[slots[i]] = 0
        if rooted:  # AdaptiveGamma.observe after a tree verify: its levels 2..depth
            if chain_acc + chain_short > 0:
                alpha += smoothing * (chain_acc / (chain_acc + chain_short) - alpha)
        elif ((mode == ADAPTIVE and nodes > 0) or mode == ADAPTIVE_SEQ) and rec_dec > 0 \
                and accepted + short > 0:  # AdaptiveGamma.observe
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
            if loop:  # ClosedLoop.finished: each finish sends the next after a think time
                for _ in range(fin_before, nf):
                    at = end + think[gen]
                    gen += 1
                    # made now and due now (no think time, or one below the clock's
                    # resolution): seen by the step after the one formed now
                    seen_at = at if at > end else np.nextafter(at, np.inf)
                    p = filled  # after every send held that runs at or before it
                    while p > adm and sub_at[p - 1] > at:
                        p -= 1
                    q = filled if filled < n_wait else n_wait - 1  # the last may drop off
                    while q > p:
                        sub_at[q] = sub_at[q - 1]
                        arr_at[q] = arr_at[q - 1]
                        q -= 1
                    if p < n_wait:
                        sub_at[p] = at
                        arr_at[p] = seen_at
                    if filled < n_wait:
                        filled += 1
        floats[0, k] = rec_start  # start_at, duration_s, draft_s, verify_s
        floats[1, k] = end - rec_start
        floats[2, k] = rec_d
        floats[3, k] = rec_v
        ints[1, k] = rec_bs  # batch_size, decode_seqs, prefill_tokens,
        ints[2, k] = rec_dec  # verify_tokens, drafted_tokens, accepted_tokens,
        ints[3, k] = rec_pre  # emitted_tokens, the bound's code, KV blocks used
        ints[4, k] = rec_ver
        ints[5, k] = rec_drafted
        ints[6, k] = accepted
        ints[7, k] = out
        ints[8, k] = rec_code
        ints[9, k] = cap - free
        ends[k] = end
        t = end
        k += 1
        if pipe:
            if first_finish and nf > fin_before:
                break  # (after the completion, before the scheduler forms at t)
            continue
        if last or (first_finish and nf > fin_before):
            break
    return (k, alpha, floats[:, :k], ints[:, :k], ng, last_end, first_at, adm,
            adm_at[:adm], fin[:nf], fin_at[:nf], free, n_free, proposed, spare,
            (k_split, st_split, last_split, first_split, alive_split, ng_split, nf_split,
             free_split, stack_split, nfs_split), excess, n_adm, front[:n_front].copy(),
            old_slots[:n_old].copy(), preempts, t, n_fl, ends[:k], dispatched)
