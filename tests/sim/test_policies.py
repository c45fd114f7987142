"""Speculation policies: shapes, the batch ladder, the goodput-adaptive γ, trees in the engine."""

import numpy as np
import pytest

from sim.policies import (
    AdaptiveGamma,
    BatchLadder,
    FixedGamma,
    NoSpeculation,
    TreePolicy,
    cost_ratio,
    sequence_gamma,
    sglang_tree,
    tree_tokens,
)
from sim.runner import simulate
from sim.shapes import draft_feeds, shape_info, tree_nodes
from specdec.errors import UserError
from tests.sim.fakes import AcceptAll, FakeCost, setup, table


def test_shapes():
    assert NoSpeculation().shape(5).tolist() == []
    assert FixedGamma(3).shape(5).tolist() == [1, 1, 1]
    assert TreePolicy([2, 2, 1]).shape(1).tolist() == [2, 2, 1]
    assert sglang_tree(steps=3, topk=4) == [4, 1, 1]


def test_tree_sizes_match_the_lecture_exercise_6():
    # <2,2,1>: 11 nodes with the root; <1,1,3,1,1,1,1,1>: 21 nodes with the root.
    assert 1 + tree_nodes(np.array([2, 2, 1])) == 11
    assert 1 + tree_nodes(np.array([1, 1, 3, 1, 1, 1, 1, 1])) == 21
    assert draft_feeds(np.array([2, 2, 1])) == [1, 2, 4]
    assert shape_info(np.array([1, 1, 0, 0])) == (2, 2, [1, 1])


def test_batch_ladder_picks_gamma_by_batch_size():
    ladder = BatchLadder([[1, 4, 4], [5, 16, 2], [17, 64, 0]])
    assert ladder.shape(1).tolist() == [1, 1, 1, 1]
    assert ladder.shape(4).tolist() == [1, 1, 1, 1]
    assert ladder.shape(5).tolist() == [1, 1, 0, 0]
    assert ladder.shape(64).tolist() == [0, 0, 0, 0]
    assert ladder.shape(500).tolist() == [0, 0, 0, 0]  # beyond the last row: its γ
    with pytest.raises(UserError, match="policy.ladder"):
        BatchLadder([[1, 4, 4], [4, 8, 2]])  # overlap


def test_a_ladder_reads_its_rows_as_vllm_0_33_does():
    # github vllm-project/vllm vllm/v1/spec_decode/dynamic/utils.py (0.33.0 wheel),
    # build_dynamic_sd_schedule_lookup: a size between two ranges carries the K of the range
    # below it forward, a size past the last range its K; vLLM's own example (its test
    # test_dynamic_sd_uses_batch_size_schedule): 17-31 -> 3, 129-255 -> 2, 256 -> 0
    ladder = BatchLadder([[32, 128, 2], [1, 16, 3], [256, 2048, 0]], key="decoding")
    gamma = [int(ladder.shape(b).sum()) for b in (1, 16, 17, 31, 32, 128, 129, 255, 256, 9999)]
    assert gamma == [3, 3, 3, 3, 2, 2, 2, 2, 0, 0]
    # validate_and_normalize_dynamic_sd_schedule: the first range starts at 1, none overlap
    with pytest.raises(UserError, match="first row must start at batch size 1"):
        BatchLadder([[2, 16, 3]])
    with pytest.raises(UserError, match="rows overlap"):
        BatchLadder([[1, 16, 3], [16, 32, 1]])
    # K (num_speculative_tokens) is the row length and the lookahead, whatever γ is used
    k5 = BatchLadder([[1, 4, 2], [5, 512, 0]], num_speculative_tokens=5)
    assert (k5.max_nodes, k5.shape(3).tolist()) == (5, [1, 1, 0, 0, 0])
    # the size each key reads: the last step's scheduled requests by default (vLLM 0.33)
    by = {key: BatchLadder([[1, 4, 2], [5, 512, 0]], key=key) for key in BatchLadder.KEYS}
    sizes = {"n": 3, "running": 7, "scheduled": np.array([4, 4, 4])}
    assert {key: int(p.shape(**sizes).sum()) for key, p in by.items()} == \
        {"scheduled": 2, "running": 0, "decoding": 2}
    # a sequence the last step left out verifies what the step that scheduled it drafted
    rows = by["scheduled"].shape(3, scheduled=np.array([4, 9, 4]))
    assert rows.tolist() == [[1, 1], [0, 0], [1, 1]]


def _adaptive(alpha: float, draft_s: float) -> AdaptiveGamma:
    pol = AdaptiveGamma(max_gamma=8, prior_alpha=alpha, smoothing=0.1)
    # verify costs 10 ms whatever its size; each draft pass costs draft_s
    pol.price = lambda row, ctx: 0.010 + draft_s * int((row > 0).sum())
    return pol


def test_adaptive_matches_the_optimal_gamma_formula():
    from specdec import optimal_gamma

    for alpha, c in [(0.8, 0.1), (0.6, 0.1), (0.9, 0.02), (0.1, 0.2)]:
        pol = _adaptive(alpha, c * 0.010)
        gamma = int((pol.shape(1, np.array([100])) > 0).sum())
        assert gamma == optimal_gamma(alpha, c, max_gamma=8), (alpha, c)


def test_adaptive_learns_alpha_from_what_it_observes():
    pol = _adaptive(0.9, 0.002)
    chain4 = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    for _ in range(200):
        pol.observe(np.array([0, 0, 1, 4]), chain4)  # 5 accepted of 8 checked
    assert pol.alpha == pytest.approx(5 / 8, abs=1e-6)
    for _ in range(200):
        pol.observe(np.array([0, 0, 0, 1]), chain4)  # 1 of 5 -> α̂ 0.2
    assert pol.alpha == pytest.approx(0.2, abs=1e-6)
    assert int((pol.shape(1, np.array([1])) > 0).sum()) <= 1
    # after a tree <3,1,1>, only levels 2 and 3 count: depths 3 -> 2 of 2, 1 -> 0 of 1
    pol.alpha = 0.5
    pol.observe(np.array([3, 1, 0]), np.array([3, 1, 1, 0, 0, 0, 0, 0]))
    assert pol.alpha == pytest.approx(0.5 + 0.1 * (2 / 3 - 0.5))


def test_adaptive_widens_the_root_when_verify_is_free():
    # Free draft passes and a flat verify price: a wider root only adds expected tokens.
    pol = AdaptiveGamma(max_gamma=4, prior_alpha=0.5, smoothing=0.1, max_width=3)
    pol.price = lambda row, ctx: 0.010
    assert pol.shape(1, np.array([10])).tolist() == [3, 1, 1, 1]
    # ...but not when each verified node costs 3 ms: γ = 1 gives 1.5 / 13 ms, better than
    # γ = 2 (1.75 / 16 ms) and than a root of 2 (1 + 0.75) / 16 ms or 3 (1.875 / 19 ms).
    pol.price = lambda row, ctx: 0.010 + 0.003 * int(np.cumprod(row).sum())
    assert pol.shape(1, np.array([10])).tolist() == [1, 0, 0, 0]


def test_tree_policy_in_the_engine_emits_depth_plus_one():
    # All guesses accepted: a <2,2,1> tree verify emits 3 + 1 tokens; 11 verify tokens.
    s = setup(table([0.0], [8], [9]), policy=lambda: TreePolicy([2, 2, 1]),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll())
    res = simulate(s)
    r = res.requests[0]
    assert r.finished and r.emitted_tokens == 9
    # 1 token from the prefill, then verifies of 4, 4 tokens
    assert [it.emitted_tokens for it in res.iterations] == [1, 4, 4]
    assert [it.verify_tokens for it in res.iterations] == [0, 11, 11]
    assert r.drafted_tokens == 20 and r.accepted_tokens == 6 and r.draft_steps == 2


class Mixed:
    """A per-sequence test policy: shapes cycle through a chain, a tree, none and γ = 1."""

    uses_draft = True
    max_depth = 3
    max_nodes = 4  # the tree <2,1>
    ROWS = np.array([[1, 1, 1], [2, 1, 0], [0, 0, 0], [1, 0, 0]])

    def shape(self, n, context=None, history=None, running=None, scheduled=None):
        return self.ROWS[np.arange(n) % 4]

    def observe(self, accepted, row):
        pass


def test_per_sequence_shapes_in_the_engine():
    # Four requests at once, all guesses accepted: each emits depth + 1 per verify.
    s = setup(table([0.0] * 4, [8] * 4, [9] * 4), policy=Mixed, draft=FakeCost(0.001, 0.0),
              acceptance=AcceptAll())
    res = simulate(s)
    assert all(r.finished and r.emitted_tokens == 9 for r in res.requests)
    first = res.iterations[1]  # the first decoding iteration
    assert first.decode_seqs == 4
    assert first.verify_tokens == 4 + 3 + 4 + 0 + 1  # roots + (3, 2+2, 0, 1) nodes
    assert first.emitted_tokens == 4 + 3 + 1 + 2
    assert first.drafted_tokens == 3 + 4 + 0 + 1


def test_sequence_gamma_is_the_policys_gamma_per_sequence():
    """The compiled walk's scalar γ_i (``sequence_gamma``, with ``cost_ratio``) is the
    per-sequence policy's (``specdec.optimal_gamma`` over the batch), on random histories,
    estimates and costs, ties and edges included (α_i = c, c = 0, a T(1) below T(0))."""
    rng = np.random.default_rng(3)
    for trial in range(300):
        n, depth = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        pol = AdaptiveGamma(max_gamma=8, prior_alpha=float(rng.random()), smoothing=0.1,
                            per_sequence=True)
        checked = rng.integers(0, 2000, n)
        accepted = np.minimum(rng.integers(0, 2000, n), checked)
        if trial % 7 == 0:
            accepted = checked.copy()  # all accepted: α_i up to 1
        history = np.stack((accepted, checked), axis=1)
        t0 = float(rng.uniform(0.005, 0.05))
        seconds = [t0 + float(rng.uniform(-0.001, 0.02)) * g for g in range(9)]
        if trial % 5 == 0:  # c such that some α_i == c exactly
            seconds[1] = t0 + t0 * (accepted[0] + 8 * pol.alpha) / (checked[0] + 8)
        widths = pol._per_sequence(n, history, depth, seconds)
        c = cost_ratio(seconds)
        got = [sequence_gamma(int(a), int(k), pol.alpha, c, depth) for a, k in history]
        assert (widths > 0).sum(axis=1).tolist() == got, trial


def test_tree_tokens_are_the_iid_models_expected_tokens():
    """The compiled walk's scalar expected tokens of a tree widened at its root
    (``tree_tokens``, what the adaptive policy credits it with) are the i.i.d. model's
    own (``IIDAcceptance.expected_tokens`` of ⟨k, 1, …, 1⟩), float for float: every depth
    up to ``MAX_GAMMA`` (term by term below 8 levels, numpy's 8 partial sums from 8 on),
    widths 1 to 16, α at 0, 1 and random."""
    from sim.limits import MAX_GAMMA
    from workloads import IIDAcceptance

    rng = np.random.default_rng(5)
    alphas = [0.0, 1.0, 0.5, *rng.random(60).tolist()]
    for alpha in alphas:
        model = IIDAcceptance(alpha)
        for depth in range(1, MAX_GAMMA + 1):
            for k in (1, 2, 3, int(rng.integers(4, 17))):
                row = np.array([k] + [1] * (depth - 1))
                assert tree_tokens(alpha, k, depth) == model.expected_tokens(row), \
                    (alpha, k, depth)


def test_adaptive_per_sequence_gives_easy_requests_longer_chains():
    from specdec import optimal_gamma

    pol = AdaptiveGamma(max_gamma=8, prior_alpha=0.8, smoothing=0.1, per_sequence=True)
    # verify 10 ms flat, draft passes 0.5 ms: c = 0.05 at this batch
    pol.price = lambda row, ctx: 0.010 + 0.0005 * int((row > 0).sum())
    batch_gamma = int((pol.shape(3, np.array([100] * 3)) > 0).sum())  # no history: one row
    assert batch_gamma == optimal_gamma(0.8, 0.05, max_gamma=8) == 8
    history = np.array([[950, 1000], [300, 1000], [0, 0]])  # easy, hard, new
    widths = pol.shape(3, np.array([100, 100, 100]), history)
    gammas = (widths > 0).sum(axis=1)
    assert widths.shape == (3, 8)
    assert gammas[0] == batch_gamma and 1 <= gammas[1] < gammas[0]
    for g, (acc, chk) in zip(gammas, history, strict=True):
        want = optimal_gamma((acc + 8 * 0.8) / (chk + 8), 0.05, max_gamma=batch_gamma)
        assert g == want
    # when speculating does not pay for the batch, nobody speculates
    pol.price = lambda row, ctx: 0.010 + 0.02 * int((row > 0).sum())
    assert not pol.shape(3, np.array([100] * 3), history).any()
    # a one-guess chain priced below no chain (measured tables are not monotone in the
    # token count): the marginal cost is taken as 0, so everyone gets the batch's depth
    pol.price = lambda row, ctx: 0.010 - 0.0001 * min(int((row > 0).sum()), 1)
    widths = pol.shape(3, np.array([100] * 3), history)
    assert ((widths > 0).sum(axis=1) == (pol.shape(3, np.array([100] * 3)) > 0).sum()).all()
