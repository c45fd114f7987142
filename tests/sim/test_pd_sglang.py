"""SGLang's P/D flow (``sim.pd_sglang``): the decode side allocates before the prefill
starts, the KV leaves chunk by chunk, the first token rides along; conservation of
requests and KV under it, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from sim.build import setups
from sim.loading import load_scenario, repo_root
from sim.runner import run_scenario
from specdec.errors import UserError
from tests.sim.test_disagg import BASE, assert_same_records_twice

SGLANG = [*BASE, "scheduler.order=prefill_first"]  # flow null: SGLang's, with its order
# Llama-3-8B's KV a token on one GPU, InfiniBand NDR's bandwidth and latency
# (test_disagg's hand check)
PER_TOKEN, BANDWIDTH, LATENCY = 131_072, 50e9, 3e-6


def _run(*sets, base=SGLANG):
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", [*base, *sets])
    return {v.name: v for v in run_scenario(sc).variants}


def _conserved(v) -> None:
    r, t = v.requests.columns, v.transfers.columns
    assert r["finished"].all()
    assert (r["emitted_tokens"] == r["output_tokens"]).all()
    assert (t["decode_replica"] == r["replica"]).all()
    # prefilled once, on the prefill pool; the decode pool recomputes nothing but what a
    # preemption there made it
    pre = v.prefill_iteration_rows.columns
    assert pre["prefill_tokens"].sum() == r["prompt_tokens"].sum()
    assert v.iterations.columns["prefill_tokens"].sum() == r["recomputed_tokens"].sum()
    # every prompt token's KV sent once, in one or more chunks
    assert (t["transfers"] >= 1).all()
    np.testing.assert_allclose(t["kv_bytes"], r["prompt_tokens"] * (PER_TOKEN + (
        4096 if v.name == "k3" else 0)), rtol=1e-12)
    # allocated on the decode side, then prefilled, sent, arrived, first token
    assert (t["load_start_at"] >= r["arrival_at"]).all()
    assert (r["first_scheduled_at"] >= t["load_start_at"]).all()
    assert (t["sent_at"] > r["first_scheduled_at"]).all()
    assert (t["kv_ready_at"] > t["prefill_done_at"]).all()
    assert (r["first_token_at"] >= t["kv_ready_at"]).all()


def test_every_request_is_prefilled_once_and_its_kv_sent_once():
    for v in _run().values():
        _conserved(v)


def test_under_decode_side_preemption_too():
    # SGLang reserves 512 tokens a request and a request's whole output against the
    # tokens the running ones hold: outputs longer than that, in a small pool, outrun it
    res = _run("disaggregation.decode.num_gpu_blocks_override=300", "workload.rate_per_s=40",
               "workload.output={kind: fixed, tokens: 1500}", "run.requests=30")
    assert sum(int(v.requests.columns["preemptions"].sum()) for v in res.values()) > 0
    for v in res.values():
        _conserved(v)


def test_a_prompt_leaves_chunk_by_chunk_and_its_first_token_comes_with_the_last():
    """By hand: one request at a time, a 1,000-token prompt in chunks of 256 (16-token
    pages): its KV leaves in four sends (256, 256, 256 as each chunk ends, then 232 with
    the first token), the last landing one 232-token transfer after the prefill; the decode
    replica, idle, runs it at once, so its first token is out then. The prefill started
    on arrival (the idle decode replica allocated at once)."""
    v = _run("workload.rate_per_s=0.5", "run.requests=6",
             "workload.prompt={kind: fixed, tokens: 1000}",
             "scheduler.chunk_tokens=256", "scheduler.max_batched_tokens=256")["none"]
    r, t = v.requests.columns, v.transfers.columns
    assert (t["transfers"] == 4).all()
    np.testing.assert_allclose(t["kv_ready_at"] - t["prefill_done_at"],
                               LATENCY + 232 * PER_TOKEN / BANDWIDTH, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(r["first_token_at"], t["kv_ready_at"])
    np.testing.assert_array_equal(t["load_start_at"], r["arrival_at"])
    np.testing.assert_array_equal(r["first_scheduled_at"], r["arrival_at"])
    # the last send leaves as the prefill ends (the link idle: the earlier sends, 0.67 ms
    # each, were done within the next chunk's prefill)
    np.testing.assert_array_equal(t["sent_at"], t["prefill_done_at"])
    # vLLM's flow: the whole prompt crosses after the prefill, and the decode replica
    # recomputes the last prompt token for the first: later
    w = _run("workload.rate_per_s=0.5", "run.requests=6",
             "workload.prompt={kind: fixed, tokens: 1000}",
             "scheduler.chunk_tokens=256", "scheduler.max_batched_tokens=256",
             "disaggregation.flow=vllm")["none"]
    assert (w.transfers.columns["transfers"] == 1).all()
    ttft = {k: x.requests.columns["first_token_at"] - x.requests.columns["arrival_at"]
            for k, x in (("sglang", v), ("vllm", w))}
    assert (ttft["sglang"] < ttft["vllm"]).all()


def test_the_prefill_waits_for_the_decode_side_to_allocate():
    """By hand: a decode replica of 100 blocks (1,600 tokens) and 600-token prompts. The
    first request needs max(600 + 512, 600 + 60) = 1,112 tokens of 1,600 free and is
    allocated 38 blocks; the next then finds 992 tokens less 512 for the first (active),
    480, short of 1,112, and waits until the first finishes. So no two requests are ever
    allocated at once, and each is allocated (and prefilled) only when the one before has
    finished on the decode side."""
    v = _run("disaggregation.decode={replicas: 1, num_gpu_blocks_override: 100}",
             "workload.rate_per_s=20", "run.requests=12",
             "workload.prompt={kind: fixed, tokens: 600}",
             "workload.output={kind: fixed, tokens: 60}")["none"]
    r, t = v.requests.columns, v.transfers.columns
    order = np.argsort(t["load_start_at"], kind="stable")
    start, end = t["load_start_at"][order], r["finished_at"][order]
    np.testing.assert_array_equal(start[1:], np.maximum(end[:-1], r["arrival_at"][order][1:]))
    assert (start[1:] > r["arrival_at"][order][1:]).sum() >= 8  # most waited
    assert (r["first_scheduled_at"] >= t["load_start_at"]).all()


def test_a_small_decode_batch_allocates_for_twice_as_many_more():
    """SGLang's default extra request slots: a decode server of max_running_requests 2
    allocates for up to 2 + 4 requests (running, in transfer or landed); with ample KV
    and a burst of arrivals it fills them all and no more."""
    v = _run("disaggregation.decode={replicas: 1, max_num_seqs: 2}",
             "workload.rate_per_s=200", "run.requests=40")["none"]
    r, t = v.requests.columns, v.transfers.columns
    events = np.concatenate((t["load_start_at"], r["finished_at"]))
    step = np.concatenate((np.ones(len(r["id"])), -np.ones(len(r["id"]))))
    order = np.lexsort((step, events))  # at one time: finishes before allocations
    held = np.cumsum(step[order])
    assert held.max() == 6


def test_the_default_flow_follows_the_scheduler_order():
    """No ``flow``: SGLang's order runs SGLang's flow (nothing recomputed on the decode
    side), vLLM's order vLLM's (the last prompt token recomputed there)."""
    s = _run("run.requests=30")["none"]
    v = _run("run.requests=30", base=BASE)["none"]
    assert s.iterations.columns["prefill_tokens"].sum() == 0
    assert v.iterations.columns["prefill_tokens"].sum() == 30


def test_the_same_seed_gives_the_same_records():
    assert_same_records_twice(load_scenario(repo_root() / "scenarios" / "default.yaml",
                                            SGLANG))


def test_a_draft_left_behind_is_vllms_alone():
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                       [*SGLANG, "disaggregation.draft_kv=recompute"])
    with pytest.raises(UserError, match="disaggregation.draft_kv: 'recompute' is vLLM's"):
        setups(sc)
