"""What every timing backend shares: the per-stage counts, the breakdown, the bound.

A backend prices one pass of one deployment from four numbers -- the new tokens fed
(``new``), the KV entries read or written (``kv``), the attended (query, key) pairs
(``keys``) and the sequences in the batch (``n``) -- stage by stage along the pipeline.
The counts below are the analytic work of a stage (FLOPs and bytes per GPU), the same for
every backend; what differs is how they become seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hardware.deployment import TIMINGS, Deployment, StageLayout

__all__ = ["TIMINGS", "HEAD_TOKENS_PER_SEQ", "Breakdown", "StageCounts", "stage_counts",
           "framework_seq_s", "framework_step_s", "elementwise_s_per_token", "ACT_BYTES",
           "largest", "head_tokens", "STATE_BYTES", "windowed"]

# Logits are computed only where a token is sampled: every token of a decode or a verify
# (a chain of <= 7 guesses, a tree of up to ~30 nodes), the last token of a prefill chunk.
# From the batch's sums alone a pass cannot tell them apart, so the lm_head is priced at
# min(new tokens, 32 per sequence); the paper GPU prices it at every new token.
HEAD_TOKENS_PER_SEQ = 32
ACT_BYTES = 2  # activations are 16-bit between kernels and between GPUs


def head_tokens(new: float, n: float) -> float:
    """Tokens the lm_head runs on in a pass of ``new`` tokens over ``n`` sequences."""
    cap = HEAD_TOKENS_PER_SEQ * n
    return new if new < cap else cap


@dataclass(frozen=True, slots=True)
class StageCounts:
    """Per-GPU work of one pipeline stage, split the way the backends price it.

    ``body_params`` are the stage's transformer blocks (read every pass, 2 FLOPs per
    token each; an MoE stage's without its routed experts), ``body_wide_bytes`` the bytes
    of those kept in 16 bits (outside the deployment's ``quantized_scope``) and
    ``body_narrow_bytes`` the rest's at the stored bits; ``head_params`` what follows the
    last block (final norm, lm_head; last stage only); ``flop_per_key`` is the attention
    arithmetic per attended key (QK^T and AV over every query head the GPU holds).
    """

    layers: int
    body_params: int
    head_params: int
    flop_per_token: float
    flop_per_key: float
    weight_bytes: float
    kv_bytes_per_token: float
    stored_bytes: float
    body_wide_bytes: float
    body_narrow_bytes: float
    # MoE (defaults: a dense stage). ``routed_bytes``: every local routed expert's bytes
    # (a pass reads the share ``1 - expert_miss ** tokens`` it touches, hardware.moe);
    # ``dp`` attention groups share the replica's tokens, KV and sequences evenly, so the
    # per-token, per-key and per-KV-entry figures above are per *replica* token.
    moe_layers: int = 0
    local_experts: int = 0
    routed_params: int = 0
    routed_bytes: float = 0.0
    routed_flop_per_token: float = 0.0
    expert_miss: float = 1.0
    dp: int = 1
    # attention that is not full (hardware.layers; zeros: every layer full). Window layers:
    # their KV bytes per token and attention FLOPs per key, for at most ``window`` tokens
    # of each sequence (``kv_bytes_per_token`` and ``flop_per_key`` are then the full
    # layers' alone); linear layers: their state bytes per sequence, read and written once
    # per pass (their FLOPs per token are in ``flop_per_token``)
    window: int = 0
    window_kv_bytes_per_token: float = 0.0
    window_flop_per_key: float = 0.0
    state_bytes_per_seq: float = 0.0

    @property
    def seq_reserve_bytes(self) -> float:
        """Bytes one running sequence holds at most beyond its per-token KV: its window
        layers' window of KV and its linear layers' state."""
        return self.window * self.window_kv_bytes_per_token + self.state_bytes_per_seq


# the linear-attention state's bytes per value: vLLM keeps it in the model's dtype unless
# --mamba-ssm-cache-dtype says otherwise (MambaStateDtypeCalculator,
# vllm/model_executor/layers/mamba/mamba_utils.py), whatever --kv-cache-dtype says
STATE_BYTES = 2


def stage_counts(dep: Deployment, layouts: tuple[StageLayout, ...]) -> tuple[StageCounts, ...]:
    """The :class:`StageCounts` of every stage of ``dep``.

    An MoE deployment's dense part is shared by the ``dp`` attention groups (each GPU runs
    1/dp of the tokens through it), its routed experts' by all tokens
    (``routed_flop_params`` per token on this GPU); a dense model has dp 1 and no experts.
    """
    shape, dp = dep.model.shape, dep.attention_dp
    # the quantised weights at the stored bits (FP4 block scales included), those outside
    # the quantized scope at 16 (the lm_head too then; with every weight quantised it is
    # counted at the stored bits here, the backends price its reads at HEAD_BITS)
    qb, kvb = dep.stored_bits / 8, dep.kv_bits / 8
    hb = qb if dep.quantized_scope == "all" else 2.0
    head = math.ceil(shape.head_params / dep.tp)
    miss = 1.0 - shape.top_k / shape.n_experts if shape.n_experts else 1.0
    out = []
    for lay in layouts:
        h = head if lay.last else 0
        wide_bytes = 2.0 * lay.wide_params
        narrow_bytes = (lay.streamed_params - h - lay.wide_params) * qb
        out.append(StageCounts(
            layers=lay.layers,
            body_params=lay.streamed_params - h,
            head_params=h,
            flop_per_token=2.0 * lay.streamed_params / dp + 2.0 * lay.routed_flop_params
            + lay.linear_flops_per_token / dp,
            flop_per_key=(lay.layers - lay.window_layers - lay.linear_layers) * lay.attn_heads
            * shape.key_flops_per_head / dp,
            weight_bytes=wide_bytes + narrow_bytes + h * hb,
            kv_bytes_per_token=lay.kv_values_per_token * kvb / dp,
            stored_bytes=lay.stored_bytes(dep.stored_bits),
            body_wide_bytes=wide_bytes,
            body_narrow_bytes=narrow_bytes,
            moe_layers=lay.moe_layers,
            local_experts=shape.n_experts // dep.ep,
            routed_params=lay.routed_params,
            routed_bytes=lay.routed_params * qb,
            routed_flop_per_token=2.0 * lay.routed_flop_params,
            expert_miss=miss,
            dp=dp,
            window=shape.window if lay.window_layers else 0,
            window_kv_bytes_per_token=lay.window_kv_values_per_token * kvb / dp,
            window_flop_per_key=lay.window_layers * lay.attn_heads * shape.key_flops_per_head
            / dp,
            state_bytes_per_seq=lay.state_values_per_seq * STATE_BYTES / dp,
        ))
    return tuple(out)


def windowed(new: float, kv: float, keys: float, n: float, window: float
             ) -> tuple[float, float]:
    """(KV entries read or written, attended keys) of a pass's window layers, from the
    pass's sums over ``n`` sequences: each sequence reads at most ``window`` cached tokens
    and each new token attends at most ``window`` keys, as min(Σ ctx, n·window) + new and
    min(keys, new·window). From the sums alone the batch's sequences cannot be told apart:
    exact when every sequence is on the same side of the window, and never below the
    per-sequence sum otherwise (min is concave), so a mixed batch is priced a little high."""
    ctx = kv - new
    cap = n * window
    keys_cap = new * window
    return (ctx if ctx < cap else cap) + new, keys if keys < keys_cap else keys_cap


def elementwise_s_per_token(framework, dep: Deployment, c: StageCounts) -> float:
    """A stage's seconds per new token (per replica token) in the kernels the tables leave
    out -- RMSNorm, residual adds, rotary, SwiGLU, activation quantisation: the
    framework's ``act_passes`` hidden-wide 16-bit vectors read or written per token per
    block, at the GPU's HBM bandwidth. They run on every GPU's whole hidden vector (not
    split by TP), one kernel after another with the GEMMs, so the time adds to theirs.
    Medusa heads have none: their blocks are one linear layer each, not transformer blocks."""
    if dep.model.config.model_type == "medusa":
        return 0.0
    return (c.layers * framework.act_passes * dep.model.shape.hidden * ACT_BYTES
            / dep.gpu.hbm_bytes_per_s / c.dp)


def framework_step_s(framework, dep: Deployment) -> float:
    """A pass's fixed CPU-side cost: the framework's ``step_s``, plus ``tp_step_s`` for
    each GPU of the tensor-parallel group beyond the first; none for a draft's passes,
    which run inside the target's engine step."""
    if not dep.step_overhead:
        return 0.0
    return framework.step_s + framework.tp_step_s * (dep.tp - 1)


def framework_seq_s(framework, dep: Deployment, last_stage: bool) -> float:
    """A pipeline stage's cost per sequence per pass: the framework's ``seq_s``, plus on the
    last stage ``stream_seq_s`` when the deployment streams its tokens and the pass is the
    engine step's own (tokens are sent once, after the last stage); none for a draft's
    passes, which run inside the engine step without its per-request work."""
    if not dep.step_overhead:
        return 0.0
    if last_stage and dep.streaming:
        return framework.seq_s + framework.stream_seq_s
    return framework.seq_s


def largest(compute: float, memory: float, comm: float, host: float) -> str:
    """The largest of the four parts (ties to the earlier name: compute, memory, comm, host)."""
    name, top = "compute", compute
    if memory > top:
        name, top = "memory", memory
    if comm > top:
        name, top = "comm", comm
    return "host" if host > top else name


@dataclass(frozen=True)
class Breakdown:
    """One pass priced by a backend: seconds, the classic parts, and the backend's own.

    ``compute_s`` / ``memory_s`` / ``comm_s`` / ``host_s`` / ``overhead_s`` are summed over
    the stages (``comm_s`` includes the pipeline hops); ``parts`` names what the backend
    actually added up (e.g. ``gemm_s``, ``attention_s`` for measured tables).
    """

    seconds: float
    compute_s: float
    memory_s: float
    comm_s: float
    host_s: float
    overhead_s: float
    bound: str
    stage_s: tuple[float, ...]
    hop_s: float
    parts: dict[str, float] = field(default_factory=dict)
