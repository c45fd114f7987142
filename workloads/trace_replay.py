"""From trace rows to requests: a time window, a sample, time scaling, a count or horizon.

:func:`replay_rows` takes the rows of a timestamped trace (``workloads.public_traces``) in
file order and keeps, in this order:

1. the **window**: rows whose trace time, in seconds after the file's first row (even one
   left out, ``TraceCounts.first_at``), lies in ``[start_s, start_s + duration_s)`` (all
   rows by default);
2. the **sample**: each row of the window independently with probability ``sample`` (a
   Bernoulli thinning, which keeps a Poisson process Poisson at ``sample`` × its rate and
   keeps bursts bursty; the draws come from the generator given, one per row of the window
   in file order, so the same seed keeps the same rows whatever the count or horizon);
3. the **count or horizon**: the first ``n`` kept rows, or (``n`` None) those arriving
   before ``horizon_s``.

Arrival times are seconds after the first kept row, divided by ``time_scale`` (``k`` replays
the trace k× faster: every gap is divided by k). Reading stops as soon as the window ends,
``n`` rows are kept or the horizon is passed, so a short window of a large trace is quick.
Task names are drawn by weight, as for synthetic workloads (``tasks``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from workloads.requests import DEFAULT_TASK, RequestSpec, check_task_weights
from workloads.trace_rows import TraceCounts, TraceRow

_CHUNK = 1024  # uniforms drawn at a time for the sample (the stream does not depend on it)


def replay_rows(
    rows: Iterable[TraceRow],
    units_per_s: int,
    rng: np.random.Generator,
    n: int | None = None,
    horizon_s: float | None = None,
    time_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: float | None = None,
    sample: float | None = None,
    tasks: Mapping[str, float] | None = None,
    counts: TraceCounts | None = None,
) -> list[RequestSpec]:
    """The requests a trace's ``rows`` give (steps in the module docstring).

    ``rows`` carry times in units of 1 / ``units_per_s`` seconds. At most ``n`` requests
    come back (fewer when the trace or its window holds fewer: the caller decides whether
    that is an error); ``n`` None keeps those arriving before ``horizon_s`` (None: all).
    Two generators are spawned from ``rng``: the sample, then the tasks. ``counts`` (if
    given) is filled in; rows with ``hash_ids`` (Mooncake) pass them on.
    """
    counts = counts if counts is not None else TraceCounts()
    sample_rng, task_rng = rng.spawn(2)
    end_s = None if duration_s is None else start_s + duration_s
    kept: list[tuple[float, TraceRow]] = []
    first = origin = None
    uniforms, used = np.empty(0), 0
    for row in rows:
        if first is None:  # the window's origin: the file's first row, skipped or not
            first = row.at if counts.first_at is None else counts.first_at
        trace_s = (row.at - first) / units_per_s
        if trace_s < start_s:
            counts.before_window += 1
            continue
        if end_s is not None and trace_s >= end_s:
            counts.stopped = "the window's end"
            break
        if sample is not None:
            if used == uniforms.size:
                uniforms, used = sample_rng.random(_CHUNK), 0
            u = uniforms[used]
            used += 1
            if u >= sample:
                counts.sampled_out += 1
                continue
        if origin is None:
            origin = row.at
        arrival_s = (row.at - origin) / units_per_s / time_scale
        if n is None and horizon_s is not None and arrival_s >= horizon_s:
            counts.stopped = "the horizon"
            break
        kept.append((arrival_s, row))
        if n is not None and len(kept) == n:
            counts.stopped = "the requested count"
            break
    counts.kept = len(kept)
    names, task_idx = [DEFAULT_TASK], np.zeros(len(kept), dtype=np.int64)
    if tasks is not None:
        names, p = check_task_weights(tasks)
        task_idx = task_rng.choice(len(names), size=len(kept), p=p)  # [N]
    return [
        RequestSpec(i, at, r.prompt_tokens, r.output_tokens, names[k], r.hash_ids,
                    r.hash_block_tokens)
        for i, ((at, r), k) in enumerate(zip(kept, task_idx, strict=True))
    ]
