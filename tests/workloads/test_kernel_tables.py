"""``AcceptanceModel.kernel_tables``: the contract a compiled engine draws by, one sequence
at a time, gives the depths ``draw`` gives for the whole batch, from the same generator,
and leaves the generator where ``draw`` leaves it."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.acceptance import (
    KERNEL_GEOMETRIC,
    KERNEL_LEVELS,
    KERNEL_RUNS,
    KERNEL_SAMPLED,
    IIDAcceptance,
    PositionalAcceptance,
)
from workloads.acceptance_trace import TraceAcceptance
from workloads.bursty import BurstyAcceptance
from workloads.coverage import PowerCoverage
from workloads.trace_file import load_trace


def _by_contract(tables, streams, positions, row, rng) -> np.ndarray:
    """The depths as the contract says, sequence after sequence (plain Python)."""
    kind, p, runs, ring, tape, table = tables
    depth = int((row > 0).sum())
    out = []
    for s, t in zip(streams.tolist(), positions.tolist(), strict=True):
        if kind == KERNEL_RUNS:
            acc = int(runs[(s + t) % tape])
        elif kind == KERNEL_GEOMETRIC:
            acc = int(rng.geometric(p)) - 1
        elif kind == KERNEL_SAMPLED:
            start, acc, run = (s + t) % tape, 0, True
            for j in range(len(row)):
                u = rng.random()
                if run and start + j < runs[start] and u < table[start + j, row[j]]:
                    acc += 1
                else:
                    run = False
        else:
            assert kind == KERNEL_LEVELS
            start, acc, run = (s + t) % tape, 0, True
            for j in range(len(row)):
                u = rng.random()
                if run and u < table[ring[start + j], row[j]]:
                    acc += 1
                else:
                    run = False
        out.append(min(acc, depth))
    return np.array(out, dtype=np.int64)


def _trace(name: str = "perturbed-0.1-greedy"):
    from sim.loading import repo_root

    return load_trace(repo_root() / "workloads" / "traces" / f"{name}.npz")


MODELS = {
    "iid": lambda rng: IIDAcceptance(0.7),
    "iid-theta": lambda rng: IIDAcceptance(0.55, PowerCoverage(0.7)),
    "iid-one": lambda rng: IIDAcceptance(1.0),
    "positional": lambda rng: PositionalAcceptance([0.9, 0.6, 0.75]),
    "bursty": lambda rng: BurstyAcceptance(0.95, 0.3, 40.0, 20.0, rng, tape_tokens=1 << 14),
    "trace": lambda rng: TraceAcceptance(_trace(), "greedy"),
    "trace-sampling": lambda rng: TraceAcceptance(_trace("perturbed-0.3-t0.5"), "sampling"),
}
ROWS = {"chain": [1, 1, 1, 1], "tree": [3, 2, 1], "deep": [1] * 7, "padded": [2, 1, 0, 0]}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("shape", sorted(ROWS))
def test_the_contract_gives_the_batch_draw(model, shape):
    m = MODELS[model](np.random.default_rng(1))
    row = np.array(ROWS[shape], dtype=np.int64)
    tables = m.kernel_tables(row)
    if model == "trace" and shape in ("tree", "padded"):  # greedy trees: draw only
        assert tables is None
        return
    assert tables is not None
    kind = tables[0]
    if model == "iid" and shape in ("chain", "deep"):
        assert kind == KERNEL_GEOMETRIC
    rng = np.random.default_rng(11)
    n = 300
    streams = m.new_streams(n, rng)
    positions = rng.integers(0, 500, n)
    widths = np.broadcast_to(row, (n, len(row)))  # as the engine passes a batch's shape
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(3):  # three verifies in a row: the generator stays in step
        got = m.draw(streams, positions, widths, a)
        want = _by_contract(tables, streams, positions, row, b)
        assert np.array_equal(got, want)
        positions = positions + got + 1
    assert a.bit_generator.state == b.bit_generator.state
    assert 0 < got.mean() < (row > 0).sum() or model in ("iid-one",)


def test_no_tables_past_their_width_or_depth_or_for_no_guess():
    wide, deep = np.array([17], dtype=np.int64), np.ones(65, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)  # a policy that never drafts (a ladder of γ 0)
    for m in (IIDAcceptance(0.5), PositionalAcceptance([0.5]),
              BurstyAcceptance(0.9, 0.3, 40.0, 20.0, np.random.default_rng(0), 1 << 14)):
        assert m.kernel_tables(deep) is None and m.kernel_tables(none) is None
        assert m.kernel_tables(wide) is None
    trace = TraceAcceptance(_trace(), "greedy")  # replayed runs: chains of any depth
    assert trace.kernel_tables(none) is None and trace.kernel_tables(wide) is None
    assert trace.kernel_tables(deep) is not None
    sampling = TraceAcceptance(_trace("perturbed-0.3-t0.5"), "sampling")  # any tree to its K
    assert sampling.kernel_tables(np.array([sampling.max_width, 1], np.int64)) is not None
    assert sampling.kernel_tables(np.array([sampling.max_width + 1], np.int64)) is None
    assert sampling.kernel_tables(none) is None
