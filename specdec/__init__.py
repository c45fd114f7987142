"""The exact numpy speculative-decoding core (numpy only: no SimPy, pandas or I/O).

Names are imported lazily (PEP 562), so that ``from specdec.errors import UserError`` -- which
every command line start-up needs -- does not import numpy.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "expected_tokens": "specdec.analysis",
    "ops_multiplier": "specdec.analysis",
    "optimal_gamma": "specdec.analysis",
    "optimal_speedup": "specdec.analysis",
    "speedup_lower_bound": "specdec.analysis",
    "walltime_speedup": "specdec.analysis",
    "BurstyResult": "specdec.bursty",
    "bursty_acceptance_experiment": "specdec.bursty",
    "one_round_rejection_acceptance_probability": "specdec.counterexamples",
    "one_round_rejection_output_distribution": "specdec.counterexamples",
    "wrong_resample_from_p_output_distribution": "specdec.counterexamples",
    "wrong_topk_ratio_output_distribution": "specdec.counterexamples",
    "DecodeResult": "specdec.decoding",
    "IterationStats": "specdec.decoding",
    "autoregressive_decode": "specdec.decoding",
    "speculative_decode": "specdec.decoding",
    "DRAFT_KINDS": "specdec.drafts",
    "Drafter": "specdec.drafts",
    "ModelDrafter": "specdec.drafts",
    "NgramDrafter": "specdec.drafts",
    "UniformDrafter": "specdec.drafts",
    "make_drafter": "specdec.drafts",
    "perturbed_copy": "specdec.drafts",
    "rank_order": "specdec.drafts",
    "token_ranks": "specdec.drafts",
    "truncated_copy": "specdec.drafts",
    "UserError": "specdec.errors",
    "KVCache": "specdec.model",
    "ModelConfig": "specdec.model",
    "TinyTransformer": "specdec.model",
    "deterministic_acceptance_probability": "specdec.mss",
    "mss_acceptance_probabilities": "specdec.mss",
    "mss_acceptance_probability": "specdec.mss",
    "mss_output_distribution": "specdec.mss",
    "mss_sample": "specdec.mss",
    "naive_acceptance_probability": "specdec.mss",
    "naive_sample": "specdec.mss",
    "top_k_candidates": "specdec.mss",
    "acceptance_probability": "specdec.sampling",
    "lenient_acceptance_probability": "specdec.sampling",
    "probs_from_logits": "specdec.sampling",
    "residual_distribution": "specdec.sampling",
    "sample": "specdec.sampling",
    "speculative_output_distribution": "specdec.sampling",
    "speculative_sample": "specdec.sampling",
    "total_variation": "specdec.sampling",
    "TRACE_FORMAT_VERSION": "specdec.traces",
    "AcceptanceTrace": "specdec.traces",
    "build_models": "specdec.traces",
    "record_settings": "specdec.traces",
    "record_trace": "specdec.traces",
    "regenerate": "specdec.traces",
    "replay_chain": "specdec.traces",
    "replay_chain_sampled": "specdec.traces",
    "replay_tree": "specdec.traces",
    "replay_tree_sampled": "specdec.traces",
    "trace_summary": "specdec.traces",
    "TokenTree": "specdec.tree",
    "expansion_tree": "specdec.tree",
    "merge_tree": "specdec.tree",
    "tree_forward": "specdec.tree",
    "verify_greedy": "specdec.tree",
    "verify_stochastic": "specdec.tree",
    "merge_tree_decode": "specdec.tree_decoding",
    "tree_decode": "specdec.tree_decoding",
}

__all__ = [
    "UserError",
    # sampling (lecture §2)
    "acceptance_probability",
    "lenient_acceptance_probability",
    "probs_from_logits",
    "residual_distribution",
    "sample",
    "speculative_output_distribution",
    "speculative_sample",
    "total_variation",
    # multi-step speculative sampling (lecture §6.4)
    "deterministic_acceptance_probability",
    "mss_acceptance_probabilities",
    "mss_acceptance_probability",
    "mss_output_distribution",
    "mss_sample",
    "naive_acceptance_probability",
    "naive_sample",
    "top_k_candidates",
    # the wrong and the worse variants, kept to be shown wrong (lecture §2.6, §6.4)
    "one_round_rejection_acceptance_probability",
    "one_round_rejection_output_distribution",
    "wrong_resample_from_p_output_distribution",
    "wrong_topk_ratio_output_distribution",
    # analysis (lecture §4)
    "BurstyResult",
    "bursty_acceptance_experiment",
    "expected_tokens",
    "ops_multiplier",
    "optimal_gamma",
    "optimal_speedup",
    "speedup_lower_bound",
    "walltime_speedup",
    # tiny transformer and KV cache (lecture §3.2)
    "KVCache",
    "ModelConfig",
    "TinyTransformer",
    # drafts (lecture §3.3)
    "DRAFT_KINDS",
    "Drafter",
    "ModelDrafter",
    "NgramDrafter",
    "UniformDrafter",
    "make_drafter",
    "perturbed_copy",
    "rank_order",
    "token_ranks",
    "truncated_copy",
    # speculative decoding, Algorithm 1 (lecture §3.1)
    "DecodeResult",
    "IterationStats",
    "autoregressive_decode",
    "speculative_decode",
    # token trees and tree decoding (lecture §6)
    "TokenTree",
    "expansion_tree",
    "merge_tree",
    "merge_tree_decode",
    "tree_decode",
    "tree_forward",
    "verify_greedy",
    "verify_stochastic",
    # acceptance traces (DESIGN.md)
    "TRACE_FORMAT_VERSION",
    "AcceptanceTrace",
    "build_models",
    "record_settings",
    "record_trace",
    "regenerate",
    "replay_chain",
    "replay_chain_sampled",
    "replay_tree",
    "replay_tree_sampled",
    "trace_summary",
]


def __getattr__(name: str):
    """Import ``name`` from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'specdec' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
