"""How far real acceptance is from the i.i.d. formula (lecture §4.5), per run.

The engine's records hold acceptance totals per request and per iteration, not the
accepted count of each single verify, so the per-verify distributions here come from
replaying the scenario's own acceptance model (``sim.build.make_acceptance``) the way a
serving log would see it: ``n_streams`` requests, each verifying chains of γ back to back
and advancing by the tokens each verify emits (as ``workloads.measure_chain`` does, but
keeping every count). The totals that the records *do* hold give the run's measured
tokens per verify, the formula E(α̂, γ) at the measured α̂, and the TPOT spread.

- ``verify_histogram``: fraction of verifies yielding 1..γ+1 tokens, measured vs the i.i.d.
  law at the measured α̂ (P(a accepted) = α̂^a (1 − α̂) for a < γ, α̂^γ for a = γ), with
  α̂ = accepted / checked guesses (checked = accepted + 1, or γ when all are accepted).
- ``run_lengths``: lengths of runs of consecutive accepted draft tokens along the output,
  measured with chains long enough never to cut a run (``max_run``), vs the geometric law
  P(L = k) = α̂^k (1 − α̂). Easy/hard stretches give more very short and very long runs.
- ``formula_bias``: per variant, (formula − measured) / measured tokens per verify: > 0
  means the i.i.d. formula over-predicts (the lecture's bursty case).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specdec.errors import UserError


def replay_chain(model, gamma: int, n_streams: int, n_verifies: int,
                 rng: np.random.Generator) -> np.ndarray:
    """int64 [n_streams, n_verifies]: accepted guesses of each verify of a γ-chain."""
    from workloads import chain_widths

    if gamma < 1:
        raise UserError(f"gamma: must be >= 1, got {gamma}")
    streams = model.new_streams(n_streams, rng)  # [B]
    positions = np.zeros(n_streams, dtype=np.int64)  # [B]
    widths = np.broadcast_to(chain_widths(gamma), (n_streams, gamma))  # [B, γ]
    out = np.empty((n_streams, n_verifies), dtype=np.int64)  # [B, V]
    for v in range(n_verifies):
        a = model.accept(streams, positions, widths, rng)  # [B]
        out[:, v] = a
        positions += a + 1
    return out


def alpha_hat(accepted: np.ndarray, gamma: int) -> float:
    """Accepted guesses per checked guess (lecture §4.5's measured α)."""
    checked = np.minimum(accepted + 1, gamma).sum()
    return float(accepted.sum() / checked) if checked else float("nan")


def iid_verify_probs(alpha: float, gamma: int) -> np.ndarray:
    """float [γ+1]: P(a guesses accepted), a = 0..γ, for i.i.d. acceptance α."""
    a = np.arange(gamma + 1)  # [γ+1]
    p = alpha**a * (1 - alpha)
    p[gamma] = alpha**gamma
    return p


def verify_histogram(accepted: np.ndarray, gamma: int) -> pd.DataFrame:
    """Per tokens-per-verify value 1..γ+1: measured fraction, i.i.d. fraction at α̂."""
    flat = accepted.ravel()
    measured = np.bincount(flat, minlength=gamma + 1)[: gamma + 1] / len(flat)  # [γ+1]
    a = alpha_hat(flat, gamma)
    return pd.DataFrame({"tokens": np.arange(1, gamma + 2), "measured": measured,
                         "iid": iid_verify_probs(a, gamma), "alpha_hat": a, "gamma": gamma})


def run_lengths(model, rng: np.random.Generator, n_streams: int = 256, n_runs: int = 64,
                max_run: int = 64) -> pd.DataFrame:
    """Frequency of each accepted-run length 0..max_run, measured vs geometric at α̂.

    Runs that reach ``max_run`` are cut there (counted at max_run); pick it well above the
    longest runs the model produces.
    """
    acc = replay_chain(model, max_run, n_streams, n_runs, rng).ravel()  # [B*V]
    a = alpha_hat(acc, max_run)
    k = np.arange(max_run + 1)  # [K]
    measured = np.bincount(acc, minlength=max_run + 1)[: max_run + 1] / len(acc)
    return pd.DataFrame({"run_length": k, "measured": measured,
                         "iid": iid_verify_probs(a, max_run), "alpha_hat": a})


def formula_bias(summaries: list[dict]) -> pd.DataFrame:
    """Per speculating variant: measured vs formula tokens per verify and TPOT p99 / p50."""
    rows = []
    for s in summaries:
        measured, formula = s.get("tokens_per_verify"), s.get("formula_tokens_per_verify")
        p50, p99 = s.get("tpot_p50_s"), s.get("tpot_p99_s")
        rows.append({
            "name": s["name"],
            "tokens_per_verify": measured,
            "formula_tokens_per_verify": formula,
            "formula_over_prediction": (formula - measured) / measured
            if measured and formula else np.nan,
            "tpot_p50_s": p50, "tpot_p99_s": p99,
            "tpot_p99_over_p50": p99 / p50 if p50 and p99 else np.nan,
        })
    return pd.DataFrame(rows)


def scenario_histograms(scenario: dict, gamma: int, n_streams: int = 256,
                        n_verifies: int = 64) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(verify histogram at γ, run lengths) for a resolved scenario's acceptance model.

    The replay's generator is seeded from the scenario's seed and a fixed tag, separate from
    the run's own streams: deterministic, but not the run's exact draws.
    """
    from sim.build import make_acceptance
    from sim.scenario import Scenario

    sc = Scenario.model_validate(scenario)
    seq = np.random.SeedSequence([sc.run.seed, 0x5EC5])
    build_rng, draw_rng = (np.random.default_rng(s) for s in seq.spawn(2))
    model = make_acceptance(sc.acceptance, build_rng)
    hist = verify_histogram(replay_chain(model, gamma, n_streams, n_verifies, draw_rng), gamma)
    runs = run_lengths(model, draw_rng, n_streams)
    return hist, runs
