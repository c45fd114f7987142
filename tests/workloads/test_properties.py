"""Hypothesis: every acceptance model returns 0 <= accepted <= depth for any batch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from workloads.acceptance import IIDAcceptance, PositionalAcceptance, depths
from workloads.acceptance_trace import TraceAcceptance
from workloads.bursty import BurstyAcceptance
from workloads.coverage import PowerCoverage
from workloads.task_mix import TaskMixAcceptance


def _trace():
    rng = np.random.default_rng(0)
    return SimpleNamespace(
        ranks=rng.integers(0, 4, 300),
        accept_prob=np.sort(rng.random((300, 5)), axis=1),
        sequence=np.repeat(np.arange(6), 50),
        meta={},
    )


MODELS = [
    IIDAcceptance(0.7, PowerCoverage(0.6)),
    IIDAcceptance(1.0),
    PositionalAcceptance([0.9, 0.5, 0.99]),
    PositionalAcceptance.from_marginals([0.9, 0.6, 0.1]),
    BurstyAcceptance(0.95, 0.3, 10, 20, np.random.default_rng(1), tape_tokens=5000),
    TraceAcceptance(_trace(), "greedy"),
    TraceAcceptance(_trace(), "sampling"),
]
MODELS.append(
    TaskMixAcceptance({"a": (1.0, MODELS[0]), "b": (2.0, MODELS[4]), "c": (1.0, MODELS[6])})
)


@st.composite
def batches(draw):
    b = draw(st.integers(1, 40))
    m = draw(st.integers(0, 12))
    depth = draw(hnp.arrays(np.int64, b, elements=st.integers(0, m)))
    k = draw(hnp.arrays(np.int64, (b, m), elements=st.integers(1, 5)))
    widths = np.where(np.arange(m) < depth[:, None], k, 0)
    positions = draw(hnp.arrays(np.int64, b, elements=st.integers(0, 10**6)))
    return widths, positions


@settings(max_examples=60, deadline=None)
@given(batch=batches(), which=st.integers(0, len(MODELS) - 1), seed=st.integers(0, 2**32 - 1))
def test_accepted_between_zero_and_depth(batch, which, seed):
    widths, positions = batch
    model = MODELS[which]
    rng = np.random.default_rng(seed)
    streams = model.new_streams(widths.shape[0], rng)
    a = model.accept(streams, positions, widths, rng)
    assert a.dtype == np.int64 and a.shape == (widths.shape[0],)
    assert np.all(a >= 0) and np.all(a <= depths(widths))


def test_draw_is_accept_without_the_checks():
    # The engine calls draw (no validation) on a read-only broadcast of one shape; it must
    # give exactly what accept gives for the same generator state, for every model.
    from tests.workloads.test_acceptance_trace import make_trace
    from workloads import (
        BurstyAcceptance,
        IIDAcceptance,
        PositionalAcceptance,
        TraceAcceptance,
    )
    from workloads.task_mix import TaskMixAcceptance

    models = [
        IIDAcceptance(0.7),
        PositionalAcceptance([0.9, 0.7, 0.5]),
        BurstyAcceptance(0.95, 0.3, 20, 20, np.random.default_rng(1)),
        TraceAcceptance(make_trace(), "greedy"),
        TraceAcceptance(make_trace(), "sampling"),
        TaskMixAcceptance({"a": (1.0, IIDAcceptance(0.5)), "b": (2.0, IIDAcceptance(0.9))}),
    ]
    n = 50
    for model in models:
        streams = model.new_streams(n, np.random.default_rng(2))
        positions = np.random.default_rng(3).integers(0, 200, n)
        for row in ([1, 1, 1, 1], [2, 1, 3], [0, 0]):
            w = np.broadcast_to(np.array(row, dtype=np.int64), (n, len(row)))
            a = model.accept(streams, positions, w, np.random.default_rng(4))
            d = model.draw(streams, positions, w, np.random.default_rng(4))
            assert np.array_equal(a, d), (model, row)
            assert ((0 <= d) & (d <= (w > 0).sum(axis=1))).all()
