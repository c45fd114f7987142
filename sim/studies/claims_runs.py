"""Running the claim scenarios (``scenarios/claims/*.yaml``) one variant at a time.

Every claim simulation is a shipped scenario plus ``--set``-style overrides (batch size,
request count, acceptance calibration, the one variant to run), so each number can be
reproduced with ``specsim run scenarios/claims/<file> --set ...``. A run holds a single
variant because acceptance is calibrated per tree shape (one scenario = one acceptance
model); all runs of a scenario share its seed, hence the same requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.build import cost_models
from sim.loading import load_scenario, repo_root
from sim.runner import run_scenario

__all__ = ["SimPoint", "claims_scenario", "simulate_variant", "cost_pair", "policy_yaml"]


@dataclass(frozen=True)
class SimPoint:
    """One simulated variant: mean TPOT (s), measured tokens per verify (None without
    speculation), how many requests finished, and the steady-state decode rate.

    ``steady_tokens_per_s`` = emitted tokens / seconds over the iterations that decoded a
    full batch (``decode_seqs`` = the batch asked for) and prefilled nothing: the fixed-
    concurrency decode speed, free of prefill interference and of the thinning tail.
    ``None`` when no batch was asked for or no iteration qualifies.
    """

    tpot_mean_s: float
    tokens_per_verify: float | None
    finished: int
    steady_tokens_per_s: float | None = None


def claims_scenario(name: str) -> Path:
    """``scenarios/claims/<name>`` under the repository root."""
    return repo_root() / "scenarios" / "claims" / name


def policy_yaml(shape: Sequence[int] | None, gamma: int | None = None) -> str:
    """The YAML value of one variant list: no speculation, a chain of γ, or a tree."""
    if gamma is not None:
        return f"[{{name: g{gamma}, policy: {{kind: fixed, gamma: {gamma}}}}}]"
    if shape is None:
        return "[{name: none, policy: {kind: none}}]"
    tree = ",".join(str(int(k)) for k in shape)
    return f"[{{name: tree, policy: {{kind: tree, expansion: [{tree}]}}}}]"


def simulate_variant(path: Path, overrides: Sequence[str], steady_batch: int | None = None
                     ) -> SimPoint:
    """Run the scenario at ``path`` with ``overrides`` (which must leave one variant)."""
    sc = load_scenario(path, list(overrides))
    result = run_scenario(sc, str(path.name), record_bound=False,
                          iteration_rows=steady_batch is not None)
    (s,) = result.summaries
    steady = None
    if steady_batch is not None:
        it = result.variants[0].iterations.columns
        full = (it["decode_seqs"] == steady_batch) & (it["prefill_tokens"] == 0)
        seconds = sum(it["duration_s"][full].tolist())  # in record order, as Python adds
        steady = int(it["emitted_tokens"][full].sum()) / seconds if seconds > 0 else None
    return SimPoint(s["tpot_mean_s"], s["tokens_per_verify"], s["finished"], steady)


def cost_pair(path: Path, overrides: Sequence[str] = ()):
    """(target ``CostModel``, draft ``DraftSetup``) of the scenario at ``path``."""
    sc = load_scenario(path, list(overrides))
    target, drafter, _ = cost_models(sc, True)
    return target, drafter.setup
