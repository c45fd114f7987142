"""Arrival processes against queueing theory (fixed seeds, stated tolerances)."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.errors import UserError
from workloads.arrivals import (
    ClosedLoop,
    GammaArrivals,
    OfflineBatch,
    OnOffArrivals,
    PoissonArrivals,
    ReplayArrivals,
)


def test_poisson_gaps_mean_and_variance():
    # rate 5/s: gaps are Exp(5): mean 0.2 s, variance 0.04 s²; 200k gaps -> SE 0.22 % / 0.5 %
    t = PoissonArrivals(5.0).sample(np.random.default_rng(1), n=200_000)
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert t.shape == (200_000,)
    assert np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(0.2, rel=0.01)
    assert gaps.var() == pytest.approx(0.04, rel=0.02)


def test_poisson_counts_per_window_are_poisson():
    # counts in 1 s windows over 20 000 s: mean = variance = 5 (SE ≈ 0.3 % / 1 %)
    horizon = 20_000.0
    t = PoissonArrivals(5.0).sample(np.random.default_rng(2), horizon_s=horizon)
    assert t.max() < horizon and np.all(np.diff(t) >= 0)
    counts = np.bincount(t.astype(np.int64), minlength=int(horizon))
    assert counts.mean() == pytest.approx(5.0, rel=0.01)
    assert counts.var() == pytest.approx(5.0, rel=0.04)


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gamma_arrivals_have_requested_cv(cv):
    t = GammaArrivals(10.0, cv).sample(np.random.default_rng(3), n=300_000)
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert gaps.mean() == pytest.approx(0.1, rel=0.01)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.03)


def test_gamma_horizon_mode_rate():
    t = GammaArrivals(4.0, 3.0).sample(np.random.default_rng(4), horizon_s=50_000.0)
    assert t.max() < 50_000.0
    assert t.size / 50_000.0 == pytest.approx(4.0, rel=0.03)


def test_on_off_long_run_rate():
    # on 10/s for 2 s, off 1/s for 8 s: (10·2 + 1·8) / 10 = 2.8/s
    proc = OnOffArrivals(10.0, 1.0, 2.0, 8.0)
    assert proc.rate_per_s() == pytest.approx(2.8)
    t = proc.sample(np.random.default_rng(5), horizon_s=50_000.0)
    assert np.all(np.diff(t) >= 0) and t.max() < 50_000.0
    assert t.size / 50_000.0 == pytest.approx(2.8, rel=0.03)
    # burstier than Poisson: counts in 1 s windows are over-dispersed
    counts = np.bincount(t.astype(np.int64), minlength=50_000)
    assert counts.var() / counts.mean() > 2.0


def test_on_off_count_mode_and_zero_off_rate():
    t = OnOffArrivals(5.0, 0.0, 1.0, 1.0).sample(np.random.default_rng(6), n=1000)
    assert t.shape == (1000,) and np.all(np.diff(t) >= 0)


def test_offline_batch_all_at_zero():
    t = OfflineBatch().sample(np.random.default_rng(0), n=7)
    assert np.array_equal(t, np.zeros(7))
    with pytest.raises(UserError, match="offline batch"):
        OfflineBatch().sample(np.random.default_rng(0), horizon_s=10.0)


def test_closed_loop_think_times():
    loop = ClosedLoop(users=8, think_mean_s=2.0)
    think = loop.think_times(100_000, np.random.default_rng(7))
    assert think.mean() == pytest.approx(2.0, rel=0.02)
    assert think.std() / think.mean() == pytest.approx(1.0, rel=0.03)
    assert loop.first_arrivals(np.random.default_rng(7)).shape == (8,)
    assert np.array_equal(ClosedLoop(2, 0.0).think_times(3, np.random.default_rng(0)), np.zeros(3))


def test_replay_arrivals():
    r = ReplayArrivals(np.array([0.0, 0.5, 0.5, 2.0]))
    assert np.array_equal(r.sample(np.random.default_rng(0), n=3), [0.0, 0.5, 0.5])
    assert np.array_equal(r.sample(np.random.default_rng(0), horizon_s=1.0), [0.0, 0.5, 0.5])
    with pytest.raises(UserError, match=r"times_at\[2\]"):
        ReplayArrivals(np.array([0.0, 2.0, 1.0]))
    with pytest.raises(UserError, match="holds 4"):
        r.sample(np.random.default_rng(0), n=5)


def test_same_seed_same_draws_different_seed_different():
    for proc in (PoissonArrivals(3.0), GammaArrivals(3.0, 2.0), OnOffArrivals(5, 1, 1, 1)):
        a = proc.sample(np.random.default_rng(11), n=100)
        b = proc.sample(np.random.default_rng(11), n=100)
        c = proc.sample(np.random.default_rng(12), n=100)
        assert np.array_equal(a, b)
        assert not np.array_equal(a, c)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: PoissonArrivals(0.0), "rate_per_s"),
        (lambda: PoissonArrivals(-1.0), "rate_per_s"),
        (lambda: PoissonArrivals(float("nan")), "rate_per_s"),
        (lambda: GammaArrivals(1.0, 0.0), "cv"),
        (lambda: OnOffArrivals(1.0, -1.0, 1.0, 1.0), "off_rate_per_s"),
        (lambda: OnOffArrivals(1.0, 1.0, 0.0, 1.0), "on_mean_s"),
        (lambda: ClosedLoop(0, 1.0), "users"),
        (lambda: ClosedLoop(2, -1.0), "think_mean_s"),
        (lambda: PoissonArrivals(1.0).sample(np.random.default_rng(0)), "exactly one"),
        (lambda: PoissonArrivals(1.0).sample(np.random.default_rng(0), n=-1), "n:"),
    ],
)
def test_validation_names_the_field(build, field):
    with pytest.raises(UserError, match=field) as info:
        build()
    assert "\n" not in str(info.value)


class _Understated(PoissonArrivals):
    """Poisson at 100/s that tells ``sample_until`` it expects none: drawn in the smallest
    chunks, many of them before the horizon."""

    def rate_per_s(self) -> float:
        return 0.0


@pytest.mark.parametrize("process", [PoissonArrivals(100.0), GammaArrivals(100.0, 3.0),
                                     GammaArrivals(100.0, 0.5), _Understated(100.0),
                                     OnOffArrivals(200.0, 10.0, 1.0, 2.0)],
                         ids=["poisson", "gamma-cv3", "gamma-cv0.5", "chunked", "onoff"])
def test_sample_until_is_the_full_draw_cut_at_the_horizon(process):
    """A count far past the horizon is drawn only up to it, bit for bit the times of the
    full draw that come before it."""
    full = process.sample(np.random.default_rng(7), n=20_000)
    cut = process.sample_until(np.random.default_rng(7), 20_000, 40.0)
    assert 2_000 < cut.size < 20_000  # ~100/s for 40 s (on/off: ~70/s)
    assert np.array_equal(cut, full[full < 40.0])


def test_sample_until_stops_at_n_when_the_horizon_is_far():
    full = PoissonArrivals(5.0).sample(np.random.default_rng(3), n=3000)
    assert np.array_equal(_Understated(5.0).sample_until(np.random.default_rng(3), 3000, 1e7),
                          full)


def test_sample_until_draws_about_what_the_horizon_holds(monkeypatch):
    """10**12 requests with a 2 s horizon: one chunk of 1024 gaps, not 10**12."""
    drawn = []
    real = PoissonArrivals._gaps

    def counted(self, n, rng):
        drawn.append(n)
        return real(self, n, rng)

    monkeypatch.setattr(PoissonArrivals, "_gaps", counted)
    t = PoissonArrivals(4.0).sample_until(np.random.default_rng(0), 10**12, 2.0)
    assert drawn == [1024] and t.size < 30 and t.max() < 2.0
