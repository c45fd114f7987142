"""``sim.log.IterationLog``: the iteration rows kept as one float64 table give exactly the
records a list of tuples gave, across growth, with every bound label and none."""

from __future__ import annotations

import numpy as np

from sim.log import IterationLog
from sim.records import IterationRecord, Records


def _rows(n: int, rng: np.random.Generator) -> list[tuple]:
    bounds = ["memory", "compute", "", "comm", "host"]
    return [(int(rng.integers(0, 4)), float(rng.random() * 1e3), float(rng.random()),
             int(rng.integers(1, 512)), int(rng.integers(0, 512)), int(rng.integers(0, 8192)),
             int(rng.integers(0, 4096)), int(rng.integers(0, 2048)), int(rng.integers(0, 2048)),
             int(rng.integers(0, 2048)), float(rng.random() * 1e-2), float(rng.random()),
             bounds[int(rng.integers(0, len(bounds)))], int(rng.integers(0, 10**6)))
            for _ in range(n)]


def test_the_table_gives_the_records_the_tuples_gave_across_growth():
    rows = _rows(2500, np.random.default_rng(0))
    log = IterationLog(capacity=4)  # grows 4 -> 8 -> ... -> 4096
    for r in rows:
        log.append(*r)
    got, want = log.records(), Records.from_rows(IterationRecord, rows)
    assert len(log) == 2500 and got == want
    for name, col in got.columns.items():
        assert col.dtype == want.columns[name].dtype, name
        assert col.tolist() == want.columns[name].tolist(), name  # exact, value by value
    # big counts stay exact (float64 holds integers exactly up to 2^53)
    log.append(*rows[0][:5], 2**52 + 1, *rows[0][6:])
    assert log.records().column("prefill_tokens")[-1] == 2**52 + 1


def test_an_empty_log_gives_empty_typed_columns():
    got = IterationLog().records()
    assert len(got) == 0
    assert got.column("bound").dtype == object and got.column("replica").dtype == np.int64


def test_rows_added_at_once_are_the_rows_added_one_by_one():
    rng = np.random.default_rng(2)
    one, many = IterationLog(capacity=4), IterationLog(capacity=4)  # both must grow
    one.append(0, 0.5, 0.1, 3, 3, 10, 3, 0, 0, 4, 0.0, 0.1, "memory", 7)
    many.append(0, 0.5, 0.1, 3, 3, 10, 3, 0, 0, 4, 0.0, 0.1, "memory", 7)
    for k in (2, 5, 11):
        ends = 0.6 + np.cumsum(rng.random(k) * 0.01)
        starts = np.concatenate(([ends[0] - 0.004], ends[:-1]))
        verify = ends - starts
        bounds = [str(b) for b in rng.choice(["memory", "compute", "comm"], k)]
        used = rng.integers(0, 100, k)
        for j in range(k):
            one.append(1, float(starts[j]), float(ends[j]) - float(starts[j]), 5, 5, 0, 5, 0,
                       0, 5, 0.0, float(verify[j]), bounds[j], int(used[j]))
        many.extend(1, starts, ends, 5, 5, 0, 5, 0, 0, 5, 0.0, verify, bounds,
                    used.astype(np.float64))
    a, b = one.records(), many.records()
    for col in a.columns:
        assert np.array_equal(a.column(col), b.column(col)), col
    assert len(a) == 1 + 2 + 5 + 11
