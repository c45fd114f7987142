"""The roofline cost of one forward pass of one deployed model over a batch.

Per pipeline stage, per GPU (all GPUs of a stage do the same work under TP):

- FLOPs  = 2 x streamed params x new tokens            (every linear layer, lm_head included)
         + 4 x layers x heads x d_head x attended keys  (QK^T and AV; by default causal: a
           new token attends to its cached context, the earlier new tokens of its sequence
           and itself, n·c + n(n+1)/2 keys for n new tokens over c cached ones; a token
           tree's nodes see only their ancestors, so a tree verify passes its own count,
           ``keys`` / ``sum_keys`` from :func:`hardware.draft.tree_attended_keys`);
- bytes  = streamed params x weight bytes               (weights read once per pass)
         + (context + new tokens) x KV bytes per token  (KV read, then written for new tokens);
- compute_s = FLOPs / (peak x eta_compute), memory_s = bytes / (bandwidth x eta_memory);
- comm_s = 2 all-reduces per block of (tokens x hidden x 2 bytes), ring model:
           2(tp-1)/tp x message / link bandwidth + 2(tp-1) x link latency; the link is the
           GPU's ``scale_up_link`` while tp <= its ``gpus_per_node``, else (TP spanning
           servers) its ``node_link``: every ring step waits for the slowest hop, and some
           hop crosses servers (no hierarchical all-reduce is modelled);
- host_s = offloaded weight bytes / host-link bandwidth (+ one latency per block); under TP
           each GPU streams its own shard over its own host link;
- stage_s = max(max(compute_s, memory_s) + comm_s, host_s) + overhead_s.

TP all-reduces sit on the critical path (a block cannot continue before its all-reduce).
Offloading follows FlexGen: the next blocks' weights stream over PCIe while the GPU computes,
so a stage costs the larger of its GPU time and its host transfer, plus the overhead.
Each pipeline stage is its own process and pays the per-pass overhead; a pass through the
pipeline costs the sum of its stages plus one activation hop (tokens x hidden x 2 bytes over
``pp_link``) between consecutive stages. Activation traffic to HBM, the logits all-gather
and the embedding gather are not counted -- they are small next to weights and KV for
decode and verify, and prefill is compute-bound anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.catalog import Catalog
from hardware.deployment import Deployment, stage_layouts
from hardware.memory import fit_error
from specdec.errors import UserError

__all__ = ["CostModel", "PassCost", "ACTIVATION_BYTES", "causal_keys"]

ACTIVATION_BYTES = 2  # activations travel between GPUs in 16 bits


@dataclass(frozen=True)
class PassCost:
    """One forward pass: total seconds and its breakdown.

    ``flops`` and ``hbm_bytes`` are summed over every GPU; the ``*_s`` parts are summed over
    the pipeline stages along the critical path (``comm_s`` includes the pipeline hops).
    ``bound`` names the largest of compute, memory, comm and host; ``stage_s`` is each
    stage's time and ``hop_s`` one hop between stages, for an engine that runs one process
    per stage.
    """

    seconds: float
    flops: float
    hbm_bytes: float
    compute_s: float
    memory_s: float
    comm_s: float
    host_s: float
    overhead_s: float
    bound: str
    arithmetic_intensity: float
    stage_s: tuple[float, ...]
    hop_s: float


@dataclass(frozen=True, slots=True)
class _Stage:
    """Per-GPU constants of one stage, precomputed so a pass is a handful of float ops.

    The ``*_s`` coefficients are seconds (FLOPs over the effective peak, bytes over the
    effective bandwidth); the raw FLOP and byte counts are kept for the breakdown.
    """

    flop_per_token: float
    flop_per_key: float
    weight_bytes: float
    kv_bytes_per_token: float
    compute_s_per_token: float
    compute_s_per_key: float
    weight_s: float
    memory_s_per_kv_token: float
    comm_fixed_s: float
    comm_per_token_s: float
    host_s: float
    overhead_s: float


def _stage_parts(
    st: _Stage, new: float, kv_tokens: float, keys: float
) -> tuple[float, float, float, float]:
    """(compute_s, memory_s, comm_s, seconds) of one stage: THE per-stage formula.

    ``new`` tokens fed, ``kv_tokens`` KV entries read or written, ``keys`` attended
    (query, key) pairs. Every pricing method goes through here.
    """
    compute = st.compute_s_per_token * new + st.compute_s_per_key * keys
    memory = st.weight_s + st.memory_s_per_kv_token * kv_tokens
    comm = st.comm_fixed_s + st.comm_per_token_s * new
    gpu = (compute if compute > memory else memory) + comm
    return compute, memory, comm, (gpu if gpu > st.host_s else st.host_s) + st.overhead_s


def _bound(compute: float, memory: float, comm: float, host: float) -> str:
    """The largest of the four parts (ties to the earlier name: compute, memory, comm, host)."""
    name, top = "compute", compute
    if memory > top:
        name, top = "memory", memory
    if comm > top:
        name, top = "comm", comm
    return "host" if host > top else name


def causal_keys(sum_new: float, sum_new_ctx: float, sum_new_sq: float) -> float:
    """Attended (query, key) pairs of a causal batch: Σ new·ctx + ½(Σ new² + Σ new).

    A sequence with n new tokens over c cached ones attends n·c + n(n+1)/2 keys (its
    context, the earlier new tokens and itself) -- right for decode, a chain verify and a
    prefill chunk. A token tree's nodes see only their ancestors, which is fewer; see
    :func:`hardware.draft.tree_attended_keys`.
    """
    return sum_new_ctx + 0.5 * (sum_new_sq + sum_new)


class CostModel:
    """Prices forward passes of ``dep``; refuses deployments that cannot run.

    Construction checks that the weights plus ``dep.kv_tokens`` tokens of KV fit each GPU
    (else a UserError with GiB needed vs available).
    """

    def __init__(self, dep: Deployment, catalog: Catalog) -> None:
        self.dep = dep
        gpu, shape = dep.gpu, dep.model.shape
        # TP over more GPUs than one server holds spans servers: the all-reduce ring then
        # crosses the node link, and a ring runs at its slowest link (an explicit tp_link wins).
        spans_nodes = dep.tp > gpu.gpus_per_node
        self.tp_link = dep.tp_link or catalog.link(
            gpu.node_link if spans_nodes else gpu.scale_up_link
        )
        self.pp_link = dep.pp_link or catalog.link(gpu.node_link)
        host = catalog.link(gpu.host_link)
        self.layouts = stage_layouts(dep)
        wb, kvb = dep.weight_bits / 8, dep.kv_bits / 8
        tp, link = dep.tp, self.tp_link
        inv_flops_per_s = 1.0 / (gpu.peak(dep.dtype) * gpu.eta_compute)
        inv_bytes_per_s = 1.0 / (gpu.hbm_bytes_per_s * gpu.eta_memory)
        stages = []
        for lay in self.layouts:
            weight_bytes = lay.streamed_params * wb
            ring_steps = 2 * (tp - 1)
            all_reduces = 2 * lay.layers if tp > 1 else 0
            offloaded = dep.offload_fraction * weight_bytes
            flop_per_token = 2.0 * lay.streamed_params
            flop_per_key = 4.0 * lay.layers * lay.attn_heads * shape.d_head
            kv_bytes = lay.kv_values_per_token * kvb
            stages.append(
                _Stage(
                    flop_per_token=flop_per_token,
                    flop_per_key=flop_per_key,
                    weight_bytes=weight_bytes,
                    kv_bytes_per_token=kv_bytes,
                    compute_s_per_token=flop_per_token * inv_flops_per_s,
                    compute_s_per_key=flop_per_key * inv_flops_per_s,
                    weight_s=weight_bytes * inv_bytes_per_s,
                    memory_s_per_kv_token=kv_bytes * inv_bytes_per_s,
                    comm_fixed_s=all_reduces * ring_steps * link.latency_s,
                    comm_per_token_s=all_reduces * (ring_steps / tp) * shape.hidden
                    * ACTIVATION_BYTES / link.bytes_per_s,
                    host_s=(offloaded / host.bytes_per_s + lay.layers * host.latency_s)
                    if offloaded > 0 else 0.0,
                    overhead_s=gpu.overhead_s,
                )
            )
        self._stages = tuple(stages)
        self._single = stages[0] if len(stages) == 1 else None
        self._hop_per_token_s = shape.hidden * ACTIVATION_BYTES / self.pp_link.bytes_per_s
        self._hop_fixed_s = self.pp_link.latency_s
        self.check_memory(dep.kv_tokens)

    # ---- memory ---------------------------------------------------------------------------

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one cached token takes over all layers at ``dep.kv_bits`` (logical, once)."""
        return self.dep.model.shape.kv_values_per_token * self.dep.kv_bits // 8

    @property
    def stage_kv_bytes_per_token(self) -> tuple[float, ...]:
        """KV bytes one cached token takes on ONE GPU of each stage (after TP split)."""
        return tuple(st.kv_bytes_per_token for st in self._stages)

    def resident_weight_bytes(self) -> tuple[int, ...]:
        """Weight bytes each stage's GPU keeps in its memory (offloaded part excluded)."""
        keep = 1.0 - self.dep.offload_fraction
        return tuple(int(lay.stored_params * self.dep.weight_bits / 8 * keep)
                     for lay in self.layouts)

    def kv_capacity_tokens(self, reserve_bytes: int = 0) -> int:
        """Cached tokens that fit after weights, workspace and ``reserve_bytes`` per GPU.

        The tightest stage decides (every token has KV on every stage). Never negative.
        """
        usable = self.dep.usable_bytes_per_gpu - reserve_bytes
        tokens = min(
            (usable - w) // st.kv_bytes_per_token
            for w, st in zip(self.resident_weight_bytes(), self._stages, strict=True)
        )
        return max(int(tokens), 0)

    def kv_capacity_blocks(self, block_tokens: int = 16, reserve_bytes: int = 0) -> int:
        """Whole KV blocks of ``block_tokens`` tokens that fit (paged KV cache)."""
        return self.kv_capacity_tokens(reserve_bytes) // block_tokens

    def check_memory(self, kv_tokens: int, reserve_bytes: int = 0, subject: str = "") -> None:
        """Raise a UserError with the numbers if weights + ``kv_tokens`` of KV do not fit.

        ``subject`` replaces the model id that starts the message (e.g. to say that it is a
        draft that does not fit next to its target). The GiB figures get as many decimals
        as it takes for "needs" to read larger than "available" (exact bytes if 3 are not
        enough).
        """
        usable = self.dep.usable_bytes_per_gpu - reserve_bytes
        for s, (w, st) in enumerate(zip(self.resident_weight_bytes(), self._stages, strict=True)):
            need = w + kv_tokens * st.kv_bytes_per_token
            if need > usable:
                raise fit_error(self.dep, s, w, kv_tokens, kv_tokens * st.kv_bytes_per_token,
                                reserve_bytes, subject)

    # ---- pricing --------------------------------------------------------------------------
    #
    # A pass depends on the batch only through Σ new, Σ ctx and the attended keys; the sums
    # methods are the engine's hot path, the array methods check their input and also give
    # the breakdown. All of them price a stage with ``_stage_parts``.

    def pass_seconds_sums(
        self, sum_new: float, sum_ctx: float, sum_new_ctx: float, sum_new_sq: float,
        sum_keys: float | None = None, *, n_seqs: float,
    ) -> float:
        """Seconds of one pass from the batch's sums: Σ new, Σ ctx, Σ new·ctx, Σ new².

        ``sum_keys`` (attended query-key pairs over the batch) replaces the causal count
        :func:`causal_keys` computes from the last two sums -- give it for token trees.
        ``n_seqs`` is the number of sequences in the pass (timing backends with a
        per-sequence term use it; the paper GPU does not).
        """
        if sum_keys is None:
            sum_keys = sum_new_ctx + 0.5 * (sum_new_sq + sum_new)
        st = self._single
        if st is not None:
            return _stage_parts(st, sum_new, sum_ctx + sum_new, sum_keys)[3]
        return self._pipeline(sum_new, sum_ctx + sum_new, sum_keys)[0]

    def pass_seconds_bound_sums(
        self, sum_new: float, sum_ctx: float, sum_new_ctx: float, sum_new_sq: float,
        sum_keys: float | None = None, *, n_seqs: float,
    ) -> tuple[float, str]:
        """(seconds, bound) of one pass from the sums: what :meth:`pass_cost` says, cheaply.

        ``bound`` is the largest of compute, memory, comm and host (as in :class:`PassCost`).
        """
        if sum_keys is None:
            sum_keys = sum_new_ctx + 0.5 * (sum_new_sq + sum_new)
        st = self._single
        if st is not None:
            compute, memory, comm, seconds = _stage_parts(st, sum_new, sum_ctx + sum_new, sum_keys)
            return seconds, _bound(compute, memory, comm, st.host_s)
        seconds, compute, memory, comm, host, _, _ = self._pipeline(
            sum_new, sum_ctx + sum_new, sum_keys
        )
        return seconds, _bound(compute, memory, comm, host)

    def stage_seconds_sums(
        self, sum_new: float, sum_ctx: float, sum_new_ctx: float, sum_new_sq: float,
        sum_keys: float | None = None, *, n_seqs: float,
    ) -> tuple[float, ...]:
        """Each pipeline stage's seconds for the batch with these sums (one process per stage)."""
        if sum_keys is None:
            sum_keys = sum_new_ctx + 0.5 * (sum_new_sq + sum_new)
        return self._pipeline(sum_new, sum_ctx + sum_new, sum_keys)[5]

    def hop_seconds(self, sum_new: float) -> float:
        """Seconds for one batch's activations to hop between two pipeline stages."""
        return self._hop_fixed_s + self._hop_per_token_s * sum_new

    def _pipeline(
        self, new: float, kv_tokens: float, keys: float
    ) -> tuple[float, float, float, float, float, tuple[float, ...], float]:
        """(seconds, compute, memory, comm, host, stage seconds, hop) summed over the stages.

        The parts are summed along the critical path; ``comm`` includes the pp - 1 hops.
        """
        compute = memory = comm = host = 0.0
        stage_s = []
        for st in self._stages:
            c_s, m_s, x_s, s_s = _stage_parts(st, new, kv_tokens, keys)
            compute += c_s
            memory += m_s
            comm += x_s
            host += st.host_s
            stage_s.append(s_s)
        hops = len(stage_s) - 1
        hop_s = self.hop_seconds(new) if hops else 0.0
        comm += hops * hop_s
        return sum(stage_s) + hops * hop_s, compute, memory, comm, host, tuple(stage_s), hop_s

    def pass_seconds(
        self, new_tokens: np.ndarray, context: np.ndarray, keys: np.ndarray | None = None
    ) -> float:
        """Seconds of one pass; ``new_tokens[i]`` new and ``context[i]`` cached tokens of seq i.

        ``keys[i]``, when given, are the (query, key) pairs sequence i attends (default the
        causal ``new·ctx + new(new+1)/2``; a token tree attends fewer, see
        :func:`hardware.draft.tree_attended_keys`).
        """
        new = np.asarray(new_tokens)  # [n_seq]; no dtype cast: a copy costs more than the sums
        ctx = np.asarray(context)  # [n_seq]
        return self.pass_seconds_sums(
            float(new.sum()), float(ctx.sum()), float(new @ ctx), float(new @ new),
            None if keys is None else float(np.sum(keys)), n_seqs=float(new.size),
        )

    def pass_cost(
        self, new_tokens: np.ndarray, context: np.ndarray, keys: np.ndarray | None = None
    ) -> PassCost:
        """One pass with its breakdown (same seconds as :meth:`pass_seconds`)."""
        new = np.asarray(new_tokens, dtype=np.float64)  # [n_seq]
        ctx = np.asarray(context, dtype=np.float64)  # [n_seq]
        if new.shape != ctx.shape or new.ndim != 1:
            raise UserError(
                f"pass: new_tokens and context must be 1-D of equal length, got shapes "
                f"{new.shape} and {ctx.shape}"
            )
        if (new < 0).any() or (ctx < 0).any():
            raise UserError("pass: new_tokens and context must be >= 0")
        sum_new = float(new.sum())
        if keys is None:
            sum_keys = causal_keys(sum_new, float(new @ ctx), float(new @ new))
        else:
            att = np.asarray(keys, dtype=np.float64)  # [n_seq]
            if att.shape != new.shape or (att < 0).any():
                raise UserError(
                    f"pass: keys must be >= 0, one per sequence ({new.size}), got shape "
                    f"{att.shape}"
                )
            sum_keys = float(att.sum())
        kv_tokens = float(ctx.sum()) + sum_new
        seconds, compute, memory, comm, host, stage_s, hop_s = self._pipeline(
            sum_new, kv_tokens, sum_keys
        )
        tp = self.dep.tp
        flops = tp * sum(st.flop_per_token * sum_new + st.flop_per_key * sum_keys
                         for st in self._stages)
        hbm = tp * sum(st.weight_bytes + st.kv_bytes_per_token * kv_tokens for st in self._stages)
        return PassCost(
            seconds=seconds,
            flops=flops,
            hbm_bytes=hbm,
            compute_s=compute,
            memory_s=memory,
            comm_s=comm,
            host_s=host,
            overhead_s=sum(st.overhead_s for st in self._stages),
            bound=_bound(compute, memory, comm, host),
            arithmetic_intensity=flops / hbm,
            stage_s=stage_s,
            hop_s=hop_s,
        )

    def uniform_pass_seconds(
        self, batch: int, new_tokens: int, context: int, keys: float | None = None
    ) -> float:
        """Seconds of a pass where each of ``batch`` sequences has the same counts.

        ``keys`` are the pairs ONE sequence attends (default causal; give a tree's).
        """
        return self.pass_seconds_sums(
            float(batch * new_tokens),
            float(batch * context),
            float(batch * new_tokens * context),
            float(batch * new_tokens * new_tokens),
            None if keys is None else float(batch * keys), n_seqs=float(batch),
        )
