"""Throughput is measured over the arrival window, not up to the last finish."""

from __future__ import annotations

import math

from sim.records import IterationRecord, Records, RequestRecord
from sim.summary import summarize


def _req(i, arrival, done, out=2):
    return RequestRecord(id=i, replica=0, task=0, arrival_at=arrival, first_scheduled_at=arrival,
                         first_token_at=arrival + 0.1 if done == done else math.nan,
                         finished_at=done, prompt_tokens=4, output_tokens=out,
                         emitted_tokens=out if done == done else 0, verify_steps=1,
                         draft_steps=0, drafted_tokens=0, accepted_tokens=0, checked_tokens=0,
                         preemptions=0, recomputed_tokens=0, finished=done == done)


def _it(start, duration, emitted):
    return IterationRecord(replica=0, start_at=start, duration_s=duration, batch_size=1,
                           decode_seqs=1, prefill_tokens=0, verify_tokens=1, drafted_tokens=0,
                           accepted_tokens=0, emitted_tokens=emitted, draft_s=0.0,
                           verify_s=duration, bound="memory", kv_blocks_used=0)


def test_rates_count_only_what_ends_inside_the_arrival_window():
    # Arrivals at 1, 2, 5: window [1, 5], 4 s. Finishes at 1.5, 4, 9 (the last drains).
    reqs = [_req(0, 1.0, 1.5), _req(1, 2.0, 4.0), _req(2, 5.0, 9.0)]
    # Iterations ending at 0.5 (before), 1.5, 4.0, 5.0 (the edge counts), 9.0 (after).
    its = [_it(0.0, 0.5, 100), _it(1.0, 0.5, 3), _it(3.0, 1.0, 5), _it(4.5, 0.5, 7),
           _it(8.0, 1.0, 1000)]
    s = summarize("x", Records.from_rows(RequestRecord, reqs),
                  Records.from_rows(IterationRecord, its), duration_s=9.0)
    assert s["requests_per_s"] == 2 / 4
    assert s["throughput_tokens_per_s"] == (3 + 5 + 7) / 4


def test_offline_batch_falls_back_to_the_makespan():
    reqs = [_req(0, 0.0, 2.0, out=3), _req(1, 0.0, 4.0, out=5), _req(2, 0.0, math.nan)]
    its = [_it(0.0, 2.0, 3), _it(2.0, 2.0, 5)]
    s = summarize("x", Records.from_rows(RequestRecord, reqs),
                  Records.from_rows(IterationRecord, its), duration_s=4.0)
    assert s["requests_per_s"] == 2 / 4
    assert s["throughput_tokens_per_s"] == 8 / 4
