"""Deployments: one model on GPUs with tensor/pipeline parallelism, quantisation, offloading.

A :class:`Deployment` says *how* a model runs; :func:`stage_layouts` turns it into what one
GPU of each pipeline stage holds and reads, which both the cost model and the memory check
use. Assumptions (each one a choice, stated where it is made):

- Tensor parallelism (Megatron style) splits every weight matrix and the attention heads
  over ``tp`` GPUs, so TP must divide ``num_attention_heads``. KV heads are split too when TP
  divides them; when TP is a multiple of the KV heads (GQA with TP > KV heads) each KV head
  is *replicated* on ``tp / kv_heads`` GPUs (as vLLM does), so each GPU holds one KV head and
  its k/v projection. Any other combination is refused.
- Pipeline parallelism splits the blocks into ``pp`` contiguous stages as evenly as possible
  (earlier stages take the remainder); the embedding table sits on the first stage, the final
  norm and lm_head on the last (a tied matrix is then stored on both).
- ``weight_bits`` applies to every stored parameter but the embedding and lm_head (int8
  and int4 group scales are not counted); compute stays in the 16-bit dtype unless
  ``compute_dtype`` says otherwise (weight-only quantisation, as in the lecture's 8-bit
  Llama-3-70B example); ``compute_dtype: fp8`` is FP8 W8A8 and needs 8-bit weights.
- FP4 (``fp4_format``: ``nvfp4`` or ``mxfp4``, or the model's where its checkpoint ships
  FP4 and ``weight_bits`` is 4) stores each 4-bit value with its block scales: NVFP4 one
  FP8 E4M3 scale per 16 values (4.5 bits a weight), MXFP4 one E8M0 scale per 32 (4.25
  bits) (:data:`FP4_BITS`). ``compute_dtype: fp4`` runs the GEMMs at the GPU's FP4 peak
  (W4A4, Blackwell); without it the weights are dequantised to the 16-bit dtype in the
  kernel (weight-only, as vLLM's Marlin MXFP4 path runs gpt-oss on Hopper).
- Which weights ``weight_bits`` applies to (:attr:`Deployment.quantized_scope`): ``all``
  (every block weight), ``mlp`` (the MLPs: dense MLPs, shared and routed experts; the
  attention projections and the router stay 16-bit, as TensorRT-LLM's min-latency
  DeepSeek-R1 recipe keeps attention in BF16 over NVFP4 MLPs,
  NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1_Pushing_Latency_Boundaries_…
  @01c4ece9, "Precision Strategy") or ``experts`` (the routed experts alone, as gpt-oss's
  checkpoint ships them). The deployment's ``quantized`` says; unset, a checkpoint's own
  FP4 format keeps the model's ``quantized`` and anything else quantizes ``all``.
- Offloading keeps ``offload_fraction`` of each GPU's weights in host memory; they occupy no
  GPU memory (the workspace margin covers the streaming buffer). ``offload_fraction="auto"``
  lets the cost model offload just enough whole layers to fit (``hardware.memory``).
  ``offload_pin_memory`` says whether those weights sit in pinned (page-locked) host memory,
  as vLLM's ``--cpu-offload-gb``, DeepSpeed's ``pin_memory: true`` and FlexGen's default
  ``--pin-weight`` keep them, or in pageable memory (Hugging Face Accelerate's hooks,
  DeepSpeed's default, FlexGen with ``--pin-weight 0``), which streams slower (the GPU's
  ``eta_host_pageable``).
- Memory: usable = capacity x (1 - workspace_fraction); weights resident + KV must fit.
- ``timing`` picks the backend that prices passes (``hardware.timing``) and ``framework``
  the serving engine whose kernel tables and overheads it uses (a catalog id).
- Mixture of experts (vLLM's semantics, vllm/model_executor/layers/fused_moe/config.py
  ``FusedMoEParallelConfig.make``): with ``ep`` 1 every routed expert is split over the
  ``tp`` GPUs like any MLP; with expert parallelism each GPU holds ``E / ep`` experts, each
  split ``moe_tp`` ways. vLLM's ``--enable-expert-parallel`` sets the EP size to TP x DP,
  so under vLLM ``ep`` must be 1 or a multiple of ``tp`` (``moe_tp`` 1). SGLang and
  TensorRT-LLM also split the TP group itself between the two: ``ep`` dividing ``tp``
  leaves ``moe_tp = tp / ep`` GPUs to share each expert (SGLang: ``moe_tp_size = tp_size //
  ep_size``, sgl-project/sglang python/sglang/srt/distributed/parallel_state.py in release
  0.5.14; TensorRT-LLM: ``moe_tp_size = tp_size // moe_ep_size`` unless given,
  NVIDIA/TensorRT-LLM tensorrt_llm/mapping.py @05ebebb2, ``Mapping.__init__``), e.g. tp 8 /
  ep 4: four groups of 64 of DeepSeek-V3's 256 experts, each expert split over 2 GPUs. The
  attention stays TP-split and the MoE output is all-reduced over the TP group, as at
  ``ep == tp`` (which engine allows it: the framework's ``moe_ep_within_tp``, checked by
  the cost model). ``ep == tp`` is EP at data-parallel size 1 (attention TP-split, every
  rank sees every token, the MoE output all-reduced over the TP group as without EP: no
  all-to-all, ``use_all2all_kernels`` needs DP > 1); ``ep = tp x dp`` adds ``dp``
  data-parallel attention groups (``--data-parallel-size dp``): each holds the attention,
  dense layers and lm_head (TP-split within the group) and a ``1/dp`` share of the
  sequences and their KV cache, and every MoE layer dispatches and combines tokens over all
  ``ep`` GPUs (all-to-all). The replica then occupies ``tp x dp x pp`` GPUs. SpecSim runs
  one scheduler over the ``dp`` groups, assumed evenly loaded (vLLM runs one per DP rank).
- All experts are resident: memory counts every expert, a pass reads those its tokens
  touch (``hardware.moe``).
- ``moe_kernel`` names the fused-MoE kernel family the engine runs the routed experts with
  (:data:`MOE_KERNELS`: TensorRT-LLM's ``moe_config.backend`` TRTLLM is ``trtllm_gen``,
  DEEPGEMM ``deepgemm``, CUTLASS ``cutlass``; SGLang's ``--moe-runner-backend
  flashinfer_trtllm`` is ``trtllm_gen``); unset, whatever the framework's measured tables
  timed. Only the measured timing reads it (``hardware.timing.aic.moe_table``, from another
  framework's tables where the engine's own do not time the kernel); the roofline prices
  no kernel choice, so ``auto`` falls back to it with the reason in the note where no table
  times the kernel for the shape.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specdec.errors import UserError

if TYPE_CHECKING:  # annotations only: importing the catalog (pydantic, YAML) is not needed
    from hardware.catalog import GpuSpec, LinkSpec, ModelSpec

__all__ = ["Deployment", "StageLayout", "stage_layouts", "check_positions", "GIB", "TIMINGS",
           "COMPUTE_DTYPES", "FP8_SCALES", "FP4_BITS", "MOE_KERNELS"]

GIB = 2**30
TIMINGS = ("auto", "measured", "roofline", "paper")
COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "fp4")
FP8_SCALES = ("tensor", "block", "dynamic")
# bits one FP4 weight takes with its share of the block scales: NVFP4 4 + 8/16 (an FP8
# E4M3 scale per 16 values), MXFP4 4 + 8/32 (an E8M0 scale per 32; OCP Microscaling
# Formats (MX) v1.0; NVIDIA's NVFP4: the TensorRT Model Optimizer docs, and the group_size
# 16 of NVFP4 checkpoints' hf_quant_config.json, e.g. nvidia/DeepSeek-V3.1-NVFP4 as vendored
# in aiconfigurator-core 0.12.0)
FP4_BITS = {"nvfp4": 4.0 + 8.0 / 16, "mxfp4": 4.0 + 8.0 / 32}
# which weights weight_bits applies to (Deployment.quantized_scope)
QUANTIZED = ("all", "mlp", "experts")
QUANTIZED_LABEL = {"mlp": "MLPs", "experts": "experts"}
# fused-MoE kernel families (Deployment.moe_kernel; hardware.timing.aic, beside
# moe_kernel_family, says which measured rows each is)
MOE_KERNELS = ("trtllm_gen", "deepgemm", "cutlass", "triton")


@dataclass(frozen=True)
class Deployment:
    """How one model is deployed: GPU type, TP x PP GPUs, bit widths, offloading, links.

    ``tp_link`` / ``pp_link`` default (``None``) to the GPU's ``scale_up_link`` (TP inside a
    server; its ``node_link`` when ``tp`` exceeds the GPU's ``gpus_per_node`` and the
    all-reduce ring spans servers) and ``node_link`` (pipeline stages on different servers),
    resolved by the cost model from the catalog. ``kv_tokens`` is the number of cached
    tokens (summed over sequences) that must fit next to the weights; the cost model refuses
    the deployment otherwise. ``timing`` (``auto``, ``measured``, ``roofline``, ``paper``)
    and ``framework`` (a catalog framework id: vllm, sglang, trtllm, ...) decide how passes
    are priced; ``compute_dtype`` ``None`` is the GPU's 16-bit dtype. ``step_overhead``
    False is a draft model's: its passes run inside the target's engine step (vLLM and
    SGLang run the drafter in the same scheduler iteration), so they pay the framework's
    per-layer term but not its per-step one again, nor its per-sequence one (per-request
    work the engine does once per step; the paper GPU's 0.5 ms per pass is paid
    whatever). ``streaming`` (default True: a server streaming tokens to its clients) adds
    the framework's per-sequence streaming cost to the target's passes (a draft's passes
    never pay it); False is an offline run. ``fp8_scales`` (``tensor``,
    ``block``, ``dynamic``; ``None``: the model's ``fp8_scales``) picks the FP8 W8A8 kernel
    the measured timing prices (:attr:`fp8_scaling`). ``max_seqs`` (vLLM's
    ``--max-num-seqs``, default 256) is how many sequences run at once: a model with
    window or linear-attention layers keeps their bounded memory for each of them
    (``hardware.cost.CostModel.kv_capacity_tokens``).
    """

    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    pp: int = 1
    weight_bits: int = 16
    kv_bits: int = 16
    offload_fraction: float | str = 0.0
    offload_pin_memory: bool = True
    tp_link: LinkSpec | None = None
    pp_link: LinkSpec | None = None
    compute_dtype: str | None = None
    workspace_fraction: float = 0.10
    kv_tokens: int = 0
    timing: str = "auto"
    framework: str = "vllm"
    step_overhead: bool = True
    ep: int = 1
    streaming: bool = True
    fp8_scales: str | None = None
    max_seqs: int = 256
    fp4_format: str | None = None
    quantized: str | None = None
    moe_kernel: str | None = None

    def __post_init__(self) -> None:
        cfg = self.model.config
        _check(_is_int(self.tp) and self.tp >= 1, "tp", "must be an integer >= 1", self.tp)
        _check(_is_int(self.pp) and self.pp >= 1, "pp", "must be an integer >= 1", self.pp)
        _check(self.weight_bits in (16, 8, 4), "weight_bits", "must be 16, 8 or 4",
               self.weight_bits)
        _check(self.kv_bits in (16, 8), "kv_bits", "must be 16 or 8", self.kv_bits)
        if self.offload_fraction != "auto":
            _check(isinstance(self.offload_fraction, numbers.Real)
                   and not isinstance(self.offload_fraction, bool)
                   and 0.0 <= self.offload_fraction <= 1.0, "offload_fraction",
                   "must be in [0, 1] or 'auto'", self.offload_fraction)
        _check(isinstance(self.offload_pin_memory, bool), "offload_pin_memory",
               "must be true or false", self.offload_pin_memory)
        _check(self.timing in TIMINGS, "timing", f"must be one of {', '.join(TIMINGS)}",
               self.timing)
        _check(isinstance(self.framework, str) and bool(self.framework), "framework",
               "must be a framework id (see 'specsim hw list')", self.framework)
        _check(self.compute_dtype is None or self.compute_dtype in COMPUTE_DTYPES,
               "compute_dtype", f"must be one of {', '.join(COMPUTE_DTYPES)}",
               self.compute_dtype)
        _check(0.0 <= self.workspace_fraction < 1.0, "workspace_fraction",
               "must be in [0, 1)", self.workspace_fraction)
        _check(_is_int(self.kv_tokens) and self.kv_tokens >= 0, "kv_tokens",
               "must be an integer >= 0", self.kv_tokens)
        _check(_is_int(self.ep) and self.ep >= 1, "ep", "must be an integer >= 1", self.ep)
        _check(isinstance(self.streaming, bool), "streaming", "must be true or false",
               self.streaming)
        _check(_is_int(self.max_seqs) and self.max_seqs >= 1, "max_seqs",
               "must be an integer >= 1", self.max_seqs)
        _check(self.fp8_scales is None or self.fp8_scales in FP8_SCALES, "fp8_scales",
               f"must be one of {', '.join(FP8_SCALES)} (or null: the model's)",
               self.fp8_scales)
        _check(self.fp4_format is None or self.fp4_format in FP4_BITS, "fp4_format",
               f"must be one of {', '.join(FP4_BITS)} (or null: the model's)",
               self.fp4_format)
        if self.fp4_format is not None and self.weight_bits != 4:
            raise UserError(f"deployment: fp4_format: FP4 weights need weight_bits 4, got "
                            f"{self.weight_bits}")
        _check(self.quantized is None or self.quantized in QUANTIZED, "quantized",
               f"must be one of {', '.join(QUANTIZED)} (or null: the checkpoint's)",
               self.quantized)
        if self.quantized not in (None, "all") and self.weight_bits == 16:
            raise UserError(f"deployment: quantized: {self.quantized} names the weights "
                            f"weight_bits quantizes, but weight_bits is 16")
        _check(self.moe_kernel is None or self.moe_kernel in MOE_KERNELS, "moe_kernel",
               f"must be one of {', '.join(MOE_KERNELS)} (or null: the tables' own)",
               self.moe_kernel)
        if self.moe_kernel is not None and not cfg.routed_experts:
            raise UserError(f"deployment: moe_kernel: {self.model.id} has no routed experts, "
                            f"got {self.moe_kernel!r}")
        if self.quantized == "experts" and not cfg.routed_experts:
            raise UserError(f"deployment: quantized: experts: {self.model.id} has no routed "
                            f"experts")
        self._check_ep()
        if self.pp > cfg.num_hidden_layers:
            raise UserError(
                f"{self.model.id}: pp {self.pp} exceeds the model's "
                f"{cfg.num_hidden_layers} layers"
            )
        if cfg.model_type == "medusa":
            if self.tp != 1 or self.pp != 1:
                raise UserError(f"{self.model.id}: Medusa heads run whole on one GPU (tp 1, "
                                f"pp 1), got tp {self.tp}, pp {self.pp}")
            heads = kv = 1
        else:
            heads, kv = cfg.num_attention_heads, cfg.kv_heads
        if heads % self.tp:
            raise UserError(
                f"{self.model.id}: tp {self.tp} does not divide num_attention_heads {heads}"
            )
        linear = cfg.linear_num_key_heads if self.model.shape.linear_state else None
        if linear and linear % self.tp:
            raise UserError(f"{self.model.id}: tp {self.tp} does not divide "
                            f"linear_num_key_heads {linear} (the linear-attention heads)")
        if kv % self.tp and self.tp % kv:
            raise UserError(
                f"{self.model.id}: tp {self.tp} neither divides num_key_value_heads {kv} "
                f"nor is a multiple of it (KV heads cannot be split or replicated evenly)"
            )
        if self.dtype == "fp4" and "fp4" not in self.gpu.peak_flops_per_s:
            raise UserError(f"deployment: compute_dtype: gpu {self.gpu.id} has no FP4 peak "
                            f"(FP4 tensor cores are Blackwell's); leave compute_dtype unset to "
                            f"run FP4 weights weight-only (dequantised to 16 bits), got 'fp4'")
        self.gpu.peak(self.dtype)  # a dtype the chip lacks is refused here
        if self.dtype == "fp8" and self.weight_bits != 8:
            raise UserError(
                f"deployment: compute_dtype: fp8 (W8A8) needs weight_bits 8, got "
                f"{self.weight_bits}"
            )
        if self.dtype == "fp4" and self.fp4 is None:
            raise UserError(
                f"deployment: compute_dtype: fp4 (W4A4) needs FP4 weights: weight_bits 4 and "
                f"an fp4_format (nvfp4 or mxfp4), got weight_bits {self.weight_bits}"
                + ("" if self.weight_bits != 4 else " without an fp4_format"))
        if self.fp8_scales is not None and self.dtype != "fp8":
            raise UserError(f"deployment: fp8_scales: only FP8 W8A8 has them (compute_dtype "
                            f"fp8), got {self.fp8_scales!r} with compute_dtype {self.dtype}")

    def _check_ep(self) -> None:
        experts, ep, tp = self.model.shape.n_experts, self.ep, self.tp
        if ep == 1:
            return
        if not experts:
            raise UserError(f"deployment: ep: {self.model.id} has no experts; ep must be 1, "
                            f"got {ep}")
        if ep % tp and tp % ep:
            raise UserError(f"deployment: ep: must divide tp {tp} (the TP group split "
                            f"between experts and their shards) or be a multiple of it "
                            f"(data-parallel attention groups), got {ep}")
        if experts % ep:
            raise UserError(f"deployment: ep: {ep} does not divide the {experts} routed "
                            f"experts of {self.model.id}")

    @property
    def attention_dp(self) -> int:
        """Data-parallel attention groups: ep / tp when ep exceeds tp, else 1."""
        return self.ep // self.tp if self.ep > self.tp else 1

    @property
    def moe_tp(self) -> int:
        """GPUs that split each routed expert: tp with no expert parallelism, tp / ep where
        ep divides tp, 1 where ep spans the TP group or more."""
        return self.tp // self.ep if self.ep <= self.tp else 1

    @property
    def n_gpus(self) -> int:
        """GPUs the deployment occupies: tp x pp (x the attention DP groups when ep > tp)."""
        return self.tp * self.pp * self.attention_dp

    @property
    def fp8_scaling(self) -> str:
        """How FP8 W8A8 scales its values here (``hardware.catalog.ModelSpec.fp8_scales``):
        ``fp8_scales`` where the deployment says (``dynamic``: a 16-bit checkpoint quantized
        when loaded, vLLM's and SGLang's ``--quantization fp8``), else the model's."""
        return self.fp8_scales or self.model.fp8_scales

    @property
    def fp4(self) -> str | None:
        """The FP4 block-scale format of the weights (``nvfp4``, ``mxfp4``), or None: the
        deployment's ``fp4_format``, else the model's where it ships FP4 at 4 bits."""
        if self.fp4_format is not None:
            return self.fp4_format
        return self.model.fp4_format if self.weight_bits == 4 else None

    @property
    def stored_bits(self) -> float:
        """Bits one quantised weight takes in memory, FP4 block scales included."""
        fp4 = self.fp4
        return FP4_BITS[fp4] if fp4 is not None else float(self.weight_bits)

    @property
    def quantized_scope(self) -> str:
        """Which weights :attr:`stored_bits` applies to (``all``, ``mlp``, ``experts``; the
        rest stay 16-bit): the deployment's ``quantized``, else the model's where the
        deployment runs the checkpoint's own FP4 format (gpt-oss: its experts), else all."""
        if self.quantized is not None:
            return self.quantized
        fp4 = self.fp4
        if fp4 is not None and fp4 == self.model.fp4_format:
            return self.model.quantized
        return "all"

    @property
    def experts_only(self) -> bool:
        """Whether only the routed experts are quantised: every other weight stays 16-bit."""
        return self.quantized_scope == "experts"

    @property
    def weight_label(self) -> str:
        """How the weights are stored, for messages: '16 bits', 'NVFP4 (4.5 bits)',
        'MXFP4 (4.25 bits), experts only' (:meth:`weights_label`)."""
        return self.weights_label()

    def weights_label(self, noun: str = "", bits: str = " bits") -> str:
        """:attr:`weight_label` with ``noun`` after the format (before the scope) and
        ``bits`` for the unit: ``weights_label(" weights", "-bit")`` is '16-bit weights',
        'MXFP4 (4.25-bit) weights, experts only'."""
        fp4 = self.fp4
        label = f"{self.weight_bits}{bits}" if fp4 is None \
            else f"{fp4.upper()} ({FP4_BITS[fp4]:g}{bits})"
        scope = self.quantized_scope
        label += noun
        return label if scope == "all" else f"{label}, {QUANTIZED_LABEL[scope]} only"

    @property
    def dtype(self) -> str:
        """The dtype the matrix multiplies run in (bf16, or fp16 on chips without bf16)."""
        return self.compute_dtype or self.gpu.default_dtype

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads held by one GPU: split when TP divides them, else one replicated head."""
        return max(self.model.config.kv_heads // self.tp, 1)

    @property
    def usable_bytes_per_gpu(self) -> int:
        """Memory one GPU offers for weights and KV after the workspace margin."""
        return int(self.gpu.hbm_capacity_bytes * (1.0 - self.workspace_fraction))


@dataclass(frozen=True)
class StageLayout:
    """What ONE GPU of one pipeline stage holds and reads (per-GPU counts).

    ``streamed_params`` are read every pass; ``stored_params`` also count the embedding
    table(s) the stage keeps; ``kv_values_per_token`` are the K and V values it caches per
    token; ``attn_heads`` and ``layers`` size the attention work and the all-reduces.
    An MoE stage: ``streamed_params`` leave out the routed experts, ``routed_params`` are
    the stage's local routed experts (all of them; a pass reads those its tokens touch),
    ``routed_flop_params`` the routed parameters one token uses on this GPU on average
    (top-k of them, split over the EP/TP GPUs), ``moe_layers`` its MoE blocks.
    ``unquantized_params`` are the stage's share of the embedding table and the lm_head:
    quantised checkpoints keep them in 16 bits (ModelOpt FP8, AWQ, GPTQ; vLLM's and
    TensorRT-LLM's quantisation methods leave both unquantised), so they are stored at
    16 bits whatever ``weight_bits`` says (:meth:`stored_bytes`), with ``wide_params``:
    the streamed block weights outside the deployment's ``quantized_scope`` (none for
    ``all``; attention and router for ``mlp``; every block weight but the routed experts
    for ``experts``).
    """

    layers: int
    streamed_params: int
    stored_params: int
    kv_values_per_token: int
    attn_heads: int
    first: bool
    last: bool
    moe_layers: int = 0
    routed_params: int = 0
    routed_flop_params: float = 0.0
    unquantized_params: int = 0
    # attention that is not full (hardware.layers): the stage's window and linear layers,
    # the K and V values its window layers cache per token (for at most the model's window
    # of each sequence; ``kv_values_per_token`` is then the full layers' alone), its linear
    # layers' state values per sequence and their FLOPs per token on this GPU
    window_layers: int = 0
    linear_layers: int = 0
    window_kv_values_per_token: int = 0
    state_values_per_seq: int = 0
    linear_flops_per_token: float = 0.0
    wide_params: int = 0

    def stored_bytes(self, weight_bits: float) -> float:
        """Bytes of the weights this stage stores at ``weight_bits`` (the embedding and
        lm_head at 16 bits or more; with only the routed experts quantised, every other
        weight)."""
        quantized = self.stored_params - self.unquantized_params
        return (quantized * weight_bits + self.unquantized_params * max(weight_bits, 16)) / 8


def stage_layouts(dep: Deployment) -> tuple[StageLayout, ...]:
    """Per-GPU contents of each pipeline stage of ``dep`` (see the module notes)."""
    shape = dep.model.shape
    tp, kv_heads = dep.tp, dep.kv_heads_per_gpu
    # k/v projections shrink with the KV heads a GPU holds, the rest of a block with tp.
    kv_proj = shape.kv_proj_params * kv_heads // shape.n_kv_heads
    layer = (shape.layer_params - shape.kv_proj_params) // tp + kv_proj
    # MoE blocks: the non-expert part as above (the router replicated), plus this GPU's
    # experts: E / ep of them, each split moe_tp ways (all E over tp without EP)
    moe_tp = dep.moe_tp
    local_experts = shape.n_experts // dep.ep
    moe_layer = (shape.moe_fixed_params - shape.kv_proj_params - shape.moe_replicated_params
                 ) // tp + kv_proj + shape.moe_replicated_params
    routed_layer = local_experts * (shape.expert_params // moe_tp)
    routed_flops = shape.top_k * shape.expert_params / (dep.ep * moe_tp)
    scope = dep.quantized_scope
    # one full-attention block's attention weights on this GPU (split as the block is)
    attn = (shape.attn_params - shape.kv_proj_params) // tp + kv_proj
    base, extra = divmod(shape.n_layers, dep.pp)
    layouts = []
    start = 0
    for s in range(dep.pp):
        n = base + (1 if s < extra else 0)
        first, last = s == 0, s == dep.pp - 1
        n_moe = sum(shape.moe_layers[start:start + n])
        start += n
        head = math.ceil(shape.head_params / tp) if last else 0
        full, window, linear = shape.kinds_of(start - n, n)
        # a linear-attention layer: its own parameters split over tp (no KV heads to keep)
        linear_extra = linear * ((shape.linear_delta_params + shape.kv_proj_params) // tp
                                 - kv_proj)
        streamed = (n - n_moe) * layer + n_moe * moe_layer + head + linear_extra
        # A tied lm_head on a single stage is the embedding matrix itself: stored once.
        tied_once = dep.model.config.tied and first and last
        embedding = shape.embedding_params if first else 0
        if tied_once:
            embedding -= dep.model.config.vocab_size * (
                dep.model.config.word_embed_proj_dim or shape.hidden
            )
        stored = streamed + math.ceil(embedding / tp) + n_moe * routed_layer
        if scope == "mlp":
            wide = n * attn + linear_extra + n_moe * shape.moe_replicated_params
        else:
            wide = streamed - head if scope == "experts" else 0
        layouts.append(
            StageLayout(
                layers=n,
                streamed_params=streamed,
                stored_params=stored,
                kv_values_per_token=full * shape.kv_values_per_layer(kv_heads),
                attn_heads=shape.n_heads // tp,
                first=first,
                last=last,
                moe_layers=n_moe,
                routed_params=n_moe * routed_layer,
                routed_flop_params=n_moe * routed_flops,
                unquantized_params=math.ceil(embedding / tp) + head + wide,
                wide_params=wide,
                window_layers=window,
                linear_layers=linear,
                window_kv_values_per_token=window * shape.kv_values_per_layer(kv_heads),
                state_values_per_seq=linear * shape.linear_state // tp,
                linear_flops_per_token=linear * shape.linear_flops / tp,
            )
        )
    return tuple(layouts)


def check_positions(model: ModelSpec, context: int, new_tokens: int) -> None:
    """Refuse a pass that needs more positions than the model has.

    A sequence with ``context`` cached tokens fed ``new_tokens`` more (for a token tree: its
    depth + 1, the positions its nodes take, not its node count) occupies positions up to
    ``context + new_tokens``; beyond ``max_position_embeddings`` the model was never trained
    (OPT's learned position table has no rows there). UserError with the numbers.
    """
    limit = model.config.max_position_embeddings
    if context + new_tokens > limit:
        raise UserError(
            f"{model.id}: context {context} + {new_tokens} new tokens = "
            f"{context + new_tokens} positions exceed max_position_embeddings {limit}"
        )


def _is_int(value: object) -> bool:
    """Python or numpy integers, not bools (a scenario may hand over either)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check(ok: bool, field: str, msg: str, value: object) -> None:
    if not ok:
        raise UserError(f"deployment: {field}: {msg}, got {value!r}")
