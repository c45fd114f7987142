"""Length distributions: integer support, bounds validated (not clamped), means."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdec.errors import UserError
from workloads.lengths import EmpiricalLength, FixedLength, LogNormalLength, UniformLength


def test_fixed_and_uniform():
    rng = np.random.default_rng(0)
    assert np.array_equal(FixedLength(7).sample(4, rng), [7, 7, 7, 7])
    x = UniformLength(3, 9, max_tokens=9).sample(100_000, rng)
    assert x.dtype == np.int64 and x.min() == 3 and x.max() == 9
    assert x.mean() == pytest.approx(6.0, rel=0.005)
    assert np.array_equal(np.unique(x), np.arange(3, 10))


def test_lognormal_median_parametrisation():
    d = LogNormalLength(0.8, median_tokens=200)
    x = d.sample(200_000, np.random.default_rng(1))
    assert x.min() >= 1 and x.dtype == np.int64
    # ceil(X) has median ceil(200) = 200 or 201; the exact mean of ceil(X) matches
    assert np.median(x) in (200, 201)
    assert x.mean() == pytest.approx(d.mean_tokens(), rel=0.01)
    assert d.mean_tokens() == pytest.approx(200 * math.exp(0.32) + 0.5, rel=0.005)


def test_lognormal_mean_parametrisation():
    d = LogNormalLength(0.5, mean_tokens=100)
    x = d.sample(200_000, np.random.default_rng(2))
    # mean of continuous X is 100; ceil adds about half a token
    assert x.mean() == pytest.approx(100.5, rel=0.005)


def test_lognormal_max_resamples_to_truncated_distribution():
    d = LogNormalLength(1.0, median_tokens=200, max_tokens=500)
    x = d.sample(200_000, np.random.default_rng(3))
    assert x.max() <= 500 and x.max() >= 495
    assert x.mean() == pytest.approx(d.mean_tokens(), rel=0.01)
    # truncation, not clamping: no pile-up at the bound
    assert np.mean(x == 500) < 0.01
    assert d.keep_fraction() == pytest.approx(0.5 * math.erfc(-math.log(2.5) / math.sqrt(2)))


def test_empirical_from_values_and_csv(tmp_path):
    rng = np.random.default_rng(4)
    d = EmpiricalLength([5, 10, 10, 20])
    x = d.sample(100_000, rng)
    assert set(np.unique(x).tolist()) == {5, 10, 20}
    assert x.mean() == pytest.approx(11.25, rel=0.01)
    f = tmp_path / "lens.csv"
    f.write_text("a,b\n1,30\n2,40\n")
    assert EmpiricalLength.from_csv(f, "b").values.tolist() == [30, 40]


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("a\n1\n", "b", "missing column 'b'"),
        ("a\n1\nx\n", "a", "line 3: column 'a': not an integer: 'x'"),
        ("a\n1\n0\n", "a", "line 3: column 'a': must be >= 1"),
        ("a\n", "a", "no rows"),
    ],
)
def test_empirical_csv_errors(tmp_path, text, column, fragment):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(UserError) as info:
        EmpiricalLength.from_csv(f, column)
    msg = str(info.value)
    assert fragment in msg and str(f) in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: FixedLength(0), "tokens"),
        (lambda: FixedLength(1.5), "tokens"),
        (lambda: FixedLength(10, max_tokens=5), "tokens: 10 exceeds max_tokens 5"),
        (lambda: UniformLength(5, 4), "high"),
        (lambda: UniformLength(1, 9, max_tokens=8), "high: 9 exceeds"),
        (lambda: LogNormalLength(0.0, median_tokens=10), "sigma"),
        (lambda: LogNormalLength(1.0), "exactly one"),
        (lambda: LogNormalLength(1.0, median_tokens=10, mean_tokens=10), "exactly one"),
        (lambda: LogNormalLength(1.0, median_tokens=-3), "median_tokens"),
        (lambda: LogNormalLength(0.5, median_tokens=1000, max_tokens=100), "max_tokens"),
        (lambda: EmpiricalLength([3, 0]), r"values\[1\]"),
        (lambda: EmpiricalLength([3, 9], max_tokens=5), r"values\[1\]: 9 exceeds"),
    ],
)
def test_validation(build, field):
    with pytest.raises(UserError, match=field) as info:
        build()
    assert "\n" not in str(info.value)


def test_seeded_determinism():
    d = LogNormalLength(1.0, median_tokens=50, max_tokens=400)
    a = d.sample(1000, np.random.default_rng(9))
    assert np.array_equal(a, d.sample(1000, np.random.default_rng(9)))
    assert not np.array_equal(a, d.sample(1000, np.random.default_rng(10)))


def test_empirical_csv_that_is_not_utf8_is_one_line(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_bytes(b"a\n\xff\n")
    with pytest.raises(UserError, match=r"bad\.csv: cannot read: not UTF-8 text \(byte 2\)"):
        EmpiricalLength.from_csv(f, "a")
