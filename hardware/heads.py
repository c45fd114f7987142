"""The model configs that price drafting heads built from a target's shape.

- ``eagle`` / ``eagle3``: a head of the target's width on the target's hidden states (EAGLE,
  EAGLE-3: Li et al. 2024/2025): ``layers`` llama decoder layers (1 in the published heads)
  of the target's attention shape, an input projection fusing 2 (EAGLE) or 3 (EAGLE-3,
  low/mid/high layer features) hidden states into one, and an lm_head -- the target's
  (EAGLE) or its own over a reduced draft vocabulary (EAGLE-3). A Qwen3 MoE target's head
  is a dense llama layer whose MLP is the config's ``intermediate_size`` (the MoE config
  keeps one it does not use): sgl-project/SpecForge configs/qwen3-30B-eagle3.json
  @d1be954291d76825c86e76bec2e96ed7207d6530 (hidden 2048, intermediate 6144, 32 / 4 heads of
  128, draft vocabulary 32000: Qwen3-30B-A3B's own numbers).
- ``mtp``: the target's own multi-token-prediction module (DeepSeek-V3's next-n layer): one
  decoder layer of the target's shape plus the 2h -> h projection; for a DeepSeek target an
  MLA + MoE block.
- Medusa heads: ``heads`` heads of ``layers`` residual blocks and an lm_head each.

A head's extra input projection and wider attention input are priced as extra MLP width of
the same parameter count (same weight bytes and FLOPs per token; the GEMM shapes differ).
``sim.drafters`` builds the engine's drafters from them; the validation rows of category E
(``hardware.timing.spec_rows``) price the same heads.
"""

from __future__ import annotations

from hardware.models import LLAMA_TYPES, ModelConfig
from specdec.errors import UserError

__all__ = ["head_config", "medusa_config"]


def head_config(target_config, method: str, layers: int = 1, draft_vocab: int | None = None):
    """The ``hardware.ModelConfig`` that prices an EAGLE/EAGLE-3/MTP head of ``target_config``
    (llama-family configs, and Qwen3 MoE ones for EAGLE heads; ``mtp`` also DeepSeek's
    MLA + MoE configs)."""
    c = target_config
    if method == "mtp" and c.model_type in ("deepseek_v3", "deepseek_v2"):
        # DeepSeek-V3 §2.2: the module is one transformer block (MoE, like the layers after
        # first_k_dense_replace) plus eh_proj and its norms (mtp_module, hardware.blocks)
        fields = c.model_dump(exclude_unset=True)
        fields.update(num_hidden_layers=layers, first_k_dense_replace=0,
                      num_nextn_predict_layers=0, mtp_module=True)
        return ModelConfig(**fields)
    moe_head = method in ("eagle", "eagle3") and c.model_type == "qwen3_moe"
    if c.model_type not in LLAMA_TYPES and not moe_head:
        also = " or, for mtp, a DeepSeek one" if method == "mtp" else ""
        raise UserError(f"drafter.method {method}: needs a llama-family target{also} (its "
                        f"decoder layer is the head's), got model_type {c.model_type!r}")
    h = c.hidden_size
    q, kv = c.num_attention_heads * c.d_head, c.kv_heads * c.d_head
    if method == "eagle":  # fc over [embedding, hidden]: 2h -> h
        extra, vocab = 2 * h * h, c.vocab_size
    elif method == "eagle3":  # fc over 3 layers' features: 3h -> h; q/k/v take 2h inputs
        extra, vocab = 3 * h * h + h * (q + 2 * kv), draft_vocab or c.vocab_size
    elif method == "mtp":  # eh_proj over [embedding, hidden]: 2h -> h
        extra, vocab = 2 * h * h, c.vocab_size
    else:
        raise ValueError(method)
    return ModelConfig(
        model_type="llama", hidden_size=h, num_hidden_layers=layers,
        num_attention_heads=c.num_attention_heads, num_key_value_heads=c.kv_heads,
        head_dim=c.d_head, intermediate_size=c.intermediate_size + round(extra / (3 * h)),
        vocab_size=vocab, max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=False)


def medusa_config(target_config, heads: int, layers: int = 1, draft_vocab: int | None = None):
    """The ``hardware.ModelConfig`` of ``heads`` Medusa heads for ``target_config``: its
    hidden width, ``layers`` residual blocks per head, an lm_head over the target's
    vocabulary (or ``draft_vocab``, vLLM's ``truncated_vocab_size``)."""
    c = target_config
    return ModelConfig(model_type="medusa", hidden_size=c.hidden_size,
                       num_hidden_layers=layers, num_heads=heads,
                       vocab_size=draft_vocab or c.vocab_size,
                       max_position_embeddings=c.max_position_embeddings)
