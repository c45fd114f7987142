"""A run that keeps only its iterations' totals (``iteration_rows=False``: ``bench``,
``sweep``, ``plan``, ``grid``) summarises exactly as one that keeps the rows, on every
engine path; asking it for the rows is an error, never an empty table."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest

from sim.bench import bench_scenario, decode_heavy_rows
from sim.build import setups
from sim.loading import load_scenario
from sim.log import IterationLog, NoIterationRows
from sim.paths import repo_root
from sim.records import IterationRecord, IterationTotals, Records
from sim.runner import run_setups

SCENARIOS = {
    # speculative (a traced acceptance, none and fixed-g4)
    "default": ("default", ["run.requests=80"]),
    # two replicas behind a router, none and fixed-g3
    "two-replicas": ("llama70b-two-replicas", ["run.requests=60"]),
    # decode only: no variant drafts
    "decode-only": ("mooncake-trace", ["run.requests=60",
                                      "variants=[{name: none, policy: {kind: none}}]"]),
    # a tree policy (no chain formula) and a KV pool small enough to fill and preempt
    "tree-full-pool": ("specinfer-tree", ["run.requests=40", "workload.rate_per_s=50",
                                          "scheduler.num_gpu_blocks_override=200"]),
}


def _both(sc, path):
    """The results of ``sc`` on ``path`` keeping the rows, and keeping only the totals."""
    return [run_setups(sc, setups(sc, "test"), engine_path=path, iteration_rows=rows)
            for rows in (True, False)]


def _same_summaries(kept, folded) -> None:
    assert kept.summaries == folded.summaries  # every key, float for float
    for a, b in zip(kept.variants, folded.variants, strict=True):
        assert a.totals == b.totals and a.requests == b.requests
        assert a.totals.iterations == len(a.iterations) > 0
        _totals_are_the_rows(a.iterations, a.totals)


def _totals_are_the_rows(rows: Records[IterationRecord], totals: IterationTotals) -> None:
    """The blockwise totals are the rows' sums: counts exactly, seconds to rounding."""
    again = IterationTotals.of_records(rows, totals.kv_full_blocks)
    for k, v in asdict(totals).items():
        w = asdict(again)[k]
        if k == "bound_s":
            assert dict(v).keys() >= {b for b, s in w if s}
            for b, s in w:
                assert math.isclose(dict(v)[b], s, rel_tol=1e-12), b
        elif isinstance(v, float):
            assert math.isclose(v, w, rel_tol=1e-12, abs_tol=1e-300), k
        else:
            assert v == w, k


@pytest.mark.parametrize("case", sorted(SCENARIOS))
def test_shipped_scenarios_summarise_the_same_without_their_rows(case, engine_path):
    name, sets = SCENARIOS[case]
    sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml", sets)
    kept, folded = _both(sc, engine_path)
    _same_summaries(kept, folded)
    if case == "tree-full-pool":  # the KV-full and preemption sums are exercised
        assert all(v.totals.kv_full_s > 0 for v in kept.variants)
        assert all(s["preemptions"] for s in kept.summaries)


@pytest.mark.parametrize("workload", ["speculative", "decode-heavy", "replicas-2",
                                      "preemption", "adaptive-tree"])
def test_bench_workloads_summarise_the_same_without_their_rows(workload, engine_path,
                                                               tmp_path):
    trace = tmp_path / "decode-heavy.csv"
    trace.write_text(decode_heavy_rows(300, 0))
    sc = bench_scenario(300, 0, workload, str(trace))
    _same_summaries(*_both(sc, engine_path))


def test_a_run_without_rows_says_so_when_asked_for_them(engine_path):
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", ["run.requests=10"])
    _, folded = _both(sc, engine_path)
    v = folded.variants[0]
    assert v.iteration_rows is None and v.totals.iterations > 0
    with pytest.raises(NoIterationRows, match="kept no iteration rows"):
        v.iterations  # noqa: B018 -- the property raises
    log = IterationLog(rows=False)
    log.append(0, 0.0, 0.1, 1, 1, 0, 1, 0, 0, 1, 0.0, 0.1, "memory", 3)
    with pytest.raises(NoIterationRows, match="iteration_rows=True"):
        log.records()


def _blocks(log: IterationLog, rng: np.random.Generator, n: int) -> None:
    """``n`` random rows into ``log`` one by one and in blocks of up to 40, as the
    reference path and the compiled stretch and walk add them."""
    bounds = ("compute", "memory", "comm", "host")
    i = 0
    while i < n:
        k = int(rng.integers(1, 40))
        starts = rng.random(k) * 1e3
        ends = starts + rng.random(k)
        seqs = rng.integers(0, 9, k)
        ints = [rng.integers(1, 9, k), seqs, rng.integers(0, 2, k) * rng.integers(0, 600, k),
                seqs * 5, seqs * rng.integers(0, 5, k), rng.integers(0, 9, k),
                rng.integers(0, 9, k)]
        draft, verify = rng.random(k) * 1e-3, rng.random(k) * 1e-2
        used, codes = rng.integers(0, 100, k), rng.integers(0, 4, k)
        if k % 3 == 0:
            for j in range(k):
                log.append(0, float(starts[j]), float(ends[j] - starts[j]),
                           *(int(c[j]) for c in ints), float(draft[j]), float(verify[j]),
                           bounds[codes[j]], int(used[j]))
        elif k % 3 == 1:
            log.extend(0, starts, ends, *ints, draft, verify, (codes, bounds), used)
        else:
            f = np.stack([starts, ends - starts, draft, verify])  # [4, k]
            i_ = np.stack([np.zeros(k, dtype=np.int64), *ints,
                           log.codes(bounds)[codes], used])  # [10, k]
            log.extend_rows(f, i_)
        i += k


def test_logs_with_and_without_rows_fold_the_same_blocks(monkeypatch):
    """Chunks capped at 64 rows (the folded log writes over its chunk, the other keeps
    them): the totals are equal, bit for bit, and are the kept rows' sums."""
    monkeypatch.setattr(IterationLog, "CHUNK", 64)
    kept, folded = IterationLog(capacity=4, kv_full_blocks=90.0), \
        IterationLog(capacity=4, rows=False, kv_full_blocks=90.0)
    for log in (kept, folded):
        _blocks(log, np.random.default_rng(7), 2000)
    assert folded._f.shape[1] == 64 and not folded._full  # one chunk, written over
    assert kept.totals() == folded.totals() and len(kept) == len(folded) >= 2000
    _totals_are_the_rows(kept.records(), kept.totals())
    assert kept.totals().kv_full_s > 0 and kept.totals().undrafted_iterations > 0
