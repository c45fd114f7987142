"""The layout of a replica's per-slot state: one int64 row per running sequence.

Keeping every field of a slot in one row of one array lets the engine gather a whole
batch's state with a single fancy-index operation and scatter it back with another,
instead of one per field (the simulator's hot path; see ``specsim bench``).
"""

# request id, tokens to prefill (prompt + tokens emitted before a preemption), prefilled,
# emitted, cached KV tokens, requested output, acceptance stream, KV blocks held, then the
# request's counters, written to the RunLog when it leaves: verify steps, draft steps,
# drafted, accepted and checked tokens, preemptions. A preempted request carries its
# emitted tokens and counters with it back to the queue.
RID, TARGET, FILLED, EMITTED, KV, OUTPUT, STREAM, BLOCKS, COUNTS = range(9)
N_COUNTERS = 6
N_COLS = COUNTS + N_COUNTERS
