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
- **gpt-oss** (``gpt_oss``; transformers ``models/gpt_oss/modeling_gpt_oss.py``): GQA with
  biases on q, k, v and o and one learned attention sink per head; every layer MoE, a
  router with a bias, experts of width ``intermediate_size`` whose gate_up and down
  projections have biases.
- **GLM-4.5** (``glm4_moe``; transformers ``models/glm4_moe``): GQA with q/k/v biases
  (``attention_bias``), q/k RMSNorms where ``use_qk_norm``; DeepSeek-V3's MoE layout
  (dense first ``first_k_dense_replace`` layers, shared experts, a router with a score
  correction bias).
- **Llama-4** (``llama4``; transformers ``models/llama4``): GQA without biases (its q/k
  norm is an L2 norm without weights); layer i is MoE when (i + 1) is a multiple of
  ``interleave_moe_layer_step``, with experts and one shared expert of width
  ``intermediate_size`` and a router without bias; the dense layers' MLP is
  ``intermediate_size_mlp`` wide.
- **Qwen3-Next** (``qwen3_next``; transformers ``models/qwen3_next``): Qwen3-MoE's expert
  layout plus one shared expert of ``shared_expert_intermediate_size`` with a sigmoid gate
  (hidden -> 1); its full-attention layers' q_proj also makes the output gate (twice the
  query width) with q/k norms; its Gated DeltaNet layers (``linear_delta_params``, the
  difference to a full layer) project to q, k, v and z, to the per-head b and a, run a
  depthwise convolution, and hold ``dt_bias``, ``A_log`` and a gated RMSNorm.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Blocks", "block_counts", "expert_width"]


@dataclass(frozen=True)
class Blocks:
    """Per-block parameter counts of one model (see the module notes).

    ``dense_params`` / ``moe_fixed_params``: everything of a dense / an MoE block but the
    routed experts (attention, norms, dense MLP or router + shared experts);
    ``replicated_params``: the part of every block each TP rank keeps whole (MLA's
    down-projections; 0 otherwise), ``moe_replicated_params`` the router's, MoE blocks
    only; ``expert_params``: one routed expert; ``moe_layers``: which blocks are MoE;
    ``attn_params``: the attention part of a block (its projections and their norms, an
    MTP module's input projection), which a checkpoint quantizing only the MLPs keeps in
    16 bits.
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
    linear_delta_params: int = 0  # a linear-attention layer's params less a full one's
    attn_params: int = 0


def _is_moe(cfg, i: int) -> bool:
    t = cfg.model_type
    if t in ("mixtral", "gpt_oss"):
        return True
    if t in ("qwen3_moe", "qwen3_next"):
        return i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0
    if t == "llama4":
        return (i + 1) % cfg.interleave_moe_layer_step == 0
    return i >= cfg.first_k_dense_replace and i % cfg.moe_layer_freq == 0


def _gqa_attention(cfg) -> int:
    """A GQA attention block's params with its biases, sinks, gates and q/k norms."""
    h, t, d = cfg.hidden_size, cfg.model_type, cfg.d_head
    q, kv = cfg.num_attention_heads * d, cfg.kv_heads * d
    params = h * q + 2 * h * kv + q * h
    if t in ("qwen3_moe", "qwen3_next") or (t == "glm4_moe" and cfg.use_qk_norm):
        params += 2 * d  # q_norm, k_norm (Llama-4's are L2 norms without weights)
    if cfg.attention_bias:  # q/k/v biases; gpt-oss's o_proj has one too, GLM-4.5's not
        params += q + 2 * kv + (h if t == "gpt_oss" else 0)
    if t == "gpt_oss":
        params += cfg.num_attention_heads  # one attention sink per head
    if t == "qwen3_next":
        params += h * q  # q_proj also makes the output gate (gated attention)
    return params


def _linear_attention(cfg) -> int:
    """A Gated DeltaNet block's params (Qwen3-Next): in_proj_qkvz, in_proj_ba, the depthwise
    conv1d (no bias), dt_bias and A_log per value head, the gated RMSNorm, out_proj."""
    h = cfg.hidden_size
    nv = cfg.linear_num_value_heads
    key_dim = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    value_dim = nv * cfg.linear_value_head_dim
    conv_dim = 2 * key_dim + value_dim
    return (h * (2 * key_dim + 2 * value_dim) + h * 2 * nv + conv_dim * cfg.linear_conv_kernel_dim
            + 2 * nv + cfg.linear_value_head_dim + value_dim * h)


def _attention(cfg) -> tuple[int, int, int, int]:
    """(attention params incl. its own norms, replicated part, cached values per token per
    layer (MLA's latent; 0 = K and V per KV head), attention FLOPs per head per key)."""
    h, heads = cfg.hidden_size, cfg.num_attention_heads
    if not cfg.mla:
        return _gqa_attention(cfg), 0, 0, 4 * cfg.d_head
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
    t = cfg.model_type
    dense_width = cfg.intermediate_size_mlp if t == "llama4" else cfg.intermediate_size
    dense_mlp = 3 * h * dense_width if dense_width else 0
    n_experts = cfg.routed_experts
    width = expert_width(cfg)
    # the router; DeepSeek-V3's and GLM-4.5's noaux_tc routing adds a score-correction
    # bias per expert, gpt-oss's router has a bias
    gate = n_experts * h + (n_experts if t in ("deepseek_v3", "glm4_moe", "gpt_oss") else 0)
    shared = 3 * h * width * (cfg.n_shared_experts or 0)
    if t == "llama4":  # one shared expert of the routed ones' width
        shared = 3 * h * width
    if t == "qwen3_next":  # one shared expert and its sigmoid gate (hidden -> 1)
        shared = 3 * h * (cfg.shared_expert_intermediate_size or 0) + h
    expert = 3 * h * width
    if t == "gpt_oss":  # gate_up and down projections with biases
        expert += 2 * width + h
    return Blocks(
        dense_params=attn + norms + dense_mlp,
        moe_fixed_params=attn + norms + gate + shared,
        replicated_params=replicated,
        moe_replicated_params=gate,
        expert_params=expert,
        n_experts=n_experts,
        top_k=cfg.num_experts_per_tok,
        moe_layers=tuple(_is_moe(cfg, i) for i in range(cfg.num_hidden_layers)),
        kv_latent=latent,
        key_flops_per_head=key_flops,
        linear_delta_params=(_linear_attention(cfg) - attn
                             if cfg.linear_num_value_heads is not None else 0),
        attn_params=attn,
    )


def expert_width(cfg) -> int:
    """One routed expert's MLP width: ``intermediate_size`` in the families that name it so
    (Mixtral, gpt-oss, Llama-4), else ``moe_intermediate_size``."""
    if cfg.model_type in ("mixtral", "gpt_oss", "llama4"):
        return cfg.intermediate_size
    return cfg.moe_intermediate_size
