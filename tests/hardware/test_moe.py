"""Mixture of experts and MLA: config parsing, experts touched, memory, EP, KV, fallbacks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hardware import CostModel, Deployment, load_catalog, load_hf_config
from hardware.deployment import stage_layouts
from hardware.moe import a2a_bytes_per_token, distinct_experts
from sim.cli import main
from specdec.errors import UserError

# DeepSeek-V3's config.json fields (deepseek-ai/DeepSeek-V3), with fields SpecSim ignores
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False, "max_position_embeddings": 163840,
    "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}
MIXTRAL = {
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
    "tie_word_embeddings": False, "max_position_embeddings": 32768,
    "router_aux_loss_coef": 0.02,
}


def _write(tmp_path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(("raw", "catalog_id"), [(DEEPSEEK_V3, "deepseek-v3"),
                                                 (MIXTRAL, "mixtral-8x7b")])
def test_hf_moe_config_reads_like_the_catalog_entry(tmp_path, raw, catalog_id):
    cfg = load_hf_config(_write(tmp_path, raw))
    entry = load_catalog().model(catalog_id).config
    assert cfg.routed_experts == entry.routed_experts
    assert cfg.num_experts_per_tok == entry.num_experts_per_tok
    from hardware import model_shape

    assert model_shape(cfg) == model_shape(entry)


def test_deepseek_v3_layers_and_active_params():
    s = load_catalog().model("deepseek-v3").shape
    # first_k_dense_replace 3: layers 0-2 dense, the other 58 MoE
    assert s.moe_layers == (False,) * 3 + (True,) * 58
    assert (s.n_experts, s.top_k) == (256, 8)
    assert s.expert_params == 3 * 7168 * 2048  # gate, up, down of moe_intermediate_size


@pytest.mark.parametrize(("model_id", "active"), [
    ("mixtral-8x7b", 12.9e9), ("qwen3-30b-a3b", 3.3e9), ("deepseek-v3", 37e9)])
def test_active_params_match_the_model_cards(model_id, active):
    # Mixtral "12.9B active", Qwen3-30B-"A3B" 3.3B, DeepSeek-V3 "37B activated" (§1)
    assert load_catalog().model(model_id).shape.active_params == pytest.approx(active, rel=0.02)


@pytest.mark.parametrize(("update", "message"), [
    ({"num_experts_per_tok": 0}, "config.json: num_experts_per_tok: Input should be greater"),
    ({"num_experts_per_tok": 300}, "config.json: num_experts_per_tok 300 exceeds the 256"),
    ({"n_routed_experts": "many"}, "config.json: n_routed_experts: Input should be a valid"),
    ({"kv_lora_rank": None}, "config.json: deepseek_v3 models need kv_lora_rank"),
    ({"moe_intermediate_size": None}, "deepseek_v3 models need moe_intermediate_size"),
    ({"num_local_experts": 8}, "num_local_experts: deepseek_v3 names its routed experts "
                               "n_routed_experts"),
    ({"first_k_dense_replace": 61}, "deepseek_v3: no layer has experts"),
    ({"model_type": "llama"}, "n_routed_experts: llama models have no experts"),
])
def test_bad_moe_fields_are_one_line_errors_naming_the_field(tmp_path, update, message):
    raw = {k: v for k, v in {**DEEPSEEK_V3, **update}.items() if v is not None}
    path = _write(tmp_path, raw)
    with pytest.raises(UserError) as err:
        load_hf_config(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("experts", "top_k", "tokens"), [
    (256, 8, 1), (256, 8, 2), (256, 8, 4), (256, 8, 8), (256, 8, 64), (128, 8, 16),
    (8, 2, 3), (8, 2, 16)])
def test_distinct_experts_matches_a_seeded_monte_carlo_draw(experts, top_k, tokens):
    # each token picks top_k distinct experts uniformly (the k smallest of E random keys);
    # 4000 trials: the closed form lies within 4 standard errors of the draw's mean
    rng = np.random.default_rng(1234)
    trials = 4000
    touched = np.zeros((trials, experts), dtype=bool)  # [trials, E]
    for _ in range(tokens):
        picks = np.argpartition(rng.random((trials, experts)), top_k - 1, axis=1)[:, :top_k]
        np.put_along_axis(touched, picks, True, axis=1)
    counts = touched.sum(axis=1)  # [trials]
    se = counts.std(ddof=1) / np.sqrt(trials)
    expected = distinct_experts(tokens, top_k, experts)
    assert abs(counts.mean() - expected) <= 4 * se + 1e-12
    assert top_k <= expected <= min(experts, tokens * top_k)


def _cost(model="deepseek-v3", gpu="h200", tp=8, ep=1, bits=8, dtype="fp8", timing="roofline",
          **kw):
    cat = load_catalog()
    return CostModel(Deployment(cat.model(model), cat.gpu(gpu), tp=tp, ep=ep, weight_bits=bits,
                                compute_dtype=dtype, timing=timing, **kw), cat)


@pytest.mark.parametrize("timing", ["paper", "roofline", "measured"])
def test_a_verify_reads_more_experts_than_a_decode(timing):
    cost = _cost(timing=timing)
    decode = cost.pass_cost([1], [1024])
    verify = cost.pass_cost([4], [1024])
    assert decode.experts_touched == pytest.approx(8.0)
    assert verify.experts_touched == pytest.approx(256 * (1 - (1 - 8 / 256) ** 4))
    assert verify.hbm_bytes > decode.hbm_bytes and verify.seconds > decode.seconds
    # the extra bytes are the 22.5 more experts per MoE layer, 1/8 of each on a GPU
    extra = (verify.experts_touched - 8) * 58 * 3 * 7168 * 2048  # 8-bit: 1 byte each
    # plus 3 more tokens of 16-bit KV written on each of the 8 GPUs
    assert verify.hbm_bytes - decode.hbm_bytes == pytest.approx(extra + 3 * 576 * 61 * 2 * 8,
                                                                rel=1e-9)


def test_memory_counts_every_expert_whether_split_or_placed_whole():
    cat = load_catalog()
    m = cat.model("deepseek-v3")
    routed = 58 * 256 * m.shape.expert_params
    for ep in (1, 8):
        dep = Deployment(m, cat.gpu("h200"), tp=8, ep=ep, weight_bits=8, compute_dtype="fp8")
        (lay,) = stage_layouts(dep)
        assert lay.routed_params * 8 == routed  # 8 GPUs hold all 256 experts between them
        assert lay.stored_params > lay.streamed_params + lay.routed_params - 1
    cost = _cost()
    (resident,) = cost.resident_weight_bytes()
    assert resident * 8 >= m.shape.total_params  # every parameter, at 1 byte, somewhere
    # a decode reads 8 of the 256 experts: far less than is stored
    assert cost.pass_cost([1], [0]).hbm_bytes < 0.2 * resident * 8


def test_deepseek_v3_in_16_bits_does_not_fit_8_h200_and_in_fp8_does():
    with pytest.raises(UserError, match=r"deepseek-v3 does not fit on 8x1 h200: needs 15"):
        _cost(bits=16, dtype=None, kv_tokens=1024)
    assert _cost(kv_tokens=1024).kv_capacity_tokens() > 100_000


def test_a2a_bytes_are_zero_at_ep_1_and_positive_above():
    assert a2a_bytes_per_token(1, 8, 7168) == 0.0
    # ep 8: each GPU sends its 1/8 of the tokens' 8 copies, the 7/8 of them bound elsewhere
    assert a2a_bytes_per_token(8, 8, 7168) == pytest.approx(8 * 7168 * 2 * 7 / 8 / 8)


@pytest.mark.parametrize("timing", ["paper", "roofline"])
def test_ep_all_to_all_costs_time_only_with_data_parallel_attention(timing):
    # Qwen3-30B-A3B at tp 1: no all-reduces, so comm is the all-to-all alone
    plain = _cost("qwen3-30b-a3b", tp=1, ep=1, bits=16, dtype=None, timing=timing)
    dp = _cost("qwen3-30b-a3b", tp=1, ep=8, bits=16, dtype=None, timing=timing)
    assert dp.dep.n_gpus == 8 and dp.dep.attention_dp == 8
    a, b = plain.pass_cost([1] * 16, [512] * 16), dp.pass_cost([1] * 16, [512] * 16)
    assert a.comm_s == 0.0 and b.comm_s > 0.0
    # ep == tp: whole experts per GPU but no all-to-all (vLLM at data-parallel size 1)
    same = _cost("qwen3-30b-a3b", tp=4, ep=4, bits=16, dtype=None, timing=timing)
    split = _cost("qwen3-30b-a3b", tp=4, ep=1, bits=16, dtype=None, timing=timing)
    assert same.pass_cost([1], [0]).comm_s == split.pass_cost([1], [0]).comm_s


def test_bad_ep_is_refused_with_the_reason():
    with pytest.raises(UserError, match="ep: must divide tp 8 .* or be a multiple of it"):
        _cost(ep=12)
    with pytest.raises(UserError, match="ep: 4 below tp 8 splits the TP group .* vLLM does"):
        _cost(ep=4, framework="vllm")
    with pytest.raises(UserError, match="ep: 48 does not divide the 256 routed experts"):
        _cost(ep=48, tp=8)
    cat = load_catalog()
    with pytest.raises(UserError, match="llama-3-8b has no experts"):
        Deployment(cat.model("llama-3-8b"), cat.gpu("h100"), ep=2)


def test_mla_kv_bytes_per_token_is_the_latent_and_rope_key():
    # DeepSeek-V3: (kv_lora_rank 512 + qk_rope_head_dim 64) values per layer, 61 layers
    for bits in (16, 8):
        cost = _cost(kv_bits=bits)
        assert cost.kv_bytes_per_token == (512 + 64) * 61 * bits // 8
        # every TP rank caches the whole latent (it is not split by heads)
        assert cost.stage_kv_bytes_per_token == ((512 + 64) * 61 * bits / 8,)


def test_mla_attention_flops_per_key_are_the_absorbed_form():
    cost = _cost()
    a, b = cost.pass_cost([1], [0]), cost.pass_cost([1], [4096])
    # per head per key: q . [latent, rope] and the weighted sum over the latent
    per_key = 61 * 128 * (2 * (512 + 64) + 2 * 512)
    assert b.flops - a.flops == pytest.approx(per_key * 4096)


def test_auto_falls_back_to_roofline_where_the_tables_lack_the_moe_shape():
    # 8-bit weight-only (int8) MoE kernels and data-parallel attention are not tabulated
    for kw in ({"dtype": None}, {"ep": 16, "tp": 8}):
        cost = _cost(timing="auto", **kw)
        assert cost.timing.name == "roofline" and cost.timing.note.startswith("auto: roofline")
        assert cost.pass_cost([4], [1024]).seconds > 0
    with pytest.raises(UserError, match="timing: measured: no int8_wo MoE kernel tables"):
        _cost(timing="measured", dtype=None)
    assert _cost(timing="auto").timing.name == "measured"  # fp8 at tp 8: covered


@pytest.mark.parametrize("model_id", ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"])
@pytest.mark.parametrize("gpu", ["h100", "h200", "a100-80gb", "l40s"])
def test_auto_prices_every_moe_model_without_crashing(model_id, gpu):
    cat = load_catalog()
    m = cat.model(model_id)
    bits = m.weight_bits or 16
    for tp in (1, 2, 4, 8):
        try:
            dep = Deployment(m, cat.gpu(gpu), tp=tp, weight_bits=bits,
                             compute_dtype=m.compute_dtype)
            cost = CostModel(dep, cat)
        except UserError:
            continue  # does not fit, or tp does not divide the heads: refused in one line
        pc = cost.pass_cost([1, 4], [100, 2000])
        assert pc.seconds > 0 and pc.backend in ("measured", "roofline")


def test_hw_step_shows_more_experts_for_a_verify(capsys):
    args = ["hw", "step", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8",
            "--batch", "1", "--context", "1024"]
    out = {}
    for tokens in (1, 4):
        assert main([*args, "--tokens", str(tokens), "--json"]) == 0
        out[tokens] = json.loads(capsys.readouterr().out)
    assert out[1]["weight_bits"] == 8 and out[1]["compute_dtype"] == "fp8"  # the catalog's
    assert out[1]["experts_touched"] == pytest.approx(8.0)
    assert out[4]["experts_touched"] == pytest.approx(30.53, abs=0.01)
    assert out[4]["seconds"] > out[1]["seconds"]
    assert main([*args, "--tokens", "4", "--timing", "roofline"]) == 0
    assert "30.53 of 256 routed experts touched per MoE layer" in capsys.readouterr().out


def test_dense_hw_step_json_has_no_moe_keys(capsys):
    assert main(["hw", "step", "--model", "llama-3-8b", "--gpu", "h100", "--batch", "1",
                 "--context", "1024", "--tokens", "1", "--json", "--timing", "paper"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "experts_touched" not in out and "ep" not in out and "moe_kernel" not in out
    assert out["weight_bits"] == 16


def test_the_measured_moe_kernel_is_read_under_aiconfigurators_routing():
    """The fused-MoE kernel's table rows are those measured with the tokens spread as
    aiconfigurator-core models routing (a power law; exponent 1.01 for DeepSeek-V3, 1.2
    for the other MoE models), not the balanced rows, which at a decode's few tokens touch
    every expert: DeepSeek-V3 at TP 8 on an H200 under TensorRT-LLM, 32 tokens, reads
    fewer experts and takes less time."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel tables")
    from hardware import load_catalog
    from hardware.timing import aic
    from hardware.timing.measured_blocks import moe_distribution

    cat = load_catalog()
    assert moe_distribution(cat.model("deepseek-v3").config) == "power_law_1.01"
    assert moe_distribution(cat.model("mixtral-8x7b").config) == "power_law_1.2"
    assert moe_distribution(cat.model("qwen3-30b-a3b").config) == "power_law_1.2"
    args = ("h200_sxm", "trtllm", 7168, 2048, 8, 256, 8, 1, "fp8")
    i = aic.GRID.index(32)
    power, balanced = (aic.moe_table(*args, d)[0][i] for d in ("power_law_1.01", "balanced"))
    assert power < 0.7 * balanced


def test_shared_experts_beside_the_routed_ones_cost_the_longer_of_the_two():
    """A framework that runs an MoE layer's shared experts on a second stream in passes of
    at most ``shared_expert_stream_tokens`` tokens (TensorRT-LLM's CUDA-graph decode
    batches, vLLM's auxiliary stream) prices those passes' experts as the longer of the
    two; longer passes, and a framework that does not, as their sum."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel tables")
    from hardware import load_catalog
    from hardware.catalog import Catalog

    cat = load_catalog()
    assert cat.framework("trtllm").shared_expert_stream_tokens == 128
    assert cat.framework("vllm").shared_expert_stream_tokens == 256
    assert cat.framework("sglang").shared_expert_stream_tokens == 0
    fws = {**cat.frameworks, "trtllm": cat.framework("trtllm").model_copy(
        update={"shared_expert_stream_tokens": 0})}
    serial = Catalog(gpus=cat.gpus, links=cat.links, models=cat.models, frameworks=fws)

    def pass_s(catalog, tokens):
        dep = Deployment(model=catalog.model("deepseek-v3"), gpu=catalog.gpu("h200"), tp=8,
                         weight_bits=8, kv_bits=16, compute_dtype="fp8",
                         framework="trtllm", timing="measured")
        return CostModel(dep, catalog).uniform_pass_seconds(tokens, 1, 1024)

    for batch in (1, 32, 128):
        assert pass_s(cat, batch) < pass_s(serial, batch)
    for batch in (129, 144, 256):  # past the threshold, between grid points too (128, 160)
        assert pass_s(cat, batch) == pass_s(serial, batch)


@pytest.mark.parametrize("timing", ["measured", "roofline", "paper"])
def test_an_moe_verify_costs_at_least_reading_the_experts_it_adds(timing):
    """DeepSeek-V3 on 8 H200s at batch 1: a 4-token verify touches 30.5 routed experts per
    MoE layer where a decode touches 8 (tokens routed uniformly); whatever the backend, it
    costs at least the time to read those extra experts' weights at the datasheet HBM
    bandwidth more than the decode (the measured tables alone had it 1% dearer)."""
    from hardware.catalog import load_catalog
    from hardware.cost import CostModel
    from hardware.deployment import Deployment
    from hardware.moe import distinct_experts

    cat = load_catalog()
    model, gpu = cat.model("deepseek-v3"), cat.gpu("h200")
    cost = CostModel(Deployment(model=model, gpu=gpu, tp=8, weight_bits=8,
                                compute_dtype="fp8", timing=timing), cat)
    assert cost.backend == timing
    decode = cost.pass_seconds(np.array([1]), np.array([1024]))
    verify = cost.pass_seconds(np.array([4]), np.array([1024]))
    shape, cfg = model.shape, model.config
    extra = distinct_experts(4, shape.top_k, shape.n_experts) \
        - distinct_experts(1, shape.top_k, shape.n_experts)  # per MoE layer
    assert extra == pytest.approx(22.53, abs=0.01)
    per_gpu = extra * 3 * cfg.hidden_size * cfg.moe_intermediate_size * 1 / 8  # FP8, TP 8
    read_s = sum(shape.moe_layers) * per_gpu / gpu.hbm_bytes_per_s
    assert read_s == pytest.approx(1.5e-3, rel=0.01)
    assert verify - decode >= read_s


def test_moe_kernel_prices_the_routed_experts_with_that_kernels_rows():
    """deployment.moe_kernel: TensorRT-LLM's own B200 tables time DeepGEMM for block-FP8
    experts; trtllm_gen (its TRTLLM backend) comes from the framework whose tables time it
    for the shape (every row of it that kernel), the same floats as that framework's own
    table; deepgemm is TensorRT-LLM's own; a kernel no table times is refused in one line."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel tables")
    from hardware.deployment import MOE_KERNELS
    from hardware.timing import aic

    assert tuple(aic.MOE_KERNELS) == MOE_KERNELS
    args = ("b200_sxm", "trtllm", 7168, 2048, 8, 256, 8, 1, "fp8_block", "power_law_1.01")
    own, source = aic.moe_table(*args)
    assert source == "trtllm"
    assert aic.moe_table(*args, "deepgemm") == (own, "trtllm")
    gen, lender = aic.moe_table(*args, "trtllm_gen")
    assert lender in ("vllm", "sglang")
    assert gen == aic.moe_table("b200_sxm", lender, *args[2:])[0]
    i = aic.GRID.index(4)
    assert gen[i] < 0.5 * own[i]  # trtllm-gen against DeepGEMM at a decode's few tokens
    with pytest.raises(aic.TablesUnavailable, match="time the triton kernel for fp8_block"):
        aic.moe_table(*args, "triton")


def test_moe_kernel_reaches_the_pass_price_and_its_note(capsys):
    pytest.importorskip("aiconfigurator_core", reason="the kernel tables")
    args = ["hw", "step", "--model", "deepseek-v3", "--gpu", "b200", "--tp", "8",
            "--framework", "trtllm", "--batch", "8", "--context", "1024", "--json"]
    out = {}
    for kernel in (None, "deepgemm", "trtllm_gen"):
        assert main([*args] + (["--moe-kernel", kernel] if kernel else [])) == 0
        out[kernel] = json.loads(capsys.readouterr().out)
    assert out[None]["seconds"] == out["deepgemm"]["seconds"]
    assert out["trtllm_gen"]["seconds"] < 0.8 * out[None]["seconds"]
    assert out["trtllm_gen"]["moe_kernel"] == "trtllm_gen"
    assert "MoE trtllm_gen kernel tables of" in out["trtllm_gen"]["note"]
    assert "(borrowed)" in out["trtllm_gen"]["note"]
    # measured asked for, the kernel not timed for the shape: one line, exit 2
    assert main([*args, "--moe-kernel", "triton", "--timing", "measured"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "time the triton kernel" in err


@pytest.mark.parametrize(("model_id", "kernel", "message"), [
    ("deepseek-v3", "marlin", "moe_kernel: must be one of trtllm_gen, deepgemm, cutlass, triton"),
    ("llama-3-8b", "trtllm_gen", "moe_kernel: llama-3-8b has no routed experts"),
])
def test_a_bad_moe_kernel_is_refused_naming_the_field(model_id, kernel, message):
    cat = load_catalog()
    m = cat.model(model_id)
    with pytest.raises(UserError, match=message):
        Deployment(m, cat.gpu("b200"), tp=8, weight_bits=m.weight_bits or 16,
                   compute_dtype=m.compute_dtype, moe_kernel=kernel)


@pytest.mark.parametrize(("label", "family"), [
    ("sglang_flashinfer_trtllm_moe", "trtllm_gen"),
    ("vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic", "trtllm_gen"),
    ("vllm_compressedtensorsw4a4nvfp4moe_flashinfer_cutlass_flashinferexperts", "cutlass"),
    ("moe_torch_flow_cutlass", "cutlass"), ("deepgemm", "deepgemm"),
    ("moe_torch_flow_triton_fp8_block", "triton"), ("sglang_fused_moe_triton", "triton"),
    ("vllm_fused_moe", "triton"), ("moe_torch_flow", None), ("sglang_marlin_moe", None),
])
def test_each_table_kernel_label_has_its_family(label, family):
    from hardware.timing import aic

    assert aic.moe_kernel_family(label) == family


def test_the_min_latency_view_does_not_hide_the_cutlass_rows():
    """TensorRT-LLM's B200 NVFP4 MoE rows are CUTLASS, with min-latency rows the tables'
    engine keeps in a view of their own: cutlass is TensorRT-LLM's own kernel there."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel tables")
    from hardware.timing import aic

    args = ("b200_sxm", "trtllm", 7168, 2048, 8, 256, 8, 1, "nvfp4", "power_law_1.01")
    assert aic.moe_table(*args, "cutlass") == aic.moe_table(*args)
    assert aic.moe_table(*args)[1] == "trtllm"
    # vLLM's fused_moe rows are its Triton kernel: its own, not borrowed
    mix = ("a100_sxm", "vllm", 4096, 14336, 2, 8, 1, 1, "bfloat16", "power_law_1.2")
    assert aic.moe_table(*mix, "triton")[1] == "vllm"
