"""reports.bursty: exact i.i.d. law, α̂, and the bursty model's departures from it."""

from __future__ import annotations

import numpy as np
import pytest

from reports.bursty import (
    alpha_hat,
    formula_bias,
    iid_verify_probs,
    run_length_table,
    verify_histogram,
)
from workloads import BurstyAcceptance, IIDAcceptance, replay_chain


def test_iid_law_sums_to_one_and_has_mean_e():
    p = iid_verify_probs(0.8, 4)
    assert p.sum() == pytest.approx(1.0, abs=1e-15)
    # Mean tokens = 1 + mean accepted = E(0.8, 4) = (1 - 0.8^5) / 0.2.
    assert (np.arange(1, 6) * p).sum() == pytest.approx((1 - 0.8**5) / 0.2, rel=1e-12)


def test_alpha_hat_counts_checked_guesses():
    acc = np.array([0, 2, 4])  # checked: 1, 3, 4 (γ = 4, all accepted checks 4)
    assert alpha_hat(acc, 4) == pytest.approx(6 / 8)


def test_iid_replay_matches_its_law(rng):
    acc = replay_chain(IIDAcceptance(0.7), 3, 2000, 20, rng)
    h = verify_histogram(acc, 3)
    # 40 000 verifies: each fraction within 0.01 of the law (binomial sd <= 0.0025).
    np.testing.assert_allclose(h["measured"], h["iid"], atol=0.01)
    assert h["alpha_hat"].iloc[0] == pytest.approx(0.7, abs=0.01)


def test_bursty_replay_is_bimodal_and_formula_overpredicts(rng):
    model = BurstyAcceptance(0.95, 0.3, 32.0, 32.0, np.random.default_rng(1))
    h = verify_histogram(replay_chain(model, 4, 512, 64, rng), 4)
    # More all-rejected and more all-accepted verifies than the i.i.d. law at the same α̂.
    assert h["measured"].iloc[0] > h["iid"].iloc[0] + 0.05
    assert h["measured"].iloc[-1] > h["iid"].iloc[-1] + 0.03
    measured_mean = (h["tokens"] * h["measured"]).sum()
    formula = (h["tokens"] * h["iid"]).sum()
    assert formula > measured_mean  # lecture §4.5: the formula over-estimates
    runs = run_length_table(replay_chain(model, 64, 128, 64, rng), 64)
    assert runs["measured"].sum() == pytest.approx(1.0)
    assert runs["measured"].iloc[0] > runs["iid"].iloc[0]


def test_formula_bias_columns():
    t = formula_bias([{"name": "g4", "tokens_per_verify": 2.0, "formula_tokens_per_verify": 2.2,
                       "tpot_p50_s": 0.01, "tpot_p99_s": 0.03},
                      {"name": "none", "tokens_per_verify": 1.0,
                       "formula_tokens_per_verify": None, "tpot_p50_s": 0.02,
                       "tpot_p99_s": 0.02}])
    assert t.loc[0, "formula_over_prediction"] == pytest.approx(0.1)
    assert t.loc[0, "tpot_p99_over_p50"] == pytest.approx(3.0)
    assert np.isnan(t.loc[1, "formula_over_prediction"])
