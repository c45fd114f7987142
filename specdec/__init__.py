"""The exact numpy speculative-decoding core (numpy only: no SimPy, pandas or I/O)."""

from specdec.analysis import (
    expected_tokens,
    ops_multiplier,
    optimal_gamma,
    optimal_speedup,
    speedup_lower_bound,
    walltime_speedup,
)
from specdec.bursty import BurstyResult, bursty_acceptance_experiment
from specdec.counterexamples import (
    one_round_rejection_acceptance_probability,
    one_round_rejection_output_distribution,
    wrong_resample_from_p_output_distribution,
    wrong_topk_ratio_output_distribution,
)
from specdec.decoding import (
    DecodeResult,
    IterationStats,
    autoregressive_decode,
    speculative_decode,
)
from specdec.drafts import (
    DRAFT_KINDS,
    Drafter,
    ModelDrafter,
    NgramDrafter,
    UniformDrafter,
    make_drafter,
    perturbed_copy,
    rank_order,
    token_ranks,
    truncated_copy,
)
from specdec.errors import UserError
from specdec.model import KVCache, ModelConfig, TinyTransformer
from specdec.mss import (
    deterministic_acceptance_probability,
    mss_acceptance_probabilities,
    mss_acceptance_probability,
    mss_output_distribution,
    mss_sample,
    naive_acceptance_probability,
    naive_sample,
    top_k_candidates,
)
from specdec.sampling import (
    acceptance_probability,
    lenient_acceptance_probability,
    probs_from_logits,
    residual_distribution,
    sample,
    speculative_output_distribution,
    speculative_sample,
    total_variation,
)
from specdec.traces import (
    TRACE_FORMAT_VERSION,
    AcceptanceTrace,
    build_models,
    record_settings,
    record_trace,
    regenerate,
    replay_chain,
    replay_chain_sampled,
    replay_tree,
    replay_tree_sampled,
    trace_summary,
)
from specdec.tree import (
    TokenTree,
    expansion_tree,
    merge_tree,
    tree_forward,
    verify_greedy,
    verify_stochastic,
)
from specdec.tree_decoding import merge_tree_decode, tree_decode

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
