"""Speculative decoding (Algorithm 1): greedy equality, KV invariant, E(α, γ), distributions."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.analysis import expected_tokens
from specdec.decoding import autoregressive_decode, speculative_decode
from specdec.drafts import make_drafter, perturbed_copy
from specdec.errors import UserError
from specdec.sampling import probs_from_logits

from .conftest import N_NEW

# The lecture's setting (§3.3): three prompts, 120 tokens each, greedy.
DRAFTS = [
    ("perturbed", dict(sigma=0.1)),
    ("perturbed", dict(sigma=0.3)),
    ("truncated", dict(layers=1)),
    ("uniform", {}),
    ("ngram", dict(ngram=3)),
]


@pytest.mark.parametrize("kind,kwargs", DRAFTS)
@pytest.mark.parametrize("gamma", [1, 2, 4, 7])
def test_greedy_equals_target_greedy(target, prompts, greedy_refs, kind, kwargs, gamma):
    for prompt, ref in zip(prompts, greedy_refs, strict=True):
        res = speculative_decode(target, make_drafter(kind, target, seed=5, **kwargs), prompt,
                                 N_NEW, gamma)
        assert res.tokens == ref
        assert res.target_calls <= N_NEW  # never more than plain decoding
        assert res.draft_calls == gamma * res.target_calls


def test_target_calls_drop_as_the_draft_improves(target, prompts):
    calls = {}
    for name, kind, kwargs in [("s0.1", "perturbed", dict(sigma=0.1)),
                               ("s0.3", "perturbed", dict(sigma=0.3)),
                               ("uniform", "uniform", {})]:
        calls[name] = sum(
            speculative_decode(target, make_drafter(kind, target, seed=5, **kwargs), p, N_NEW,
                               4).target_calls
            for p in prompts
        )
    # Measured: 98 < 192 < 359 of 360 plain calls (lecture: sigma 0.1 takes 360 -> 122).
    assert calls["s0.1"] < calls["s0.3"] < calls["uniform"] <= 3 * N_NEW


@pytest.mark.parametrize("kind,kwargs", DRAFTS)
def test_kv_cache_lengths_obey_the_invariant(target, prompts, kind, kwargs):
    gamma, prompt = 4, prompts[0]
    res = speculative_decode(target, make_drafter(kind, target, seed=5, **kwargs), prompt,
                             N_NEW, gamma)
    prev_after, prev_draft = len(prompt) - 1, len(prompt) - 1
    for it in res.iterations:
        # Between iterations the target holds everything but the last token.
        assert it.target_before == prev_after == len(prompt) - 1 + it.position
        assert it.draft_before == prev_draft
        assert it.target_verify == it.target_before + gamma + 1  # [last] + γ guesses
        assert it.target_after == it.target_before + it.accepted + 1  # net growth n + 1
        # The draft has not seen its own last guess: it owes it after a full accept.
        assert it.pending == (1 if it.accepted == gamma else 0)
        assert it.draft_after == it.target_after - it.pending
        prev_after, prev_draft = it.target_after, it.draft_after
    assert any(it.accepted == gamma for it in res.iterations) or kind == "uniform"


def test_tokens_per_verify_matches_expected_tokens_formula(target):
    # Lecture §4.1: the sigma 0.3 sweep matched E(α̂, γ) closely. Measured here over 6
    # prompts x 150 tokens: α̂ ≈ 0.42-0.45 and every ratio within 1.1% of 1; loops in the
    # random model's text make acceptance mildly bursty (§4.5), so we allow 4%.
    rng = np.random.default_rng(1)
    prompts = [list(rng.integers(0, 48, 16)) for _ in range(6)]
    for gamma in (1, 2, 4, 8):
        emitted = iterations = accepted = checked = 0
        for p in prompts:
            res = speculative_decode(target, make_drafter("perturbed", target, sigma=0.3, seed=5),
                                     p, 150, gamma)
            emitted += sum(it.emitted for it in res.iterations)
            iterations += len(res.iterations)
            accepted += sum(it.accepted for it in res.iterations)
            checked += sum(min(gamma, it.accepted + 1) for it in res.iterations)
        alpha_hat = accepted / checked
        assert 0.3 < alpha_hat < 0.55
        measured = emitted / iterations
        assert measured == pytest.approx(float(expected_tokens(alpha_hat, gamma)), rel=0.04)


def exact_two_token_joint(model, prompt, temperature) -> np.ndarray:
    """P(x1, x2 | prompt) by enumerating x1 through the model, [vocab, vocab]."""
    cache = model.new_cache()
    p1 = probs_from_logits(model.forward(prompt, cache), temperature)
    joint = np.zeros((model.config.vocab, model.config.vocab))
    for x1 in range(model.config.vocab):
        cache.truncate(len(prompt))
        joint[x1] = p1[x1] * probs_from_logits(model.forward([x1], cache), temperature)
    return joint


def plain_noise_level(joint: np.ndarray, n: int, rng) -> float:
    """Mean TV(empirical, exact) of n plain samples, over 100 replicates.

    Plain ancestral sampling from the target draws exactly from ``joint``, so multinomial
    draws from it are plain sampling's empirical distributions.
    """
    flat = joint.ravel()
    return float(np.mean([0.5 * np.abs(rng.multinomial(n, flat) / n - flat).sum()
                          for _ in range(100)]))


# The two-token joint setting. At T = 1 our target's logits are wide enough (LOGIT_STD)
# that the joint has an effective support of ~16 cells (~6 at T = 0.7), so TV with 2000
# samples concentrates (sd ≈ 8% of its mean ≈ 0.1). The tolerance, 1.25x plain sampling's
# mean TV + 0.005, is > 3 sd above a correct sampler's mean, while a sampler emitting the
# draft's own distribution is off by far more (checked below). T = 0.7 also catches a p
# or q left at T = 1 (the T = 1 joint is 0.27 away in TV; the tolerance there is 0.067).
JOINT_PROMPT, JOINT_N = [3, 17, 5, 40], 2000


def joint_tv_and_tolerance(target, decode, seed: int, temperature: float) -> tuple[float, float]:
    """Run ``decode(rng) -> 2 tokens`` JOINT_N times; TV of the counts from the exact joint,
    and the tolerance (from plain sampling's noise level with the same sample count)."""
    joint = exact_two_token_joint(target, JOINT_PROMPT, temperature)
    rng = np.random.default_rng(seed)
    counts = np.zeros_like(joint)
    for _ in range(JOINT_N):
        first, second = decode(rng)
        counts[first, second] += 1
    tv = 0.5 * np.abs(counts / JOINT_N - joint).sum()
    return tv, 1.25 * plain_noise_level(joint, JOINT_N, np.random.default_rng(8)) + 0.005


@pytest.mark.parametrize(("gamma", "temperature"), [(1, 1.0), (3, 0.7)])
def test_sampling_preserves_the_two_token_joint(target, gamma, temperature):
    # The second token takes every path of step 4: with γ = 1 it is the free token from
    # p_{γ+1} whenever x_1 is accepted (a greedy argmax there fails this test); with γ = 3
    # it is an accepted guess or a residual draw at i = 2.
    drafter = make_drafter("perturbed", target, sigma=0.3, seed=5)
    tv, tolerance = joint_tv_and_tolerance(
        target,
        lambda rng: speculative_decode(target, drafter, JOINT_PROMPT, 2, gamma, temperature,
                                       rng).tokens,
        seed=7,
        temperature=temperature,
    )
    assert tv <= tolerance
    joint = exact_two_token_joint(target, JOINT_PROMPT, temperature)
    draft_joint = exact_two_token_joint(perturbed_copy(target, 0.3, 5), JOINT_PROMPT,
                                        temperature)
    assert 0.5 * np.abs(draft_joint - joint).sum() > tolerance + 0.045


def test_sampling_is_deterministic_given_the_seed(target):
    d = make_drafter("perturbed", target, sigma=0.3, seed=5)
    a = speculative_decode(target, d, [1, 2, 3], 30, 3, 0.7, np.random.default_rng(3)).tokens
    b = speculative_decode(target, d, [1, 2, 3], 30, 3, 0.7, np.random.default_rng(3)).tokens
    assert a == b and len(a) == 30


def test_bad_arguments_are_user_errors(target):
    d = make_drafter("uniform", target)
    cases = [
        (lambda: speculative_decode(target, d, [1], 10, 0), "gamma"),
        (lambda: speculative_decode(target, d, [1], 10, 2.5), "gamma"),
        (lambda: speculative_decode(target, d, [1], 10, 2, temperature=0.5), "rng"),
        (lambda: speculative_decode(target, d, [1], 10, 2, temperature=-1.0), "temperature"),
        (lambda: speculative_decode(target, d, [1, 48], 10, 2), "prompt"),
        (lambda: speculative_decode(target, d, [1], 0, 2), "max_new_tokens"),
        (lambda: autoregressive_decode(target, [], 10), "prompt"),
        (lambda: autoregressive_decode(target, [1], 10.0), "max_new_tokens"),
    ]
    for call, field in cases:
        with pytest.raises(UserError, match=f"^{field}:"):
            call()


def test_max_seq_is_checked_up_front(target):
    # max_seq 1024: the last verify pass starts with at most len(prompt) + n - 2 tokens
    # cached and writes γ + 1 more.
    d = make_drafter("uniform", target)
    assert len(autoregressive_decode(target, [1, 2], 1023).tokens) == 1023  # fills 1024
    with pytest.raises(UserError, match="^max_new_tokens: .*1025 positions"):
        autoregressive_decode(target, [1, 2], 1024)
    with pytest.raises(UserError, match="^max_new_tokens: .*1025 positions"):
        speculative_decode(target, d, [1, 2], 1020, 4)
    assert len(speculative_decode(target, d, [1, 2], 1019, 4).tokens) == 1019
