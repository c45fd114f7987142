"""The engine with the real cost model: pricing agrees with hardware/, and the batch-1
latency ratio (speculation vs none) matches the analytic hardware speedup."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.draft import (
    DraftSetup,
    chain_draft_seconds,
    tree_attended_keys,
    tree_draft_seconds,
)
from hardware.speedup import chain_table
from sim.policies import FixedGamma
from sim.pricing import IterationPricer
from sim.runner import simulate
from tests.sim.fakes import setup, table

EMPTY = np.zeros(0, dtype=np.int64)


@pytest.fixture(scope="module")
def models():
    cat = load_catalog()
    gpu = cat.gpu("h100")
    target = CostModel(Deployment(model=cat.model("llama-3-8b"), gpu=gpu), cat)
    draft = CostModel(Deployment(model=cat.model("llama-3.2-1b"), gpu=gpu), cat)
    return target, DraftSetup.colocated_with(draft, target)


@pytest.mark.parametrize("row", [[1, 1, 1, 1], [2, 2, 1], [1, 1, 3, 1, 1, 1, 1, 1]])
def test_iteration_price_matches_hardware(models, row):
    target, draft = models
    ctx = np.array([100, 2000, 513, 77], dtype=np.int64)
    row = np.array(row, dtype=np.int64)
    draft_s, verify_s, bound = IterationPricer(target, draft).price(row, ctx, EMPTY, EMPTY)
    nodes = int(np.cumprod(row).sum())
    keys = None if (row == 1).all() else tree_attended_keys(row.tolist(), ctx)
    assert verify_s == pytest.approx(
        target.pass_seconds(np.full(4, 1 + nodes), ctx, keys), rel=1e-12)
    want = (chain_draft_seconds(draft, len(row), ctx) if (row == 1).all()
            else tree_draft_seconds(draft, row.tolist(), ctx))
    assert draft_s == pytest.approx(want, rel=1e-12)
    assert bound in ("compute", "memory")


def test_prefill_chunks_ride_in_the_target_pass_and_the_first_draft_pass(models):
    target, draft = models
    ctx, row = np.array([1000]), np.array([1, 1])
    pre_ctx, chunk = np.array([0, 512]), np.array([512, 300])
    draft_s, verify_s, _ = IterationPricer(target, draft).price(row, ctx, pre_ctx, chunk)
    assert verify_s == pytest.approx(
        target.pass_seconds(np.array([3, 512, 300]), np.array([1000, 0, 512])), rel=1e-12)
    first = draft.cost.pass_seconds(np.array([1, 512, 300]), np.array([1000, 0, 512]))
    second = draft.cost.pass_seconds(np.array([1]), np.array([1001]))
    assert draft_s == pytest.approx(first + second, rel=1e-12)


def test_batch1_latency_ratio_matches_the_analytic_hardware_speedup(models):
    from workloads import IIDAcceptance

    target, draft = models
    alpha, gamma, prompt, output, n = 0.8, 4, 1024, 1200, 8
    arrivals = np.arange(n) * 1e4  # one request at a time: batch 1
    tab = table(arrivals, [prompt] * n, [output] * n)

    def tpot(policy, d):
        s = setup(tab, policy=policy, acceptance=IIDAcceptance(alpha), blocks=10_000,
                  max_batched_tokens=2048, chunked=True, chunk=2048, seed=4)
        s = s.__class__(**{**s.__dict__, "target_cost": target, "draft": d})
        res = simulate(s)
        return np.mean([(r.finished_at - r.first_token_at) / (r.output_tokens - 1)
                        for r in res.requests])

    from sim.policies import NoSpeculation

    measured = tpot(NoSpeculation, None) / tpot(lambda: FixedGamma(gamma), draft)
    mid = prompt + output // 2  # the context midway through decoding
    analytic = chain_table(target, draft, 1, mid, alpha, gamma)[gamma - 1].speedup
    assert measured == pytest.approx(analytic, rel=0.02)


@pytest.mark.parametrize("replicas", [1, 2])
def test_per_sequence_pricing_agrees_with_the_uniform_path_and_hardware(models, replicas):
    target, draft = models
    draft = DraftSetup(draft.cost, "colocated", replicas)
    pricer = IterationPricer(target, draft)
    ctx = np.array([100, 2000, 513, 77], dtype=np.int64)
    row = np.array([1, 1, 1, 0])
    same = pricer.price(np.tile(row, (4, 1)), ctx, EMPTY, EMPTY)
    assert same == pytest.approx(pricer.price(row, ctx, EMPTY, EMPTY))
    gammas = np.array([3, 0, 1, 2])
    widths = (np.arange(3) < gammas[:, None]).astype(np.int64)
    draft_s, verify_s, _ = pricer.price(widths, ctx, EMPTY, EMPTY)
    assert draft_s == pytest.approx(chain_draft_seconds(draft, gammas, ctx), rel=1e-12)
    assert verify_s == pytest.approx(target.pass_seconds(1 + gammas, ctx), rel=1e-12)
    # the draft of the γ = 0 sequence ingesting its token (draft_sync every_step): the
    # passes sim.draft_pricing.chain_rows_passes lists, which the compiled walk prices too
    from sim.draft_pricing import per_sequence_seconds

    idle = (gammas == 0).astype(np.int64)
    ones = np.ones(len(ctx), dtype=np.int64)
    if replicas == 1:  # pass 0 feeds every sequence, pass j those deeper than j
        by_hand = sum(draft.cost.pass_seconds(ones[gammas > j], (ctx + j)[gammas > j])
                      for j in range(1, 3)) + draft.cost.pass_seconds(ones, ctx)
    else:  # each replica's chains, then the ingest as a pass of its own
        by_hand = chain_draft_seconds(draft, gammas, ctx) + draft.cost.pass_seconds(
            ones[gammas == 0], ctx[gammas == 0])
    got = per_sequence_seconds(draft, widths, ctx, EMPTY, EMPTY, sync=idle)
    assert got == pytest.approx(by_hand, rel=1e-12)


def test_a_tree_verify_is_priced_under_the_tree_mask(models):
    # 256 sequences verifying <4,4,2> (53 tokens each, 13.6k in the pass) at 4k context:
    # compute-bound, so the attended keys matter. A node sees its context, its ancestors
    # and itself (SpecInfer's mask), not the 53·54/2 keys of a causal run of 53 tokens.
    target, draft = models
    n, row = 256, np.array([4, 4, 2], dtype=np.int64)
    ctx = np.full(n, 4000, dtype=np.int64)
    new = np.full(n, 53)
    pricer = IterationPricer(target, draft)
    draft_s, verify_s, bound = pricer.price(row, ctx, EMPTY, EMPTY)
    tree = target.pass_cost(new, ctx, tree_attended_keys(row.tolist(), ctx))
    assert bound == tree.bound == "compute"
    assert verify_s == pytest.approx(tree.seconds, rel=1e-12)
    assert verify_s < target.pass_seconds(new, ctx) * (1 - 1e-4)  # causal: more keys
    assert draft_s == pytest.approx(tree_draft_seconds(draft, row.tolist(), ctx), rel=1e-12)
    # the per-sequence path and the pipeline path price it the same way
    per_seq = pricer.price(np.tile(row, (n, 1)), ctx, EMPTY, EMPTY)
    assert per_seq[:2] == pytest.approx((draft_s, verify_s), rel=1e-12)
    assert per_seq[2] == bound
    _, cost = pricer.price_stages(row, ctx, EMPTY, EMPTY)
    assert cost.seconds == pytest.approx(verify_s, rel=1e-12)
