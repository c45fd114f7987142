"""The roofline cost of one pass: the lecture's numbers, exact sums, TP, PP, offloading, memory."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardware import CostModel, Deployment, load_catalog
from specdec.errors import UserError

CAT = load_catalog()
L3_8B_STREAMED = 7_504_924_672  # 8,030,261,248 params - 128256 x 4096 input embedding
L3_8B_KV = 131_072  # bytes per token at 16 bits


def cost(model="llama-3-8b", gpu="h100", **kw) -> CostModel:
    """The lecture's paper GPU (these tests pin its numbers); tests/hardware/test_timing.py
    covers the other backends."""
    kw.setdefault("timing", "paper")
    return CostModel(Deployment(model=CAT.model(model), gpu=CAT.gpu(gpu), **kw), CAT)


def test_llama_3_8b_decode_on_h100_is_6_15_ms():
    """Lecture §1.1: batch 1, context 1024 -> 6.15 ms, memory-bound."""
    pc = cost().pass_cost(np.array([1]), np.array([1024]))
    # by hand: weights once + 1024 cached tokens read + 1 written, at 3.35 TB/s x 0.8, + 0.5 ms
    by_hand = (2 * L3_8B_STREAMED + 1025 * L3_8B_KV) / (3.35e12 * 0.8) + 0.5e-3
    assert pc.seconds == pytest.approx(by_hand, rel=1e-12)
    assert round(pc.seconds * 1e3, 2) == 6.15
    assert pc.bound == "memory"
    assert pc.flops == pytest.approx(2 * L3_8B_STREAMED + 4 * 32 * 32 * 128 * 1025, rel=1e-12)


def test_five_tokens_cost_the_same_as_one():
    """Lecture §1.1: verifying 5 tokens / decoding 1 = 1.000 at batch 1, context 1024."""
    c = cost()
    ratio = c.pass_seconds([5], [1024]) / c.pass_seconds([1], [1024])
    assert f"{ratio:.3f}" == "1.000"


def test_draft_cost_ratio_c_of_1b_over_8b_is_0_23():
    """Lecture §4.2: Llama-3.2-1B / Llama-3-8B on H100, batch 1, context 1024: c = 0.23."""
    c = cost("llama-3.2-1b").pass_seconds([1], [1024]) / cost().pass_seconds([1], [1024])
    assert round(c, 2) == 0.23


@pytest.mark.parametrize(
    ("batch", "decode_bound", "verify_bound", "ratio_range"),
    [(1, "memory", "memory", (1.0, 1.001)), (32, "memory", "memory", (1.0, 1.002)),
     (128, "memory", "compute", (2.0, 2.2))],
)
def test_exercise_5_decode_vs_5_token_verify(batch, decode_bound, verify_bound, ratio_range):
    """Exercise 5: Llama-3-8B, H100, context 128; batch 128 x 5 tokens turns compute-bound
    (640 tokens are past the ~295 FLOP/byte ridge) and the time about doubles."""
    c = cost()
    ctx = np.full(batch, 128)
    decode = c.pass_cost(np.ones(batch, dtype=int), ctx)
    verify = c.pass_cost(np.full(batch, 5), ctx)
    assert (decode.bound, verify.bound) == (decode_bound, verify_bound)
    lo, hi = ratio_range
    assert lo <= verify.seconds / decode.seconds <= hi
    ridge = CAT.gpu("h100").ridge_flop_per_byte()
    assert (verify.arithmetic_intensity > ridge) == (verify_bound == "compute")


def _brute_force_seconds(c: CostModel, new, ctx) -> float:
    """Independent per-token loop for one stage, no TP: the definition, not the sums."""
    gpu, shape = c.dep.gpu, c.dep.model.shape
    flops = bytes_ = 0.0
    for n, k in zip(new, ctx, strict=True):
        for i in range(n):
            keys = k + i + 1  # cached context, earlier new tokens, itself
            flops += 2 * shape.streamed_params + 4 * shape.n_layers * shape.n_heads \
                * shape.d_head * keys
        bytes_ += (k + n) * c.kv_bytes_per_token
    bytes_ += shape.streamed_params * c.dep.weight_bits / 8
    compute = flops / (gpu.peak("bf16") * gpu.eta_compute)
    memory = bytes_ / (gpu.hbm_bytes_per_s * gpu.eta_memory)
    return max(compute, memory) + gpu.overhead_s


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 5000)), min_size=1, max_size=12))
def test_mixed_batch_equals_per_token_definition(seqs):
    """Prefill chunks, decode, verify and tree nodes mixed in one batch: the fast sums path,
    the breakdown path and a per-token loop agree."""
    new = np.array([s[0] for s in seqs])
    ctx = np.array([s[1] for s in seqs])
    for c in (cost(), cost("opt-125m", "a10", weight_bits=8, kv_bits=8)):
        expected = _brute_force_seconds(c, new, ctx)
        assert c.pass_seconds(new, ctx) == pytest.approx(expected, rel=1e-9)
        assert c.pass_cost(new, ctx).seconds == pytest.approx(expected, rel=1e-9)


def test_pass_cost_rejects_bad_arrays():
    c = cost()
    with pytest.raises(UserError, match="equal length"):
        c.pass_cost([1, 1], [3])
    with pytest.raises(UserError, match=">= 0"):
        c.pass_cost([-1], [3])
    with pytest.raises(UserError, match=r"keys must be >= 0, one per sequence \(2\)"):
        c.pass_cost([1, 1], [3, 3], keys=[4])


DEPLOYMENTS = {  # one of each bound, and every path through the stages
    "memory": {},
    "compute-8bit": {"weight_bits": 8, "kv_bits": 8},
    "comm": {"tp": 32},
    "pipeline": {"tp": 2, "pp": 3},
    "host": {"offload_fraction": 0.7},
}


def _costs(timing: str) -> list[CostModel]:
    out = []
    for kw in DEPLOYMENTS.values():
        try:
            out.append(cost(timing=timing, **kw))
        except UserError:  # e.g. no measured tables across servers
            continue
    return out


COSTS = {t: _costs(t) for t in ("paper", "roofline", "measured")}


@pytest.mark.parametrize("timing", list(COSTS))
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 600), st.integers(0, 4000)), min_size=1, max_size=10),
       st.booleans())
def test_bound_sums_agree_with_pass_cost(timing, seqs, tree_keys):
    """The engine's cheap (seconds, bound) from the sums is exactly what pass_cost says,
    for every backend."""
    new = np.array([s[0] for s in seqs])
    ctx = np.array([s[1] for s in seqs])
    keys = new * ctx + new if tree_keys else None  # e.g. a star: every node sees ctx + itself
    sums = (float(new.sum()), float(ctx.sum()), float(new @ ctx), float(new @ new))
    assert len(COSTS[timing]) >= 3
    for c in COSTS[timing]:
        pc = c.pass_cost(new, ctx, keys=keys)
        sum_keys = None if keys is None else float(keys.sum())
        seconds, bound = c.pass_seconds_bound_sums(*sums, sum_keys=sum_keys, n_seqs=new.size)
        assert (seconds, bound) == (pc.seconds, pc.bound)
        assert c.pass_seconds_sums(*sums, sum_keys=sum_keys, n_seqs=new.size) == pc.seconds
        assert c.pass_seconds(new, ctx, keys=keys) == pc.seconds
        assert sum(c.stage_seconds_sums(*sums, sum_keys=sum_keys, n_seqs=new.size)) \
            + (c.dep.pp - 1) * pc.hop_s == pytest.approx(pc.seconds, rel=1e-12)


def test_each_bound_is_reached():
    batch = {"memory": 1, "compute-8bit": 512, "comm": 1, "pipeline": 1, "host": 1}
    bounds = {name: cost(**kw).pass_seconds_bound_sums(batch[name] * 5.0, 0.0, 0.0,
                                                      batch[name] * 25.0,
                                                      n_seqs=batch[name])[1]
              for name, kw in DEPLOYMENTS.items()}
    assert bounds == {"memory": "memory", "compute-8bit": "compute", "comm": "comm",
                      "pipeline": "memory", "host": "host"}


def test_attended_keys_price_the_attention_arithmetic():
    """``keys`` replaces the causal count: fewer keys, less attention arithmetic, same bytes."""
    c = cost()
    new, ctx = np.array([21, 21]), np.array([1024, 1024])
    causal = c.pass_cost(new, ctx)
    assert causal.flops == c.pass_cost(new, ctx, keys=21 * 1024 + np.array([231, 231])).flops
    tree = c.pass_cost(new, ctx, keys=np.array([21 * 1024 + 71] * 2))
    per_key = 4 * 32 * 32 * 128
    assert causal.flops - tree.flops == pytest.approx(2 * (231 - 71) * per_key, rel=1e-12)
    assert tree.hbm_bytes == causal.hbm_bytes


def test_bits_halve_the_bytes():
    full, half = cost(), cost(weight_bits=8, kv_bits=8)
    a = full.pass_cost([1] * 4, [512] * 4)
    b = half.pass_cost([1] * 4, [512] * 4)
    assert b.hbm_bytes == pytest.approx(a.hbm_bytes / 2, rel=1e-12)
    assert b.flops == a.flops  # weight-only quantisation: same arithmetic, in 16 bits
    assert half.kv_bytes_per_token == L3_8B_KV // 2


def test_tensor_parallel_lowers_decode_but_not_below_the_all_reduce_floor():
    link = CAT.link("nvlink4")
    times = []
    for tp in (1, 2, 4, 8, 16, 32):
        c = cost(tp=tp)
        pc = c.pass_cost([1], [1024])
        floor = 2 * 32 * 2 * (tp - 1) * link.latency_s + 0.5e-3  # latency part of the rings
        assert pc.seconds > floor
        assert pc.comm_s >= floor - 0.5e-3
        times.append(pc.seconds)
    assert times[0] > times[1] > times[2] > times[3]  # splitting the weights pays ...
    assert times[5] > times[4]  # ... until the all-reduce latencies dominate
    assert cost(tp=32).pass_cost([1], [1024]).bound == "comm"


def test_tensor_parallel_splits_work_without_changing_totals():
    one, two = cost().pass_cost([3, 1], [100, 900]), cost(tp=2).pass_cost([3, 1], [100, 900])
    assert two.flops == pytest.approx(one.flops, rel=1e-12)
    assert two.hbm_bytes == pytest.approx(one.hbm_bytes, rel=1e-12)
    assert two.memory_s == pytest.approx(one.memory_s / 2, rel=1e-12)


def test_tp_must_divide_heads_and_kv_heads_split_or_replicate():
    with pytest.raises(UserError, match="tp 3 does not divide num_attention_heads 32"):
        cost(tp=3)
    # Llama-3-8B has 8 KV heads: tp 16 replicates each KV head on 2 GPUs
    c = cost(tp=16)
    assert c.dep.kv_heads_per_gpu == 1
    assert c.stage_kv_bytes_per_token[0] == L3_8B_KV / 8
    # llama-30b: 52 heads, tp 4 divides them (and the 52 KV heads)
    cost("llama-30b", "a100-80gb", tp=4)
    with pytest.raises(UserError, match="tp 8 does not divide num_attention_heads 52"):
        cost("llama-30b", "a100-80gb", tp=8)


def test_pipeline_stages_sum_with_hops():
    one = cost().pass_cost([1] * 8, [512] * 8)
    pc = cost(pp=2).pass_cost([1] * 8, [512] * 8)
    hop = CAT.link("ib-ndr-400g")
    assert pc.hop_s == pytest.approx(hop.latency_s + 8 * 4096 * 2 / hop.bytes_per_s, rel=1e-12)
    assert pc.seconds == pytest.approx(sum(pc.stage_s) + pc.hop_s, rel=1e-12)
    assert pc.stage_s[1] > pc.stage_s[0]  # the last stage also reads the lm_head
    assert pc.flops == pytest.approx(one.flops, rel=1e-12)
    assert pc.hbm_bytes == pytest.approx(one.hbm_bytes, rel=1e-12)
    assert pc.overhead_s == 2 * one.overhead_s  # each stage process pays its own
    c = cost(pp=2)
    sums = (8.0, 8 * 512.0, 8 * 512.0, 8.0)
    assert c.stage_seconds_sums(*sums, n_seqs=8) == pytest.approx(pc.stage_s, rel=1e-12)
    assert c.hop_seconds(8.0) == pytest.approx(pc.hop_s, rel=1e-12)
    assert c.pass_seconds_sums(*sums, n_seqs=8) == pytest.approx(pc.seconds, rel=1e-12)
    with pytest.raises(UserError, match="pp 40 exceeds the model's 32 layers"):
        cost(pp=40)


def test_fully_offloaded_pass_costs_its_weight_bytes_over_pcie():
    """SpecInfer's offloading setting: OPT-30B on one A10 with all weights in host memory."""
    c = cost("opt-30b", "a10", offload_fraction=1.0)
    pc = c.pass_cost([1], [512])
    weight_bytes = 2 * CAT.model("opt-30b").shape.streamed_params
    pcie = CAT.link("pcie4-x16").bytes_per_s
    assert pc.bound == "host"
    assert pc.seconds == pytest.approx(weight_bytes / pcie, rel=0.01)
    assert pc.seconds == pytest.approx(pc.host_s + pc.overhead_s, rel=1e-12)  # overlapped
    # without offloading the model does not fit the A10 at all
    with pytest.raises(UserError, match="opt-30b does not fit on 1x1 a10"):
        cost("opt-30b", "a10")


def test_half_offloaded_pass_overlaps_transfer_with_gpu_time():
    c = cost("opt-13b", "a10", offload_fraction=0.5)
    pc = c.pass_cost([1] * 4, [256] * 4)
    gpu_s = max(pc.compute_s, pc.memory_s) + pc.comm_s
    assert pc.seconds == pytest.approx(max(gpu_s, pc.host_s) + pc.overhead_s, rel=1e-12)


def test_kv_capacity_after_weights_and_workspace():
    c = cost()
    usable = int(80 * 2**30 * 0.9)
    weights = 2 * 8_030_261_248  # stored: the input embedding too
    assert c.kv_capacity_tokens() == (usable - weights) // L3_8B_KV
    assert c.kv_capacity_blocks() == c.kv_capacity_tokens() // 16
    assert c.kv_capacity_tokens(reserve_bytes=L3_8B_KV * 1000) == c.kv_capacity_tokens() - 1000


def test_model_that_does_not_fit_is_refused_with_gib_numbers():
    with pytest.raises(UserError) as err:
        cost("llama-3-70b", "h100")
    msg = str(err.value)
    assert "llama-3-70b does not fit on 1x1 h100" in msg
    assert "needs 131.4 GiB" in msg and "available 72.0 GiB of 80 GiB" in msg
    # fits with 8-bit weights on an H200, as in lecture §7.3 ...
    cost("llama-3-70b", "h200", weight_bits=8)
    # ... but not with KV for too many tokens
    with pytest.raises(UserError, match=r"KV for 400000 tokens 122\.1 GiB"):
        cost("llama-3-70b", "h200", weight_bits=8, kv_tokens=400_000)


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"tp": 0}, "tp: must be an integer >= 1"), ({"weight_bits": 5}, "weight_bits: must be"),
     ({"kv_bits": 4}, "kv_bits: must be 16 or 8"), ({"offload_fraction": 1.5}, "offload"),
     ({"compute_dtype": "fp8"}, "gpu a100-80gb: no fp8 peak")],
)
def test_bad_deployment_fields(kw, match):
    with pytest.raises(UserError, match=match):
        cost(gpu="a100-80gb", **kw)


def test_tp_beyond_one_server_prices_the_all_reduce_over_the_node_link():
    """H100: 8 per HGX server. TP 8 rings over NVLink; TP 16 spans 2 servers, over IB."""
    nvlink, ib = CAT.link("nvlink4"), CAT.link("ib-ndr-400g")

    def ring_s(tp, link, tokens=1):
        steps = 2 * (tp - 1)
        return 2 * 32 * (steps * link.latency_s + steps / tp * tokens * 4096 * 2 / link.bytes_per_s)

    assert cost(tp=8).tp_link == nvlink
    assert cost(tp=8).pass_cost([1], [1024]).comm_s == pytest.approx(ring_s(8, nvlink), rel=1e-12)
    c16 = cost(tp=16)
    assert c16.tp_link == ib
    assert c16.pass_cost([1], [1024]).comm_s == pytest.approx(ring_s(16, ib), rel=1e-12)
    # an explicit link is the user's word, even across servers
    assert cost(tp=16, tp_link=nvlink).tp_link == nvlink
    # an A10 server holds 4: tp 8 of them crosses the node link (100 GbE)
    assert cost("llama-3-8b", "a10", tp=8).tp_link == CAT.link("eth-100g")
    assert cost("llama-3-8b", "a10", tp=4).tp_link == CAT.link("pcie4-x16")


def test_replicated_kv_heads_are_counted_in_memory_and_bytes_read():
    """Llama-3-8B has 8 KV heads: at tp 16 each is held (and read) by 2 GPUs, with its k/v
    projection -- 16 heads' worth of KV and k/v weights in all, twice tp 8's."""
    shape = CAT.model("llama-3-8b").shape
    a, b = cost(tp=8).pass_cost([1] * 4, [512] * 4), cost(tp=16).pass_cost([1] * 4, [512] * 4)
    kv_tokens = 4 * 513
    extra = kv_tokens * L3_8B_KV + 32 * shape.kv_proj_params * 2  # replicated KV + k/v weights
    assert b.hbm_bytes - a.hbm_bytes == pytest.approx(extra, rel=1e-9)
    assert 16 * cost(tp=16).stage_kv_bytes_per_token[0] == 2 * L3_8B_KV


def test_a_fit_error_shows_need_above_available():
    """One token too many: need and available agree to 0.1 GiB, so the message says more."""
    c = cost("llama-3-8b", "a10")
    fits = c.kv_capacity_tokens()
    c.check_memory(fits)
    with pytest.raises(UserError) as err:
        c.check_memory(fits + 1)
    msg = str(err.value)
    need = msg.split("needs ")[1].split(" GiB")[0]
    available = msg.split("available ")[1].split(" GiB")[0]
    assert need != available or "bytes)" in msg, msg
    if "bytes)" in msg:
        a, b = msg.split("(")[-1].split(" bytes)")[0].split(" > ")
        assert int(a) > int(b)


def test_gib_digits_grow_until_need_and_available_differ():
    from hardware.memory import _gib_formatter
    gib = 2**30
    assert _gib_formatter(21.64 * gib, 21.6 * gib)(21.64 * gib) == "21.64"
    assert _gib_formatter(22.0 * gib, 21.6 * gib)(22.0 * gib) == "22.0"
    assert _gib_formatter(21.6001 * gib, 21.6 * gib)(21.6001 * gib) == "21.600"


def test_positions_beyond_the_model_are_refused():
    from hardware import check_positions
    model = CAT.model("llama-3-8b")  # max_position_embeddings 8192
    check_positions(model, 8191, 1)
    with pytest.raises(UserError, match=r"llama-3-8b: context 200000 \+ 1 new tokens = 200001 "
                                        r"positions exceed max_position_embeddings 8192"):
        check_positions(model, 200000, 1)
    with pytest.raises(UserError, match="8193 positions"):
        check_positions(model, 8188, 5)
