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
  off in every released checkpoint; the layers from ``max_window_layers`` on attend to the
  last ``sliding_window`` tokens) is not modelled, so a config that turns it on for any
  layer is refused.
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

Mixture-of-experts families (``mixtral``, ``qwen3_moe``, ``deepseek_v3``, ``deepseek_v2``)
and DeepSeek's multi-head latent attention are counted in :mod:`hardware.blocks`; their
routed experts are read only as far as a pass's tokens touch them (:mod:`hardware.moe`).

The cost model needs the parameters *read every forward pass*: everything except the
input-embedding (and position) tables, which a pass only gathers a few rows of. The lm_head is
read in full every pass whether or not it is tied (when tied it is the same matrix, stored
once but still streamed as the output projection).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
from specdec.errors import KeyGivenTwice, UserError, unique_keys

__all__ = ["DENSE_TYPES", "LLAMA_TYPES", "ModelConfig", "ModelShape", "hf_fp8_scales",
           "hf_ships_fp8", "load_hf_config", "model_shape", "format_validation"]


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

# the dense families (no experts, no latent attention), and those of them with llama's
# block (GQA attention without biases and a SwiGLU MLP)
LLAMA_TYPES = ("llama", "qwen3")
DENSE_TYPES = (*LLAMA_TYPES, "opt")
MODEL_TYPES = (*DENSE_TYPES, "mixtral", "qwen3_moe", "deepseek_v3", "deepseek_v2", "medusa")


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
        if self.model_type == "qwen3" and self.head_dim is None:
            raise ValueError("qwen3 models need head_dim (its default is not hidden_size / "
                             "num_attention_heads)")
        _check_moe(self)
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


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts of one model, split the way the cost model and memory check need.

    ``layer_params`` is one transformer block; ``kv_proj_params`` is the part of it in the k
    and v projections (replicated, not split, when tensor parallelism exceeds the KV heads);
    ``head_params`` is what follows the last block and is read every pass (final norm,
    OPT's project_out, the lm_head) plus OPT's project_in; ``embedding_params`` are the
    gathered tables (token + position embeddings) that a pass does not stream.
    """

    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    layer_params: int
    kv_proj_params: int
    head_params: int
    embedding_params: int
    total_params: int
    # mixture of experts (defaults: a dense model): which blocks are MoE, an MoE block's
    # params but its routed experts (the router's replicated under TP), one routed expert
    moe_layers: tuple[bool, ...] = ()
    moe_fixed_params: int = 0
    moe_replicated_params: int = 0
    expert_params: int = 0
    n_experts: int = 0
    top_k: int = 0
    # MLA: values cached per token per layer (one latent, not per head; 0 = K and V per
    # KV head) and attention FLOPs per head per attended key (0 = 4 x d_head)
    kv_latent: int = 0
    attn_key_flops: int = 0

    @property
    def n_moe_layers(self) -> int:
        """Blocks with routed experts (0 for a dense model)."""
        return sum(self.moe_layers)

    @property
    def streamed_params(self) -> int:
        """Parameters read every forward pass: all but the embedding tables, lm_head always
        (an MoE model: with every routed expert, what a pass touching all of them reads)."""
        if not self.moe_layers:
            return self.n_layers * self.layer_params + self.head_params
        return (self.n_layers - self.n_moe_layers) * self.layer_params + self.n_moe_layers * (
            self.moe_fixed_params + self.n_experts * self.expert_params) + self.head_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses (total less the routed experts it is not sent to)."""
        return self.total_params - self.n_moe_layers * (self.n_experts - self.top_k) \
            * self.expert_params

    @property
    def key_flops_per_head(self) -> int:
        """Attention FLOPs per query head per attended key: QK^T and AV, 4 x d_head; MLA
        (absorbed): 2 x (kv_lora_rank + rope) + 2 x kv_lora_rank."""
        return self.attn_key_flops or 4 * self.d_head

    def kv_values_per_layer(self, kv_heads: int) -> int:
        """Values one token caches per layer on a GPU holding ``kv_heads`` KV heads: K and
        V per head, or MLA's one latent (the same on every TP rank)."""
        return self.kv_latent or 2 * kv_heads * self.d_head

    @property
    def kv_values_per_token(self) -> int:
        """K and V values cached per token over all layers (multiply by bytes per value)."""
        return self.n_layers * self.kv_values_per_layer(self.n_kv_heads)


def model_shape(cfg: ModelConfig) -> ModelShape:
    """Count the parameters of ``cfg`` (exact for the supported families)."""
    if cfg.model_type == "medusa":
        return _medusa_shape(cfg)
    if cfg.model_type not in DENSE_TYPES:
        return _moe_shape(cfg)
    h, q_width = cfg.hidden_size, cfg.num_attention_heads * cfg.d_head
    kv_width = cfg.kv_heads * cfg.d_head
    if cfg.model_type != "opt":
        kv_proj = 2 * h * kv_width
        attn = h * q_width + kv_proj + q_width * h
        if cfg.model_type == "qwen3":
            attn += 2 * cfg.d_head  # q_norm, k_norm
        mlp = 3 * h * cfg.intermediate_size
        layer = attn + mlp + 2 * h  # two RMSNorm weight vectors
        proj = h
        embedding = cfg.vocab_size * h
        head = h + cfg.vocab_size * h  # final RMSNorm + lm_head
    else:
        bias = 1 if cfg.enable_bias else 0
        kv_proj = 2 * (h * kv_width + bias * kv_width)
        attn = 2 * (h * h + bias * h) + kv_proj
        f = cfg.ffn_dim
        mlp = h * f + bias * f + f * h + bias * h
        layer = attn + mlp + 2 * 2 * h  # two LayerNorms, weight + bias each
        proj = cfg.word_embed_proj_dim or h
        embedding = cfg.vocab_size * proj + (cfg.max_position_embeddings + 2) * h
        project_in_out = 2 * proj * h if proj != h else 0
        final_norm = 2 * h if cfg.do_layer_norm_before else 0
        head = final_norm + project_in_out + cfg.vocab_size * proj
    lm_head = cfg.vocab_size * proj
    # A tied lm_head is the embedding matrix: stored once, so it is not added to the total.
    total = embedding + cfg.num_hidden_layers * layer + head - (lm_head if cfg.tied else 0)
    return ModelShape(
        n_layers=cfg.num_hidden_layers,
        hidden=h,
        n_heads=cfg.num_attention_heads,
        n_kv_heads=cfg.kv_heads,
        d_head=cfg.d_head,
        layer_params=layer,
        kv_proj_params=kv_proj,
        head_params=head,
        embedding_params=embedding,
        total_params=total,
    )


def _medusa_shape(cfg: ModelConfig) -> ModelShape:
    """Medusa heads as ``num_heads x num_hidden_layers`` attention-free blocks (one residual
    block each) and ``num_heads`` lm_heads. A block is kept whole on every TP rank (vLLM's
    heads are plain ``nn.Linear``; its ``kv_proj_params`` slot holds the replicated part)."""
    h = cfg.hidden_size
    block = h * h + h  # linear + bias
    heads = cfg.num_heads * cfg.vocab_size * h
    n = cfg.num_heads * cfg.num_hidden_layers
    return ModelShape(
        n_layers=n, hidden=h, n_heads=0, n_kv_heads=1, d_head=0, layer_params=block,
        kv_proj_params=block, head_params=heads, embedding_params=0,
        total_params=n * block + heads)


def _moe_shape(cfg: ModelConfig) -> ModelShape:
    """The shape of a MoE / MLA family (blocks counted by :mod:`hardware.blocks`)."""
    b = block_counts(cfg)
    h, vocab = cfg.hidden_size, cfg.vocab_size
    n_moe = sum(b.moe_layers)
    dense = cfg.num_hidden_layers - n_moe
    embedding, head = vocab * h, h + vocab * h  # final RMSNorm + lm_head
    total = embedding + dense * b.dense_params + n_moe * (
        b.moe_fixed_params + b.n_experts * b.expert_params) + head - (
        vocab * h if cfg.tied else 0)
    if cfg.mla:
        n_kv, d_head = 1, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    else:
        n_kv, d_head = cfg.kv_heads, cfg.d_head
    return ModelShape(
        n_layers=cfg.num_hidden_layers, hidden=h, n_heads=cfg.num_attention_heads,
        n_kv_heads=n_kv, d_head=d_head,
        # a dense block (the first_k_dense_replace ones); an all-MoE model: its fixed part
        layer_params=b.dense_params if dense else b.moe_fixed_params,
        # MLA's replicated down-projections take kv_proj's place (one "KV head", so every
        # TP rank keeps them whole); llama-style GQA k/v as in the llama family
        kv_proj_params=b.replicated_params if cfg.mla else 2 * h * cfg.kv_heads * cfg.d_head,
        head_params=head, embedding_params=embedding, total_params=total,
        moe_layers=b.moe_layers, moe_fixed_params=b.moe_fixed_params,
        moe_replicated_params=b.moe_replicated_params, expert_params=b.expert_params,
        n_experts=b.n_experts, top_k=b.top_k, kv_latent=b.kv_latent,
        attn_key_flops=b.key_flops_per_head if cfg.mla else 0,
    )


def _check_moe(cfg: ModelConfig) -> None:
    """The fields a MoE / MLA family needs; a dense family must not name experts."""
    t = cfg.model_type
    experts = {"mixtral": "num_local_experts", "qwen3_moe": "num_experts",
               "deepseek_v3": "n_routed_experts", "deepseek_v2": "n_routed_experts"}
    if t in DENSE_TYPES:
        for f in ("num_local_experts", "num_experts", "n_routed_experts", "kv_lora_rank"):
            if getattr(cfg, f) is not None:
                raise ValueError(f"{f}: {t} models have no experts or latent attention; "
                                 f"use the model_type of the family that does")
        return
    need = [experts[t], "num_experts_per_tok"]
    if t != "mixtral":
        need.append("moe_intermediate_size")
    if cfg.mla:
        need += ["kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]
    for f in need:
        if getattr(cfg, f) is None:
            raise ValueError(f"{t} models need {f}")
    for f in experts.values():
        if f != experts[t] and getattr(cfg, f) is not None:
            raise ValueError(f"{f}: {t} names its routed experts {experts[t]}")
    if cfg.num_experts_per_tok > cfg.routed_experts:
        raise ValueError(f"num_experts_per_tok {cfg.num_experts_per_tok} exceeds the "
                         f"{cfg.routed_experts} routed experts")
    blocks = block_counts(cfg)
    if not all(blocks.moe_layers) and cfg.intermediate_size is None:
        raise ValueError(f"{t} models with dense layers need intermediate_size")
    if not any(blocks.moe_layers):
        raise ValueError(f"{t}: no layer has experts (check first_k_dense_replace, "
                         f"moe_layer_freq, decoder_sparse_step, mlp_only_layers)")


def format_validation(file: str, prefix: str, err: ValidationError) -> str:
    """One line for the first error of a pydantic ``ValidationError``.

    Reads ``file: prefix.field: message, got value`` (``prefix`` may be empty, e.g. for a
    whole config.json); the field is omitted for whole-object checks.
    """
    errors = err.errors()
    # An unknown field is usually a misspelt known one: report it before the "missing".
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    parts = [p for p in (prefix, ".".join(str(x) for x in first["loc"])) if p]
    where = f"{file}: {'.'.join(parts)}" if parts else file
    msg = first["msg"].removeprefix("Value error, ")
    # a whole-object check (e.g. heads vs hidden size) would echo the whole mapping: skip it
    if first["type"] in ("missing", "model_type", "dict_type") or not first["loc"] \
            or isinstance(first["input"], dict):
        return f"{where}: {msg}"
    return f"{where}: {msg}, got {first['input']!r}"


def read_utf8(path: Path, what: str, rule: str) -> str:
    """The text of ``path``; one-line UserErrors for an unreadable or non-UTF-8 file.

    ``what`` names the file in "cannot read <what>", ``rule`` ends the UTF-8 message (e.g.
    "a catalog file must be UTF-8 YAML").
    """
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"{path}: cannot read {what}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise UserError(
            f"{path}: not a UTF-8 text file (byte 0x{err.object[err.start]:02x} at offset "
            f"{err.start}); {rule}"
        ) from None


def _hf_json(path: Path) -> dict:
    text = read_utf8(path, "model config", "a config.json must be UTF-8 JSON")
    try:
        raw = json.loads(text, object_pairs_hook=unique_keys)
    except KeyGivenTwice as err:
        raise UserError(f"{path}: {err.key}: given twice") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON: {err.msg} at line {err.lineno}") from None
    except RecursionError:  # json recurses once per level
        raise UserError(f"{path}: nested too deeply to be a config.json") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a config.json must hold a JSON object")
    return raw


def _quant_config(path: str | Path) -> dict:
    """A ``config.json``'s ``quantization_config`` ({} without one)."""
    quant = _hf_json(Path(path)).get("quantization_config")
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


def _refuse_sliding_window(path: Path, raw: dict) -> None:
    """A Qwen-style config whose ``use_sliding_window`` makes any layer attend to only its
    last ``sliding_window`` tokens (those from ``max_window_layers`` on; absent: every one
    is taken to) is refused: every layer is priced attending to the whole context."""
    if raw.get("use_sliding_window") is not True or raw.get("sliding_window") is None:
        return
    layers, first = raw.get("num_hidden_layers"), raw.get("max_window_layers")
    if isinstance(layers, int) and isinstance(first, int) and first >= layers:
        return  # no layer reaches max_window_layers: none slides
    raise UserError(f"{path}: use_sliding_window: sliding-window attention (layers from "
                    f"max_window_layers {first} of {layers}) is not modelled: every layer "
                    f"is priced attending to the whole context, got True")


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
    raw = _hf_json(path)
    _refuse_sliding_window(path, raw)
    arch = raw.get("architectures")
    family = _ARCHITECTURE_TYPES.get(arch[0]) if isinstance(arch, list) and arch else None
    if family is not None and raw.get("model_type") not in MODEL_TYPES:
        raw = {**raw, "model_type": family}  # (Kimi-K2's kimi_k2: DeepSeek-V3's model)
    # mtp_module is SpecSim's own flag (a drafter's config), never read from a file
    known = {k: v for k, v in raw.items() if k in ModelConfig.model_fields
             and k != "mtp_module"}
    try:
        return ModelConfig(**known)
    except ValidationError as err:
        raise UserError(format_validation(str(path), "", err)) from None
