"""SpecInfer's claims (lecture §6.6): distributed, offloaded, tree vs sequence, Table 2.

Setups as the paper states them (AWS g5.12xlarge: 4 × A10 24 GB per node, PCIe inside a
node, 100 Gb/s Ethernet between nodes, FP16, batch 1–16, up to 128 new tokens, tree
⟨1,1,3,1,1,1,1,1⟩), one scenario file each under ``scenarios/claims/``. Every number comes
from the engine (one replica at fixed concurrency: ``max_num_seqs`` = batch, all requests
queued at t = 0) except the "analytic" checks, which price one iteration with the cost
model at the mean context and the paper's tokens per verify (``hardware.speedup``).

Acceptance: SpecInfer publishes tokens per verify by tree width for LLaMA-7B/LLaMA-68M
(Table 2, Alpaca, depth-8 trees expanded at level 3). Each simulated tree is run with the
i.i.d. model whose α is solved (bisection on the exact expectation, θ = 1,
``workloads.calibrate_iid``) so that *this* tree's expected tokens per verify equal Table 2's
entry for its width and decoding mode — one α per (width, mode), no assumed α. The width-1
tree is the depth-8 chain, i.e. sequence-based speculation with the same small model. The
two-parameter fit (one α and a top-k coverage exponent θ for all widths,
``workloads.fit_specinfer_table2``) is reported separately as a check of whether one simple
acceptance model explains the whole table.
"""

from __future__ import annotations

from sim.studies.claims import Check, ClaimRow, point, span
from sim.studies.claims_runs import claims_scenario, cost_pair, policy_yaml, simulate_variant
from workloads.calibration import SPECINFER_TABLE2, fit_specinfer_table2, specinfer_tree

__all__ = ["DISTRIBUTED", "OFFLOAD", "speedup_grid", "distributed_claims", "offload_claims",
           "table2_claims"]

# (label, scenario file, where it runs)
DISTRIBUTED = (
    ("LLaMA-7B 1 GPU", "specinfer-llama-7b.yaml", "one node"),
    ("OPT-30B TP4", "specinfer-opt-30b-tp4.yaml", "one node"),
    ("LLaMA-65B TP4×PP2", "specinfer-llama-65b-tp4-pp2.yaml", "two nodes"),
)
OFFLOAD = (
    ("OPT-13B offloaded", "specinfer-offload-opt-13b.yaml"),
    ("OPT-30B offloaded", "specinfer-offload-opt-30b.yaml"),
)
MODES = ("greedy", "stochastic")
PAPER_WIDTH = 3  # ⟨1,1,3,1,1,1,1,1⟩

_COMMON = (
    "baseline = the same deployment decoding one token per step (the paper compares with "
    "vLLM/TGI/FasterTransformer and its own incremental decoding, which it reports on par); "
    "prompts 128 tokens, 128 new tokens; per-token latency = mean TPOT; acceptance "
    "calibrated per tree width to Table 2 (LLaMA-68M→LLaMA-7B, also used for the OPT pair); "
    "A10 roofline with the lecture's default η (0.7/0.8) and 0.5 ms per pass, uncalibrated "
    "(AWS g5 actually carries the slower-compute A10G). Stochastic speedups sit below greedy "
    "ones in proportion to Table 2's tokens per verify at width 3 (2.26 vs 3.21)"
)


# Why the large-batch points fall below the paper's range (both setups): the A10's ridge
# is 125 TFLOP/s × 0.7 over 600 GB/s × 0.8 ≈ 182 FLOP/byte, i.e. ~180 tokens per pass at
# 2 FLOPs and 2 bytes per parameter.
_BATCH_GAP = (
    "The gap at batch 16: 16 × 21 tree nodes = 336 tokens per verify pass exceed the A10's "
    "ridge (~180 tokens), so the tree verify turns compute-bound while plain decoding stays "
    "memory-bound."
)


def _sizes(quick: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(batches, widths) to run: the same with ``quick`` (the verdicts span them all)."""
    return (1, 2, 4, 8, 16), (1, 2, 3, 4, 5)


def _requests(batch: int, quick: bool) -> int:
    # Enough verifies per point that the tokens-per-verify noise stays ~2% (full runs).
    # --quick: half of that (2 requests per point flipped the Table 2 replay's verdict).
    return max(16, 4 * batch) if quick else max(32, 8 * batch)


def speedup_grid(file: str, batches, widths, modes=MODES, quick: bool = False) -> dict:
    """Simulated speedups ``{(mode, width, batch): (speedup, tokens per verify)}``.

    Speedup = mean TPOT without speculation / mean TPOT with the tree, same requests.
    """
    path = claims_scenario(file)
    out = {}
    for b in batches:
        base = [f"scheduler.max_num_seqs={b}", f"run.requests={_requests(b, quick)}"]
        none = simulate_variant(path, [*base, f"variants={policy_yaml(None)}"])
        for mode in modes:
            for w in widths:
                shape = [int(k) for k in specinfer_tree(w)]
                pt = simulate_variant(path, [
                    *base,
                    f"acceptance.mean_tokens={SPECINFER_TABLE2[mode][w]}",
                    f"acceptance.expansion={shape}",
                    f"variants={policy_yaml(shape)}",
                ])
                out[mode, w, b] = (none.tpot_mean_s / pt.tpot_mean_s, pt.tokens_per_verify)
    return out


def _analytic_best_width(file: str, batch: int, mode: str, widths, gpu: str | None = None
                         ) -> int:
    """Fastest width by the cost model at the mean context (0 if none beats decoding)."""
    from hardware.speedup import best_tree, tree_table

    overrides = [f"scheduler.max_num_seqs={batch}"]
    if gpu is not None:
        overrides.append(f"deployment.gpu={gpu}")
    target, draft = cost_pair(claims_scenario(file), overrides)
    trees = [(w, [int(k) for k in specinfer_tree(w)]) for w in widths]
    rows = tree_table(target, draft, batch, 128 + 64, trees,
                      [SPECINFER_TABLE2[mode][w] for w in widths])
    return best_tree(rows).width


def _width_checks(batches, widths, gpu: str | None) -> list[Check]:
    """Analytic best width per setup, mode and batch against the paper's 4–5 / 2–3."""
    tag = "" if gpu is None else f" {gpu.upper()}"
    return [
        Check(f"analytic{tag} {label} B={b} {mode}",
              float(_analytic_best_width(file, b, mode, widths, gpu)),
              *((4, 5) if b <= 2 else (2, 3)))
        for label, file, _ in DISTRIBUTED for mode in MODES for b in batches
    ]


def distributed_claims(quick: bool = False) -> list[ClaimRow]:
    """One node 1.5–2.5×, two nodes 2.4–2.8×, tree/sequence 1.2–1.5×, batch trends."""
    batches, widths = _sizes(quick)
    # The width sweep is calibrated for the Table 2 pair only; the others run width 1 and 3.
    grids = {label: speedup_grid(file, batches, widths if i == 0 else (1, PAPER_WIDTH),
                                 quick=quick)
             for i, (label, file, _) in enumerate(DISTRIBUTED)}
    where = {label: node for label, _, node in DISTRIBUTED}

    def speedups(node: str, low: float, high: float) -> tuple[Check, ...]:
        return tuple(
            Check(f"{label} B={b} {mode}", grids[label][mode, PAPER_WIDTH, b][0], low, high)
            for label in grids if where[label] == node for mode in MODES for b in batches
        )

    one, two = speedups("one node", 1.5, 2.5), speedups("two nodes", 2.4, 2.8)
    ratio = tuple(
        Check(f"{label} B={b} {mode}",
              g[mode, PAPER_WIDTH, b][0] / g[mode, 1, b][0], 1.2, 1.5)
        for label, g in grids.items() for mode in MODES for b in batches
    )
    shrink = tuple(
        Check(f"{label} {mode}: S(B={batches[-1]})/S(B={batches[0]})",
              g[mode, PAPER_WIDTH, batches[-1]][0] / g[mode, PAPER_WIDTH, batches[0]][0],
              0.0, 1.0)
        for label, g in grids.items() for mode in MODES
    )
    llama = grids[DISTRIBUTED[0][0]]
    best = [
        Check(f"simulated {DISTRIBUTED[0][0]} B={b} {mode}",
              float(max(widths, key=lambda w, m=mode, bb=b: llama[m, w, bb][0])),
              *((4, 5) if b <= 2 else (2, 3)))
        for mode in MODES for b in batches
    ] + _width_checks(batches, widths, None)
    best_a10g = _width_checks(batches, widths, "a10g")
    tree = "⟨1,1,3,1,1,1,1,1⟩"

    def series(node: str, band: tuple[float, float]) -> dict:
        return {"band": band, "logx": True, "series": {
            f"{label} {mode}": [(b, grids[label][mode, PAPER_WIDTH, b][0]) for b in batches]
            for label in grids if where[label] == node for mode in MODES}}

    return [
        ClaimRow(
            "specinfer-one-node",
            f"SpecInfer one node (LLaMA-7B, OPT-30B TP4): per-token latency {tree} vs "
            "incremental decoding",
            "1.5–2.5×", span(one), one,
            f"{_COMMON}. {_BATCH_GAP}",
            "simulated", series("one node", (1.5, 2.5)),
        ),
        ClaimRow(
            "specinfer-two-nodes",
            f"SpecInfer two nodes (LLaMA-65B TP4×PP2): per-token latency {tree}",
            "2.4–2.8×", span(two), two,
            f"{_COMMON}. Pipeline stages run one after the other per pass (no micro-batch "
            "pipelining) plus one activation hop over 100 Gb/s Ethernet; TP all-reduces over "
            f"PCIe 4.0 (3 µs step latency assumed). {_BATCH_GAP}",
            "simulated", series("two nodes", (2.4, 2.8)),
        ),
        ClaimRow(
            "specinfer-tree-vs-sequence",
            f"Tree {tree} over sequence speculation (depth-8 chain, same small model)",
            "1.2–1.5×", span(ratio), ratio,
            "Table 2 bounds the tokens gain: "
            + ", ".join(f"{t[PAPER_WIDTH]:.2f}/{t[1]:.2f} = {t[PAPER_WIDTH] / t[1]:.2f} {m}"
                        for m, t in SPECINFER_TABLE2.items())
            + "; the tree's 21-node verify costs more than the chain's 9 as the batch "
            f"grows. {_COMMON}.",
            "simulated",
        ),
        ClaimRow(
            "specinfer-batch-trend",
            "The gain over incremental decoding shrinks as the batch grows",
            "S(16)/S(1) ≤ 1", span(shrink, unit=""), shrink,
            f"Derived number: speedup at the largest over the smallest batch. {_COMMON}.",
            "simulated",
        ),
        ClaimRow(
            "specinfer-width-by-batch",
            "Best tree width: wide (4–5) at batch 1–2, width 2–3 at batch ≥ 4",
            "4–5 / 2–3", span(best, fmt="{:.0f}", unit=""), tuple(best),
            "Widths 1–5 of ⟨1,1,w,1,1,1,1,1⟩ with Table 2's tokens per verify for every "
            "pair; 'wide' read as width ≥ 4. Simulated (LLaMA-7B only) picks can flip "
            "between near-equal widths by sampling noise; analytic = cost model at context "
            "192 with Table 2's exact means. Where the verify stays memory-bound (batch × "
            "nodes below the A10's ~180-token ridge) the widest tree wins.",
            "simulated + analytic",
        ),
        ClaimRow(
            "specinfer-width-by-batch-a10g",
            "Same, on the A10G that AWS g5 instances actually carry (70 vs 125 TFLOP/s)",
            "4–5 / 2–3", span(best_a10g, fmt="{:.0f}", unit=""), tuple(best_a10g),
            "Sensitivity of the row above to the GPU's compute peak: the A10G's ridge is "
            "~100 tokens, so trees turn compute-bound at a smaller batch. Analytic only.",
            "analytic",
        ),
        ClaimRow(
            "specinfer-tree-parallel-decoding",
            "Tree-parallel decoding vs decoding each tree sequence separately: on par at "
            "small batch, up to 1.8× at large batch",
            "≤ 1.8×", "n/a", (Check("kernel comparison", None, 1.0, 1.8),),
            "Not modelled: SpecSim prices a tree verify as one masked pass over all nodes; "
            "it has no cost for the per-sequence kernel alternative the paper compares with.",
            "none",
        ),
    ]


def offload_claims(quick: bool = False) -> list[ClaimRow]:
    """Offloading: 2.6–3.5× lower per-token latency than non-speculative offloading."""
    batches, _ = _sizes(quick)
    checks, curves = [], {}
    for label, file in OFFLOAD:
        g = speedup_grid(file, batches, (PAPER_WIDTH,), quick=quick)
        checks += [Check(f"{label} B={b} {mode}", g[mode, PAPER_WIDTH, b][0], 2.6, 3.5)
                   for mode in MODES for b in batches]
        curves.update({f"{label} {mode}": [(b, g[mode, PAPER_WIDTH, b][0]) for b in batches]
                       for mode in MODES})
    return [ClaimRow(
        "specinfer-offload",
        "SpecInfer offloading (OPT-13B/30B, one A10, weights in host memory): per-token "
        "latency vs non-speculative offloaded decoding",
        "2.6–3.5×", span(checks), tuple(checks),
        "Each pass streams all target weights over PCIe 4.0 (31.5 GB/s), overlapped with "
        "compute (FlexGen style), so the speedup ≈ tokens per verify at width 3 (Table 2: "
        "3.21 greedy, 2.26 stochastic); the acceptance of OPT-125M→OPT-13B/30B is not "
        "published and is assumed equal to LLaMA-68M→LLaMA-7B. Baseline is the same "
        "offloaded engine without speculation, not FlexGen's batched schedule.",
        "simulated", {"band": (2.6, 3.5), "logx": True, "series": curves},
    )]


def table2_claims(quick: bool = False) -> list[ClaimRow]:
    """How well the acceptance model explains Table 2, and the engine's replay of it."""
    rows = []
    for mode in MODES:
        fit = fit_specinfer_table2(mode)
        checks = tuple(
            Check(f"width {w}", p, *point(m))
            for w, m, p in zip(fit.widths, fit.measured, fit.predicted, strict=True)
        )
        rows.append(ClaimRow(
            f"specinfer-table2-{mode}",
            f"Table 2 tokens per verify, {mode}, widths 1–5, by ONE i.i.d. α + top-k "
            "coverage exponent θ",
            ", ".join(f"{m:.2f}" for m in fit.measured),
            ", ".join(f"{p:.2f}" for p in fit.predicted), checks,
            f"Least-squares fit α = {fit.alpha:.3f}, θ = {fit.theta:.2f} "
            f"(level coverage 1 − (1 − α)^(k^θ)), RMSE {fit.rmse:.3f} tokens. One α and θ "
            "cannot follow a table whose first step (width 1 → 2) is much larger than the "
            "rest, as the stochastic one's is. The simulations do not use this fit: they "
            "calibrate α per width so each tree matches exactly.",
            "analytic",
        ))
    batches = (1,)
    _, widths = _sizes(quick)
    g = speedup_grid(DISTRIBUTED[0][1], batches, widths, quick=quick)
    replay = tuple(
        Check(f"width {w} {mode}", g[mode, w, 1][1], *point(SPECINFER_TABLE2[mode][w], 0.05))
        for mode in MODES for w in widths
    )
    rows.append(ClaimRow(
        "specinfer-table2-replay",
        "Engine's measured tokens per verify with the per-width calibration (LLaMA-7B, B=1)",
        "Table 2 ± 5%", span(replay, unit=""), replay,
        "Checks the calibration end to end: α solved per width so the exact mean equals "
        "Table 2; the measured mean over a finite run differs by sampling noise and by the "
        "128-token cap at the end of each request.",
        "simulated",
    ))
    return rows
