"""GPU, link and model catalogs: typed, frozen entries loaded and validated from YAML.

The shipped catalogs live in ``hardware/data/{gpus,links,models,frameworks}.yaml`` (their
headers document every field and its unit). A user catalog file has the same layout -- a
mapping with any of the sections ``gpus``, ``links``, ``models``, ``frameworks`` -- and adds
ids or overrides shipped ones (``specsim calibrate`` writes such a file). An entry for an id
already known needs only the fields it changes (``gpus: {h100: {eta_memory: 0.7}}``); the
nested timing parameters (a GPU's ``roofline``, a link's ``collective``, a framework's
``memory`` and each of its ``versions``) merge field by field too, while a model's
``config`` is replaced whole. Every problem is reported as one :class:`UserError` line
naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from hardware.models import (
    ModelConfig,
    ModelShape,
    format_validation,
    hf_fp8_scales,
    hf_ships_fp8,
    load_hf_config,
    model_shape,
    read_utf8,
)
from specdec.errors import UserError

__all__ = ["Catalog", "CollectiveParams", "EngineMemory", "FrameworkSpec", "FrameworkVersion",
           "GpuSpec", "LinkSpec", "ModelSpec", "RooflineParams", "load_catalog", "DATA_DIR",
           "release_name_ok"]

DATA_DIR = Path(__file__).parent / "data"
_SECTIONS = ("gpus", "links", "models", "frameworks")
# Mappings inside an entry that a user file overrides field by field (not replaced whole).
_NESTED = ("roofline", "collective", "memory", "speculation")

Dtype = Literal["bf16", "fp16", "fp8", "fp4", "int8"]


class _Frozen(BaseModel):
    # no inf or nan in any number: a bound like ge=0 alone lets .inf through (a GPU's
    # overhead_s: .inf was taken, and the paper timing priced every pass at "inf ms")
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


Fraction = Annotated[float, Field(gt=0, le=1)]


class RooflineParams(_Frozen):
    """A GPU's calibrated roofline parameters (``hardware/timing/roofline.py`` uses them).

    Weight streaming reaches ``eta_weights`` (16-bit), ``eta_fp8`` (fp8 W8A8), ``eta_int8`` /
    ``eta_int4`` (weight-only kernels) of the HBM bandwidth on large shards, less on small
    ones: a layer shard of ``weights_half_bytes`` bytes per GPU streams at half that.
    KV reads reach ``eta_kv`` with many sequences, less with few: ``n`` sequences read at
    ``eta_kv·n/(n + kv_half_seqs)`` (the attention kernel has fewer sequences to spread over
    the GPU; 0: no such loss); matrix arithmetic ``eta_compute`` of the dtype's peak, and
    the corner between the two roofs is rounded with exponent ``corner`` (compute
    efficiency falls as the arithmetic intensity nears the ridge; large = a sharp max).
    ``eta_host`` is the fraction of the host link's bandwidth offloaded weights stream at
    from pinned (page-locked) host memory, ``eta_host_pageable`` from pageable memory (the
    driver stages each copy through a pinned buffer; ``host_eta`` picks one; a block that
    leaves it out, as user catalogs written before it existed do, gets ``eta_host``).
    ``calibrated`` says whether the values were fitted on measurements of this GPU
    (``source`` says which) or borrowed from another GPU.
    """

    eta_weights: Fraction
    eta_fp8: Fraction
    eta_int8: Fraction
    eta_int4: Fraction
    # FP4 W4A4 (compute_dtype fp4, Blackwell); absent: eta_fp8's value (no GPU with an FP4
    # peak has a calibrated roofline yet)
    eta_fp4: Fraction | None = None
    weights_half_bytes: float = Field(ge=0)
    eta_kv: Fraction
    kv_half_seqs: float = Field(default=0.0, ge=0)
    eta_compute: Fraction
    corner: float = Field(ge=1, le=64)
    eta_host: Fraction
    eta_host_pageable: Fraction
    calibrated: bool
    source: str

    @model_validator(mode="before")
    @classmethod
    def _pageable_defaults_to_pinned(cls, data: Any) -> Any:
        if isinstance(data, dict) and "eta_host_pageable" not in data and "eta_host" in data:
            data = {**data, "eta_host_pageable": data["eta_host"]}
        return data

    def host_eta(self, pin_memory: bool) -> float:
        """The host-link efficiency of offloaded weights in pinned or pageable memory."""
        return self.eta_host if pin_memory else self.eta_host_pageable


class CollectiveParams(_Frozen):
    """A link's α-β all-reduce parameters: ``call_s + 2(tp-1)·step_s + bytes/(β·eta)``."""

    call_s: float = Field(ge=0)
    step_s: float = Field(ge=0)
    eta: Fraction
    calibrated: bool
    source: str


class EngineMemory(_Frozen):
    """What a serving engine keeps on each GPU besides the weights and the KV cache, as an
    engine that sizes its KV cache from the memory left after a profiling pass sees it
    (TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction`` is a share of what is left after
    these): the activations of a pass of the whole step token budget at their peak,
    ``activation_vectors`` 16-bit vectors as wide as the attention's heads (heads x head
    dim, the hidden size of a Llama) per budget token (by TP degree: the entry of the
    largest listed degree <= tp, SpecSim's extension to degrees the source does not list),
    at least ``min_activation_bytes``; the
    collective library's buffers (``collective_bytes``, by TP degree the same way, none at
    TP 1); and ``runtime_bytes`` for the rest (CUDA context, library workspaces, CUDA
    graphs). Per GPU, bytes.

    An MoE model is sized only where its ``model_type`` is in ``moe_models``: its
    activations take ``moe_activation_vectors`` (by TP degree) instead, and a model type
    ``moe_models`` maps to true adds a dispatch workspace of ``moe_workspace_bytes`` per
    budget token x width x routed expert x top-k / EP (aiconfigurator's block-scale
    dispatch workspace, its DeepSeek family's); other MoE models are not sized."""

    activation_vectors: dict[PositiveInt, NonNegativeFloat] = Field(min_length=1)
    min_activation_bytes: NonNegativeFloat = 0.0
    collective_bytes: dict[PositiveInt, NonNegativeFloat] = Field(default_factory=dict)
    runtime_bytes: NonNegativeFloat = 0.0
    moe_models: dict[str, bool] = Field(default_factory=dict)
    moe_activation_vectors: dict[PositiveInt, NonNegativeFloat] = Field(default_factory=dict)
    moe_workspace_bytes: NonNegativeFloat = 0.0
    source: str

    @model_validator(mode="after")
    def _moe_sized(self):
        if self.moe_models and not self.moe_activation_vectors:
            raise ValueError("moe_models: needs moe_activation_vectors, the activations of "
                             "the MoE models it sizes")
        return self

    def bytes_per_gpu(self, tp: int, width: int, budget_tokens: int,
                      moe: tuple[str, int, int, int] | None = None) -> float:
        """The engine's non-KV, non-weight bytes on one GPU of a TP-``tp`` deployment of a
        model whose attention is ``width`` wide (heads x head dim) and whose steps hold at
        most ``budget_tokens`` tokens; ``moe``: an MoE model's (model_type, routed experts,
        top-k, EP), which must be one of ``moe_models``."""
        if moe is None:
            vectors, workspace = _by_degree(self.activation_vectors, tp), 0.0
        else:
            model_type, experts, top_k, ep = moe
            vectors = _by_degree(self.moe_activation_vectors, tp)
            # (aiconfigurator also multiplies it by the attention data-parallel size, which
            # the rows priced here do not run)
            workspace = (self.moe_workspace_bytes * budget_tokens * width * experts * top_k
                         / ep if self.moe_models[model_type] else 0.0)
        activations = max(vectors * budget_tokens * width * 2 + workspace,
                          self.min_activation_bytes)
        collective = _by_degree(self.collective_bytes, tp) if tp > 1 else 0.0
        return activations + collective + self.runtime_bytes


def _by_degree(table: dict[int, float], tp: int) -> float:
    """``table``'s entry at the largest degree <= ``tp`` (0 when there is none)."""
    keys = [k for k in table if k <= tp]
    return table[max(keys)] if keys else 0.0


def release_name_ok(release: object) -> bool:
    """Whether ``release`` can name a framework release (``<id>@<release>``): a non-empty
    string with no '@' and no space at either end."""
    return isinstance(release, str) and bool(release) and release == release.strip() \
        and "@" not in release


# the drafting methods, named once (a method's registration: sim.methods imports the
# module sim/methods/<name>.py of each, its drafter kind, defaults and traits): the
# scenario's ``models.method``, the speculation rows' ``method`` (hardware.timing.spec_rows)
# and the engines' speculation overheads below take these
DRAFT_METHODS = ("draft_model", "eagle", "eagle3", "mtp", "medusa", "ngram", "suffix",
                 "dflash")
SPEC_METHODS = ("default", *DRAFT_METHODS)  # ``draft_step_s`` keys: a method, or default


class SpecOverheads(_Frozen):
    """What a serving engine spends on a speculative iteration beyond its draft and verify
    passes (``hardware.spec_cost``): ``step_s`` per iteration that verifies drafts
    (rejection sampling, the proposer's input preparation, bookkeeping), ``seq_s`` per
    sequence that speculates in it (sampler and proposer work per request),
    ``draft_step_s`` per serial draft pass by drafting method (launches and host work the
    pass's GPU time leaves out; ``default`` for a method not listed), ``tree_s`` per
    iteration that verifies a token tree (building it, selecting the nodes, the tree
    mask); seconds, with their ``source``."""

    step_s: float = Field(default=0.0, ge=0)
    seq_s: float = Field(default=0.0, ge=0)
    draft_step_s: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    tree_s: float = Field(default=0.0, ge=0)
    source: str

    @field_validator("draft_step_s")
    @classmethod
    def _methods(cls, value: dict) -> dict:
        for key in value:
            if key not in SPEC_METHODS:
                raise ValueError(f"{key!r}: must be one of {', '.join(SPEC_METHODS)}")
        return value


class FrameworkVersion(_Frozen):
    """One release of a serving engine whose CPU-side overheads were fitted on its own
    measurements: the fields it gives replace the framework entry's, the rest (kernel
    tables, scheduler, memory) are the entry's. ``source`` says which rows fitted them."""

    step_s: float | None = Field(default=None, ge=0)
    tp_step_s: float | None = Field(default=None, ge=0)
    layer_s: float | None = Field(default=None, ge=0)
    seq_s: float | None = Field(default=None, ge=0)
    stream_seq_s: float | None = Field(default=None, ge=0)
    act_passes: float | None = Field(default=None, ge=0)
    speculation: SpecOverheads | None = None
    source: str


class FrameworkSpec(_Frozen):
    """A serving engine: its pinned version, kernel tables and CPU-side overheads.

    Every pass costs ``step_s + tp_step_s·(tp - 1) + layer_s·layers + seq_s·sequences`` on
    top of its GPU time (scheduling, input preparation, launches, sampling, per-request
    bookkeeping; ``tp_step_s`` what each more GPU of a tensor-parallel group adds), and a
    server that streams its tokens (``Deployment.streaming``) ``stream_seq_s`` more per
    sequence (detokenising and sending each step's token; offline runs such as
    ``trtllm-bench throughput`` skip it). ``act_passes`` is the GPU work the kernel tables
    leave out (normalisation, residual adds, rotary, activation, activation
    quantisation): that many hidden-wide 16-bit activation vectors read or written per
    token per transformer block, at the GPU's HBM bandwidth (``hardware.timing.base.
    elementwise_s_per_token``).
    ``tables`` names the engine's measured kernel tables (``None``: roofline only);
    ``offload_overlap`` says whether offloaded weights stream while the GPU computes
    (FlexGen style) or before each layer runs (Hugging Face Accelerate);
    ``host_efficiency`` is the share of the GPU's host-link efficiency its offload copies
    reach (1: as fast as the GPU's pinned or pageable rate; less for an engine that moves
    weights in many small pieces or with compression metadata).

    How its scheduler takes in prompts, which the serving-metric rows
    (:mod:`hardware.timing.serving`) price: ``max_num_batched_tokens`` tokens per step at
    most (vLLM's name; TensorRT-LLM's ``max_num_tokens``, SGLang's ``chunked_prefill_size``),
    ``chunked_prefill`` (a prompt may be split across steps; otherwise whole prompts only),
    ``mixed_prefill`` (prompts share the step with the running decodes, as in vLLM v1 and
    TensorRT-LLM's in-flight batching; otherwise a prefill batch runs alone, as SGLang's
    default does). ``scheduler_source`` says where those three come from (unset: SpecSim's
    defaults, claimed for no engine). ``memory`` is what the engine keeps besides weights
    and KV (:class:`EngineMemory`; unset: nothing), which a KV cache sized as a share of the
    memory left (a ``kv_fraction`` measurement row) does not get.
    ``shared_expert_stream_tokens``: passes of at most that many tokens run an MoE layer's
    shared experts on a second CUDA stream beside its routed experts, so the layer's
    experts cost the longer of the two rather than their sum (0: never;
    ``shared_expert_source`` says where the engine does it).
    ``moe_ep_within_tp``: the engine may split its TP group between expert parallelism
    and expert shards (``ep`` dividing ``tp``: ``Deployment.moe_tp``); False, as vLLM,
    whose EP group is TP x DP, refuses it (``moe_parallel_source`` says where).
    ``versions``: releases with overheads of their own (:class:`FrameworkVersion`), priced
    as ``<id>@<version>`` (:meth:`Catalog.framework`); ``version`` is the release the entry
    stands for (the kernel tables' for the shipped engines).
    """

    id: str
    name: str
    version: str
    versions: dict[str, FrameworkVersion] = Field(default_factory=dict)
    tables: str | None = None
    step_s: float = Field(ge=0)
    tp_step_s: float = Field(default=0.0, ge=0)
    layer_s: float = Field(ge=0)
    seq_s: float = Field(ge=0)
    stream_seq_s: float = Field(default=0.0, ge=0)
    act_passes: float = Field(default=0.0, ge=0)
    offload_overlap: bool = True
    host_efficiency: Fraction = 1.0
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    chunked_prefill: bool = True
    mixed_prefill: bool = True
    scheduler_source: str | None = None
    memory: EngineMemory | None = None
    shared_expert_stream_tokens: int = Field(default=0, ge=0)
    shared_expert_source: str | None = None
    moe_ep_within_tp: bool = False
    moe_parallel_source: str | None = None
    speculation: SpecOverheads | None = None
    source: str

    @field_validator("versions", mode="before")
    @classmethod
    def _release_names(cls, versions):
        for release in versions if isinstance(versions, dict) else ():
            if not isinstance(release, str):  # YAML read an unquoted 1.0 as a number
                raise ValueError(f"release name {release!r} is not a string: quote it "
                                 f"(\"{release}\")")
            if not release_name_ok(release):
                raise ValueError(f"bad release name {release!r} (no '@', no spaces at "
                                 f"either end)")
        return versions


class GpuSpec(_Frozen):
    """One GPU type: peaks, memory, calibration constants, links and price (units in names).

    ``eta_compute``, ``eta_memory`` and ``overhead_s`` are the lecture's paper GPU (the
    ``paper`` timing); ``roofline`` holds calibrated parameters (``None``: datasheet only,
    the roofline then runs at the paper efficiencies); ``tables`` names the GPU's measured
    kernel tables (``None``: none) and ``tables_max_tp`` the most GPUs their all-reduce
    rows measure (``None``: ``gpus_per_node``; a GB200 NVL72's NVLink domain is 72 GPUs,
    its tables measure one tray of 4).
    """

    id: str
    name: str
    peak_flops_per_s: dict[Dtype, PositiveFloat] = Field(min_length=1)
    hbm_bytes_per_s: PositiveFloat
    hbm_capacity_gib: PositiveFloat
    eta_compute: float = Field(gt=0, le=1)
    eta_memory: float = Field(gt=0, le=1)
    overhead_s: float = Field(ge=0)
    host_link: str
    scale_up_link: str
    node_link: str
    gpus_per_node: PositiveInt
    price_per_hour_usd: float = Field(ge=0)
    source: str
    roofline: RooflineParams | None = None
    tables: str | None = None
    tables_max_tp: PositiveInt | None = None

    @property
    def hbm_capacity_bytes(self) -> int:
        """Device memory in bytes."""
        return int(self.hbm_capacity_gib * 2**30)

    def ridge_flop_per_byte(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s over peak bytes/s: the roofline's ridge point (no efficiency factors)."""
        return self.peak(dtype) / self.hbm_bytes_per_s

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; a dtype the chip lacks is a UserError."""
        try:
            return self.peak_flops_per_s[dtype]
        except KeyError:
            have = ", ".join(self.peak_flops_per_s)
            raise UserError(f"gpu {self.id}: no {dtype} peak (has {have})") from None

    @property
    def default_dtype(self) -> str:
        """The 16-bit compute dtype: bf16 where the chip has it, else fp16 (T4)."""
        return "bf16" if "bf16" in self.peak_flops_per_s else "fp16"


class LinkSpec(_Frozen):
    """One interconnect: bandwidth per direction (bytes/s) and per-message latency (s)."""

    id: str
    name: str
    bytes_per_s: PositiveFloat
    latency_s: float = Field(ge=0)
    source: str
    collective: CollectiveParams | None = None


class ModelSpec(_Frozen):
    """One model: its id, where its config comes from, and the config itself."""

    id: str
    source: str
    config: ModelConfig
    # other names of the model: Hugging Face ids of the checkpoint and its variants with the
    # same architecture (instruct tunes), as `vllm serve` takes them
    aliases: tuple[str, ...] = ()
    # the precision the checkpoint ships in, which `specsim hw step` assumes when no
    # --weight-bits is given (null: 16-bit); compute_dtype fp8 = FP8 W8A8, e.g. DeepSeek-V3's
    # block-scaled FP8 weights (a scenario states its deployment.weight_bits itself)
    weight_bits: Literal[4, 8, 16] | None = None
    compute_dtype: Literal["bf16", "fp8"] | None = None
    # how an FP8 W8A8 deployment of the model scales its values, which picks the measured
    # GEMM kernel: tensor = one scale per weight matrix and a static one per activation,
    # calibrated offline (NVIDIA's ModelOpt FP8 checkpoints such as
    # nvidia/Llama-3.1-8B-Instruct-FP8, which TensorRT-LLM runs and vLLM loads as is);
    # block = 128x128 weight blocks with per-token-group activation scales (DeepSeek-V3's
    # quantization_config weight_block_size); dynamic = one scale per weight matrix and the
    # activations' scales computed on every pass (a config.json whose quantization_config
    # says activation_scheme dynamic without weight blocks; vLLM's and SGLang's
    # --quantization fp8 on a 16-bit checkpoint, deployment.fp8_scales)
    fp8_scales: Literal["tensor", "block", "dynamic"] = "tensor"
    # a checkpoint of 4-bit floating-point weights: its block-scale format (nvfp4 = E2M1
    # values with one FP8 E4M3 scale per 16, mxfp4 = E2M1 with one E8M0 scale per 32;
    # null: none, 4-bit weights are then int4) and which weights it quantizes (all but the
    # embedding and lm_head; mlp: the MLPs and experts, attention and router in bf16; or
    # only the routed experts, as gpt-oss's quantization_config leaves attention and the
    # router in bf16)
    fp4_format: Literal["nvfp4", "mxfp4"] | None = None
    quantized: Literal["all", "mlp", "experts"] = "all"

    @model_validator(mode="after")
    def _precision(self) -> ModelSpec:
        if self.compute_dtype == "fp8" and self.weight_bits != 8:
            raise ValueError(f"compute_dtype: fp8 (W8A8) needs weight_bits 8, got "
                             f"{self.weight_bits}")
        if self.fp4_format is not None and self.weight_bits != 4:
            raise ValueError(f"fp4_format: FP4 weights need weight_bits 4, got "
                             f"{self.weight_bits}")
        if self.quantized == "experts" and not self.config.routed_experts:
            raise ValueError("quantized: experts: the model has no routed experts")
        return self

    def precision(self, weight_bits: int | None,
                  compute_dtype: str | None) -> tuple[int, str | None]:
        """(weight bits, compute dtype) asked for, or, with no weight bits given, the
        precision the checkpoint ships in (16-bit when the catalog does not say), with its
        compute dtype when that is 8 bits and none was given."""
        if weight_bits is not None:
            return weight_bits, compute_dtype
        bits = self.weight_bits or 16
        return bits, (compute_dtype or self.compute_dtype) if bits == 8 else compute_dtype

    def ships_fp8(self) -> bool:
        """Whether the checkpoint ships FP8 weights: the catalog says 8 bits, or a
        ``config.json``'s quantization_config is FP8 (then ``--quantization fp8`` in vLLM
        and SGLang keeps its own scales rather than quantizing when loaded)."""
        return self.weight_bits == 8

    @property
    def shape(self) -> ModelShape:
        """Parameter counts (computed on demand; cheap)."""
        return model_shape(self.config)

    def servable(self, role: str) -> ModelSpec:
        """This model; a UserError naming ``role`` (e.g. ``--target``) when it is a set of
        Medusa heads, which only draft for a target (``method: medusa``)."""
        if self.config.model_type == "medusa":
            raise UserError(f"{role}: {self.id} is a set of Medusa heads, not a model to "
                            f"serve or draft with (its heads draft for a target: method "
                            f"medusa)")
        return self


_SPEC_TYPES: dict[str, type[_Frozen]] = {"gpus": GpuSpec, "links": LinkSpec,
                                          "models": ModelSpec, "frameworks": FrameworkSpec}


@dataclass(frozen=True)
class Catalog:
    """All known GPUs, links and models, by id."""

    gpus: dict[str, GpuSpec] = field(default_factory=dict)
    links: dict[str, LinkSpec] = field(default_factory=dict)
    models: dict[str, ModelSpec] = field(default_factory=dict)
    frameworks: dict[str, FrameworkSpec] = field(default_factory=dict)

    def gpu(self, gpu_id: str) -> GpuSpec:
        """The GPU ``gpu_id``; an unknown id is a UserError listing the known ones."""
        return _lookup("gpu", gpu_id, self.gpus)

    def link(self, link_id: str) -> LinkSpec:
        """The link ``link_id``; an unknown id is a UserError listing the known ones."""
        return _lookup("link", link_id, self.links)

    def framework(self, framework_id: str) -> FrameworkSpec:
        """The serving framework ``framework_id``; unknown: a UserError listing the known.

        ``<id>@<version>`` is a release the entry lists under ``versions``: the entry with
        that release's overheads (``version`` set to it); a release it does not list is a
        UserError naming the ones it does (without ``@version``: the entry's own)."""
        key, at, release = framework_id.partition("@")
        spec = _lookup("framework", key, self.frameworks)
        if not at:
            return spec
        if release not in spec.versions:
            listed = ", ".join(sorted(spec.versions)) or "none"
            fit = f", or fit the version's with specsim calibrate --fit " \
                f"frameworks.{key}@{release}.step_s ..." if release_name_ok(release) else ""
            raise UserError(f"framework {framework_id!r}: {key} lists no overheads for "
                            f"version {release!r} (listed: {listed}); give {key!r} alone "
                            f"for its default overheads{fit}")
        own = spec.versions[release]
        fields = {k: getattr(own, k) for k in type(own).model_fields
                  if k != "source" and getattr(own, k) is not None}
        source = f"{', '.join(fields)}: {own.source}; otherwise: {spec.source}" if fields \
            else f"{own.source}; the overheads: {spec.source}"
        return spec.model_copy(update={**fields, "version": release, "versions": {},
                                       "source": source})

    def without_releases(self) -> Catalog:
        """This catalog with no framework release's own overheads (every ``<id>@<version>``
        priced as ``<id>`` would be, as a release the catalog does not list is)."""
        return Catalog(gpus=self.gpus, links=self.links, models=self.models,
                       frameworks={k: f.model_copy(update={"versions": {}})
                                   for k, f in self.frameworks.items()})

    def framework_id(self, framework: str, version: str) -> str:
        """The id that prices a measurement of ``framework`` at ``version`` (a release its
        entry may not list): ``<framework>@<version>`` where the entry lists the release,
        else ``framework`` (its default overheads)."""
        listed = _lookup("framework", framework, self.frameworks).versions
        return f"{framework}@{version}" if version and version in listed else framework

    def model(self, model_id: str) -> ModelSpec:
        """The model ``model_id``, or one loaded from a HF ``config.json`` path.

        A value ending in ``.json`` is read as a Hugging Face config file (Llama, dense
        Qwen3, OPT, Mixtral, Qwen3-MoE or DeepSeek-V2/V3 family), in the precision its
        checkpoint ships in unless the deployment says otherwise: 8 bits with FP8 compute
        where its quantization_config says ``quant_method: fp8`` (as a catalog entry of an
        FP8 checkpoint says), else 16; its ``weight_block_size`` and ``activation_scheme``
        make an FP8 deployment of it block-scaled or per-tensor with dynamic activation
        scales (:func:`hardware.models.hf_fp8_scales`). Anything else must be a catalog id.
        """
        if model_id.endswith(".json"):
            fp8 = hf_ships_fp8(model_id)
            return ModelSpec(id=model_id, source=model_id, config=load_hf_config(model_id),
                             fp8_scales=hf_fp8_scales(model_id),
                             weight_bits=8 if fp8 else None,
                             compute_dtype="fp8" if fp8 else None)
        if model_id in self.models:
            return self.models[model_id]
        by_alias = {a.lower(): m for m in self.models.values() for a in m.aliases}
        if model_id.lower() in by_alias:
            return by_alias[model_id.lower()]
        known = ", ".join(sorted(self.models))
        raise UserError(f"unknown model {model_id!r} (known: {known}; or give its Hugging "
                        "Face config.json path, or add it to a catalog file with "
                        "deployment.catalog)")


def _lookup(kind: str, key: str, table: dict[str, Any]) -> Any:
    try:
        return table[key]
    except KeyError:
        known = ", ".join(sorted(table))
        raise UserError(f"unknown {kind} {key!r} (known: {known})") from None


# libyaml's parser where PyYAML was built with it (the shipped catalogs parse ~10x faster)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# a catalog nests about 5 deep; libyaml builds a document recursively in C, and some 40000
# levels ('[[[...' or '- - - ...') overflow the C stack: a segmentation fault, not an error
MAX_DEPTH = 100
_NODES = (yaml.ScalarEvent, yaml.AliasEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)


def _check_events(path: Path, text: str) -> None:
    """Refuse, from libyaml's event stream (a state machine, not recursive), what building
    the document would do wrong: nesting past ``MAX_DEPTH`` (a crash) and a key given twice
    in one mapping (PyYAML keeps the last one, silently)."""
    open_ = []  # per open collection: [keys seen (None: a sequence), next node is a key]
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, _NODES) and open_ and open_[-1][0] is not None:
            keys, is_key = open_[-1]
            open_[-1][1] = not is_key
            if is_key and isinstance(event, yaml.ScalarEvent):
                if event.value in keys:
                    raise UserError(f"{path}: line {event.start_mark.line + 1}: key "
                                    f"{event.value!r} given twice in one mapping")
                keys.add(event.value)
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_.append([set() if isinstance(event, yaml.MappingStartEvent) else None, True])
            if len(open_) > MAX_DEPTH:
                raise UserError(f"{path}: nested more than {MAX_DEPTH} deep to be a catalog "
                                "file")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            open_.pop()


def _read_yaml(path: Path) -> dict[str, Any]:
    text = read_utf8(path, "catalog file", "a catalog file must be UTF-8 YAML")
    try:
        _check_events(path, text)
        raw = yaml.load(text, Loader=_LOADER)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise UserError(f"{path}: invalid YAML{where}: {problem}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a catalog file must be a mapping with sections "
                        f"{'/'.join(_SECTIONS)}")
    for key in raw:
        if key not in _SECTIONS:
            raise UserError(f"{path}: unknown section {key!r} (known: {', '.join(_SECTIONS)})")
    return raw


def _parse(path: Path, raw: dict[str, Any], tables: dict[str, dict[str, Any]]) -> None:
    """Validate each entry of ``raw`` into ``tables`` (later files override earlier ids)."""
    for section, entries in raw.items():
        if not isinstance(entries, dict):
            raise UserError(f"{path}: {section}: must map ids to entries, got "
                            f"{type(entries).__name__}")
        for entry_id, body in entries.items():
            where = f"{section}.{entry_id}"
            if not isinstance(entry_id, str) or not entry_id or entry_id != entry_id.strip():
                raise UserError(f"{path}: {section}: bad id {entry_id!r}")
            if not isinstance(body, dict):
                raise UserError(f"{path}: {where}: must be a mapping of fields, got "
                            f"{type(body).__name__}")
            if "id" in body:
                raise UserError(f"{path}: {where}.id: the id is the entry's key; remove the field")
            if section == "frameworks" and "@" in entry_id:
                raise UserError(f"{path}: {where}: a framework id has no '@' (a release's "
                                f"overheads go under the entry's versions)")
            base = tables[section].get(entry_id)
            if base is not None:  # overriding a known id: only the fields given change
                body = _merge(base.model_dump(exclude={"id"}), body)
            try:
                tables[section][entry_id] = _SPEC_TYPES[section](id=entry_id, **body)
            except ValidationError as err:
                raise UserError(format_validation(str(path), where, err)) from None


def _merge(base: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``body``; the nested timing mappings merge one level deeper."""
    out = {**base, **body}
    for key in _NESTED:
        if isinstance(base.get(key), dict) and isinstance(body.get(key), dict):
            out[key] = {**base[key], **body[key]}
    old, new = base.get("versions"), body.get("versions")
    if isinstance(old, dict) and isinstance(new, dict):  # a release merges field by field
        out["versions"] = {**old, **{v: {**old[v], **b} if isinstance(old.get(v), dict)
                                     and isinstance(b, dict) else b for v, b in new.items()}}
    return out


def _check_links(origin: dict[str, Path], tables: dict[str, dict[str, Any]]) -> None:
    """Every link a GPU names must exist (reported against the file that defined the GPU)."""
    for gpu in tables["gpus"].values():
        for attr in ("host_link", "scale_up_link", "node_link"):
            link_id = getattr(gpu, attr)
            if link_id not in tables["links"]:
                known = ", ".join(sorted(tables["links"]))
                raise UserError(
                    f"{origin[gpu.id]}: gpus.{gpu.id}.{attr}: unknown link {link_id!r} "
                    f"(known: {known})"
                )


def _load(paths: tuple[Path, ...]) -> Catalog:
    tables: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
    origin: dict[str, Path] = {}
    for path in paths:
        raw = _read_yaml(path)
        _parse(path, raw, tables)
        origin.update({gpu_id: path for gpu_id in raw.get("gpus") or {}})
    _check_links(origin, tables)
    return Catalog(**tables)


def load_catalog(extra: str | Path | Sequence[str | Path] | None = None) -> Catalog:
    """The shipped catalogs plus optional user catalog file(s), later files overriding ids.

    The shipped-only catalog is read once and cached (entries are frozen, so sharing is
    safe); user files are read on every call so edits take effect.
    """
    shipped = tuple(DATA_DIR / f"{s}.yaml" for s in _SECTIONS)
    if extra is None:
        extras: tuple[Path, ...] = ()
    elif isinstance(extra, (str, Path)):
        extras = (Path(extra),)
    else:
        extras = tuple(Path(p) for p in extra)
    if not extras:
        return _shipped(shipped)
    return _load(shipped + extras)


@lru_cache(maxsize=1)
def _shipped(paths: tuple[Path, ...]) -> Catalog:
    return _load(paths)
