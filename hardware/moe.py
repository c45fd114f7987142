"""Mixture of experts: how many routed experts a pass touches, and what moving tokens costs.

**Experts touched.** A pass routes T tokens through each MoE layer; each token picks
``k`` distinct experts of ``E``. Under uniform routing a given expert is left out by one
token with probability 1 - k/E, so by T independent tokens with (1 - k/E)^T, and the
expected number of distinct experts touched is

    E · (1 - (1 - k/E)^T)

(exact in expectation for independent tokens, each choosing a uniformly random k-subset:
linearity over the E experts). One decode token reads k experts; a verify of γ + 1 tokens
per sequence reads more; a large batch reads (nearly) all of them. A pass's weight bytes per
MoE layer are therefore the fixed part (attention, norms, router, shared experts) plus the
touched share of the routed experts; its FLOPs are T · k experts' worth. Under expert
parallelism a GPU holds E/ep experts and touches the same share of them.

Not modelled: skewed routing (real routers prefer some experts; fewer distinct experts
are then touched, and under EP the busiest GPU sets the pace -- the expected share is
priced, not the slowest rank), DeepSeek's group-limited routing (top-4 of 8 expert
groups per token), capacity factors and token dropping (vLLM drops none).

**All-to-all** (expert parallelism with data-parallel attention, ``ep > tp``): every MoE
layer dispatches each token's hidden state to the GPUs holding its k experts and combines
the k results back. Per GPU and direction that is its own 1/ep share of the tokens times
k hidden vectors, the (ep - 1)/ep of them that leave the GPU: ``tokens/ep · k · h · 2
bytes · (ep - 1)/ep``, priced α-β like the all-reduces (a call, ep - 1 steps, the bytes over
the link's bandwidth at its efficiency), twice per MoE layer (dispatch + combine).
"""

from __future__ import annotations

import numpy as np

__all__ = ["distinct_experts", "touched_share", "a2a_bytes_per_token", "ACT_BYTES"]

ACT_BYTES = 2  # tokens travel in 16 bits (DeepEP's low-latency dispatch sends FP8: not used)


def distinct_experts(tokens, top_k: int, n_experts: int):
    """Expected distinct experts of ``n_experts`` that ``tokens`` tokens touch, each routed
    to ``top_k`` uniformly (scalar or array of token counts)."""
    t = np.asarray(tokens, dtype=np.float64)
    out = n_experts * (1.0 - (1.0 - top_k / n_experts) ** t)
    return float(out) if out.ndim == 0 else out


def touched_share(tokens: float, miss: float) -> float:
    """The share of the routed experts a pass of ``tokens`` tokens reads: 1 - miss^tokens,
    with ``miss`` = 1 - k/E (the hot path's form of :func:`distinct_experts` / E)."""
    return 1.0 - miss ** tokens


def a2a_bytes_per_token(ep: int, top_k: int, hidden: int) -> float:
    """Bytes one GPU sends in one dispatch (or combine) per replica token (see the notes)."""
    return top_k * hidden * ACT_BYTES * (ep - 1) / ep / ep
