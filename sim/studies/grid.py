"""Speedup grids: batch × context (best γ per cell) and tree width × batch.

Analytic grids price every pass with the cost model and use the i.i.d. acceptance formula
(``hardware.speedup``: speedup = E(α, γ) · decode_s / (draft_s + verify_s), at a uniform
batch where every sequence holds ``context`` cached tokens). Tree cells use the i.i.d. tree
expectation ``workloads.calibration.expected_iid`` (top-k coverage 1 − (1 − α)^(k^θ) per
level) unless measured tokens per verify are given.

``simulate_grid`` instead runs the engine closed-loop: all requests arrive at once and
``max_num_seqs`` = batch, so a finished sequence's slot is refilled from the queue and the
replica decodes at a fixed concurrency; the cell's speedup is mean TPOT without speculation
over mean TPOT with each γ (prompts of ``context`` tokens prefilled in one unchunked pass,
then short fixed outputs, so the context stays near ``context``). With the default one
wave the batch shrinks only at the very end, as sequences finish.

A cell whose KV cache (batch × (context + new tokens), plus the co-located draft) does not
fit the GPU keeps its numbers but has ``fits = False``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hardware import CostModel, Deployment, DraftSetup, load_catalog
from hardware.draft import check_colocated_memory, tree_nodes
from hardware.spec_cost import SpecRound, for_cost
from hardware.speedup import best_chain, best_tree, chain_table, tree_table
from sim.build import DraftCosts
from sim.loading import validate
from sim.runner import run_scenario
from specdec.errors import UserError
from workloads.acceptance import expected_iid
from workloads.coverage import PowerCoverage


@dataclass(frozen=True)
class Pair:
    """A target cost model and its draft setup on one GPU type."""

    target: CostModel
    draft: DraftSetup | None  # None: a CPU drafter (n-gram), no GPU time
    spec: SpecRound | None = None  # the engine's speculative overheads (hardware.spec_cost)


def make_pair(target: str, draft: str | None, gpu: str, tp: int = 1, weight_bits: int = 16,
              draft_weight_bits: int = 16, kv_bits: int = 16, placement: str = "colocated",
              catalog: Sequence[str] | None = None, timing: str = "auto",
              framework: str = "vllm", compute_dtype: str | None = None,
              method: str = "draft_model", heads: int | None = None) -> Pair:
    """Cost models for ``target`` (TP ``tp``) and its drafter on ``gpu`` from the catalogs,
    priced by ``timing`` under ``framework`` (the draft computes in ``compute_dtype`` only
    at 8-bit weights, as ``sim.build`` does).

    ``method`` as a scenario's ``models.method``: ``draft_model`` drafts with the catalog
    model ``draft``; ``eagle`` / ``eagle3`` / ``mtp`` with a head built from the target
    (``sim.kinds.drafters``, exactly as a scenario builds it; ``draft`` must be None);
    ``medusa`` with ``heads`` Medusa heads (the deepest draft the table tries);
    ``ngram`` / ``suffix`` draft on the CPU (``Pair.draft`` None: no GPU time)."""
    from hardware.draft import check_same_vocab
    from sim.drafters import METHODS

    if method not in METHODS:
        raise UserError(f"--method: must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "draft_model" and draft is None:
        raise UserError("--draft: required with --method draft_model (a catalog model id)")
    if method != "draft_model" and draft is not None:
        raise UserError(f"--draft {draft}: not used with --method {method} (its drafter is "
                        "built from the target); drop --draft")
    cat = load_catalog(list(catalog) if catalog else None)
    g = cat.gpu(gpu)
    cat.framework(framework)  # an unknown framework lists the known ones
    how = {"timing": timing, "framework": framework}
    t = CostModel(Deployment(cat.model(target).servable("--target"), g, tp=tp,
                             weight_bits=weight_bits,
                             kv_bits=kv_bits, compute_dtype=compute_dtype, **how), cat)
    make_cost = DraftCosts(cat, g, draft_weight_bits, kv_bits, compute_dtype, timing,
                           framework)
    spec = None
    if method == "draft_model":
        spec = cat.model(draft).servable("--draft")
        check_same_vocab(t.dep.model, spec)
    return Pair(t, drafter_setup(method, t, spec, make_cost, placement, heads),
                for_cost(t, method))


def drafter_setup(method: str, target: CostModel, draft_spec, make_cost,
                  placement: str = "colocated", heads: int | None = None) -> DraftSetup | None:
    """The ``DraftSetup`` that drafts for ``target`` by ``method`` (None for a CPU drafter),
    built as a scenario builds it: ``draft_spec`` the catalog model of ``draft_model``,
    ``make_cost(spec, tp)`` (with a ``catalog`` attribute) a drafting model's cost model;
    ``heads``: Medusa heads (the deepest draft a table tries; None: the drafter's default)."""
    from sim.drafters import CPU_METHODS
    from sim.scenario import DEFAULT_DRAFTERS

    if method in CPU_METHODS:
        return None
    default = DEFAULT_DRAFTERS[method]  # the method's drafter kind, with its defaults
    knobs = {"heads": heads} if method == "medusa" and heads else {}
    try:
        return type(default)(method=method, **knobs).build(target, draft_spec, make_cost,
                                                           placement).setup
    except ValueError as e:  # the drafter configs' own refusals (as in a scenario)
        raise UserError(f"--method {method}: {e}") from None


def _fits(pair: Pair, kv_tokens: int) -> bool:
    try:
        check_colocated_memory(pair.target, pair.draft, kv_tokens)
    except UserError:
        return False
    return True


def chain_grid(pair: Pair, alpha: float, batches: Sequence[int], contexts: Sequence[int],
               gamma_max: int = 8, progress: Callable[[int], None] | None = None
               ) -> pd.DataFrame:
    """One row per (batch, context): best γ (0 = do not speculate), its speedup, and the
    speedup of every γ = 1..gamma_max (columns ``speedup_g1`` ...). ``progress(k)``, if
    given, is told of each ``k`` cells finished."""
    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"--alpha: must be in [0, 1], got {alpha}")
    rows = []
    for b in batches:
        for ctx in contexts:
            table = chain_table(pair.target, pair.draft, b, ctx, alpha, gamma_max, pair.spec)
            best = best_chain(table)
            row = {"batch": b, "context": ctx, "best_gamma": best.gamma,
                   "best_speedup": best.speedup, "decode_s": table[0].decode_s,
                   "fits": _fits(pair, b * (ctx + gamma_max + 1))}
            row.update({f"speedup_g{r.gamma}": r.speedup for r in table})
            rows.append(row)
            if progress:
                progress(1)
    return pd.DataFrame(rows)


def parse_tree(template: str, widths: Sequence[int]) -> list[tuple[int, list[int]]]:
    """``'k,1,1,1'`` and widths (1, 3) -> [(1, [1,1,1,1]), (3, [3,1,1,1])]."""
    parts = [p.strip() for p in template.split(",")]
    if parts.count("k") != 1:
        raise UserError(f"--tree: mark exactly one level with k, e.g. k,1,1,1; got {template!r}")
    try:
        fixed = [0 if p == "k" else int(p) for p in parts]
    except ValueError:
        raise UserError(f"--tree: levels must be integers or k, got {template!r}") from None
    if any(f < 1 for p, f in zip(parts, fixed, strict=True) if p != "k"):
        raise UserError(f"--tree: widths must be >= 1, got {template!r}")
    return [(w, [w if p == "k" else f for p, f in zip(parts, fixed, strict=True)])
            for w in widths]


def tree_grid(pair: Pair, alpha: float, template: str, widths: Sequence[int],
              batches: Sequence[int], context: int, theta: float = 1.0,
              tokens_per_verify: Sequence[float] | None = None,
              progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """One row per (width, batch): the tree's nodes, tokens per verify, speedup, and whether
    it is the best width at that batch (``best``; none is best when nothing beats 1).
    ``progress(k)``, if given, is told of each ``k`` cells finished."""
    trees = parse_tree(template, widths)
    if tokens_per_verify is None:
        tokens = [expected_iid(alpha, np.asarray(w, dtype=np.int64), PowerCoverage(theta))
                  for _, w in trees]
    else:
        tokens = list(tokens_per_verify)
    rows = []
    for b in batches:
        table = tree_table(pair.target, pair.draft, b, context, trees, tokens, pair.spec)
        best = best_tree(table)
        new_max = max(tree_nodes(w) for _, w in trees)
        fits = _fits(pair, b * (context + new_max))
        for r in table:
            rows.append({"width": r.width, "batch": b, "context": context,
                         "tree": ",".join(map(str, r.tree)), "nodes": r.nodes,
                         "tokens_per_verify": r.tokens_per_verify, "verify_ratio": r.verify_ratio,
                         "speedup": r.speedup, "best": r.width == best.width, "fits": fits})
        if progress:
            progress(len(table))
    return pd.DataFrame(rows)


def simulate_grid(target: str, draft: str | None, gpu: str, alpha: float,
                  batches: Sequence[int], contexts: Sequence[int], gamma_max: int = 4,
                  tp: int = 1, output_tokens: int = 64, waves: int = 1, seed: int = 0,
                  timing: str = "auto", framework: str = "vllm",
                  compute_dtype: str | None = None, method: str = "draft_model",
                  progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """The engine's closed-loop version of ``chain_grid`` (same columns, plus
    ``throughput_speedup``); ``waves`` × batch requests per cell.

    ``best_speedup`` and ``speedup_g<γ>`` are mean-TPOT ratios (decoding only), comparable
    with the analytic grid. ``throughput_speedup`` is output tokens/s over the whole run,
    the wave's prefill included (the draft prefills the prompts too), so with long contexts
    and short outputs it can sit below 1× while the decode speedup is well above it.
    ``progress(k)``, if given, is told of each ``k`` cells finished.
    """
    from sim.drafters import CPU_METHODS

    pair = make_pair(target, draft, gpu, tp=tp, timing=timing, framework=framework,
                     compute_dtype=compute_dtype, method=method, heads=gamma_max)
    models = {"target": target, "method": method, "draft": draft}
    # a CPU drafter proposes on every step, as the analytic grid assumes
    lookup = {"drafter": {"method": method, "proposal_rate": 1.0}} \
        if method in CPU_METHODS else {}
    if method == "medusa":  # one head per position of the deepest γ tried
        lookup = {"drafter": {"method": method, "heads": gamma_max}}
    bits = {} if compute_dtype != "fp8" else {"weight_bits": 8, "compute_dtype": "fp8"}
    rows = []
    for b in batches:
        for ctx in contexts:
            doc = {
                "name": f"grid-b{b}-c{ctx}",
                "models": models,
                "deployment": {"gpu": gpu, "tp": tp, "timing": timing,
                               "framework": framework, **bits},
                # One prefill pass for the whole batch, then pure decoding at concurrency b.
                "scheduler": {"max_num_seqs": b, "chunked_prefill": False,
                              "max_batched_tokens":
                                  b * (max(ctx, 1) + output_tokens + gamma_max + 1)},
                "workload": {"arrivals": "offline",
                             "prompt": {"kind": "fixed", "tokens": max(ctx, 1)},
                             "output": {"kind": "fixed", "tokens": output_tokens}},
                "acceptance": {"kind": "iid", "alpha": alpha},
                "variants": [{"name": "none", "policy": {"kind": "none"}}]
                + [{"name": f"g{g}", "policy": {"kind": "fixed", "gamma": g}, **lookup}
                   for g in range(1, gamma_max + 1)],
                "run": {"requests": waves * b, "seed": seed},
            }
            try:
                result = run_scenario(validate(doc, f"grid cell batch {b} context {ctx}"),
                                      iteration_rows=False)  # summaries only
            except UserError:
                # Does not fit the GPU (the engine refuses it): an empty cell.
                rows.append({"batch": b, "context": ctx, "best_gamma": np.nan,
                             "best_speedup": np.nan, "fits": False})
                if progress:
                    progress(1)
                continue
            s = {x["name"]: x for x in result.summaries}
            speed = {g: s[f"g{g}"]["speedup_vs_none"] for g in range(1, gamma_max + 1)}
            g_best = max(speed, key=lambda g: (speed[g], -g))
            best = (g_best, speed[g_best]) if speed[g_best] > 1.0 else (0, 1.0)
            row = {"batch": b, "context": ctx, "best_gamma": best[0], "best_speedup": best[1],
                   "throughput_speedup": (s[f"g{g_best}"]["throughput_tokens_per_s"]
                                          / s["none"]["throughput_tokens_per_s"]),
                   "fits": _fits(pair, b * (ctx + output_tokens + gamma_max + 1))}
            row.update({f"speedup_g{g}": v for g, v in speed.items()})
            rows.append(row)
            if progress:
                progress(1)
    return pd.DataFrame(rows)
