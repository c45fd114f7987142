"""Closed-form analysis (lecture §4, code 03 demo 2, exercises 2-4): the lecture's numbers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.analysis import (
    expected_tokens,
    ops_multiplier,
    optimal_gamma,
    optimal_speedup,
    speedup_lower_bound,
    walltime_speedup,
)
from specdec.errors import UserError

# --- The lecture's numbers, to the precision it prints ------------------------------------


def test_paper_table1_alpha08_gamma5():
    # Code 03 demo 2 / paper table 1: c = 0, alpha 0.8, gamma 5 -> 3.69x speed, 1.63x ops.
    assert round(float(walltime_speedup(0.8, 5, 0.0)), 2) == 3.69
    assert round(float(ops_multiplier(0.8, 5)), 2) == 1.63


def test_paper_table4_alpha075_gamma7_c002():
    assert round(float(walltime_speedup(0.75, 7, 0.02)), 2) == 3.16


def test_exercise2():
    assert round(float(expected_tokens(0.7, 3)), 3) == 2.533
    assert round(float(walltime_speedup(0.7, 3, 0.0)), 2) == 2.53
    assert round(float(walltime_speedup(0.7, 3, 0.05)), 2) == 2.20


def test_exercise3_speedup_curve_and_optimum():
    speedups = walltime_speedup(0.8, np.arange(1, 9), 0.1)
    np.testing.assert_array_equal(
        np.round(speedups[:7], 2), [1.64, 2.03, 2.27, 2.40, 2.46, 2.47, 2.45]
    )
    # The lecture prints 2.41 for gamma = 8. The exact value is 4.32891136 / 1.8 = 2.404951,
    # i.e. 2.405 at three decimals: the printed 2.41 is that rounded a second time.
    assert speedups[7] == pytest.approx(4.32891136 / 1.8, abs=1e-12)
    assert round(float(speedups[7]), 3) == 2.405
    assert optimal_gamma(0.8, 0.1) == 6
    assert round(float(optimal_speedup(0.8, 0.1)), 2) == 2.47


def test_exercise4a_bound_is_the_gamma1_speedup():
    assert round(float(speedup_lower_bound(0.6, 0.1)), 2) == 1.45
    assert speedup_lower_bound(0.6, 0.1) == pytest.approx(walltime_speedup(0.6, 1, 0.1), abs=1e-12)
    assert optimal_gamma(0.6, 0.1) == 3
    assert round(float(walltime_speedup(0.6, 3, 0.1)), 2) == 1.67


def test_exercise4b_no_speedup_when_alpha_below_c():
    assert round(float(walltime_speedup(0.1, 1, 0.2)), 2) == 0.92
    assert optimal_gamma(0.1, 0.2) == 0
    assert optimal_speedup(0.1, 0.2) == 1.0


def test_alpha_equal_c_is_do_not_speculate():
    for a in (0.05, 0.1, 0.3, 0.5, 0.7):
        assert optimal_gamma(a, a) == 0
        assert optimal_gamma(a + 1e-9, a) >= 1


# --- Limits and closed forms ---------------------------------------------------------------


def test_expected_tokens_limits():
    assert expected_tokens(0.0, 7) == 1.0
    assert expected_tokens(1.0, 4) == 5.0  # the alpha -> 1 limit gamma + 1
    assert expected_tokens(1 - 1e-12, 4) == pytest.approx(5.0, abs=1e-10)
    assert expected_tokens(0.5, 0) == 1.0
    assert expected_tokens(0.8, 200) == pytest.approx(5.0, abs=1e-12)  # 1 / (1 - alpha)
    for a in (0.1, 0.5, 0.9, 0.999):  # equals the finite geometric sum
        for g in (*range(0, 10), 63, 64, 65, 100):
            assert expected_tokens(a, g) == pytest.approx(
                sum(a**i for i in range(g + 1)), rel=1e-13
            )


def test_ops_multiplier_matches_its_definition():
    a, g, c_hat = 0.7, 4, 0.05
    e = expected_tokens(a, g)
    assert ops_multiplier(a, g, c_hat) == pytest.approx((g * c_hat + g + 1) / e, rel=1e-14)
    assert ops_multiplier(a, g, c_hat) == pytest.approx(
        (1 - a) * (g * c_hat + g + 1) / (1 - a ** (g + 1))
    )
    assert ops_multiplier(1.0, 5) == 1.0  # every guess accepted: no wasted arithmetic


def test_functions_broadcast_over_a_batch():
    alpha = np.array([0.05, 0.3, 0.6, 0.8, 0.95])
    gamma = np.array([[1], [4]])
    e = expected_tokens(alpha, gamma)
    assert e.shape == (2, 5)
    for i, g in enumerate((1, 4)):
        for j, a in enumerate(alpha):
            assert e[i, j] == expected_tokens(float(a), g)
    c = np.array([0.1, 0.1, 0.1, 0.1, 0.1])
    gammas = optimal_gamma(alpha, c)
    assert gammas.shape == (5,)
    assert gammas.tolist() == [optimal_gamma(float(a), 0.1) for a in alpha]
    assert gammas[0] == 0 and np.all(gammas[1:] >= 1)
    assert walltime_speedup(alpha, 3, c).shape == (5,)
    assert speedup_lower_bound(alpha, 0.1).shape == (5,)
    assert optimal_speedup(alpha, c).shape == (5,)


def test_optimal_gamma_respects_max_gamma():
    assert optimal_gamma(0.99, 0.0, max_gamma=16) == 16
    assert optimal_gamma(0.99, 0.0, max_gamma=3) == 3
    assert optimal_gamma(0.99, 0.0, max_gamma=1) == 1


# --- Properties ---------------------------------------------------------------------------

alphas = st.floats(0.0, 1.0)
costs = st.floats(0.0, 2.0)


@settings(max_examples=300, deadline=None)
@given(alphas, st.integers(0, 100))  # both sides of the Horner / closed-form switch at 64
def test_property_expected_tokens_increasing_and_bounded(a, g):
    e, e_next = expected_tokens(a, g), expected_tokens(a, g + 1)
    assert 1.0 <= e <= g + 1 + 1e-12
    assert e_next >= e - 1e-12
    if a < 1.0:
        assert e <= 1.0 / (1.0 - a) * (1 + 1e-12)


@settings(max_examples=300, deadline=None)
@given(alphas, costs)
def test_property_optimal_gamma_zero_iff_alpha_at_most_c(a, c):
    g = optimal_gamma(a, c)
    assert (g == 0) == (a <= c)
    speedups = walltime_speedup(a, np.arange(1, 17), c)
    if g == 0:
        assert np.all(speedups <= 1.0 + 1e-12)
    else:
        assert speedups[g - 1] == speedups.max()
        assert speedups[g - 1] >= speedup_lower_bound(a, c) - 1e-12  # Corollary 3.9


@settings(max_examples=200, deadline=None)
@given(alphas, st.integers(1, 16), costs)
def test_property_ops_at_least_one(a, g, c_hat):
    assert ops_multiplier(a, g, c_hat) >= 1.0 - 1e-12


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: expected_tokens(1.2, 3), "alpha"),
        (lambda: expected_tokens(np.array([0.5, np.nan]), 3), "alpha"),
        (lambda: expected_tokens(0.5, -1), "gamma"),
        (lambda: expected_tokens(0.5, 2.5), "gamma"),
        (lambda: walltime_speedup(0.5, 2, -0.1), "c"),
        (lambda: ops_multiplier(0.5, 2, np.inf), "c_hat"),
        (lambda: optimal_gamma(0.5, 0.1, max_gamma=0), "max_gamma"),
        (lambda: speedup_lower_bound(-0.1, 0.1), "alpha"),
    ],
)
def test_bad_inputs_are_user_errors(call, field):
    with pytest.raises(UserError, match=f"^{field}:"):
        call()
