"""Resolving scenarios: every arrival kind, replayed request traces, horizons, task mixes."""

import numpy as np
import pytest

from sim.build import setups
from sim.loading import load_scenario
from sim.runner import run_scenario
from specdec.errors import UserError

SMALL = ["variants=[{name: none, policy: {kind: none}}]"]


@pytest.mark.parametrize("arrivals", [
    "{arrivals: poisson, rate_per_s: 5}",
    "{arrivals: gamma, rate_per_s: 5, cv: 2}",
    "{arrivals: onoff, on_rate_per_s: 10, off_rate_per_s: 0, on_mean_s: 1, off_mean_s: 1}",
    "{arrivals: offline}",
    "{arrivals: closed_loop, users: 4, think_mean_s: 0.1}",
])
def test_every_arrival_kind_runs(arrivals):
    sc = load_scenario(None, [*SMALL, f"workload={arrivals}", "run.requests=30"])
    res = run_scenario(sc)
    reqs = res.variants[0].requests
    assert len(reqs) == 30 and all(r.finished for r in reqs)
    times = [r.arrival_at for r in reqs]
    assert times == sorted(times)


def test_replayed_request_trace(tmp_path):
    from workloads import RequestSpec, write_request_csv

    path = tmp_path / "trace.csv"
    specs = [RequestSpec(i, 0.1 * i, 10 + i, 5 + i) for i in range(12)]
    write_request_csv(path, specs)
    sc = load_scenario(None, [*SMALL, f"workload={{arrivals: replay, file: {path}}}",
                              "run.requests=10"])
    (name, setup), = setups(sc)
    assert setup.table.arrival_at.tolist() == pytest.approx([0.1 * i for i in range(10)])
    assert setup.table.prompt_tokens.tolist() == [10 + i for i in range(10)]
    res = run_scenario(sc)
    assert [r.output_tokens for r in res.variants[0].requests] == [5 + i for i in range(10)]


def test_horizon_only_runs_generate_arrivals_up_to_the_horizon():
    sc = load_scenario(None, [*SMALL, "run.requests=null", "run.horizon_s=3",
                              "workload.rate_per_s=10"])
    res = run_scenario(sc)
    v = res.variants[0]
    assert v.end_at == 3.0
    assert all(r.arrival_at < 3.0 for r in v.requests)
    assert 15 < len(v.requests) < 50  # ~30 Poisson arrivals in 3 s
    assert any(not r.finished for r in v.requests)  # cut off at the horizon


def test_task_mix_labels_requests_and_draws_streams_per_task():
    sc = load_scenario(None, [
        "run.requests=200",
        "acceptance={kind: task_mix, tasks: {easy: {weight: 1, acceptance: {kind: iid, "
        "alpha: 0.95}}, hard: {weight: 1, acceptance: {kind: iid, alpha: 0.2}}}}",
    ])
    (_, setup), _ = setups(sc)
    tasks = setup.table.task
    assert set(np.unique(tasks).tolist()) == {0, 1}
    res = run_scenario(sc)
    spec = res.variants[1].requests
    rate = {t: sum(r.accepted_tokens for r in spec if r.task == t)
            / sum(r.drafted_tokens for r in spec if r.task == t) for t in (0, 1)}
    assert rate[0] > 0.7 > 0.2 > rate[1]


def test_the_workload_layer_errors_name_the_file_and_section():
    sc = load_scenario(None, [*SMALL, "workload={arrivals: replay, file: /nonexistent.csv}"])
    with pytest.raises(UserError, match=r"^x\.yaml: workload: /nonexistent\.csv: cannot read"):
        setups(sc, "x.yaml")


@pytest.mark.parametrize("policy, tokens", [
    ("{kind: fixed, gamma: 5}", 6),
    ("{kind: tree, expansion: [2, 2, 1]}", 1 + 2 + 4 + 4),
    ("{kind: tree, steps: 3, topk: 4}", 1 + 12),
    ("{kind: batch_ladder, ladder: [[1, 4, 6], [5, 256, 2]]}", 7),
    ("{kind: adaptive, max_gamma: 8, max_width: 3}", 1 + 3 * 8),  # <3,1,...,1> at depth 8
])
def test_a_verify_that_cannot_fit_the_token_budget_is_refused_at_build(policy, tokens):
    # a draft model (the default method): vLLM 0.33 takes one input slot per scheduled
    # request beside its tokens; 0.11 took none
    sets = [f"variants=[{{name: v, policy: {policy}}}]", "run.requests=3",
            "scheduler.chunked_prefill=true", "scheduler.chunk_tokens=1"]
    setups(load_scenario(None, [*sets, f"scheduler.max_batched_tokens={tokens + 1}"]),
           "x.yaml")
    sc = load_scenario(None, [*sets, f"scheduler.max_batched_tokens={tokens}"])
    with pytest.raises(UserError, match=rf"max_batched_tokens: {tokens} leaves {tokens - 1} "
                                        rf"tokens a step for a request beside the input slots "
                                        rf"vLLM 0.33 gives draft_model drafting, less than "
                                        rf"variant 'v''s verify of {tokens} tokens$"):
        setups(sc, "x.yaml")
    old = [*sets, 'scheduler.vllm_release="0.11"']
    setups(load_scenario(None, [*old, f"scheduler.max_batched_tokens={tokens}"]), "x.yaml")
    sc = load_scenario(None, [*old, f"scheduler.max_batched_tokens={tokens - 1}"])
    with pytest.raises(UserError, match=rf"max_batched_tokens: must be >= a verify pass of "
                                        rf"{tokens} tokens, got {tokens - 1}"):
        setups(sc, "x.yaml")


# Lecture §7.3's deployment: Llama-3-70B at 8 bits with a Llama-3.2-1B draft on one H200.
SEVENTY_B = ["models.target=llama-3-70b", "models.draft=llama-3.2-1b", "deployment.gpu=h200",
             "deployment.weight_bits=8", "run.requests=3"]


def _draft_pair(draft_bits: int | None):
    from sim.build import cost_models

    extra = [] if draft_bits is None else [f"deployment.draft_weight_bits={draft_bits}"]
    # the paper GPU: these tests check bytes and memory, priced at its eta_memory
    target, drafter, blocks = cost_models(
        load_scenario(None, [*SEVENTY_B, *extra, "deployment.timing=paper"]), True)
    return target, drafter.setup, blocks


def test_the_draft_takes_the_targets_weight_bits_unless_given_its_own():
    from hardware.catalog import load_catalog
    from hardware.cost import CostModel
    from hardware.deployment import Deployment

    assert _draft_pair(None)[1].cost.dep.weight_bits == 8
    assert _draft_pair(8)[1].cost.dep.weight_bits == 8
    target, draft, _ = _draft_pair(16)
    assert (target.dep.weight_bits, draft.cost.dep.weight_bits) == (8, 16)
    assert draft.cost.dep.kv_bits == target.dep.kv_bits == 16  # only the weights change
    # The engine's draft is the cost model a 16-bit 1B on an H200 is, pass for pass.
    cat = load_catalog()
    alone = CostModel(Deployment(cat.model("llama-3.2-1b"), cat.gpu("h200"), weight_bits=16,
                                 timing="paper"), cat)
    new, ctx = np.array([1, 1, 1, 1]), np.array([1024, 900, 17, 3000])
    assert draft.cost.pass_seconds(new, ctx) == alone.pass_seconds(new, ctx)


def test_a_16_bit_draft_pass_streams_twice_the_weight_bytes():
    new, ctx = np.array([1]), np.array([1024])  # one decode token: memory-bound
    p8 = _draft_pair(None)[1].cost.pass_cost(new, ctx)
    p16 = _draft_pair(16)[1].cost.pass_cost(new, ctx)
    assert p8.bound == p16.bound == "memory"
    draft = _draft_pair(16)[1].cost
    streamed = draft.layouts[0].streamed_params  # ~1.2 B: all but the input embedding
    assert p16.hbm_bytes - p8.hbm_bytes == pytest.approx(streamed, rel=1e-12)  # 1 byte more each
    gpu = draft.dep.gpu
    assert p16.memory_s - p8.memory_s == pytest.approx(
        streamed / (gpu.hbm_bytes_per_s * gpu.eta_memory), rel=1e-12)
    assert p16.seconds - p8.seconds == pytest.approx(p16.memory_s - p8.memory_s, rel=1e-12)


@pytest.mark.parametrize("draft_bits", [8, 16])
def test_the_kv_room_counts_a_colocated_draft_at_its_own_bits(draft_bits):
    target, draft, blocks = _draft_pair(draft_bits)
    (w_target,), (w_draft,) = target.resident_weight_bytes(), draft.cost.resident_weight_bytes()
    assert w_draft == draft.cost.layouts[0].stored_bytes(draft_bits)  # embedding at 16 bits
    usable = target.dep.usable_bytes_per_gpu - w_draft - w_target
    per_token = target.kv_bytes_per_token + draft.cost.kv_bytes_per_token  # tp = 1
    assert blocks == int(usable / per_token) // 16
    assert blocks == {8: 10768, 16: 10599}[draft_bits]


# Llama-3-70B and its 1B draft as shipped, but with room for 262,144 positions: a request long
# enough to fill an H200's KV must not first run past the positions the real models have.
LONG_70B = """models:
  llama-3-70b:
    source: "Llama-3-70B with 262,144 positions (a test's long-context stand-in)"
    config: {model_type: llama, hidden_size: 8192, intermediate_size: 28672, num_hidden_layers: 80,
             num_attention_heads: 64, num_key_value_heads: 8, vocab_size: 128256,
             tie_word_embeddings: false, max_position_embeddings: 262144}
  llama-3.2-1b:
    source: "Llama-3.2-1B with 262,144 positions (the same stand-in for the draft)"
    config: {model_type: llama, hidden_size: 2048, intermediate_size: 8192, num_hidden_layers: 16,
             num_attention_heads: 32, num_key_value_heads: 8, head_dim: 64, vocab_size: 128256,
             tie_word_embeddings: true, max_position_embeddings: 262144}
"""


def test_a_request_that_fits_beside_an_8_bit_draft_is_refused_beside_a_16_bit_one(tmp_path):
    # 171_000 + 8 tokens + a 5-token verify = 10_689 blocks of 16: room for 10_768 beside
    # the 8-bit draft, 10_599 beside the 16-bit one, less vLLM v1's null block.
    (tmp_path / "long.yaml").write_text(LONG_70B)
    sets = [*SEVENTY_B, f"deployment.catalog={tmp_path / 'long.yaml'}",
            "workload.prompt={kind: fixed, tokens: 171000}",
            "workload.output={kind: fixed, tokens: 8}",
            "variants=[{name: g4, policy: {kind: fixed, gamma: 4}}]"]
    setups(load_scenario(None, [*sets, "deployment.draft_weight_bits=8"]), "x.yaml")
    sc = load_scenario(None, [*sets, "deployment.draft_weight_bits=16"])
    with pytest.raises(UserError, match=r"^x\.yaml: workload: request 0 \(171000 prompt \+ 8 "
                                        r"output tokens\) needs 10689 KV blocks, but a replica "
                                        r"of llama-3-70b on 1x1 h200 holds 10598$"):
        setups(sc, "x.yaml")


def test_a_draft_with_another_vocabulary_is_refused():
    sc = load_scenario(None, ["models.draft=opt-125m"])
    with pytest.raises(UserError) as err:
        setups(sc, "s.yaml")
    assert str(err.value) == (
        "s.yaml: models.draft: draft opt-125m cannot speculate for target llama-3-8b: draft "
        "vocab_size 50272, target vocab_size 128256; the draft must share the target's "
        "tokenizer (equal vocab_size is the check made)")
    # Without a speculating variant the draft is never used, so nothing to refuse.
    setups(load_scenario(None, ["models.draft=opt-125m", "variants=[{name: none, policy: "
                                "{kind: none}}]"]), "s.yaml")


def test_requests_beyond_the_models_positions_are_refused():
    fixed = ["workload.prompt={kind: fixed, tokens: 8000}",
             "workload.output={kind: fixed, tokens: 193}", "run.requests=3"]
    with pytest.raises(UserError) as err:
        setups(load_scenario(None, fixed), "s.yaml")
    assert str(err.value) == (
        "s.yaml: workload: request 0 (8000 prompt + 193 output tokens) needs 8193 positions, "
        "but the target llama-3-8b has max_position_embeddings 8192")
    setups(load_scenario(None, [*fixed, "workload.output.tokens=192"]), "s.yaml")  # fits
    # The draft sees every token too: its own limit counts (llama-68m: 2048 < 4096).
    pair = ["models.target=llama-2-7b", "models.draft=llama-68m",
            "workload.prompt={kind: fixed, tokens: 2000}",
            "workload.output={kind: fixed, tokens: 100}", "run.requests=3"]
    with pytest.raises(UserError) as err:
        setups(load_scenario(None, pair), "s.yaml")
    assert str(err.value) == (
        "s.yaml: workload: request 0 (2000 prompt + 100 output tokens) needs 2100 positions, "
        "but the draft llama-68m has max_position_embeddings 2048")


@pytest.mark.parametrize("last, ok", [(4.5e9, True), (4.6e9, False)])
def test_arrivals_are_refused_past_microsecond_resolution(tmp_path, last, ok):
    """float64 times resolve a microsecond up to 2**52 us (4.504e9 s); past it latencies,
    differences of absolute times, would read 0."""
    csv = tmp_path / "r.csv"
    csv.write_text(f"arrival_at,prompt_tokens,output_tokens\n0,10,5\n{last},10,5\n")
    sc = load_scenario(None, [*SMALL, f"workload={{arrivals: replay, file: {csv}}}",
                              "run.requests=2"])
    if ok:
        assert setups(sc)[0][1].table.arrival_at[-1] == last
    else:
        with pytest.raises(UserError, match=r"workload: request 1 arrives at 4.6e\+09 s"):
            setups(sc)


def test_a_request_count_far_past_the_horizon_builds_only_what_arrives(monkeypatch):
    """run.requests 10**8 with a 2 s horizon took 9.4 GB for the ~16 requests that arrive:
    the table is drawn only as far as the horizon (gaps drawn a chunk at a time)."""
    from workloads.arrivals import PoissonArrivals

    real = PoissonArrivals._gaps

    def bounded(self, n, rng):
        assert n <= 100_000, f"{n} gaps drawn for a 2 s horizon"
        return real(self, n, rng)

    monkeypatch.setattr(PoissonArrivals, "_gaps", bounded)
    sc = load_scenario(None, [*SMALL, "run.requests=100000000", "run.horizon_s=2"])
    ((_, setup),) = setups(sc)
    t = setup.table.arrival_at
    assert 5 < len(t) < 40 and t.max() < 2.0  # ~16 at 8/s


@pytest.mark.parametrize("arrivals", [
    "{arrivals: poisson, rate_per_s: 20}",
    "{arrivals: gamma, rate_per_s: 20, cv: 2}",
    "{arrivals: onoff, on_rate_per_s: 40, off_rate_per_s: 5, on_mean_s: 1, off_mean_s: 1}",
])
def test_a_table_cut_at_the_horizon_runs_as_the_whole_one(arrivals, monkeypatch):
    """Past sim.limits.LAZY_REQUESTS (here lowered to 10) a horizon cuts the table where it
    is drawn; fixed lengths and i.i.d. acceptance draw nothing per request, so the records
    are those of the whole table, whose later requests never arrive."""
    import sim.kinds.workload as workload

    sets = [*SMALL, "variants=[{name: none, policy: {kind: none}}, {name: g3, policy: "
            "{kind: fixed, gamma: 3}}]", f"workload={arrivals}",
            "workload.prompt={kind: fixed, tokens: 64}",
            "workload.output={kind: fixed, tokens: 32}", "acceptance={kind: iid, alpha: 0.7}",
            "run.requests=400", "run.horizon_s=3"]
    whole = run_scenario(load_scenario(None, sets))
    monkeypatch.setattr(workload, "LAZY_REQUESTS", 10)
    sc = load_scenario(None, sets)
    assert len(setups(sc)[0][1].table) < 200  # cut: ~60 of the 400 arrive
    cut = run_scenario(sc)
    for a, b in zip(whole.variants, cut.variants, strict=True):
        for records in ("requests", "iterations"):  # as text: nan == nan
            assert repr(list(getattr(a, records).rows())) == \
                repr(list(getattr(b, records).rows()))


def test_a_short_table_with_a_horizon_is_drawn_whole_as_before():
    sc = load_scenario(None, [*SMALL, "run.requests=300", "run.horizon_s=2"])
    ((_, setup),) = setups(sc)
    assert len(setup.table) == 300  # the same draws as without the horizon


def test_moe_kernel_reaches_the_target_and_an_moe_draft_but_not_a_dense_one():
    """deployment.moe_kernel prices the target's routed experts; an MTP layer with routed
    experts (the engine's one MoE backend) gets it, a dense draft model does not (it would
    be refused: no routed experts)."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel tables")
    from sim.build import DraftCosts, cost_models

    sets = ["models.target=deepseek-v3", "deployment.gpu=b200", "deployment.tp=8",
            "deployment.weight_bits=8", "deployment.compute_dtype=fp8",
            "deployment.framework=trtllm", "deployment.moe_kernel=trtllm_gen"]
    target, _, _ = cost_models(load_scenario(None, [*sets, *SMALL]), False)
    assert target.dep.moe_kernel == "trtllm_gen" and "trtllm_gen" in target.timing.note
    sc = load_scenario(None, [*sets, *SMALL])
    from hardware.catalog import load_catalog

    cat = load_catalog()
    make = DraftCosts.for_scenario(sc, cat, cat.gpu("b200"))
    assert make(cat.model("deepseek-v3"), tp=8).dep.moe_kernel == "trtllm_gen"
    assert make(cat.model("llama-3.2-1b")).dep.moe_kernel is None
