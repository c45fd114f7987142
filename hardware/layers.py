"""Which kind of attention each layer runs, and what a layer of each kind keeps and reads.

Three kinds, as Hugging Face configs name them in ``layer_types``:

- ``full`` (``full_attention``): every earlier token is attended and cached; KV grows with
  the context.
- ``window`` (``sliding_attention``, ``chunked_attention``): a token attends at most the
  last ``window`` tokens, so a sequence keeps and reads at most ``window`` tokens of KV.
  gpt-oss's sliding layers (``sliding_window`` 128, every other layer: transformers
  ``models/gpt_oss/configuration_gpt_oss.py``), a Qwen config's ``use_sliding_window``
  (the layers from ``max_window_layers`` on) and Mixtral's ``sliding_window`` are windows.
  Llama-4's chunked local attention (``attention_chunk_size`` 8192 on the layers that use
  rotary positions, 3 of every 4: transformers ``models/llama4/configuration_llama4.py``,
  ``no_rope_layers``) attends to the tokens of the current chunk only, 1 to 8192 of them
  (half a chunk on average over a long sequence); SpecSim prices it as a window of the
  chunk size -- an upper bound, which vLLM's ``ChunkedLocalAttentionManager`` also keeps
  in memory (vllm/v1/core/single_type_kv_cache_manager.py).
- ``linear`` (``linear_attention``): Qwen3-Next's Gated DeltaNet, a recurrent state per
  sequence of ``linear_num_value_heads x linear_key_head_dim x linear_value_head_dim``
  values plus a causal-convolution state of ``linear_conv_kernel_dim - 1`` steps of the
  ``2 x key_dim + value_dim`` channels (transformers ``models/qwen3_next``
  ``Qwen3NextGatedDeltaNet``; vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``
  in vllm/model_executor/layers/mamba/mamba_utils.py): nothing per token of context.
  Every ``full_attention_interval``-th layer is full attention.
"""

from __future__ import annotations

__all__ = ["FULL", "WINDOW", "LINEAR", "layer_kinds", "window_tokens", "linear_state_values",
           "linear_flops_per_token", "LAYER_TYPES"]

FULL, WINDOW, LINEAR = "full", "window", "linear"
# config.json's layer_types names -> SpecSim's kinds
LAYER_TYPES = {"full_attention": FULL, "sliding_attention": WINDOW,
               "chunked_attention": WINDOW, "linear_attention": LINEAR}


def layer_kinds(cfg) -> tuple[str, ...]:
    """Each layer's kind (``FULL``, ``WINDOW`` or ``LINEAR``) of a ``ModelConfig``: its
    ``layer_types`` where the config lists them, else the family's rule (module notes)."""
    n = cfg.num_hidden_layers
    if cfg.model_type == "medusa":
        return ()
    if cfg.layer_types is not None:
        return tuple(LAYER_TYPES[t] for t in cfg.layer_types)
    t = cfg.model_type
    if t == "gpt_oss":  # sliding on even layers, full on odd (transformers' default)
        return tuple(WINDOW if (i + 1) % 2 else FULL for i in range(n))
    if t == "llama4":
        if cfg.attention_chunk_size is None:
            return (FULL,) * n
        rope = cfg.no_rope_layers or tuple(int((i + 1) % 4 != 0) for i in range(n))
        return tuple(WINDOW if rope[i] else FULL for i in range(n))
    if t == "qwen3_next":
        k = cfg.full_attention_interval
        return tuple(FULL if (i + 1) % k == 0 else LINEAR for i in range(n))
    if cfg.use_sliding_window and cfg.sliding_window is not None:
        first = cfg.max_window_layers or 0
        return tuple(WINDOW if i >= first else FULL for i in range(n))
    if t == "mixtral" and cfg.sliding_window is not None:
        return (WINDOW,) * n
    return (FULL,) * n


def window_tokens(cfg) -> int:
    """Tokens a window layer attends at most (0 for a model without window layers)."""
    if WINDOW not in layer_kinds(cfg):
        return 0
    return cfg.attention_chunk_size if cfg.model_type == "llama4" else cfg.sliding_window


def linear_state_values(cfg) -> int:
    """Values one sequence's state takes in one linear-attention layer (whole model, before
    TP splits its heads): the recurrent state and the convolution's last steps."""
    if cfg.linear_num_value_heads is None:
        return 0
    key_dim = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    value_dim = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    recurrent = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim
    conv = (cfg.linear_conv_kernel_dim - 1) * (2 * key_dim + value_dim)
    return recurrent + conv


def linear_flops_per_token(cfg) -> int:
    """FLOPs one token costs a linear-attention layer beyond its projections (whole model):
    per value head, reading the state against the key (2 dk dv), the rank-1 update (2 dk
    dv) and the query against the state (2 dk dv), plus the depthwise convolution (2 x
    kernel per channel). The chunked prefill algorithm does about as much per token."""
    if cfg.linear_num_value_heads is None:
        return 0
    key_dim = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    value_dim = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    state = 6 * cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim
    return state + 2 * cfg.linear_conv_kernel_dim * (2 * key_dim + value_dim)
