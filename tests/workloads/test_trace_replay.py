"""Trace rows to requests: window, sample, time scale, count, horizon, tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workloads.public_traces import read_burstgpt, read_mooncake
from workloads.trace_replay import replay_rows
from workloads.trace_rows import TraceCounts, TraceRow

DATA = Path(__file__).parent / "data"
MS = [0, 0, 250, 1000, 1000, 1500, 2750, 3000, 4000, 4500, 6000, 7250]  # mooncake.jsonl


def _replay(counts=None, **kw):
    counts = counts if counts is not None else TraceCounts()
    rows = read_mooncake(DATA / "mooncake.jsonl", counts=counts)
    return replay_rows(rows, 1000, np.random.default_rng(3), counts=counts, **kw)


def test_everything_by_default_times_and_lengths_exact():
    specs = _replay()
    assert [s.id for s in specs] == list(range(12))
    assert [s.arrival_at for s in specs] == [t / 1000 for t in MS]
    assert [(s.prompt_tokens, s.output_tokens) for s in specs][:3] == [(1200, 40), (600, 12),
                                                                       (1536, 100)]
    assert specs[4].hash_ids == (0, 1, 2, 6, 7) and specs[4].hash_block_tokens == 512
    assert {s.task for s in specs} == {"default"}


def test_time_scale_divides_every_gap():
    specs = _replay(time_scale=4.0)
    assert [s.arrival_at for s in specs] == [t / 1000 / 4.0 for t in MS]


def test_window_is_in_trace_seconds_and_times_restart_at_its_first_request():
    counts = TraceCounts()
    specs = _replay(counts, start_s=1.0, duration_s=2.0, time_scale=2.0)  # [1 s, 3 s)
    assert [s.prompt_tokens for s in specs] == [512, 2049, 90, 3000]
    assert [s.arrival_at for s in specs] == [0.0, 0.0, 0.25, 0.875]  # (t - 1000 ms) / 2
    assert counts.before_window == 3
    assert counts.stopped == "the window's end" and counts.rows == 8  # line 9 ends it


def test_the_window_origin_is_the_first_row_even_when_it_is_left_out():
    counts = TraceCounts()
    rows = read_burstgpt(DATA / "burstgpt.csv", skip_zero=True, counts=counts,
                         models=("GPT-4",))
    specs = replay_rows(rows, 1, np.random.default_rng(0), counts=counts, start_s=100.0)
    # GPT-4 rows at 190, 455, 720 s; the origin is the file's first row (5 s), so 190 - 5
    # >= 100 keeps all three; times restart at the first kept one.
    assert [s.arrival_at for s in specs] == [0.0, 265.0, 530.0]


def test_count_takes_the_first_n_and_stops_reading():
    counts = TraceCounts()
    specs = _replay(counts, n=5)
    assert [s.prompt_tokens for s in specs] == [1200, 600, 1536, 512, 2049]
    assert counts.rows == 5 and counts.stopped == "the requested count"
    assert len(_replay(n=50)) == 12  # the caller decides whether fewer is an error


def test_horizon_keeps_arrivals_before_it_when_no_count():
    specs = _replay(horizon_s=1.5)
    assert [s.arrival_at for s in specs] == [0.0, 0.0, 0.25, 1.0, 1.0]
    # with a count, the horizon is the engine's to apply (as for synthetic workloads)
    assert len(_replay(n=8, horizon_s=1.5)) == 8


def test_sample_is_seeded_thinning_and_its_prefix_does_not_depend_on_n():
    rows = [TraceRow(i + 1, 10 * i, 5, 5) for i in range(4000)]  # a row every 10 s
    counts = TraceCounts()
    specs = replay_rows(iter(rows), 1, np.random.default_rng(7), sample=0.25, counts=counts)
    assert len(specs) + counts.sampled_out == 4000
    assert len(specs) == pytest.approx(1000, abs=4 * np.sqrt(4000 * 0.25 * 0.75))  # 4 SD
    again = replay_rows(iter(rows), 1, np.random.default_rng(7), sample=0.25, n=100)
    assert again == specs[:100]
    other = replay_rows(iter(rows), 1, np.random.default_rng(8), sample=0.25, n=100)
    assert other != specs[:100]
    # times are the kept rows' own gaps (thinning does not rescale time)
    assert all(s.arrival_at % 10 == 0 for s in specs)


def test_sample_one_keeps_every_row():
    assert _replay(sample=1.0) == _replay()


def test_tasks_are_drawn_by_weight():
    rows = [TraceRow(i + 1, i, 5, 5) for i in range(2000)]
    specs = replay_rows(iter(rows), 1, np.random.default_rng(1), tasks={"chat": 3, "code": 1})
    share = np.mean([s.task == "chat" for s in specs])
    assert share == pytest.approx(0.75, abs=0.04)  # 2000 draws: SD 0.0097


def test_counts_describe_what_was_left_out():
    counts = TraceCounts(rows=40, zero_skipped=3, before_window=10, stopped="the window's end")
    assert counts.describe() == ("40 rows read: 3 with 0 tokens skipped, 10 before start_s; "
                                 "stopped at the window's end")
    assert TraceCounts(rows=2).describe() == "2 rows read"
