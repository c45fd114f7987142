"""Structured output (``sim.grammar``): drafts a grammar forbids are dropped before the verify
(vLLM without async scheduling) or verified and rejected (vLLM with it, SGLang), never
accepted and never counted as drafted; the draft is priced at what it drafted."""

from __future__ import annotations

import numpy as np
import pytest

from sim.build import setups
from sim.loading import load_scenario, repo_root
from sim.runner import run_scenario
from specdec.errors import UserError

K, RATE = 4, 0.2
# every draft the grammar allows is accepted (alpha 1), so a structured request's accepted
# drafts a step are exactly those the grammar allows: E[min(K, G - 1)], G geometric(RATE)
ALLOWED = sum((1 - RATE) ** i for i in range(1, K + 1))
BASE = [
    "models={target: llama-3.1-8b, method: eagle3, draft: null}",
    "deployment={gpu: h100}",
    "workload={arrivals: poisson, rate_per_s: 8, output: {kind: fixed, tokens: 200}}",
    "acceptance={kind: iid, alpha: 1.0}",
    f"variants=[{{name: k, policy: {{kind: fixed, gamma: {K}}}}}]",
    "run.requests=150",
]


def _run(*sets):
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", [*BASE, *sets])
    return run_scenario(sc).variants[0]


def _accepted_per_verify(v) -> float:
    r = v.requests.columns
    return float(r["accepted_tokens"].sum() / r["verify_steps"].sum())


@pytest.mark.parametrize("mode", ["dropped", "rejected"])
def test_accepted_drafts_are_the_ones_the_grammar_allows(mode):
    """With every allowed draft accepted, a step accepts min(K, G - 1) drafts: 2.3616 in
    expectation (statistical: ~30,000 verifies, seed 0; tolerance 2%)."""
    sets = [f"structured_output={{invalid_draft_rate: {RATE}, invalid_drafts: {mode}}}"]
    if mode == "rejected":
        sets.append("scheduler.async_scheduling=true")
    v = _run(*sets)
    assert _accepted_per_verify(v) == pytest.approx(ALLOWED, rel=0.02)
    r = v.requests.columns
    # a forbidden draft is not counted as drafted: every counted draft was accepted
    assert (r["drafted_tokens"] == r["accepted_tokens"]).all()
    it = v.iterations.columns
    decode_only = (it["prefill_tokens"] == 0) & (it["decode_seqs"] > 0)
    verify = it["verify_tokens"][decode_only]
    width = (K + 1) * it["decode_seqs"][decode_only]
    if mode == "dropped":  # the verify carries the allowed drafts only
        assert (verify <= width).all() and (verify < width).mean() > 0.5
        # vLLM's drafted tokens per draft step (a step whose drafts were all dropped counts
        # none): E[L | L >= 1] = (1 - (1 - q)^K) / q, what docs/background.md solves for q
        per_step = r["drafted_tokens"].sum() / r["draft_steps"].sum()
        assert per_step == pytest.approx((1 - (1 - RATE) ** K) / RATE, rel=0.02)
    else:  # every slot verified, the forbidden drafts rejected (async scheduling also
        # prices the slots of requests that finished before their step ran: more, not less)
        assert (verify >= width).all()


def test_a_grammar_that_forbids_nothing_changes_nothing():
    plain = _run()
    for sets in (["structured_output={invalid_draft_rate: 0}"],
                 ["structured_output={invalid_draft_rate: 0.5, share: 0}"]):
        v = _run(*sets)
        for name in ("requests", "iterations"):
            a, b = getattr(plain, name).columns, getattr(v, name).columns
            for col in a:
                np.testing.assert_array_equal(a[col], b[col], err_msg=f"{name}.{col}")


def test_the_share_of_structured_requests():
    """share 0.5: about half the requests are under the grammar, and only theirs lose
    drafts; the same requests in every variant (one stream of the run's seed)."""
    v = _run("structured_output={invalid_draft_rate: 0.5, share: 0.5}")
    r = v.requests.columns
    per_verify = r["accepted_tokens"] / r["verify_steps"]
    free = per_verify > K - 0.5  # alpha 1: an unconstrained request accepts all K (bar its end)
    assert 0.35 < free.mean() < 0.65
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                       [*BASE, "structured_output={invalid_draft_rate: 0.5, share: 0.5}",
                        "variants=[{name: a, policy: {kind: fixed, gamma: 4}}, "
                        "{name: b, policy: {kind: fixed, gamma: 2}}]"])
    grammars = [s.grammar for _, s in setups(sc)]
    np.testing.assert_array_equal(grammars[0].structured, grammars[1].structured)


def test_the_draft_is_priced_at_what_it_drafted():
    """Dropped drafts leave the verify, not the draft: ``price`` with ``drafted`` gives the
    draft of the full rows and the verify of the cut ones."""
    import simpy

    from sim.cluster import wire

    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", BASE)
    cluster = wire(simpy.Environment(), setups(sc)[0][1])
    pricer = cluster.replicas[0].pricer
    ctx = np.array([300, 500, 900], dtype=np.int64)
    full = np.ones((3, K), dtype=np.int64)
    cut = full.copy()
    cut[0, 1:] = 0
    cut[2, :] = 0
    none = np.zeros(0, dtype=np.int64)
    draft_s, verify_s, _ = pricer.price(cut, ctx, none, none, drafted=full)
    assert draft_s == pricer.price(full, ctx, none, none)[0]
    assert verify_s == pricer.price(cut, ctx, none, none)[1]
    assert pricer.price(cut, ctx, none, none)[0] < draft_s
    # one target pass priced, the verify's: the drafted rows' own verify is never priced
    calls = []
    target = pricer.target
    def counted(f):
        def count(*args, **kw):
            calls.append(args)
            return f(*args, **kw)
        return count

    for name in ("pass_seconds", "pass_cost"):
        setattr(target, name, counted(getattr(target, name)))
    pricer.price(cut, ctx, none, none, drafted=full)
    assert len(calls) == 1
    np.testing.assert_array_equal(calls[0][0], 1 + cut.sum(axis=1))


def test_a_structured_run_is_deterministic():
    sets = ["structured_output={invalid_draft_rate: 0.3, share: 0.7}"]
    a, b = _run(*sets), _run(*sets)
    for col, values in a.iterations.columns.items():
        np.testing.assert_array_equal(values, b.iterations.columns[col], err_msg=col)


@pytest.mark.parametrize("sets, match", [
    (["structured_output={invalid_draft_rate: 1}"], "invalid_draft_rate"),
    (["structured_output={share: 0.5}"], "invalid_draft_rate"),
    (["structured_output={invalid_draft_rate: 0.1, share: 2}"], "share"),
    (["structured_output={invalid_draft_rate: 0.1, invalid_drafts: dropped}",
      "scheduler.async_scheduling=true"], "only without async scheduling"),
    (["structured_output={invalid_draft_rate: 0.1}",
      "variants=[{name: t, policy: {kind: tree, steps: 3, topk: 2}}]"], "draft trees"),
    (["structured_output={invalid_draft_rate: 0.1}", "deployment.pp=2"],
     "deployment.pp: pipeline stages with structured_output"),
])
def test_what_structured_output_cannot_combine_with_is_refused(sets, match):
    with pytest.raises(UserError, match=match):
        load_scenario(repo_root() / "scenarios" / "default.yaml", [*BASE, *sets])


@pytest.mark.parametrize("sets, preempts", [
    ([], True),  # dropped
    (["scheduler.async_scheduling=true"], True),  # rejected; requests that end mid-step
    # SGLang's order, rejected (it admits against its reserved output: no preemption here)
    (["scheduler.order=prefill_first", "scheduler.chunk_tokens=4096"], False),
])
def test_every_request_finishes_under_a_grammar_and_preemption(sets, preempts):
    """A KV pool that holds a few prompts: preemptions and recomputes beside the grammar's
    cuts; every request still emits exactly its output, and no counted draft exceeds the
    depth drafted."""
    v = _run("structured_output={invalid_draft_rate: 0.3, share: 0.6}",
             "workload={arrivals: poisson, rate_per_s: 200, output: {kind: uniform, low: 20, "
             "high: 120}}", "scheduler.num_gpu_blocks_override=400", "run.requests=80",
             *sets)
    r = v.requests.columns
    assert r["finished"].all()
    assert (r["emitted_tokens"] == r["output_tokens"]).all()
    assert (r["preemptions"] > 0).any() == preempts
    assert (r["drafted_tokens"] <= K * r["draft_steps"]).all()
    assert (r["accepted_tokens"] <= r["drafted_tokens"]).all()
