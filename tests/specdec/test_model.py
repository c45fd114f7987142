"""The tiny transformer: the formulas, cache consistency, rollback, RoPE and GQA shapes."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.errors import UserError
from specdec.model import KVCache, ModelConfig, TinyTransformer


@pytest.fixture(scope="module")
def model() -> TinyTransformer:
    return TinyTransformer.random(ModelConfig(), 0)


def test_default_config_shape():
    cfg = ModelConfig()
    assert (cfg.vocab, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads) == (48, 64, 2, 4, 2)
    assert cfg.head_dim == 16


@pytest.mark.parametrize(
    "kwargs",
    [dict(n_heads=3), dict(n_kv_heads=3), dict(vocab=0), dict(d_model=60, n_heads=4, n_kv_heads=2)],
)
def test_bad_config_is_a_user_error(kwargs):
    # d_model 60 / 4 heads = head_dim 15: odd, so RoPE cannot pair dimensions.
    with pytest.raises(UserError):
        ModelConfig(**kwargs)


def reference_logits(model: TinyTransformer, tokens) -> np.ndarray:
    """The forward written out from the formulas, one head and one query at a time.

    RMSNorm ``x / sqrt(mean(x²) + 1e-6) · g``; RoPE rotating dimension pairs (i, i + hd/2)
    by ``pos · θ^(−2i/hd)``; query head h reads KV head ``h // (n_heads / n_kv_heads)``;
    causal softmax attention scaled by ``1/sqrt(hd)``; SwiGLU ``(silu(m W_g) ⊙ m W_u) W_d``.
    """
    cfg = model.config
    hd, half, group = cfg.head_dim, cfg.head_dim // 2, cfg.n_heads // cfg.n_kv_heads

    def rms(v, gain):
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + 1e-6) * gain

    def rope(v, pos):
        angle = pos * cfg.rope_theta ** (-2.0 * np.arange(half) / hd)
        cos, sin = np.cos(angle), np.sin(angle)
        return np.concatenate([v[:half] * cos - v[half:] * sin, v[:half] * sin + v[half:] * cos])

    x = model.embed[np.asarray(tokens)]  # [n, d]
    n = x.shape[0]
    for layer in model.layers:
        a = rms(x, layer.attn_norm)
        q, k, v = a @ layer.wq, a @ layer.wk, a @ layer.wv
        heads = np.zeros((n, cfg.n_heads * hd))
        for h in range(cfg.n_heads):
            kv = slice((h // group) * hd, (h // group + 1) * hd)
            for i in range(n):
                qi = rope(q[i, h * hd : (h + 1) * hd], i)
                scores = np.array([qi @ rope(k[j, kv], j) for j in range(i + 1)]) / np.sqrt(hd)
                w = np.exp(scores - scores.max())
                heads[i, h * hd : (h + 1) * hd] = (w / w.sum()) @ v[: i + 1, kv]
        x = x + heads @ layer.wo
        m = rms(x, layer.mlp_norm)
        gate = m @ layer.w_gate
        x = x + (gate / (1 + np.exp(-gate)) * (m @ layer.w_up)) @ layer.w_down
    return rms(x, model.final_norm) @ model.lm_head  # [n, vocab]


def test_forward_is_the_written_out_formulas(model):
    tokens = np.random.default_rng(3).integers(0, 48, 9)
    np.testing.assert_allclose(model.forward(tokens, model.new_cache(), "all"),
                               reference_logits(model, tokens), rtol=0, atol=1e-10)


def test_one_pass_equals_token_by_token(model):
    tokens = np.random.default_rng(1).integers(0, 48, 20)
    c_all, c_one = model.new_cache(), model.new_cache()
    all_logits = model.forward(tokens, c_all, logits_for="all")  # [20, vocab]
    one = np.stack([model.forward([t], c_one) for t in tokens])
    assert all_logits.shape == (20, 48)
    np.testing.assert_allclose(all_logits, one, atol=1e-10)
    assert c_all.length == c_one.length == 20
    np.testing.assert_allclose(c_all.k[:, :20], c_one.k[:, :20], atol=1e-12)


def test_truncate_rolls_back_exactly(model):
    rng = np.random.default_rng(2)
    prefix, wrong, right = rng.integers(0, 48, 10), rng.integers(0, 48, 5), rng.integers(0, 48, 3)
    cache = model.new_cache()
    model.forward(prefix, cache)
    model.forward(wrong, cache)
    cache.truncate(10)  # only the length moves; stale slots are overwritten next
    rolled = model.forward(right, cache, logits_for="all")
    fresh_cache = model.new_cache()
    fresh = model.forward(np.concatenate([prefix, right]), fresh_cache, logits_for="all")[10:]
    np.testing.assert_allclose(rolled, fresh, atol=1e-12)
    with pytest.raises(ValueError):
        cache.truncate(14)


def test_rope_makes_attention_depend_on_relative_position_only(model):
    # With no cached context, shifting every position by a constant changes no logit.
    tokens = np.arange(7)
    causal = np.tril(np.ones((7, 7), dtype=bool))
    a = model.forward_masked(tokens, np.arange(7), causal, model.new_cache())
    b = model.forward_masked(tokens, np.arange(7) + 33, causal, model.new_cache())
    np.testing.assert_allclose(a, b, atol=1e-10)
    # ... but the order of tokens matters (the model is not a bag of words).
    c = model.forward_masked(tokens[::-1], np.arange(7), causal, model.new_cache())
    assert np.abs(a[-1] - c[-1]).max() > 1e-3


def test_grouped_query_attention_cache_holds_kv_heads_only():
    mha = TinyTransformer.random(ModelConfig(n_kv_heads=4), 3)
    gqa = TinyTransformer.random(ModelConfig(n_kv_heads=1), 3)
    assert mha.new_cache().k.shape == (2, 1024, 4, 16)
    assert gqa.new_cache().k.shape == (2, 1024, 1, 16)
    assert gqa.layers[0].wk.shape == (64, 16)
    assert gqa.forward([1, 2, 3], gqa.new_cache()).shape == (48,)


def test_same_seed_same_weights_and_default_logits_are_not_flat(model):
    again = TinyTransformer.random(ModelConfig(), 0)
    np.testing.assert_array_equal(again.lm_head, model.lm_head)
    logits = model.forward(np.arange(16), model.new_cache(), logits_for="all")
    # LOGIT_STD = 3: the target has clear preferences (see the module docstring).
    assert 2.0 < logits.std(axis=1).mean() < 4.5


def test_forward_refuses_overflow_and_bad_tokens(model):
    cache = KVCache.empty(ModelConfig(max_seq=8))
    small = TinyTransformer.random(ModelConfig(max_seq=8), 0)
    with pytest.raises(ValueError):
        small.forward(np.zeros(9, dtype=int), cache)
    with pytest.raises(ValueError):
        model.forward([48], model.new_cache())


def test_with_layers_is_early_exit(model):
    one = model.with_layers(1)
    assert one.config.n_layers == 1 and one.lm_head is model.lm_head
    with pytest.raises(UserError):
        model.with_layers(3)
