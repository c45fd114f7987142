"""Two-state bursty acceptance (lecture §4.5): the i.i.d. formula overestimates."""

from __future__ import annotations

import numpy as np
import pytest

from specdec import expected_tokens
from specdec.errors import UserError
from workloads.acceptance import chain_widths
from workloads.bursty import EASY, HARD, BurstyAcceptance, regime_tape
from workloads.measure import measure_chain


def test_bursty_tokens_per_verify_fall_below_formula_at_measured_alpha():
    # easy 0.95 / hard 0.3, equal mean segments (64 positions), γ = 4
    m = BurstyAcceptance(0.95, 0.3, 64, 64, np.random.default_rng(1))
    r = measure_chain(m, 4, n_streams=2000, n_verifies=400, rng=np.random.default_rng(2))
    formula = float(expected_tokens(r.alpha_hat, 4))
    shortfall = 1 - r.tokens_per_verify / formula
    # lecture: ~5 %; infinite segments give 5.0 % (1 − 2.167/2.281); 800k verifies
    assert 0.03 < shortfall < 0.07
    assert m.mean_alpha == pytest.approx(0.625)  # position-averaged β


def test_iid_limit_has_no_bias():
    # mean segment length 2 = switch with probability ½ each position: i.i.d. regimes
    m = BurstyAcceptance(0.95, 0.3, 2, 2, np.random.default_rng(3))
    r = measure_chain(m, 4, n_streams=2000, n_verifies=200, rng=np.random.default_rng(4))
    assert r.tokens_per_verify == pytest.approx(float(expected_tokens(r.alpha_hat, 4)), rel=0.01)


def test_same_position_same_regime_fresh_draws():
    m = BurstyAcceptance(1.0, 0.0, 50, 50, np.random.default_rng(5))
    streams = m.new_streams(4000, np.random.default_rng(6))
    pos = np.random.default_rng(7).integers(0, 10_000, 4000)
    w = np.broadcast_to(chain_widths(4), (4000, 4))
    a1 = m.accept(streams, pos, w, np.random.default_rng(8))
    a2 = m.accept(streams, pos, w, np.random.default_rng(9))
    # β ∈ {0, 1}: the outcome is fixed by the regimes of positions pos..pos+3
    assert np.array_equal(a1, a2)
    reg = m.regimes(streams, pos, 4)
    expect = np.cumprod(reg == EASY, axis=1).sum(axis=1)
    assert np.array_equal(a1, expect)


def test_exact_expected_tokens_at_random_positions():
    m = BurstyAcceptance(0.9, 0.4, 20, 60, np.random.default_rng(10))
    w = [1, 2, 1, 1]
    exact = m.expected_tokens(w)
    n = 400_000
    streams = m.new_streams(n, np.random.default_rng(11))  # uniform starts on the tape
    a = m.accept(
        streams, np.zeros(n, np.int64), np.broadcast_to(w, (n, 4)), np.random.default_rng(12)
    )
    assert float((a + 1).mean()) == pytest.approx(exact, rel=0.01)
    # a single level at a stationary position: π·β
    assert m.expected_tokens([1]) == pytest.approx(1 + 0.25 * 0.9 + 0.75 * 0.4, abs=1e-14)


def test_regime_tape_statistics():
    tape = regime_tape(30.0, 90.0, 2_000_000, np.random.default_rng(13))
    assert tape.size == 2_000_000
    assert np.mean(tape == EASY) == pytest.approx(0.25, abs=0.02)
    edges = np.flatnonzero(np.diff(tape) != 0)
    lengths = np.diff(edges)
    kinds = tape[edges[1:]]  # regime of each complete segment
    assert lengths[kinds == EASY].mean() == pytest.approx(30.0, rel=0.03)
    assert lengths[kinds == HARD].mean() == pytest.approx(90.0, rel=0.03)


def test_seeded_tape():
    a = BurstyAcceptance(0.9, 0.3, 10, 10, np.random.default_rng(1)).tape
    assert np.array_equal(a, BurstyAcceptance(0.9, 0.3, 10, 10, np.random.default_rng(1)).tape)
    assert not np.array_equal(a, BurstyAcceptance(0.9, 0.3, 10, 10, np.random.default_rng(2)).tape)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"easy_alpha": 1.1}, "easy_alpha"),
        ({"hard_alpha": -0.1}, "hard_alpha"),
        ({"easy_mean_tokens": 0.5}, "easy_mean_tokens"),
        ({"hard_mean_tokens": float("inf")}, "hard_mean_tokens"),
        ({"tape_tokens": 100}, "tape_tokens"),
    ],
)
def test_validation(kwargs, field):
    args = {"easy_alpha": 0.9, "hard_alpha": 0.3, "easy_mean_tokens": 10, "hard_mean_tokens": 10}
    args.update(kwargs)
    with pytest.raises(UserError, match=field):
        BurstyAcceptance(rng=np.random.default_rng(0), **args)


@pytest.mark.parametrize("row", [[1, 1, 1, 1], [3, 1, 2], [20, 1], [1] * 70])
def test_draw_uses_the_same_level_probabilities_as_the_definition(row):
    # draw's lookup tables (and its direct path for shapes beyond them: width 20, depth 70)
    # give exactly coverage(β of the guessed position's regime, k), including the tape's wrap
    from workloads.acceptance import check_widths, draw_leading_run

    m = BurstyAcceptance(0.9, 0.2, 8, 8, np.random.default_rng(5), tape_tokens=1000)
    n = 300
    rng = np.random.default_rng(6)
    streams = rng.integers(0, 1000, n)
    positions = rng.integers(0, 3000, n)
    w = check_widths(np.broadcast_to(np.array(row), (n, len(row))), batch=n)
    level_p = m.width_model.coverage(m.beta[m.regimes(streams, positions, len(row))], w)
    expect = draw_leading_run(level_p, np.random.default_rng(7))
    got = m.draw(streams, positions, w, np.random.default_rng(7))
    assert np.array_equal(got, expect)
    assert np.array_equal(m.accept(streams, positions, w, np.random.default_rng(7)), expect)
