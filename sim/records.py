"""Flat, immutable records the engine emits: one per request, one per replica iteration.

The engine writes these once, at the end of a run (or at the horizon), and never reads
them back; ``reports/`` turns them into DataFrames (``pd.DataFrame(records)``). Absolute
times end in ``_at`` (simulated seconds since the start), durations in ``_s``; a time that
never happened (a request still queued at the horizon) is ``nan``.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What happened to one request.

    ``finished`` is False for requests still waiting or running at the horizon: they are
    recorded, never dropped. Token counters follow vLLM's definitions: ``verify_steps``
    counts target passes that decoded this request after its prefill (with or without
    speculation), ``draft_steps`` those of them that verified a draft (vLLM's
    ``num_drafts``), ``drafted_tokens`` the draft tokens proposed (tree nodes below the root),
    ``accepted_tokens`` the draft tokens the target accepted, and ``checked_tokens`` the
    guesses the verification actually looked at (accepted ones plus the first rejected one),
    which is what the lecture's measured α̂ is averaged over (§4.5).
    """

    id: int
    replica: int
    task: int
    arrival_at: float
    first_scheduled_at: float
    first_token_at: float
    finished_at: float
    prompt_tokens: int
    output_tokens: int
    emitted_tokens: int
    verify_steps: int
    draft_steps: int
    drafted_tokens: int
    accepted_tokens: int
    checked_tokens: int
    preemptions: int
    finished: bool


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One replica iteration: the draft passes plus one target pass, priced together.

    ``batch_size`` counts sequences in the target pass (decoding and prefilling);
    ``prefill_tokens`` and ``verify_tokens`` split its new tokens (verify tokens are the
    last token plus the draft guesses or tree nodes of every decoding sequence);
    ``emitted_tokens`` are the output tokens the iteration produced; ``bound`` is which
    roofline limit won the target pass ("compute", "memory", "comm", "host"). In a
    pipeline-parallel replica there is one record per micro-batch and ``duration_s`` runs
    from its dispatch until it leaves the last stage (waits for busy stages and links
    included), so one replica's records may overlap in time.
    """

    replica: int
    start_at: float
    duration_s: float
    batch_size: int
    decode_seqs: int
    prefill_tokens: int
    verify_tokens: int
    drafted_tokens: int
    accepted_tokens: int
    emitted_tokens: int
    draft_s: float
    verify_s: float
    bound: str


def field_names(record_type: type) -> list[str]:
    """Column names of a record type, in declaration order (for CSV headers)."""
    return [f.name for f in fields(record_type)]


def as_row(record: RequestRecord | IterationRecord) -> tuple:
    """A record's values in declaration order (for CSV rows)."""
    return astuple(record)
