"""Workload kinds: length distributions (``kind:``) and arrival processes (``arrivals:``).

A workload section is one of :data:`ARRIVAL_KINDS`, chosen by its ``arrivals`` field
(``poisson`` when it is left out), and carries only that kind's fields plus the prompt and
output length distributions (one of :data:`LENGTH_KINDS` each). ``requests(...)`` turns it
into the run's request specs; ``closed_loop()`` gives the engine the user loop, if any.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from pydantic import Field, model_validator

from sim.kinds.base import (
    MAX_RATE,
    MAX_TOKENS,
    DataFile,
    NonNeg,
    NonNegSeconds,
    Pos,
    Rate,
    Seconds,
    Strict,
    Tokens,
    kind_union,
)
from sim.limits import LAZY_REQUESTS
from sim.paths import resolve_file
from specdec.errors import UserError

# ---- lengths --------------------------------------------------------------------------


Scale = Annotated[float, Field(gt=0, le=1e4)]  # a shape parameter or a ratio


def _builds(length):
    """``length``, refused here when its distribution refuses its numbers (high below low,
    a lognormal bound that keeps almost no draws): the schema's error names the field,
    workload.prompt or workload.output, which the distribution cannot."""
    try:
        length.build()
    except UserError as e:
        raise ValueError(str(e)) from None
    return length


class FixedLen(Strict):
    """Every request has exactly ``tokens`` tokens."""

    kind: Literal["fixed"]
    tokens: Tokens

    def build(self):
        """The ``workloads`` length distribution."""
        from workloads.lengths import FixedLength

        return FixedLength(self.tokens)


class UniformLen(Strict):
    """Integer token counts uniform on [low, high]."""

    kind: Literal["uniform"]
    low: Tokens
    high: Tokens

    @model_validator(mode="after")
    def _distribution_accepts(self):
        return _builds(self)

    def build(self):
        """The ``workloads`` length distribution."""
        from workloads.lengths import UniformLength

        return UniformLength(self.low, self.high)


class LogNormalLen(Strict):
    """ceil of a lognormal: give ``median_tokens`` or ``mean_tokens``; ``max_tokens`` bounds
    it (draws above are resampled, see ``workloads.LogNormalLength``)."""

    kind: Literal["lognormal"]
    sigma: Annotated[float, Field(gt=0, le=10)]
    median_tokens: Annotated[float, Field(gt=0, le=MAX_TOKENS)] | None = None
    mean_tokens: Annotated[float, Field(gt=0, le=MAX_TOKENS)] | None = None
    max_tokens: Tokens | None = None

    @model_validator(mode="after")
    def _distribution_accepts(self):
        return _builds(self)

    def build(self):
        """The ``workloads`` length distribution."""
        from workloads.lengths import LogNormalLength

        return LogNormalLength(self.sigma, median_tokens=self.median_tokens,
                               mean_tokens=self.mean_tokens, max_tokens=self.max_tokens)


class EmpiricalLen(Strict):
    """Resampled from a column of a CSV ``file`` (a data file: a relative path is read
    from the scenario file's folder, else the repository root)."""

    kind: Literal["empirical"]
    file: DataFile
    column: str
    max_tokens: Tokens | None = None

    def build(self):
        """The ``workloads`` length distribution."""
        from workloads.lengths import EmpiricalLength

        return EmpiricalLength.from_csv(resolve_file(self.file), self.column, self.max_tokens)


LENGTH_KINDS = (FixedLen, UniformLen, LogNormalLen, EmpiricalLen)
Length = kind_union(LENGTH_KINDS)

# ---- arrivals -------------------------------------------------------------------------


class _Workload(Strict):
    """What every workload kind answers: its requests, and its closed loop if it is one."""

    arrivals: str  # each kind narrows it to its own name (declared first: shown first)

    def requests(self, n: int | None, horizon_s: float | None, rng, tasks):
        """The run's requests, a ``workloads.RequestSpec`` list or ``workloads.
        RequestColumns``: ``n`` requests (or all arriving before ``horizon_s`` when ``n``
        is None), task names drawn by the ``tasks`` weights."""
        raise NotImplementedError

    def closed_loop(self):
        """The engine's closed user loop (``workloads.ClosedLoop``), or None."""
        return None


class _Synthetic(_Workload):
    """A workload whose lengths are drawn: prompt and output length distributions, and
    optionally a shared system prompt before every prompt (for prefix caching)."""

    prompt: Length = FixedLen(kind="fixed", tokens=512)
    output: Length = FixedLen(kind="fixed", tokens=256)
    # tokens of a system prompt put before every drawn prompt (vLLM's `vllm bench serve
    # --random-prefix-len`); what scheduler.prefix_caching can reuse
    shared_prefix_tokens: Annotated[int, Field(ge=0, le=MAX_TOKENS)] = 0
    # distinct system prompts, one drawn per request (SGLang's bench --gsp-num-groups)
    shared_prefix_groups: Annotated[int, Field(ge=1, le=1_000_000)] = 1

    @model_validator(mode="after")
    def _groups_need_a_prefix(self):
        if self.shared_prefix_groups > 1 and self.shared_prefix_tokens == 0:
            raise ValueError(f"shared_prefix_groups: {self.shared_prefix_groups} groups need "
                             "shared_prefix_tokens > 0")
        return self

    def _specs(self, arrivals, n, horizon_s, rng, tasks):
        from workloads.requests import build_requests

        return build_requests(arrivals, self.prompt.build(), self.output.build(), rng, n=n,
                              horizon_s=horizon_s, tasks=tasks,
                              shared_prefix_tokens=self.shared_prefix_tokens,
                              shared_prefix_groups=self.shared_prefix_groups)

    def arrival_process(self):
        """The ``workloads`` arrival process."""
        raise NotImplementedError

    def requests(self, n, horizon_s, rng, tasks):
        if n is not None and (horizon_s is None or n <= LAZY_REQUESTS):
            horizon_s = None  # all n drawn, as always: the arrivals engine stops at the horizon
        if self.shared_prefix_tokens:
            return self._specs(self.arrival_process(), n, horizon_s, rng, tasks)
        from workloads.requests import request_columns

        return request_columns(self.arrival_process(), self.prompt.build(),
                               self.output.build(), rng, n=n, horizon_s=horizon_s,
                               tasks=tasks)


class PoissonWorkload(_Synthetic):
    """Poisson arrivals at ``rate_per_s`` (exponential gaps)."""

    arrivals: Literal["poisson"] = "poisson"
    rate_per_s: Rate = 4.0

    def arrival_process(self):
        from workloads.arrivals import PoissonArrivals

        return PoissonArrivals(self.rate_per_s)


class GammaWorkload(_Synthetic):
    """Renewal arrivals with gamma gaps: mean rate ``rate_per_s``, coefficient of variation
    ``cv`` (> 1 burstier than Poisson)."""

    arrivals: Literal["gamma"]
    rate_per_s: Pos = 4.0
    cv: Annotated[float, Field(gt=0, le=100)]

    def arrival_process(self):
        from workloads.arrivals import GammaArrivals

        return GammaArrivals(self.rate_per_s, self.cv)


class OnOffWorkload(_Synthetic):
    """Poisson arrivals whose rate switches between an on and an off rate, each period's
    length exponential with its mean."""

    arrivals: Literal["onoff"]
    on_rate_per_s: Rate
    off_rate_per_s: Annotated[float, Field(ge=0, le=MAX_RATE)]
    on_mean_s: Seconds
    off_mean_s: Seconds

    def arrival_process(self):
        from workloads.arrivals import OnOffArrivals

        return OnOffArrivals(self.on_rate_per_s, self.off_rate_per_s, self.on_mean_s,
                             self.off_mean_s)


class OfflineWorkload(_Synthetic):
    """Every request arrives at t = 0 (an offline batch)."""

    arrivals: Literal["offline"]

    def arrival_process(self):
        from workloads.arrivals import OfflineBatch

        return OfflineBatch()


class ReplayWorkload(_Workload):
    """Arrival times *and* lengths from a CSV request trace (``file``, see
    ``workloads.read_request_csv``)."""

    arrivals: Literal["replay"]
    file: DataFile  # the request CSV; a data file, see the top of the page

    def requests(self, n, horizon_s, rng, tasks):
        from workloads.requests import read_request_csv

        path = resolve_file(self.file)
        specs = read_request_csv(path)
        if n is not None:
            if len(specs) < n:  # as a public trace: never fewer requests than asked for
                raise UserError(f"{path}: holds {len(specs)} requests, fewer than run.requests "
                                f"{n}; set run.requests to at most {len(specs)} (or null: all)")
            specs = specs[:n]
        if horizon_s is not None:
            specs = [s for s in specs if s.arrival_at < horizon_s]
        return specs


class ClosedLoopWorkload(_Synthetic):
    """``users`` that each send a request, wait for it to finish, think (gamma with mean
    ``think_mean_s`` and ``think_cv``; 1 = exponential) and repeat."""

    arrivals: Literal["closed_loop"]
    users: Annotated[int, Field(ge=1, le=1_000_000)]
    think_mean_s: NonNegSeconds
    think_cv: Annotated[float, Field(gt=0, le=100)] = 1.0

    def requests(self, n, horizon_s, rng, tasks):
        from workloads.arrivals import OfflineBatch

        # Arrival times are written by the engine as users send; nan until then.
        specs = self._specs(OfflineBatch(), n, None, rng, tasks)
        return [replace(s, arrival_at=float("nan")) for s in specs]

    def closed_loop(self):
        from workloads.arrivals import ClosedLoop

        return ClosedLoop(self.users, self.think_mean_s, self.think_cv)


_TIMED = ("time_scale", "start_s", "duration_s", "sample")
TRACE_FIELDS = {  # the fields each trace format takes besides arrivals, format, file, zero_tokens
    "mooncake": (*_TIMED, "hash_block_tokens"),
    "azure": _TIMED,
    "burstgpt": (*_TIMED, "models", "log_types"),
    "sharegpt": ("rate_per_s", "burstiness", "chars_per_token", "shuffle", "vllm_filter"),
}


class TraceWorkload(_Workload):
    """Requests from a public trace ``file`` (docs/how-to/replay-a-public-trace.md): the
    timed formats, Mooncake JSONL, Azure LLM inference CSV (2023, 2024) and BurstGPT CSV,
    replay their arrival times and lengths; ShareGPT conversations give lengths only and
    arrive at ``rate_per_s``. A field left null takes the default in its note; a field that
    does not apply to the format is an error. ``run.requests`` takes the first that many
    (an error when the trace holds fewer); with ``run.requests: null``, those arriving
    before ``run.horizon_s``."""

    arrivals: Literal["trace"]
    format: Literal[tuple(TRACE_FIELDS)]  # the file's format (TRACE_FIELDS names them)
    file: DataFile  # the trace file; a data file, see the top of the page
    zero_tokens: Literal["error", "skip"] = "error"  # a row with 0 prompt/output tokens (failed)
    time_scale: Pos | None = None  # timed formats: replay k× faster (every gap / k); default 1
    start_s: NonNeg | None = None  # timed: window start, s after the trace's first row; default 0
    duration_s: Pos | None = None  # timed: window length in trace seconds; default: to the end
    sample: Annotated[float, Field(gt=0, le=1)] | None = None  # timed: keep a row w.p. (seeded)
    hash_block_tokens: Tokens | None = None  # mooncake: prompt tokens per hash id; default 512
    models: Annotated[list[str], Field(min_length=1)] | None = None  # burstgpt: keep these Models
    log_types: Annotated[list[str], Field(min_length=1)] | None = None  # burstgpt: these Log Types
    rate_per_s: Rate | None = None  # sharegpt (required): mean arrival rate
    burstiness: Scale | None = None  # sharegpt: vLLM's gamma shape of the gaps; default 1 = Poisson
    chars_per_token: Scale | None = None  # sharegpt: for turns without num_tokens; default 4
    shuffle: bool | None = None  # sharegpt: take conversations in seeded random order; default true
    vllm_filter: bool | None = None  # sharegpt: select as vLLM's benchmark does; default false

    @model_validator(mode="after")
    def _fields_fit_the_format(self):
        own = TRACE_FIELDS[self.format]
        for name in (n for fields in TRACE_FIELDS.values() for n in fields):
            if getattr(self, name) is not None and name not in own:
                raise ValueError(f"{name}: does not apply to format {self.format!r} (its "
                                 f"fields: {', '.join(own)})")
        if self.format == "sharegpt" and self.rate_per_s is None:
            raise ValueError("rate_per_s: required for format 'sharegpt' (the file has no "
                             "arrival times)")
        return self

    def requests(self, n, horizon_s, rng, tasks):
        from workloads.public_traces import FORMATS
        from workloads.trace_replay import replay_rows
        from workloads.trace_rows import TraceCounts

        if self.format == "sharegpt":
            return self._sharegpt(n, horizon_s, rng, tasks)
        path, counts, fmt = resolve_file(self.file), TraceCounts(), FORMATS[self.format]
        own = {k: getattr(self, k) for k in TRACE_FIELDS[self.format]
               if k not in _TIMED and getattr(self, k) is not None}  # the reader's options
        rows = fmt.read(path, skip_zero=self.zero_tokens == "skip", counts=counts, **own)
        specs = replay_rows(rows, fmt.units_per_s, rng, n=n, horizon_s=horizon_s,
                            time_scale=self.time_scale or 1.0, start_s=self.start_s or 0.0,
                            duration_s=self.duration_s, sample=self.sample, tasks=tasks,
                            counts=counts)
        if n is not None and len(specs) < n:
            raise UserError(f"{path}: holds {len(specs)} requests ({counts.describe()}), fewer "
                            f"than run.requests {n}; set run.requests to at most {len(specs)}")
        if not specs:
            raise UserError(f"{path}: no requests ({counts.describe()})")
        return specs

    def _sharegpt(self, n, horizon_s, rng, tasks):
        from workloads.arrivals import GammaArrivals, PoissonArrivals
        from workloads.sharegpt import assign_conversations, read_sharegpt
        from workloads.trace_rows import TraceCounts

        path, counts = resolve_file(self.file), TraceCounts()
        rows = read_sharegpt(path, self.chars_per_token or 4.0, bool(self.vllm_filter),
                             self.zero_tokens == "skip", counts)
        b = self.burstiness or 1.0
        process = PoissonArrivals(self.rate_per_s) if b == 1.0 else \
            GammaArrivals(self.rate_per_s, cv=b ** -0.5)
        arrival_rng, pick_rng = rng.spawn(2)
        times = None if n is not None and n > len(rows) else \
            process.sample(arrival_rng, n=n, horizon_s=None if n is not None else horizon_s)
        if times is None or len(times) > len(rows):  # n refused before it is drawn
            asked = f"run.requests {n}" if n is not None else \
                f"the {len(times)} arriving before run.horizon_s {horizon_s:g}"
            raise UserError(f"{path}: holds {len(rows)} usable conversations "
                            f"({counts.describe()}), fewer than {asked}; ask for at most "
                            f"{len(rows)}")
        return assign_conversations(rows, times, pick_rng, self.shuffle is not False, tasks)


ARRIVAL_KINDS = (PoissonWorkload, GammaWorkload, OnOffWorkload, OfflineWorkload,
                 ReplayWorkload, ClosedLoopWorkload, TraceWorkload)
Workload = kind_union(ARRIVAL_KINDS, key="arrivals", default="poisson")

