"""The layout of a replica's per-slot state: one int64 row per running sequence.

Keeping every field of a slot in one row of one array lets the engine gather a whole
batch's state with a single fancy-index operation and scatter it back with another,
instead of one per field (the simulator's hot path; see ``specsim bench``).
"""

# request id, tokens to prefill (prompt + tokens emitted before a preemption), prefilled,
# emitted, cached KV tokens, requested output, acceptance stream, KV blocks held;
# ADMIT: the replica's admission counter when the request (re)entered the running set
# (vLLM v1's ``running`` list order: a resumed request goes to the back); RESUMED: 1 while it
# re-prefills after a preemption (those tokens are recompute); SPEC_OFF: speculation
# disabled for the rest of the request (vLLM v0's disable-by-batch-size); DLAG: tokens the
# draft has not ingested yet (draft_sync: catch_up); READY: 1 when the draft on its own GPU
# already drafted this sequence's next guesses while the last verify ran (PEARL-style
# overlap); then the request's counters, written to the RunLog when it leaves: verify steps,
# draft steps, drafted, accepted and checked tokens, preemptions, recomputed prefill tokens,
# and the prompt tokens its first admission found in the prefix cache (CACHED, vLLM's
# num_cached_tokens). A preempted request carries its emitted tokens and counters with it
# back to the queue.
RID, TARGET, FILLED, EMITTED, KV, OUTPUT, STREAM, BLOCKS = range(8)
ADMIT, RESUMED, SPEC_OFF, DLAG, READY, COUNTS = range(8, 14)
N_COUNTERS = 8
CACHED = COUNTS + 7
N_COLS = COUNTS + N_COUNTERS
