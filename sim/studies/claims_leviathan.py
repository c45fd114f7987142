"""Leviathan et al.'s claims (lecture §4.3, §5) under the ratio cost model.

SpecSim has no TPU-v4 or T5 entries in its catalogs, so these claims use the paper's own
cost model: a target pass costs T, a draft pass cT, and a verify of γ + 1 tokens costs T
(batch 1, memory-bound), giving ``S = E(α, γ) / (γc + 1)`` (``specdec.walltime_speedup``).
Every row says so. What is checked is whether the α, γ and c the paper reports account for
the speedup it measured; the c a measured speedup *implies*, ``c* = (E/S − 1)/γ``, is shown
so a gap can be read as "the c needed".

Provenance of the numbers -- Leviathan, Kalman & Matias, "Fast Inference from Transformers
via Speculative Decoding", ICML 2023, arXiv 2211.17192 (T5-XXL 11B target on one TPU-v4,
batch 1):

- α, γ and the measured speedup of every row: the paper's Table 2 (EnDe and CNN/DM, T5-small
  / T5-base / T5-large drafts, argmax T = 0 and standard sampling T = 1). The values were
  read from two independent transcriptions of Tables 2-4 in public notes (the paper's own
  text could not be fetched here); they agree on every value, and the lecture's §5 quotes
  the same EnDe T5-small figures (α 0.75, γ 7, 3.4×; T = 1: α 0.62, 2.6×).
- c per draft: Table 4 (expected vs measured speedup). It gives c = 0.02 for T5-small
  (the lecture's §4.3 quotes it: α 0.75, γ 7, c 0.02 -> 3.2× predicted). For T5-base and
  T5-large the c column was not in the transcriptions; 0.04 and 0.11 are the values that
  reproduce every expected speedup Table 4 prints for their rows (T5-base 3.3, 2.4, 2.6,
  1.8; T5-large 2.5, 2.0, 2.0, 1.6) to its last digit, and no other two-digit value does.
- Table 1 (c = 0): α 0.8, γ 5 -> 3.69× speed, 1.63× operations -- lecture §4.3; the bigram
  draft (c ≈ 0) α 0.2, γ 3 -> 1.25× -- lecture §5 (Table 3 gives the bigram's α 0.20).

Where a measured speedup exceeds E(α, γ) -- the most any c ≥ 0 allows under the i.i.d.
model (several CNN/DM rows) -- the row says so: the paper attributes such gaps to the i.i.d.
assumption and its implementation (§A.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import specdec
from sim.studies.claims import Check, ClaimRow, point, span

__all__ = ["T5Result", "T5_RESULTS", "C_BY_DRAFT", "implied_c", "leviathan_claims"]


@dataclass(frozen=True)
class T5Result:
    """One measured speedup of T5-XXL with a T5 draft (the paper's Table 2)."""

    task: str
    draft: str
    temperature: float
    gamma: int
    alpha: float
    speedup: float
    source: str  # where in the paper (arXiv 2211.17192) the row is read


_T2 = "Table 2"
T5_RESULTS = (
    T5Result("EnDe", "t5-small", 0.0, 7, 0.75, 3.4, _T2),
    T5Result("EnDe", "t5-small", 1.0, 7, 0.62, 2.6, _T2),
    T5Result("CNNDM", "t5-small", 0.0, 5, 0.65, 3.1, _T2),
    T5Result("CNNDM", "t5-small", 1.0, 5, 0.53, 2.3, _T2),
    T5Result("EnDe", "t5-base", 0.0, 7, 0.80, 2.8, _T2),
    T5Result("EnDe", "t5-base", 1.0, 5, 0.68, 2.4, _T2),
    T5Result("CNNDM", "t5-base", 0.0, 5, 0.73, 3.0, _T2),
    T5Result("CNNDM", "t5-base", 1.0, 3, 0.55, 2.2, _T2),
    T5Result("EnDe", "t5-large", 0.0, 7, 0.82, 1.7, _T2),
    T5Result("EnDe", "t5-large", 1.0, 3, 0.71, 1.4, _T2),
    T5Result("CNNDM", "t5-large", 0.0, 3, 0.74, 2.2, _T2),
    T5Result("CNNDM", "t5-large", 1.0, 3, 0.56, 1.7, _T2),
)

# draft -> (c, where it comes from)
C_BY_DRAFT = {
    "t5-small": (0.02, "paper Table 4 (lecture §4.3 quotes it)"),
    "t5-base": (0.04, "paper Table 4: the c that reproduces its expected speedups for the "
                      "T5-base rows (3.3, 2.4, 2.6, 1.8)"),
    "t5-large": (0.11, "paper Table 4: the c that reproduces its expected speedups for the "
                       "T5-large rows (2.5, 2.0, 2.0, 1.6)"),
}

_RATIO = ("ratio cost model (target pass T, draft pass cT, verify of γ+1 tokens = T; "
          "hardware not modelled — no TPU-v4/T5 in the catalog)")


def implied_c(alpha: float, gamma: int, speedup: float) -> float:
    """The c at which ``E(α, γ) / (γc + 1)`` equals a measured ``speedup``."""
    return (float(specdec.expected_tokens(alpha, gamma)) / speedup - 1.0) / gamma


def _predicted(r: T5Result) -> float:
    return float(specdec.walltime_speedup(r.alpha, r.gamma, C_BY_DRAFT[r.draft][0]))


def _label(r: T5Result) -> str:
    return f"{r.task} {r.draft} T={r.temperature:g} α={r.alpha} γ={r.gamma}"


def leviathan_claims(quick: bool = False) -> list[ClaimRow]:
    """T5-XXL speedups per draft, the small-vs-large comparison, and Table 1's formulas."""
    rows = []
    for draft in C_BY_DRAFT:
        res = [r for r in T5_RESULTS if r.draft == draft]
        c, c_src = C_BY_DRAFT[draft]
        checks = tuple(Check(_label(r), _predicted(r), *point(r.speedup)) for r in res)
        implied = ", ".join(f"{implied_c(r.alpha, r.gamma, r.speedup):.3f}" for r in res)
        ceiling = ", ".join(f"{1 / (1 - r.alpha):.2f}×" for r in res)
        # A measured speedup above E(α, γ) needs c < 0: no draft cost explains it, so the
        # recalled γ or the i.i.d. acceptance assumption is what is off there.
        beyond = [r for r in res if implied_c(r.alpha, r.gamma, r.speedup) < 0]
        beyond_note = "".join(
            f" At {_label(r)} the measured {r.speedup:g}× exceeds E(α, γ) = "
            f"{float(specdec.expected_tokens(r.alpha, r.gamma)):.2f} tokens per verify, the "
            "most any c ≥ 0 allows: the i.i.d. model does not hold there (paper §A.3)."
            for r in beyond)
        rows.append(ClaimRow(
            f"leviathan-{draft}",
            f"T5-XXL with {draft.upper()} draft (TPU-v4, batch 1): measured speedup",
            ", ".join(f"{r.speedup:g}×" for r in res),
            ", ".join(f"{_predicted(r):.2f}×" for r in res), checks,
            f"{_RATIO}; c = {c} ({c_src}); c implied by the measured speedups: {implied} "
            f"(ceiling at c = 0, γ → ∞: 1/(1 − α) = {ceiling}); "
            f"α, γ and speedups: arXiv 2211.17192 "
            f"{'; '.join(sorted({r.source for r in res}))}.{beyond_note}",
            "analytic",
        ))
    small = next(r for r in T5_RESULTS if r.draft == "t5-small" and r.task == "EnDe"
                 and r.temperature == 0.0)
    large = next(r for r in T5_RESULTS if r.draft == "t5-large")
    ratio = _predicted(small) / _predicted(large)
    rows.append(ClaimRow(
        "leviathan-small-beats-large",
        "A larger draft with higher α is slower: T5-small (α 0.75) beats T5-large (α 0.82)",
        f"S_small/S_large = {small.speedup / large.speedup:.2f} > 1",
        f"{ratio:.2f}", (Check("S_small / S_large", ratio, 1.0, float("inf")),),
        f"{_RATIO}; the verdict rests on c_large / c_small "
        f"({C_BY_DRAFT['t5-large'][0]} / {C_BY_DRAFT['t5-small'][0]}, see the c sources).",
        "analytic",
    ))
    table1 = (
        Check("speed α=0.8 γ=5 c=0", float(specdec.walltime_speedup(0.8, 5, 0.0)),
              *point(3.69, 0.005)),
        Check("operations α=0.8 γ=5", float(specdec.ops_multiplier(0.8, 5)),
              *point(1.63, 0.005)),
        Check("speed α=0.75 γ=7 c=0.02 (Table 4: 3.2×)",
              float(specdec.walltime_speedup(0.75, 7, 0.02)), *point(3.2, 0.02)),
        Check("bigram draft α=0.2 γ=3 c≈0", float(specdec.walltime_speedup(0.2, 3, 0.0)),
              *point(1.25, 0.005)),
    )
    rows.append(ClaimRow(
        "leviathan-formulas",
        "Leviathan Table 1/Table 4 formula figures (speed, operations) and the bigram draft",
        "3.69×, 1.63×, 3.2×, 1.25×", span(table1), table1,
        "Exact formulas E(α,γ)/(γc+1) and (γc+γ+1)/E (Thm 3.8, 3.11); published to 2–3 "
        "digits, so ±0.5% (±2% for the 2-digit 3.2×).",
        "analytic",
    ))
    return rows
