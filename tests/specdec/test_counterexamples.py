"""The wrong and the worse variants (lecture §2.6, appendix A.2, §6.4) are shown to be so."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.counterexamples import (
    one_round_rejection_acceptance_probability,
    one_round_rejection_bound,
    one_round_rejection_output_distribution,
    one_round_rejection_sample,
    wrong_resample_from_p_output_distribution,
    wrong_resample_from_p_sample,
    wrong_topk_ratio_output_distribution,
    wrong_topk_ratio_sample,
)
from specdec.mss import top_k_candidates
from specdec.sampling import (
    acceptance_probability,
    sample,
    speculative_output_distribution,
    total_variation,
)

from .test_mss import VOCAB, pairs_v5
from .test_sampling import EXACT, PAIRS, _empirical

# --- One token (lecture §2.6, appendix A.2) ----------------------------------------------


def test_resample_from_p_is_biased():
    # Lecture §2.6 error A: mean TV about 0.15 on 500 random pairs; here Dirichlet(1), V = 10.
    rng = np.random.default_rng(500)
    pairs = [(rng.dirichlet(np.ones(10)), rng.dirichlet(np.ones(10))) for _ in range(500)]
    tvs = np.array(
        [total_variation(wrong_resample_from_p_output_distribution(p, q), p) for p, q in pairs]
    )
    assert tvs.mean() > 0.10  # measured 0.154 with this seed
    assert np.all(tvs > 1e-3)
    # ...while the correct rule is exact on the same pairs.
    assert max(np.abs(speculative_output_distribution(p, q) - p).max() for p, q in pairs) <= EXACT


def test_resample_from_p_sampler_matches_its_exact_distribution():
    rng = np.random.default_rng(8)
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.5, 0.3])
    wrong = wrong_resample_from_p_output_distribution(p, q)
    np.testing.assert_allclose(wrong, [0.44, 0.42, 0.14], atol=EXACT)  # min(p,q) + 0.4 p
    n = 20_000
    freq, _ = _empirical(lambda: wrong_resample_from_p_sample(p, q, sample(q, rng), rng), 3, n)
    assert np.all(np.abs(freq - wrong) <= 4 * np.sqrt(wrong * (1 - wrong) / n))
    assert abs(freq[0] - p[0]) > 0.1  # far outside the noise: the bias is visible


def test_one_round_rejection_is_exact_but_accepts_less():
    for p, q in PAIRS:
        np.testing.assert_allclose(one_round_rejection_output_distribution(p, q), p, atol=EXACT)
        assert (
            one_round_rejection_acceptance_probability(p, q) <= acceptance_probability(p, q) + EXACT
        )
    gaps = [
        acceptance_probability(p, q) - one_round_rejection_acceptance_probability(p, q)
        for p, q in PAIRS
    ]
    assert np.mean(gaps) > 0.1


def test_one_round_rejection_hand_example_and_monte_carlo():
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.5, 0.3])
    assert one_round_rejection_bound(p, q) == pytest.approx(3.0)  # max p/q = 0.6 / 0.2
    assert one_round_rejection_acceptance_probability(p, q) == pytest.approx(1 / 3)  # < β = 0.6
    rng = np.random.default_rng(9)
    n = 20_000
    freq, rate = _empirical(lambda: one_round_rejection_sample(p, q, sample(q, rng), rng), 3, n)
    assert abs(rate - 1 / 3) <= 4 * np.sqrt(2 / 9 / n)
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n))
    # A draft that misses part of p's support has M = inf: never accepts, still exact.
    p2, q2 = np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.5, 0.5])
    assert one_round_rejection_acceptance_probability(p2, q2) == 0.0
    np.testing.assert_allclose(one_round_rejection_output_distribution(p2, q2), p2, atol=EXACT)


# --- Deterministic top-k candidates at a tree node (lecture §6.4) -------------------------


def test_deterministic_top_k_with_ratio_rule_is_biased():
    # Lecture §6.4 reports mean TV 0.24-0.34; here Dirichlet(0.3) on 5 tokens, 600 pairs.
    pairs = pairs_v5(conc=0.3, seed=34)
    means = {
        k: np.mean(
            [total_variation(wrong_topk_ratio_output_distribution(p, q, k), p) for p, q in pairs]
        )
        for k in (2, 3, 4)
    }
    assert all(m > 0.15 for m in means.values()), means  # measured 0.227, 0.316, 0.356


def test_wrong_top_k_sampler_matches_its_exact_distribution():
    rng = np.random.default_rng(12)
    p, q = np.array([0.5, 0.05, 0.05, 0.3, 0.1]), np.array([0.1, 0.4, 0.2, 0.1, 0.2])
    assert top_k_candidates(q, 2) == [1, 2]
    wrong = wrong_topk_ratio_output_distribution(p, q, 2)
    n = 20_000
    draws = np.array([wrong_topk_ratio_sample(p, q, 2, rng)[1] for _ in range(n)])
    freq = np.bincount(draws, minlength=VOCAB) / n
    assert np.all(np.abs(freq - wrong) <= 1e-12 + 4 * np.sqrt(wrong * (1 - wrong) / n))
    assert total_variation(wrong, p) > 0.05
