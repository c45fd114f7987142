"""Model architectures from Hugging Face ``config.json`` fields, and their parameter counts.

Two families cover every model the lecture and the papers use:

- ``llama`` (LLaMA, Llama-2, Llama-3, Vicuna, TinyLlama): per block q/k/v/o projections
  without biases (k and v have ``num_key_value_heads`` heads: GQA), a SwiGLU MLP with three
  ``hidden × intermediate`` matrices (gate, up, down), two RMSNorm weight vectors; rotary
  positions (no parameters); a final RMSNorm; an lm_head that may be tied to the embedding.
- ``opt``: per block q/k/v/o with biases, an MLP of fc1 (``hidden × ffn_dim`` + bias), ReLU,
  fc2 (``ffn_dim × hidden`` + bias), two LayerNorms (weight + bias); learned absolute
  positions (``max_position_embeddings + 2`` rows: OPT offsets positions by 2); a final
  LayerNorm when ``do_layer_norm_before``; optional project_in/out when the embedding width
  ``word_embed_proj_dim`` differs from ``hidden_size``; the lm_head is tied to the embedding.

The cost model needs the parameters *read every forward pass*: everything except the
input-embedding (and position) tables, which a pass only gathers a few rows of. The lm_head is
read in full every pass whether or not it is tied (when tied it is the same matrix, stored
once but still streamed as the output projection).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, PositiveInt, ValidationError, model_validator

from specdec.errors import UserError

__all__ = ["ModelConfig", "ModelShape", "load_hf_config", "model_shape", "format_validation"]


class ModelConfig(BaseModel):
    """The cost-relevant subset of a Hugging Face ``config.json`` (same field names)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_type: Literal["llama", "opt"]
    hidden_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    vocab_size: PositiveInt
    max_position_embeddings: PositiveInt
    intermediate_size: PositiveInt | None = None
    ffn_dim: PositiveInt | None = None
    num_key_value_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    tie_word_embeddings: bool | None = None
    word_embed_proj_dim: PositiveInt | None = None
    do_layer_norm_before: bool = True
    enable_bias: bool = True

    @model_validator(mode="after")
    def _family_fields(self) -> ModelConfig:
        if self.model_type == "llama" and self.intermediate_size is None:
            raise ValueError("llama models need intermediate_size")
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
    def kv_heads(self) -> int:
        """KV heads (GQA); configs without the field (LLaMA-1, OPT) have one per query head."""
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def d_head(self) -> int:
        """Per-head width."""
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

    @property
    def streamed_params(self) -> int:
        """Parameters read every forward pass: all but the embedding tables, lm_head always."""
        return self.n_layers * self.layer_params + self.head_params

    @property
    def kv_values_per_token(self) -> int:
        """K and V values cached per token over all layers (multiply by bytes per value)."""
        return self.n_layers * 2 * self.n_kv_heads * self.d_head


def model_shape(cfg: ModelConfig) -> ModelShape:
    """Count the parameters of ``cfg`` (exact for the two supported families)."""
    h, q_width = cfg.hidden_size, cfg.num_attention_heads * cfg.d_head
    kv_width = cfg.kv_heads * cfg.d_head
    if cfg.model_type == "llama":
        kv_proj = 2 * h * kv_width
        attn = h * q_width + kv_proj + q_width * h
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


def load_hf_config(path: str | Path) -> ModelConfig:
    """Read a Hugging Face ``config.json`` and keep the fields the cost model uses.

    Unknown fields (rope settings, dtypes, token ids ...) are ignored; a missing or bad
    cost-relevant field raises :class:`UserError` naming the file and the field.
    """
    path = Path(path)
    text = read_utf8(path, "model config", "a config.json must be UTF-8 JSON")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON: {err.msg} at line {err.lineno}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a config.json must hold a JSON object")
    known = {k: v for k, v in raw.items() if k in ModelConfig.model_fields}
    try:
        return ModelConfig(**known)
    except ValidationError as err:
        raise UserError(format_validation(str(path), "", err)) from None
