"""Which weights a deployment quantizes (``Deployment.quantized``): every block weight, the
MLPs alone (attention and router in 16 bits, TensorRT-LLM's min-latency DeepSeek-R1
recipe), or the routed experts alone (gpt-oss's checkpoint)."""

from __future__ import annotations

import pytest

from hardware import load_catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.timing.spec_rows import read_spec_rows, spec_costs
from specdec.errors import UserError
from tests.hardware.test_spec_rows import ROW, _write

CAT = load_catalog()


def _dep(model: str, **kw) -> Deployment:
    return Deployment(model=CAT.model(model), gpu=CAT.gpu(kw.pop("gpu", "b200")),
                      timing="roofline", **kw)


def test_mlp_scope_keeps_attention_in_16_bits_by_hand():
    # Llama-3-8B: 32 blocks, attention q/o 4096 x 4096 and k/v 4096 x 1024 each; the
    # embedding and the lm_head (with the final norm) stay 16-bit whatever the scope
    dep = _dep("llama-3-8b", weight_bits=4, fp4_format="nvfp4", quantized="mlp")
    s = dep.model.shape
    attention = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    kept = 2 * 128256 * 4096 + 4096 + attention
    expect = (s.total_params - kept) * 4.5 / 8 + kept * 2
    assert CostModel(dep, CAT).resident_weight_bytes()[0] == int(expect)
    assert dep.weight_label == "NVFP4 (4.5 bits), MLPs only"


def test_mlp_scope_of_an_moe_model_keeps_its_router_and_mla_in_16_bits():
    # DeepSeek-R1 at tp 8: per GPU, every MLA block's attention (its replicated
    # down-projections whole, the rest an eighth) and every router whole stay 16-bit
    dep = _dep("deepseek-r1", tp=8, ep=8, weight_bits=4, fp4_format="nvfp4",
               quantized="mlp", framework="trtllm")
    s = dep.model.shape
    attn = (s.attn_params - s.kv_proj_params) // 8 + s.kv_proj_params
    wide = s.n_layers * attn + s.n_moe_layers * s.moe_replicated_params
    everything = _dep("deepseek-r1", tp=8, ep=8, weight_bits=4, fp4_format="nvfp4",
                      framework="trtllm")
    extra = CostModel(dep, CAT).resident_weight_bytes()[0] \
        - CostModel(everything, CAT).resident_weight_bytes()[0]
    assert extra == pytest.approx(wide * (2 - 4.5 / 8), abs=2)


def test_a_pass_reads_more_the_fewer_weights_are_quantized():
    def step(**kw) -> float:
        cost = CostModel(_dep("deepseek-r1", tp=8, ep=4, framework="trtllm", **kw), CAT)
        return cost.pass_cost([1], [2048]).seconds

    fp4 = {"weight_bits": 4, "fp4_format": "nvfp4"}
    assert step(**fp4) < step(**fp4, quantized="mlp") < step(**fp4, quantized="experts") \
        < step(weight_bits=16)


def test_the_default_scope_is_the_checkpoints_own():
    assert _dep("gpt-oss-120b", weight_bits=4).quantized_scope == "experts"
    assert _dep("gpt-oss-120b", weight_bits=4, quantized="all").quantized_scope == "all"
    assert _dep("llama-3-8b", weight_bits=8).quantized_scope == "all"


@pytest.mark.parametrize(("model", "kw", "match"), [
    ("llama-3-8b", {"quantized": "mlp"}, "quantized: mlp names the weights weight_bits "
                                         "quantizes, but weight_bits is 16"),
    ("llama-3-8b", {"weight_bits": 8, "quantized": "experts"}, "has no routed experts"),
    ("llama-3-8b", {"weight_bits": 8, "quantized": "attention"}, "quantized: must be one of"),
])
def test_a_bad_scope_is_one_line(model, kw, match):
    with pytest.raises(UserError, match=match) as err:
        _dep(model, **kw)
    assert "\n" not in str(err.value)


def test_the_tables_price_a_partly_quantized_block_part_by_part():
    cost = CostModel(Deployment(model=CAT.model("llama-3.1-8b"), gpu=CAT.gpu("h100"),
                                weight_bits=8, compute_dtype="fp8", quantized="mlp"), CAT)
    assert cost.backend == "measured"
    assert "bfloat16 attention, fp8" in cost.timing.note and "MLP GEMMs" in cost.timing.note


def test_a_speculative_row_states_its_scope_and_its_drafters_bits(tmp_path):
    row = {**ROW, "method": "mtp", "draft_vocab": "", "model": "deepseek-r1", "gpu": "b200",
           "tp": "8", "ep": "4", "framework": "trtllm", "weight_bits": "4",
           "compute_dtype": "fp4", "fp4_format": "nvfp4", "quantized": "mlp",
           "draft_weight_bits": "16"}
    (r,) = read_spec_rows(_write(tmp_path / "e.csv", [row]))
    assert (r.fp4_format, r.quantized, r.draft_weight_bits) == ("nvfp4", "mlp", 16)
    target, draft, _ = spec_costs(r, CAT)
    assert target.dep.weight_label == "NVFP4 (4.5 bits), MLPs only"
    assert target.dep.dtype == "fp4"
    assert (draft.cost.dep.weight_bits, draft.cost.dep.dtype) == (16, "bf16")
    path = _write(tmp_path / "bad.csv", [{**row, "quantized": "attention"}])
    with pytest.raises(UserError, match=r"line 2: quantized: must be one of all, mlp"):
        read_spec_rows(path)


def test_hw_step_takes_the_scope_and_the_fp4_format(capsys):
    import json

    from sim.cli import main

    args = ["hw", "step", "--model", "deepseek-r1", "--gpu", "b200", "--tp", "8", "--ep",
            "4", "--framework", "trtllm", "--weight-bits", "4", "--fp4-format", "nvfp4",
            "--batch", "1", "--context", "2048", "--json"]
    assert main([*args, "--quantized", "mlp"]) == 0
    mlp = json.loads(capsys.readouterr().out)
    assert (mlp["fp4_format"], mlp["quantized"]) == ("nvfp4", "mlp")
    assert main(args) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["quantized"] == "all" and whole["memory_s"] < mlp["memory_s"]
