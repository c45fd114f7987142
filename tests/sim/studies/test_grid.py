"""sim.studies.grid: the lecture's §7 pattern, trees, and the simulated closed-loop grid."""

from __future__ import annotations

import pytest

from sim.studies.grid import chain_grid, make_pair, parse_tree, simulate_grid, tree_grid
from specdec.errors import UserError


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama-3-8b", "llama-3.2-1b", "h100", timing="paper")  # the lecture's


def test_chain_grid_columns(pair):
    g = chain_grid(pair, 0.8, [1, 256], [128, 1024], gamma_max=6)
    assert list(g.columns[:6]) == ["batch", "context", "best_gamma", "best_speedup",
                                   "decode_s", "fits"]
    assert [f"speedup_g{k}" for k in range(1, 7)] == list(g.columns[6:])
    row = g.iloc[0]
    assert row["best_speedup"] == max(row[f"speedup_g{k}"] for k in range(1, 7))


def test_tree_grid_iid_tokens_and_best(pair):
    g = tree_grid(pair, 0.8, "k,1,1,1", [1, 3], [1, 256], 1024)
    # Width 1 is a chain of 4: E(0.8, 4) = (1 - 0.8^5) / 0.2 = 3.3616 tokens per verify.
    w1 = g[(g["width"] == 1) & (g["batch"] == 1)].iloc[0]
    assert w1["tokens_per_verify"] == pytest.approx(3.3616, abs=1e-12)
    assert w1["nodes"] == 5 and w1["tree"] == "1,1,1,1"
    assert g.groupby("batch")["best"].sum().tolist() == [1, 1]
    # Small batch: the wider tree pays (verify is memory-bound); batch 256: the chain wins.
    assert g[(g["batch"] == 1) & g["best"]]["width"].item() == 3
    assert g[(g["batch"] == 256) & g["best"]]["width"].item() == 1


def test_parse_tree_rejects():
    assert parse_tree("1,k", [2]) == [(2, [1, 2])]
    for bad in ("1,1", "k,k", "k,x", "k,0"):
        with pytest.raises(UserError, match="--tree"):
            parse_tree(bad, [1])


def test_simulated_grid_agrees_with_analytic_at_small_batch():
    g = simulate_grid("llama-3-8b", "llama-3.2-1b", "h100", 0.8, [1, 256], [128], gamma_max=4,
                      timing="paper")
    small, big = g.iloc[0], g.iloc[1]
    # Batch 1: the analytic best is 1.74x; the simulated run (64 i.i.d. tokens, cut at the
    # request's end) lands within 10% of it.
    assert small["best_speedup"] == pytest.approx(1.74, rel=0.10)
    # Batch 256, context 128: γ = 4 loses, as in the analytic grid (0.73x).
    assert big["speedup_g4"] < 1.0
    assert big["best_gamma"] in (0, 1)
