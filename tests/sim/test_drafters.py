"""Drafting methods: what a head costs next to its target, and drafting without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from hardware.catalog import ModelSpec, load_catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.models import model_shape
from sim.drafters import head_config
from sim.loading import load_scenario
from sim.runner import run_scenario
from specdec.errors import UserError

CAT = load_catalog()


def _pass_s(config, tokens=1, context=1024, step_overhead=True):
    spec = ModelSpec(id="m", source="test", config=config)
    cost = CostModel(Deployment(model=spec, gpu=CAT.gpu("h100"), step_overhead=step_overhead),
                     CAT)
    return cost.pass_seconds(np.array([tokens]), np.array([context]))


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_a_head_pass_costs_a_small_fraction_of_its_target(method):
    target = CAT.model("llama-3.1-8b").config
    head = head_config(target, method, draft_vocab=32000 if method == "eagle3" else None)
    # a head's pass runs inside the target's engine step (sim.build prices it without the
    # framework's per-step overhead); batch 1 is memory-bound: ~0.3-0.6 GB of head weights
    # against 16 GB
    c = _pass_s(head, step_overhead=False) / _pass_s(target)
    assert c < 0.2
    shape = model_shape(head)
    lm_head = head.vocab_size * head.hidden_size
    if method == "eagle":  # the target's 128256-row lm_head: most of what a pass reads
        assert lm_head > 0.6 * shape.streamed_params
    else:  # EAGLE-3's 32000-row draft vocabulary: the decoder layer is the larger part
        assert 0.2 * shape.streamed_params < lm_head < 0.5 * shape.streamed_params


def test_the_head_has_the_targets_width_and_its_fusing_projection():
    t = CAT.model("llama-3.1-8b").config
    h = head_config(t, "eagle3", draft_vocab=32000)
    assert (h.hidden_size, h.num_hidden_layers, h.kv_heads) == (4096, 1, 8)
    extra = model_shape(h).layer_params - model_shape(t).layer_params
    # fc 3h -> h, and q/k/v over 2h inputs: 3h² + h(q + 2 kv)
    assert abs(extra - (3 * 4096**2 + 4096 * (4096 + 2 * 1024))) <= 3 * 4096


def _assert_spec_work(spec_s, decode_seqs):
    """``spec_s``: what vLLM's speculative rounds cost beyond their passes, a drafter of no
    GPU pass: step_s + seq_s x the sequences that drafted (hardware.spec_cost), some whole
    number of the decoding sequences from 1 to all."""
    sp = CAT.framework("vllm").speculation
    assert sp.seq_s > 0
    n = (spec_s - sp.step_s) / sp.seq_s
    np.testing.assert_allclose(n, np.round(n), rtol=0, atol=1e-6)
    assert (np.round(n) >= 1).all() and (np.round(n) <= decode_seqs).all()


def _run(*sets):
    base = ["models.target=llama-3.1-8b", "run.requests=30", "workload.rate_per_s=2"]
    return run_scenario(load_scenario(None, [*base, *sets]))


def test_ngram_drafting_costs_no_gpu_time_and_proposes_on_its_share_of_steps():
    res = _run("models.method=ngram", "models.draft=null",
               "acceptance={kind: preset, name: ngram-llama-3.1-8b-code-edit-k5}",
               "variants=[{name: ngram, policy: {kind: fixed, gamma: 5}}]")
    it = res.variants[0].iterations.columns
    dec = it["decode_seqs"] > 0
    # no draft pass, no CPU time unless set: only vLLM's work around a speculative round
    # (hardware.spec_cost: per round, and per sequence that drafted, no draft pass), where
    # some sequence drafted
    drafted = it["drafted_tokens"] > 0
    assert (it["draft_s"][~drafted] == 0).all()
    _assert_spec_work(it["draft_s"][drafted], it["decode_seqs"][drafted])
    # a step drafts only for the sequences with a match (proposal rate 0.547)
    r = res.variants[0].requests.columns
    share = r["draft_steps"].sum() / r["verify_steps"].sum()
    assert share == pytest.approx(0.5474, abs=0.03)
    assert it["drafted_tokens"][dec].sum() == 5 * r["draft_steps"].sum()
    assert res.summaries[0]["warnings"] == []


def test_a_preset_measured_for_another_method_is_a_warning():
    res = _run("acceptance={kind: preset, name: eagle3-llama-3.1-8b-mtbench-k3}",
               "variants=[{name: g3, policy: {kind: fixed, gamma: 3}}]")
    (w,) = res.summaries[0]["warnings"]
    assert w.startswith("acceptance preset eagle3-llama-3.1-8b-mtbench-k3 was measured for "
                        "method eagle3, not draft_model")


def test_one_run_compares_a_draft_model_eagle3_and_ngram():
    res = _run("variants=[{name: none, policy: {kind: none}}, "
               "{name: 1b, policy: {kind: fixed, gamma: 4}}, "
               "{name: eagle3, policy: {kind: fixed, gamma: 3}, drafter: {method: eagle3}, "
               "acceptance: {kind: preset, name: eagle3-llama-3.1-8b-mtbench-k3}}, "
               "{name: ngram, policy: {kind: fixed, gamma: 5}, drafter: {method: ngram}, "
               "acceptance: {kind: preset, name: ngram-llama-3.1-8b-code-edit-k5}}]")
    s = {x["name"]: x for x in res.summaries}
    assert s["eagle3"]["mean_acceptance_length"] == pytest.approx(2.6, abs=0.15)
    for name in ("1b", "eagle3", "ngram"):
        assert s[name]["speedup_vs_none"] > 1.0
    # the EAGLE-3 head drafts for less than the 1B model does per draft pass
    it = {v.name: v.iterations.columns for v in res.variants}
    per_pass = {n: it[n]["draft_s"][it[n]["drafted_tokens"] > 0].mean() for n in ("1b",
                                                                                 "eagle3")}
    assert per_pass["eagle3"] < per_pass["1b"]


@pytest.mark.parametrize("pp", [1, 2], ids=["replica", "pipeline"])
def test_cpu_drafting_time_is_charged_per_decoding_sequence(pp):
    """cpu_s_per_seq: every decoding sequence costs that much CPU per step, on the critical
    path before the verify -- in a pipelined replica too (its first stage waits for it)."""
    cpu = 0.0025
    res = _run("models.method=ngram", "models.draft=null", f"deployment.pp={pp}",
               "deployment.tp=2", "acceptance={kind: iid, alpha: 0.6}",
               "variants=[{name: ngram, policy: {kind: fixed, gamma: 3}, drafter: "
               f"{{method: ngram, proposal_rate: 1.0, cpu_s_per_seq: {cpu}}}}}]")
    it = res.variants[0].iterations.columns
    assert (it["decode_seqs"] > 0).any()
    # ... and vLLM's work around a speculative round (hardware.spec_cost: no draft pass)
    drafted = it["drafted_tokens"] > 0
    cpu_s = cpu * it["decode_seqs"]
    np.testing.assert_allclose(it["draft_s"][~drafted], cpu_s[~drafted], rtol=0, atol=1e-15)
    _assert_spec_work(it["draft_s"][drafted] - cpu_s[drafted], it["decode_seqs"][drafted])
    if pp == 1:  # an iteration lasts its drafting plus its verify
        np.testing.assert_allclose(it["duration_s"], it["draft_s"] + it["verify_s"],
                                   rtol=1e-12)
    else:  # a micro-batch's first stage starts after the CPU drafting
        assert (it["duration_s"] >= it["draft_s"] + it["verify_s"] - 1e-12).all()


def test_qwen3_targets_dense_or_moe_get_a_llama_style_head():
    # EAGLE heads are llama decoder layers whatever the target; a dense Qwen3 has llama's
    # block (plus q/k norms), so its head has the target's width and attention
    h = head_config(CAT.model("qwen3-32b").config, "eagle3", draft_vocab=32000)
    assert (h.model_type, h.hidden_size, h.num_attention_heads, h.kv_heads, h.d_head) == (
        "llama", 5120, 64, 8, 128)  # head_dim 128, not 5120 / 64
    # a Qwen3 MoE target's head is dense: SpecForge's Qwen3-30B-A3B EAGLE-3 config has
    # hidden 2048, intermediate 6144 (the MoE config's unused intermediate_size), 32 / 4
    # heads of 128 and a 32000-token draft vocabulary
    m = head_config(CAT.model("qwen3-30b-a3b").config, "eagle3", draft_vocab=32000)
    fused = round((3 * 2048 * 2048 + 2048 * (32 * 128 + 2 * 4 * 128)) / (3 * 2048))
    assert (m.model_type, m.hidden_size, m.num_attention_heads, m.kv_heads, m.d_head,
            m.intermediate_size, m.vocab_size, m.routed_experts) == (
        "llama", 2048, 32, 4, 128, 6144 + fused, 32000, 0)
    with pytest.raises(UserError, match="llama-family target"):
        head_config(CAT.model("mixtral-8x7b").config, "eagle3")


def test_every_drafting_method_is_named_once_and_has_a_default_drafter():
    # hardware.catalog.DRAFT_METHODS is the one list; the scenario, the speculation rows,
    # the engines' overheads and sim.drafters read it, and each has a default drafter
    from hardware.catalog import DRAFT_METHODS, SPEC_METHODS
    from hardware.timing.spec_rows import METHODS as ROW_METHODS
    from sim.drafters import ASYNC_METHODS, CPU_METHODS, EAGLE_TYPE, INPUT_SLOTS, METHODS
    from sim.scenario import DEFAULT_DRAFTERS, Models

    assert METHODS == ROW_METHODS == DRAFT_METHODS == SPEC_METHODS[1:]
    assert tuple(DEFAULT_DRAFTERS) == DRAFT_METHODS
    assert all(DEFAULT_DRAFTERS[m].method == m for m in DRAFT_METHODS)
    assert Models.model_fields["method"].annotation.__args__ == DRAFT_METHODS
    for names in (ASYNC_METHODS, CPU_METHODS, EAGLE_TYPE, tuple(INPUT_SLOTS)):
        assert set(names) <= set(DRAFT_METHODS)
