"""The engine against closed forms: M/D/1 waiting time, E(α, γ), the bursty bias (§4.5)."""

import numpy as np
import pytest

from sim.policies import FixedGamma
from sim.runner import simulate
from sim.summary import formula_tokens_per_verify, summarize
from tests.sim.fakes import FakeCost, setup, table


def test_md1_mean_wait_matches_pollaczek_khinchine():
    # Batch-1 replica, no speculation, fixed lengths: service is deterministic,
    # S = prefill pass (10 ms + 8 x 1 ms) + one decode pass (11 ms) = 29 ms.
    # P-K for M/D/1: Wq = λ S² / (2 (1 − ρ)), ρ = λ S.
    from workloads import PoissonArrivals

    service_s = 0.018 + 0.011
    rho = 0.5
    lam = rho / service_s
    n = 40_000
    arrivals = PoissonArrivals(lam).sample(np.random.default_rng(7), n=n)
    res = simulate(setup(table(arrivals, [8] * n, [2] * n), max_num_seqs=1))
    wait = np.array([r.first_scheduled_at - r.arrival_at for r in res.requests])
    service = np.array([r.finished_at - r.first_scheduled_at for r in res.requests])
    assert service == pytest.approx(service_s, abs=1e-9)  # deterministic, exactly
    expected = lam * service_s**2 / (2 * (1 - rho))
    # Tolerance 5%: the mean of 40k correlated waits at ρ = 0.5 (seed fixed).
    assert wait.mean() == pytest.approx(expected, rel=0.05)


def _one_at_a_time(acceptance, gamma: int, n: int, output: int):
    """n requests served strictly one after another (arrivals far apart), fixed γ."""
    arrivals = np.arange(n) * 1e6
    s = setup(table(arrivals, [16] * n, [output] * n), policy=lambda: FixedGamma(gamma),
              draft=FakeCost(0.001, 0.0), acceptance=acceptance, seed=3)
    return simulate(s)


def test_iid_tokens_per_verify_within_1pct_of_formula():
    from specdec import expected_tokens
    from workloads import IIDAcceptance

    alpha, gamma = 0.8, 4
    res = _one_at_a_time(IIDAcceptance(alpha), gamma, n=8, output=3000)
    summ = summarize("g4", res.requests, res.totals, res.end_at)
    steps = sum(r.verify_steps for r in res.requests)
    assert steps > 6000
    assert summ["tokens_per_verify"] == pytest.approx(float(expected_tokens(alpha, gamma)),
                                                      rel=0.01)
    # and the formula evaluated at the measured α̂ agrees with the truth as well
    assert summ["formula_tokens_per_verify"] == pytest.approx(
        float(expected_tokens(alpha, gamma)), rel=0.01)


def test_bursty_acceptance_falls_below_the_formula():
    from workloads import BurstyAcceptance

    acc = BurstyAcceptance(0.95, 0.3, 32, 32, np.random.default_rng(11))
    res = _one_at_a_time(acc, 4, n=8, output=3000)
    summ = summarize("g4", res.requests, res.totals, res.end_at)
    measured, formula = summ["tokens_per_verify"], summ["formula_tokens_per_verify"]
    assert formula == formula_tokens_per_verify(res.requests, res.totals)
    # The lecture (§4.5): plugging the measured α̂ into E(α, γ) overestimates by about 5%.
    gap = formula / measured - 1
    assert 0.02 < gap < 0.09, (measured, formula)
