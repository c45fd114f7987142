"""The engine's shortcuts give the floats and records of the long way round.

``sim.decode_step`` forms a decode-only batch with a few array operations instead of the
full scheduler; ``IterationPricer.decode_chain_seconds`` prices every chain depth of an
iteration for the adaptive policy from one chain's passes. Both must give exactly what the
reference computes (the record-for-record comparisons over every shipped scenario are in
``tests/sim/test_golden.py``); here, the pieces.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.build import setups
from sim.loading import load_scenario, repo_root
from sim.policies import chain
from sim.pricing import IterationPricer

_EMPTY = np.zeros(0, dtype=np.int64)
_SHORT = ["workload.prompt.max_tokens=1024", "workload.output.max_tokens=512"]
DRAFTS = {  # one draft replica; one per GPU of a TP-4 target; heads in one pass; none
    "draft-model": ("default", []),
    "colocated-tp4": ("plan-llama70b", []),
    "medusa": ("default", ['models.target="vicuna-7b"', "models.draft=null", *_SHORT,
                           'variants=[{name: m, drafter: {method: medusa, heads: 5}, '
                           'policy: {kind: fixed, gamma: 4}}]']),
    "ngram": ("default", ['variants=[{name: n, drafter: {method: ngram, proposal_rate: 0.5}, '
                          'policy: {kind: fixed, gamma: 4}}]']),
    "paper-timing": ("default", ["deployment.timing=paper"]),
    "roofline-tree-draft": ("specinfer-tree", ["deployment.timing=roofline"]),
}


@pytest.mark.parametrize("case", sorted(DRAFTS))
def test_every_chain_depth_at_once_is_each_depth_priced_alone(case):
    name, sets = DRAFTS[case]
    sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml", ["run.requests=4", *sets])
    _, setup = setups(sc)[-1]
    pricer = IterationPricer(setup.target_cost, setup.draft, setup.record_bound)
    rng = np.random.default_rng(7)
    for n in (1, 3, 17, 64):
        ctx = rng.integers(1, 900, n).astype(np.int64)
        for depth in (1, 4, 7):
            alone = [sum(pricer.price(chain(g, depth), ctx, _EMPTY, _EMPTY, bound=False)[:2])
                     for g in range(depth + 1)]
            assert pricer.decode_chain_seconds(ctx, depth) == alone  # exactly, not approx
