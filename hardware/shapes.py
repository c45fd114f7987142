"""Parameter counts of a model, split the way the cost model and the memory check need them.

:func:`model_shape` counts a :class:`hardware.models.ModelConfig` (the module notes there
name the families); MoE / MLA blocks are counted by :mod:`hardware.blocks` and the kind of
attention each layer runs (full, window, linear) comes from :mod:`hardware.layers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.blocks import block_counts
from hardware.layers import (
    FULL,
    LINEAR,
    WINDOW,
    layer_kinds,
    linear_flops_per_token,
    linear_state_values,
    window_tokens,
)

__all__ = ["DENSE_TYPES", "LLAMA_TYPES", "MOE_TYPES", "ModelShape", "model_shape"]

# the dense families (no experts, no latent attention), and those of them with llama's
# block (GQA attention without biases and a SwiGLU MLP)
LLAMA_TYPES = ("llama", "qwen3")
DENSE_TYPES = (*LLAMA_TYPES, "opt")
# the mixture-of-experts families (hardware.blocks), with the field naming their experts
MOE_TYPES = {"mixtral": "num_local_experts", "qwen3_moe": "num_experts",
             "deepseek_v3": "n_routed_experts", "deepseek_v2": "n_routed_experts",
             "gpt_oss": "num_local_experts", "glm4_moe": "n_routed_experts",
             "llama4": "num_local_experts", "qwen3_next": "num_experts"}


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
    # attention kinds (hardware.layers; empty: every layer full), a window layer's window,
    # and a linear-attention layer's parameters beyond a full layer's, state values per
    # sequence and FLOPs per token (whole model, before TP splits its heads)
    layer_kinds: tuple[str, ...] = ()
    window: int = 0
    linear_delta_params: int = 0
    linear_state: int = 0
    linear_flops: int = 0
    # the attention part of a full-attention block (projections with their biases and
    # norms; ``kv_proj_params`` is part of it): what a checkpoint quantizing only the MLPs
    # keeps in 16 bits (``Deployment.quantized_scope`` "mlp")
    attn_params: int = 0

    def kinds_of(self, start: int, n: int) -> tuple[int, int, int]:
        """(full, window, linear) layer counts among layers ``start`` .. ``start + n - 1``."""
        if not self.layer_kinds:
            return n, 0, 0
        kinds = self.layer_kinds[start:start + n]
        return kinds.count(FULL), kinds.count(WINDOW), kinds.count(LINEAR)

    @property
    def n_window_layers(self) -> int:
        """Layers attending to at most ``window`` tokens."""
        return self.kinds_of(0, self.n_layers)[1]

    @property
    def n_linear_layers(self) -> int:
        """Linear-attention layers (a state per sequence, no KV per token)."""
        return self.kinds_of(0, self.n_layers)[2]

    @property
    def n_moe_layers(self) -> int:
        """Blocks with routed experts (0 for a dense model)."""
        return sum(self.moe_layers)

    @property
    def streamed_params(self) -> int:
        """Parameters read every forward pass: all but the embedding tables, lm_head always
        (an MoE model: with every routed expert, what a pass touching all of them reads)."""
        linear = self.n_linear_layers * self.linear_delta_params
        if not self.moe_layers:
            return self.n_layers * self.layer_params + self.head_params + linear
        return (self.n_layers - self.n_moe_layers) * self.layer_params + self.n_moe_layers * (
            self.moe_fixed_params + self.n_experts * self.expert_params) + self.head_params \
            + linear

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
        """K and V values cached per token of context by the layers whose cache grows with
        it, the full-attention ones (multiply by bytes per value); a window layer's are
        :attr:`window_kv_values_per_token`, a linear layer caches none."""
        return self.kinds_of(0, self.n_layers)[0] * self.kv_values_per_layer(self.n_kv_heads)

    @property
    def window_kv_values_per_token(self) -> int:
        """K and V values the window layers cache per token, for at most ``window`` tokens
        of each sequence."""
        return self.n_window_layers * self.kv_values_per_layer(self.n_kv_heads)


def model_shape(cfg) -> ModelShape:
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
        attn_params=attn,
        **_attention_kinds(cfg, 0),
    )


def _attention_kinds(cfg, linear_delta: int) -> dict:
    """ModelShape's attention-kind fields of ``cfg`` (empty where every layer is full)."""
    kinds = layer_kinds(cfg)
    if all(k == FULL for k in kinds):
        return {}
    return {"layer_kinds": kinds, "window": window_tokens(cfg),
            "linear_delta_params": linear_delta if LINEAR in kinds else 0,
            "linear_state": linear_state_values(cfg),
            "linear_flops": linear_flops_per_token(cfg)}


def _medusa_shape(cfg) -> ModelShape:
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


def _moe_shape(cfg) -> ModelShape:
    """The shape of a MoE / MLA family (blocks counted by :mod:`hardware.blocks`)."""
    b = block_counts(cfg)
    h, vocab = cfg.hidden_size, cfg.vocab_size
    n_moe = sum(b.moe_layers)
    dense = cfg.num_hidden_layers - n_moe
    embedding, head = vocab * h, h + vocab * h  # final RMSNorm + lm_head
    kinds = _attention_kinds(cfg, b.linear_delta_params)
    n_linear = kinds.get("layer_kinds", ()).count(LINEAR)
    total = embedding + dense * b.dense_params + n_moe * (
        b.moe_fixed_params + b.n_experts * b.expert_params) + head - (
        vocab * h if cfg.tied else 0) + n_linear * b.linear_delta_params
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
        attn_key_flops=b.key_flops_per_head if cfg.mla else 0, attn_params=b.attn_params,
        **kinds,
    )


