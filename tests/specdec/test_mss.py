"""Multi-step speculative sampling (lecture §6.4, code 04 demo 3): exact by enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specdec.errors import UserError
from specdec.mss import (
    deterministic_acceptance_probability,
    mss_acceptance_probabilities,
    mss_acceptance_probability,
    mss_enumerated_acceptance_probability,
    mss_output_distribution,
    mss_residual_chain,
    mss_sample,
    naive_acceptance_probability,
    naive_sample,
    top_k_candidates,
)
from specdec.sampling import (
    acceptance_probability,
    sample,
    speculative_output_distribution,
    speculative_sample,
)

EXACT = 1e-12
VOCAB = 5


def pairs_v5(
    n: int = 600, conc: float = 1.0, seed: int = 600
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` Dirichlet (p, q) pairs on a 5-token vocabulary, as in code 04 demo 3."""
    rng = np.random.default_rng(seed)
    return [
        (rng.dirichlet(np.full(VOCAB, conc)), rng.dirichlet(np.full(VOCAB, conc))) for _ in range(n)
    ]


PAIRS = pairs_v5()


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_mss_output_is_p_and_beats_naive_on_600_pairs(k):
    for p, q in PAIRS:
        np.testing.assert_allclose(mss_output_distribution(p, q, k), p, rtol=0, atol=EXACT)
        mss = mss_acceptance_probability(p, q, k)
        assert mss == pytest.approx(mss_enumerated_acceptance_probability(p, q, k), abs=EXACT)
        assert mss >= naive_acceptance_probability(p, q, k) - EXACT  # Thm 4.3


def test_mss_output_is_p_on_sparse_and_one_hot_pairs():
    rng = np.random.default_rng(5)
    for _ in range(200):
        p, q = rng.dirichlet(np.ones(VOCAB)), rng.dirichlet(np.ones(VOCAB))
        p[rng.random(VOCAB) < 0.5] = 0.0
        q[rng.random(VOCAB) < 0.5] = 0.0
        p[rng.integers(VOCAB)] += 0.2
        q[rng.integers(VOCAB)] += 0.2
        p, q = p / p.sum(), q / q.sum()
        for k in (1, 2, 3):
            np.testing.assert_allclose(mss_output_distribution(p, q, k), p, rtol=0, atol=EXACT)
    one_hot_p, one_hot_q = np.eye(VOCAB)[1], np.eye(VOCAB)[3]
    np.testing.assert_allclose(
        mss_output_distribution(one_hot_p, one_hot_q, 3), one_hot_p, atol=EXACT
    )


def test_mss_with_one_candidate_is_speculative_sampling():
    for p, q in PAIRS[:100]:
        np.testing.assert_allclose(
            mss_output_distribution(p, q, 1), speculative_output_distribution(p, q), atol=EXACT
        )
        assert mss_acceptance_probability(p, q, 1) == pytest.approx(
            acceptance_probability(p, q), abs=EXACT
        )
    p, q = PAIRS[0]
    for seed in range(200):  # same uniforms, same decisions
        x = sample(q, np.random.default_rng(seed + 10_000))
        j, token = mss_sample(p, q, [x], np.random.default_rng(seed))
        accepted, token2 = speculative_sample(p, q, x, np.random.default_rng(seed))
        assert (j == 0, token) == (accepted, token2)


def test_acceptance_closed_form_and_naive_by_brute_force():
    p, q = PAIRS[1]
    np.testing.assert_allclose(
        mss_acceptance_probabilities(p, q, 4),
        [mss_acceptance_probability(p, q, k) for k in (1, 2, 3, 4)],
    )
    # NS by brute force: average over candidate tuples of the p-mass of the candidate set.
    for k in (1, 2, 3):
        brute = sum(
            np.prod(q[list(xs)]) * p[sorted(set(xs))].sum()
            for xs in itertools.product(range(VOCAB), repeat=k)
        )
        assert naive_acceptance_probability(p, q, k) == pytest.approx(brute, abs=EXACT)
    assert mss_acceptance_probability(p, q, 0) == 0.0
    np.testing.assert_allclose(mss_output_distribution(p, q, 0), p, atol=EXACT)


def test_residual_chain_hand_example():
    # Exercise 1's pair: p_2 = [1, 0, 0]; then p_2 - q = [0.8, -0.5, -0.3] -> p_3 = [1, 0, 0].
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.5, 0.3])
    np.testing.assert_allclose(mss_residual_chain(p, q, 2), [p, [1, 0, 0], [1, 0, 0]], atol=EXACT)
    # beta_1 = 0.6, beta_2 = min([1,0,0], q).sum() = 0.2 -> 1 - 0.4 * 0.8 = 0.68.
    assert mss_acceptance_probability(p, q, 2) == pytest.approx(0.68, abs=EXACT)


def test_monte_carlo_mss_sample_matches_exact():
    rng = np.random.default_rng(44)
    p = np.array([0.5, 0.05, 0.05, 0.3, 0.1])
    q = np.array([0.1, 0.4, 0.2, 0.1, 0.2])
    k, n = 3, 20_000
    counts, accepted = np.zeros(VOCAB), 0
    for _ in range(n):
        j, token = mss_sample(p, q, [sample(q, rng) for _ in range(k)], rng)
        counts[token] += 1
        accepted += j >= 0
    freq, rate, exact = counts / n, accepted / n, mss_acceptance_probability(p, q, k)
    assert abs(rate - exact) <= 4 * np.sqrt(exact * (1 - exact) / n)
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n))


def test_duplicate_candidate_after_a_rejection_is_never_accepted():
    # A rejected x has p_j(x) < q(x), so p_{j+1}(x) = 0: the duplicate draw must be rejected,
    # but it still performs its residual update (the output comes from p_3, not p_2).
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.5, 0.3])
    rng = np.random.default_rng(1)
    results = [mss_sample(p, q, [1, 1], rng) for _ in range(2000)]
    assert {j for j, _ in results} == {0, -1}
    assert all(token == 0 for j, token in results if j == -1)  # p_3 = [1, 0, 0]


def test_deterministic_candidates_done_right_degenerate_to_naive():
    p = np.array([0.5, 0.05, 0.05, 0.3, 0.1])
    assert deterministic_acceptance_probability(p, [1, 2]) == pytest.approx(0.1)
    assert deterministic_acceptance_probability(p, [0, 3, 0]) == pytest.approx(0.8)
    rng = np.random.default_rng(2)
    n = 20_000
    results = [naive_sample(p, [1, 2], rng) for _ in range(n)]
    freq = np.bincount([t for _, t in results], minlength=VOCAB) / n
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n))
    rate = np.mean([j >= 0 for j, _ in results])
    assert abs(rate - 0.1) <= 4 * np.sqrt(0.09 / n)
    assert all((j == -1) == (t not in (1, 2)) for j, t in results)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=VOCAB, max_size=VOCAB),
    st.lists(st.floats(0.0, 1.0), min_size=VOCAB, max_size=VOCAB),
    st.integers(1, 3),
)
def test_property_mss_exact_and_at_least_naive(a, b, k):
    p, q = np.array(a), np.array(b)
    assume(p.sum() > 1e-6 and q.sum() > 1e-6)  # exact zeros allowed, all-zero skipped
    p, q = p / p.sum(), q / q.sum()
    np.testing.assert_allclose(mss_output_distribution(p, q, k), p, rtol=0, atol=EXACT)
    assert mss_acceptance_probability(p, q, k) >= naive_acceptance_probability(p, q, k) - EXACT
    acc = mss_acceptance_probabilities(p, q, 4)
    assert np.all(np.diff(acc) >= -EXACT)  # more candidates never hurt


def test_bad_inputs_are_user_errors():
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.5, 0.5, 0.0])
    rng = np.random.default_rng(0)
    with pytest.raises(UserError, match="candidates: token 2 has q = 0"):
        mss_sample(p, q, [0, 2], rng)
    with pytest.raises(UserError, match="candidates: token id"):
        mss_sample(p, q, [3], rng)
    with pytest.raises(UserError, match="candidates: must be integer"):
        mss_sample(p, q, [0.5], rng)
    with pytest.raises(UserError, match="k: must be an integer"):
        mss_acceptance_probability(p, q, -1)
    with pytest.raises(UserError, match="k: 3 exceeds"):
        top_k_candidates(q, 3)
    with pytest.raises(UserError, match="k: enumerating"):
        mss_output_distribution(np.full(100, 0.01), np.full(100, 0.01), 4)
