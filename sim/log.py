"""The inputs and the write-only log of one simulated run.

``RequestTable`` holds what is known about every request before the run (arrival time,
lengths, task, acceptance stream); ``RunLog`` accumulates what happens, as numpy arrays
indexed by request id and one tuple per iteration, and turns them into flat records at the
end. The engine writes the log and never reads it back to make decisions.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from sim.health import FULL_SHARE
from sim.records import IterationRecord, IterationTotals, Records, RequestRecord, field_names
from sim.slots import N_COUNTERS


class NoIterationRows(RuntimeError):
    """The iteration rows of a run that kept only their totals (``iteration_rows=False``)."""


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


def _empty(shape: tuple[int, int], dtype) -> np.ndarray:
    """``np.empty``, in its own anonymous memory map when it is large: given back to the
    system when the array goes (``IterationLog.records`` lets each chunk go once copied).
    The C allocator may keep freed blocks of a few MB for reuse instead -- once large
    arrays have been freed it serves blocks up to their size from its heap -- so a long
    run's chunks stayed in the process's memory beside their joined copy."""
    nbytes = shape[0] * shape[1] * np.dtype(dtype).itemsize
    if nbytes < _MAPPED_BYTES:
        return np.empty(shape, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype).reshape(shape)


_MAPPED_BYTES = 1 << 20


class IterationLog:
    """The iteration rows as column-major tables in chunks, no Python object per row.

    The float fields of an ``IterationRecord`` go to a float64 table and the int fields
    (``bound`` as its index in ``labels``) to an int64 one, one row of each per field, so
    that an append is two column assignments. A full chunk is kept as it is and the next
    one is twice as long (up to ``CHUNK`` rows), so rows are written once and never moved
    while the run grows (doubling one table copied every row about twice and touched fresh
    memory each time); ``records()`` joins the chunks once, letting each go as it is
    copied, and hands out the columns of the joined tables (views; appending later never
    writes into them).

    Each chunk is folded into the running ``totals()`` (``sim.records.IterationTotals``)
    when it is full, and the rows not yet folded when the totals are asked for: with
    ``rows`` False (a run that only summarises, ``sim.runner.simulate``) the chunk is then
    written over instead of kept, and ``records()`` raises ``NoIterationRows``. The chunks
    are the same either way, so are the totals, bit for bit. ``kv_full_blocks``: the KV
    blocks in use from which an iteration counts towards ``kv_full_s``.
    """

    _FLOATS = ("start_at", "duration_s", "draft_s", "verify_s")
    _INTS = ("replica", "batch_size", "decode_seqs", "prefill_tokens", "verify_tokens",
             "drafted_tokens", "accepted_tokens", "emitted_tokens", "bound",
             "kv_blocks_used")
    CHUNK = 1 << 16  # rows of the longest chunk

    def __init__(self, capacity: int = 1024, rows: bool = True,
                 kv_full_blocks: float | None = None) -> None:
        self.rows = rows
        self._kv_full = kv_full_blocks
        self._totals = IterationTotals(kv_full_blocks=kv_full_blocks)  # of the rows folded
        self._full: list[tuple[np.ndarray, np.ndarray]] = []  # earlier chunks' rows
        self._new_chunk(capacity)
        self.n = 0  # rows in all
        self.labels: list[str] = []
        self._codes: dict[str, int] = {}
        self._lookups: dict[tuple[str, ...], np.ndarray] = {}  # extend's names -> codes

    def _new_chunk(self, rows: int) -> None:
        self._f = _empty((len(self._FLOATS), rows), np.float64)
        self._i = _empty((len(self._INTS), rows), np.int64)
        self._at = 0  # rows filled in this chunk
        self._folded = 0  # of them, those in the totals

    def _fold(self) -> None:
        """Add the chunk's rows not yet in the totals to them, as one block."""
        a, b = self._folded, self._at
        if b > a:
            f, i = self._f[:, a:b], self._i[:, a:b]
            cols = {name: f[j] for j, name in enumerate(self._FLOATS)}
            cols.update((name, i[j]) for j, name in enumerate(self._INTS))
            self._totals = self._totals.plus(
                IterationTotals.of_columns(cols, self.labels, self._kv_full))
            self._folded = b

    def totals(self) -> IterationTotals:
        """The totals of every row so far."""
        self._fold()
        return self._totals

    def _code(self, bound: str) -> int:
        code = self._codes.get(bound)
        if code is None:
            code = self._codes[bound] = len(self.labels)
            self.labels.append(bound)
        return code

    def _room(self, k: int) -> None:
        """Start a new chunk unless k more rows fit in this one."""
        cap = self._f.shape[1]
        if self._at + k > cap:
            self._fold()
            if self._at and self.rows:
                self._full.append((self._f[:, :self._at], self._i[:, :self._at]))
            rows = max(k, min(2 * cap, self.CHUNK))
            if self.rows or rows != cap:
                self._new_chunk(rows)
            else:  # folded: written over
                self._at = self._folded = 0

    def append(self, replica: int, start_at: float, duration_s: float, batch_size: int,
               decode_seqs: int, prefill_tokens: int, verify_tokens: int,
               drafted_tokens: int, accepted_tokens: int, emitted_tokens: int,
               draft_s: float, verify_s: float, bound: str, kv_blocks_used: int) -> None:
        """Add one iteration's row (the fields of ``IterationRecord``, in order)."""
        code = self._codes.get(bound)
        if code is None:
            code = self._code(bound)
        j = self._at
        if j == self._f.shape[1]:
            self._room(1)
            j = 0
        self._f[:, j] = (start_at, duration_s, draft_s, verify_s)
        self._i[:, j] = (replica, batch_size, decode_seqs, prefill_tokens, verify_tokens,
                         drafted_tokens, accepted_tokens, emitted_tokens, code, kv_blocks_used)
        self._at = j + 1
        self.n += 1

    def extend(self, replica: int, start_at: np.ndarray, end_at: np.ndarray, batch_size,
               decode_seqs, prefill_tokens, verify_tokens, drafted_tokens, accepted_tokens,
               emitted_tokens, draft_s, verify_s, bounds, kv_blocks_used) -> None:
        """Add k rows at once (``sim.steady``): each field a [k] array or one value for
        every row, ``end_at`` giving duration_s = end_at - start_at as ``append``'s callers
        compute it; the rows k ``append`` calls add. ``bounds``: the k labels, or (int
        codes [k], the names they index) -- a code -1 names the last."""
        k = len(start_at)
        if isinstance(bounds, tuple):
            codes, names = bounds
            codes = self.codes(names)[codes]
        else:
            codes = [self._code(b) for b in bounds]
        self._room(k)
        j = self._at
        start_at = np.asarray(start_at, dtype=np.float64)
        f, i = self._f[:, j:j + k], self._i[:, j:j + k]
        for c, col in enumerate((start_at, np.asarray(end_at) - start_at, draft_s, verify_s)):
            f[c] = col
        for c, col in enumerate((replica, batch_size, decode_seqs, prefill_tokens,
                                 verify_tokens, drafted_tokens, accepted_tokens,
                                 emitted_tokens, codes, kv_blocks_used)):
            i[c] = col
        self._at = j + k
        self.n += k

    def codes(self, names: tuple[str, ...]) -> np.ndarray:
        """int64 [len(names)]: the ``bound`` code of each label (read-only)."""
        lookup = self._lookups.get(names)
        if lookup is None:
            lookup = self._lookups[names] = np.array([self._code(b) for b in names],
                                                     dtype=np.int64)
            lookup.flags.writeable = False
        return lookup

    def extend_rows(self, floats: np.ndarray, ints: np.ndarray) -> None:
        """Add k rows given as the tables' own columns: float64 [4, k] and int64 [10, k]
        (the fields in ``_FLOATS`` and ``_INTS`` order, ``bound`` as its code)."""
        k = floats.shape[1]
        self._room(k)
        j = self._at
        self._f[:, j:j + k] = floats
        self._i[:, j:j + k] = ints
        self._at = j + k
        self.n += k

    def __len__(self) -> int:
        return self.n

    def _joined(self) -> tuple[np.ndarray, np.ndarray]:
        """The float and int tables of every row so far, as one chunk (joined once: later
        rows go to a new chunk)."""
        if not self.rows:
            raise NoIterationRows(
                "this run kept no iteration rows, only their totals (it ran with "
                "iteration_rows=False: bench, sweep, plan and grid runs only summarise); "
                "run it with iteration_rows=True for them")
        self._fold()
        at = self._at
        if not self._full:
            return self._f[:, :at], self._i[:, :at]
        parts = self._full + ([(self._f[:, :at], self._i[:, :at])] if at else [])
        self._full = []
        if at:
            self._new_chunk(self._f.shape[1])
        f = np.empty((len(self._FLOATS), self.n))
        i = np.empty((len(self._INTS), self.n), dtype=np.int64)
        j = 0
        while parts:  # each chunk is let go once copied: the peak is the rows once more
            pf, pi = parts.pop(0)
            w = pf.shape[1]
            f[:, j:j + w] = pf
            i[:, j:j + w] = pi
            j += w
            del pf, pi
        self._full = [(f, i)]
        return f, i

    def records(self) -> Records[IterationRecord]:
        """The rows as ``Records`` (``bound`` back to its strings); the other columns are
        views of the tables (appending later never writes into them). ``NoIterationRows``
        where the log keeps only the totals."""
        n = self.n
        tf, ti = self._joined()
        cols = {name: tf[j] for j, name in enumerate(self._FLOATS)}
        cols.update((name, ti[j]) for j, name in enumerate(self._INTS))
        codes = cols["bound"]
        cols["bound"] = np.array(self.labels, dtype=object)[codes] if n else \
            np.empty(0, dtype=object)
        return Records(IterationRecord, {f: cols[f] for f in field_names(IterationRecord)})


class RunLog:
    """Per-request counters and timestamps plus iteration rows, written by the replicas.

    ``iteration_rows``: whether the iteration rows are kept, or only their totals (the run
    only summarises: ``IterationLog``); ``kv_capacity_blocks``: one replica's KV pool, from
    which on the totals count time with a full pool (``sim.health.FULL_SHARE`` of it).
    """

    def __init__(self, n_requests: int, iteration_rows: bool = True,
                 kv_capacity_blocks: int | None = None) -> None:
        nan = np.full(n_requests, np.nan)
        self.replica = np.full(n_requests, -1, dtype=np.int64)
        self.first_scheduled_at = nan.copy()
        self.first_token_at = nan.copy()
        self.finished_at = nan.copy()
        self.emitted = np.zeros(n_requests, dtype=np.int64)
        # [N, N_COUNTERS]: verify steps, draft steps, drafted, accepted, checked tokens,
        # preemptions, recomputed prefill tokens, prefix-cached prompt tokens
        self.counts = np.zeros((n_requests, N_COUNTERS), dtype=np.int64)
        self.iterations = IterationLog(
            rows=iteration_rows,
            kv_full_blocks=FULL_SHARE * kv_capacity_blocks if kv_capacity_blocks else None)
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

    def iteration_records(self, replicas: int = 1) -> Records[IterationRecord]:
        """One record per replica iteration, in the order they ended; with several
        replicas, ties in order of replica. (A replica whose walk runs past another's
        events writes its iterations when the walk ends, so the rows come in replica by
        replica: the order is then made the one the iterations ended in, whichever path
        formed them.)"""
        records = self.iterations.records()
        if replicas == 1 or len(records) < 2:
            return records
        cols = records.columns
        # each row's end (start + duration, a float that may sit an ulp off the clock) as
        # its replica's running maximum: a replica's own rows keep their order
        end = cols["start_at"] + cols["duration_s"]
        rep = cols["replica"]
        for r in np.unique(rep).tolist():
            mine = rep == r
            end[mine] = np.maximum.accumulate(end[mine])
        order = np.lexsort((np.arange(len(end)), rep, end))
        return Records(IterationRecord, {k: v[order] for k, v in cols.items()})
