"""Bursty acceptance (lecture §4.5, code 03 demo 3): the i.i.d. formula over-estimates ≈5%."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.analysis import expected_tokens
from specdec.bursty import bursty_acceptance_experiment, run_lengths, two_state_segments
from specdec.errors import UserError


def test_formula_overestimates_by_about_five_percent():
    # Seed 0, 400,000 positions, mean segment 64: measured +5.1% (alpha_hat 0.595,
    # 2.176 tokens per verify against the formula's 2.286; 75.5% of iterations hard).
    r = bursty_acceptance_experiment(np.random.default_rng(0))
    assert 0.03 <= r.formula_overestimate <= 0.08
    assert r.formula_tokens > r.tokens_per_verify  # the direction the lecture found
    assert r.formula_tokens == pytest.approx(float(expected_tokens(r.alpha_hat, 4)), rel=1e-15)
    # "About three quarters of the iterations happen in hard segments".
    assert 0.70 <= r.hard_iteration_share <= 0.80
    # The long-segment limit: per-segment E(0.95, 4) ≈ 4.52 and E(0.3, 4) ≈ 1.42 positions
    # per iteration, half the positions each, so tokens per verify -> their harmonic mean.
    e_easy, e_hard = float(expected_tokens(0.95, 4)), float(expected_tokens(0.3, 4))
    assert r.tokens_per_verify == pytest.approx(2 / (1 / e_easy + 1 / e_hard), rel=0.03)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_overestimate_band_holds_across_seeds(seed):
    r = bursty_acceptance_experiment(np.random.default_rng(seed), n_positions=200_000)
    assert 0.03 <= r.formula_overestimate <= 0.08


def test_no_bursts_no_bias():
    # Mean segment length 2 switches state with probability 1/2 per position: the states
    # are i.i.d., each guess is accepted independently w.p. 0.625, and the formula holds.
    r = bursty_acceptance_experiment(np.random.default_rng(5), mean_segment_len=2.0)
    assert abs(r.formula_overestimate) < 0.01
    assert r.alpha_hat == pytest.approx(0.625, abs=0.005)
    # One state only: plain i.i.d. acceptance at 0.8.
    r = bursty_acceptance_experiment(np.random.default_rng(6), easy_beta=0.8, hard_beta=0.8)
    assert abs(r.formula_overestimate) < 0.01
    assert r.tokens_per_verify == pytest.approx(float(expected_tokens(0.8, 4)), rel=0.01)


def test_segments_are_half_easy_with_the_requested_mean_length():
    easy = two_state_segments(400_000, 64.0, np.random.default_rng(9))
    assert easy.mean() == pytest.approx(0.5, abs=0.03)
    segments = np.count_nonzero(np.diff(easy.astype(np.int8))) + 1
    assert 400_000 / segments == pytest.approx(64.0, rel=0.05)


def test_run_lengths_hand_example():
    accept = np.array([True, True, False, True, False, False, True, True, True])
    np.testing.assert_array_equal(run_lengths(accept), [2, 1, 0, 1, 0, 0, 3, 2, 1])


def test_deterministic_given_seed():
    a = bursty_acceptance_experiment(np.random.default_rng(42), n_positions=20_000)
    b = bursty_acceptance_experiment(np.random.default_rng(42), n_positions=20_000)
    assert a == b


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gamma": 0}, "gamma"),
        ({"easy_beta": 1.5}, "easy_beta"),
        ({"hard_beta": -0.1}, "hard_beta"),
        ({"mean_segment_len": 0.5}, "mean_segment_len"),
        ({"n_positions": 0}, "n_positions"),
        ({"n_positions": 4}, "n_positions"),
    ],
)
def test_bad_arguments_are_user_errors(kwargs, field):
    with pytest.raises(UserError, match=f"^{field}:"):
        bursty_acceptance_experiment(np.random.default_rng(0), **kwargs)
