"""Draft placement and the cost of drafting chains and expansion trees."""

from __future__ import annotations

import numpy as np
import pytest

from hardware import (
    CostModel,
    Deployment,
    DraftSetup,
    chain_draft_seconds,
    check_colocated_memory,
    check_same_vocab,
    colocated_kv_capacity_tokens,
    load_catalog,
    tree_attended_keys,
    tree_draft_seconds,
    tree_level_sizes,
    tree_nodes,
    tree_rows_draft_seconds,
)
from specdec.errors import UserError

CAT = load_catalog()


def cost(model, gpu="h100", **kw) -> CostModel:
    kw.setdefault("timing", "paper")  # the lecture's paper GPU
    return CostModel(Deployment(model=CAT.model(model), gpu=CAT.gpu(gpu), **kw), CAT)


def test_tree_node_counts_of_exercise_6():
    assert tree_nodes([2, 2, 1]) == 11
    assert tree_nodes([1, 1, 3, 1, 1, 1, 1, 1]) == 21
    assert tree_nodes([1, 1, 1, 1]) == 5 and tree_nodes([5, 1, 1, 1]) == 21  # lecture §7.3
    assert tree_level_sizes([3, 2]) == [1, 3, 6]
    with pytest.raises(UserError, match="expansion width"):
        tree_nodes([2, 0])


def test_chain_is_gamma_single_token_passes_at_growing_context():
    d = DraftSetup(cost("llama-3.2-1b"))
    ctx = np.array([100, 700, 300])
    expected = sum(d.cost.pass_seconds(np.ones(3), ctx + i) for i in range(4))
    assert chain_draft_seconds(d, 4, ctx) == pytest.approx(expected, rel=1e-12)
    assert chain_draft_seconds(d, 0, ctx) == 0.0


def test_chain_with_per_sequence_gamma_drops_finished_sequences():
    d = DraftSetup(cost("llama-3.2-1b"))
    ctx = np.array([100, 700, 300])
    gamma = np.array([1, 3, 0])
    expected = (d.cost.pass_seconds([1, 1], [100, 700])
                + d.cost.pass_seconds([1], [701]) + d.cost.pass_seconds([1], [702]))
    assert chain_draft_seconds(d, gamma, ctx) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("timing", ["paper", "roofline"])
def test_trees_cut_per_sequence_on_draft_replicas(timing):
    """Rows all alike are the shared tree's passes; rows a budget cut are priced per
    replica group (round robin), the slowest group's passes; a sequence's first pass
    feeds its root, each deeper one its level's nodes; a row of zeros costs nothing."""
    rng = np.random.default_rng(4)
    one = DraftSetup(cost("llama-3.2-1b", timing=timing))
    four = DraftSetup(one.cost, replicas=4)
    ctx = rng.integers(10, 2000, 11)
    tree = [2, 3, 1, 2]
    rows = np.broadcast_to(np.array(tree), (11, 4))
    for d in (one, four):
        assert tree_rows_draft_seconds(d, rows, ctx) == pytest.approx(
            tree_draft_seconds(d, tree, ctx), rel=1e-12)
    cut = np.array(rows)
    cut[[1, 5, 8], 2:] = 0  # three sequences' trees cut to two levels
    cut[[3, 6], 1:] = 0  # two to one
    cut[9] = 0  # one drafts nothing
    groups = [tree_rows_draft_seconds(one, cut[g::4], ctx[g::4]) for g in range(4)]
    assert tree_rows_draft_seconds(four, cut, ctx) == max(groups)
    # group 1 (sequences 1, 5, 9): the roots, then two with k1 = 2 nodes each
    seq = [1, 5]
    want = (one.cost.pass_seconds([1, 1], ctx[seq], [c + 1.0 for c in ctx[seq]])
            + one.cost.pass_seconds([2, 2], ctx[seq] + 1, [2 * (c + 2.0) for c in ctx[seq]]))
    assert groups[1] == pytest.approx(want, rel=1e-12)
    assert tree_rows_draft_seconds(four, np.zeros((5, 3), dtype=np.int64), ctx[:5]) == 0.0


def test_tree_is_one_pass_per_level_over_that_levels_nodes():
    d = DraftSetup(cost("llama-3.2-1b"))
    ctx = np.array([64, 128])
    # <3,2>: feed the root (1 node), then level 1's 3 nodes after it; each of those sees
    # its context, the root and itself (tree mask), not the causal 3(3+1)/2 among them
    expected = d.cost.pass_seconds([1, 1], ctx) \
        + d.cost.pass_seconds([3, 3], ctx + 1, keys=3 * (ctx + 2))
    assert tree_draft_seconds(d, [3, 2], ctx) == pytest.approx(expected, rel=1e-12)
    # a chain-shaped tree <1,1,1> costs the same as a chain of 3
    assert tree_draft_seconds(d, [1, 1, 1], ctx) == pytest.approx(
        chain_draft_seconds(d, 3, ctx), rel=1e-12)


def _tree_keys_by_walking(widths, context):
    """Build the tree node by node (parent pointers) and count what each node attends."""
    parents, level = [None], [0]
    for k in widths:
        nxt = []
        for p in level:
            for _ in range(k):
                parents.append(p)
                nxt.append(len(parents) - 1)
        level = nxt
    total = 0
    for node in range(len(parents)):
        seen, a = 1, parents[node]  # itself, then its ancestors up to the root
        while a is not None:
            seen, a = seen + 1, parents[a]
        total += context + seen
    return total


def test_widest_tree_of_section_7_3_attends_71_keys_beyond_its_context():
    # root 1 + level 1: 5 x 2 + levels 2..4: 5 x (3 + 4 + 5) = 71 (causal would be 231)
    assert tree_attended_keys([5, 1, 1, 1], 1024) == 21 * 1024 + 71


@pytest.mark.parametrize("widths", [[1, 1, 1, 1], [5, 1, 1, 1], [2, 2, 1], [3], [1, 1, 3, 1, 1]])
def test_tree_verify_attends_context_and_ancestors_only(widths):
    assert tree_attended_keys(widths, 1024) == _tree_keys_by_walking(widths, 1024)
    n = tree_nodes(widths)
    causal = n * 1024 + n * (n + 1) / 2
    if all(k == 1 for k in widths):
        assert tree_attended_keys(widths, 1024) == causal  # a chain is causal
    else:
        assert tree_attended_keys(widths, 1024) < causal
    ctx = np.array([0, 10])
    assert tree_attended_keys(widths, ctx).tolist() == [
        _tree_keys_by_walking(widths, 0), _tree_keys_by_walking(widths, 10)]


def test_colocated_draft_is_replicated_per_target_gpu_and_splits_the_batch():
    target = cost("llama-3-70b", tp=4)
    draft = DraftSetup.colocated_with(cost("llama-3.2-1b"), target)
    assert (draft.placement, draft.replicas) == ("colocated", 4)
    ctx = np.full(10, 512)
    # 10 sequences round-robin over 4 replicas: the busiest replica drafts for 3
    one = DraftSetup(draft.cost)
    assert chain_draft_seconds(draft, 2, ctx) == pytest.approx(
        chain_draft_seconds(one, 2, ctx[:3]), rel=1e-12)
    with pytest.raises(UserError, match="one replica per GPU"):
        DraftSetup.colocated_with(cost("llama-3.2-1b", tp=2), target)


def test_colocated_draft_shares_memory_separate_does_not():
    target = cost("llama-3-8b")
    d = cost("llama-3.2-1b")
    colo = DraftSetup.colocated_with(d, target)
    usable = int(80 * 2**30 * 0.9)
    free = usable - 2 * 8_030_261_248 - 2 * 1_235_814_400
    assert colocated_kv_capacity_tokens(target, colo) == free // (131_072 + 32_768)
    sep = DraftSetup(d, placement="separate")
    assert colocated_kv_capacity_tokens(target, sep) == target.kv_capacity_tokens()
    check_colocated_memory(target, colo, 300_000)
    with pytest.raises(UserError, match=r"reserved = draft llama-3.2-1b weights 2\.3 GiB"):
        check_colocated_memory(target, colo, 400_000)
    # the target alone fits 400k tokens: the message says it is the draft, and next to what
    target.check_memory(400_000)
    with pytest.raises(UserError, match=r"^draft llama-3.2-1b \(co-located\) next to target "
                                        r"llama-3-8b does not fit on 1x1 h100: needs 7\d\.\d GiB"):
        check_colocated_memory(target, colo, 400_000)
    check_colocated_memory(target, sep, 400_000)  # the draft's own GPU holds its KV


def test_bad_placement():
    with pytest.raises(UserError, match="placement: must be one of colocated, separate"):
        DraftSetup(cost("llama-3.2-1b"), placement="remote")
    with pytest.raises(UserError, match="replicas"):
        DraftSetup(cost("llama-3.2-1b"), replicas=0)


def test_separate_draft_that_does_not_fit_is_named_as_the_draft():
    target, big = cost("llama-3-8b", "a100-80gb"), cost("llama-3-8b", "a10")
    sep = DraftSetup(big, placement="separate")
    with pytest.raises(UserError, match=r"^draft llama-3-8b \(separate GPUs, for target "
                                        r"llama-3-8b on 1x1 a100-80gb\) does not fit on 1x1 a10"):
        check_colocated_memory(target, sep, 100_000)


def test_draft_must_share_the_target_vocabulary():
    check_same_vocab(CAT.model("llama-3-8b"), CAT.model("llama-3.2-1b"))
    check_same_vocab(CAT.model("opt-13b"), CAT.model("opt-125m"))
    with pytest.raises(UserError) as err:
        check_same_vocab(CAT.model("llama-3-8b"), CAT.model("opt-125m"))
    assert str(err.value) == (
        "draft opt-125m cannot speculate for target llama-3-8b: draft vocab_size 50272, "
        "target vocab_size 128256; the draft must share the target's tokenizer (equal "
        "vocab_size is the check made)"
    )
