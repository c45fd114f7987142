"""How far real acceptance is from the i.i.d. formula (lecture §4.5), per run.

The engine's records hold acceptance totals per request and per iteration, not the
accepted count of each single verify, so the per-verify distributions here are tables of
accepted counts from a replay of the scenario's own acceptance model the way a serving log
would see it (``sim.studies.acceptance_replay``, over ``workloads.replay_chain``). The
totals that the records *do* hold give the run's measured tokens per verify, the formula
E(α̂, γ) at the measured α̂, and the TPOT spread.

- ``verify_histogram``: fraction of verifies yielding 1..γ+1 tokens, measured vs the i.i.d.
  law at the measured α̂ (P(a accepted) = α̂^a (1 − α̂) for a < γ, α̂^γ for a = γ), with
  α̂ = accepted / checked guesses (checked = accepted + 1, or γ when all are accepted).
- ``run_length_table``: lengths of runs of consecutive accepted draft tokens along the output,
  measured with chains long enough never to cut a run (``max_run``), vs the geometric law
  P(L = k) = α̂^k (1 − α̂). Easy/hard stretches give more very short and very long runs.
- ``formula_bias``: per variant, (formula − measured) / measured tokens per verify: > 0
  means the i.i.d. formula over-predicts (the lecture's bursty case).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


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


def run_length_table(accepted: np.ndarray, max_run: int) -> pd.DataFrame:
    """Frequency of each accepted-run length 0..max_run, measured vs geometric at α̂.

    ``accepted``: the accepted guesses of chains of ``max_run`` guesses
    (``workloads.replay_chain``); runs that reach ``max_run`` are cut there (counted at
    max_run), so pick it well above the longest runs the model produces.
    """
    acc = np.asarray(accepted).ravel()  # [B*V]
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
