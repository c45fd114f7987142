"""Summary numbers: throughput over the run's span, overload, ITL, warnings."""

from __future__ import annotations

import math

from sim.records import IterationRecord, IterationTotals, Records, RequestRecord
from sim.summary import summarize


def _req(i, arrival, done, out=2):
    return RequestRecord(id=i, replica=0, task=0, arrival_at=arrival, first_scheduled_at=arrival,
                         first_token_at=arrival + 0.1 if done == done else math.nan,
                         finished_at=done, prompt_tokens=4, output_tokens=out,
                         emitted_tokens=out if done == done else 0, verify_steps=1,
                         draft_steps=0, drafted_tokens=0, accepted_tokens=0, checked_tokens=0,
                         preemptions=0, recomputed_tokens=0, cached_tokens=0,
                         finished=done == done)


def _it(start, duration, emitted):
    return IterationRecord(replica=0, start_at=start, duration_s=duration, batch_size=1,
                           decode_seqs=1, prefill_tokens=0, verify_tokens=1, drafted_tokens=0,
                           accepted_tokens=0, emitted_tokens=emitted, draft_s=0.0,
                           verify_s=duration, bound="memory", kv_blocks_used=0)


def _totals(its):
    return IterationTotals.of_records(Records.from_rows(IterationRecord, its))


def test_rates_are_what_the_run_delivered_from_the_first_arrival_to_its_end():
    # Arrivals at 1, 2, 5; finishes at 1.5, 4, 9 and the run ends at 9: a span of 8 s.
    reqs = [_req(0, 1.0, 1.5), _req(1, 2.0, 4.0, out=3), _req(2, 5.0, 9.0, out=5)]
    its = [_it(1.0, 0.5, 2), _it(3.0, 1.0, 3), _it(8.0, 1.0, 5)]
    s = summarize("x", Records.from_rows(RequestRecord, reqs),
                  _totals(its), duration_s=9.0)
    assert s["requests_per_s"] == s["served_rate_per_s"] == 3 / 8
    assert s["throughput_tokens_per_s"] == (2 + 3 + 5) / 8
    assert s["offered_rate_per_s"] == 2 / 4  # 3 arrivals over the window [1, 5]
    assert s["overloaded"] is None  # too few arrivals to judge


def test_a_horizon_past_the_last_completion_adds_nothing_to_the_span():
    """The whole-trace recipe (requests: null, horizon_s: H): every request finished by 9 s
    of a run that ends at the horizon, 1e6 s; the rates are over 1..9 s, not 1..1e6 s."""
    reqs = [_req(0, 1.0, 1.5), _req(1, 2.0, 4.0, out=3), _req(2, 5.0, 9.0, out=5)]
    its = [_it(1.0, 0.5, 2), _it(3.0, 1.0, 3), _it(8.0, 1.0, 5)]
    s = summarize("x", Records.from_rows(RequestRecord, reqs),
                  _totals(its), duration_s=1e6)
    assert s["requests_per_s"] == 3 / 8
    assert s["throughput_tokens_per_s"] == (2 + 3 + 5) / 8


def test_a_request_unfinished_at_the_horizon_keeps_the_span_to_the_horizon():
    reqs = [_req(0, 1.0, 1.5), _req(1, 2.0, math.nan)]  # still running when the run ends
    its = [_it(1.0, 0.5, 2)]
    s = summarize("x", Records.from_rows(RequestRecord, reqs),
                  _totals(its), duration_s=11.0)
    assert s["requests_per_s"] == 1 / 10 and s["throughput_tokens_per_s"] == 2 / 10


def test_offline_batch_falls_back_to_the_makespan():
    reqs = [_req(0, 0.0, 2.0, out=3), _req(1, 0.0, 4.0, out=5), _req(2, 0.0, math.nan)]
    its = [_it(0.0, 2.0, 3), _it(2.0, 2.0, 5)]
    s = summarize("x", Records.from_rows(RequestRecord, reqs),
                  _totals(its), duration_s=4.0)
    assert s["requests_per_s"] == 2 / 4
    assert s["throughput_tokens_per_s"] == 8 / 4


def test_a_growing_backlog_is_overload_and_a_steady_one_is_not():
    # 40 arrivals one per second; served one per 2 s (overload) vs 0.5 s after arrival.
    arrivals = [float(i) for i in range(40)]
    slow = [_req(i, a, 2.0 * i + 1.0) for i, a in enumerate(arrivals)]
    fast = [_req(i, a, a + 0.5) for i, a in enumerate(arrivals)]
    its = [_it(0.0, 1.0, 1)]
    over = summarize("x", Records.from_rows(RequestRecord, slow),
                     _totals(its), duration_s=79.0)
    ok = summarize("x", Records.from_rows(RequestRecord, fast),
                   _totals(its), duration_s=39.5)
    assert over["overloaded"] is True and ok["overloaded"] is False
    # second half of the window (19.5, 39]: 20 arrivals; the backlog (arrived - finished)
    # is 20 - 10 at 19.5 and 40 - 20 at 39: it grew by 10
    assert over["backlog_growth"] == 10
    assert over["warnings"] and over["warnings"][0].startswith("overloaded: ")
    assert ok["warnings"] == []


def test_itl_percentiles_come_from_the_histogram_to_a_tenth_of_a_percent():
    import numpy as np

    from sim.log import ItlHistogram

    h = ItlHistogram()
    gaps = np.r_[np.full(98, 0.010), np.full(2, 0.500)]
    h.add(gaps)
    s = summarize("x", Records.from_rows(RequestRecord, [_req(0, 0.0, 1.0)]),
                  _totals([_it(0.0, 1.0, 2)]), duration_s=1.0,
                  itl=h.counts)
    assert abs(s["itl_p50_s"] / 0.010 - 1) < 1e-3
    assert abs(s["itl_p99_s"] / 0.500 - 1) < 1e-3
