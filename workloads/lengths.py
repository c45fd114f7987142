"""Length distributions for prompt and output tokens.

Every distribution samples int64 token counts >= 1 from the generator it is given. An
optional ``max_tokens`` bound is *validated*, never silently clamped:

* fixed, uniform and empirical refuse a configuration whose values can exceed the bound;
* lognormal samples ``ceil(X)`` of a continuous lognormal X (so every draw is >= 1) and,
  with a bound, *resamples* draws above it — the distribution truncated at max_tokens.
  A bound that would reject more than 99 % of draws is refused instead.

Lognormal parameters: ``sigma`` is the σ of ln X; give either ``median_tokens`` (= e^μ) or
``mean_tokens`` (= e^{μ + σ²/2}, the mean of the continuous X before rounding up and
truncation — ceil adds about half a token).
"""

from __future__ import annotations

import abc
import csv
import math
from pathlib import Path

import numpy as np

from specdec.errors import UserError
from workloads.arrivals import check_positive


def _check_tokens(field: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)):
        raise UserError(f"{field}: must be an integer >= {minimum}, got {value!r}")
    if value != value or int(value) != value or value < minimum:
        raise UserError(f"{field}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


class LengthDistribution(abc.ABC):
    """A distribution of token counts (integers >= 1, at most ``max_tokens`` if set)."""

    max_tokens: int | None = None

    @abc.abstractmethod
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """int64 [n]: token counts."""

    @abc.abstractmethod
    def mean_tokens(self) -> float:
        """The mean of the sampled counts (exact, or numerical for truncated lognormal)."""

    def _bound(self, max_tokens) -> int | None:
        return None if max_tokens is None else _check_tokens("max_tokens", max_tokens)


class FixedLength(LengthDistribution):
    """Always ``tokens``."""

    def __init__(self, tokens: int, max_tokens: int | None = None) -> None:
        self.tokens = _check_tokens("tokens", tokens)
        self.max_tokens = self._bound(max_tokens)
        if self.max_tokens is not None and self.tokens > self.max_tokens:
            raise UserError(f"tokens: {self.tokens} exceeds max_tokens {self.max_tokens}")

    def sample(self, n, rng):
        """int64 [n] filled with ``tokens`` (draws nothing)."""
        return np.full(int(n), self.tokens, dtype=np.int64)

    def mean_tokens(self) -> float:
        """``tokens``."""
        return float(self.tokens)


class UniformLength(LengthDistribution):
    """Uniform over the integers ``low..high`` inclusive."""

    def __init__(self, low: int, high: int, max_tokens: int | None = None) -> None:
        self.low = _check_tokens("low", low)
        self.high = _check_tokens("high", high)
        if self.high < self.low:
            raise UserError(f"high: must be >= low ({self.low}), got {self.high}")
        self.max_tokens = self._bound(max_tokens)
        if self.max_tokens is not None and self.high > self.max_tokens:
            raise UserError(f"high: {self.high} exceeds max_tokens {self.max_tokens}")

    def sample(self, n, rng):
        """int64 [n] uniform on low..high."""
        return rng.integers(self.low, self.high + 1, size=int(n), dtype=np.int64)

    def mean_tokens(self) -> float:
        """(low + high) / 2."""
        return (self.low + self.high) / 2.0


class LogNormalLength(LengthDistribution):
    """``ceil(X)``, ln X ~ Normal(μ, σ²); draws above ``max_tokens`` are resampled."""

    def __init__(
        self,
        sigma: float,
        median_tokens: float | None = None,
        mean_tokens: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.sigma = check_positive("sigma", sigma)
        if (median_tokens is None) == (mean_tokens is None):
            raise UserError("median_tokens: give exactly one of median_tokens or mean_tokens")
        if median_tokens is not None:
            self.mu = math.log(check_positive("median_tokens", median_tokens))
        else:
            self.mu = math.log(check_positive("mean_tokens", mean_tokens)) - self.sigma**2 / 2
        self.max_tokens = self._bound(max_tokens)
        if self.max_tokens is not None and self.keep_fraction() < 0.01:
            raise UserError(
                f"max_tokens: {self.max_tokens} keeps only {self.keep_fraction():.2%} of "
                f"lognormal draws (median {math.exp(self.mu):.0f}); raise it or lower the length"
            )

    def keep_fraction(self) -> float:
        """P(ceil(X) <= max_tokens) = P(X <= max_tokens): the share of draws kept."""
        if self.max_tokens is None:
            return 1.0
        z = (math.log(self.max_tokens) - self.mu) / self.sigma
        return 0.5 * math.erfc(-z / math.sqrt(2))

    def sample(self, n, rng):
        """int64 [n]: ceil of lognormal draws, resampling any above max_tokens."""
        out = np.ceil(rng.lognormal(self.mu, self.sigma, size=int(n))).astype(np.int64)
        if self.max_tokens is not None:
            bad = out > self.max_tokens
            while bad.any():  # terminates fast: at least 1 % of draws are kept
                out[bad] = np.ceil(rng.lognormal(self.mu, self.sigma, size=int(bad.sum())))
                bad = out > self.max_tokens
        return np.maximum(out, 1)  # ceil of X > 0 is >= 1 already; guards X underflow to 0

    def mean_tokens(self) -> float:
        """Mean of ceil(X) (truncated at max_tokens if bounded).

        Summed exactly over k = 1..h with P(ceil X = k) = F(k) − F(k − 1), h = max_tokens or
        at most 50 000; an unbounded tail beyond h adds E[X; X > h] + ½·P(X > h), which is
        off by at most ½·P(X > h) tokens.
        """
        tail = self.max_tokens is None
        cap = math.exp(self.mu + 9 * self.sigma)
        hi = self.max_tokens or int(min(math.ceil(cap), 50_000))
        k = np.arange(1, hi + 1, dtype=np.float64)  # [hi]
        cdf = np.array([self._cdf(x) for x in k.tolist()])  # [hi]
        pmf = np.diff(np.concatenate([[0.0], cdf]))  # P(ceil X = k) = F(k) − F(k − 1)
        if not tail:
            return float((k * pmf).sum() / pmf.sum())
        beyond = 1.0 - self._cdf(hi)
        z = (self.mu + self.sigma**2 - math.log(hi)) / self.sigma
        tail_mean = math.exp(self.mu + self.sigma**2 / 2) * 0.5 * math.erfc(-z / math.sqrt(2))
        return float((k * pmf).sum() + tail_mean + 0.5 * beyond)

    def _cdf(self, x: float) -> float:
        """P(X <= x) for the continuous lognormal."""
        return 0.5 * math.erfc(-(math.log(x) - self.mu) / (self.sigma * math.sqrt(2)))


class EmpiricalLength(LengthDistribution):
    """Resamples (with replacement) from recorded token counts."""

    def __init__(self, values, max_tokens: int | None = None, source: str = "values") -> None:
        v = np.asarray(values)
        if v.ndim != 1 or v.size == 0:
            raise UserError(f"{source}: need a non-empty list of token counts")
        for i, x in enumerate(v.tolist()):
            _check_tokens(f"{source}[{i}]", x)
        self.values = v.astype(np.int64)
        self.max_tokens = self._bound(max_tokens)
        if self.max_tokens is not None and self.values.max() > self.max_tokens:
            i = int(np.argmax(self.values > self.max_tokens))
            raise UserError(f"{source}[{i}]: {self.values[i]} exceeds max_tokens {self.max_tokens}")

    @classmethod
    def from_csv(cls, path: str | Path, column: str, max_tokens: int | None = None):
        """Token counts from one column of a CSV file with a header row."""
        p = Path(path)
        try:
            with p.open(newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                if reader.fieldnames is None or column not in reader.fieldnames:
                    raise UserError(f"{p}: missing column '{column}'")
                if reader.fieldnames.count(column) > 1:  # the last would be read, silently
                    raise UserError(f"{p}: line 1: column '{column}' given twice")
                values = []
                for row_no, row in enumerate(reader, start=2):
                    if None in row:  # cells past the header's columns, else dropped
                        raise UserError(f"{p}: line {row_no}: {len(row) - 1 + len(row[None])} "
                                        f"cells for {len(row) - 1} columns")
                    cell = (row.get(column) or "").strip()
                    try:
                        values.append(int(cell))
                    except ValueError:
                        raise UserError(
                            f"{p}: line {row_no}: column '{column}': not an integer: {cell!r}"
                        ) from None
                    if values[-1] < 1:
                        raise UserError(
                            f"{p}: line {row_no}: column '{column}': must be >= 1, got {cell}"
                        )
        except UnicodeDecodeError as e:
            raise UserError(f"{p}: cannot read: not UTF-8 text (byte {e.start})") from None
        except OSError as e:
            raise UserError(f"{p}: cannot read: {e.strerror}") from None
        if not values:
            raise UserError(f"{p}: no rows")
        return cls(values, max_tokens, source=f"{p}:{column}")

    def sample(self, n, rng):
        """int64 [n]: uniform draws from the recorded values."""
        return self.values[rng.integers(0, self.values.size, size=int(n))]

    def mean_tokens(self) -> float:
        """Mean of the recorded values."""
        return float(self.values.mean())
