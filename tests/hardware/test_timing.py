"""The timing backends: auto's choice and fallback, the roofline's terms, offload auto,
catalog overrides of the timing blocks, and the sums path agreeing with the breakdown."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hardware import CostModel, Deployment, DraftSetup, load_catalog
from hardware.catalog import ModelSpec
from hardware.memory import AUTO_BUFFER_LAYERS, AUTO_KV_FRACTION
from hardware.speedup import best_chain, chain_table
from specdec.errors import UserError

CAT = load_catalog()


def cost(model="llama-3.1-8b", gpu="h100", cat=CAT, **kw) -> CostModel:
    return CostModel(Deployment(model=cat.model(model), gpu=cat.gpu(gpu), **kw), cat)


def tables() -> None:
    pytest.importorskip("aiconfigurator_core", reason="measured tables need aiconfigurator-core")


def _with_and_without(tmp_path, framework: str, field: str, value: float):
    """The catalog with ``frameworks.<framework>.<field>`` set to ``value``, and with it 0."""
    cats = []
    for v in (value, 0.0):
        path = tmp_path / f"{field}-{v}.yaml"
        path.write_text(f"frameworks:\n  {framework}: {{{field}: {v}}}\n")
        cats.append(load_catalog(path))
    return cats[0], cats[1]


def test_auto_prices_with_the_measured_tables_where_they_cover_the_deployment():
    tables()
    c = cost()
    assert c.backend == "measured"
    assert "aiconfigurator-core 0.12.0 tables h100_sxm / vllm 0.24.0" in c.timing.note
    pc = c.pass_cost([1], [1024])
    assert pc.backend == "measured" and set(pc.parts) == {
        "gemm_s", "attention_s", "allreduce_s", "elementwise_s", "host_s", "overhead_s"}
    # the measured terms add up to the pass (no offload, one stage)
    assert math.isclose(sum(pc.parts.values()), pc.seconds, rel_tol=1e-12)


@pytest.mark.parametrize(("timing", "model", "kw", "dp"), [
    ("measured", "llama-3.1-70b", {"tp": 4}, 1),
    ("roofline", "llama-3.1-70b", {"tp": 4}, 1),
    ("roofline", "llama-3.1-70b", {"tp": 2, "pp": 2}, 1),  # each stage its own layers
    ("roofline", "qwen3-30b-a3b", {"tp": 1, "ep": 4}, 4),  # 4 attention-DP groups
])
def test_the_elementwise_kernels_add_their_bandwidth_per_token(tmp_path, timing, model, kw,
                                                               dp):
    """act_passes hidden-wide 16-bit vectors per token per layer at the HBM bandwidth,
    on every GPU's whole hidden vector (TP does not split them; attention DP does: each
    group has its share of the tokens), added to the pass and shown as its own part (and
    in the memory traffic that names the bound); 0 leaves the pass as it was."""
    if timing == "measured":
        tables()
    mine, zero = _with_and_without(tmp_path, "trtllm", "act_passes", 10.0)
    kw = {"model": model, "gpu": "h100", "weight_bits": 8, "compute_dtype": "fp8",
          "framework": "trtllm", "timing": timing, **kw}
    with_act, without = cost(cat=mine, **kw), cost(cat=zero, **kw)
    assert with_act.backend == timing
    gpu, spec = CAT.gpu("h100"), CAT.model(model)
    per_token = (spec.config.num_hidden_layers * 10.0 * spec.shape.hidden * 2
                 / gpu.hbm_bytes_per_s / dp)
    for new in (1.0, 37.0, 3000.0):
        sums = (new, new * 700.0, new * 700.0, new)
        d = (with_act.pass_seconds_sums(*sums, n_seqs=new)
             - without.pass_seconds_sums(*sums, n_seqs=new))
        assert d == pytest.approx(per_token * new, rel=1e-9)
        a = with_act.timing.breakdown(new, sums[1], sums[2], new)
        b = without.timing.breakdown(new, sums[1], sums[2], new)
        assert a.parts["elementwise_s"] == pytest.approx(per_token * new, rel=1e-12)
        assert b.parts["elementwise_s"] == 0.0
        assert a.memory_s - b.memory_s == pytest.approx(per_token * new, rel=1e-9)
        if timing == "measured":  # its parts add up to the pass (one stage, no offload)
            assert math.isclose(sum(a.parts.values()), a.seconds, rel_tol=1e-12)
    assert CAT.framework("trtllm").act_passes > 0  # fitted (docs/timing.md, step 4)
    assert CAT.framework("vllm").act_passes == 0  # its TPOT rows barely tell it apart


def test_medusa_heads_have_no_elementwise_kernels(tmp_path):
    """A Medusa head's blocks are one linear layer each, not transformer blocks."""
    path = tmp_path / "act.yaml"
    path.write_text("frameworks:\n  vllm: {act_passes: 10.0}\n")
    mine = load_catalog(path)
    from sim.drafters import medusa_config

    heads = ModelSpec(id="medusa-test", source="test",
                      config=medusa_config(CAT.model("vicuna-7b").config, heads=5))
    for cat in (mine, CAT):
        c = CostModel(Deployment(heads, cat.gpu("h100"), timing="roofline",
                                 step_overhead=False), cat)
        assert c.timing.breakdown(64.0, 0.0, 0.0, 64.0).parts["elementwise_s"] == 0.0


@pytest.mark.parametrize(("kw", "why"), [
    ({"weight_bits": 4}, "GEMM perf data missing for quant 'int4_wo'"),
    ({"framework": "gpt-fast"}, "framework gpt-fast (PyTorch, torch.compile) has no kernel "
                                "tables"),
])
def test_auto_falls_back_to_the_roofline_and_says_why_measured_refuses(kw, why):
    tables()
    c = cost(**kw)
    assert c.backend == "roofline" and c.timing.note.startswith("auto: roofline, because")
    assert why in c.timing.note
    with pytest.raises(UserError, match="^timing: measured: ") as err:
        cost(timing="measured", **kw)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_a_gpu_without_tables_is_priced_by_its_roofline():
    c = cost("llama-2-7b", "t4")  # fp16 T4, no tables
    assert c.backend == "roofline" and "gpu t4 has no measured kernel tables" in c.timing.note


def _roofline(**kw):
    return cost("llama-3.1-8b", "h100", timing="roofline", **kw)


def test_the_roofline_overhead_is_step_plus_layer_plus_sequence(tmp_path):
    fw = CAT.framework("vllm")
    sums = (64.0, 64 * 500.0, 64 * 500.0, 64.0)
    # one sequence more in the same token sums: exactly the per-sequence term, once the
    # KV reads' few-sequence loss (which also depends on the count) is off
    path = tmp_path / "no-kv-loss.yaml"
    path.write_text("gpus:\n  h100:\n    roofline: {kv_half_seqs: 0}\n")
    flat = cost("llama-3.1-8b", "h100", cat=load_catalog(path), timing="roofline")
    d = flat.pass_seconds_sums(*sums, n_seqs=65) - flat.pass_seconds_sums(*sums, n_seqs=64)
    assert d == pytest.approx(fw.seq_s, rel=1e-9)
    c = _roofline()
    assert CAT.gpu("h100").roofline.kv_half_seqs > 0
    d = c.pass_seconds_sums(*sums, n_seqs=65) - c.pass_seconds_sums(*sums, n_seqs=64)
    assert d < fw.seq_s  # more sequences over the same KV read it a little faster
    pc = c.pass_cost(np.ones(64), np.full(64, 500))
    assert pc.overhead_s == pytest.approx(fw.step_s + 32 * fw.layer_s + 64 * fw.seq_s,
                                          rel=1e-12)
    # a draft's passes run inside the target's step, without its per-request work: no
    # per-step term and no per-sequence one (the per-layer one stays)
    d = _roofline(step_overhead=False).pass_seconds_sums(*sums, n_seqs=64)
    assert c.pass_seconds_sums(*sums, n_seqs=64) - d == pytest.approx(
        fw.step_s + 64 * fw.seq_s, rel=1e-9)


@pytest.mark.parametrize("timing", ["measured", "roofline"])
def test_each_more_tensor_parallel_gpu_adds_its_cost_to_every_engine_pass(tmp_path, timing):
    """An engine pass costs tp_step_s more per GPU of its TP group beyond the first (the
    engine drives one worker per GPU); one GPU pays none, nor does a draft's pass, which runs
    inside the target's step. vLLM and TensorRT-LLM have it fitted."""
    if timing == "measured":
        tables()
    mine, none = _with_and_without(tmp_path, "vllm", "tp_step_s", 2.0e-4)
    for tp, extra in ((1, 0.0), (4, 6e-4), (8, 1.4e-3)):
        for step_overhead in (True, False):
            kw = {"model": "llama-3.1-70b", "weight_bits": 8, "compute_dtype": "fp8",
                  "timing": timing, "tp": tp, "step_overhead": step_overhead}
            a = cost(cat=mine, **kw).pass_cost([1] * 8, [1024] * 8)
            b = cost(cat=none, **kw).pass_cost([1] * 8, [1024] * 8)
            want = extra if step_overhead else 0.0
            assert a.overhead_s - b.overhead_s == pytest.approx(want, abs=1e-12)
            assert a.seconds - b.seconds == pytest.approx(want, abs=1e-12)
    for fw in ("vllm", "trtllm"):
        spec = CAT.framework(fw)
        assert spec.tp_step_s > 1e-6 and "tp_step_s" in spec.source


def test_vllm_has_a_fitted_per_sequence_overhead():
    fw = CAT.framework("vllm")
    assert fw.seq_s > 1e-6 and "seq_s" in fw.source and "validation.csv" in fw.source


def test_roofline_kv_reads_lose_efficiency_with_few_sequences(tmp_path):
    """eta_kv(n) = eta_kv * n / (n + kv_half_seqs): the KV time of n sequences grows by
    kv_half_seqs / n; at 0 they read at eta_kv."""
    path = tmp_path / "kv.yaml"
    path.write_text("gpus:\n  a10: {roofline: {eta_weights: 0.8, eta_fp8: 0.8, eta_int8: 0.8,"
                    " eta_int4: 0.8, weights_half_bytes: 0, eta_kv: 0.8, kv_half_seqs: 0,"
                    " eta_compute: 0.7, corner: 64, eta_host: 1, calibrated: true,"
                    " source: test}}\n")
    plain = cost(gpu="a10", cat=load_catalog(path), timing="roofline")
    path.write_text(path.read_text().replace("kv_half_seqs: 0,", "kv_half_seqs: 2,"))
    slow = cost(gpu="a10", cat=load_catalog(path), timing="roofline")
    for n in (1, 4, 64):
        base = plain.pass_cost([1] * n, [4096] * n).memory_s
        per_entry = (base - plain.pass_cost([1] * n, [0] * n).memory_s) / (4096 * n)
        got = slow.pass_cost([1] * n, [4096] * n).memory_s  # n * 4097 entries: + 2/n of them
        assert got == pytest.approx(base + per_entry * 2 * 4097, rel=1e-9)


def test_roofline_collectives_are_alpha_beta_per_link():
    one, four = _roofline(), cost("llama-3.1-70b", "h100", timing="roofline", tp=4)
    assert one.pass_cost([1], [100]).comm_s == 0.0
    co = CAT.link("nvlink4").collective
    pc = four.pass_cost([1], [100])
    # 2 all-reduces per block: call + 2(tp-1) steps + 2(tp-1)/tp x 8192 x 2 bytes / (beta eta)
    per = co.call_s + 6 * co.step_s + 1.5 * 8192 * 2 / (450e9 * co.eta)
    assert pc.comm_s == pytest.approx(2 * 80 * per, rel=1e-12)


def test_weight_formats_stream_at_their_own_efficiency():
    rp = CAT.gpu("h100").roofline
    w16 = _roofline().pass_cost([1], [0]).memory_s
    fp8 = _roofline(weight_bits=8, compute_dtype="fp8").pass_cost([1], [0]).memory_s
    int8 = _roofline(weight_bits=8).pass_cost([1], [0]).memory_s
    assert rp.eta_fp8 != rp.eta_int8
    assert (int8 - fp8) / (int8 + fp8) == pytest.approx(
        (1 / rp.eta_int8 - 1 / rp.eta_fp8) / (1 / rp.eta_int8 + 1 / rp.eta_fp8), abs=0.1)
    assert fp8 < w16 and int8 < w16


def test_fp8_compute_needs_8_bit_weights():
    with pytest.raises(UserError, match="compute_dtype: fp8 \\(W8A8\\) needs weight_bits 8, "
                                        "got 16"):
        Deployment(CAT.model("llama-3-8b"), CAT.gpu("h100"), compute_dtype="fp8")
    with pytest.raises(UserError, match="deployment: timing: must be one of auto, measured, "
                                        "roofline, paper, got 'fast'"):
        Deployment(CAT.model("llama-3-8b"), CAT.gpu("h100"), timing="fast")


@pytest.mark.parametrize("timing", ["paper", "roofline", "measured"])
def test_sums_agree_with_pass_cost_for_every_backend(timing):
    if timing == "measured":
        tables()
    rng = np.random.default_rng(0)
    for kw in ({"weight_bits": 8, "compute_dtype": "fp8"}, {"tp": 2, "pp": 2}):
        c = cost("llama-3.1-70b", "h200", timing=timing, **kw)
        for _ in range(5):
            new = rng.integers(1, 300, size=12)
            ctx = rng.integers(0, 4000, size=12)
            pc = c.pass_cost(new, ctx)
            assert c.pass_seconds(new, ctx) == pytest.approx(pc.seconds, rel=1e-12)
            s, b = c.pass_seconds_bound_sums(float(new.sum()), float(ctx.sum()),
                                             float(new @ ctx), float(new @ new),
                                             n_seqs=12.0)
            assert (s, b) == (pytest.approx(pc.seconds, rel=1e-12), pc.bound)
            stages = c.stage_seconds_sums(float(new.sum()), float(ctx.sum()),
                                          float(new @ ctx), float(new @ new), n_seqs=12.0)
            assert stages == pytest.approx(pc.stage_s, rel=1e-12)


def test_the_measured_one_stage_memo_gives_the_floats_of_the_formula(monkeypatch):
    """A one-stage measured pass remembers its part fixed by (new tokens, sequences): the
    seconds and bound it gives are exactly the per-stage formula's (the breakdown computes
    it afresh), on a hit, on a miss and after the bounded cache is cleared."""
    tables()
    from hardware.timing import measured

    monkeypatch.setattr(measured, "_FIXED_CACHE", 64)
    rng = np.random.default_rng(2)
    for kw in ({}, {"tp": 4}, {"weight_bits": 8, "compute_dtype": "fp8"}):
        t = cost("llama-3.1-8b", "h100", timing="measured", **kw).timing
        assert t._single is not None
        shapes = [(float(new), float(n)) for new, n in zip(rng.integers(1, 3000, 40),
                                                          rng.integers(1, 256, 40),
                                                          strict=True)]
        for _ in range(6):  # 240 lookups of 40 shapes in a 64-entry cache: hits and clears
            for new, n in shapes:
                kv, keys = float(rng.integers(0, 10**6)), float(rng.integers(0, 10**7))
                b = t.breakdown(new, kv, keys, n)
                assert t.seconds(new, kv, keys, n) == b.seconds
                assert t.seconds_bound(new, kv, keys, n) == (b.seconds, b.bound)
        assert 0 < len(t._fixed) <= 64


def test_the_envelope_caps_each_size_at_the_larger_sizes_and_keeps_a_rising_curve():
    from hardware.timing.aic import _envelope

    assert _envelope((1.0, 3.0, 2.0, 2.5, 2.0, 4.0)) == (1.0, 2.0, 2.0, 2.0, 2.0, 4.0)
    rising = (0.5, 0.5, 0.7, 1.0, 3.0)
    assert _envelope(rising) == rising


def test_the_measured_kernel_curves_never_fall_with_the_token_count():
    """TensorRT-LLM's FP8 GEMMs of Llama-3.1-70B are tabulated slower at 20-40 tokens than
    at 48, and vLLM's at 160-384 slower than at 512: a pass prices the larger size's kernel
    instead, so no curve falls, and a rising stretch keeps its measured values."""
    tables()
    from hardware.timing import aic
    from hardware.timing.measured_blocks import block_gemms

    dep = Deployment(model=CAT.model("llama-3.1-70b"), gpu=CAT.gpu("h200"), weight_bits=8,
                     compute_dtype="fp8")
    gemms = block_gemms(dep)
    for backend in ("trtllm", "vllm"):
        table = aic.layer_table("h200_sxm", backend, gemms, "fp8_static")
        assert all(a <= b for a, b in zip(table, table[1:], strict=False))
        raw = [sum(aic._evaluate("h200_sxm", backend, aic._gemm_ops(gemms, q),
                                 is_context=False, batch_size=1, s=1, x=m))
               for q in ("fp8", "fp8_block") for m in (24, 48)]
        assert min(raw[0], raw[2]) > min(raw[1], raw[3])  # the tables' own dip at 24 -> 48
    ar = aic.allreduce_table("h200_sxm", "vllm", 8192, 4)
    head = aic.head_table("h200_sxm", "vllm", 128256 // 4, 8192)
    assert all(a <= b for t in (ar, head) for a, b in zip(t, t[1:], strict=False))
    big = aic.GRID.index(4096)
    raw_big = aic._evaluate("h200_sxm", "vllm", aic._gemm_ops([(128256 // 4, 8192)],
                                                               "bfloat16"),
                            is_context=False, batch_size=1, s=1, x=aic.GRID[-1])[0]
    assert head[-1] == raw_big and head[big] <= head[-1]


def test_fp8_w8a8_runs_the_kernel_of_the_checkpoints_scales():
    """A per-tensor FP8 checkpoint (the catalog's default: NVIDIA's ModelOpt FP8, with
    static activation scales) is priced with aiconfigurator's fp8_static GEMMs -- the
    measured per-tensor kernel, which computes its activation scale on every call, less the
    measured compute-scale kernel -- and a block-scaled one (DeepSeek-V3) with the
    block-scaled kernel; 16-bit and weight-only formats keep their own tables."""
    tables()
    from hardware.timing import aic
    from hardware.timing.measured_blocks import block_gemms, gemm_quant

    llama, ds = CAT.model("llama-3.1-70b"), CAT.model("deepseek-v3")
    assert (llama.fp8_scales, ds.fp8_scales) == ("tensor", "block")
    assert [gemm_quant(llama.fp8_scales, f) for f in ("fp8", "w16", "int8", "int4")] == [
        "fp8_static", "bfloat16", "int8_wo", "int4_wo"]
    assert gemm_quant(ds.fp8_scales, "fp8") == "fp8_block"
    # a 16-bit checkpoint quantized when loaded computes its activation scales every pass:
    # the measured per-tensor kernel as it is
    assert gemm_quant("dynamic", "fp8") == "fp8"
    dep = Deployment(model=llama, gpu=CAT.gpu("h200"), weight_bits=8, compute_dtype="fp8")
    gemms = block_gemms(dep)

    def raw(backend, quant, m):
        return sum(aic.gemm_seconds("h200_sxm", backend, n, k, quant, m) for n, k in gemms)

    # TensorRT-LLM's static kernel saves the scale computation at every size
    assert all(raw("trtllm", "fp8_static", m) < raw("trtllm", "fp8", m)
               for m in (1, 64, 8192))
    table = aic.layer_table("h200_sxm", "trtllm", gemms, "fp8_static")
    assert table[-1] == pytest.approx(raw("trtllm", "fp8_static", aic.GRID[-1]), rel=1e-12)
    # the static kernel alone, not the faster of it and the block-scaled one per size
    block = aic.layer_table("h200_sxm", "trtllm", gemms, "fp8_block")
    assert any(s > b for s, b in zip(table, block, strict=True))
    c = cost("llama-3.1-70b", "h200", weight_bits=8, compute_dtype="fp8",
             framework="trtllm")
    assert "(fp8_static GEMMs;" in c.timing.note
    asked = []

    def recording(system, backend, gemms, quant, real=aic.layer_table):
        asked.append(quant)
        return real(system, backend, gemms, quant)

    with pytest.MonkeyPatch.context() as mp:  # every GEMM of DeepSeek-V3's blocks
        mp.setattr(aic, "layer_table", recording)
        c = cost("deepseek-v3", "h200", tp=8, weight_bits=8, compute_dtype="fp8",
                 framework="trtllm")
    assert "(fp8_block GEMMs;" in c.timing.note
    # dense, attention and shared-expert GEMMs block-scaled, the router in 16 bits
    assert sorted(set(asked)) == ["bfloat16", "fp8_block"] and asked.count("bfloat16") == 1


def test_static_fp8_falls_back_to_the_measured_dynamic_kernel(monkeypatch):
    """Tables with no compute-scale rows to derive the static kernel from price per-tensor
    FP8 with the dynamic-scale kernel they measured, and the note says so."""
    tables()
    from hardware.timing import aic

    real = aic.layer_table

    def no_static(system, backend, gemms, quant):
        if quant == "fp8_static":
            raise aic.TablesUnavailable("no compute-scale rows")
        return real(system, backend, gemms, quant)

    monkeypatch.setattr(aic, "layer_table", no_static)
    c = cost("llama-3.1-70b", "h200", weight_bits=8, compute_dtype="fp8",
             framework="trtllm")
    assert c.backend == "measured" and "(fp8 GEMMs;" in c.timing.note
    monkeypatch.setattr(aic, "layer_table", real)
    static = cost("llama-3.1-70b", "h200", weight_bits=8, compute_dtype="fp8",
                  framework="trtllm")
    assert static.pass_cost([1] * 4, [1024] * 4).parts["gemm_s"] < \
        c.pass_cost([1] * 4, [1024] * 4).parts["gemm_s"]


@pytest.mark.parametrize("framework", ["vllm", "trtllm"])
def test_a_checkpoint_quantized_when_loaded_pays_its_activation_scales(framework):
    """deployment.fp8_scales dynamic (vLLM's --quantization fp8 on a 16-bit checkpoint)
    prices the per-tensor kernel as measured, which computes the activation scales every
    pass: more than the static kernel a ModelOpt checkpoint runs, at decode and prompt
    sizes alike; the model's own scaling is the default."""
    tables()
    kw = dict(tp=2, weight_bits=8, compute_dtype="fp8", framework=framework)
    static, dynamic = (cost("llama-3.1-70b", "h100", fp8_scales=f, **kw)
                       for f in (None, "dynamic"))
    assert (static.dep.fp8_scaling, dynamic.dep.fp8_scaling) == ("tensor", "dynamic")
    assert "(fp8 GEMMs;" in dynamic.timing.note and "(fp8_static GEMMs;" in static.timing.note
    for new in (1, 2048):
        gemm = [c.pass_cost([new] * 8, [1024] * 8).parts["gemm_s"] for c in (static, dynamic)]
        assert gemm[0] < gemm[1]
    with pytest.raises(UserError, match="fp8_scales: must be one of tensor, block, dynamic"):
        cost("llama-3.1-70b", "h100", fp8_scales="per-token", **kw)
    with pytest.raises(UserError, match="fp8_scales: only FP8 W8A8 has them"):
        cost("llama-3.1-70b", "h100", tp=2, fp8_scales="dynamic", framework=framework)


def test_a_decode_pass_pays_the_measured_decode_kernel_at_its_batch_and_length():
    """Attention by phase: a decode batch on a tabulated (batch, KV length) point costs
    the package's generation-attention kernel there, per layer; a prefill adds the fitted
    excess on top of the decode kernel at its KV length."""
    tables()
    from hardware.timing import aic

    c = cost()  # Llama-3.1-8B on one H100, vLLM tables
    layers = CAT.model("llama-3.1-8b").config.num_hidden_layers
    ops, common = aic._package()[3:5]
    gen = [ops.GenerationAttention("ga", 1, 32, 8, common.KVCacheQuantMode.bfloat16,
                                   head_size=128)]
    for b, s in ((16, 1024), (64, 4096), (3, 1500)):
        kernel = aic._evaluate("h100_sxm", "vllm", gen, is_context=False, batch_size=b, s=s)[0]
        got = c.pass_cost([1] * b, [s - 1] * b).parts["attention_s"]  # kv = b * s
        rel = 1e-9 if (b, s) != (3, 1500) else 0.02  # (3, 1500) is between grid points
        assert math.isclose(got, layers * kernel, rel_tol=rel), (b, s)
    *flat, p_new, p_key, _, _ = aic.attention_model("h100_sxm", "vllm", 32, 8, 128, 16)
    assert p_new > 0 and p_key > 0
    dec = c.pass_cost([1], [511]).parts["attention_s"]
    pre = c.pass_cost([512], [0]).parts["attention_s"]
    keys = 512 * 513 / 2
    assert math.isclose(pre, dec + layers * (p_new * 511 + p_key * (keys - 512)),
                        rel_tol=1e-9)


def test_decode_attention_rows_interpolate_and_extend_the_table():
    from hardware.timing.aic import DECODE_BATCHES, DECODE_LENGTHS, decode_at, decode_row

    row = tuple(float(g) for g in DECODE_LENGTHS)  # time = length, to read the rule off
    assert decode_at(row, 1.0) == row[0]  # below the first length: its (fixed) time
    assert decode_at(row, 1500.0) == 1500.0  # linear between points
    assert decode_at(row, 2 * DECODE_LENGTHS[-1]) == 2 * DECODE_LENGTHS[-1]  # last segment
    table = tuple(tuple(float(b) for _ in DECODE_LENGTHS) for b in DECODE_BATCHES)
    assert decode_row(table, 0.5) == table[0]  # below one sequence: the one-sequence row
    assert decode_row(table, 3.0)[0] == 3.0  # linear between batches
    assert decode_row(table, 1024.0)[0] == 1024.0  # along the last two beyond the last


def test_a_pass_of_no_sequences_costs_its_fixed_part_only():
    tables()
    c = cost()
    assert c.uniform_pass_seconds(0, 1, 100) == c.pass_cost([], []).seconds > 0


def test_every_tabulated_curve_gets_the_envelope(monkeypatch):
    """All-reduce, lm_head and MoE curves from a package whose times dip at one size: none
    of them may dip (the caches are bypassed)."""
    tables()
    from hardware.timing import aic

    def dipping(system, backend, ops_list, **kw):  # 1 s per token, but 0.5 s at 24 tokens
        x = kw.get("x", kw.get("s", 1))
        return [0.5 if x == 24 else float(x)] * len(ops_list)

    monkeypatch.setattr(aic, "_evaluate", dipping)
    monkeypatch.setattr(aic, "_moe_kernels", lambda *a: {
        ("bfloat16", 4096, 14336, 2, 8, 1, 1): frozenset({"vllm_fused_moe"})})
    raw = aic.allreduce_table.__wrapped__.__wrapped__
    for t in (raw("h100_sxm", "vllm", 4096, 2),
              aic.head_table.__wrapped__.__wrapped__("h100_sxm", "vllm", 1000, 4096),
              aic.moe_table.__wrapped__("h100_sxm", "vllm", 4096, 14336, 2, 8, 1, 1,
                                        "bfloat16")[0]):
        i = aic.GRID.index(24)
        assert t[i - 1] == t[i] == 0.5 and all(a <= b for a, b in zip(t, t[1:], strict=False))


def test_offload_auto_offloads_the_fewest_whole_layers_that_fit():
    c = cost("opt-30b", "t4", offload_fraction="auto", kv_tokens=4 * 544, timing="roofline")
    lay = c.layouts[0]
    layer_bytes = (lay.streamed_params - (lay.streamed_params - 48 * (
        c.dep.model.shape.layer_params))) / 48 * 2  # one OPT-30B block at 16 bits
    k = c.offload_fraction * lay.stored_params * 2 / layer_bytes
    assert k == pytest.approx(round(k), abs=1e-6) and 0 < round(k) < 48  # whole blocks
    usable = c.dep.usable_bytes_per_gpu
    kv = max(4 * 544 * c.kv_bytes_per_token, AUTO_KV_FRACTION * usable)
    resident = lay.stored_params * 2 - round(k) * layer_bytes
    assert resident + kv + AUTO_BUFFER_LAYERS * layer_bytes <= usable  # it fits ...
    assert resident + layer_bytes + kv + AUTO_BUFFER_LAYERS * layer_bytes > usable  # ... just
    assert cost("opt-6.7b", "h100", offload_fraction="auto").offload_fraction == 0.0


@pytest.mark.parametrize(("timing", "gpu", "model"), [
    ("roofline", "rtx-a6000", "opt-30b"), ("measured", "h100", "llama-3.1-8b"),
    ("roofline", "h100", "mixtral-8x7b")])  # a dense stage, a measured one, an MoE one
def test_pageable_offload_streams_at_the_gpus_pageable_efficiency(timing, gpu, model):
    """Weights in pageable host memory stream at eta_host_pageable, pinned ones at
    eta_host; a framework's host_efficiency scales both; nothing else changes."""
    from hardware.timing.calibrate import apply_fields

    cat = apply_fields(CAT, [f"gpus.{gpu}.roofline.eta_host",
                             f"gpus.{gpu}.roofline.eta_host_pageable"], [0.6, 0.3])
    new, ctx = np.full(4, 1), np.full(4, 512)

    def host(pin=True, framework="vllm", c=cat):
        p = cost(model, gpu, c, offload_fraction=1.0, offload_pin_memory=pin,
                 timing=timing, framework=framework).pass_cost(new, ctx)
        assert p.backend == timing
        return p.host_s, p.compute_s, p.overhead_s

    pinned, pageable = host(), host(pin=False)
    assert pageable[0] > pinned[0] > 0 and pageable[1:] == pinned[1:]
    # host_s = bytes / (link bandwidth x efficiency) + one link latency per block
    hops = cat.model(model).config.num_hidden_layers * cat.link(
        cat.gpu(gpu).host_link).latency_s
    assert (pageable[0] - hops) / (pinned[0] - hops) == pytest.approx(2.0, rel=1e-12)
    slow = apply_fields(cat, ["frameworks.vllm.host_efficiency"], [0.5])
    assert host(c=slow)[0] - hops == pytest.approx(2 * (pinned[0] - hops), rel=1e-12)


def test_a_roofline_block_without_a_pageable_efficiency_takes_the_pinned_one():
    """User catalogs written before eta_host_pageable existed still load."""
    from hardware.catalog import RooflineParams

    block = CAT.gpu("rtx-a6000").roofline.model_dump()
    del block["eta_host_pageable"]
    rp = RooflineParams(**{**block, "eta_host": 0.4})
    assert (rp.host_eta(True), rp.host_eta(False)) == (0.4, 0.4)


def test_a_measurement_rows_pin_memory_reaches_its_deployment():
    from hardware.timing.rows import MeasuredRow
    from hardware.timing.serving import row_cost

    row = MeasuredRow(line=2, model="opt-30b", gpu="t4", tp=1, pp=1, weight_bits=16,
                      kv_bits=16, compute_dtype=None, batch=1, context=128, tokens=1,
                      offload=1.0, measured=1.0, source="synthetic", pin_memory=False)
    assert not row_cost(row, CAT, "roofline").dep.offload_pin_memory
    assert row_cost(MeasuredRow(**{**row.__dict__, "pin_memory": True}), CAT,
                    "roofline").dep.offload_pin_memory


def test_offload_pin_memory_must_be_a_bool():
    with pytest.raises(UserError, match="offload_pin_memory: must be true or false"):
        cost("opt-30b", "t4", offload_fraction=1.0, offload_pin_memory="no")


def test_a_user_catalog_overrides_one_roofline_field(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("gpus:\n  h100:\n    roofline: {eta_kv: 0.5}\n")
    cat = load_catalog(path)
    mine, base = cat.gpu("h100").roofline, CAT.gpu("h100").roofline
    assert mine.eta_kv == 0.5 and mine.eta_weights == base.eta_weights
    path.write_text("gpus:\n  h100:\n    roofline: {eta_kv: 2}\n")
    with pytest.raises(UserError, match="gpus.h100.roofline.eta_kv: Input should be less "
                                        "than or equal to 1"):
        load_catalog(path)


def _eagle_pair(batch_ctx=1024):
    """Llama-3.1-8B with a one-decoder-layer draft of its width (an EAGLE-style head) on an
    H100 under the default timing; the draft's passes run inside the target's step."""
    target = CAT.model("llama-3.1-8b")
    head = ModelSpec(id="eagle-1layer", source="test: one block of Llama-3.1-8B",
                     config=target.config.model_copy(update={"num_hidden_layers": 1}))
    t = CostModel(Deployment(target, CAT.gpu("h100")), CAT)
    d = CostModel(Deployment(head, CAT.gpu("h100"), step_overhead=False), CAT)
    return t, DraftSetup.colocated_with(d, t)


def test_a_one_layer_draft_speedup_falls_with_batch_under_the_default_timing():
    # from a few sequences on: at batch 1 the target's per-step cost, which drafting
    # does not pay again, is a larger share of the step (2.69 at 1 against 2.71 at 4)
    tables()
    t, d = _eagle_pair()
    best = [best_chain(chain_table(t, d, b, 1024, 0.8, 6)).speedup
            for b in (1, 4, 16, 64, 256)]
    assert best[1:] == sorted(best[1:], reverse=True) and min(best[:2]) > 2.4
    assert best[-1] < 0.7 * best[1]


def test_a_tiny_draft_pass_costs_much_less_than_its_target():
    tables()
    draft = cost("llama-68m", step_overhead=False).uniform_pass_seconds(1, 1, 512)
    target = cost("llama-7b").uniform_pass_seconds(1, 1, 512)
    assert draft / target < 0.03
