"""Model architectures from Hugging Face ``config.json`` fields, and their parameter counts.

Two families cover every model the lecture and the papers use (and dense Qwen3 is the
first one's block with q/k norms):

- ``llama`` (LLaMA, Llama-2, Llama-3, Vicuna, TinyLlama): per block q/k/v/o projections
  without biases (k and v have ``num_key_value_heads`` heads: GQA), a SwiGLU MLP with three
  ``hidden × intermediate`` matrices (gate, up, down), two RMSNorm weight vectors; rotary
  positions (no parameters); a final RMSNorm; an lm_head that may be tied to the embedding.
  ``qwen3`` (the dense Qwen3 models) is the same block with a per-head RMSNorm on q and on k
  (``q_norm``, ``k_norm``: ``head_dim`` weights each; transformers
  ``models/qwen3/modeling_qwen3.py``, ``Qwen3Attention``); its config must state
  ``head_dim`` (every released one does). Its sliding-window option (``use_sliding_window``,
  off in every released checkpoint) makes the layers from ``max_window_layers`` on attend
  to the last ``sliding_window`` tokens (:mod:`hardware.layers`).
- ``opt``: per block q/k/v/o with biases, an MLP of fc1 (``hidden × ffn_dim`` + bias), ReLU,
  fc2 (``ffn_dim × hidden`` + bias), two LayerNorms (weight + bias); learned absolute
  positions (``max_position_embeddings + 2`` rows: OPT offsets positions by 2); a final
  LayerNorm when ``do_layer_norm_before``; optional project_in/out when the embedding width
  ``word_embed_proj_dim`` differs from ``hidden_size``; the lm_head is tied to the embedding.

Medusa heads (``medusa``, vLLM's ``MedusaConfig`` names: Cai et al. 2024) are no transformer:
``num_heads`` heads on the target's last hidden state, each ``num_hidden_layers`` residual
blocks (an ``hidden × hidden`` linear with bias and SiLU: FasterDecoding/Medusa
medusa/model/medusa_model.py ``ResBlock`` @e2a5d20) and its own lm_head (``hidden ×
vocab_size``, no bias). No attention and no KV cache (vLLM's ``MedusaConfig`` reports 0
attention heads: vllm/transformers_utils/configs/medusa.py @0531c22).

Mixture-of-experts families (``mixtral``, ``qwen3_moe``, ``deepseek_v3``, ``deepseek_v2``,
``gpt_oss``, ``glm4_moe``, ``llama4``, ``qwen3_next``) and DeepSeek's multi-head latent
attention are counted in :mod:`hardware.blocks`; their routed experts are read only as far
as a pass's tokens touch them (:mod:`hardware.moe`). Which layers attend to the whole
context, to a window of it, or keep a linear-attention state instead is
:mod:`hardware.layers`' (gpt-oss's sliding layers, Llama-4's chunked ones, Qwen3-Next's
Gated DeltaNet); the counts themselves are :mod:`hardware.shapes`'.

The cost model needs the parameters *read every forward pass*: everything except the
input-embedding (and position) tables, which a pass only gathers a few rows of. The lm_head is
read in full every pass whether or not it is tied (when tied it is the same matrix, stored
once but still streamed as the output projection).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    model_validator,
)

from hardware.blocks import block_counts
from hardware.files import format_validation, hf_json, read_utf8
from hardware.layers import LAYER_TYPES, LINEAR, WINDOW, layer_kinds
from hardware.shapes import DENSE_TYPES, LLAMA_TYPES, MOE_TYPES, ModelShape, model_shape
from specdec.errors import UserError

__all__ = ["DENSE_TYPES", "LLAMA_TYPES", "ModelConfig", "ModelShape", "hf_fp8_scales",
           "hf_ships_fp8", "load_hf_config", "model_shape", "format_validation", "read_utf8"]


# Tokens in a vocabulary, at most: 16x the largest public tokenizer's (Gemma 3: 262,144).
# A vocabulary is an lm_head GEMM dimension, which the measured kernel tables take as a
# 32-bit integer: far larger values (vocab_size: 1e12) overflowed there in a traceback.
MAX_VOCAB = 2**22
# The same for the other GEMM dimensions (hidden_size: 1e12 overflowed there too): widths at
# most 16x the largest public model's (Llama 3.1 405B's intermediate_size 53,248), head
# counts 128x its 128 and head widths 16x its 128 (DeepSeek-V3's q/k: 192), so that even a
# product of two (heads x head_dim) stays within the tables' 32-bit integers.
MAX_WIDTH = 2**20
MAX_HEADS = 2**14
MAX_HEAD_DIM = 2**11
Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]
Heads = Annotated[int, Field(ge=1, le=MAX_HEADS)]
HeadDim = Annotated[int, Field(ge=1, le=MAX_HEAD_DIM)]

MODEL_TYPES = (*DENSE_TYPES, *MOE_TYPES, "medusa")


class ModelConfig(BaseModel):
    """The cost-relevant subset of a Hugging Face ``config.json`` (same field names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_type: Literal[MODEL_TYPES]
    hidden_size: Width
    num_hidden_layers: PositiveInt  # medusa: residual blocks per head
    num_attention_heads: Heads | None = None  # every family but medusa
    vocab_size: Annotated[int, Field(ge=1, le=MAX_VOCAB)]
    max_position_embeddings: PositiveInt
    intermediate_size: Width | None = None
    ffn_dim: Width | None = None
    num_key_value_heads: Heads | None = None
    head_dim: HeadDim | None = None
    tie_word_embeddings: bool | None = None
    word_embed_proj_dim: Width | None = None
    do_layer_norm_before: bool = True
    enable_bias: bool = True
    # mixture of experts (routed experts: Mixtral / Qwen3-MoE / DeepSeek names)
    num_local_experts: PositiveInt | None = None
    num_experts: PositiveInt | None = None
    n_routed_experts: PositiveInt | None = None
    num_experts_per_tok: PositiveInt | None = None
    moe_intermediate_size: Width | None = None
    n_shared_experts: NonNegativeInt | None = None
    first_k_dense_replace: NonNegativeInt = 0
    moe_layer_freq: PositiveInt = 1
    decoder_sparse_step: PositiveInt = 1
    mlp_only_layers: tuple[NonNegativeInt, ...] = ()
    # DeepSeek multi-head latent attention (MLA) and multi-token prediction
    q_lora_rank: Width | None = None
    kv_lora_rank: Width | None = None
    qk_nope_head_dim: HeadDim | None = None
    qk_rope_head_dim: HeadDim | None = None
    v_head_dim: HeadDim | None = None
    num_nextn_predict_layers: NonNegativeInt = 0
    # Not a config.json field: set only by sim.drafters.head_config for DeepSeek's MTP
    # module (per layer an eh_proj 2h -> h and the enorm / hnorm RMSNorms on top).
    mtp_module: bool = False
    # Medusa heads (model_type medusa only)
    num_heads: PositiveInt | None = None
    # attention that is not full on every layer (hardware.layers): layer kinds, windows
    layer_types: tuple[Literal[tuple(LAYER_TYPES)], ...] | None = None
    sliding_window: PositiveInt | None = None
    use_sliding_window: bool = False
    max_window_layers: NonNegativeInt | None = None
    attention_chunk_size: PositiveInt | None = None  # Llama-4's chunked local attention
    no_rope_layers: tuple[Literal[0, 1], ...] | None = None  # Llama-4: 0 = NoPE, global
    full_attention_interval: PositiveInt | None = None  # Qwen3-Next: every k-th is full
    linear_num_key_heads: Heads | None = None  # Qwen3-Next's Gated DeltaNet layers
    linear_num_value_heads: Heads | None = None
    linear_key_head_dim: HeadDim | None = None
    linear_value_head_dim: HeadDim | None = None
    linear_conv_kernel_dim: PositiveInt | None = None
    # biases, norms and MLP widths of the newer families (hardware.blocks)
    attention_bias: bool = False
    use_qk_norm: bool = False
    interleave_moe_layer_step: PositiveInt = 1  # Llama-4: every k-th layer is MoE
    intermediate_size_mlp: Width | None = None  # Llama-4: the dense layers' MLP width
    shared_expert_intermediate_size: Width | None = None  # Qwen3-Next's shared expert

    @model_validator(mode="after")
    def _family_fields(self) -> ModelConfig:
        if self.model_type == "medusa":
            if self.num_heads is None:
                raise ValueError("medusa heads need num_heads")
            if self.num_attention_heads is not None:
                raise ValueError("num_attention_heads: medusa heads have no attention")
            return self
        if self.num_attention_heads is None:
            raise ValueError(f"{self.model_type} models need num_attention_heads")
        if self.num_heads is not None:
            raise ValueError(f"num_heads: only medusa heads have it, not {self.model_type}")
        if self.model_type in (*LLAMA_TYPES, "mixtral") and self.intermediate_size is None:
            raise ValueError(f"{self.model_type} models need intermediate_size")
        if self.model_type in ("qwen3", "gpt_oss", "qwen3_next") and self.head_dim is None:
            raise ValueError(f"{self.model_type} models need head_dim (its default is not "
                             f"hidden_size / num_attention_heads)")
        _check_moe(self)
        _check_attention_kinds(self)
        if self.model_type == "opt" and self.ffn_dim is None:
            raise ValueError("opt models need ffn_dim")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of "
                f"num_attention_heads {self.num_attention_heads} (give head_dim)"
            )
        if self.num_attention_heads % self.kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.kv_heads}"
            )
        return self

    @property
    def mla(self) -> bool:
        """Whether attention is DeepSeek's multi-head latent attention (one cached latent)."""
        return self.model_type in ("deepseek_v3", "deepseek_v2")

    @property
    def routed_experts(self) -> int:
        """Routed experts per MoE layer (0 for a dense model), whatever the family calls it."""
        return self.num_local_experts or self.num_experts or self.n_routed_experts or 0

    @property
    def kv_heads(self) -> int:
        """KV heads (GQA); configs without the field (LLaMA-1, OPT) have one per query head.
        MLA caches one latent shared by every head: 1 (like MQA, whatever the config says)."""
        if self.mla:
            return 1
        if self.model_type == "medusa":  # no attention: one empty "head" keeps TP sums whole
            return 1
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def d_head(self) -> int:
        """Per-head width (0 for Medusa heads: no attention, nothing cached)."""
        if self.model_type == "medusa":
            return 0
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def tied(self) -> bool:
        """Whether lm_head shares the input-embedding matrix (HF default: OPT yes, Llama no)."""
        if self.tie_word_embeddings is None:
            return self.model_type == "opt"
        return self.tie_word_embeddings


def _check_attention_kinds(cfg: ModelConfig) -> None:
    """The fields the layers' attention kinds need (hardware.layers)."""
    n = cfg.num_hidden_layers
    if cfg.layer_types is not None and len(cfg.layer_types) != n:
        raise ValueError(f"layer_types: lists {len(cfg.layer_types)} layers, not the "
                         f"{n} of num_hidden_layers")
    if cfg.no_rope_layers is not None and len(cfg.no_rope_layers) != n:
        raise ValueError(f"no_rope_layers: lists {len(cfg.no_rope_layers)} layers, not the "
                         f"{n} of num_hidden_layers")
    if cfg.model_type == "qwen3_next" and cfg.layer_types is None \
            and cfg.full_attention_interval is None:
        raise ValueError("qwen3_next models need full_attention_interval or layer_types")
    kinds = layer_kinds(cfg)
    if WINDOW in kinds:
        name = "attention_chunk_size" if cfg.model_type == "llama4" else "sliding_window"
        if getattr(cfg, name) is None:
            raise ValueError(f"{name}: window layers (layer_types) need their window")
    if LINEAR in kinds:
        if cfg.model_type != "qwen3_next":
            raise ValueError(f"layer_types: linear attention is modelled as Qwen3-Next's "
                             f"Gated DeltaNet only, not in {cfg.model_type} models")
        for f in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                  "linear_value_head_dim", "linear_conv_kernel_dim"):
            if getattr(cfg, f) is None:
                raise ValueError(f"linear-attention layers need {f}")
        if all(k == LINEAR for k in kinds):
            raise ValueError("layer_types: every layer is linear attention; a model without "
                             "an attention layer is not modelled")


def _check_moe(cfg: ModelConfig) -> None:
    """The fields a MoE / MLA family needs; a dense family must not name experts."""
    t = cfg.model_type
    experts = MOE_TYPES
    if t in DENSE_TYPES:
        for f in ("num_local_experts", "num_experts", "n_routed_experts", "kv_lora_rank"):
            if getattr(cfg, f) is not None:
                raise ValueError(f"{f}: {t} models have no experts or latent attention; "
                                 f"use the model_type of the family that does")
        return
    need = [experts[t], "num_experts_per_tok"]
    if t not in ("mixtral", "gpt_oss", "llama4"):  # these name the expert width
        need.append("moe_intermediate_size")  # intermediate_size
    else:
        need.append("intermediate_size")
    if cfg.mla:
        need += ["kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]
    for f in need:
        if getattr(cfg, f) is None:
            raise ValueError(f"{t} models need {f}")
    for f in set(experts.values()):
        if f != experts[t] and getattr(cfg, f) is not None:
            raise ValueError(f"{f}: {t} names its routed experts {experts[t]}")
    if cfg.num_experts_per_tok > cfg.routed_experts:
        raise ValueError(f"num_experts_per_tok {cfg.num_experts_per_tok} exceeds the "
                         f"{cfg.routed_experts} routed experts")
    blocks = block_counts(cfg)
    dense_width = "intermediate_size_mlp" if t == "llama4" else "intermediate_size"
    if not all(blocks.moe_layers) and getattr(cfg, dense_width) is None:
        raise ValueError(f"{t} models with dense layers need {dense_width}")
    if not any(blocks.moe_layers):
        raise ValueError(f"{t}: no layer has experts (check first_k_dense_replace, "
                         f"moe_layer_freq, decoder_sparse_step, mlp_only_layers)")


def _quant_config(path: str | Path) -> dict:
    """A ``config.json``'s ``quantization_config`` ({} without one)."""
    quant = hf_json(Path(path)).get("quantization_config")
    return quant if isinstance(quant, dict) else {}


def hf_ships_fp8(path: str | Path) -> bool:
    """Whether the checkpoint a Hugging Face ``config.json`` describes ships FP8 weights
    (its ``quantization_config`` names ``quant_method: fp8``)."""
    return _quant_config(path).get("quant_method") == "fp8"


def hf_fp8_scales(path: str | Path) -> str:
    """How an FP8 deployment of the checkpoint a Hugging Face ``config.json`` describes
    scales its values (``hardware.catalog.ModelSpec.fp8_scales``): ``block`` where its
    ``quantization_config`` names a ``weight_block_size`` (DeepSeek-V3's 128x128 blocks),
    ``dynamic`` where it says ``activation_scheme: dynamic`` without one (per-tensor
    weights, activation scales computed every pass: vLLM's ``Fp8Config``), else
    ``tensor`` (static activation scales)."""
    quant = _quant_config(path)
    if quant.get("weight_block_size"):
        return "block"
    return "dynamic" if quant.get("activation_scheme") == "dynamic" else "tensor"


# the model a checkpoint's ``architectures`` name runs as, where its ``model_type`` is one
# SpecSim does not list: vLLM picks the model class by the architecture
# (vllm/model_executor/models/registry.py), and Kimi-K2's config.json says model_type
# kimi_k2 with architecture DeepseekV3ForCausalLM
_ARCHITECTURE_TYPES = {"DeepseekV3ForCausalLM": "deepseek_v3"}


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a Hugging Face ``config.json`` and keep the fields the cost model uses.

    Unknown fields (rope settings, dtypes, token ids ...) are ignored; a missing or bad
    cost-relevant field raises :class:`UserError` naming the file and the field.
    """
    path = Path(path)
    raw = hf_json(path)
    arch = raw.get("architectures")
    family = _ARCHITECTURE_TYPES.get(arch[0]) if isinstance(arch, list) and arch else None
    if family is not None and raw.get("model_type") not in MODEL_TYPES:
        raw = {**raw, "model_type": family}  # (Kimi-K2's kimi_k2: DeepSeek-V3's model)
    if raw.get("model_type") == "llama4" and isinstance(raw.get("text_config"), dict):
        # Llama-4 nests its language model in text_config (model_type llama4_text) beside
        # a vision encoder that a text-only pass does not run: the language model is priced
        raw = {**raw["text_config"], "model_type": "llama4",
               "tie_word_embeddings": raw.get("tie_word_embeddings",
                                              raw["text_config"].get("tie_word_embeddings"))}
    if raw.get("model_type") == "llama4_text":
        raw = {**raw, "model_type": "llama4"}
    # mtp_module is SpecSim's own flag (a drafter's config), never read from a file
    known = {k: v for k, v in raw.items() if k in ModelConfig.model_fields
             and k != "mtp_module"}
    try:
        return ModelConfig(**known)
    except ValidationError as err:
        raise UserError(format_validation(str(path), "", err)) from None
