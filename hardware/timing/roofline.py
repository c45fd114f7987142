"""The ``roofline`` timing: the analytic model with a GPU's calibrated parameters.

Per pipeline stage, per GPU (``RooflineParams`` of the GPU, ``CollectiveParams`` of the
links, ``FrameworkSpec`` of the serving engine):

- compute_s = (2·block params·new + 2·head params·head tokens + 4·layers·heads·d·keys)
              / (peak[compute dtype]·eta_compute); head tokens = min(new, 32 per sequence)
              (logits only where a token is sampled);
- memory_s  = block weight bytes / (HBM·eta_w·S/(S + weights_half_bytes))   (S: one
              layer's shard per GPU; eta_w by format: 16-bit, fp8 W8A8, int8 or int4
              weight-only; FP4 W4A4 at eta_fp4, absent eta_fp8; FP4 weights without
              FP4 compute as 4-bit weight-only, eta_int4; FP4 bytes with their block
              scales, and only the experts' where only they are quantised) + head bytes
              (16-bit) the same way + KV entries · KV bytes /
              (HBM·eta_kv);
- a model whose attention is not full everywhere (``hardware.layers``): the full layers
  price the KV entries and keys above; its window layers read min(Σ ctx, sequences·window)
  + new KV entries and attend min(keys, new·window) keys (``base.windowed``: exact when
  every sequence is on one side of the window, a little high for a batch mixing both);
  its linear-attention layers read and write their state once per sequence per pass (2 x
  the state bytes at eta_kv) and add their recurrence's FLOPs per token;
- gpu_s     = (compute_s^p + memory_s^p)^(1/p), p = ``corner``: the two roofs meet in a
              rounded corner, i.e. the compute efficiency falls as the arithmetic intensity
              nears the ridge;
- elem_s    = new x the framework's elementwise kernels (normalisation, residual adds,
              rotary, activation, activation quantisation): ``act_passes`` hidden-wide
              16-bit vectors per token per block at the HBM bandwidth (``base.
              elementwise_s_per_token``; 0 for a framework that has none fitted);
- comm_s    = 2 all-reduces per block under TP, each call_s + 2(tp-1)·step_s +
              2(tp-1)/tp · tokens·hidden·2 bytes / (link bandwidth·eta) (α-β per link);
- host_s    = offloaded weight bytes / (host-link bandwidth·eta_host, or
              eta_host_pageable for weights in pageable host memory, times the
              framework's host_efficiency) + a latency per block; the GPU computes while
              they stream (max) or, for a framework without ``offload_overlap``, before
              each layer runs (sum);
- overhead  = step_s + tp_step_s·(tp - 1) + layer_s·layers + seq_s·sequences (the
              framework's CPU-side work; ``base.framework_step_s``);
- stage_s   = max(gpu_s + elem_s + comm_s, host_s) + overhead (the sum of the first two
              for a framework without ``offload_overlap``).

An MoE stage (``hardware.moe``) adds the touched share of its routed experts to
memory_s, (1 - (1 - k/E)^new) x routed bytes / (HBM·eta_w), with each MoE layer's fused-MoE
kernel streamed as one more shard (+ weights_half_bytes per MoE layer: on the H200 that is
46 us at fp8, where vLLM's measured fused-MoE kernel for DeepSeek-V3 at TP 8 has an
intercept of about 48 us, aiconfigurator-core 0.12.0 h200_sxm tables), and k experts per
token to compute_s; with
data-parallel attention (ep > tp) the dense part, the attention, the KV, the all-reduces
and the per-sequence overhead carry 1/dp of the replica's batch, and each MoE layer adds
an all-to-all dispatch and combine over the EP link: 2 x (call_s + (ep-1)·step_s +
bytes / (bandwidth·eta)).

A GPU without calibrated parameters (``roofline: null``) runs at its paper efficiencies
(``eta_compute``, ``eta_memory`` everywhere, a sharp corner, the full host bandwidth); a
link without ``collective`` has only its per-step ``latency_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.catalog import CollectiveParams, GpuSpec, LinkSpec, RooflineParams
from hardware.moe import a2a_bytes_per_token
from hardware.timing.analytic import HOST_S, SHARP, analytic_params, stage_parts
from hardware.timing.base import (
    ACT_BYTES,
    HEAD_TOKENS_PER_SEQ,
    Breakdown,
    elementwise_s_per_token,
    framework_seq_s,
    framework_step_s,
    largest,
)

__all__ = ["RooflineTiming", "roofline_params", "collective_params", "host_bytes_per_s",
           "weight_format", "SHARP", "HEAD_BITS"]
HEAD_BITS = 16  # quantised deployments keep the lm_head in 16 bits (vLLM, TensorRT-LLM, AWQ)


def roofline_params(gpu: GpuSpec) -> RooflineParams:
    """The GPU's calibrated parameters, or its paper efficiencies when it has none."""
    if gpu.roofline is not None:
        return gpu.roofline
    m = gpu.eta_memory
    return RooflineParams(
        eta_weights=m, eta_fp8=m, eta_int8=m, eta_int4=m, weights_half_bytes=0.0, eta_kv=m,
        eta_compute=gpu.eta_compute, corner=SHARP, eta_host=1.0, eta_host_pageable=1.0,
        calibrated=False,
        source=f"datasheet only: {gpu.id}'s paper efficiencies")


def collective_params(link: LinkSpec) -> CollectiveParams:
    """The link's α-β parameters, or its per-step latency alone when it has none."""
    if link.collective is not None:
        return link.collective
    return CollectiveParams(call_s=0.0, step_s=link.latency_s, eta=1.0, calibrated=False,
                            source=f"datasheet only: {link.id}'s latency per ring step")


def host_bytes_per_s(host_link: LinkSpec, rp: RooflineParams, dep, framework) -> float:
    """Bytes/s offloaded weights stream at: the host link at the GPU's pinned or pageable
    efficiency (``dep.offload_pin_memory``), times the framework's ``host_efficiency``."""
    return (host_link.bytes_per_s * rp.host_eta(dep.offload_pin_memory)
            * framework.host_efficiency)


def weight_format(weight_bits: int, dtype: str) -> str:
    """'w16', 'fp8' (8-bit weights computing in fp8), 'int8', 'fp4' (4-bit weights
    computing in fp4: W4A4) or 'int4' (4-bit weight-only, FP4 weights on a GPU without
    FP4 tensor cores included)."""
    if weight_bits == 16:
        return "w16"
    if weight_bits == 8:
        return "fp8" if dtype == "fp8" else "int8"
    return "fp4" if dtype == "fp4" else "int4"


@dataclass(frozen=True, slots=True)
class _Stage:
    """Seconds per unit of work of one stage (see the module notes)."""

    per_token: float
    per_head_token: float
    per_key: float
    weight_s: float
    per_kv: float
    comm_fixed_s: float
    comm_per_token_s: float
    host_s: float
    fixed_s: float
    per_seq_s: float
    p: float
    inv_p: float
    overlap: bool
    routed_s: float = 0.0  # MoE: reading every local routed expert
    miss: float = 1.0  # MoE: 1 - k/E
    per_kv_len: float = 0.0  # per_kv x kv_half_seqs: the few-sequence loss, per mean length
    elem_per_token_s: float = 0.0  # the elementwise kernels (base.elementwise_s_per_token)
    # window layers (their KV read and keys, capped at ``window`` per sequence / per new
    # token) and linear layers' state per sequence (hardware.timing.base.windowed)
    per_kv_window: float = 0.0
    per_key_window: float = 0.0
    window: float = 0.0
    state_per_seq_s: float = 0.0


def _window_terms(c, flops_per_s: float, kv_bw: float) -> dict:
    """A stage's window and linear-attention terms (zeros where every layer is full): its
    window layers' KV at the KV bandwidth, their keys at the compute rate, and its linear
    layers' state read and written once per sequence per pass."""
    return {"per_kv_window": c.window_kv_bytes_per_token / kv_bw,
            "per_key_window": c.window_flop_per_key / flops_per_s,
            "window": float(c.window),
            "state_per_seq_s": 2.0 * c.state_bytes_per_seq / kv_bw}


def _vector(st: _Stage) -> tuple[float, ...]:
    """The stage as ``hardware.timing.analytic``'s vector (its formula prices it)."""
    return (st.per_token, st.per_head_token, st.per_key, st.weight_s, st.per_kv,
            st.comm_fixed_s, st.comm_per_token_s, st.host_s, st.fixed_s, st.per_seq_s, st.p,
            st.inv_p, float(st.overlap), st.routed_s, st.miss, st.per_kv_len,
            st.elem_per_token_s, float(HEAD_TOKENS_PER_SEQ), st.per_kv_window,
            st.per_key_window, st.window, st.state_per_seq_s)


class RooflineTiming:
    """The calibrated roofline's prices for one deployment (see the module notes)."""

    name = "roofline"

    def __init__(self, dep, counts, tp_link, pp_link, host_link, offload_fraction: float,
                 framework, note: str = "", ep_link=None):
        gpu, shape, tp = dep.gpu, dep.model.shape, dep.tp
        rp = roofline_params(gpu)
        tc, pc = collective_params(tp_link), collective_params(pp_link)
        fmt = weight_format(dep.weight_bits, dep.dtype)
        eta_w = {"w16": rp.eta_weights, "fp8": rp.eta_fp8, "int8": rp.eta_int8,
                 "int4": rp.eta_int4, "fp4": rp.eta_fp4 or rp.eta_fp8}[fmt]
        flops_per_s = gpu.peak(dep.dtype) * rp.eta_compute
        # 16-bit weights stream at eta_weights whatever the format of the blocks
        w_bw, h_bw = gpu.hbm_bytes_per_s * eta_w, gpu.hbm_bytes_per_s * rp.eta_weights
        kv_bw = gpu.hbm_bytes_per_s * rp.eta_kv
        half = rp.weights_half_bytes
        step_s = framework_step_s(framework, dep)
        moe = bool(shape.n_experts)
        stages = []
        for i, c in enumerate(counts):
            per_seq_s = framework_seq_s(framework, dep, i == len(counts) - 1)
            if moe:
                stages.append(_moe_stage(dep, c, rp, tc, collective_params(ep_link or tp_link),
                                         tp_link, ep_link or tp_link, host_link,
                                         offload_fraction, framework, eta_w, step_s,
                                         per_seq_s))
                continue
            head_bytes = c.head_params * HEAD_BITS / 8
            # a shard of S bytes streams at eta·S/(S + half): + half bytes per layer; the
            # weights kept in 16 bits at the 16-bit efficiency
            weight_s = (c.body_narrow_bytes + c.layers * half) / w_bw \
                + c.body_wide_bytes / h_bw \
                + ((head_bytes + half) / h_bw if head_bytes else 0.0)
            all_reduces = 2 * c.layers if tp > 1 else 0
            offloaded = offload_fraction * c.weight_bytes
            stages.append(_Stage(
                per_token=2.0 * c.body_params / flops_per_s,
                per_head_token=2.0 * c.head_params / flops_per_s,
                per_key=c.flop_per_key / flops_per_s,
                weight_s=weight_s,
                per_kv=c.kv_bytes_per_token / kv_bw,
                per_kv_len=rp.kv_half_seqs * c.kv_bytes_per_token / kv_bw,
                comm_fixed_s=all_reduces * (tc.call_s + 2 * (tp - 1) * tc.step_s),
                comm_per_token_s=all_reduces * (2 * (tp - 1) / tp) * shape.hidden
                * ACT_BYTES / (tp_link.bytes_per_s * tc.eta),
                host_s=(offloaded / host_bytes_per_s(host_link, rp, dep, framework)
                        + c.layers * host_link.latency_s) if offloaded > 0 else 0.0,
                fixed_s=step_s + framework.layer_s * c.layers,
                per_seq_s=per_seq_s,
                p=rp.corner, inv_p=1.0 / rp.corner, overlap=framework.offload_overlap,
                elem_per_token_s=elementwise_s_per_token(framework, dep, c),
                **_window_terms(c, flops_per_s, kv_bw),
            ))
        self._stages = tuple(stages)
        self._vectors = tuple(_vector(st) for st in stages)  # what the formula reads
        self._single = self._vectors[0] if len(stages) == 1 else None
        self._hop_fixed_s = pc.call_s + pc.step_s
        self._hop_per_token_s = shape.hidden * ACT_BYTES / (pp_link.bytes_per_s * pc.eta)
        kind = "calibrated" if rp.calibrated else "uncalibrated"
        self.note = note or f"roofline: {gpu.id} {kind} ({rp.source}); framework " \
                            f"{framework.name} {framework.version} overheads"

    def seconds(self, new: float, kv: float, keys: float, n: float) -> float:
        """Seconds of one pass."""
        q = self._single
        if q is not None:
            return stage_parts(q, new, kv, keys, n)[3]
        return self._pipeline(new, kv, keys, n)[0]

    def seconds_bound(self, new: float, kv: float, keys: float, n: float) -> tuple[float, str]:
        """(seconds, the largest of compute, memory, comm and host)."""
        q = self._single
        if q is not None:
            compute, memory, comm, seconds = stage_parts(q, new, kv, keys, n)
            return seconds, largest(compute, memory, comm, q[HOST_S])
        seconds, compute, memory, comm, host, _, _, _ = self._pipeline(new, kv, keys, n)
        return seconds, largest(compute, memory, comm, host)

    def kernel_params(self) -> tuple | None:
        """The one stage for a compiled pricer (``sim.steady_kernel``): ``analytic``'s
        vector, in the measured timing's layout without its tables (``analytic_params``).
        None for a pipeline."""
        return None if self._single is None else analytic_params(self._single)

    def kernel_stages(self) -> tuple:
        """Each pipeline stage's ``kernel_params`` (a tuple, one per stage), and the hop's
        fixed and per-token seconds (``sim.kernels.base.stages_seconds``)."""
        return (tuple(analytic_params(q) for q in self._vectors), self._hop_fixed_s,
                self._hop_per_token_s)

    def stage_seconds(self, new: float, kv: float, keys: float, n: float) -> tuple[float, ...]:
        """Each pipeline stage's seconds."""
        return self._pipeline(new, kv, keys, n)[5]

    def hop_seconds(self, new: float) -> float:
        """Seconds for one batch's activations to hop between two pipeline stages."""
        return self._hop_fixed_s + self._hop_per_token_s * new

    def breakdown(self, new: float, kv: float, keys: float, n: float) -> Breakdown:
        """The pass with its parts."""
        seconds, compute, memory, comm, host, stage_s, hop_s, overhead = \
            self._pipeline(new, kv, keys, n)
        return Breakdown(seconds, compute, memory, comm, host, overhead,
                         largest(compute, memory, comm, host), stage_s, hop_s,
                         {"compute_s": compute, "memory_s": memory, "comm_s": comm,
                          "elementwise_s": new * sum(st.elem_per_token_s
                                                     for st in self._stages),
                          "host_s": host, "overhead_s": overhead})

    def _pipeline(self, new: float, kv: float, keys: float, n: float):
        """(seconds, compute, memory, comm, host, stage seconds, hop, overhead) over stages."""
        compute = memory = comm = host = overhead = 0.0
        stage_s = []
        for st, q in zip(self._stages, self._vectors, strict=True):
            c_s, m_s, x_s, s_s = stage_parts(q, new, kv, keys, n)
            compute += c_s
            memory += m_s
            comm += x_s
            host += st.host_s
            overhead += st.fixed_s + st.per_seq_s * n
            stage_s.append(s_s)
        hops = len(stage_s) - 1
        hop_s = self.hop_seconds(new) if hops else 0.0
        comm += hops * hop_s
        return (sum(stage_s) + hops * hop_s, compute, memory, comm, host, tuple(stage_s),
                hop_s, overhead)


def _moe_stage(dep, c, rp, tc, ec, tp_link, ep_link, host_link, offload_fraction: float,
               framework, eta_w: float, step_s: float, per_seq_s: float) -> _Stage:
    """The roofline's constants of an MoE stage (see the module notes)."""
    gpu, shape, tp, ep, dp = dep.gpu, dep.model.shape, dep.tp, dep.ep, c.dp
    flops_per_s = gpu.peak(dep.dtype) * rp.eta_compute
    w_bw, h_bw = gpu.hbm_bytes_per_s * eta_w, gpu.hbm_bytes_per_s * rp.eta_weights
    kv_bw = gpu.hbm_bytes_per_s * rp.eta_kv
    half = rp.weights_half_bytes
    head_bytes = c.head_params * HEAD_BITS / 8
    # every block one shard as for a dense model, plus the fused-MoE kernel of each MoE
    # layer as a shard of its own: its touched experts + weights_half_bytes
    # the weights kept in 16 bits (outside the quantized scope) streaming at eta_weights,
    # the quantised ones and the experts at the quantised format's
    weight_s = c.body_narrow_bytes / w_bw + c.body_wide_bytes / h_bw \
        + (c.layers + c.moe_layers) * half / w_bw \
        + ((head_bytes + half) / h_bw if head_bytes else 0.0)
    all_reduces = 2 * c.layers if tp > 1 else 0
    a2a = 2 * c.moe_layers if dp > 1 else 0  # dispatch + combine per MoE layer
    offloaded = offload_fraction * (c.weight_bytes + c.routed_bytes)
    return _Stage(
        per_token=(2.0 * c.body_params / dp + c.routed_flop_per_token) / flops_per_s,
        per_head_token=2.0 * c.head_params / dp / flops_per_s,
        per_key=c.flop_per_key / flops_per_s,
        weight_s=weight_s,
        per_kv=c.kv_bytes_per_token / kv_bw,
        per_kv_len=rp.kv_half_seqs * c.kv_bytes_per_token / kv_bw,
        comm_fixed_s=all_reduces * (tc.call_s + 2 * (tp - 1) * tc.step_s)
        + a2a * (ec.call_s + (ep - 1) * ec.step_s),
        comm_per_token_s=all_reduces * (2 * (tp - 1) / tp) * shape.hidden * ACT_BYTES
        / (tp_link.bytes_per_s * tc.eta) / dp
        + a2a * a2a_bytes_per_token(ep, shape.top_k, shape.hidden)
        / (ep_link.bytes_per_s * ec.eta),
        host_s=(offloaded / host_bytes_per_s(host_link, rp, dep, framework)
                + c.layers * host_link.latency_s) if offloaded > 0 else 0.0,
        fixed_s=step_s + framework.layer_s * c.layers,
        per_seq_s=per_seq_s / dp,
        p=rp.corner, inv_p=1.0 / rp.corner, overlap=framework.offload_overlap,
        routed_s=c.routed_bytes / w_bw,
        miss=c.expert_miss,
        elem_per_token_s=elementwise_s_per_token(framework, dep, c),
        **_window_terms(c, flops_per_s, kv_bw),
    )
