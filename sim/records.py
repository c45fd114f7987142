"""Flat, immutable records the engine emits: one per request, one per replica iteration.

The engine writes these once, at the end of a run (or at the horizon), and never reads
them back. They are stored by column (:class:`Records`: one numpy array per field, in
declaration order), so a run of a million requests holds no Python object per request, the
CSV writer and ``reports/`` read whole columns (``pd.DataFrame(records.columns)``), and a
record is made only when one is asked for (iterating, indexing). Absolute times end in
``_at`` (simulated seconds since the start), durations in ``_s``; a time that never
happened (a request still queued at the horizon) is ``nan``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Generic, TypeVar

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What happened to one request.

    ``finished`` is False for requests still waiting or running at the horizon: they are
    recorded, never dropped. Token counters follow vLLM's definitions: ``verify_steps``
    counts target passes that decoded this request after its prefill (with or without
    speculation), ``draft_steps`` those of them that verified a draft (vLLM's
    ``num_drafts``), ``drafted_tokens`` the draft tokens proposed (tree nodes below the root;
    not the placeholders of a padded one-token admission, ``sim.kernels.rules.padding``,
    which vLLM's metrics count as one draft of K rejected tokens),
    ``accepted_tokens`` the draft tokens the target accepted, and ``checked_tokens`` the
    guesses the verification actually looked at (accepted ones plus the first rejected one),
    which is what the lecture's measured α̂ is averaged over (§4.5). ``preemptions`` counts
    the times the request was preempted by recompute and ``recomputed_tokens`` the prefill
    tokens it spent re-computing its prompt and output afterwards. ``cached_tokens`` is
    vLLM's ``num_cached_tokens``: the prompt tokens its first admission found in the prefix
    cache and did not prefill (0 without ``scheduler.prefix_caching``; hits when it is
    re-admitted after a preemption show as fewer ``recomputed_tokens``).
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
    recomputed_tokens: int
    cached_tokens: int
    finished: bool


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One replica iteration: the draft passes plus one target pass, priced together.

    ``batch_size`` counts sequences in the target pass (decoding and prefilling);
    ``prefill_tokens`` and ``verify_tokens`` split its new tokens (verify tokens are the
    last token plus the draft guesses or tree nodes of every decoding sequence, and the
    placeholder drafts of padded one-token admissions, ``sim.kernels.rules.padding``);
    ``emitted_tokens`` are the output tokens the iteration produced; ``bound`` is which
    roofline limit won the target pass ("compute", "memory", "comm", "host");
    ``kv_blocks_used`` the replica's KV blocks in use when the iteration ended. In a
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
    kv_blocks_used: int


@dataclass(frozen=True, slots=True)
class TransferRecord:
    """One request of a P/D deployment (``sim.disagg``): the prefill replica that computed
    its prompt and when it finished (``prefill_done_at``), the decode replica it went to,
    when that replica held blocks for its KV and started loading it (``load_start_at``;
    SGLang's flow: allocated for it, before the prefill), when the link took it
    (``sent_at``; later where the link was busy; SGLang's flow: its last send) and when it
    arrived (``kv_ready_at``), the bytes the decode replica received, the prompt tokens the
    decode replica's draft ran through because its KV was not sent (``draft_kv:
    recompute``) and how many sends carried its KV (vLLM's flow 1, SGLang's one a chunk;
    0 where the run ended first). A request the run ended before any of these has nan (and
    -1 for the replicas)."""

    id: int
    prefill_replica: int
    decode_replica: int
    prefill_done_at: float
    load_start_at: float
    sent_at: float
    kv_ready_at: float
    kv_bytes: float
    draft_prefill_tokens: int
    transfers: int


@dataclass(frozen=True, slots=True)
class LoadRecord:
    """One load from a replica's CPU tier (``sim.offload``; vLLM's native KV offload): the
    request, its replica, when it held blocks and started waiting (``start_at``), when the
    link took it (``sent_at``; later where another load held the link) and when its KV was
    on the GPU (``ready_at``), the prompt (or, after a preemption, committed) tokens it
    loaded and those its GPU prefix cache held before them (``gpu_hit_tokens``), and
    whether it was the request's first scheduling (``first``: the hit counts in
    ``cpu_hit_rate``; a load after a preemption saves recompute instead)."""

    id: int
    replica: int
    start_at: float
    sent_at: float
    ready_at: float
    tokens: int
    gpu_hit_tokens: int
    first: bool


@dataclass(frozen=True, slots=True)
class TierRecord:
    """One replica's CPU tier at the end of a run (``sim.offload``): its capacity in
    blocks, the blocks stored and evicted, the offers dropped because nothing could be
    evicted, the most blocks it held at once and those it held at the end."""

    replica: int
    capacity_blocks: int
    stored_blocks: int
    evicted_blocks: int
    dropped_offers: int
    peak_blocks: int
    held_blocks: int


def field_names(record_type: type) -> list[str]:
    """Column names of a record type, in declaration order (for CSV headers)."""
    return [f.name for f in fields(record_type)]


_DTYPES = {"int": np.int64, "float": np.float64, "bool": np.bool_, "str": object}

R = TypeVar("R", RequestRecord, IterationRecord)


class Records(Sequence, Generic[R]):
    """A column table of one record type: ``columns`` maps each field, in declaration
    order, to a read-only numpy array (int64, float64, bool, or object for strings).

    It behaves as a sequence of records (``len``, indexing, iteration, ``==``) for code
    that wants them one at a time; whole-column work uses ``columns`` / :meth:`column`.
    """

    __slots__ = ("record_type", "columns")
    ROWS_AT_ONCE = 1 << 14

    def __init__(self, record_type: type[R], columns: Mapping[str, np.ndarray]) -> None:
        names = field_names(record_type)
        if list(columns) != names:
            raise ValueError(f"{record_type.__name__} columns must be {names}, got "
                             f"{list(columns)}")
        cols = {}
        n = None
        for f in fields(record_type):
            a = np.asarray(columns[f.name], dtype=_DTYPES[f.type]).view()  # own flags
            if a.ndim != 1 or (n is not None and len(a) != n):
                raise ValueError(f"{record_type.__name__}.{f.name}: columns must be 1-D and "
                                 "of one length")
            n = len(a)
            a.flags.writeable = False
            cols[f.name] = a
        self.record_type = record_type
        self.columns: dict[str, np.ndarray] = cols

    @classmethod
    def from_rows(cls, record_type: type[R], rows) -> Records[R]:
        """Records from an iterable of tuples in declaration order, or of records."""
        names = field_names(record_type)
        rows = [astuple(r) if isinstance(r, record_type) else r for r in rows]
        cols = list(zip(*rows, strict=True)) or [()] * len(names)
        return cls(record_type, dict(zip(names, cols, strict=True)))

    def column(self, name: str) -> np.ndarray:
        """The read-only array of field ``name``."""
        return self.columns[name]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def rows(self) -> Iterator[tuple]:
        """Each record's values as a tuple of Python scalars, in declaration order.

        Columns go to Python scalars ``ROWS_AT_ONCE`` rows at a time: a whole column at once
        took about 250 bytes a row while the CSV was written (the largest part of a long
        run's peak memory), a chunk takes a few MB whatever the run's length."""
        cols = list(self.columns.values())
        for k in range(0, len(self), self.ROWS_AT_ONCE):
            yield from zip(*(c[k:k + self.ROWS_AT_ONCE].tolist() for c in cols), strict=True)

    def __iter__(self) -> Iterator[R]:
        make = self.record_type
        return (make(*row) for row in self.rows())

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Records(self.record_type, {k: c[i] for k, c in self.columns.items()})
        return self.record_type(*(c[i].item() if c.dtype != object else c[i]
                                  for c in self.columns.values()))

    def __eq__(self, other) -> bool:
        if isinstance(other, Records):
            return self.record_type is other.record_type and len(self) == len(other) and all(
                np.array_equal(a, other.columns[k], equal_nan=a.dtype == np.float64)
                for k, a in self.columns.items())
        if isinstance(other, Sequence):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other,
                                                                          strict=True))
        return NotImplemented

    def __repr__(self) -> str:
        return f"Records[{self.record_type.__name__}]({len(self)} rows)"


@dataclass(frozen=True)
class IterationTotals:
    """Sums over a run's iteration records: what a summary needs of them, kept whether or
    not the run kept the records themselves (``sim.log.IterationLog``).

    ``busy_s`` = Σ ``duration_s``; ``batch_size_s`` = Σ ``batch_size`` · ``duration_s`` (over
    ``busy_s``: the time-weighted batch); ``draft_s``, ``verify_s`` the sums of those
    fields; ``prefill_s`` = Σ ``verify_s`` · prefill / (prefill + verify tokens), the
    verify seconds attributed to prefill by the share of new tokens (0 for a pass of none);
    ``bound_s``: (bound, Σ ``duration_s`` of its iterations) for each bound seen, in the
    order first seen; ``kv_full_s``: Σ ``duration_s`` of the iterations with at least
    ``kv_full_blocks`` KV blocks in use (0 where ``kv_full_blocks`` is None);
    ``decoding_iterations`` counts iterations with a decoding sequence and
    ``undrafted_iterations`` those of them that drafted no token; ``seqs_by_gamma[g]`` is Σ
    ``decode_seqs`` over decoding iterations whose γ = rint(drafted / decode_seqs) is g.

    Float sums are taken a block of rows at a time (numpy's sum within a block, then block
    after block, :meth:`plus`): the same rows in other blocks may differ in the last bits.
    """

    iterations: int = 0
    busy_s: float = 0.0
    batch_size_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = 0.0
    kv_full_s: float = 0.0
    prefill_tokens: int = 0
    verify_tokens: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    emitted_tokens: int = 0
    decoding_iterations: int = 0
    undrafted_iterations: int = 0
    bound_s: tuple[tuple[str, float], ...] = ()
    seqs_by_gamma: tuple[int, ...] = ()
    kv_full_blocks: float | None = None

    @classmethod
    def of_columns(cls, cols: Mapping[str, np.ndarray], labels: Sequence[str],
                   kv_full_blocks: float | None = None) -> IterationTotals:
        """The totals of one block of rows: ``cols`` maps the ``IterationRecord`` fields to
        [k] arrays, ``bound`` as int codes indexing ``labels``."""
        dur = np.asarray(cols["duration_s"], dtype=np.float64)
        verify_s = np.asarray(cols["verify_s"], dtype=np.float64)
        prefill = np.asarray(cols["prefill_tokens"], dtype=np.int64)
        new = prefill + cols["verify_tokens"]
        # [k]: the verify seconds of each pass attributed to its prefill tokens
        prefill_s = np.divide(verify_s * prefill, new, out=np.zeros(len(dur)), where=new > 0)
        seqs = np.asarray(cols["decode_seqs"], dtype=np.int64)
        drafted = np.asarray(cols["drafted_tokens"], dtype=np.int64)
        decoding = seqs > 0
        gamma = np.rint(drafted[decoding] / seqs[decoding]).astype(np.int64)
        by_gamma = np.bincount(gamma, weights=seqs[decoding]).astype(np.int64) \
            if len(gamma) else np.zeros(0, dtype=np.int64)
        by_bound = np.bincount(np.asarray(cols["bound"], dtype=np.int64), weights=dur,
                               minlength=len(labels))
        full = 0.0 if kv_full_blocks is None else \
            float(dur[np.asarray(cols["kv_blocks_used"]) >= kv_full_blocks].sum())
        return cls(
            iterations=len(dur), busy_s=float(dur.sum()),
            batch_size_s=float((cols["batch_size"] * dur).sum()),
            draft_s=float(np.sum(cols["draft_s"], dtype=np.float64)),
            verify_s=float(verify_s.sum()), prefill_s=float(prefill_s.sum()), kv_full_s=full,
            prefill_tokens=int(prefill.sum()), verify_tokens=int(np.sum(cols["verify_tokens"])),
            drafted_tokens=int(drafted.sum()),
            accepted_tokens=int(np.sum(cols["accepted_tokens"])),
            emitted_tokens=int(np.sum(cols["emitted_tokens"])),
            decoding_iterations=int(decoding.sum()),
            undrafted_iterations=int((drafted[decoding] == 0).sum()),
            bound_s=tuple(zip(labels, by_bound.tolist(), strict=True)),
            seqs_by_gamma=tuple(by_gamma.tolist()), kv_full_blocks=kv_full_blocks)

    @classmethod
    def of_records(cls, records: Records[IterationRecord],
                   kv_full_blocks: float | None = None) -> IterationTotals:
        """The totals of ``records`` taken as one block (a test's few rows, a run's rows
        read back)."""
        cols = dict(records.columns)
        labels, cols["bound"] = np.unique(cols["bound"].astype(str), return_inverse=True)
        return cls.of_columns(cols, labels.tolist(), kv_full_blocks)

    def plus(self, later: IterationTotals) -> IterationTotals:
        """These totals and those of the rows after them (the same ``kv_full_blocks``)."""
        bounds = dict(self.bound_s)
        for b, s in later.bound_s:
            bounds[b] = bounds[b] + s if b in bounds else s
        n = max(len(self.seqs_by_gamma), len(later.seqs_by_gamma))
        gam = [a + b for a, b in zip(self.seqs_by_gamma + (0,) * (n - len(self.seqs_by_gamma)),
                                     later.seqs_by_gamma + (0,) * (n - len(later.seqs_by_gamma)),
                                     strict=True)]
        sums = {f.name: getattr(self, f.name) + getattr(later, f.name) for f in fields(self)
                if f.name not in ("bound_s", "seqs_by_gamma", "kv_full_blocks")}
        return IterationTotals(**sums, bound_s=tuple(bounds.items()), seqs_by_gamma=tuple(gam),
                               kv_full_blocks=later.kv_full_blocks)

    def bound_seconds(self, bound: str) -> float:
        """Σ ``duration_s`` of the iterations whose target pass was ``bound`` (0 if none)."""
        return dict(self.bound_s).get(bound, 0.0)
