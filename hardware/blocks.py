"""Parameter counts of the blocks the dense families lack: MLA attention and MoE layers.

Counted from the Hugging Face modelling code of each family (same weight names as the
checkpoints), and split the way vLLM shards them under tensor parallelism:

- **Attention, llama-style** (``mixtral``, ``qwen3_moe``): q/k/v/o without biases as in
  ``llama``; Qwen3 adds a per-head RMSNorm on q and on k (``q_norm``, ``k_norm``:
  ``head_dim`` weights each).
- **MLA** (``deepseek_v3``, ``deepseek_v2``; DeepSeek-V2 paper §2.1): ``q_a_proj`` h →
  ``q_lora_rank`` with its RMSNorm, then ``q_b_proj`` → heads × (``qk_nope_head_dim`` +
  ``qk_rope_head_dim``) (without ``q_lora_rank``, V2-Lite: one ``q_proj`` h → heads ×
  192); ``kv_a_proj_with_mqa`` h → ``kv_lora_rank`` + ``qk_rope_head_dim`` with its RMSNorm
  on the latent; ``kv_b_proj`` ``kv_lora_rank`` → heads × (nope + ``v_head_dim``);
  ``o_proj`` heads × ``v_head_dim`` → h. vLLM keeps the down-projections (q_a, kv_a) and
  their norms *replicated* on every TP rank (``ReplicatedLinear`` / the fused
  ``fused_qkv_a_proj`` with TP disabled, vllm/model_executor/models/deepseek_v2.py); the
  rest is split by heads.
- **MoE layer**: a router ``gate`` (experts × h, no bias; DeepSeek-V3's ``noaux_tc``
  routing adds an ``e_score_correction_bias`` of one value per expert), replicated under
  TP in vLLM (``ReplicatedLinear``); shared experts (DeepSeek: ``n_shared_experts`` SwiGLU
  MLPs of ``moe_intermediate_size``, fused into one of n × that width), TP-split; routed
  experts, each a SwiGLU MLP (gate/up/down) of ``moe_intermediate_size`` (Mixtral: of
  ``intermediate_size``).
- **Which layers are MoE**: Mixtral all; Qwen3-MoE layer i unless i is in
  ``mlp_only_layers`` or (i + 1) is not a multiple of ``decoder_sparse_step``; DeepSeek
  layer i when i >= ``first_k_dense_replace`` and i is a multiple of ``moe_layer_freq``.
  The others have a dense SwiGLU MLP of ``intermediate_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Blocks", "block_counts"]


@dataclass(frozen=True)
class Blocks:
    """Per-block parameter counts of one model (see the module notes).

    ``dense_params`` / ``moe_fixed_params``: everything of a dense / an MoE block but the
    routed experts (attention, norms, dense MLP or router + shared experts);
    ``replicated_params``: the part of every block each TP rank keeps whole (MLA's
    down-projections; 0 otherwise), ``moe_replicated_params`` the router's, MoE blocks
    only; ``expert_params``: one routed expert; ``moe_layers``: which blocks are MoE.
    """

    dense_params: int
    moe_fixed_params: int
    replicated_params: int
    moe_replicated_params: int
    expert_params: int
    n_experts: int
    top_k: int
    moe_layers: tuple[bool, ...]
    kv_latent: int
    key_flops_per_head: int


def _is_moe(cfg, i: int) -> bool:
    if cfg.model_type == "mixtral":
        return True
    if cfg.model_type == "qwen3_moe":
        return i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0
    return i >= cfg.first_k_dense_replace and i % cfg.moe_layer_freq == 0


def _attention(cfg) -> tuple[int, int, int, int]:
    """(attention params incl. its own norms, replicated part, cached values per token per
    layer (MLA's latent; 0 = K and V per KV head), attention FLOPs per head per key)."""
    h, heads = cfg.hidden_size, cfg.num_attention_heads
    if not cfg.mla:
        q, kv = heads * cfg.d_head, cfg.kv_heads * cfg.d_head
        qk_norm = 2 * cfg.d_head if cfg.model_type == "qwen3_moe" else 0
        return h * q + 2 * h * kv + q * h + qk_norm, 0, 0, 4 * cfg.d_head
    nope, rope, v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    lora, r = cfg.kv_lora_rank, cfg.q_lora_rank
    kv_a = h * (lora + rope) + lora  # kv_a_proj_with_mqa + kv_a_layernorm: replicated
    if r is None:
        q_a, q_b = 0, h * heads * (nope + rope)  # one q_proj, split by heads
    else:
        q_a, q_b = h * r + r, r * heads * (nope + rope)  # q_a_proj + q_a_layernorm
    kv_b = lora * heads * (nope + v)
    o = heads * v * h
    # absorbed decode (DeepSeek-V2 §2.1.2, vLLM's MLA backends): per head, q·latent over
    # the latent + rope dims, then the attention-weighted sum over the latent
    key_flops = 2 * (lora + rope) + 2 * lora
    return q_a + q_b + kv_a + kv_b + o, q_a + kv_a, lora + rope, key_flops


def block_counts(cfg) -> Blocks:
    """The :class:`Blocks` of a MoE or MLA config (``cfg.model_type`` not llama/opt)."""
    h = cfg.hidden_size
    attn, replicated, latent, key_flops = _attention(cfg)
    norms = 2 * h
    if cfg.mtp_module:  # DeepSeek-V3 §2.2: eh_proj [2h -> h] and the enorm / hnorm RMSNorms
        attn += 2 * h * h + 2 * h
    dense_mlp = 3 * h * cfg.intermediate_size if cfg.intermediate_size else 0
    n_experts = cfg.routed_experts
    width = cfg.intermediate_size if cfg.model_type == "mixtral" else cfg.moe_intermediate_size
    gate = n_experts * h + (n_experts if cfg.model_type == "deepseek_v3" else 0)
    shared = 3 * h * width * (cfg.n_shared_experts or 0)
    return Blocks(
        dense_params=attn + norms + dense_mlp,
        moe_fixed_params=attn + norms + gate + shared,
        replicated_params=replicated,
        moe_replicated_params=gate,
        expert_params=3 * h * width,
        n_experts=n_experts,
        top_k=cfg.num_experts_per_tok,
        moe_layers=tuple(_is_moe(cfg, i) for i in range(cfg.num_hidden_layers)),
        kv_latent=latent,
        key_flops_per_head=key_flops,
    )
