"""Parameter counts against the published totals, and Hugging Face config loading."""

from __future__ import annotations

import json

import pytest

from hardware import load_catalog, load_hf_config, model_shape
from hardware.models import ModelConfig
from specdec.errors import UserError

# Published parameter totals (model cards / HF `num_parameters()`), exact.
PUBLISHED = {
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,  # Llama-3-8B's shape, longer positions
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "tinyllama-1.1b": 1_100_048_384,
    "opt-125m": 125_239_296,
    "opt-6.7b": 6_658_473_984,
}


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_total_params_match_published(model_id):
    assert load_catalog().model(model_id).shape.total_params == PUBLISHED[model_id]


# Sizes published to a few digits only (LLaMA paper Table 2, the OPT paper, model names):
# the catalog's totals are within 1% of them (LLaMA-7B: 6.738B for "6.7B", 0.6%). OPT-13B
# is the exception: 12.85B against its nominal "13B" (1.1%), so it gets 1.2%.
NOMINAL = {
    "llama-7b": (6.7e9, 0.01), "llama-13b": (13.0e9, 0.01), "llama-30b": (32.5e9, 0.01),
    "llama-65b": (65.2e9, 0.01), "llama-68m": (68e6, 0.01), "opt-30b": (30e9, 0.01),
    "opt-66b": (66e9, 0.01), "opt-175b": (175e9, 0.01),
    "llama-3.1-405b": (405e9, 0.01),
    "opt-13b": (13e9, 0.012), "vicuna-7b": (6.7e9, 0.01), "vicuna-13b": (13.0e9, 0.01),
    "vicuna-33b": (32.5e9, 0.01),
    # mixture of experts: the model cards' totals (Mixtral "46.7B", Qwen3 "30.5B" and "235B",
    # DeepSeek-V3 "671B" without its MTP module)
    "mixtral-8x7b": (46.7e9, 0.01), "qwen3-30b-a3b": (30.5e9, 0.01),
    "qwen3-235b-a22b": (235e9, 0.01),
    "qwen3-32b": (32.8e9, 0.01),  # dense; 31.2B without embedding and lm_head (below)
    # the Qwen3 drafts' cards: "1.7B" (1.72B: 1.2%, the card's two digits) and "4.0B"
    "qwen3-1.7b": (1.7e9, 0.015), "qwen3-4b": (4.0e9, 0.01),
    "deepseek-v3": (671e9, 0.01),
    # Kimi-K2's card: "1 trillion total parameters" (one digit: 1.026T), "32 billion
    # activated" (checked below)
    "kimi-k2": (1.0e12, 0.03),
    # DeepSeek-V3's architecture, its published 671B
    "deepseek-r1": (671e9, 0.01), "deepseek-v3.1": (671e9, 0.01),
    # gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B and 20.91B, to half its last digit
    "gpt-oss-120b": (116.83e9, 0.00005), "gpt-oss-20b": (20.91e9, 0.00025),
    # GLM-4.5's "355B" (352.8B without the MTP layer) and GLM-4.5-Air's "106B"
    "glm-4.5": (355e9, 0.01), "glm-4.5-air": (106e9, 0.01),
    # Llama-4 Scout's "109B" includes its vision encoder, which is not counted (107.8B);
    # Maverick's "400B"
    "llama-4-scout": (109e9, 0.015), "llama-4-maverick": (400e9, 0.01),
    # Qwen3-Next's "80B" (79.7B without the MTP layer)
    "qwen3-next-80b-a3b": (80e9, 0.01),
}


@pytest.mark.parametrize("model_id", sorted(NOMINAL))
def test_total_params_match_nominal_sizes(model_id):
    size, rel = NOMINAL[model_id]
    assert load_catalog().model(model_id).shape.total_params == pytest.approx(size, rel=rel)


def test_every_catalog_model_is_checked_and_vicuna_has_llama_1_shapes():
    cat = load_catalog()
    assert set(cat.models) == set(PUBLISHED) | set(NOMINAL)
    for vicuna, llama in (("vicuna-7b", "llama-7b"), ("vicuna-13b", "llama-13b"),
                          ("vicuna-33b", "llama-30b")):
        assert cat.model(vicuna).shape == cat.model(llama).shape


def test_streamed_params_exclude_input_embedding_but_keep_lm_head():
    cat = load_catalog()
    untied = cat.model("llama-3-8b").shape
    # untied: the 128256 x 4096 input table is not streamed; the lm_head (same size) is
    assert untied.streamed_params == PUBLISHED["llama-3-8b"] - 128256 * 4096
    tied = cat.model("llama-3.2-1b").shape
    # tied: stored once, but streamed every pass as the lm_head -> every parameter is read
    assert tied.streamed_params == PUBLISHED["llama-3.2-1b"]
    opt = cat.model("opt-125m").shape
    # OPT: token table tied to the lm_head; the learned position table (2050 rows) is gathered
    assert opt.streamed_params == PUBLISHED["opt-125m"] - 2050 * 768


def test_kv_bytes_per_token_of_llama_3_8b_is_128_kib():
    # lecture §7.2: "1024 tokens x 128 KB"; 32 layers x 2 x 8 KV heads x 128 x 2 bytes
    assert load_catalog().model("llama-3-8b").shape.kv_values_per_token * 2 == 128 * 1024


def test_opt_mlp_and_biases_differ_from_llama():
    cat = load_catalog()
    opt = cat.model("opt-6.7b").shape
    h, f = 4096, 16384
    # q,k,v,o with biases + fc1/fc2 with biases + two LayerNorms (weight and bias)
    assert opt.layer_params == 4 * (h * h + h) + (h * f + f) + (f * h + h) + 4 * h
    llama = cat.model("llama-2-7b").shape
    assert llama.layer_params == 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096


def _write(tmp_path, body):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(body))
    return path


LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rope_theta": 500000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "rms_norm_eps": 1e-05, "bos_token_id": 128000,
}


def test_hf_config_loads_and_ignores_unrelated_fields(tmp_path):
    cfg = load_hf_config(_write(tmp_path, LLAMA3_8B_CONFIG))
    assert model_shape(cfg) == load_catalog().model("llama-3-8b").shape


def test_catalog_model_accepts_a_config_path(tmp_path):
    path = _write(tmp_path, LLAMA3_8B_CONFIG)
    spec = load_catalog().model(str(path))
    assert spec.shape.total_params == PUBLISHED["llama-3-8b"]


def test_a_config_with_weight_blocks_is_block_scaled_fp8(tmp_path):
    """Of a config.json's quantization_config only weight_block_size and activation_scheme
    are read: blocks make an FP8 deployment of the checkpoint block-scaled (DeepSeek-V3's);
    without them, per-tensor, with its activation scales computed every pass where the
    scheme is dynamic."""
    cat = load_catalog()
    assert cat.model(str(_write(tmp_path, LLAMA3_8B_CONFIG))).fp8_scales == "tensor"
    quant = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}
    body = {**LLAMA3_8B_CONFIG, "quantization_config": quant}
    # per-tensor weights with activation scales computed every pass (vLLM's Fp8Config)
    assert cat.model(str(_write(tmp_path, body))).fp8_scales == "dynamic"
    body["quantization_config"] = {**quant, "activation_scheme": "static"}
    assert cat.model(str(_write(tmp_path, body))).fp8_scales == "tensor"
    body["quantization_config"] = {**quant, "weight_block_size": [128, 128]}
    assert cat.model(str(_write(tmp_path, body))).fp8_scales == "block"


def test_a_config_json_is_priced_in_the_precision_its_checkpoint_ships(tmp_path):
    """An FP8 checkpoint's config.json (quant_method fp8) is 8 bits with FP8 compute by
    default, as a catalog entry of one says (it was 16 bits unless told); one without a
    quantization_config, 16."""
    cat = load_catalog()
    plain = cat.model(str(_write(tmp_path, LLAMA3_8B_CONFIG)))
    assert (plain.weight_bits, plain.compute_dtype, plain.ships_fp8()) == (None, None, False)
    body = {**LLAMA3_8B_CONFIG, "quantization_config": {"quant_method": "fp8",
                                                         "weight_block_size": [128, 128]}}
    fp8 = cat.model(str(_write(tmp_path, body)))
    assert (fp8.weight_bits, fp8.compute_dtype, fp8.ships_fp8()) == (8, "fp8", True)
    assert fp8.precision(None, None) == (8, "fp8") and plain.precision(None, None)[0] == 16


def test_opt_config_defaults_to_tied_embeddings(tmp_path):
    body = {"model_type": "opt", "hidden_size": 768, "ffn_dim": 3072, "num_hidden_layers": 12,
            "num_attention_heads": 12, "vocab_size": 50272, "max_position_embeddings": 2048,
            "word_embed_proj_dim": 768, "do_layer_norm_before": True}
    cfg = load_hf_config(_write(tmp_path, body))
    assert cfg.tied
    assert model_shape(cfg).total_params == PUBLISHED["opt-125m"]


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        ({k: v for k, v in LLAMA3_8B_CONFIG.items() if k != "hidden_size"},
         "config.json: hidden_size: Field required"),
        ({**LLAMA3_8B_CONFIG, "model_type": "gpt2"}, "config.json: model_type: Input should be"),
        ({**LLAMA3_8B_CONFIG, "num_hidden_layers": 0}, "num_hidden_layers: Input should be"),
        ({**LLAMA3_8B_CONFIG, "num_key_value_heads": 5}, "not a multiple of num_key_value_heads 5"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_hf_config_is_one_line_naming_file_and_field(tmp_path, body, expect):
    path = _write(tmp_path, body)
    with pytest.raises(UserError) as err:
        load_hf_config(path)
    msg = str(err.value)
    assert expect in msg and "\n" not in msg and str(path) in msg


def test_unreadable_and_invalid_json(tmp_path):
    with pytest.raises(UserError, match="cannot read model config"):
        load_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="bad.json: not valid JSON"):
        load_hf_config(bad)


def test_non_utf8_config_json_is_one_line_naming_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "llama", "_name": "\xff"}')
    with pytest.raises(UserError) as err:
        load_hf_config(path)
    assert str(err.value).startswith(f"{path}: not a UTF-8 text file (byte 0xff")


def test_hugging_face_ids_are_aliases_and_an_unknown_one_says_how_to_add_it():
    cat = load_catalog()
    assert cat.model("meta-llama/Llama-3.1-8B-Instruct").id == "llama-3.1-8b"
    assert cat.model("META-LLAMA/llama-3.1-8b-instruct").id == "llama-3.1-8b"
    with pytest.raises(UserError, match="unknown model 'org/x'.*config.json path.*catalog"):
        cat.model("org/x")


def test_qwen3_dense_is_llamas_block_with_q_and_k_norms(tmp_path):
    cat = load_catalog()
    qwen = cat.model("qwen3-32b")
    shape = qwen.shape
    # the model card's 31.2B non-embedding parameters leave out the lm_head too
    assert shape.total_params - shape.embedding_params - 151936 * 5120 == pytest.approx(
        31.2e9, rel=0.002)
    as_llama = ModelConfig(**{**qwen.config.model_dump(exclude_unset=True),
                              "model_type": "llama"})
    # q_norm and k_norm: head_dim weights each, per layer
    assert shape.layer_params - model_shape(as_llama).layer_params == 2 * 128
    fields = qwen.config.model_dump(exclude_unset=True)
    cfg = tmp_path / "config.json"
    # sliding windows from layer 32 on: 32 full layers, 32 of a 4096-token window
    cfg.write_text(json.dumps({**fields, "use_sliding_window": True, "sliding_window": 4096,
                               "max_window_layers": 32}))
    windowed = model_shape(load_hf_config(cfg))
    assert windowed.kinds_of(0, 64) == (32, 32, 0) and windowed.window == 4096
    # switched on, but no layer reaches max_window_layers (the released configs' 64 of 64)
    cfg.write_text(json.dumps({**fields, "use_sliding_window": True, "sliding_window": 4096,
                               "max_window_layers": 64}))
    assert model_shape(load_hf_config(cfg)) == shape
    # head_dim is required: Qwen3's is not hidden / heads (5120 / 64 = 80, not 128)
    cfg.write_text(json.dumps({k: v for k, v in fields.items() if k != "head_dim"}))
    with pytest.raises(UserError, match="qwen3 models need head_dim"):
        load_hf_config(cfg)


def test_kimi_k2_is_deepseek_v3s_model_with_its_own_sizes():
    """Its config.json says model_type kimi_k2 and architecture DeepseekV3ForCausalLM
    (vLLM runs it as DeepSeek-V3): read as deepseek_v3, the same shape as the catalog
    entry's, 32.9B parameters active (the card's "32 billion")."""
    import importlib.util
    from pathlib import Path

    from hardware.models import load_hf_config, model_shape

    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None:
        pytest.skip("the vendored config.json ships with aiconfigurator-core")
    path = Path(spec.submodule_search_locations[0]) / "model_configs" / \
        "moonshotai--Kimi-K2-Instruct_config.json"
    cfg = load_hf_config(path)
    assert cfg.model_type == "deepseek_v3"
    entry = load_catalog().model("moonshotai/Kimi-K2-Instruct")
    shape = entry.shape
    assert model_shape(cfg) == shape and entry.weight_bits == 8
    routed = sum(shape.moe_layers) * shape.n_experts * shape.expert_params  # every expert
    active = shape.total_params - routed * (1 - shape.top_k / shape.n_experts)
    assert active == pytest.approx(32e9, rel=0.03)
