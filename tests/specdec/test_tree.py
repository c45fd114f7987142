"""Token trees: exercise 6's counts, the topology-aware mask, tree forward, compaction."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.drafts import ModelDrafter, make_drafter, rank_order
from specdec.errors import UserError
from specdec.model import ModelConfig, TinyTransformer
from specdec.mss import mss_sample
from specdec.sampling import probs_from_logits, sample
from specdec.tree import (
    TokenTree,
    expansion_tree,
    merge_tree,
    tree_forward,
    verify_greedy,
    verify_stochastic,
)

PREFIX = [7, 3, 11, 29, 5, 40, 2]  # context; its last token is the root


@pytest.fixture(scope="module")
def target() -> TinyTransformer:
    return TinyTransformer.random(ModelConfig(), 0)


@pytest.fixture(scope="module")
def draft(target) -> ModelDrafter:
    return make_drafter("perturbed", target, sigma=0.3, seed=5)


def greedy_tree(draft: ModelDrafter, widths) -> TokenTree:
    draft.reset()
    draft.extend(PREFIX[:-1])
    tree = expansion_tree(draft, [PREFIX[-1]], widths)
    assert draft.length == len(PREFIX)  # the depth-first walk rolled the draft back
    return tree


@pytest.mark.parametrize(
    "widths,nodes,candidates,path_tokens",
    [((2, 2, 1), 11, 4, 16), ((1, 1, 3, 1, 1, 1, 1, 1), 21, 3, 27), ((1, 1, 1, 1), 5, 1, 5)],
)
def test_exercise_6_counts(draft, widths, nodes, candidates, path_tokens):
    tree = greedy_tree(draft, widths)
    assert tree.size == nodes
    assert len(tree.leaves()) == candidates
    assert tree.path_tokens() == path_tokens


def test_layout_is_depth_first_and_mask_rows_are_root_to_node_paths(draft):
    tree = greedy_tree(draft, (2, 2, 1))
    np.testing.assert_array_equal(tree.depths(), [0, 1, 2, 3, 2, 3, 1, 2, 3, 2, 3])
    assert tree.parents == [-1, 0, 1, 2, 1, 4, 0, 6, 7, 6, 9]
    mask = tree.ancestor_mask()
    for i in range(tree.size):
        assert set(np.flatnonzero(mask[i])) == set(tree.path(i))
    # Siblings never see each other, and no node sees a later one.
    assert not mask[1, 6] and not mask[6, 1] and not np.triu(mask, 1).any()


def test_greedy_children_are_the_drafts_top_k(draft):
    tree = greedy_tree(draft, (3, 2))
    draft.reset()
    root_logits = draft.extend(PREFIX)[-1]
    kids = [tree.tokens[c] for c in tree.children(0)]
    assert kids == list(rank_order(root_logits)[:3])
    first = tree.children(0)[0]
    below = draft.extend([tree.tokens[first]])[-1]
    assert [tree.tokens[c] for c in tree.children(first)] == list(rank_order(below)[:2])


def test_sampled_tree_merges_duplicates_and_keeps_draw_order(target):
    uniform_ish = make_drafter("perturbed", target, sigma=0.3, seed=5)
    uniform_ish.extend(PREFIX[:-1])
    tree = expansion_tree(uniform_ish, [PREFIX[-1]], (6, 3), temperature=1.0,
                          rng=np.random.default_rng(4))
    assert len(tree.draws[0]) == 6
    kids = [tree.tokens[c] for c in tree.children(0)]
    assert kids == list(dict.fromkeys(tree.draws[0]))  # unique, in first-draw order
    assert len(kids) < 6  # this seed draws a duplicate, merged into one node
    assert tree.q[0] is not None and tree.q[0].sum() == pytest.approx(1.0)
    assert all(len(tree.draws[c]) == 3 for c in tree.children(0))
    # The root's draws are 6 independent draws from the draft's q at T = 1 given the prefix
    # (the same generator replays them), and each child's q is the draft's given its path.
    fresh = make_drafter("perturbed", target, sigma=0.3, seed=5)
    q_root = probs_from_logits(fresh.extend(PREFIX)[-1], 1.0)
    np.testing.assert_allclose(tree.q[0], q_root, rtol=0, atol=1e-12)
    rng = np.random.default_rng(4)
    assert tree.draws[0] == [sample(q_root, rng) for _ in range(6)]
    first = tree.children(0)[0]
    q_child = probs_from_logits(fresh.extend([tree.tokens[first]])[-1], 1.0)
    np.testing.assert_allclose(tree.q[first], q_child, rtol=0, atol=1e-12)


def test_tree_forward_equals_path_by_path_forward(target, draft):
    tree = greedy_tree(draft, (2, 2, 1))
    cache = target.new_cache()
    target.forward(PREFIX[:-1], cache)
    logits = tree_forward(target, tree, cache)  # [11, vocab]
    assert cache.length == len(PREFIX) - 1 + tree.size
    worst = 0.0
    for node in range(tree.size):
        path_tokens = [tree.tokens[i] for i in tree.path(node)]
        ref = target.forward(PREFIX[:-1] + path_tokens, target.new_cache())
        worst = max(worst, np.abs(ref - logits[node]).max())
    assert worst < 1e-5  # measured ~1e-14 in float64 (lecture: 9.5e-7 in float32)


def test_compaction_leaves_the_cache_equal_to_a_sequential_forward(target, draft):
    tree = greedy_tree(draft, (2, 2, 1))
    cache = target.new_cache()
    target.forward(PREFIX[:-1], cache)
    base = cache.length
    tree_forward(target, tree, cache)
    path = tree.path(8)  # root -> second branch -> its first grandchild: nodes 0, 6, 7, 8
    assert path == [0, 6, 7, 8]
    cache.compact(base, np.array(path))
    seq = PREFIX[:-1] + [tree.tokens[i] for i in path]
    ref = target.new_cache()
    target.forward(seq, ref)
    assert cache.length == ref.length == len(seq)
    np.testing.assert_allclose(cache.k[:, : ref.length], ref.k[:, : ref.length], atol=1e-12)
    np.testing.assert_allclose(cache.v[:, : ref.length], ref.v[:, : ref.length], atol=1e-12)
    np.testing.assert_allclose(target.forward([9], cache), target.forward([9], ref), atol=1e-12)


def test_merge_tree_holds_every_sequence_and_shares_prefixes():
    tree = merge_tree(5, [[1, 2, 3], [1, 2, 4], [6, 7], [1, 8]])
    assert tree.size == 1 + 6 + 1  # root + {1,2,3,4,8} + {6,7}
    paths = {tuple(tree.tokens[i] for i in tree.path(leaf)[1:]) for leaf in tree.leaves()}
    assert paths == {(1, 2, 3), (1, 2, 4), (6, 7), (1, 8)}
    assert all(tree.parents[i] < i for i in range(1, tree.size))


def test_verify_greedy_walks_while_the_argmax_is_a_child():
    tree = merge_tree(0, [[1, 2], [3]])  # nodes: 0 root, 1 "1", 2 "2", 3 "3"
    logits = np.full((4, 5), -1.0)
    logits[0, 1] = logits[1, 4] = logits[2, 0] = logits[3, 0] = 1.0
    assert verify_greedy(tree, logits) == ([0, 1], 4)  # "1" accepted; 4 is not a child of it
    logits[1, 4], logits[1, 2], logits[2, 3] = -1.0, 1.0, 2.0
    assert verify_greedy(tree, logits) == ([0, 1, 2], 3)  # leaf reached: free token


def test_verify_stochastic_on_identical_distributions_accepts_every_level(target):
    # p == q at every node: MSS accepts its first candidate with probability 1.
    draft = ModelDrafter(target)
    draft.extend(PREFIX[:-1])
    rng = np.random.default_rng(0)
    tree = expansion_tree(draft, [PREFIX[-1]], (2, 2), temperature=0.8, rng=rng)
    probs = np.zeros((tree.size, 48))
    for i in range(tree.size):
        probs[i] = tree.q[i] if tree.q[i] is not None else np.full(48, 1 / 48)
    path, _ = verify_stochastic(tree, probs, rng)
    assert len(path) == 3 and tree.tokens[path[1]] == tree.draws[0][0]


def test_verify_stochastic_runs_mss_on_every_draw_in_draw_order():
    # A root whose three draws from q were 2, 2, 0: two child nodes, but MSS must see all
    # three draws in order — the duplicate 2 is always rejected and still moves the
    # residual on (dropping it biases the output, lecture §6.4). An accepted leaf then
    # emits a draw from p at that leaf. Same generator, same decisions as mss_sample.
    tree = TokenTree([], [], [], [])
    root = tree.add(9, -1)
    tree.draws[root] = [2, 2, 0]
    tree.q[root] = np.array([0.3, 0.0, 0.6, 0.05, 0.05])
    leaf = {2: tree.add(2, root), 0: tree.add(0, root)}
    probs = np.array([[0.5, 0.2, 0.1, 0.1, 0.1],
                      [0.1, 0.1, 0.6, 0.1, 0.1],
                      [0.2, 0.2, 0.2, 0.2, 0.2]])
    outcomes = set()
    for seed in range(300):
        rng = np.random.default_rng(seed)
        j, token = mss_sample(probs[0], tree.q[root], [2, 2, 0], rng)
        expected = ([0], token) if j < 0 else ([0, leaf[token]], sample(probs[leaf[token]], rng))
        assert verify_stochastic(tree, probs, np.random.default_rng(seed)) == expected
        outcomes.add((j, token if j < 0 else None))
    assert {j for j, _ in outcomes} == {-1, 0, 2}  # rejection, first draw, the third draw


def test_bad_widths_are_user_errors(draft):
    with pytest.raises(UserError):
        expansion_tree(draft, [1], ())
    with pytest.raises(UserError):
        expansion_tree(draft, [1], (2, 0))
