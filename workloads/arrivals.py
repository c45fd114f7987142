"""Arrival processes: when requests reach the cluster.

Every process generates absolute arrival times (float64 seconds from t = 0, sorted) for
either a request count ``n`` or a horizon ``horizon_s``, drawing only from the generator it
is given; ``sample_until`` takes both, the first ``n`` arrivals cut at the horizon, drawn
only as far as the horizon (so a count far beyond it costs no memory). Processes: Poisson;
gamma renewal with a coefficient of variation (burstiness; CV = 1 is Poisson); on/off (a
Markov-modulated Poisson process with two rates); offline batch (everything at t = 0);
replay of recorded times, e.g. the ``arrival_at`` column of a request CSV read by
:func:`workloads.requests.read_request_csv`. The closed loop is driven by the engine:
:class:`ClosedLoop` only supplies the user count and the think-time sampler.
"""

from __future__ import annotations

import abc
import math

import numpy as np

from specdec.errors import UserError


def check_positive(field: str, value: float, allow_zero: bool = False) -> float:
    """``value`` as a finite float > 0 (or >= 0) or a one-line UserError naming ``field``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{field}: must be a number, got {value!r}") from None
    ok = (v >= 0.0 if allow_zero else v > 0.0) and math.isfinite(v)
    if not ok:
        op = ">=" if allow_zero else ">"
        raise UserError(f"{field}: must be a finite number {op} 0, got {value!r}")
    return v


def _n_or_horizon(n: int | None, horizon_s: float | None) -> tuple[int | None, float | None]:
    if (n is None) == (horizon_s is None):
        raise UserError("arrivals: give exactly one of n (request count) or horizon_s")
    if n is not None:
        if int(n) != n or n < 0:
            raise UserError(f"n: must be an integer >= 0, got {n!r}")
        return int(n), None
    return None, check_positive("horizon_s", horizon_s)


def _n_and_horizon(n: int, horizon_s: float) -> tuple[int, float]:
    """Both a request count and a horizon, each checked as ``_n_or_horizon`` does."""
    return _n_or_horizon(n, None)[0], _n_or_horizon(None, horizon_s)[1]


class ArrivalProcess(abc.ABC):
    """An open-loop arrival process."""

    @abc.abstractmethod
    def rate_per_s(self) -> float:
        """The long-run mean arrival rate (requests per second)."""

    @abc.abstractmethod
    def sample(
        self, rng: np.random.Generator, n: int | None = None, horizon_s: float | None = None
    ) -> np.ndarray:
        """float64 [N]: sorted arrival times, N = n, or all arrivals in [0, horizon_s)."""

    def sample_until(self, rng: np.random.Generator, n: int, horizon_s: float) -> np.ndarray:
        """float64 [N]: those of the first ``n`` arrivals (``sample(rng, n=n)``) that come
        before ``horizon_s``. Processes that draw in sequence stop drawing at the horizon,
        with the same draws as ``sample(rng, n=n)`` up to there."""
        n, horizon_s = _n_and_horizon(n, horizon_s)
        times = self.sample(rng, n=n)
        return times[times < horizon_s]


class RenewalArrivals(ArrivalProcess):
    """Arrivals whose gaps are i.i.d. draws; subclasses supply the gap distribution."""

    @abc.abstractmethod
    def _gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """float64 [n]: n independent inter-arrival gaps."""

    def sample(self, rng, n=None, horizon_s=None):
        """float64 [N]: cumulative gaps, N = n, or all arrivals in [0, horizon_s)."""
        n, horizon_s = _n_or_horizon(n, horizon_s)
        if n is not None:
            return np.cumsum(self._gaps(n, rng))
        chunk = max(16, int(self.rate_per_s() * horizon_s * 1.1) + 16)
        times = np.cumsum(self._gaps(chunk, rng))
        while times[-1] < horizon_s:  # top up: rare, only when the draw ran short
            more = np.cumsum(self._gaps(chunk, rng)) + times[-1]
            times = np.concatenate([times, more])
        return times[times < horizon_s]

    def sample_until(self, rng, n, horizon_s):
        """float64 [N]: the first ``n`` cumulative gaps before ``horizon_s``, drawn in chunks
        (about 10 % more than the arrivals the rate expects before the horizon) until one
        passes it. Each chunk's sum starts from the last time, so the times are bit for bit
        those of ``sample(rng, n=n)``: the gaps come from one stream in order, and a
        cumulative sum adds in order too."""
        n, horizon_s = _n_and_horizon(n, horizon_s)
        chunk = int(min(n, max(1024, self.rate_per_s() * horizon_s * 1.1 + 16)))
        parts, last, count = [], 0.0, 0
        while count < n and last < horizon_s:
            k = min(chunk, n - count)
            times = np.cumsum(np.concatenate([[last], self._gaps(k, rng)]))[1:]  # [k]
            parts.append(times)
            count, last = count + k, float(times[-1])
        times = np.concatenate(parts) if parts else np.zeros(0)
        return times[times < horizon_s]


class PoissonArrivals(RenewalArrivals):
    """Poisson arrivals: exponential gaps with mean 1 / rate_per_s."""

    def __init__(self, rate_per_s: float) -> None:
        self._rate = check_positive("rate_per_s", rate_per_s)

    def rate_per_s(self) -> float:
        """The rate λ."""
        return self._rate

    def _gaps(self, n, rng):
        return rng.exponential(1.0 / self._rate, size=n)


class GammaArrivals(RenewalArrivals):
    """Gamma renewal arrivals with mean gap 1 / rate_per_s and coefficient of variation ``cv``.

    Gap ~ Gamma(shape = 1/cv², scale = cv² / rate): CV = 1 is Poisson, CV > 1 burstier,
    CV < 1 more regular than Poisson.
    """

    def __init__(self, rate_per_s: float, cv: float) -> None:
        self._rate = check_positive("rate_per_s", rate_per_s)
        self.cv = check_positive("cv", cv)

    def rate_per_s(self) -> float:
        """The long-run rate (1 / mean gap)."""
        return self._rate

    def _gaps(self, n, rng):
        shape = 1.0 / self.cv**2
        return rng.gamma(shape, 1.0 / (self._rate * shape), size=n)


class OnOffArrivals(ArrivalProcess):
    """On/off bursts: Poisson at ``on_rate_per_s`` during on periods, ``off_rate_per_s`` off.

    Period durations are exponential with means ``on_mean_s`` and ``off_mean_s`` (a
    Markov-modulated Poisson process); the first period is on with the stationary
    probability on_mean / (on_mean + off_mean). Long-run rate =
    (on_rate·on_mean + off_rate·off_mean) / (on_mean + off_mean). The off rate may be 0.
    """

    def __init__(
        self, on_rate_per_s: float, off_rate_per_s: float, on_mean_s: float, off_mean_s: float
    ) -> None:
        self.on_rate_per_s = check_positive("on_rate_per_s", on_rate_per_s)
        self.off_rate_per_s = check_positive("off_rate_per_s", off_rate_per_s, allow_zero=True)
        self.on_mean_s = check_positive("on_mean_s", on_mean_s)
        self.off_mean_s = check_positive("off_mean_s", off_mean_s)

    def rate_per_s(self) -> float:
        """The long-run mean rate."""
        total = self.on_mean_s + self.off_mean_s
        return (self.on_rate_per_s * self.on_mean_s + self.off_rate_per_s * self.off_mean_s) / total

    def sample(self, rng, n=None, horizon_s=None):
        """float64 [N]: sorted arrival times for n requests or within [0, horizon_s)."""
        n, horizon_s = _n_or_horizon(n, horizon_s)
        return self._periods(rng, n, horizon_s)

    def sample_until(self, rng, n, horizon_s):
        """float64 [N]: the first ``n`` arrivals before ``horizon_s``; periods are drawn
        until either is reached, the same draws as ``sample(rng, n=n)`` up to there."""
        n, horizon_s = _n_and_horizon(n, horizon_s)
        times = self._periods(rng, n, horizon_s)
        return times[times < horizon_s]

    def _periods(self, rng, n: int | None, horizon_s: float | None) -> np.ndarray:
        """float64 [N]: the arrivals of whole on/off periods, drawn 256 at a time until
        ``n`` arrivals (the first ``n`` kept) or ``horizon_s`` (those before it kept) is
        reached, whichever comes first of those given."""
        if n == 0:
            return np.zeros(0)
        mean_s = np.array([self.on_mean_s, self.off_mean_s])  # [2]: 0 = on, 1 = off
        rate = np.array([self.on_rate_per_s, self.off_rate_per_s])  # [2]
        state = 0 if rng.random() < mean_s[0] / mean_s.sum() else 1
        n_periods = 256  # even, so every chunk starts in the same state
        t0, out, count = 0.0, [], 0
        while True:
            # a period of length d holds Poisson(rate·d) arrivals, uniform within it
            kind = (state + np.arange(n_periods)) % 2  # [P]
            dur = rng.exponential(mean_s[kind])  # [P]
            starts = t0 + np.concatenate([[0.0], np.cumsum(dur)[:-1]])  # [P]
            counts = rng.poisson(rate[kind] * dur)  # [P]
            times = np.repeat(starts, counts) + rng.random(counts.sum()) * np.repeat(dur, counts)
            out.append(np.sort(times))  # periods are disjoint and in order
            count += times.size
            t0 = float(starts[-1] + dur[-1])
            if (n is not None and count >= n) or (horizon_s is not None and t0 >= horizon_s):
                break
        times = np.concatenate(out)
        if n is not None:
            times = times[:n]
        return times if horizon_s is None else times[times < horizon_s]


class OfflineBatch(ArrivalProcess):
    """Offline batch: all requests are present at t = 0 (requires a count, not a horizon)."""

    def rate_per_s(self) -> float:
        """Infinite: everything arrives at once."""
        return math.inf

    def sample(self, rng, n=None, horizon_s=None):
        """float64 [n] zeros."""
        if n is None or horizon_s is not None:
            raise UserError("arrivals: an offline batch needs a request count n, not a horizon")
        n, _ = _n_or_horizon(n, None)
        return np.zeros(n)


class ReplayArrivals(ArrivalProcess):
    """Replays recorded arrival times (e.g. the arrival_at column of a request CSV)."""

    def __init__(self, times_at: np.ndarray) -> None:
        t = np.asarray(times_at, dtype=np.float64)
        if t.ndim != 1 or t.size == 0:
            raise UserError("times_at: must be a non-empty 1-D array of seconds")
        if not np.all(np.isfinite(t)) or t.min() < 0:
            raise UserError(f"times_at: must be finite and >= 0, got min {t.min()!r}")
        if np.any(np.diff(t) < 0):
            i = int(np.argmax(np.diff(t) < 0)) + 1
            raise UserError(
                f"times_at[{i}]: arrival times must not decrease, got {t[i]!r} < {t[i - 1]!r}"
            )
        self.times_at = t

    def rate_per_s(self) -> float:
        """Requests per second over the recorded span."""
        span = self.times_at[-1] - self.times_at[0]
        return math.inf if span == 0 else (self.times_at.size - 1) / span

    def sample(self, rng, n=None, horizon_s=None):
        """The first n recorded times, or those before horizon_s (no randomness)."""
        n, horizon_s = _n_or_horizon(n, horizon_s)
        if n is not None:
            if n > self.times_at.size:
                raise UserError(f"n: the trace holds {self.times_at.size} requests, asked for {n}")
            return self.times_at[:n].copy()
        return self.times_at[self.times_at < horizon_s].copy()


class ClosedLoop:
    """N users, each sending its next request a think time after the previous one finishes.

    The engine drives the loop; this holds the user count and the think-time distribution:
    exponential with mean ``think_mean_s`` (cv = 1) or gamma with the given cv. Each user's
    first request arrives after one think time (so users do not fire in lockstep).
    """

    def __init__(self, users: int, think_mean_s: float, think_cv: float = 1.0) -> None:
        if int(users) != users or users < 1:
            raise UserError(f"users: must be an integer >= 1, got {users!r}")
        self.users = int(users)
        self.think_mean_s = check_positive("think_mean_s", think_mean_s, allow_zero=True)
        self.think_cv = check_positive("think_cv", think_cv)

    def think_times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """float64 [n]: think times in seconds."""
        if self.think_mean_s == 0.0:
            return np.zeros(int(n))
        shape = 1.0 / self.think_cv**2
        return rng.gamma(shape, self.think_mean_s / shape, size=int(n))

    def first_arrivals(self, rng: np.random.Generator) -> np.ndarray:
        """float64 [users]: each user's first arrival time (one think time after t = 0)."""
        return self.think_times(self.users, rng)
