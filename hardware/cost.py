"""The cost of one forward pass of one deployed model over a batch: the one entry point.

``CostModel(dep, catalog)`` resolves the deployment's links, its pipeline stages, its
offloaded fraction (``offload_fraction: auto`` included) and its timing backend
(``dep.timing``: ``paper``, ``roofline``, ``measured`` or ``auto``, see
:mod:`hardware.timing`), checks that it fits the GPUs, and then prices passes. The engine
only ever sees this class: which tables or formulas stand behind it is the backend's
business, and every :class:`PassCost` says which backend priced it (``backend``, ``note``).

A pass depends on the batch only through five numbers -- Σ new tokens, Σ cached context,
Σ new·context, Σ new² (or the attended keys, for token trees) and the sequence count -- so
the engine's hot path is :meth:`CostModel.pass_seconds_sums`, a handful of float operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hardware.catalog import Catalog
from hardware.deployment import Deployment, stage_layouts
from hardware.memory import auto_offload, fit_error
from hardware.moe import distinct_experts, touched_share
from hardware.timing import make_timing, stage_counts
from hardware.timing.base import windowed
from hardware.timing.paper import ACTIVATION_BYTES
from specdec.errors import UserError

__all__ = ["CostModel", "PassCost", "ACTIVATION_BYTES", "batch_pass", "causal_keys",
           "verify_pass"]


@dataclass(frozen=True)
class PassCost:
    """One forward pass: total seconds and its breakdown, and who priced it.

    ``flops`` and ``hbm_bytes`` are the pass's analytic work summed over every GPU; the
    ``*_s`` parts are summed over the pipeline stages along the critical path (``comm_s``
    includes the pipeline hops); for the ``measured`` backend ``compute_s`` / ``memory_s``
    are the speed-of-light times at the datasheet peaks (they name the bound) and ``parts``
    holds the measured terms. ``bound`` names the largest of compute, memory, comm and host;
    ``stage_s`` is each stage's time and ``hop_s`` one hop between stages, for an engine
    that runs one process per stage. ``backend`` is ``paper``, ``roofline`` or
    ``measured``; ``note`` says what it read and, under ``auto``, why. ``experts_touched``:
    an MoE model's expected distinct routed experts per MoE layer that the pass's tokens
    are sent to (0 for a dense model).
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
    backend: str = "paper"
    note: str = ""
    parts: dict[str, float] = field(default_factory=dict)
    experts_touched: float = 0.0


def causal_keys(sum_new: float, sum_new_ctx: float, sum_new_sq: float) -> float:
    """Attended (query, key) pairs of a causal batch: Σ new·ctx + ½(Σ new² + Σ new).

    A sequence with n new tokens over c cached ones attends n·c + n(n+1)/2 keys (its
    context, the earlier new tokens and itself) -- right for decode, a chain verify and a
    prefill chunk. A token tree's nodes see only their ancestors, which is fewer; see
    :func:`hardware.draft.tree_attended_keys`.
    """
    return sum_new_ctx + 0.5 * (sum_new_sq + sum_new)


def batch_pass(feed, before, depth, s_ctx, n_seq, tree, p_new, p_ctx, p_new_ctx, p_sq,
               n_pre):
    """(Σ new, Σ KV read, attended keys, sequences) of a pass in which each of ``n_seq``
    sequences, ``s_ctx`` cached tokens among them, feeds ``feed`` tokens after the
    ``before`` it fed earlier in the same iteration (their KV is read too), beside prefill
    chunks whose sums are (``p_new``, ``p_ctx``, ``p_new_ctx``, ``p_sq``) over ``n_pre``
    rows (zeros for none). The fed tokens are a causal run, or with ``tree`` the
    depth-``depth`` nodes of a token tree, each attending its context, its ``depth``
    ancestors and itself.

    The one statement of a shared-shape pass: a chain or tree verify (``before`` 0), each
    serial draft pass (``sim.draft_pricing.draft_passes``) and the draft's prefill pass
    (``n_seq`` 0), in Python and in the compiled kernels alike (plain scalars; integer
    counts stay exact as floats)."""
    ctx = s_ctx + n_seq * before
    new = n_seq * feed + p_new
    if tree:
        keys = feed * (s_ctx + n_seq * (depth + 1)) + (p_new_ctx + 0.5 * (p_sq + p_new))
    else:
        keys = (feed * ctx + p_new_ctx) + 0.5 * ((n_seq * feed * feed + p_sq) + new)
    return float(new), float((ctx + p_ctx) + new), float(keys), float(n_seq + n_pre)


def verify_pass(verify, tri, s_ctx, n_seq, p_new, p_ctx, p_new_ctx, p_sq, n_pre):
    """``batch_pass``' four numbers of an iteration's target pass: each of ``n_seq``
    decoding sequences verifies ``verify`` tokens (its root and its shape's nodes) beside
    the prefill chunks; ``tri`` < 0 for a chain (a causal run), else a token tree's
    Σ_l n_l·(l + 1) (``sim.shapes.tree_key_term``): each sequence attends
    ``verify``·ctx + ``tri`` keys under the tree mask. For the reference pricer and the
    compiled walk alike."""
    new, kv, keys, n = batch_pass(verify, 0, 0, s_ctx, n_seq, False, p_new, p_ctx, p_new_ctx,
                                  p_sq, n_pre)
    if tri >= 0.0:
        keys = float(verify * s_ctx + n_seq * tri + p_new_ctx + 0.5 * (p_sq + p_new))
    return new, kv, keys, n


def _per_token(c) -> float:
    """The bytes a stage's KV pool counts per cached token: its full layers' KV, or where a
    model has none (every layer a window), its window layers' (a bound)."""
    return c.kv_bytes_per_token or c.window_kv_bytes_per_token


class CostModel:
    """Prices forward passes of ``dep``; refuses deployments that cannot run.

    Construction checks that the weights plus ``dep.kv_tokens`` tokens of KV fit each GPU
    (else a UserError with GiB needed vs available), resolves ``offload_fraction: auto``
    (:attr:`offload_fraction` is the number used) and builds the timing backend
    (:attr:`timing`, whose ``name`` and ``note`` every :class:`PassCost` repeats).
    """

    def __init__(self, dep: Deployment, catalog: Catalog) -> None:
        self.dep = dep
        gpu = dep.gpu
        # TP over more GPUs than one server holds spans servers: the all-reduce ring then
        # crosses the node link, and a ring runs at its slowest link (an explicit tp_link wins).
        spans_nodes = dep.tp > gpu.gpus_per_node
        self.tp_link = dep.tp_link or catalog.link(
            gpu.node_link if spans_nodes else gpu.scale_up_link
        )
        self.pp_link = dep.pp_link or catalog.link(gpu.node_link)
        # expert parallelism with data-parallel attention: the all-to-all spans tp x dp GPUs
        ep_span = dep.tp * dep.attention_dp
        self.ep_link = self.tp_link if dep.attention_dp == 1 else catalog.link(
            gpu.node_link if ep_span > gpu.gpus_per_node else gpu.scale_up_link)
        self.host_link = catalog.link(gpu.host_link)
        self.framework = catalog.framework(dep.framework)
        if 1 < dep.ep < dep.tp and not self.framework.moe_ep_within_tp:
            raise UserError(f"deployment: ep: {dep.ep} below tp {dep.tp} splits the TP group "
                            f"between experts and their shards, which {self.framework.name} "
                            f"does not do (ep 1 or a multiple of tp; SGLang and TensorRT-LLM "
                            f"split it)")
        self.layouts = stage_layouts(dep)
        self._counts = stage_counts(dep, self.layouts)
        if dep.offload_fraction == "auto":
            self.offload_fraction, self._buffer_bytes = auto_offload(dep, self._counts)
        else:
            self.offload_fraction = float(dep.offload_fraction)
            self._buffer_bytes = tuple(0 for _ in self._counts)
        self.timing = make_timing(dep, self._counts, self.tp_link, self.pp_link,
                                  self.host_link, self.offload_fraction, self.framework,
                                  ep_link=self.ep_link)
        t = self.timing
        self._seconds, self._bound, self._stage = t.seconds, t.seconds_bound, t.stage_seconds
        self.check_memory(dep.kv_tokens)

    @property
    def backend(self) -> str:
        """Which backend prices the passes: ``paper``, ``roofline`` or ``measured``."""
        return self.timing.name

    # ---- memory ---------------------------------------------------------------------------

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one cached token takes over the layers whose cache grows with the
        context (all of them but window and linear-attention layers, ``hardware.layers``)
        at ``dep.kv_bits`` (logical, once)."""
        return self.dep.model.shape.kv_values_per_token * self.dep.kv_bits // 8

    @property
    def stage_kv_bytes_per_token(self) -> tuple[float, ...]:
        """KV bytes one cached token takes on ONE GPU of each stage (after TP split), in
        the layers whose cache grows with the context."""
        return tuple(c.kv_bytes_per_token for c in self._counts)

    def bounded_kv_bytes(self, stage: int, kv_tokens: float) -> float:
        """Bytes stage ``stage``'s GPU needs, beyond the full layers' per-token KV, for
        ``kv_tokens`` cached tokens spread over ``dep.max_seqs`` running sequences in the
        worst way: its window layers hold min(tokens, sequences x window) tokens, its
        linear-attention layers a state per sequence (0 for a model whose every layer is
        full attention, and for no tokens)."""
        c = self._counts[stage]
        if kv_tokens <= 0 or not (c.window or c.state_bytes_per_seq):
            return 0.0
        seqs = self.dep.max_seqs
        held = min(kv_tokens, seqs * c.window) if c.kv_bytes_per_token else 0.0
        return c.window_kv_bytes_per_token * held + seqs * c.state_bytes_per_seq

    def stage_tokens_that_fit(self, stage: int, free_bytes: float,
                              extra_per_token: float = 0.0) -> float:
        """The most cached tokens whose KV fits ``free_bytes`` of stage ``stage``'s GPU,
        each also taking ``extra_per_token`` bytes (a co-located draft's KV), however they
        are spread over ``dep.max_seqs`` sequences: the inverse of per-token KV plus
        :meth:`bounded_kv_bytes`."""
        c = self._counts[stage]
        per_token = _per_token(c) + extra_per_token
        if not (c.window or c.state_bytes_per_seq):
            return free_bytes / per_token
        seqs = self.dep.max_seqs
        free = free_bytes - seqs * c.state_bytes_per_seq
        if not c.kv_bytes_per_token:  # every layer a window: counted per token (a bound)
            return free / per_token
        # up to seqs x window tokens every window layer holds each one; beyond, no more
        tokens = free / (per_token + c.window_kv_bytes_per_token)
        cap = seqs * c.window
        if tokens <= cap:
            return tokens
        return (free - c.window_kv_bytes_per_token * cap) / per_token

    def resident_weight_bytes(self) -> tuple[int, ...]:
        """Weight bytes each stage's GPU keeps in its memory (offloaded part excluded; with
        ``offload_fraction: auto``, the streaming buffer included)."""
        keep = 1.0 - self.offload_fraction
        return tuple(int(lay.stored_bytes(self.dep.stored_bits) * keep) + buf
                     for lay, buf in zip(self.layouts, self._buffer_bytes, strict=True))

    def kv_capacity_tokens(self, reserve_bytes: int = 0) -> int:
        """Cached tokens that fit after weights, workspace and ``reserve_bytes`` per GPU.

        The tightest stage decides (every token has KV on every stage). Never negative.
        A model with window or linear-attention layers: the most tokens that fit however
        they are spread over ``dep.max_seqs`` sequences (:meth:`stage_tokens_that_fit`) --
        an approximation of vLLM's hybrid KV cache manager, which pages each kind of layer
        in a group of its own (docs/timing.md).
        """
        usable = self.dep.usable_bytes_per_gpu - reserve_bytes
        tokens = min(self.stage_tokens_that_fit(s, usable - w)
                     for s, w in enumerate(self.resident_weight_bytes()))
        return max(int(tokens), 0)

    def kv_capacity_blocks(self, block_tokens: int = 16, reserve_bytes: int = 0) -> int:
        """Whole KV blocks of ``block_tokens`` tokens that fit (paged KV cache)."""
        return self.kv_capacity_tokens(reserve_bytes) // block_tokens

    def check_memory(self, kv_tokens: int, reserve_bytes: int = 0, subject: str = "") -> None:
        """Raise a UserError with the numbers if weights + ``kv_tokens`` of KV do not fit.

        ``subject`` replaces the model id that starts the message (e.g. to say that it is a
        draft that does not fit next to its target). The GiB figures get as many decimals
        as it takes for "needs" to read larger than "available" (exact bytes if 3 are not
        enough). With any KV, a model with window or linear-attention layers also needs
        their bounded memory for ``dep.max_seqs`` sequences (:meth:`bounded_kv_bytes`,
        counted in the message's KV).
        """
        usable = self.dep.usable_bytes_per_gpu - reserve_bytes
        for s, (w, c) in enumerate(zip(self.resident_weight_bytes(), self._counts,
                                       strict=True)):
            kv = kv_tokens * _per_token(c) + self.bounded_kv_bytes(s, kv_tokens)
            if w + kv > usable:
                raise fit_error(self.dep, s, w, kv_tokens, kv, reserve_bytes, subject)

    # ---- pricing --------------------------------------------------------------------------
    #
    # The sums methods are the engine's hot path (one backend call each); the array methods
    # check their input and also give the breakdown.

    def pass_seconds_sums(
        self, sum_new: float, sum_ctx: float, sum_new_ctx: float, sum_new_sq: float,
        sum_keys: float | None = None, *, n_seqs: float,
    ) -> float:
        """Seconds of one pass from the batch's sums: Σ new, Σ ctx, Σ new·ctx, Σ new².

        ``sum_keys`` (attended query-key pairs over the batch) replaces the causal count
        :func:`causal_keys` computes from the last two sums -- give it for token trees.
        ``n_seqs`` is the number of sequences in the pass (the per-sequence overhead of
        the roofline and measured backends; the paper GPU has none).
        """
        if sum_keys is None:
            sum_keys = sum_new_ctx + 0.5 * (sum_new_sq + sum_new)
        return self._seconds(sum_new, sum_ctx + sum_new, sum_keys, n_seqs)

    def pass_seconds_at(self, new: float, kv: float, keys: float, n_seqs: float) -> float:
        """Seconds of one pass from what the timing prices: Σ new tokens, Σ KV read
        (context and new), attended keys, sequences (``batch_pass``'s four numbers)."""
        return self._seconds(new, kv, keys, n_seqs)

    def pass_seconds_bound_at(self, new: float, kv: float, keys: float, n_seqs: float
                              ) -> tuple[float, str]:
        """(seconds, bound) of one pass from ``batch_pass``'s four numbers."""
        return self._bound(new, kv, keys, n_seqs)

    def pass_seconds_bound_sums(
        self, sum_new: float, sum_ctx: float, sum_new_ctx: float, sum_new_sq: float,
        sum_keys: float | None = None, *, n_seqs: float,
    ) -> tuple[float, str]:
        """(seconds, bound) of one pass from the sums: what :meth:`pass_cost` says, cheaply.

        ``bound`` is the largest of compute, memory, comm and host (as in :class:`PassCost`).
        """
        if sum_keys is None:
            sum_keys = sum_new_ctx + 0.5 * (sum_new_sq + sum_new)
        return self._bound(sum_new, sum_ctx + sum_new, sum_keys, n_seqs)

    def stage_seconds_sums(
        self, sum_new: float, sum_ctx: float, sum_new_ctx: float, sum_new_sq: float,
        sum_keys: float | None = None, *, n_seqs: float,
    ) -> tuple[float, ...]:
        """Each pipeline stage's seconds for the batch with these sums (one process per stage)."""
        if sum_keys is None:
            sum_keys = sum_new_ctx + 0.5 * (sum_new_sq + sum_new)
        return self._stage(sum_new, sum_ctx + sum_new, sum_keys, n_seqs)

    def hop_seconds(self, sum_new: float) -> float:
        """Seconds for one batch's activations to hop between two pipeline stages."""
        return self.timing.hop_seconds(sum_new)

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
        b = self.timing.breakdown(sum_new, kv_tokens, sum_keys, float(new.size))
        gpus = self.dep.tp * self.dep.attention_dp  # GPUs of one stage
        flops = gpus * sum(c.flop_per_token * sum_new + c.flop_per_key * sum_keys
                           for c in self._counts)
        hbm = gpus * sum(c.weight_bytes + c.kv_bytes_per_token * kv_tokens for c in self._counts)
        n = float(new.size)
        for c in self._counts:  # window layers (capped reads and keys), linear-layer states
            if c.window:
                kv_w, keys_w = windowed(sum_new, kv_tokens, sum_keys, n, c.window)
                flops += gpus * c.window_flop_per_key * keys_w
                hbm += gpus * c.window_kv_bytes_per_token * kv_w
            hbm += gpus * 2.0 * c.state_bytes_per_seq * n
        shape = self.dep.model.shape
        experts = 0.0
        if shape.n_experts:  # the routed experts this pass's tokens touch are read too
            hbm += gpus * sum(c.routed_bytes * touched_share(sum_new, c.expert_miss)
                              for c in self._counts)
            experts = distinct_experts(sum_new, shape.top_k, shape.n_experts)
        return PassCost(
            seconds=b.seconds,
            flops=flops,
            hbm_bytes=hbm,
            compute_s=b.compute_s,
            memory_s=b.memory_s,
            comm_s=b.comm_s,
            host_s=b.host_s,
            overhead_s=b.overhead_s,
            bound=b.bound,
            arithmetic_intensity=flops / hbm,
            stage_s=b.stage_s,
            hop_s=b.hop_s,
            backend=self.timing.name,
            note=self.timing.note,
            parts=dict(b.parts),
            experts_touched=experts,
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
