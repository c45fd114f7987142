"""What a run will cost, before it starts: requests, iteration rows, peak memory, wall time.

``requests_bound(scenario)`` is read from the scenario alone, before any request is drawn
(so that a table of 10**8 requests is refused before it is built); ``estimate(scenario,
built, ...)`` prices the built setups from their request table. Both are upper bounds by
construction where the engine's behaviour allows one, and rough where it does not; the
figures below were measured on real runs (``ru_maxrss`` of ``specsim run``, Python 3.11,
numpy 2) and padded, and ``tests/sim/test_estimate.py`` checks the bound on runs of
several shapes.

What grows with a run, per process:

- the request table: five int64/float64 columns, the draws' temporaries, and a Python
  ``RequestSpec`` per request for traces and shared prefixes (about 250 bytes);
- per variant, the run log's per-request counters (``sim.log.RunLog``: 13 int64/float64
  columns) and its iteration rows (``sim.log.IterationLog``: 14 columns of 8 bytes, plus
  the ``bound`` label's pointer), held twice for a moment while its chunks are joined
  (measured 136-180 bytes a row at the peak, 120 kept); variants run on worker processes
  send their records back to this one, which then holds them too;
- the report (``report.md``) reads every variant's CSVs back into pandas and draws them
  (measured about 400 bytes an iteration row).

The iteration rows are what cannot be known before simulating. Every iteration emits at
least one token or prefills one chunk, so a variant has at most ``output tokens + prefill
chunks`` rows; and every iteration takes at least a one-token pass of the target, so a
replica's ``pp`` stages start at most ``pp`` of them in that time. The second bound gives
``horizon_s`` seconds its rows; without a horizon the rows of the span of the arrivals, and
after the last one at most one row per ``min(max_num_seqs, requests that fit the KV)``
tokens while requests queue, plus the drain of the last full batch. Recomputed prefills of
preempted requests are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.limits import LAZY_REQUESTS

GIB = float(2**30)
BASE_BYTES = 300e6  # the interpreter, numpy, simpy, numba and its compiled walk
REPORT_BASE_BYTES = 250e6  # pandas and matplotlib for the report
TABLE_BYTES = 512  # a request in the table (a RequestSpec object included)
REQUEST_BYTES = 256  # a request's log and record in a variant (104 + 120 measured)
REQUEST_KEPT_BYTES = 160  # a request's record, once its variant has run
ROW_BYTES = 240  # an iteration row while its variant runs (the join holds it twice)
ROW_KEPT_BYTES = 128  # an iteration row's record, once its variant has run
REPORT_REQUEST_BYTES = 480  # a request row in the report's frames and figures
REPORT_ROW_BYTES = 480  # an iteration row in the report's frames and figures
FASTEST_PASS = 0.8  # the cheapest iteration, as a share of a one-token pass's price
# The engine simulates about this many output tokens a second on one core, and about
# WALK_TOKENS_PER_S where the compiled walk computes the iterations (``sim.cluster.walks``;
# a 2-core machine: the default scenario 154,000, the speculative bench 274,000, the
# decode-heavy bench 124,000; the walk 5-11 million): rough figures, not a promise.
TOKENS_PER_S = 150_000
WALK_TOKENS_PER_S = 5_000_000
WRITE_S_PER_ROW = 4e-6  # an iteration row to CSV (50,000 default requests: 3.1 s, 742k rows)
REPORT_S_PER_ROW = 5e-6  # an iteration row read back and drawn by the report


@dataclass(frozen=True)
class Estimate:
    """A run's size before it starts: ``requests`` in its table, iteration ``rows`` over all
    variants (an upper bound), peak memory ``bytes`` of all its processes together (an upper
    bound), and wall ``seconds`` (rough), on ``processes`` processes."""

    requests: int
    output_tokens: int
    variants: int
    rows: int
    bytes: float
    seconds: float
    processes: int

    def line(self) -> str:
        """``about 2.1 GiB and 40 s for 1,000,000 requests (estimate)``."""
        return (f"about {size_text(self.bytes)} and {_duration(self.seconds)} for "
                f"{self.requests:,} requests, {self.output_tokens * self.variants:,} output "
                f"tokens over {self.variants} variant{'s' if self.variants > 1 else ''} on "
                f"{self.processes} process{'es' if self.processes > 1 else ''} (estimate)")


def requests_bound(sc) -> int | None:
    """The most requests ``sc``'s table can hold, read from the scenario before drawing, or
    None where only the draw can tell (a trace without ``run.requests``). A synthetic
    workload past ``LAZY_REQUESTS`` with a horizon draws those arriving before it, at most
    its rate's expectation plus ten standard deviations (a Poisson count's; a gamma's cv
    widens it, an on/off process is bounded by its on rate)."""
    n, horizon = sc.run.requests, sc.run.horizon_s
    if n is not None and (horizon is None or n <= LAZY_REQUESTS):
        return n
    rate = _rate_bound(sc.workload)
    if rate is None or horizon is None:
        return n
    mean = rate * horizon
    drawn = int(mean + 10 * math.sqrt(mean) * max(1.0, getattr(sc.workload, "cv", 1.0)) + 16)
    return drawn if n is None else min(n, drawn)


def _rate_bound(workload) -> float | None:
    """The highest arrival rate a synthetic workload's process has, or None."""
    if getattr(workload, "closed_loop", lambda: None)() is not None:
        return None
    if hasattr(workload, "on_rate_per_s"):
        return max(workload.on_rate_per_s, workload.off_rate_per_s)
    rate = getattr(workload, "rate_per_s", None)
    if rate is None or not hasattr(workload, "arrival_process"):
        return None
    return float(rate)


def table_bytes(requests: int, report: bool) -> float:
    """The least a run of ``requests`` takes: the table and each request's log in one
    variant (what ``requests_bound`` prices before drawing)."""
    per = TABLE_BYTES + REQUEST_BYTES + (REPORT_REQUEST_BYTES if report else 0)
    return BASE_BYTES + (REPORT_BASE_BYTES if report else 0) + requests * per


def estimate(sc, built, workers: int = 1, report: bool = False, walks=None) -> Estimate:
    """The size of running ``built`` (``sim.build.setups(sc)``) on up to ``workers``
    processes, with the run report when ``report``. ``walks(setup)``: whether a variant's
    iterations take the compiled walk (``sim.cluster.walks``), for the time."""
    table = built[0][1].table
    n = len(table)
    procs = max(1, min(workers, len(built)))
    tokens = int(table.output_tokens.sum())
    rows = [_rows(sc, setup) for _, setup in built]
    engine = [n * REQUEST_BYTES + r * ROW_BYTES for r in rows]
    kept = [n * REQUEST_KEPT_BYTES + r * ROW_KEPT_BYTES for r in rows]
    running = sum(engine) if procs == 1 else sum(engine) + sum(kept)
    reporting = sum(kept) + sum(n * REPORT_REQUEST_BYTES + r * REPORT_ROW_BYTES
                                for r in rows) if report else 0.0
    peak = BASE_BYTES + (REPORT_BASE_BYTES if report else 0) + n * TABLE_BYTES \
        + max(running, reporting)
    seconds = sum(tokens / (WALK_TOKENS_PER_S if walks is not None and walks(setup)
                            else TOKENS_PER_S) + r * WRITE_S_PER_ROW
                  for (_, setup), r in zip(built, rows, strict=True)) / procs \
        + (sum(rows) * REPORT_S_PER_ROW if report else 0.0)
    return Estimate(n, tokens, len(built), int(sum(rows)), float(peak), seconds, procs)


def _rows(sc, setup) -> int:
    """An upper bound of one variant's iteration rows (the module docstring's two bounds)."""
    table, lim = setup.table, sc.scheduler
    if len(table) == 0:
        return 0
    chunk = lim.chunk_tokens if lim.chunked_prefill and lim.chunk_tokens else \
        lim.max_batched_tokens
    chunks = -(-table.prompt_tokens // max(1, min(chunk, lim.max_batched_tokens)))  # [N]
    by_tokens = int(table.output_tokens.sum() + chunks.sum())
    starts = setup.replicas * setup.pipeline_stages  # iterations under way at once
    fastest_s = FASTEST_PASS * setup.target_cost.pass_seconds_at(1.0, 1.0, 1.0, 1.0)
    horizon = sc.run.horizon_s
    arrivals = table.arrival_at[np.isfinite(table.arrival_at)]  # [N]; nan: closed loop
    by_time = None
    if horizon is not None:
        by_time = starts * (horizon / fastest_s + 1)
    if arrivals.size == len(table):  # open loop: the span of the arrivals, then the queue
        longest = int((table.prompt_tokens + table.output_tokens).max())
        fit = setup.kv_capacity_blocks // max(1, -(-longest // lim.block_size))
        batch = max(1, min(lim.max_num_seqs, fit))
        drain = min(lim.max_num_seqs, len(table)) * int((table.output_tokens
                                                          + chunks).max()) * starts
        spans = starts * (float(arrivals.max()) / fastest_s + 1) + by_tokens / batch + drain
        by_time = spans if by_time is None else min(by_time, spans)
    return by_tokens if by_time is None else int(min(by_tokens, math.ceil(by_time)))


def available_bytes() -> float | None:
    """The memory this machine can give a new run: /proc/meminfo's MemAvailable, else the
    free physical pages (``os.sysconf``), else None (unknown: nothing is checked)."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def size_text(nbytes: float) -> str:
    """Bytes as GiB (or MiB below a tenth of one), for a message."""
    return f"{nbytes / GIB:.1f} GiB" if nbytes >= 0.1 * GIB else f"{nbytes / 2**20:.0f} MiB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"
