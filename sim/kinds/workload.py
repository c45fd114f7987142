"""Workload kinds: length distributions (``kind:``) and arrival processes (``arrivals:``).

A workload section is one of :data:`ARRIVAL_KINDS`, chosen by its ``arrivals`` field
(``poisson`` when it is left out), and carries only that kind's fields plus the prompt and
output length distributions (one of :data:`LENGTH_KINDS` each). ``requests(...)`` turns it
into the run's request specs; ``closed_loop()`` gives the engine the user loop, if any.
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import NonNeg, Pos, PosInt, Strict, kind_union
from sim.paths import resolve_file

# ---- lengths --------------------------------------------------------------------------


class FixedLen(Strict):
    """Every request has exactly ``tokens`` tokens."""

    kind: Literal["fixed"]
    tokens: PosInt

    def build(self):
        """The ``workloads`` length distribution."""
        from workloads.lengths import FixedLength

        return FixedLength(self.tokens)


class UniformLen(Strict):
    """Integer token counts uniform on [low, high]."""

    kind: Literal["uniform"]
    low: PosInt
    high: PosInt

    def build(self):
        """The ``workloads`` length distribution."""
        from workloads.lengths import UniformLength

        return UniformLength(self.low, self.high)


class LogNormalLen(Strict):
    """ceil of a lognormal: give ``median_tokens`` or ``mean_tokens``; ``max_tokens`` bounds
    it (draws above are resampled, see ``workloads.LogNormalLength``)."""

    kind: Literal["lognormal"]
    sigma: Pos
    median_tokens: Pos | None = None
    mean_tokens: Pos | None = None
    max_tokens: PosInt | None = None

    def build(self):
        """The ``workloads`` length distribution."""
        from workloads.lengths import LogNormalLength

        return LogNormalLength(self.sigma, median_tokens=self.median_tokens,
                               mean_tokens=self.mean_tokens, max_tokens=self.max_tokens)


class EmpiricalLen(Strict):
    """Resampled from a column of a CSV file (path relative to the repository root)."""

    kind: Literal["empirical"]
    file: str
    column: str
    max_tokens: PosInt | None = None

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
        """The run's ``workloads.RequestSpec`` list: ``n`` requests (or all arriving before
        ``horizon_s`` when ``n`` is None), task names drawn by the ``tasks`` weights."""
        raise NotImplementedError

    def closed_loop(self):
        """The engine's closed user loop (``workloads.ClosedLoop``), or None."""
        return None


class _Synthetic(_Workload):
    """A workload whose lengths are drawn: prompt and output length distributions."""

    prompt: Length = FixedLen(kind="fixed", tokens=512)
    output: Length = FixedLen(kind="fixed", tokens=256)

    def arrival_process(self):
        """The ``workloads`` arrival process."""
        raise NotImplementedError

    def requests(self, n, horizon_s, rng, tasks):
        from workloads.requests import build_requests

        return build_requests(self.arrival_process(), self.prompt.build(), self.output.build(),
                              rng, n=n, horizon_s=None if n is not None else horizon_s,
                              tasks=tasks)


class PoissonWorkload(_Synthetic):
    """Poisson arrivals at ``rate_per_s`` (exponential gaps)."""

    arrivals: Literal["poisson"] = "poisson"
    rate_per_s: Pos = 4.0

    def arrival_process(self):
        from workloads.arrivals import PoissonArrivals

        return PoissonArrivals(self.rate_per_s)


class GammaWorkload(_Synthetic):
    """Renewal arrivals with gamma gaps: mean rate ``rate_per_s``, coefficient of variation
    ``cv`` (> 1 burstier than Poisson)."""

    arrivals: Literal["gamma"]
    rate_per_s: Pos = 4.0
    cv: Pos

    def arrival_process(self):
        from workloads.arrivals import GammaArrivals

        return GammaArrivals(self.rate_per_s, self.cv)


class OnOffWorkload(_Synthetic):
    """Poisson arrivals whose rate switches between an on and an off rate, each period's
    length exponential with its mean."""

    arrivals: Literal["onoff"]
    on_rate_per_s: Pos
    off_rate_per_s: NonNeg
    on_mean_s: Pos
    off_mean_s: Pos

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
    file: str

    def requests(self, n, horizon_s, rng, tasks):
        from workloads.requests import read_request_csv

        specs = read_request_csv(resolve_file(self.file))
        if n is not None:
            specs = specs[:n]
        if horizon_s is not None:
            specs = [s for s in specs if s.arrival_at < horizon_s]
        return specs


class ClosedLoopWorkload(_Synthetic):
    """``users`` that each send a request, wait for it to finish, think (gamma with mean
    ``think_mean_s`` and ``think_cv``; 1 = exponential) and repeat."""

    arrivals: Literal["closed_loop"]
    users: PosInt
    think_mean_s: NonNeg
    think_cv: Pos = 1.0

    def requests(self, n, horizon_s, rng, tasks):
        from workloads.arrivals import OfflineBatch
        from workloads.requests import RequestSpec, build_requests

        # Arrival times are written by the engine as users send; nan until then.
        specs = build_requests(OfflineBatch(), self.prompt.build(), self.output.build(), rng,
                               n=n, tasks=tasks)
        return [RequestSpec(s.id, float("nan"), s.prompt_tokens, s.output_tokens, s.task)
                for s in specs]

    def closed_loop(self):
        from workloads.arrivals import ClosedLoop

        return ClosedLoop(self.users, self.think_mean_s, self.think_cv)


ARRIVAL_KINDS = (PoissonWorkload, GammaWorkload, OnOffWorkload, OfflineWorkload,
                 ReplayWorkload, ClosedLoopWorkload)
Workload = kind_union(ARRIVAL_KINDS, key="arrivals", default="poisson")

