"""i.i.d. and per-position acceptance: exact expectations, measured means, validation."""

from __future__ import annotations

import numpy as np
import pytest

from specdec import expected_tokens
from specdec.errors import UserError
from workloads.acceptance import (
    IIDAcceptance,
    PositionalAcceptance,
    chain_widths,
    check_widths,
    depths,
)
from workloads.coverage import CoverageTable, PowerCoverage


def _mean_tokens(model, widths_row, n, seed):
    w = np.broadcast_to(np.asarray(widths_row, dtype=np.int64), (n, len(widths_row)))
    streams = model.new_streams(n, np.random.default_rng(seed))
    a = model.accept(streams, np.zeros(n, dtype=np.int64), w, np.random.default_rng(seed + 1))
    return float((a + 1).mean())


@pytest.mark.parametrize(("alpha", "gamma"), [(0.6, 4), (0.8, 5), (0.39, 8), (0.95, 3)])
def test_iid_chain_matches_formula_within_1_percent(alpha, gamma):
    m = IIDAcceptance(alpha)
    assert m.expected_tokens(chain_widths(gamma)) == pytest.approx(
        float(expected_tokens(alpha, gamma)), rel=1e-12
    )
    # 400k verifies: the SE of the mean is < 0.2 % for these settings
    measured = _mean_tokens(m, chain_widths(gamma), 400_000, seed=gamma)
    assert measured == pytest.approx(float(expected_tokens(alpha, gamma)), rel=0.01)


def test_iid_tree_expected_is_level_product_and_measured():
    m = IIDAcceptance(0.6, PowerCoverage(1.0))
    widths = [2, 2, 1]
    c2 = 1 - 0.4**2
    exact = 1 + c2 + c2 * c2 + c2 * c2 * 0.6
    assert m.expected_tokens(widths) == pytest.approx(exact, rel=1e-14)
    assert _mean_tokens(m, widths, 400_000, seed=3) == pytest.approx(exact, rel=0.01)


def test_positional_conditional_rates_exact():
    m = PositionalAcceptance([0.9, 0.8, 0.6])
    assert m.expected_tokens(chain_widths(3)) == pytest.approx(1 + 0.9 + 0.72 + 0.432, abs=1e-14)
    # guesses past the table reuse the last rate
    assert m.expected_tokens(chain_widths(4)) == pytest.approx(
        1 + 0.9 + 0.72 + 0.432 + 0.432 * 0.6, abs=1e-14
    )
    assert _mean_tokens(m, chain_widths(3), 400_000, seed=5) == pytest.approx(3.052, rel=0.01)


def test_marginals_converted_to_conditionals():
    m = PositionalAcceptance.from_marginals([0.8, 0.6, 0.3, 0.0])
    assert np.allclose(m.rates, [0.8, 0.75, 0.5, 0.0], atol=1e-15)
    # E[accepted] = Σ P(guess i accepted) = Σ marginals, exactly
    assert m.expected_tokens(chain_widths(4)) == pytest.approx(1 + 0.8 + 0.6 + 0.3, abs=1e-14)
    assert _mean_tokens(m, chain_widths(4), 400_000, seed=6) == pytest.approx(2.7, rel=0.01)
    with pytest.raises(UserError, match=r"marginals\[2\]: must be <= marginals\[1\]"):
        PositionalAcceptance.from_marginals([0.8, 0.5, 0.6])


def test_mean_alpha_of_positional_is_equivalent_iid():
    m = PositionalAcceptance([0.9, 0.8, 0.6])
    iid = IIDAcceptance(m.mean_alpha)
    assert iid.expected_tokens(chain_widths(3)) == pytest.approx(3.052, abs=1e-10)


def test_depth_zero_rows_and_padding():
    m = IIDAcceptance(1.0)
    w = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 1], [3, 2, 0]])
    a = m.accept(np.zeros(4, np.int64), np.zeros(4, np.int64), w, np.random.default_rng(0))
    assert a.tolist() == [0, 1, 3, 2]
    assert depths(w).tolist() == [0, 1, 3, 2]


def test_chain_widths():
    assert chain_widths(3).tolist() == [1, 1, 1]
    assert chain_widths(np.array([2, 0, 3])).tolist() == [[1, 1, 0], [0, 0, 0], [1, 1, 1]]


def test_coverage_models():
    a = np.array([0.3, 0.6])
    assert np.allclose(PowerCoverage(1.0).coverage(a, np.array([3, 3])), 1 - (1 - a) ** 3)
    assert np.allclose(PowerCoverage(0.5).coverage(a, np.array([4, 1])), [1 - 0.7**2, 0.6])
    assert PowerCoverage(0.5).coverage(np.array([0.5]), np.array([0])).tolist() == [0.0]
    t = CoverageTable([0.62, 0.75, 0.82, 0.86, 0.89])
    # at the reference α the table is reproduced exactly
    assert np.allclose(t.coverage(np.full(5, 0.62), np.arange(1, 6)), t.table)
    with pytest.raises(UserError, match="width 6"):
        t.coverage(np.array([0.5]), np.array([6]))


def test_same_seed_same_draws():
    m = IIDAcceptance(0.7)
    w = np.broadcast_to(chain_widths(4), (1000, 4))
    z = np.zeros(1000, np.int64)
    a = m.accept(z, z, w, np.random.default_rng(1))
    assert np.array_equal(a, m.accept(z, z, w, np.random.default_rng(1)))
    assert not np.array_equal(a, m.accept(z, z, w, np.random.default_rng(2)))


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: IIDAcceptance(1.5), "alpha"),
        (lambda: IIDAcceptance(float("nan")), "alpha"),
        (lambda: IIDAcceptance("x"), "alpha"),
        (lambda: PositionalAcceptance([]), "rates"),
        (lambda: PositionalAcceptance([0.5, -0.1]), r"rates\[1\]"),
        (lambda: PositionalAcceptance.from_marginals([1.2]), r"marginals\[0\]"),
        (lambda: PowerCoverage(-1), "theta"),
        (lambda: CoverageTable([0.5, 0.4]), "non-decreasing"),
        (lambda: check_widths(np.array([[1, 0, 1]])), "widths"),
        (lambda: check_widths(np.array([[1, -1]])), "widths: must be >= 0"),
        (lambda: check_widths(np.array([[1, 1]]), batch=2), "2"),
        (lambda: chain_widths(-1), "gamma"),
    ],
)
def test_validation(build, field):
    with pytest.raises(UserError, match=field) as info:
        build()
    assert "\n" not in str(info.value)
