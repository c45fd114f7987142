"""The conformance workloads themselves, without vLLM: the prompt token ids the vLLM side
gets share exactly the blocks SpecSim's keys say they share, and SpecSim runs every workload
to the end on the step time line both sides assume."""

from __future__ import annotations

import pytest

from tests.conformance.cases import sync_workloads
from tests.conformance.specsim_side import run_specsim, specsim_setup
from tests.conformance.workload import BLOCK, Workload

WORKLOADS = sync_workloads()  # (async copies: the same requests, another time line)


@pytest.mark.parametrize("w", [w for w in WORKLOADS if w.prefix_caching], ids=lambda w: w.name)
def test_token_ids_share_exactly_the_keyed_blocks(w):
    # vLLM's block hash chains a block's tokens to its parent's: block j of two prompts has
    # the same hash iff their first (j + 1) * BLOCK tokens agree; SpecSim's keys must agree
    # on the same blocks
    tab = specsim_setup(w).table
    keys = [tab.block_keys[tab.block_starts[i]:tab.block_starts[i + 1]] for i in range(w.n)]
    ids = [w.prompt_ids(i) for i in range(w.n)]
    for a in range(w.n):
        assert len(ids[a]) == w.prompt[a]
        for b in range(a + 1, w.n):
            for j in range(min(len(keys[a]), len(keys[b]))):
                same = ids[a][:(j + 1) * BLOCK] == ids[b][:(j + 1) * BLOCK]
                assert same == (keys[a][j] == keys[b][j]), (w.name, a, b, j)


def test_every_workload_runs_in_specsim_a_second_a_step():
    # a step that schedules something takes 1 s, one that only preempts none, and an idle
    # replica wakes at an arrival: the time line the vLLM side is driven on
    for w in WORKLOADS:
        steps = run_specsim(w)
        assert steps and steps[0].at == w.arrival_at[0], w.name
        for s, nxt in zip(steps, steps[1:], strict=False):
            end = s.at + (1.0 if s.tokens else 0.0)
            assert nxt.at == end or (nxt.at > end and nxt.at in w.arrival_at), (w.name, s)


def test_a_workload_refuses_what_its_token_ids_cannot_hold():
    with pytest.raises(ValueError, match="under 1000 tokens"):
        Workload("long", arrival_at=(0.5,), prompt=(1000,), output=(1,))
