"""``sim.log.IterationLog``: the iteration rows kept as one float64 table give exactly the
records a list of tuples gave, across growth, with every bound label and none."""

from __future__ import annotations

import mmap

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
    log = IterationLog(capacity=4)  # chunks of 4, 8, ..., 2048 rows
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
    # each must grow; ``coded`` gets its bounds as codes into names (-1: the last name)
    one, many, coded = IterationLog(capacity=4), IterationLog(capacity=4), IterationLog(4)
    names = ("compute", "memory", "comm", "")
    for log in (one, many, coded):
        log.append(0, 0.5, 0.1, 3, 3, 10, 3, 0, 0, 4, 0.0, 0.1, "memory", 7)
    for k in (2, 5, 11):
        ends = 0.6 + np.cumsum(rng.random(k) * 0.01)
        starts = np.concatenate(([ends[0] - 0.004], ends[:-1]))
        verify = ends - starts
        codes = rng.integers(-1, 3, k)
        bounds = [names[c] for c in codes]
        used = rng.integers(0, 100, k)
        for j in range(k):
            one.append(1, float(starts[j]), float(ends[j]) - float(starts[j]), 5, 5, 0, 5, 0,
                       0, 5, 0.0, float(verify[j]), bounds[j], int(used[j]))
        many.extend(1, starts, ends, 5, 5, 0, 5, 0, 0, 5, 0.0, verify, bounds,
                    used.astype(np.float64))
        coded.extend(1, starts, ends, 5, 5, 0, 5, 0, 0, 5, 0.0, verify, (codes, names),
                     used)
    a = one.records()
    for b in (many.records(), coded.records()):
        for col in a.columns:
            assert np.array_equal(a.column(col), b.column(col)), col
    assert set(a.column("bound")) == {"memory", "compute", "comm", ""}
    assert len(a) == 1 + 2 + 5 + 11


def test_rows_read_between_appends_stay_as_they_were_read(monkeypatch):
    """Chunks capped at 16 rows: rows appended one by one and k at a time across chunk
    boundaries, read midway (the tables joined) and again at the end, are the rows added,
    and what was read midway is not written by the appends after it."""
    monkeypatch.setattr(IterationLog, "CHUNK", 16)
    rng = np.random.default_rng(3)
    # durations as extend computes them from the ends: (start + duration) - start
    rows = [r[:2] + ((r[1] + r[2]) - r[1],) + r[3:] for r in _rows(300, rng)]
    log = IterationLog(capacity=4)
    i, seen = 0, []
    while i < len(rows):
        k = int(rng.integers(1, 40))
        part = rows[i:i + k]
        if k % 2:
            for r in part:
                log.append(*r)
        else:
            cols = list(zip(*part, strict=True))
            starts = np.array(cols[1])
            log.extend(cols[0][0] if len(set(cols[0])) == 1 else np.array(cols[0]),
                       starts, starts + np.array(cols[2]), *(np.array(c) for c in cols[3:12]),
                       list(cols[12]), np.array(cols[13]))
        i += len(part)
        if rng.random() < 0.3:
            got = log.records()
            seen.append((got, Records.from_rows(IterationRecord, rows[:i])))
    seen.append((log.records(), Records.from_rows(IterationRecord, rows)))
    for got, want in seen:
        for name, col in got.columns.items():
            assert col.tolist() == want.columns[name].tolist(), name


def test_large_chunks_live_in_their_own_memory_maps_and_give_the_same_rows(monkeypatch):
    """Chunks past ``_MAPPED_BYTES`` are memory maps (given back to the system when let
    go): the rows written into them read back as the rows added."""
    from sim import log as log_module

    monkeypatch.setattr(log_module, "_MAPPED_BYTES", 1024)  # chunks of 16+ rows: mapped
    rows = _rows(200, np.random.default_rng(4))
    log = IterationLog(capacity=4)
    for r in rows:
        log.append(*r)
    base = log._i
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base.obj, mmap.mmap)  # the current chunk, a view of its map
    got = log.records()
    assert got == Records.from_rows(IterationRecord, rows)
    assert log_module._empty((3, 5), np.int64).flags.writeable
