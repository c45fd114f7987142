"""Drafts: perturbed / truncated copies, uniform, prompt lookup, and the shared ranking."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.drafts import (
    ModelDrafter,
    NgramDrafter,
    UniformDrafter,
    make_drafter,
    perturbed_copy,
    rank_order,
    token_ranks,
    truncated_copy,
)
from specdec.errors import UserError
from specdec.model import ModelConfig, TinyTransformer


@pytest.fixture(scope="module")
def target() -> TinyTransformer:
    return TinyTransformer.random(ModelConfig(), 0)


def test_perturbed_copy_noise_scales_with_sigma_per_tensor(target):
    same = perturbed_copy(target, 0.0, 1)
    np.testing.assert_array_equal(same.lm_head, target.lm_head)
    noisy = perturbed_copy(target, 0.3, 1)
    for w, w2 in [(target.lm_head, noisy.lm_head), (target.layers[1].wq, noisy.layers[1].wq)]:
        ratio = (w2 - w).std() / w.std()
        assert abs(ratio - 0.3) < 0.03  # thousands of entries: sampling error ~1%
    np.testing.assert_array_equal(noisy.layers[0].attn_norm, target.layers[0].attn_norm)
    with pytest.raises(UserError):
        perturbed_copy(target, -0.1, 1)


def test_truncated_copy_keeps_first_layers_and_head(target):
    full = truncated_copy(target, 2)
    tokens = np.arange(10)
    np.testing.assert_array_equal(
        full.forward(tokens, full.new_cache()), target.forward(tokens, target.new_cache())
    )
    one = truncated_copy(target, 1)
    assert one.layers == target.layers[:1] and one.final_norm is target.final_norm


def test_model_drafter_extend_and_truncate(target):
    d = ModelDrafter(target)
    rows = d.extend([1, 2, 3])
    assert rows.shape == (3, 48) and d.length == 3 and d.calls == 1
    d.truncate(1)
    again = d.extend([2, 3])
    np.testing.assert_allclose(again, rows[1:], atol=1e-12)


def test_uniform_drafter_guesses_token_zero():
    d = UniformDrafter(48)
    rows = d.extend([5, 6])
    assert rows.shape == (2, 48) and d.length == 2
    assert rank_order(rows[-1])[0] == 0
    d.truncate(0)
    assert d.length == 0
    with pytest.raises(ValueError):
        d.truncate(1)


def test_ngram_drafter_proposes_continuation_of_latest_match():
    d = NgramDrafter(10, n=2)
    assert d.propose([1, 2, 3, 9, 1, 2]) == 3
    assert d.propose([1, 2, 3, 1, 2, 4, 1, 2]) == 4  # the most recent earlier match wins
    assert d.propose([5, 6, 7, 6]) == 7  # backs off from 2 tokens to 1
    assert d.propose([5, 6, 7]) is None
    rows = d.extend([1, 2, 3, 1, 2])
    assert np.all(rows[:3] == 0.0)  # no match yet: uniform ("no idea")
    assert rows[3, 2] == 0.0 and np.isneginf(rows[3]).sum() == 9  # "1" was followed by 2
    assert rows[4, 3] == 0.0 and np.all(np.isneginf(np.delete(rows[4], 3)))
    d.truncate(2)
    assert d.history == [1, 2]


def test_rank_order_breaks_ties_by_token_id():
    logits = np.array([0.5, 2.0, 0.5, 2.0, -1.0])
    np.testing.assert_array_equal(rank_order(logits), [1, 3, 0, 2, 4])
    np.testing.assert_array_equal(token_ranks(np.tile(logits, (5, 1)), np.arange(5)),
                                  [2, 0, 3, 1, 4])


def test_token_ranks_match_rank_order_on_random_logits():
    rng = np.random.default_rng(0)
    logits = rng.integers(0, 4, size=(50, 8)).astype(float)  # many ties
    tokens = rng.integers(0, 8, 50)
    order = rank_order(logits)
    expected = [int(np.flatnonzero(order[i] == tokens[i])[0]) for i in range(50)]
    np.testing.assert_array_equal(token_ranks(logits, tokens), expected)


def test_make_drafter_kinds(target):
    assert isinstance(make_drafter("uniform", target), UniformDrafter)
    assert isinstance(make_drafter("ngram", target, ngram=2), NgramDrafter)
    assert make_drafter("truncated", target, layers=1).model.config.n_layers == 1
    with pytest.raises(UserError):
        make_drafter("oracle", target)
