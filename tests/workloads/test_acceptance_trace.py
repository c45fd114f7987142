"""Trace replay: greedy is exact (checked against a plain reference loop), sampling draws."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from specdec.errors import UserError
from workloads.acceptance import chain_widths, expected_from_levels
from workloads.acceptance_trace import TraceAcceptance, positions_left

TRACE_DIR = Path(__file__).resolve().parents[2] / "workloads" / "traces"


def make_trace(seed=0, n=500, n_seq=7, k=4):
    """A trace built from arrays: n positions in n_seq sequences, ranks mostly 0."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, n), n_seq - 1, replace=False))
    sequence = np.repeat(np.arange(n_seq), np.diff(np.concatenate([[0], cuts, [n]])))
    ranks = np.where(rng.random(n) < 0.6, 0, rng.integers(1, 10, n)).astype(np.int32)
    prob = np.sort(rng.random((n, k)), axis=1)  # non-decreasing in the candidate count
    return SimpleNamespace(
        ranks=ranks, accept_prob=prob, sequence=sequence.astype(np.int32), meta={}
    )


def reference_greedy(trace, start, widths):
    """Plain loop: walk levels while the rank is covered and the sequence goes on."""
    n = trace.ranks.size
    out = []
    for t0, row in zip(start, widths, strict=True):
        a = 0
        for j, k in enumerate(row):
            t = t0 + j
            if k == 0 or t >= n or trace.sequence[t] != trace.sequence[t0]:
                break
            if trace.ranks[t] >= k:
                break
            a += 1
        out.append(a)
    return np.array(out)


def random_widths(rng, b, m, kmax):
    depth = rng.integers(0, m + 1, b)
    w = rng.integers(1, kmax + 1, (b, m))
    return np.where(np.arange(m) < depth[:, None], w, 0)


def test_positions_left():
    assert positions_left(np.array([0, 0, 0, 1, 2, 2])).tolist() == [3, 2, 1, 1, 2, 1]


def test_greedy_replay_equals_reference_for_chains_and_trees():
    trace = make_trace()
    model = TraceAcceptance(trace, "greedy")
    rng = np.random.default_rng(1)
    b = 3000
    streams = model.new_streams(b, rng)
    positions = rng.integers(0, 2000, b)
    start = (streams + positions) % trace.ranks.size
    # one shape broadcast over the batch (as the engine passes it: chains take a shortcut),
    # padded and zero-depth chains, a tree row, and a shape per row
    for widths in (
        np.broadcast_to(chain_widths(5), (b, 5)),
        np.broadcast_to(np.array([1, 1, 0, 0]), (b, 4)),
        np.broadcast_to(np.array([0, 0]), (b, 2)),
        np.broadcast_to(np.array([2, 1]), (b, 2)),
        random_widths(rng, b, 6, 4),
    ):
        got = model.accept(streams, positions, widths, np.random.default_rng(2))
        assert got.dtype == np.int64
        assert np.array_equal(got, reference_greedy(trace, start, widths))
        assert np.array_equal(got, model.accept(streams, positions, widths.copy(),
                                                np.random.default_rng(2)))


def test_greedy_replay_is_deterministic_and_draws_nothing():
    model = TraceAcceptance(make_trace(), "greedy")
    rng = np.random.default_rng(3)
    before = rng.bit_generator.state
    w = np.broadcast_to(chain_widths(4), (10, 4))
    z = np.arange(10, dtype=np.int64)
    a = model.accept(z, z, w, rng)
    assert rng.bit_generator.state == before
    assert np.array_equal(a, model.accept(z, z, w, np.random.default_rng(99)))


def test_greedy_expected_tokens_is_exact_average_over_starts():
    trace = make_trace(seed=4)
    model = TraceAcceptance(trace, "greedy")
    n = trace.ranks.size
    start = np.arange(n)
    w = np.broadcast_to([1, 3, 1], (n, 3))
    ref = reference_greedy(trace, start, w)
    assert model.expected_tokens([1, 3, 1]) == pytest.approx(1 + ref.mean(), abs=1e-12)
    assert model.mean_alpha == pytest.approx(np.mean(trace.ranks == 0))


def test_sampling_with_certain_probabilities_is_exact():
    trace = make_trace(seed=5)
    trace.accept_prob = np.where(trace.ranks[:, None] < np.arange(1, 5), 1.0, 0.0)
    sampled = TraceAcceptance(trace, "sampling")
    greedy = TraceAcceptance(trace, "greedy")
    rng = np.random.default_rng(6)
    streams, pos = sampled.new_streams(2000, rng), rng.integers(0, 900, 2000)
    w = random_widths(rng, 2000, 5, 4)
    assert np.array_equal(sampled.accept(streams, pos, w, rng), greedy.accept(streams, pos, w, rng))


def test_sampling_mean_matches_exact_expectation():
    model = TraceAcceptance(make_trace(seed=7), "sampling")
    n = 400_000
    rng = np.random.default_rng(8)
    w = [2, 1, 1, 1]
    a = model.accept(
        model.new_streams(n, rng), np.zeros(n, np.int64), np.broadcast_to(w, (n, 4)), rng
    )
    assert float((a + 1).mean()) == pytest.approx(model.expected_tokens(w), rel=0.01)


def test_runs_stop_at_the_end_of_the_trace_ring():
    trace = SimpleNamespace(
        ranks=np.zeros(6, np.int32),
        accept_prob=np.ones((6, 1)),
        sequence=np.array([0, 0, 0, 1, 1, 1], np.int32),
        meta={},
    )
    model = TraceAcceptance(trace, "greedy")
    w = np.broadcast_to(chain_widths(4), (6, 4))
    a = model.accept(np.zeros(6, np.int64), np.arange(6), w, np.random.default_rng(0))
    assert a.tolist() == [3, 2, 1, 3, 2, 1]
    # a stream walks on into the next sequence (position 6 wraps to offset 0)
    assert model.accept(np.array([4]), np.array([2]), w[:1], np.random.default_rng(0)).tolist() == [
        3
    ]


def test_validation():
    t = make_trace()
    with pytest.raises(UserError, match="mode"):
        TraceAcceptance(t, "beam")
    with pytest.raises(UserError, match="width 5 exceeds"):
        TraceAcceptance(t, "sampling").accept(
            np.zeros(1, np.int64), np.zeros(1, np.int64), np.array([[5]]), np.random.default_rng(0)
        )
    bad = make_trace()
    bad.accept_prob = bad.accept_prob * 2
    with pytest.raises(UserError, match="accept_prob"):
        TraceAcceptance(bad)
    bad = make_trace()
    bad.ranks = bad.ranks - 5
    with pytest.raises(UserError, match="ranks"):
        TraceAcceptance(bad)


def test_matches_core_replay_functions():
    traces = pytest.importorskip("specdec.traces", reason="specdec.traces not written yet")
    t = make_trace(seed=9)
    trace = traces.AcceptanceTrace(
        ranks=t.ranks, accept_prob=t.accept_prob, sequence=t.sequence, meta={}
    )
    model = TraceAcceptance(trace, "greedy")
    rng = np.random.default_rng(10)
    index = rng.integers(0, t.ranks.size, 2000).astype(np.int64)
    gamma = rng.integers(0, 7, 2000).astype(np.int64)
    zero = np.zeros(2000, np.int64)
    chains = chain_widths(gamma, 6)
    assert np.array_equal(
        model.accept(index, zero, chains, rng), traces.replay_chain(trace, index, gamma)
    )
    widths = random_widths(rng, 2000, 5, 4).astype(np.int64)
    assert np.array_equal(
        model.accept(index, zero, widths, rng), traces.replay_tree(trace, index, widths)
    )
    # the level probabilities behind expected_tokens (this module's own windowing) agree
    for w, ref in (
        (chains, traces.replay_chain(trace, index, gamma)),
        (widths, traces.replay_tree(trace, index, widths)),
    ):
        levels = model.level_probs(index, w)
        assert np.array_equal(expected_from_levels(levels) - 1, ref)


@pytest.mark.parametrize("path", sorted(TRACE_DIR.glob("*.npz")) or [None])
def test_committed_traces_replay_like_the_core(path):
    if path is None:
        pytest.skip("no committed traces under workloads/traces/ yet")
    traces = pytest.importorskip("specdec.traces")
    trace_file = pytest.importorskip("workloads.trace_file")
    trace = trace_file.load_trace(path)
    model = TraceAcceptance(trace, "greedy")
    rng = np.random.default_rng(11)
    index = rng.integers(0, trace.ranks.size, 5000).astype(np.int64)
    gamma = rng.integers(0, 9, 5000).astype(np.int64)
    zero = np.zeros(5000, np.int64)
    assert np.array_equal(
        model.accept(index, zero, chain_widths(gamma, 8), rng),
        traces.replay_chain(trace, index, gamma),
    )
    # exact expectations: greedy = 1 + mean over starts of min(γ, run0); sampling by draws
    assert model.expected_tokens(chain_widths(4)) == pytest.approx(
        1 + np.minimum(4, trace.run0).mean(), abs=1e-12
    )
    sampled = TraceAcceptance(trace, "sampling")
    n = 200_000
    a = sampled.accept(
        sampled.new_streams(n, rng), np.zeros(n, np.int64), chain_widths(np.full(n, 4)), rng
    )
    assert float((a + 1).mean()) == pytest.approx(sampled.expected_tokens([1, 1, 1, 1]), rel=0.01)
