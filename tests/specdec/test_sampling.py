"""Speculative sampling (lecture §2, code 01): exact output, acceptance, wrong variants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specdec.errors import UserError
from specdec.sampling import (
    acceptance_probability,
    lenient_acceptance_probability,
    probs_from_logits,
    residual_distribution,
    sample,
    speculative_output_distribution,
    speculative_sample,
    total_variation,
)

EXACT = 1e-12


def random_pairs(seed: int = 2024) -> list[tuple[np.ndarray, np.ndarray]]:
    """1,200 (p, q) pairs: Dirichlet over several vocab sizes and concentrations, plus
    sparse pairs (most entries exactly 0), one-hot pairs (greedy) and p == q."""
    rng = np.random.default_rng(seed)
    pairs = []
    for vocab in (2, 3, 5, 10, 50, 1000):
        for conc in (0.1, 1.0, 10.0):
            for _ in range(50):
                pairs.append(
                    (rng.dirichlet(np.full(vocab, conc)), rng.dirichlet(np.full(vocab, conc)))
                )
    for _ in range(150):  # sparse: each model puts mass on a random subset
        vocab = int(rng.integers(2, 30))
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        p[rng.random(vocab) < 0.6] = 0.0
        q[rng.random(vocab) < 0.6] = 0.0
        p[rng.integers(vocab)] += 0.1  # keep at least one positive entry
        q[rng.integers(vocab)] += 0.1
        pairs.append((p / p.sum(), q / q.sum()))
    for _ in range(100):  # greedy: both one-hot, same or different argmax
        vocab = int(rng.integers(2, 8))
        pairs.append((np.eye(vocab)[rng.integers(vocab)], np.eye(vocab)[rng.integers(vocab)]))
    for _ in range(50):
        p = rng.dirichlet(np.ones(7))
        pairs.append((p, p.copy()))
    return pairs


PAIRS = random_pairs()


# --- The hand-checked examples ------------------------------------------------------------


def test_code01_demo1_four_token_example():
    p = np.array([0.4, 0.3, 0.2, 0.1])  # target, tokens A B C D
    q = np.array([0.2, 0.5, 0.15, 0.15])  # draft: likes B best
    assert acceptance_probability(p, q) == pytest.approx(0.75, abs=EXACT)
    assert min(1.0, p[1] / q[1]) == pytest.approx(0.6, abs=EXACT)  # B accepted w.p. 0.6
    excess = np.maximum(p - q, 0.0)
    np.testing.assert_allclose(excess, [0.20, 0.0, 0.05, 0.0], atol=EXACT)  # A : C = .20 : .05
    np.testing.assert_allclose(residual_distribution(p, q), [0.8, 0.0, 0.2, 0.0], atol=EXACT)
    np.testing.assert_allclose(speculative_output_distribution(p, q), p, rtol=0, atol=EXACT)


def test_exercise1():
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.5, 0.3])
    assert acceptance_probability(p, q) == pytest.approx(0.6, abs=EXACT)
    np.testing.assert_allclose(residual_distribution(p, q), [1.0, 0.0, 0.0], atol=EXACT)
    np.testing.assert_allclose(speculative_output_distribution(p, q), p, rtol=0, atol=EXACT)


def test_residual_of_identical_distributions_is_p():
    p = np.array([0.5, 0.25, 0.25])
    np.testing.assert_array_equal(residual_distribution(p, p), p)
    assert acceptance_probability(p, p) == 1.0


# --- Exactness on many random pairs --------------------------------------------------------


def test_output_equals_p_on_1200_random_pairs():
    assert len(PAIRS) >= 1000
    worst = max(np.max(np.abs(speculative_output_distribution(p, q) - p)) for p, q in PAIRS)
    assert worst <= EXACT


def test_acceptance_is_one_minus_total_variation():
    for p, q in PAIRS:
        assert acceptance_probability(p, q) == pytest.approx(1 - total_variation(p, q), abs=EXACT)


def test_greedy_is_the_one_hot_special_case():
    # One-hot p and q: accepted iff the argmaxes agree; on rejection the residual is p.
    p, q = np.eye(4)[2], np.eye(4)[1]
    assert acceptance_probability(p, q) == 0.0
    np.testing.assert_array_equal(residual_distribution(p, q), p)
    assert speculative_sample(p, q, 1, np.random.default_rng(0)) == (False, 2)
    assert speculative_sample(p, p, 2, np.random.default_rng(0)) == (True, 2)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12).flatmap(
        lambda a: st.tuples(
            st.just(a), st.lists(st.floats(0.0, 1.0), min_size=len(a), max_size=len(a))
        )
    )
)
def test_property_output_is_p_for_any_pair(raw):
    # Exact zeros (sparse and one-hot pairs) are allowed; only all-zero vectors are skipped.
    a, b = np.array(raw[0]), np.array(raw[1])
    assume(a.sum() > 1e-6 and b.sum() > 1e-6)
    p, q = a / a.sum(), b / b.sum()
    np.testing.assert_allclose(speculative_output_distribution(p, q), p, rtol=0, atol=EXACT)
    assert 0.0 <= acceptance_probability(p, q) <= 1.0 + EXACT


class ScriptedUniforms:
    """Stands in for a Generator: ``random()`` returns the given values in order."""

    def __init__(self, *values: float):
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


@pytest.mark.parametrize("lenience", [1.0, 0.5])
def test_the_sampler_realises_the_exact_output_formula(lenience):
    # speculative_sample, driven by chosen uniforms: the draft token x is accepted exactly
    # for u < p(x)/(l q(x)), and a rejection inverts the residual's CDF with the next
    # uniform. Weighting those measures by q(x) is the formula speculative_output_distribution
    # evaluates, so the sampler's exact output distribution is that formula (= p at l = 1).
    checked = 0
    for p, q in PAIRS[:300] + PAIRS[-300:]:
        residual = residual_distribution(p, q)
        cdf = np.cumsum(residual)
        mids = cdf - residual / 2  # one uniform inside each token's CDF step
        out = np.zeros_like(p)
        for x in np.flatnonzero(q > 0):
            t = p[x] / (lenience * q[x])  # acceptance threshold on u
            if t > 0:
                assert speculative_sample(p, q, int(x), ScriptedUniforms(min(t, 1) * (1 - 1e-9)),
                                          lenience) == (True, x)
            if t < 1:
                for y in np.flatnonzero(residual > 1e-9):
                    rng = ScriptedUniforms(t * (1 + 1e-9), mids[y])
                    assert speculative_sample(p, q, int(x), rng, lenience) == (False, y)
                    checked += 1
            accept = min(t, 1.0)
            out[x] += q[x] * accept
            out += q[x] * (1 - accept) * residual
        np.testing.assert_allclose(out, speculative_output_distribution(p, q, lenience),
                                   rtol=0, atol=EXACT)
        if lenience == 1.0:
            np.testing.assert_allclose(out, p, rtol=0, atol=EXACT)
    assert checked > 1000


# --- Monte Carlo --------------------------------------------------------------------------


def _empirical(draw, vocab: int, n: int) -> tuple[np.ndarray, float]:
    counts, accepted = np.zeros(vocab), 0
    for _ in range(n):
        ok, token = draw()
        counts[token] += 1
        accepted += ok
    return counts / n, accepted / n


def test_monte_carlo_matches_acceptance_and_p():
    # 20,000 draws: 4 binomial standard deviations is the tolerance, token by token.
    rng = np.random.default_rng(7)
    p = np.array([0.05, 0.4, 0.05, 0.3, 0.2])
    q = np.array([0.3, 0.1, 0.3, 0.1, 0.2])
    n = 20_000
    freq, rate = _empirical(lambda: speculative_sample(p, q, sample(q, rng), rng), p.size, n)
    beta = acceptance_probability(p, q)  # 0.45
    assert abs(rate - beta) <= 4 * np.sqrt(beta * (1 - beta) / n)
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n))


def test_sample_never_draws_zero_mass_and_follows_p():
    rng = np.random.default_rng(3)
    p = np.array([0.0, 0.25, 0.0, 0.75, 0.0])
    draws = np.array([sample(p, rng) for _ in range(10_000)])
    assert set(np.unique(draws)) == {1, 3}
    assert abs(np.mean(draws == 3) - 0.75) <= 4 * np.sqrt(0.75 * 0.25 / 10_000)
    a = [sample(p, np.random.default_rng(11)) for _ in range(3)]
    assert a == [sample(p, np.random.default_rng(11))] * 3  # deterministic given the seed


# --- The lenient variant (appendix A.5) ---------------------------------------------------


@pytest.mark.parametrize("lenience", [0.05, 0.1, 0.3, 0.5, 0.9])
def test_lenient_output_never_exceeds_p_over_l(lenience):
    biased = 0
    for p, q in PAIRS:
        out = speculative_output_distribution(p, q, lenience)
        assert out.sum() == pytest.approx(1.0, abs=EXACT)
        assert np.all(out >= -EXACT)
        assert np.all(out <= p / lenience + EXACT)
        assert (
            lenient_acceptance_probability(p, q, lenience) >= acceptance_probability(p, q) - EXACT
        )
        biased += total_variation(out, p) > 1e-6
    assert biased > len(PAIRS) // 2  # lossy: l < 1 really changes the output


def test_lenient_monte_carlo_matches_exact():
    rng = np.random.default_rng(10)
    p, q = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.2, 0.5, 0.15, 0.15])
    exact = speculative_output_distribution(p, q, 0.5)
    n = 20_000
    freq, rate = _empirical(
        lambda: speculative_sample(p, q, sample(q, rng), rng, lenience=0.5), 4, n
    )
    beta_l = lenient_acceptance_probability(p, q, 0.5)
    assert beta_l == pytest.approx(0.2 + 0.5 + 0.15 + 0.15)  # min(q, 2p) = q here
    assert abs(rate - beta_l) <= 1e-12 + 4 * np.sqrt(beta_l * (1 - beta_l) / n)
    assert np.all(np.abs(freq - exact) <= 1e-12 + 4 * np.sqrt(exact * (1 - exact) / n))
    np.testing.assert_allclose(speculative_output_distribution(p, q, 1.0), p, atol=EXACT)


# --- probs_from_logits --------------------------------------------------------------------


def test_probs_from_logits_temperature_softmax_and_leading_shape():
    logits = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, np.log(2.0)]])
    probs = probs_from_logits(logits, temperature=1.0)
    np.testing.assert_allclose(probs[1], [0.25, 0.25, 0.5], atol=EXACT)
    np.testing.assert_allclose(probs[0], np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum(), atol=EXACT)
    hot = probs_from_logits(logits, temperature=0.5)
    np.testing.assert_allclose(hot[1], [1 / 6, 1 / 6, 4 / 6], atol=EXACT)  # (e^{2 ln 2}) = 4
    assert probs_from_logits(np.zeros((2, 3, 5))).shape == (2, 3, 5)


def test_probs_from_logits_greedy_ties_to_first_index():
    np.testing.assert_array_equal(
        probs_from_logits([1.0, 3.0, 3.0, 2.0], temperature=0), [0, 1, 0, 0]
    )
    np.testing.assert_array_equal(
        probs_from_logits([[5.0, 1.0], [1.0, 5.0]], temperature=0.0, top_k=1, top_p=0.1),
        [[1, 0], [0, 1]],
    )


def test_probs_from_logits_top_k_and_top_p():
    logits = np.log([0.1, 0.4, 0.2, 0.3])
    np.testing.assert_allclose(probs_from_logits(logits, top_k=2), [0, 4 / 7, 0, 3 / 7], atol=EXACT)
    np.testing.assert_allclose(
        probs_from_logits(logits, top_k=10), [0.1, 0.4, 0.2, 0.3], atol=EXACT
    )
    # Nucleus: 0.4 < 0.7 <= 0.4 + 0.3, so {B, D}; exactly reaching top_p stops there.
    np.testing.assert_allclose(
        probs_from_logits(logits, top_p=0.7), [0, 4 / 7, 0, 3 / 7], atol=EXACT
    )
    np.testing.assert_allclose(
        probs_from_logits(logits, top_p=0.71), [0, 4 / 9, 2 / 9, 3 / 9], atol=EXACT
    )
    np.testing.assert_allclose(probs_from_logits(logits, top_p=0.01), [0, 1, 0, 0], atol=EXACT)
    # top-k first, then top-p on the renormalised survivors: {B, D} -> 4/7 >= 0.5 keeps B.
    np.testing.assert_allclose(
        probs_from_logits(logits, top_k=2, top_p=0.5), [0, 1, 0, 0], atol=EXACT
    )
    # Ties in top-k go to the lower index.
    np.testing.assert_allclose(
        probs_from_logits([0.0, 0.0, 0.0], top_k=2), [0.5, 0.5, 0], atol=EXACT
    )


def test_probs_from_logits_tiny_temperature_tends_to_greedy():
    # logits / 1e-310 would overflow to inf - inf = NaN; shifting first keeps it exact.
    tiny = probs_from_logits([1.0, 2.0, 2.0], temperature=1e-310)
    np.testing.assert_array_equal(tiny, [0, 0.5, 0.5])
    np.testing.assert_array_equal(probs_from_logits([1.0, 3.0, 2.0], temperature=1e-3), [0, 1, 0])


def test_probs_from_logits_masks_minus_inf():
    np.testing.assert_allclose(probs_from_logits([0.0, -np.inf, 0.0]), [0.5, 0, 0.5], atol=EXACT)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_probs_from_logits_rejects_bad_arguments(kwargs, field):
    with pytest.raises(UserError, match=field):
        probs_from_logits([1.0, 2.0], **kwargs)


@pytest.mark.parametrize("logits", [[1.0, np.nan], [np.inf, 0.0], [-np.inf, -np.inf], []])
def test_probs_from_logits_rejects_bad_logits(logits):
    with pytest.raises(UserError, match="logits"):
        probs_from_logits(logits)


def test_bad_distributions_and_tokens_are_user_errors():
    p, q = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    rng = np.random.default_rng(0)
    with pytest.raises(UserError, match="x: token 1 has draft probability 0"):
        speculative_sample(p, q, 1, rng)
    with pytest.raises(UserError, match="x: token id"):
        speculative_sample(p, q, 2, rng)
    with pytest.raises(UserError, match="lenience"):
        speculative_sample(p, q, 0, rng, lenience=0.0)
    with pytest.raises(UserError, match="p: must sum to 1"):
        sample([0.5, 0.6], rng)
    with pytest.raises(UserError, match="p: entries"):
        acceptance_probability([1.5, -0.5], q)
    with pytest.raises(UserError, match="vocabulary size"):
        acceptance_probability([1.0], q)
