"""FP4 weights (NVFP4, MXFP4): bytes with their block scales, W4A4 at the FP4 peak on
Blackwell, weight-only on Hopper, and gpt-oss's MXFP4 experts on one H100."""

from __future__ import annotations

import pytest

from hardware import load_catalog
from hardware.cost import CostModel
from hardware.deployment import FP4_BITS, Deployment, stage_layouts
from specdec.errors import UserError

CAT = load_catalog()


def test_fp4_bits_include_the_block_scales():
    # NVFP4: 16 E2M1 values (64 bits) share one FP8 E4M3 scale (8 bits): 72 / 16 = 4.5;
    # MXFP4: 32 E2M1 values (128 bits) share one E8M0 scale (8 bits): 136 / 32 = 4.25
    assert FP4_BITS == {"nvfp4": 72 / 16, "mxfp4": 136 / 32}


@pytest.mark.parametrize(("fmt", "bits"), [("nvfp4", 4.5), ("mxfp4", 4.25), (None, 4.0)])
def test_fp4_weight_bytes_by_hand(fmt, bits):
    model = CAT.model("llama-3-8b")
    dep = Deployment(model=model, gpu=CAT.gpu("h100"), weight_bits=4, fp4_format=fmt,
                     timing="roofline")
    s = model.shape
    # the embedding and the lm_head (with the final norm) stay 16-bit, every other weight
    # at the format's bits
    kept = 2 * 128256 * 4096 + 4096
    expect = (s.total_params - kept) * bits / 8 + kept * 2
    assert CostModel(dep, CAT).resident_weight_bytes()[0] == int(expect)


def test_gpt_oss_quantizes_only_its_experts_and_fits_one_h100():
    model = CAT.model("gpt-oss-120b")
    dep = Deployment(model=model, gpu=CAT.gpu("h100"), weight_bits=4)  # the model's MXFP4
    assert dep.fp4 == "mxfp4" and dep.experts_only and dep.quantized_scope == "experts"
    s = model.shape
    routed = s.n_moe_layers * s.n_experts * s.expert_params
    expect = routed * 4.25 / 8 + (s.total_params - routed) * 2
    weights = CostModel(dep, CAT).resident_weight_bytes()[0]
    assert weights == int(expect)
    # 60.7 GiB, the model card's 60.8 GiB checkpoint; it fits the 72 GiB vLLM leaves at
    # --gpu-memory-utilization 0.9, with room for the KV of ~300k tokens
    assert weights / 2**30 == pytest.approx(60.8, abs=0.15)
    cost = CostModel(dep, CAT)
    assert cost.kv_capacity_tokens() > 250_000
    assert stage_layouts(dep)[0].unquantized_params == s.total_params - routed
    # in 16 bits it does not: 218 GiB
    with pytest.raises(UserError, match=r"gpt-oss-120b does not fit on 1x1 h100.*at 16 bits"):
        CostModel(Deployment(model=model, gpu=CAT.gpu("h100")), CAT)


def test_fp4_compute_runs_at_the_fp4_peak_on_blackwell_only():
    model = CAT.model("llama-3-8b")

    def prefill(gpu, dtype):
        dep = Deployment(model=model, gpu=CAT.gpu(gpu), weight_bits=4, fp4_format="nvfp4",
                         compute_dtype=dtype, timing="roofline")
        return CostModel(dep, CAT).pass_cost([4096.0], [0.0])

    w4a4, weight_only = prefill("b200", "fp4"), prefill("b200", None)
    # compute-bound: the FP4 peak is 4x the 16-bit one (9,000 / 2,250 TFLOP/s)
    assert weight_only.compute_s / w4a4.compute_s > 2.5
    assert w4a4.seconds < weight_only.seconds
    with pytest.raises(UserError, match="gpu h100 has no FP4 peak"):
        prefill("h100", "fp4")
    with pytest.raises(UserError, match="needs FP4 weights"):
        Deployment(model=model, gpu=CAT.gpu("b200"), weight_bits=4, compute_dtype="fp4")
    with pytest.raises(UserError, match="fp4_format: FP4 weights need weight_bits 4, got 8"):
        Deployment(model=model, gpu=CAT.gpu("b200"), weight_bits=8, fp4_format="mxfp4")


def test_mxfp4_and_weight_only_fp4_are_priced_by_the_roofline_not_the_tables():
    for gpu, fmt, dtype in (("h100", "mxfp4", None), ("b200", "nvfp4", None),
                            ("b200", "mxfp4", "fp4")):
        dep = Deployment(model=CAT.model("llama-3-8b"), gpu=CAT.gpu(gpu), weight_bits=4,
                         fp4_format=fmt, compute_dtype=dtype)
        cost = CostModel(dep, CAT)
        assert cost.backend == "roofline" and fmt in cost.timing.note, (gpu, fmt, dtype)


def _nvfp4(model: str, timing: str, **kw) -> CostModel:
    dep = Deployment(model=CAT.model(model), gpu=CAT.gpu("b200"), weight_bits=4,
                     fp4_format="nvfp4", compute_dtype="fp4", timing=timing, **kw)
    return CostModel(dep, CAT)


def _gemm_s(cost: CostModel) -> float:
    """The GEMM seconds (blocks and lm_head) of a decode step of 8 sequences."""
    return cost.pass_cost([1.0] * 8, [1024.0] * 8).parts["gemm_s"]


def test_nvfp4_w4a4_reads_the_tables_nvfp4_rows_on_blackwell():
    from hardware.timing import aic
    from hardware.timing.measured_blocks import block_gemms

    cost = _nvfp4("llama-3.1-8b", "measured")
    assert cost.backend == "measured" and "nvfp4 GEMMs" in cost.timing.note
    bf16 = CostModel(Deployment(model=CAT.model("llama-3.1-8b"), gpu=CAT.gpu("b200"),
                                timing="measured"), CAT)
    # the 32 blocks' GEMMs are the tables' NVFP4 rows instead of their BF16 ones (the
    # lm_head is 16-bit in both)
    g, i = block_gemms(cost.dep), aic.GRID.index(8)
    rows = aic.layer_table("b200_sxm", "vllm", g, "nvfp4")[i] \
        - aic.layer_table("b200_sxm", "vllm", g, "bfloat16")[i]
    assert rows != 0.0
    assert _gemm_s(cost) - _gemm_s(bf16) == pytest.approx(32 * rows, rel=1e-9)


def test_nvfp4_mlps_keep_the_attention_gemms_in_bf16():
    from hardware.timing import aic
    from hardware.timing.measured_blocks import block_gemms

    every = _nvfp4("llama-3.1-8b", "measured")
    mlp = _nvfp4("llama-3.1-8b", "measured", quantized="mlp")
    attn, i = block_gemms(mlp.dep)[:2], aic.GRID.index(8)
    rows = aic.layer_table("b200_sxm", "vllm", attn, "bfloat16")[i] \
        - aic.layer_table("b200_sxm", "vllm", attn, "nvfp4")[i]
    assert _gemm_s(mlp) - _gemm_s(every) == pytest.approx(32 * rows, rel=1e-9)
    assert "bfloat16 attention, nvfp4 MLP GEMMs" in mlp.timing.note


def test_nvfp4_deepseek_reads_the_nvfp4_moe_and_mla_rows():
    every = _nvfp4("deepseek-r1", "measured", tp=8, ep=4, framework="trtllm")
    assert "MLA module tables, nvfp4 GEMMs" in every.timing.note
    mlp = _nvfp4("deepseek-r1", "measured", tp=8, ep=4, framework="trtllm",
                 quantized="mlp")
    assert "MLA module tables, bfloat16 GEMMs" in mlp.timing.note
    # the routed experts are NVFP4 in both: the steps differ by the attention alone
    one = every.pass_cost([1.0], [2048.0]).seconds, mlp.pass_cost([1.0], [2048.0]).seconds
    assert one[0] != one[1]


def test_a_bad_fp4_format_in_a_catalog_file_is_one_line(tmp_path):
    path = tmp_path / "extra.yaml"
    path.write_text("models:\n  oss:\n    source: t\n    weight_bits: 4\n"
                    "    fp4_format: fp4\n    config: {model_type: llama, hidden_size: 64,\n"
                    "      intermediate_size: 128, num_hidden_layers: 2,\n"
                    "      num_attention_heads: 4, vocab_size: 100,\n"
                    "      max_position_embeddings: 128}\n")
    with pytest.raises(UserError) as err:
        load_catalog(extra=str(path))
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "models.oss.fp4_format" in msg
