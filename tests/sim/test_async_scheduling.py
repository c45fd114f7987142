"""vLLM's async scheduling (sim.async_scheduling), on hand-checked traces with a linear fake
cost model: the next step is scheduled when a step starts, before its outcome."""

import pytest

from sim.policies import FixedGamma
from sim.runner import simulate
from specdec.errors import UserError
from tests.sim.fakes import AcceptN, FakeCost, setup, table


def _times(result):
    return [(r.id, r.first_scheduled_at, r.first_token_at, r.finished_at, r.emitted_tokens)
            for r in result.requests]


def test_an_arrival_runs_a_step_later_and_a_sure_last_token_is_not_scheduled_again():
    # pass = 10 ms + 1 ms per new token; r0 (prompt 4, output 3) at 0, r1 (2, 2) at 5 ms.
    # t=0     : S0 = prefill r0 (4), 14 ms; S1 scheduled at once: r0 decode (1), 11 ms
    # t=0.014 : S0's outcome: r0 token 1. S1 runs; S2 scheduled: r0 (2 left) decode, r1
    #           (arrived at 5 ms) prefill 2: 13 ms. Sync scheduling would have run r1 here.
    # t=0.025 : S1's outcome: r0 token 2. S2 runs; S3: r0 has 1 left and a step in flight
    #           that writes it: skipped; r1 decode (its prefill in flight): 11 ms
    # t=0.038 : S2's outcome: r0 token 3 (done), r1 token 1. S3 runs; S4: r1 skipped, empty
    # t=0.049 : S3's outcome: r1 token 2 (done)
    s = setup(table([0.0, 0.005], [4, 2], [3, 2]), async_scheduling=True)
    res = simulate(s)
    want = [(0, 0.0, 0.014, 0.038, 3), (1, 0.014, 0.038, 0.049, 2)]
    for g, w in zip(_times(res), want, strict=True):
        assert g[0] == w[0] and g[4] == w[4]
        assert g[1:4] == pytest.approx(w[1:4], abs=1e-12)
    got = [x for it in res.iterations
           for x in (it.start_at, it.duration_s, it.prefill_tokens, it.verify_tokens)]
    assert got == pytest.approx([0.0, 0.014, 4, 0, 0.014, 0.011, 0, 1,
                                 0.025, 0.013, 2, 1, 0.038, 0.011, 0, 1])
    # sync: r1's first token at 27 ms, its last at 39 ms (test_engine_trace)
    sync = simulate(setup(table([0.0, 0.005], [4, 2], [3, 2])))
    assert sync.requests[1].first_token_at == pytest.approx(0.027)


def test_a_verify_scheduled_behind_a_request_s_last_token_is_priced_for_nothing():
    # γ = 2, every draft accepted, draft passes 2 ms flat; r0: prompt 4, output 4.
    # t=0     : S0 = draft 2 ms + prefill 4 (14 ms) -> 16 ms; S1: r0 verify 1 + 2: draft 2
    #           passes 4 ms + 13 ms = 17 ms
    # t=0.016 : r0 token 1. S1 runs; S2: r0 (3 left: S1 may not end it) verify 3, 17 ms
    # t=0.033 : S1's outcome: 2 accepted + 1 -> r0 done at 4 tokens. S2 runs anyway: its
    #           verify's 3 tokens are computed for nothing (no sequence decodes in it)
    # t=0.050 : S2 ends; nothing else
    s = setup(table([0.0], [4], [4]), policy=lambda: FixedGamma(2),
              draft=FakeCost(overhead_s=0.002, per_token_s=0.0), async_scheduling=True)
    res = simulate(s)
    (r0,) = res.requests
    assert (r0.first_token_at, r0.finished_at) == pytest.approx((0.016, 0.033))
    assert (r0.verify_steps, r0.drafted_tokens, r0.accepted_tokens) == (1, 2, 2)
    its = res.iterations
    assert [it.start_at for it in its] == pytest.approx([0.0, 0.016, 0.033])
    assert [it.duration_s for it in its] == pytest.approx([0.016, 0.017, 0.017])
    assert [(it.decode_seqs, it.verify_tokens, it.emitted_tokens, it.drafted_tokens)
            for it in its] == [(0, 0, 1, 0), (1, 3, 3, 2), (0, 3, 0, 0)]
    assert res.end_at == pytest.approx(0.050)


def test_the_same_seed_gives_the_same_async_run():
    tab = table([0.0, 0.001, 0.002, 0.02], [40, 9, 70, 3], [30, 12, 5, 20])
    runs = [simulate(setup(tab, policy=lambda: FixedGamma(3), draft=FakeCost(0.001, 0.0),
                           blocks=12, max_num_seqs=3, chunked=True, chunk=16,
                           async_scheduling=True)) for _ in range(2)]
    assert runs[0].requests == runs[1].requests and runs[0].iterations == runs[1].iterations


@pytest.mark.parametrize(("sets", "why"), [
    (["scheduler.order=decode_first"], "only the vllm_v1 order"),
    (["models.method=ngram", "models.draft=null"], "runs only with sync scheduling"),
])
def test_async_scheduling_is_refused_where_vllm_does_not_run_it(sets, why):
    from sim.build import setups
    from sim.loading import load_scenario

    with pytest.raises(UserError, match=why):
        sc = load_scenario("scenarios/default.yaml",
                           ["scheduler.async_scheduling=true", *sets])
        setups(sc)


def test_a_release_knob_beside_another_order_is_refused_unless_it_is_the_default():
    """A resolved scenario writes every field, so SGLang's order comes back with the
    default release (its report was once refused writing it); another release is an
    error there, as the knob would do nothing."""
    from sim.scenario import Scheduler

    resolved = Scheduler(order="prefill_first").model_dump()
    assert resolved["vllm_release"] == "0.33"
    Scheduler.model_validate(resolved)
    for knob, value in (("vllm_release", "0.20"), ("reserve_full_isl", False),
                        ("async_scheduling", True)):
        with pytest.raises(ValueError, match=f"{knob}: only the vllm_v1 order"):
            Scheduler.model_validate({**resolved, knob: value})


def test_a_step_in_flight_holds_kv_for_every_draft_until_its_rejections_come_back():
    # γ = 3, no draft ever accepted; r0: prompt 12, output 20, 16-token blocks. Step k + 1
    # is scheduled when step k starts, with step k's 4 tokens counted as computed: it needs
    # KV for the committed tokens (12 + k - 1 after step k - 1's rejections came back),
    # step k's 4, its own 4 and 3 lookahead slots: 22 + k tokens. The record of step k
    # (written when it ends) sees those blocks, ⌈(22 + k) / 16⌉; step 19 ends the request.
    s = setup(table([0.0], [12], [20]), policy=lambda: FixedGamma(3), draft=FakeCost(0.0, 0.0),
              acceptance=AcceptN(0), async_scheduling=True)
    res = simulate(s)
    assert res.requests[0].emitted_tokens == 20 and len(res.iterations) == 20
    want = [-(-(22 + k) // 16) for k in range(19)] + [0]
    assert [it.kv_blocks_used for it in res.iterations] == want
