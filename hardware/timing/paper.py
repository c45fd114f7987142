"""The ``paper`` timing: the lecture's paper GPU, exactly as the lecture prices a pass.

Per pipeline stage, per GPU (all GPUs of a stage do the same work under TP):

- FLOPs  = 2 x streamed params x new tokens            (every linear layer, lm_head included)
         + 4 x layers x heads x d_head x attended keys  (QK^T and AV);
- bytes  = streamed params x weight bytes               (weights read once per pass)
         + (context + new tokens) x KV bytes per token  (KV read, then written for new tokens);
- compute_s = FLOPs / (peak x eta_compute), memory_s = bytes / (bandwidth x eta_memory)
  with the GPU entry's ``eta_compute`` 0.7 and ``eta_memory`` 0.8 (the lecture's hw_model);
- comm_s = 2 all-reduces per block of (tokens x hidden x 2 bytes), ring model:
           2(tp-1)/tp x message / link bandwidth + 2(tp-1) x link latency;
- host_s = offloaded weight bytes / host-link bandwidth (+ one latency per block);
- stage_s = max(max(compute_s, memory_s) + comm_s, host_s) + overhead_s (0.5 ms per pass).

An MoE stage (``hardware.moe``) adds to memory_s the touched share of its routed experts,
routed bytes x (1 - (1 - k/E)^new) / (bandwidth x eta_memory), and its FLOPs count k
experts per token; with data-parallel attention groups (ep > tp) each all-reduce carries
the group's 1/dp of the tokens, and each MoE layer adds an all-to-all dispatch and
combine over ``ep_link``, ring-latency model: (ep - 1) x link latency + bytes / bandwidth.

A pass through the pipeline costs the sum of its stages plus one activation hop
(tokens x hidden x 2 bytes over ``pp_link``) between consecutive stages. With these
constants the cost model reproduces the lecture's numbers (6.15 ms, 1.000, c = 0.23, 3.7x,
0.73x, 1.03x, 1.64x, 18.7 ms, 1.30x); ``hardware/speedup.py`` says why the widest tree at
batch 16 is 0.629x rather than 0.64x. Nothing here depends on the framework, and the batch's
sequence count is ignored (the paper GPU has no per-sequence term). A model with window or
linear-attention layers (``hardware.layers``) is refused: the lecture's formula has every
layer attend to the whole context.
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.moe import a2a_bytes_per_token
from hardware.timing.analytic import HOST_S, SHARP, analytic_params, stage_parts
from hardware.timing.base import Breakdown, largest
from specdec.errors import UserError

__all__ = ["PaperTiming", "ACTIVATION_BYTES"]

ACTIVATION_BYTES = 2  # activations travel between GPUs in 16 bits


@dataclass(frozen=True, slots=True)
class _Stage:
    """Per-GPU constants of one stage, precomputed so a pass is a handful of float ops.

    The ``*_s`` coefficients are seconds (FLOPs over the effective peak, bytes over the
    effective bandwidth).
    """

    compute_s_per_token: float
    compute_s_per_key: float
    weight_s: float
    memory_s_per_kv_token: float
    comm_fixed_s: float
    comm_per_token_s: float
    host_s: float
    overhead_s: float
    routed_s: float = 0.0  # MoE: every local routed expert's bytes over the bandwidth
    miss: float = 1.0  # MoE: 1 - k/E


def _vector(st: _Stage) -> tuple[float, ...]:
    """The stage as ``hardware.timing.analytic``'s vector: the roofline's formula with a
    sharp corner, the host beside the GPU, and no lm_head, per-sequence or elementwise
    terms (zeros, which add exactly nothing: the lecture's numbers are unchanged)."""
    return (st.compute_s_per_token, 0.0, st.compute_s_per_key, st.weight_s,
            st.memory_s_per_kv_token, st.comm_fixed_s, st.comm_per_token_s, st.host_s,
            st.overhead_s, 0.0, SHARP, 1.0 / SHARP, 1.0, st.routed_s, st.miss, 0.0, 0.0, 0.0,
            0.0, 0.0, 0.0, 0.0)


class PaperTiming:
    """The paper GPU's prices for one deployment (see the module notes)."""

    name = "paper"

    def __init__(self, dep, counts, tp_link, pp_link, host_link, offload_fraction: float,
                 ep_link=None):
        gpu, shape, tp = dep.gpu, dep.model.shape, dep.tp
        if shape.layer_kinds:
            raise UserError(
                f"timing: paper: the lecture's paper GPU prices every layer attending to the "
                f"whole context; {dep.model.id} has {shape.n_window_layers} window and "
                f"{shape.n_linear_layers} linear-attention layers (use roofline or auto)")
        inv_flops_per_s = 1.0 / (gpu.peak(dep.dtype) * gpu.eta_compute)
        inv_bytes_per_s = 1.0 / (gpu.hbm_bytes_per_s * gpu.eta_memory)
        ring_steps = 2 * (tp - 1)
        moe = bool(shape.n_experts)
        ep_link = ep_link or tp_link
        stages = []
        for c in counts:
            all_reduces = 2 * c.layers if tp > 1 else 0
            offloaded = offload_fraction * c.weight_bytes
            if moe:
                stages.append(_moe_stage(dep, c, tp_link, ep_link, host_link,
                                         offload_fraction, inv_flops_per_s, inv_bytes_per_s))
                continue
            stages.append(_Stage(
                compute_s_per_token=c.flop_per_token * inv_flops_per_s,
                compute_s_per_key=c.flop_per_key * inv_flops_per_s,
                weight_s=c.weight_bytes * inv_bytes_per_s,
                memory_s_per_kv_token=c.kv_bytes_per_token * inv_bytes_per_s,
                comm_fixed_s=all_reduces * ring_steps * tp_link.latency_s,
                comm_per_token_s=all_reduces * (ring_steps / tp) * shape.hidden
                * ACTIVATION_BYTES / tp_link.bytes_per_s,
                host_s=(offloaded / host_link.bytes_per_s + c.layers * host_link.latency_s)
                if offloaded > 0 else 0.0,
                overhead_s=gpu.overhead_s,
            ))
        self._stages = tuple(stages)
        self._vectors = tuple(_vector(st) for st in stages)  # what the formula reads
        self._single = self._vectors[0] if len(stages) == 1 else None
        self._hop_per_token_s = shape.hidden * ACTIVATION_BYTES / pp_link.bytes_per_s
        self._hop_fixed_s = pp_link.latency_s
        self.note = f"paper GPU: {gpu.id} at eta_compute {gpu.eta_compute:g}, eta_memory " \
                    f"{gpu.eta_memory:g}, {gpu.overhead_s * 1e3:g} ms per pass"

    def seconds(self, new: float, kv: float, keys: float, n: float) -> float:
        """Seconds of one pass."""
        q = self._single
        if q is not None:
            return stage_parts(q, new, kv, keys, n)[3]
        return self._pipeline(new, kv, keys)[0]

    def seconds_bound(self, new: float, kv: float, keys: float, n: float) -> tuple[float, str]:
        """(seconds, the largest of compute, memory, comm and host)."""
        q = self._single
        if q is not None:
            compute, memory, comm, seconds = stage_parts(q, new, kv, keys, n)
            return seconds, largest(compute, memory, comm, q[HOST_S])
        seconds, compute, memory, comm, host, _, _ = self._pipeline(new, kv, keys)
        return seconds, largest(compute, memory, comm, host)

    def kernel_params(self) -> tuple | None:
        """The one stage for a compiled pricer (``sim.steady_kernel``), as the roofline's
        (``analytic.analytic_params``); None for a pipeline."""
        return None if self._single is None else analytic_params(self._single)

    def stage_seconds(self, new: float, kv: float, keys: float, n: float) -> tuple[float, ...]:
        """Each pipeline stage's seconds."""
        return self._pipeline(new, kv, keys)[5]

    def hop_seconds(self, new: float) -> float:
        """Seconds for one batch's activations to hop between two pipeline stages."""
        return self._hop_fixed_s + self._hop_per_token_s * new

    def breakdown(self, new: float, kv: float, keys: float, n: float) -> Breakdown:
        """The pass with its parts."""
        seconds, compute, memory, comm, host, stage_s, hop_s = self._pipeline(new, kv, keys)
        overhead = sum(st.overhead_s for st in self._stages)
        return Breakdown(seconds, compute, memory, comm, host, overhead,
                         largest(compute, memory, comm, host), stage_s, hop_s,
                         {"compute_s": compute, "memory_s": memory, "comm_s": comm,
                          "host_s": host, "overhead_s": overhead})

    def _pipeline(self, new: float, kv_tokens: float, keys: float):
        """(seconds, compute, memory, comm, host, stage seconds, hop) summed over the stages.

        The parts are summed along the critical path; ``comm`` includes the pp - 1 hops.
        """
        compute = memory = comm = host = 0.0
        stage_s = []
        for st, q in zip(self._stages, self._vectors, strict=True):
            c_s, m_s, x_s, s_s = stage_parts(q, new, kv_tokens, keys, 0.0)
            compute += c_s
            memory += m_s
            comm += x_s
            host += st.host_s
            stage_s.append(s_s)
        hops = len(stage_s) - 1
        hop_s = self.hop_seconds(new) if hops else 0.0
        comm += hops * hop_s
        return sum(stage_s) + hops * hop_s, compute, memory, comm, host, tuple(stage_s), hop_s


def _moe_stage(dep, c, tp_link, ep_link, host_link, offload_fraction: float,
               inv_flops_per_s: float, inv_bytes_per_s: float) -> _Stage:
    """The paper GPU's constants of an MoE stage (see the module notes)."""
    gpu, shape, tp, ep, dp = dep.gpu, dep.model.shape, dep.tp, dep.ep, c.dp
    ring_steps = 2 * (tp - 1)
    all_reduces = 2 * c.layers if tp > 1 else 0
    a2a = 2 * c.moe_layers if dp > 1 else 0  # dispatch + combine per MoE layer
    offloaded = offload_fraction * (c.weight_bytes + c.routed_bytes)
    a2a_fixed = a2a * (ep - 1) * ep_link.latency_s if a2a else 0.0
    a2a_per_token = a2a * a2a_bytes_per_token(ep, shape.top_k, shape.hidden) \
        / ep_link.bytes_per_s if a2a else 0.0
    return _Stage(
        compute_s_per_token=c.flop_per_token * inv_flops_per_s,
        compute_s_per_key=c.flop_per_key * inv_flops_per_s,
        weight_s=c.weight_bytes * inv_bytes_per_s,
        memory_s_per_kv_token=c.kv_bytes_per_token * inv_bytes_per_s,
        comm_fixed_s=all_reduces * ring_steps * tp_link.latency_s + a2a_fixed,
        comm_per_token_s=all_reduces * (ring_steps / tp) * shape.hidden * ACTIVATION_BYTES
        / tp_link.bytes_per_s / dp + a2a_per_token,
        host_s=(offloaded / host_link.bytes_per_s + c.layers * host_link.latency_s)
        if offloaded > 0 else 0.0,
        overhead_s=gpu.overhead_s,
        routed_s=c.routed_bytes * inv_bytes_per_s,
        miss=c.expert_miss,
    )
