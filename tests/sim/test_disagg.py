"""Disaggregated prefill and decode (``sim.disagg``): the KV transfer's price, conservation of
requests and transfers (under decode-side preemption too), the draft's prefill on the decode
side when its KV is left behind, and the scenario's refusals."""

from __future__ import annotations

import numpy as np
import pytest

from sim.build import setups
from sim.loading import load_scenario, repo_root
from sim.runner import run_scenario, simulate_variants
from specdec.errors import UserError

# Llama-3-8B on H100s: 1 prefill and 2 decode replicas, EAGLE-3 drafting 3 tokens
BASE = [
    "models={target: llama-3-8b, method: eagle3}",
    "deployment={gpu: h100, tp: 1}",
    "disaggregation={prefill: {replicas: 1}, decode: {replicas: 2}}",
    "workload={arrivals: poisson, rate_per_s: 8, "
    "prompt: {kind: lognormal, median_tokens: 600, sigma: 0.5, max_tokens: 3000}, "
    "output: {kind: lognormal, median_tokens: 60, sigma: 0.5, max_tokens: 400}}",
    "acceptance={kind: iid, alpha: 0.7}",
    "variants=[{name: none, policy: {kind: none}}, "
    "{name: k3, policy: {kind: fixed, gamma: 3}}]",
    "run.requests=120",
]


def _run(*sets):
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", [*BASE, *sets])
    return {v.name: v for v in run_scenario(sc).variants}


def test_a_transfer_takes_the_bytes_over_the_bandwidth_plus_the_latency():
    """By hand: Llama-3-8B's KV is 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes =
    131,072 bytes a token on its one GPU; the H100's node link, InfiniBand NDR, carries
    50 GB/s with 3 µs a message (hardware/data/links.yaml). Without drafting nothing else
    crosses."""
    per_token, bandwidth, latency = 131_072, 50e9, 3e-6
    v = _run()["none"]
    t = v.transfers.columns
    prompt = v.requests.columns["prompt_tokens"]
    # (exact but for the rounding of the clock's absolute times, ~1e-15 s)
    np.testing.assert_allclose(t["kv_ready_at"] - t["sent_at"],
                               latency + prompt * per_token / bandwidth, rtol=0, atol=1e-12)
    np.testing.assert_allclose(t["kv_bytes"], prompt * per_token, rtol=1e-12)
    # the draft's KV crosses too where it is transferred (EAGLE-3's one layer: 2 x 8 x 128
    # x 2 bytes a token)
    t3 = _run()["k3"].transfers.columns
    np.testing.assert_allclose(t3["kv_bytes"], prompt * (per_token + 4096), rtol=1e-12)


def _conserved(v, preempting: bool = False) -> None:
    r, t = v.requests.columns, v.transfers.columns
    n = len(r["id"])
    assert r["finished"].all()
    assert (r["emitted_tokens"] == r["output_tokens"]).all()
    assert (t["transfers"] == 1).all()  # every KV sent once: none lost, none twice
    assert set(t["prefill_replica"].tolist()) == {0}
    assert (t["decode_replica"] == r["replica"]).all()
    assert set(r["replica"].tolist()) == {0, 1}
    # prefilled once: the prefill pool's prompt tokens are the prompts, no more
    pre = v.prefill_iteration_rows.columns
    assert pre["prefill_tokens"].sum() == r["prompt_tokens"].sum()
    assert pre["emitted_tokens"].sum() == n  # the one token each, dropped
    # the decode pool prefills one token a request (the last prompt token, recomputed to
    # sample the first output token) plus what preempted requests recomputed
    dec = v.iterations.columns
    assert dec["prefill_tokens"].sum() == n + r["recomputed_tokens"].sum()
    assert (r["preemptions"].sum() > 0) == preempting
    # times in order: arrival, prefill, KV loaded, first token on the decode replica
    assert (r["first_scheduled_at"] >= r["arrival_at"]).all()
    assert (t["prefill_done_at"] > r["first_scheduled_at"]).all()
    assert (t["load_start_at"] >= t["prefill_done_at"]).all()
    assert (t["sent_at"] >= t["load_start_at"]).all()
    assert (r["first_token_at"] > t["kv_ready_at"]).all()


def test_every_request_is_prefilled_once_and_decoded_once():
    for v in _run().values():
        _conserved(v)


def test_transfers_are_neither_lost_nor_duplicated_when_the_decode_side_preempts():
    # a decode pool too small for the load: its requests are preempted and recompute there
    for v in _run("disaggregation.decode.num_gpu_blocks_override=300",
                  "workload.rate_per_s=40").values():
        _conserved(v, preempting=True)


def test_a_draft_whose_kv_stays_behind_prefills_the_prompt_on_the_decode_side():
    """With ``draft_kv: recompute`` the decode replica's draft runs the whole prompt in the
    request's first iteration there: the iteration's draft_s, the TTFT and the transfer
    record show it. At one request at a time the runs differ only there (and in the
    draft's KV not crossing the link)."""
    sets = ["workload.rate_per_s=0.5", "run.requests=20"]
    sent, behind = _run(*sets)["k3"], _run(*sets, "disaggregation.draft_kv=recompute")["k3"]
    prompt = sent.requests.columns["prompt_tokens"]
    assert (sent.transfers.columns["draft_prefill_tokens"] == 0).all()
    np.testing.assert_array_equal(behind.transfers.columns["draft_prefill_tokens"], prompt)
    ttft = {k: v.requests.columns["first_token_at"] - v.requests.columns["arrival_at"]
            for k, v in (("sent", sent), ("behind", behind))}
    assert (ttft["behind"] > ttft["sent"]).all()
    # the first decode-side iteration of each request (its one-token prefill) drafts more
    first = {k: v.iterations.columns for k, v in (("sent", sent), ("behind", behind))}
    admits = {k: c["prefill_tokens"] > 0 for k, c in first.items()}
    assert (first["behind"]["draft_s"][admits["behind"]]
            > first["sent"]["draft_s"][admits["sent"]]).all()


def test_the_same_seed_gives_the_same_records():
    assert_same_records_twice(load_scenario(repo_root() / "scenarios" / "default.yaml", BASE))


def assert_same_records_twice(sc) -> None:
    """P/D scenario ``sc`` simulated twice gives the same records, transfers and prefill
    iterations included."""
    one, two = simulate_variants(setups(sc), None), simulate_variants(setups(sc), None)
    for a, b in zip(one, two, strict=True):
        for kind in ("requests", "iterations", "transfers", "prefill_iteration_rows"):
            ca, cb = getattr(a, kind).columns, getattr(b, kind).columns
            for k in ca:
                np.testing.assert_array_equal(ca[k], cb[k], err_msg=f"{kind} {k}")


def test_the_shipped_pd_scenario_runs_and_mtp_pays_on_its_decode_pool():
    sc = load_scenario(repo_root() / "scenarios" / "pd-deepseek-v3-mtp.yaml",
                       ["run.requests=60"])
    res = run_scenario(sc)
    by = {s["name"]: s for s in res.summaries}
    assert by["mtp"]["speedup_vs_none"] > 1.3
    for s in by.values():
        assert s["finished"] == 60 and s["kv_wait_p50_s"] > s["kv_transfer_p50_s"] > 0


def test_a_closed_loop_sends_to_the_prefill_pool_and_waits_for_the_decode_pool():
    """8 users, none thinking: each request is sent when its user's last one finished on
    a decode replica, and every request is prefilled, sent and decoded once."""
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                       [*BASE, "workload={arrivals: closed_loop, users: 8, think_mean_s: 0.0, "
                        "prompt: {kind: fixed, tokens: 300}, output: {kind: fixed, tokens: 20}}",
                        "run.requests=60"])
    for v in run_scenario(sc).variants:
        _conserved(v)
        r = v.requests.columns
        arrive, end = np.sort(r["arrival_at"]), np.sort(r["finished_at"])
        # the 9th request is sent when the first finishes, the 10th when the second ...
        np.testing.assert_array_equal(arrive[8:], end[:-8])


@pytest.mark.parametrize("sets,problem", [
    (["deployment.replicas=2"], "deployment.replicas: with disaggregation the pools give"),
    (["disaggregation.link=ib-nope"], "disaggregation.link: unknown link 'ib-nope'"),
    (["disaggregation.prefill.compute_dtype=fp8"],
     "disaggregation.prefill: compute_dtype: fp8 (W8A8) needs weight_bits 8"),
    (["scheduler.async_scheduling=true"],
     "scheduler.async_scheduling: async scheduling with disaggregation is not modelled"),
    (["deployment.pp=2"], "deployment.pp: pipeline stages with disaggregation"),
])
def test_what_a_pd_scenario_cannot_be_is_refused_by_name(sets, problem):
    with pytest.raises((UserError, ValueError), match=problem.replace("(", r"\(")
                       .replace(")", r"\)")):
        sc = load_scenario(repo_root() / "scenarios" / "default.yaml", [*BASE, *sets])
        setups(sc)
