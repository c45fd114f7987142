"""Models whose attention is not full on every layer: gpt-oss's sliding windows, Llama-4's
chunked layers, Qwen3-Next's linear attention -- their layers, KV, attention cost, memory."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hardware import load_catalog, load_hf_config
from hardware.catalog import ModelSpec
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.layers import FULL, LINEAR, WINDOW
from hardware.models import ModelConfig
from hardware.timing.base import windowed
from specdec.errors import UserError

CAT = load_catalog()

# Active parameters per token against the model cards, with what each card counts and the
# tolerance its digits allow: gpt-oss (arXiv:2508.10925 Table 1, "5.13B" / "3.61B" active,
# the unembedding counted, the input embedding not); GLM-4.5 ("32B" / "12B" active, without
# the embedding and lm_head); Llama-4 ("17B" active, everything a token touches); Qwen3-Next
# ("3B" active, one digit: 3.25B without the embedding and lm_head, +8%); DeepSeek-R1 and
# V3.1 (DeepSeek-V3's "37B", everything).
ACTIVE = {
    "gpt-oss-120b": (5.13e9, 0.001, "embedding"),
    "gpt-oss-20b": (3.61e9, 0.001, "embedding"),
    "glm-4.5": (32e9, 0.01, "embedding+head"),
    "glm-4.5-air": (12e9, 0.02, "embedding+head"),
    "llama-4-scout": (17e9, 0.015, ""),
    "llama-4-maverick": (17e9, 0.015, ""),
    "qwen3-next-80b-a3b": (3e9, 0.09, "embedding+head"),
    "deepseek-r1": (37e9, 0.02, ""),
    "deepseek-v3.1": (37e9, 0.02, ""),
}


@pytest.mark.parametrize("model_id", sorted(ACTIVE))
def test_active_params_match_the_model_cards(model_id):
    size, rel, without = ACTIVE[model_id]
    s = CAT.model(model_id).shape
    active = s.active_params
    if "embedding" in without:
        active -= s.embedding_params
    if "head" in without:
        active -= s.hidden * CAT.model(model_id).config.vocab_size
    assert active == pytest.approx(size, rel=rel)


def test_gpt_oss_120b_counts_exactly_the_published_total():
    # gpt-oss model card Table 1: 116.83B total; the count, by hand: per layer attention
    # (q/k/v/o with biases, 64 sinks), router (+ bias), 128 experts with biases, 2 norms
    h, q, kv, inter, e = 2880, 64 * 64, 8 * 64, 2880, 128
    attn = h * q + 2 * h * kv + q * h + q + 2 * kv + h + 64
    layer = attn + e * h + e + e * (3 * h * inter + 2 * inter + h) + 2 * h
    total = 36 * layer + 2 * 201088 * h + h
    s = CAT.model("gpt-oss-120b").shape
    assert s.total_params == total == 116_829_156_672


def test_layer_kinds_of_each_family():
    oss = CAT.model("gpt-oss-120b").shape
    assert oss.layer_kinds[:4] == (WINDOW, FULL, WINDOW, FULL) and oss.window == 128
    assert (oss.n_window_layers, oss.n_linear_layers) == (18, 0)
    scout = CAT.model("llama-4-scout").shape
    assert scout.layer_kinds[:8] == (WINDOW,) * 3 + (FULL,) + (WINDOW,) * 3 + (FULL,)
    assert scout.window == 8192 and scout.n_window_layers == 36
    nxt = CAT.model("qwen3-next-80b-a3b").shape
    assert nxt.layer_kinds[:4] == (LINEAR,) * 3 + (FULL,) and nxt.n_linear_layers == 36
    assert CAT.model("glm-4.5").shape.layer_kinds == ()  # full attention everywhere
    maverick = CAT.model("llama-4-maverick").shape
    assert maverick.moe_layers[:4] == (False, True, False, True)


def test_kv_bytes_per_token_by_attention_kind_by_hand():
    # 16-bit KV: K and V x KV heads x head_dim x 2 bytes per layer
    oss = CostModel(Deployment(model=CAT.model("gpt-oss-120b"), gpu=CAT.gpu("h200"),
                               weight_bits=8, timing="roofline"), CAT)
    assert oss.kv_bytes_per_token == 18 * 2 * 8 * 64 * 2 == 36_864  # full layers only
    c = oss._counts[0]
    assert c.window_kv_bytes_per_token == 18 * 2 * 8 * 64 * 2 and c.window == 128
    scout = CostModel(Deployment(model=CAT.model("llama-4-scout"), gpu=CAT.gpu("h200"),
                                 tp=4, timing="roofline"), CAT)
    # per GPU at TP 4: 2 of the 8 KV heads
    assert scout.stage_kv_bytes_per_token == (12 * 2 * 2 * 128 * 2,)
    assert scout._counts[0].window_kv_bytes_per_token == 36 * 2 * 2 * 128 * 2
    nxt = CostModel(Deployment(model=CAT.model("qwen3-next-80b-a3b"), gpu=CAT.gpu("h200"),
                               tp=2, timing="roofline"), CAT)
    assert nxt.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2
    # Gated DeltaNet state per sequence per layer: 32 value heads x 128 x 128 recurrent +
    # 3 steps of the conv's 2 x 2048 + 4096 channels, 16-bit, split over TP 2
    state = 32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)
    assert nxt._counts[0].state_bytes_per_seq == 36 * state * 2 / 2
    assert nxt._counts[0].window_kv_bytes_per_token == 0


def test_windowed_sums_are_exact_for_a_uniform_batch_and_high_for_a_mixed_one():
    w = 128.0
    for ctx in (10, 127, 128, 500, 10_000):  # 4 sequences decoding one token each
        new, kv, keys = 4.0, 4.0 * (ctx + 1), 4.0 * (ctx + 1)
        read, att = windowed(new, kv, keys, 4.0, w)
        assert read == 4 * (min(ctx, w) + 1) and att == 4 * min(ctx + 1, w)
    # one short and one long sequence: never below the per-sequence sums
    ctxs = np.array([10.0, 1000.0])
    read, att = windowed(2.0, float(ctxs.sum() + 2), float((ctxs + 1).sum()), 2.0, w)
    assert read >= float(np.minimum(ctxs, w).sum() + 2)
    assert att >= float(np.minimum(ctxs + 1, w).sum())


def _all_window_model() -> ModelSpec:
    """gpt-oss-20b with every layer a 128-token window: its attention cannot grow."""
    cfg = CAT.model("gpt-oss-20b").config.model_dump()
    cfg["layer_types"] = ["sliding_attention"] * cfg["num_hidden_layers"]
    return ModelSpec(id="oss-all-window", source="test", config=ModelConfig(**cfg))


def test_sliding_window_attention_cost_is_flat_beyond_the_window():
    cost = CostModel(Deployment(model=_all_window_model(), gpu=CAT.gpu("h100"),
                                weight_bits=4, timing="roofline"), CAT)
    decode = [cost.uniform_pass_seconds(16, 1, ctx) for ctx in (64, 127, 128, 1000, 30_000)]
    assert decode[0] < decode[1] < decode[2]  # below the window: more context, more cost
    assert decode[2] == decode[3] == decode[4]  # at and beyond it: flat
    prefill = [cost.uniform_pass_seconds(1, 512, ctx) for ctx in (1000, 20_000)]
    assert prefill[0] == prefill[1]
    # the breakdown's bytes and FLOPs too: 16 sequences read 16 x 128 cached entries + 16 new
    near, far = (cost.pass_cost(np.ones(16), np.full(16, ctx)) for ctx in (128.0, 9000.0))
    assert near.hbm_bytes == far.hbm_bytes and near.flops == far.flops
    c = cost._counts[0]
    assert far.hbm_bytes == pytest.approx(
        c.weight_bytes + c.routed_bytes * (1 - c.expert_miss ** 16)
        + c.window_kv_bytes_per_token * 16 * 129)
    # gpt-oss itself: half its layers are full, so its decode still grows, by the full
    # layers' KV alone
    oss = CostModel(Deployment(model=CAT.model("gpt-oss-20b"), gpu=CAT.gpu("h100"),
                               weight_bits=4, timing="roofline"), CAT)
    grow = oss.uniform_pass_seconds(16, 1, 30_000) - oss.uniform_pass_seconds(16, 1, 1000)
    flat = cost.uniform_pass_seconds(16, 1, 30_000) - cost.uniform_pass_seconds(16, 1, 1000)
    assert grow > 0 and flat == 0


def test_linear_attention_reads_a_state_per_sequence_not_per_token():
    cost = CostModel(Deployment(model=CAT.model("qwen3-next-80b-a3b"), gpu=CAT.gpu("h200"),
                                tp=2, timing="roofline"), CAT)
    b = cost.pass_cost(np.ones(8), np.full(8, 1000.0))
    c = cost._counts[0]
    # memory_s holds the full layers' KV, and the state read and written per sequence
    more = cost.pass_cost(np.ones(16), np.full(16, 500.0))  # same KV, twice the sequences
    assert more.memory_s > b.memory_s
    assert c.state_bytes_per_seq > 0 and c.kv_bytes_per_token == 12 * 2 * 1 * 256 * 2


def test_kv_capacity_keeps_the_bounded_memory_of_max_seqs_sequences():
    dep = Deployment(model=CAT.model("gpt-oss-120b"), gpu=CAT.gpu("h100"), weight_bits=4,
                     timing="roofline", max_seqs=64)
    cost = CostModel(dep, CAT)
    c = cost._counts[0]
    free = dep.usable_bytes_per_gpu - cost.resident_weight_bytes()[0]
    # many tokens: every window layer holds its full window for each of the 64 sequences
    expect = (free - 64 * 128 * c.window_kv_bytes_per_token) / c.kv_bytes_per_token
    assert cost.kv_capacity_tokens() == int(expect)
    cost.check_memory(cost.kv_capacity_tokens())
    with pytest.raises(UserError, match="does not fit"):
        cost.check_memory(cost.kv_capacity_tokens() + 1)
    # a plain model keeps nothing per sequence
    plain = CostModel(Deployment(model=CAT.model("llama-3-8b"), gpu=CAT.gpu("h100")), CAT)
    assert plain.bounded_kv_bytes(0, 10**6) == 0.0


def test_measured_and_paper_timings_do_not_price_window_or_linear_layers():
    auto = CostModel(Deployment(model=CAT.model("gpt-oss-20b"), gpu=CAT.gpu("h100")), CAT)
    assert auto.backend == "roofline" and "window" in auto.timing.note
    with pytest.raises(UserError, match="paper"):
        CostModel(Deployment(model=CAT.model("gpt-oss-20b"), gpu=CAT.gpu("h100"),
                             timing="paper"), CAT)


def test_llama_4_config_json_nests_its_language_model(tmp_path):
    text = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
            "intermediate_size_mlp": 16384, "num_hidden_layers": 48,
            "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
            "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
            "max_position_embeddings": 10485760, "use_qk_norm": True,
            "rope_scaling": {"rope_type": "llama3"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["Llama4ForConditionalGeneration"],
                                "model_type": "llama4", "text_config": text,
                                "vision_config": {"hidden_size": 1408}}))
    cfg = load_hf_config(path)
    assert cfg == CAT.model("llama-4-scout").config.model_copy(
        update={"tie_word_embeddings": None})


def test_a_qwen_sliding_window_config_is_modelled_not_refused(tmp_path):
    cfg = CAT.model("qwen3-1.7b").config.model_dump(exclude_none=True)
    cfg.update(use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    shape = ModelSpec(id="q", source="t", config=load_hf_config(path)).shape
    assert shape.kinds_of(0, 28) == (20, 8, 0) and shape.window == 4096


@pytest.mark.parametrize(("update", "expect"), [
    ({"layer_types": ["full_attention"] * 3}, "layer_types: lists 3 layers, not the 24"),
    ({"layer_types": ["linear_attention"] * 24}, "linear attention is modelled as"),
    ({"sliding_window": None}, "sliding_window: window layers"),
])
def test_bad_attention_kinds_are_one_line_errors(tmp_path, update, expect):
    cfg = {**CAT.model("gpt-oss-20b").config.model_dump(exclude_none=True), **update}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=expect) as err:
        load_hf_config(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
