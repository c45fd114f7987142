"""Routing across replicas, and KV capacity with the draft counted."""

import numpy as np
import pytest

from sim.router import Router
from sim.runner import simulate
from tests.sim.fakes import setup, table


class _Stub:
    def __init__(self):
        self.outstanding_requests = 0
        self.outstanding_tokens = 0
        self.got = []

    def submit(self, rid):
        self.got.append(rid)


def test_round_robin_takes_turns():
    reps = [_Stub(), _Stub(), _Stub()]
    router = Router(reps, "round_robin")
    for rid in range(7):
        router.submit(rid)
    assert [r.got for r in reps] == [[0, 3, 6], [1, 4], [2, 5]]


def test_least_loaded_routers_pick_the_lightest_replica_ties_to_lowest():
    reps = [_Stub(), _Stub(), _Stub()]
    reps[0].outstanding_requests, reps[1].outstanding_requests = 2, 1
    reps[0].outstanding_tokens, reps[1].outstanding_tokens, reps[2].outstanding_tokens = 5, 9, 9
    assert Router(reps, "least_requests").choose() == 2
    assert Router(reps, "least_tokens").choose() == 0
    reps[2].outstanding_requests = 1
    assert Router(reps, "least_requests").choose() == 1


@pytest.mark.parametrize("kind", ["round_robin", "least_requests", "least_tokens"])
def test_two_replicas_share_the_work_and_everything_finishes(kind):
    n = 40
    rng = np.random.default_rng(1)
    tab = table(np.sort(rng.uniform(0, 0.3, n)), rng.integers(1, 100, n), rng.integers(1, 50, n))
    res = simulate(setup(tab, replicas=2, router=kind, max_num_seqs=4, chunked=True))
    per = [sum(r.replica == i for r in res.requests) for i in (0, 1)]
    assert sum(per) == n and min(per) >= n // 4
    assert all(r.finished for r in res.requests)
    assert {it.replica for it in res.iterations} == {0, 1}


def test_a_colocated_draft_takes_kv_room_and_a_separate_one_does_not():
    from sim.build import cost_models
    from sim.loading import validate

    def blocks(**deployment):
        sc = validate({"deployment": deployment}, "test")
        return cost_models(sc, uses_draft=True)[2], cost_models(sc, uses_draft=False)[2]

    colocated, alone = blocks(draft_placement="colocated")
    separate, _ = blocks(draft_placement="separate")
    # Llama-3.2-1B weights (~2.5 GB) plus its KV (32 KB vs 128 KB per token) shrink the pool.
    assert colocated < alone and separate == alone
    assert colocated / alone == pytest.approx(0.75, abs=0.05)
