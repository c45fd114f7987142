"""Hand-checkable traces of the engine with a linear fake cost model (exact event times)."""

import math

import pytest

from sim.policies import FixedGamma
from sim.runner import simulate
from tests.sim.fakes import FakeCost, setup, table


def _times(result):
    return [(r.id, r.first_scheduled_at, r.first_token_at, r.finished_at, r.emitted_tokens)
            for r in result.requests]


def test_two_requests_without_speculation(engine_path):
    # pass = 10 ms + 1 ms per new token.
    # t=0     : prefill r0 (4)            -> 14 ms
    # t=0.014 : decode r0 (1) + prefill r1 (2; it arrived at 5 ms) -> 13 ms
    # t=0.027 : decode r0 (1) + decode r1 (1) -> 12 ms; both finish at 0.039
    res = simulate(setup(table([0.0, 0.005], [4, 2], [3, 2])), path=engine_path)
    got = _times(res)
    want = [(0, 0.0, 0.014, 0.039, 3), (1, 0.014, 0.027, 0.039, 2)]
    for g, w in zip(got, want, strict=True):
        assert g[0] == w[0] and g[4] == w[4]
        assert g[1:4] == pytest.approx(w[1:4], abs=1e-12)
    starts = [x for it in res.iterations
              for x in (it.start_at, it.duration_s, it.prefill_tokens, it.verify_tokens)]
    assert starts == pytest.approx([0.0, 0.014, 4, 0, 0.014, 0.013, 2, 1, 0.027, 0.012, 0, 2])
    assert all(r.finished for r in res.requests)


def test_two_requests_with_gamma_2_all_accepted(engine_path):
    # draft pass = 2 ms flat; the draft prefills prompts in its first pass.
    # t=0     : draft 2 ms + target prefill r0 (4) 14 ms            -> 0.016, r0 emits 1
    # t=0.016 : draft 2 passes 4 ms + target (r0: 1+2, r1 prefill 2) 15 ms -> 0.035
    #           r0 accepts 2, emits 3 (4 so far); r1 emits its first token
    # t=0.035 : draft 4 ms + target (3 + 3) 16 ms -> 0.055; both capped at their outputs
    draft = FakeCost(overhead_s=0.002, per_token_s=0.0)
    res = simulate(setup(table([0.0, 0.005], [4, 2], [5, 2]), policy=lambda: FixedGamma(2),
                         draft=draft), path=engine_path)
    got = _times(res)
    assert got[0][2:] == pytest.approx((0.016, 0.055, 5))
    assert got[1][1:] == pytest.approx((0.016, 0.035, 0.055, 2))
    r0, r1 = res.requests
    assert (r0.verify_steps, r0.drafted_tokens, r0.accepted_tokens) == (2, 4, 4)
    assert (r1.verify_steps, r1.drafted_tokens, r1.accepted_tokens) == (1, 2, 2)
    assert [it.draft_s for it in res.iterations] == pytest.approx([0.002, 0.004, 0.004])
    assert [it.emitted_tokens for it in res.iterations] == [1, 4, 2]


def test_horizon_records_unfinished_requests(engine_path):
    res = simulate(setup(table([0.0, 0.005, 1.0], [4, 2, 2], [3, 2, 2])), horizon_s=0.02,
                   path=engine_path)
    assert len(res.requests) == 2  # the third has not arrived
    r0, r1 = res.requests
    assert r0.finished is False and r0.emitted_tokens == 1 and math.isnan(r0.finished_at)
    assert r1.finished is False and math.isnan(r1.first_token_at)


def test_progress_reports_simulated_time_and_does_not_change_results(engine_path):
    ticks = []
    tab = table([0.0, 0.005, 0.5], [4, 2, 2], [3, 2, 2])
    plain = simulate(setup(tab), path=engine_path)
    watched = simulate(setup(tab), progress=lambda now, total: ticks.append((now, total)),
                       path=engine_path)
    assert watched.requests == plain.requests and watched.iterations == plain.iterations
    assert ticks[0][1] == 0.5 and ticks[-1][0] == pytest.approx(plain.end_at)
    assert [t for t, _ in ticks] == sorted(t for t, _ in ticks)


def test_chunked_prefill_shares_iterations_with_decodes(engine_path):
    # chunk 16, budget 20. r0 (prompt 4, output 4) at 0; r1 (prompt 40, output 2) at 1 ms.
    # t=0     : prefill r0 4                         -> 10 + 4  = 14 ms; r0 token 1
    # t=0.014 : decode r0 1 + r1 chunk 16            -> 10 + 17 = 27 ms; r0 token 2
    # t=0.041 : decode r0 1 + r1 chunk 16            -> 27 ms -> 0.068; r0 token 3
    # t=0.068 : decode r0 1 + r1 last chunk 8        -> 19 ms -> 0.087; r0 token 4 (done),
    #           r1 token 1
    # t=0.087 : decode r1 1                          -> 11 ms -> 0.098; r1 done
    res = simulate(setup(table([0.0, 0.001], [4, 40], [4, 2]), chunked=True, chunk=16,
                         max_batched_tokens=20), path=engine_path)
    r0, r1 = res.requests
    assert (r0.first_token_at, r0.finished_at) == pytest.approx((0.014, 0.087))
    assert (r1.first_scheduled_at, r1.first_token_at, r1.finished_at) == pytest.approx(
        (0.014, 0.087, 0.098))
    assert [it.prefill_tokens for it in res.iterations] == [4, 16, 16, 8, 0]


def test_a_prompt_that_does_not_fit_the_budget_gets_a_partial_chunk(engine_path):
    # budget 10: the decode takes 1, so the new prompt's first chunk is 9, not 16.
    res = simulate(setup(table([0.0, 0.001], [4, 30], [3, 1]), chunked=True, chunk=16,
                         max_batched_tokens=10), path=engine_path)
    assert [it.prefill_tokens for it in res.iterations][:3] == [4, 9, 9]
