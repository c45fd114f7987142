"""The inputs and the write-only log of one simulated run.

``RequestTable`` holds what is known about every request before the run (arrival time,
lengths, task, acceptance stream); ``RunLog`` accumulates what happens, as numpy arrays
indexed by request id and one tuple per iteration, and turns them into flat records at the
end. The engine writes the log and never reads it back to make decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.records import IterationRecord, Records, RequestRecord, field_names
from sim.slots import N_COUNTERS


@dataclass(frozen=True)
class RequestTable:
    """Every request of a run, sorted by arrival; request ``i`` is row ``i``.

    arrival_at float64 [N]; prompt_tokens, output_tokens, task, stream int64 [N]. With
    prefix caching, ``block_keys`` int64 [K] and ``block_starts`` int64 [N + 1]: request i's
    full prompt blocks' content keys are ``block_keys[block_starts[i]:block_starts[i + 1]]``
    (``workloads.prefix_blocks``); None: every block its own (``sim.prefix_cache``).
    """

    arrival_at: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    task: np.ndarray
    stream: np.ndarray
    block_keys: np.ndarray | None = None
    block_starts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_at)


class ItlHistogram:
    """Inter-token latencies as counts in log-spaced bins: 0.1% wide from 1 µs to 10^4 s.

    vLLM's ITL percentiles are taken over every gap between consecutive output chunks of
    every request, one value per verify of each sequence: too many to keep one by one in a
    long run, so they are binned as they happen (a percentile is then exact to the bin,
    0.1%). ``counts[i]`` counts gaps in [edges[i], edges[i+1]); gaps outside the range go to
    the first or last bin.
    """

    LOW_S = 1e-6
    RATIO = 1.001
    BINS = int(np.ceil(np.log(1e10) / np.log(RATIO)))

    # gaps wait in a buffer and are binned a buffer at a time (the counts are the same:
    # binning is per gap), so an iteration pays one copy instead of the binning's calls
    BUFFER = 1 << 16

    def __init__(self) -> None:
        self._counts = np.zeros(self.BINS, dtype=np.int64)
        self._scale = 1.0 / np.log(self.RATIO)
        self._buf = np.empty(self.BUFFER, dtype=np.float64)
        self._n = 0

    @property
    def counts(self) -> np.ndarray:
        """int64 [BINS]: the gaps counted so far in each bin."""
        self._flush()
        return self._counts

    def add(self, gaps_s: np.ndarray) -> None:
        """Count each gap (seconds) in its bin."""
        n, k = self._n, len(gaps_s)
        if n + k > self.BUFFER:
            self._flush()
            n = 0
            if k > self.BUFFER:
                self._bin(np.asarray(gaps_s, dtype=np.float64))
                return
        self._buf[n:n + k] = gaps_s
        self._n = n + k

    def _flush(self) -> None:
        if self._n:
            self._bin(self._buf[:self._n])
            self._n = 0

    def _bin(self, gaps_s: np.ndarray) -> None:
        idx = (np.log(np.maximum(gaps_s, self.LOW_S) / self.LOW_S) * self._scale).astype(np.int64)
        self._counts += np.bincount(np.minimum(idx, self.BINS - 1), minlength=self.BINS)

    @classmethod
    def edges(cls) -> np.ndarray:
        """float64 [BINS + 1]: the bin edges in seconds."""
        return cls.LOW_S * cls.RATIO ** np.arange(cls.BINS + 1)


class IterationLog:
    """The iteration rows as two growing column-major tables, no Python object per row.

    The float fields of an ``IterationRecord`` go to a float64 table and the int fields
    (``bound`` as its index in ``labels``) to an int64 one, one row of each per field, so
    that an append is two column assignments and ``records()`` hands out the columns as
    they are (read-only views, no copy). The tables double when full.
    """

    _FLOATS = ("start_at", "duration_s", "draft_s", "verify_s")
    _INTS = ("replica", "batch_size", "decode_seqs", "prefill_tokens", "verify_tokens",
             "drafted_tokens", "accepted_tokens", "emitted_tokens", "bound",
             "kv_blocks_used")

    def __init__(self, capacity: int = 1024) -> None:
        self._f = np.empty((len(self._FLOATS), capacity))
        self._i = np.empty((len(self._INTS), capacity), dtype=np.int64)
        self.n = 0
        self.labels: list[str] = []
        self._codes: dict[str, int] = {}

    def _code(self, bound: str) -> int:
        code = self._codes.get(bound)
        if code is None:
            code = self._codes[bound] = len(self.labels)
            self.labels.append(bound)
        return code

    def _room(self, k: int) -> None:
        """Grow the tables until k more rows fit."""
        while self.n + k > self._f.shape[1]:
            self._f = np.concatenate((self._f, np.empty_like(self._f)), axis=1)
            self._i = np.concatenate((self._i, np.empty_like(self._i)), axis=1)

    def append(self, replica: int, start_at: float, duration_s: float, batch_size: int,
               decode_seqs: int, prefill_tokens: int, verify_tokens: int,
               drafted_tokens: int, accepted_tokens: int, emitted_tokens: int,
               draft_s: float, verify_s: float, bound: str, kv_blocks_used: int) -> None:
        """Add one iteration's row (the fields of ``IterationRecord``, in order)."""
        code = self._codes.get(bound)
        if code is None:
            code = self._code(bound)
        n = self.n
        if n == self._f.shape[1]:
            self._room(1)
        self._f[:, n] = (start_at, duration_s, draft_s, verify_s)
        self._i[:, n] = (replica, batch_size, decode_seqs, prefill_tokens, verify_tokens,
                         drafted_tokens, accepted_tokens, emitted_tokens, code, kv_blocks_used)
        self.n = n + 1

    def extend(self, replica: int, start_at: np.ndarray, end_at: np.ndarray, batch_size,
               decode_seqs, prefill_tokens, verify_tokens, drafted_tokens, accepted_tokens,
               emitted_tokens, draft_s, verify_s, bounds: list[str], kv_blocks_used) -> None:
        """Add k rows at once (``sim.steady``): each field a [k] array or one value for
        every row, ``end_at`` giving duration_s = end_at - start_at as ``append``'s callers
        compute it; the rows k ``append`` calls add."""
        k = len(start_at)
        codes = [self._code(b) for b in bounds]
        self._room(k)
        n = self.n
        start_at = np.asarray(start_at, dtype=np.float64)
        f, i = self._f[:, n:n + k], self._i[:, n:n + k]
        for j, col in enumerate((start_at, np.asarray(end_at) - start_at, draft_s, verify_s)):
            f[j] = col
        for j, col in enumerate((replica, batch_size, decode_seqs, prefill_tokens,
                                 verify_tokens, drafted_tokens, accepted_tokens,
                                 emitted_tokens, codes, kv_blocks_used)):
            i[j] = col
        self.n = n + k

    def __len__(self) -> int:
        return self.n

    def records(self) -> Records[IterationRecord]:
        """The rows as ``Records`` (``bound`` back to its strings); the other columns are
        views of the tables (appending later never writes into them)."""
        n = self.n
        cols = {name: self._f[j, :n] for j, name in enumerate(self._FLOATS)}
        cols.update((name, self._i[j, :n]) for j, name in enumerate(self._INTS))
        codes = cols["bound"]
        cols["bound"] = np.array(self.labels, dtype=object)[codes] if n else \
            np.empty(0, dtype=object)
        return Records(IterationRecord, {f: cols[f] for f in field_names(IterationRecord)})


class RunLog:
    """Per-request counters and timestamps plus iteration rows, written by the replicas."""

    def __init__(self, n_requests: int) -> None:
        nan = np.full(n_requests, np.nan)
        self.replica = np.full(n_requests, -1, dtype=np.int64)
        self.first_scheduled_at = nan.copy()
        self.first_token_at = nan.copy()
        self.finished_at = nan.copy()
        self.emitted = np.zeros(n_requests, dtype=np.int64)
        # [N, N_COUNTERS]: verify steps, draft steps, drafted, accepted, checked tokens,
        # preemptions, recomputed prefill tokens, prefix-cached prompt tokens
        self.counts = np.zeros((n_requests, N_COUNTERS), dtype=np.int64)
        self.iterations = IterationLog()
        self.itl = ItlHistogram()

    def add_itl(self, gaps_s: np.ndarray) -> None:
        """Count inter-token (inter-chunk) gaps of some requests."""
        self.itl.add(gaps_s)

    def request_records(self, table: RequestTable, arrived: int) -> Records[RequestRecord]:
        """One record per request that arrived (the first ``arrived`` rows)."""
        n = arrived
        cols = (
            np.arange(n, dtype=np.int64),
            self.replica[:n],
            table.task[:n],
            table.arrival_at[:n],
            self.first_scheduled_at[:n],
            self.first_token_at[:n],
            self.finished_at[:n],
            table.prompt_tokens[:n],
            table.output_tokens[:n],
            self.emitted[:n],
            *self.counts[:n].T,
            ~np.isnan(self.finished_at[:n]),
        )
        return Records(RequestRecord, dict(zip(field_names(RequestRecord), cols, strict=True)))

    def iteration_records(self) -> Records[IterationRecord]:
        """One record per replica iteration, in the order they started per replica."""
        return self.iterations.records()
