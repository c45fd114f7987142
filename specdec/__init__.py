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
from specdec.errors import UserError
from specdec.mss import (
    deterministic_acceptance_probability,
    mss_acceptance_probabilities,
    mss_acceptance_probability,
    mss_output_distribution,
    mss_sample,
    naive_acceptance_probability,
    naive_sample,
    top_k_candidates,
    wrong_topk_ratio_output_distribution,
)
from specdec.sampling import (
    acceptance_probability,
    lenient_acceptance_probability,
    one_round_rejection_acceptance_probability,
    one_round_rejection_output_distribution,
    probs_from_logits,
    residual_distribution,
    sample,
    speculative_output_distribution,
    speculative_sample,
    total_variation,
    wrong_resample_from_p_output_distribution,
)

__all__ = [
    "UserError",
    # sampling (lecture §2)
    "acceptance_probability",
    "lenient_acceptance_probability",
    "one_round_rejection_acceptance_probability",
    "one_round_rejection_output_distribution",
    "probs_from_logits",
    "residual_distribution",
    "sample",
    "speculative_output_distribution",
    "speculative_sample",
    "total_variation",
    "wrong_resample_from_p_output_distribution",
    # multi-step speculative sampling (lecture §6.4)
    "deterministic_acceptance_probability",
    "mss_acceptance_probabilities",
    "mss_acceptance_probability",
    "mss_output_distribution",
    "mss_sample",
    "naive_acceptance_probability",
    "naive_sample",
    "top_k_candidates",
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
]
