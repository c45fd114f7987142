"""Acceptance traces: replay reproduces real decoding exactly; replay arithmetic by hand."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.decoding import autoregressive_decode, speculative_decode
from specdec.drafts import token_ranks
from specdec.errors import UserError
from specdec.mss import mss_acceptance_probabilities
from specdec.sampling import probs_from_logits
from specdec.traces import (
    AcceptanceTrace,
    build_models,
    record_settings,
    replay_chain,
    replay_chain_sampled,
    replay_tree,
    replay_tree_sampled,
    trace_summary,
)
from specdec.tree_decoding import tree_decode

N_NEW, MARGIN = 60, 8  # decode 60 tokens; the trace holds 8 more so no window is cut


def hand_trace() -> AcceptanceTrace:
    ranks = np.array([0, 0, 1, 0, 0, 0, 2, 0, 0, 0], dtype=np.int32)
    sequence = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1], dtype=np.int32)
    accept = np.where(ranks[:, None] == 0, 1.0, 0.0) * np.ones((1, 3))
    return AcceptanceTrace(ranks, accept, sequence, {})


def test_run0_stops_at_nonzero_rank_and_at_the_sequence_end():
    tr = hand_trace()
    np.testing.assert_array_equal(tr.run0, [2, 1, 0, 2, 1, 1, 0, 3, 2, 1])
    np.testing.assert_array_equal(tr.seq_end, [5] * 5 + [10] * 5)


def test_replay_chain_by_hand():
    tr = hand_trace()
    idx = np.array([0, 0, 3, 5, 7, 9], dtype=np.int64)
    gamma = np.array([1, 4, 4, 4, 2, 6], dtype=np.int64)
    np.testing.assert_array_equal(replay_chain(tr, idx, gamma), [1, 2, 2, 1, 2, 1])
    with pytest.raises(ValueError):
        replay_chain(tr, np.array([10]), np.array([1]))


def test_replay_tree_by_hand():
    tr = hand_trace()
    idx = np.array([0, 0, 1, 5, 4], dtype=np.int64)
    widths = np.array([[1, 1, 1], [1, 1, 2], [1, 2, 0], [1, 3, 1], [1, 1, 1]], dtype=np.int64)
    # row 1: ranks 0,0,1 under widths 1,1,2 -> all 3 levels; row 2: padded level stops at 2;
    # row 3: rank 2 < 3 at the second level; row 4: the sequence ends after one level.
    np.testing.assert_array_equal(replay_tree(tr, idx, widths), [2, 3, 2, 3, 1])


def test_sampled_replay_with_0_1_probabilities_equals_greedy_replay(rng):
    tr = hand_trace()
    idx = np.arange(10, dtype=np.int64)
    gamma = np.full(10, 3, dtype=np.int64)
    np.testing.assert_array_equal(replay_chain_sampled(tr, idx, gamma, rng),
                                  replay_chain(tr, idx, gamma))
    widths = np.tile([2, 1, 3], (10, 1))
    expected = replay_tree(tr, idx, np.tile([1, 1, 1], (10, 1)))  # 0/1 columns ignore k
    np.testing.assert_array_equal(replay_tree_sampled(tr, idx, widths, rng), expected)
    with pytest.raises(ValueError):
        replay_tree_sampled(tr, idx, np.tile([4], (10, 1)), rng)


def test_sampled_replay_matches_the_recorded_probability():
    ranks = np.zeros(1000, dtype=np.int32)
    accept = np.tile([0.3, 0.5], (1000, 1))
    tr = AcceptanceTrace(ranks, accept, np.zeros(1000, dtype=np.int32), {})
    got = replay_tree_sampled(tr, np.zeros(20000, dtype=np.int64),
                              np.tile([[2, 1]], (20000, 1)), np.random.default_rng(0))
    # P(first level) = 0.5, P(both) = 0.5 * 0.3: mean 0.65, sd of the mean < 0.005.
    assert got.mean() == pytest.approx(0.65, abs=0.02)


@pytest.fixture(scope="module")
def greedy_trace() -> AcceptanceTrace:
    return record_settings(draft="perturbed", sigma=0.3, tokens=3 * (N_NEW + MARGIN), prompts=3,
                           k_max=3, seed=4)


def assert_replay_reproduces(trace: AcceptanceTrace, decode, replay) -> None:
    """Decode every recorded prompt for real with the trace's own models; replaying the
    trace at each iteration's position must give that iteration's accepted count."""
    target, drafter = build_models(trace.meta)
    starts = np.cumsum([0] + trace.meta["tokens_per_prompt"][:-1])
    for s, prompt in enumerate(trace.meta["prompts"]):
        res = decode(target, drafter, prompt)
        idx = np.array([starts[s] + it.position for it in res.iterations], dtype=np.int64)
        assert list(replay(idx)) == [it.accepted for it in res.iterations]


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_chain_replay_reproduces_real_speculative_decoding(greedy_trace, gamma):
    assert_replay_reproduces(
        greedy_trace,
        lambda target, drafter, prompt: speculative_decode(target, drafter, prompt, N_NEW, gamma),
        lambda idx: replay_chain(greedy_trace, idx, np.full(idx.size, gamma)),
    )


@pytest.mark.parametrize("widths", [(2, 2, 1), (3, 1, 1, 1), (1, 1, 3, 1)])
def test_tree_replay_reproduces_real_tree_decoding(greedy_trace, widths):
    assert_replay_reproduces(
        greedy_trace,
        lambda target, drafter, prompt: tree_decode(target, drafter, prompt, N_NEW, widths),
        lambda idx: replay_tree(greedy_trace, idx, np.tile(widths, (idx.size, 1))),
    )


def test_greedy_accept_prob_is_rank_zero_in_every_column(greedy_trace):
    expected = (greedy_trace.ranks == 0).astype(float)[:, None] * np.ones((1, 3))
    np.testing.assert_array_equal(greedy_trace.accept_prob, expected)


def test_sampling_trace_probabilities_are_mss_acceptance():
    tr = record_settings(draft="perturbed", sigma=0.3, temperature=0.5, tokens=200, prompts=2,
                         k_max=4, seed=1)
    assert tr.accept_prob.shape == (200, 4)
    # Recompute along the text another way: sample it with autoregressive_decode from the
    # recorded seed (the fourth spawned child), then score every position with ONE
    # teacher-forced target pass and one draft pass over prompt + text.
    target, drafter = build_models(tr.meta)
    sample_rng = np.random.default_rng(np.random.SeedSequence(tr.meta["seed"]).spawn(4)[3])
    start = 0
    for prompt, n in zip(tr.meta["prompts"], tr.meta["tokens_per_prompt"], strict=True):
        text = autoregressive_decode(target, prompt, n, 0.5, sample_rng).tokens
        context = prompt + text[:-1]  # row len(prompt) - 1 + t predicts text[t]
        p = probs_from_logits(target.forward(context, target.new_cache(), "all"), 0.5)
        drafter.reset()
        q_logits = drafter.extend(context)[len(prompt) - 1 :]  # [n, vocab]
        q = probs_from_logits(q_logits, 0.5)
        exact = np.stack([mss_acceptance_probabilities(p_t, q_t, 4)
                          for p_t, q_t in zip(p[len(prompt) - 1 :], q, strict=True)])
        rows = slice(start, start + n)
        np.testing.assert_allclose(tr.accept_prob[rows], exact, rtol=2**-23, atol=1e-15)
        np.testing.assert_array_equal(tr.ranks[rows], token_ranks(q_logits, np.array(text)))
        start += n
    assert np.all(np.diff(tr.accept_prob, axis=1) >= -1e-15)  # more candidates never hurt
    assert 0.2 < tr.accept_prob[:, 0].mean() < 0.9
    assert np.all(tr.accept_prob[:, 0] > 0)  # softmax drafts overlap the target everywhere


def test_summary_and_determinism(greedy_trace):
    again = record_settings(draft="perturbed", sigma=0.3, tokens=3 * (N_NEW + MARGIN),
                            prompts=3, k_max=3, seed=4)
    np.testing.assert_array_equal(again.ranks, greedy_trace.ranks)
    s = trace_summary(greedy_trace)
    assert s["positions"] == 3 * (N_NEW + MARGIN) and s["sequences"] == 3
    assert s["alpha_hat"] == pytest.approx(s["coverage_top1"])  # greedy: α̂ = top-1 coverage
    assert s["coverage_top1"] <= s["coverage_top2"] <= s["coverage_top5"] <= 1


def test_bad_settings_are_user_errors():
    with pytest.raises(UserError):
        record_settings(draft="oracle", tokens=10, prompts=1)
    with pytest.raises(UserError):
        record_settings(tokens=3, prompts=4)
    with pytest.raises(UserError):
        record_settings(tokens=100_000, prompts=1)  # beyond max_seq


@pytest.mark.parametrize("draft", ["ngram", "truncated", "uniform"])
@pytest.mark.parametrize("widths", [(1, 1, 1, 1), (2, 1, 2)])
def test_replay_is_exact_for_every_draft_kind(draft, widths):
    trace = record_settings(draft=draft, tokens=2 * (N_NEW + MARGIN), prompts=2, k_max=2, seed=9)
    assert_replay_reproduces(
        trace,
        lambda target, drafter, prompt: tree_decode(target, drafter, prompt, N_NEW, widths),
        lambda idx: replay_tree(trace, idx, np.tile(widths, (idx.size, 1))),
    )
