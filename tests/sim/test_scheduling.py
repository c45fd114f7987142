"""vLLM v1 scheduling semantics, hand-checkable: truncated speculation, no admission after a
preemption, lookahead slots and rollback through the replica, the draft keeping up when the
policy turns speculation off, and a draft on its own GPU drafting ahead."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import sim.replica
from sim.engine_path import PATHS
from sim.policies import BatchLadder, FixedGamma
from sim.runner import simulate
from tests.sim.fakes import AcceptAll, AcceptN, FakeCost, setup, table


def _decode_iterations(res):
    return [it for it in res.iterations if it.decode_seqs > 0]


@pytest.mark.parametrize("order, budget, seqs, verify", [("vllm_v1", 15, 3, 12),
                                                         ("decode_first", 12, 2, 10)])
def test_a_binding_budget_cuts_the_last_verify_in_v1_and_drops_it_in_decode_first(
        order, budget, seqs, verify, engine_path):
    # Three 4-token prompts prefill together, then each wants 1 + γ=4 = 5 tokens of the
    # budget: v1 (15 tokens, of which a draft model takes one input slot per scheduled
    # request) gives 5, 5 and 2 (one guess kept); v0 (12 tokens) drops the third whole.
    s = setup(table([0.0] * 3, [4] * 3, [20] * 3), policy=lambda: FixedGamma(4),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), max_batched_tokens=budget,
              chunked=True, chunk=12, order=order)
    res = simulate(s, path=engine_path)
    first = _decode_iterations(res)[0]
    assert (first.decode_seqs, first.verify_tokens) == (seqs, verify)
    if order == "vllm_v1":
        assert first.drafted_tokens == 4 + 4 + 1 and first.accepted_tokens == 9
    assert all(r.finished and r.emitted_tokens == 20 for r in res.requests)


class _Events:
    """Record (time, event, request) of every admission and preemption of the replicas."""

    def __init__(self, monkeypatch):
        self.log = []
        admit, preempt = sim.replica.Replica.admit, sim.replica.Replica.preempt
        events = self.log

        def on_admit(r, rid, target, cached=0):
            events.append((r.env.now, "admit", rid))
            return admit(r, rid, target, cached)

        def on_preempt(r, s):
            events.append((r.env.now, "preempt", int(r.rid[s])))
            return preempt(r, s)

        monkeypatch.setattr(sim.replica.Replica, "admit", on_admit)
        monkeypatch.setattr(sim.replica.Replica, "preempt", on_preempt)


@pytest.mark.parametrize("order", ["vllm_v1", "decode_first"])
def test_a_request_preempted_at_t_is_not_readmitted_at_t_in_v1(monkeypatch, order, engine_path):
    # Three requests of 31 + 40 tokens, 9 KV blocks: the youngest is preempted as the
    # others grow; v0's order re-admits it in the same iteration when the freed blocks hold
    # its first chunk, v1 waits for the next one. (The events are the reference
    # scheduler's; the compiled walk, which preempts and re-admits too, gives its records.)
    ev = _Events(monkeypatch)
    s = setup(table([0.0] * 3, [31] * 3, [40] * 3), blocks=9, max_num_seqs=3,
              max_batched_tokens=512, chunked=True, chunk=64, order=order)
    res = simulate(s, path=PATHS["reference"])
    if engine_path is not PATHS["reference"]:
        fast = simulate(s, path=engine_path)
        assert fast.requests == res.requests and fast.iterations == res.iterations
    assert all(r.finished for r in res.requests)
    preempted = [(t, rid) for t, what, rid in ev.log if what == "preempt"]
    assert preempted
    again_at_once = [(t, rid) for t, rid in preempted if (t, "admit", rid) in ev.log]
    if order == "vllm_v1":
        assert again_at_once == []
    else:  # v0's order admits in the same iteration: the recompute starts at once
        assert again_at_once


def test_lookahead_slots_decide_when_a_tight_pool_preempts(engine_path):
    """Two 16-token prompts, 21 tokens each at γ = 3 all accepted, a 5-block pool (16-token
    blocks): a verify takes 4 tokens and needs blocks for its KV + 4 + 3 lookahead slots.
    Iteration 1 prefills both (KV 16 each, one token out). Iterations 2-4 decode both
    (KV 16 -> 28, 13 tokens out each): ceil((KV + 7) / 16) = 2 blocks each, 4 in all.
    Iteration 5 (KV 28): ceil(35 / 16) = 3 each, 6 > 5, so the last admitted (B) is
    preempted and A decodes alone. Iteration 6: B recomputes its 16 + 13 tokens beside A's
    last verify. Without the lookahead slots B would last until iteration 6
    (ceil(32 / 16) = 2); with twice as many it would go at iteration 4 (ceil(34 / 16))."""
    s = setup(table([0.0, 0.0], [16, 16], [21, 21]), policy=lambda: FixedGamma(3),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), blocks=5,
              max_batched_tokens=64)
    res = simulate(s, path=engine_path)
    assert [(it.decode_seqs, it.prefill_tokens) for it in res.iterations][:6] == [
        (0, 32), (2, 0), (2, 0), (2, 0), (1, 0), (1, 29)]
    assert [r.preemptions for r in res.requests] == [0, 1]
    assert all(r.emitted_tokens == 21 for r in res.requests)


@pytest.mark.parametrize("prompt, admitted_at", [(19, 0.020), (20, 0.053)])
def test_a_waiting_prompt_is_admitted_only_into_the_budget_left(engine_path, prompt,
                                                                admitted_at):
    """A 20-token budget, no chunking: A (10-token prompt, 4 out) prefills at t = 0 (10 ms +
    1 ms per token: 20 ms); B arrives at 1 ms. Each of A's decodes takes 1 token of the
    budget, leaving 19: a 19-token B joins A's first decode at 20 ms, a 20-token B waits
    for A to finish (decodes at 20, 31, 42 ms, done at 53 ms)."""
    s = setup(table([0.0, 0.001], [10, prompt], [4, 2]), max_batched_tokens=20)
    res = simulate(s, path=engine_path)
    assert res.requests[1].first_scheduled_at == pytest.approx(admitted_at, abs=1e-12)
    assert sum(it.prefill_tokens for it in res.iterations) == 10 + prompt
    assert max(it.prefill_tokens + it.decode_seqs for it in res.iterations) <= 20


@pytest.mark.parametrize("order, gamma, held, kept", [
    ("vllm_v1", 7, 64, 64), ("vllm_v1", 15, 65, 65),
    ("decode_first", 7, 64, 63), ("decode_first", 15, 65, 63)])
def test_lookahead_slots_and_rollback_through_the_replica(monkeypatch, order, gamma, held,
                                                          kept):
    """Exercise 8 driven through the engine: 1000 cached tokens (63 blocks, the last holding
    8), a verify of γ + 1 tokens plus γ lookahead slots, 2 guesses accepted: 1003 tokens
    stay. In the lecture's paged KV (§3.2; the decode-first order) the tail blocks go back
    to the pool (63 kept); vLLM v1 keeps every block with the request until it is freed
    (``allocate_new_blocks`` only extends a request's blocks). (It watches the scheduler's
    grants: a compiled walk keeps its batch's blocks itself, and the fast-vs-reference test
    in test_golden.py holds it to the same records.)"""
    grants = []
    grant = sim.replica.BlockManager.grant

    def on_grant(kv, slots, old, extra):
        grant(kv, slots, old, extra)
        grants.append(int(kv.blocks[slots].sum()))

    monkeypatch.setattr(sim.replica.BlockManager, "grant", on_grant)
    s = setup(table([0.0], [1000], [10]), policy=lambda: FixedGamma(gamma),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptN(2), blocks=100,
              max_batched_tokens=2048, chunked=False, max_num_seqs=1, order=order)
    # the scheduler's grants: a compiled walk keeps its batch's blocks itself
    res = simulate(s, path=PATHS["reference"])
    verify = _decode_iterations(res)[0]
    # 1000 + 1 + γ written, γ more reserved: ceil(1015 / 16) = 64, ceil(1031 / 16) = 65
    assert grants[-1] == held
    assert verify.kv_blocks_used == kept  # 1003 tokens kept: 63 blocks hold them
    assert res.requests[0].emitted_tokens == 10


@pytest.mark.parametrize("sync, draft_calls", [("every_step", 5), ("catch_up", 0)])
def test_a_ladder_charges_the_draft_for_steps_without_speculation(sync, draft_calls, engine_path):
    # Two requests running: the ladder (keyed on running requests) gives γ = 0. With
    # every_step the draft still ingests each new token: one draft pass per iteration.
    s = setup(table([0.0, 0.0], [4, 4], [6, 6]),
              policy=lambda: BatchLadder([[1, 1, 2], [2, 100, 0]]),
              draft=FakeCost(0.002, 0.0001), acceptance=AcceptAll(), max_batched_tokens=64,
              chunked=True, chunk=64, draft_sync=sync)
    res = simulate(s, path=engine_path)
    dec = _decode_iterations(res)
    assert all(it.drafted_tokens == 0 for it in dec)
    charged = [it for it in dec if it.draft_s > 0]
    assert len(charged) == draft_calls
    for it in charged:  # one pass over two sequences' new tokens
        assert it.draft_s == pytest.approx(0.002 + 0.0001 * 2)


@pytest.mark.parametrize("key, lag", [("scheduled", 1), ("running", 0)])
def test_a_ladder_keyed_on_the_last_step_lags_it_by_one(key, lag, engine_path):
    # vLLM 0.33 looks the ladder up after forming a step, with the requests it scheduled
    # (github vllm-project/vllm vllm/v1/core/sched/scheduler.py, 0.33.0 wheel:
    # Scheduler.schedule, num_spec_tokens_to_schedule = dynamic_sd_lookup[
    # len(num_scheduled_tokens)]), and the worker proposes that many drafts for the next
    # step to verify. Two requests prefill together, both decode at γ = 0 (2 scheduled),
    # request 1 emits its last token: the step after still verifies γ = 0 (its step
    # scheduled 2), the one after γ = 2. Keyed on the running requests, γ = 2 at once.
    s = setup(table([0.0, 0.0], [4, 4], [30, 4]),
              policy=lambda: BatchLadder([[1, 1, 2], [2, 100, 0]], key=key),
              draft=FakeCost(0.002, 0.0001), acceptance=AcceptAll(), max_batched_tokens=64,
              chunked=True, chunk=64)
    res = simulate(s, path=engine_path)
    dec = _decode_iterations(res)
    both = [it.decode_seqs for it in dec].index(1)  # the first step request 0 runs alone
    assert all(it.drafted_tokens == 0 for it in dec[:both])
    assert [it.drafted_tokens for it in dec[both:both + 2]] == [0, 2] if lag else [2, 2]
    assert all(r.finished for r in res.requests)


def test_catch_up_feeds_the_missed_tokens_when_speculation_resumes(engine_path):
    # Request 0 alone: γ = 2; request 1 joins: γ = 0 while both run; request 1 ends first
    # (shorter), then request 0 speculates again and its draft ingests what it missed.
    s = setup(table([0.0, 0.0], [4, 4], [30, 3]),
              policy=lambda: BatchLadder([[1, 1, 2], [2, 100, 0]]),
              draft=FakeCost(0.002, 0.0001), acceptance=AcceptAll(), max_batched_tokens=64,
              chunked=True, chunk=64, draft_sync="catch_up")
    res = simulate(s, path=engine_path)
    dec = _decode_iterations(res)
    off = [it for it in dec if it.drafted_tokens == 0]
    resumed = next(it for it in dec[len(off):] if it.drafted_tokens > 0)
    assert all(it.draft_s == 0 for it in off)
    missed = len(off)  # one token per γ = 0 iteration for request 0
    # first draft pass: the root plus the missed tokens; then one more pass
    assert resumed.draft_s == pytest.approx(2 * 0.002 + 0.0001 * (1 + missed + 1))


def test_a_sticky_ladder_never_drafts_again_for_a_request_it_turned_off(engine_path):
    s = setup(table([0.0, 0.0], [4, 4], [30, 3]),
              policy=lambda: BatchLadder([[1, 1, 2], [2, 100, 0]], sticky=True),
              draft=FakeCost(0.002, 0.0001), acceptance=AcceptAll(), max_batched_tokens=64,
              chunked=True, chunk=64)
    res = simulate(s, path=engine_path)
    long, short = res.requests
    assert long.finished and long.draft_steps == 0  # off from its first decode on
    assert all(it.drafted_tokens == 0 for it in _decode_iterations(res))


def test_a_draft_drafting_ahead_makes_an_iteration_cost_the_max_not_the_sum(engine_path):
    # verify: 10 ms + 1 ms per token (γ = 2: 3 tokens, 13 ms); a draft pass: 2 ms + 0.1 ms
    # per token. Serial: 2 passes (4.2 ms) + 13 ms. Drafting ahead, every guess accepted:
    # after the first iteration the guesses are ready and the 3 passes ahead (6.3 ms) run
    # during the 13 ms verify.
    base = setup(table([0.0], [1], [41]), policy=lambda: FixedGamma(2),
                 draft=FakeCost(0.002, 0.0001), acceptance=AcceptAll(), placement="separate",
                 cost=FakeCost(0.010, 0.001))
    serial = _decode_iterations(simulate(base, path=engine_path))
    ahead = _decode_iterations(simulate(replace(base, draft_overlap=True), path=engine_path))
    assert [it.duration_s for it in serial] == pytest.approx([0.0172] * len(serial))
    assert ahead[0].duration_s == pytest.approx(0.0042 + 0.013)
    assert [it.duration_s for it in ahead[1:]] == pytest.approx([0.013] * (len(ahead) - 1))
    assert len(ahead) == len(serial)


def test_drafting_ahead_beats_a_colocated_draft_at_batch_1_on_the_default_pair():
    from sim.loading import load_scenario
    from sim.runner import run_scenario

    common = ["run.requests=30", "workload.rate_per_s=0.5",
              "variants=[{name: g4, policy: {kind: fixed, gamma: 4}}]"]
    colocated = run_scenario(load_scenario(None, common))
    ahead = run_scenario(load_scenario(None, [*common, "deployment.draft_placement=separate",
                                              "deployment.draft_overlap=parallel"]))
    assert ahead.summaries[0]["tpot_mean_s"] < 0.97 * colocated.summaries[0]["tpot_mean_s"]

    def draft_per_decode(result):
        it = result.variants[0].iterations.columns
        return float(np.mean(it["draft_s"][it["decode_seqs"] > 0]))

    # drafting that overlapped a verify is off the critical path
    assert draft_per_decode(ahead) < 0.8 * draft_per_decode(colocated)


# -- prefill_first: SGLang's order ---------------------------------------------------------

def test_prefill_first_runs_a_late_prompt_alone_and_the_decodes_wait(engine_path):
    # A decodes from t=0; B arrives at 0.05 s: its prompt runs in a pass of its own (no
    # decode in it), then both decode together. vLLM v1 puts B's prompt in A's decode step.
    for order, alone in (("prefill_first", True), ("vllm_v1", False)):
        s = setup(table([0.0, 0.05], [8, 8], [30, 30]), max_batched_tokens=64, chunked=True,
                  chunk=64, order=order)
        res = simulate(s, path=engine_path)
        b_prefill = [it for it in res.iterations if it.prefill_tokens and it.start_at > 0]
        assert len(b_prefill) == 1
        assert (b_prefill[0].decode_seqs == 0) is alone
        assert all(r.finished and r.emitted_tokens == 30 for r in res.requests)
        if alone:
            assert all(not (it.prefill_tokens and it.decode_seqs) for it in res.iterations)


def test_prefill_first_prefills_a_whole_cohort_before_any_decode(engine_path):
    # Six prompts of 40 tokens at t=0 with a 64-token budget: 240 tokens in four prefill
    # passes (64, 64, 64, 48; a prompt cut to fill each pass), then six decoders together,
    # who stay in step: every decode pass has all six until they finish together.
    s = setup(table([0.0] * 6, [40] * 6, [10] * 6), max_batched_tokens=64, chunked=True,
              chunk=64, order="prefill_first")
    res = simulate(s, path=engine_path)
    its = res.iterations
    assert [it.prefill_tokens for it in its[:4]] == [64, 64, 64, 48]
    assert all(it.decode_seqs == 0 for it in its[:4])
    dec = its[4:]
    assert all(it.decode_seqs == 6 and it.prefill_tokens == 0 for it in dec)
    assert len(dec) == 9  # the first token of each came out of its prefill
    assert all(r.finished and r.emitted_tokens == 10 for r in res.requests)


def test_prefill_first_decodes_without_a_token_budget(engine_path):
    # 20 decoders each verifying 1 + γ=4 tokens (100) pass a 64-token prefill budget: SGLang
    # bounds prefill batches by chunked_prefill_size, not its decode batch.
    s = setup(table([0.0] * 20, [2] * 20, [12] * 20), policy=lambda: FixedGamma(4),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), max_batched_tokens=64,
              chunked=True, chunk=64, max_num_seqs=20, order="prefill_first")
    res = simulate(s, path=engine_path)
    first = _decode_iterations(res)[0]
    assert (first.decode_seqs, first.verify_tokens) == (20, 100)
    assert all(r.finished and r.emitted_tokens == 12 for r in res.requests)


def test_prefill_first_preempts_and_still_finishes_everything(monkeypatch, engine_path):
    # Three requests of 31 + 40 tokens in 9 KV blocks: decodes run the pool dry, the
    # youngest is preempted and recomputed; everything finishes.
    ev = _Events(monkeypatch)
    s = setup(table([0.0] * 3, [31] * 3, [40] * 3), blocks=9, max_num_seqs=3,
              max_batched_tokens=512, chunked=True, chunk=64, order="prefill_first")
    res = simulate(s, path=engine_path)
    assert any(what == "preempt" for _, what, _ in ev.log)
    assert all(r.finished and r.emitted_tokens == 40 for r in res.requests)


def test_prefill_first_under_a_closed_loop_is_what_validate_prices_for_sglang(engine_path):
    """The engine's SGLang order under a closed loop of fixed lengths keeps the cohort in
    step, and its mean TPOT is the tpot_s row model's (hardware/timing/serving.py: decode
    steps plus the prefill passes after a request's own), priced by the same cost model."""
    from hardware.catalog import load_catalog
    from hardware.timing.rows import MeasuredRow
    from hardware.timing.serving import predict, row_cost
    from sim.loading import load_scenario
    from sim.runner import run_scenario

    b, isl, osl, budget = 16, 1024, 64, 4096
    sets = ["models.target=llama-3.1-8b", "deployment.gpu=h100", "deployment.framework=sglang",
            "deployment.timing=roofline", "scheduler.order=prefill_first",
            f"scheduler.max_batched_tokens={budget}", f"scheduler.chunk_tokens={budget}",
            f"workload={{arrivals: closed_loop, users: {b}, think_mean_s: 0.0, prompt: "
            f"{{kind: fixed, tokens: {isl}}}, output: {{kind: fixed, tokens: {osl}}}}}",
            f"run.requests={4 * b}", "variants=[{name: none, policy: {kind: none}}]"]
    r = run_scenario(load_scenario(None, sets),
                     engine_path=engine_path).variants[0].requests.columns
    tpot = (r["finished_at"] - r["first_token_at"]) / (r["output_tokens"] - 1)
    row = MeasuredRow(line=1, model="llama-3.1-8b", gpu="h100", tp=1, pp=1, weight_bits=16,
                      kv_bits=16, compute_dtype=None, batch=b, context=isl, tokens=1,
                      offload=0.0, measured=0.01, source="synthetic", framework="sglang",
                      metric="tpot_s", output_tokens=osl, max_num_tokens=budget)
    want = predict(row, row_cost(row, load_catalog(), "roofline"))
    assert tpot[b:].mean() == pytest.approx(want, rel=0.005)  # after the first wave
    assert tpot[b:].min() < 0.9 * want < tpot[b:].max()  # the first pass waits longest


def test_prefill_first_admits_only_what_can_finish_even_with_prompts_in_flight(monkeypatch,
                                                                               engine_path):
    """SGLang admits a request only when its whole prompt and output fit beside what the
    running prompts (those in flight in a pipeline too) and outputs still need: on tight
    pools no prompt is preempted half-way and preemptions stay rare (the order admitted on
    the first chunk alone at first: 324 of 507 preemptions, half-prefilled prompts among
    them, with 2 pipeline stages on such seeds)."""
    from sim.policies import NoSpeculation
    from sim.slots import FILLED, TARGET

    mid = []
    preempt = sim.replica.Replica.preempt

    def on_preempt(r, s):
        mid.append(int(r.state[s, FILLED]) < int(r.state[s, TARGET]))
        return preempt(r, s)

    monkeypatch.setattr(sim.replica.Replica, "preempt", on_preempt)
    requests = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(2, 16))
        prompt, output = rng.integers(20, 200, n), rng.integers(1, 50, n)
        stages = 2 + seed % 2
        blocks = int(-(-(int((prompt + output).max()) + 12) // 16)) + 1 + int(rng.integers(0, 8))
        s = setup(table(np.sort(rng.uniform(0, 0.05, n)), prompt, output), policy=NoSpeculation,
                  blocks=blocks, max_num_seqs=8, max_batched_tokens=64, chunked=True, chunk=64,
                  seed=seed, cost=FakeCost(stages=stages), order="prefill_first")
        res = simulate(replace(s, pipeline_stages=stages), path=engine_path)
        assert all(r.finished and r.emitted_tokens == r.output_tokens for r in res.requests)
        requests += n
    assert not any(mid)  # no prompt preempted half-way
    assert len(mid) < 0.1 * requests


# -- vLLM v1's rules by release (docs/background.md, Scheduling) -----------------------------

@pytest.mark.parametrize("release, reserve", [("0.33", None), ("0.20", None),
                                              ("0.11", None), ("0.33", False)])
def test_a_request_is_admitted_only_when_its_whole_prompt_fits_from_0_20(release, reserve,
                                                                         engine_path):
    """An 8-block pool. A (40-token prompt, 20 out) holds 3 blocks from its first decode and
    4 from 49 tokens on. B (96-token prompt: 6 blocks) arrives during A's prefill. From
    0.20 (``scheduler_reserve_full_isl``) B waits until 6 blocks are free, after A leaves,
    and is never preempted; 0.11 admits its first 32-token chunk (2 blocks) at once, B's
    chunks then outgrow the pool and B, the last in ``running``, is preempted; so does
    0.33 with ``--no-scheduler-reserve-full-isl``."""
    s = setup(table([0.0, 0.001], [40, 96], [20, 2]), blocks=8, max_num_seqs=2,
              max_batched_tokens=64, chunked=True, chunk=32, vllm_release=release)
    s = replace(s, limits=replace(s.limits, reserve_full_isl=reserve))
    a, b = simulate(s, path=engine_path).requests
    assert a.finished and b.finished and a.preemptions == 0
    if release == "0.11" or reserve is False:
        assert b.first_scheduled_at < a.finished_at and b.preemptions >= 1
    else:
        assert b.first_scheduled_at >= a.finished_at and b.preemptions == 0


@pytest.mark.parametrize("release, blocks", [("0.33", 2), ("0.20", 1), ("0.11", 1)])
def test_a_new_request_reserves_lookahead_slots_in_0_33(release, blocks, engine_path):
    """Two 16-token prompts with γ = 4 drafts per verify; B arrives during A's prefill and
    is admitted beside A's first verify (A: 16 + 5 tokens and 4 lookahead slots, 2 blocks).
    0.33 gives B blocks for its prompt and 4 lookahead slots (ceil(20 / 16) = 2), as it
    gives a running request; 0.11 and 0.20 gave a request with no computed tokens none (1
    block)."""
    s = setup(table([0.0, 0.0005], [16, 16], [8, 8]), policy=lambda: FixedGamma(4),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), max_batched_tokens=64,
              vllm_release=release)
    second = simulate(s, path=engine_path).iterations[1]
    assert second.decode_seqs == 1 and second.prefill_tokens == 16
    assert second.kv_blocks_used == 2 + blocks


@pytest.mark.parametrize("release, chunks", [("0.33", [4, 32, 68]),
                                             ("0.20", [4, 32, 32, 32, 4])])
def test_a_lone_request_is_not_capped_by_the_long_prefill_threshold_in_0_33(release, chunks,
                                                                           engine_path):
    """``chunk_tokens`` (``long_prefill_token_threshold``) 32, a 128-token budget. A
    (4-token prompt, 2 out) prefills; B (100-token prompt) arrives meanwhile and gets 32
    tokens beside A's last decode. Then B is alone: 0.33 caps nobody when a step starts
    with one request running or waiting in all, so B prefills its last 68 tokens at once;
    0.20 cut it to 32-token chunks."""
    s = setup(table([0.0, 0.0005], [4, 100], [2, 2]), max_batched_tokens=128, chunked=True,
              chunk=32, vllm_release=release)
    res = simulate(s, path=engine_path)
    assert [it.prefill_tokens for it in res.iterations if it.prefill_tokens] == chunks


@pytest.mark.parametrize("release", ["0.33", "0.11"])
def test_the_long_prefill_threshold_cuts_a_verify_too(release, engine_path):
    """Two requests decoding with γ = 7 (verifies of 8 tokens) under ``chunk_tokens`` 4:
    vLLM caps every running request's tokens, a verify's too, so each verify keeps 3 of
    its 7 draft tokens (in every release; 0.33 only spares a lone request)."""
    s = setup(table([0.0, 0.0], [4, 4], [9, 9]), policy=lambda: FixedGamma(7),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), max_batched_tokens=64,
              chunked=True, chunk=4, vllm_release=release)
    res = simulate(s, path=engine_path)
    dec = _decode_iterations(res)
    assert dec and all(it.drafted_tokens == 3 * it.decode_seqs for it in dec)
    assert all(r.accepted_tokens == 3 * (r.drafted_tokens // 3) for r in res.requests)


@pytest.mark.parametrize("release, verify, drafted", [("0.33", 12, 9), ("0.20", 11, 8),
                                                      ("0.11", 15, 12)])
def test_a_draft_model_takes_an_input_slot_per_scheduled_request(release, verify, drafted,
                                                                 engine_path):
    """Three 3-token prompts, then three verifies of 1 + γ=4 tokens with a draft model
    (``max_num_new_slots_for_drafting`` 1) under a 15-token budget and max_num_seqs 4.
    0.33 charges each scheduled request its tokens and one slot: 5 + 1, 5 + 1, then 2
    tokens (one guess kept). 0.20 took max_num_seqs slots off the budget up front (11
    tokens: 5, 5, 1). 0.11 charged none (5, 5, 5)."""
    s = setup(table([0.0] * 3, [3] * 3, [20] * 3), policy=lambda: FixedGamma(4),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), max_batched_tokens=15,
              max_num_seqs=4, chunked=True, chunk=15, vllm_release=release)
    res = simulate(s, path=engine_path)
    assert res.iterations[0].prefill_tokens == 9
    first = _decode_iterations(res)[0]
    assert (first.decode_seqs, first.verify_tokens, first.drafted_tokens) == (3, verify,
                                                                              drafted)
    assert all(r.finished and r.emitted_tokens == 20 for r in res.requests)


@pytest.mark.parametrize("release, chunks", [("0.33", [3, 5, 1]), ("0.20", [3, 5, 1]),
                                             ("0.11", [3, 6])])
def test_an_admission_pays_the_draft_models_input_slot_too(release, chunks, engine_path):
    """A 12-token budget, max_num_seqs 2, a draft model. A (3-token prompt) verifies 1 +
    γ=4 tokens; B (6-token prompt) arrives during A's prefill and is admitted beside A's
    first verify: 0.33 leaves it 12 - (5 + 1) - 1 = 5 tokens; 0.20's budget was 12 - 2
    slots (5 after A's verify); 0.11 gave it all 6."""
    s = setup(table([0.0, 0.0005], [3, 6], [20, 2]), policy=lambda: FixedGamma(4),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), max_batched_tokens=12,
              max_num_seqs=2, chunked=True, chunk=12, vllm_release=release)
    res = simulate(s, path=engine_path)
    assert [it.prefill_tokens for it in res.iterations if it.prefill_tokens] == chunks


@pytest.mark.parametrize("release, budget, padded", [("0.33", 64, True), ("0.33", 12, True),
                                                     ("0.33", 11, False), ("0.20", 64, False)])
def test_a_one_token_admission_is_padded_to_a_verify_in_0_33(release, budget, padded,
                                                             engine_path):
    """A (4-token prompt) then verifies 1 + γ=4 tokens with a draft model (one input slot
    each); B, a one-token prompt, arrives during A's prefill. 0.33 pads B's admission
    beside A's first verify to 1 + 4 tokens, the 4 placeholder drafts priced and rejected
    (vLLM's "pad new decode requests", for one CUDA-graph shape): the iteration carries
    5 + 5 verify tokens and 4 drafted (A's: the placeholders are priced, not counted as
    drafted; vLLM's metrics count them as one draft of 4 rejected tokens).
    Under a 12-token budget B just fits (5 tokens and a slot each); under 11 not, and
    vLLM would rather not admit it than admit it unpadded: B waits until A has left
    and is then admitted alone, unpadded (nobody else runs). 0.20 admits it unpadded."""
    s = setup(table([0.0, 0.0005], [4, 1], [8, 3]), policy=lambda: FixedGamma(4),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), max_batched_tokens=budget,
              max_num_seqs=2, chunked=True, chunk=budget, vllm_release=release)
    res = simulate(s, path=engine_path)
    second = res.iterations[1]
    b = res.requests[1]
    assert all(r.finished for r in res.requests)
    if padded:
        assert (second.prefill_tokens, second.verify_tokens, second.drafted_tokens) == (1, 9, 4)
        assert b.first_token_at == second.start_at + second.duration_s
        assert (b.drafted_tokens, b.verify_steps) == (4, 1)  # one verify of 4 drafts
    elif release == "0.33":  # B waits until A has left
        assert (second.prefill_tokens, second.verify_tokens) == (0, 5)
        assert b.first_scheduled_at >= res.requests[0].finished_at
    else:
        assert (second.prefill_tokens, second.verify_tokens, second.drafted_tokens) == (1, 5, 4)
    assert sum(r.drafted_tokens for r in res.requests) == sum(
        it.drafted_tokens for it in res.iterations)


def test_no_padding_beside_a_continuing_prefill_or_under_a_batch_ladder(engine_path):
    """vLLM 0.33 pads a one-token admission only in a step where no running request's
    prefill continues, and only without ``num_speculative_tokens_per_batch_size``. A
    (4-token prompt) and C (40-token prompt, chunks of 16) start together; B, one token,
    arrives during the first step: beside A's verify and C's second chunk it is admitted
    unpadded. Alone beside A's verify (no C) but under a batch ladder, unpadded too."""
    s = setup(table([0.0, 0.0, 0.0005], [4, 40, 1], [8, 4, 3]), policy=lambda: FixedGamma(4),
              draft=FakeCost(0.001, 0.0), acceptance=AcceptAll(), max_batched_tokens=64,
              max_num_seqs=3, chunked=True, chunk=16)
    second = simulate(s, path=engine_path).iterations[1]
    assert (second.prefill_tokens, second.verify_tokens) == (1 + 16, 5)
    s = setup(table([0.0, 0.0005], [4, 1], [8, 3]),
              policy=lambda: BatchLadder([[1, 8, 4]]), draft=FakeCost(0.001, 0.0),
              acceptance=AcceptAll(), max_batched_tokens=64, max_num_seqs=2, chunked=True,
              chunk=64)
    second = simulate(s, path=engine_path).iterations[1]
    assert (second.prefill_tokens, second.verify_tokens) == (1, 5)
