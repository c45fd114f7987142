"""Block drafters (DFlash): one draft pass of K + 1 queries per request, priced, scheduled
and read from the engines' command lines."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hardware.draft import DraftSetup, block_pass, chain_draft_seconds
from hardware.spec_cost import serial_passes
from sim.drafters import TRAITS, Drafter, input_slots, lookahead_slots
from sim.engines.sglang import parse_sglang
from sim.engines.vllm import parse_vllm_serve
from sim.policies import FixedGamma
from sim.pricing import IterationPricer
from sim.runner import run, simulate
from specdec.errors import UserError
from tests.sim.fakes import AcceptAll, FakeCost, setup, table
from workloads.presets import load_presets

# one pass: 10 ms + 1 ms per fed token + 0.01 ms per cached token it attends
DRAFT = FakeCost(0.010, 0.001, 1e-5)


def _block(cost=DRAFT, replicas=1) -> DraftSetup:
    return DraftSetup(cost=cost, replicas=replicas, one_pass=True, block=True)


def _i64(*xs):
    return np.array(xs, dtype=np.int64)


def test_a_block_pass_feeds_k_plus_one_queries_attending_the_context_and_the_block():
    # 3 rows of 60 cached tokens in all, K = 4: 5 queries each, 15 in all; each attends
    # its context and the 5 queries of its block (non-causal): 5 x 60 + 3 x 25 keys
    assert block_pass(4, 60.0, 3) == (15.0, 75.0, 375.0, 3.0)


def test_one_pass_of_k_plus_one_queries_per_row_when_a_sequence_speculates():
    """Three decoding sequences (10, 20, 30 cached tokens) draft γ = 4 beside an 8-token
    prefill chunk of a new request: one pass, 5 queries for each of the 4 rows (20 fed),
    attending 60 + (0 + 8) tokens of context -- not γ serial passes, and no pass for the
    chunk's own tokens (the drafter's context KV is projected from the target's states)."""
    pricer = IterationPricer(FakeCost(), _block())
    draft_s, _, _ = pricer.price(_i64(1, 1, 1, 1), _i64(10, 20, 30), _i64(0), _i64(8))
    assert draft_s == pytest.approx(0.010 + 0.001 * 20 + 1e-5 * 68)
    # a draft model drafting the same chain runs 4 passes of one token per sequence
    serial = IterationPricer(FakeCost(), DraftSetup(cost=FakeCost(0.010, 0.001, 1e-5)))
    ar_s, _, _ = serial.price(_i64(1, 1, 1, 1), _i64(10, 20, 30), _i64(), _i64())
    assert ar_s == pytest.approx(4 * 0.010 + 0.001 * 12 + 1e-5 * (60 * 4 + 3 * (0 + 1 + 2 + 3)))
    # nothing drafted (γ = 0), or prefills alone: no pass
    assert pricer.price(_i64(0), _i64(10, 20), _i64(), _i64())[0] == 0.0
    assert pricer.price(_i64(1, 1), _i64(), _i64(0), _i64(8))[0] == 0.0


def test_a_cut_shape_still_runs_the_whole_block_for_every_row():
    """vLLM's DFlash proposer feeds every scheduled request 1 + num_speculative_tokens
    queries: with shapes cut to γ 4 and 2 (a tight budget) both rows take 5 queries."""
    pricer = IterationPricer(FakeCost(), _block())
    widths = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=np.int64)
    draft_s, _, _ = pricer.price(widths, _i64(10, 20), _i64(), _i64())
    assert draft_s == pytest.approx(0.010 + 0.001 * 10 + 1e-5 * 30)


def test_replicas_split_the_rows_and_the_slowest_counts():
    """On two GPUs (a replica each, sequences round robin) rows 0 and 2 share one pass,
    row 1 the other; the prefill rows' queries are a pass after them."""
    pricer = IterationPricer(FakeCost(), _block(replicas=2))
    draft_s, _, _ = pricer.price(_i64(1, 1), _i64(10, 20, 30), _i64(4), _i64(8))
    slowest = 0.010 + 0.001 * 6 + 1e-5 * 40  # rows 0 and 2: 3 queries each
    prefill = 0.010 + 0.001 * 3 + 1e-5 * 12  # the chunk's row: 3 queries after 4 + 8
    assert draft_s == pytest.approx(slowest + prefill)


def test_every_chain_depth_is_a_block_of_its_own_and_one_serial_pass():
    pricer = IterationPricer(FakeCost(), _block())
    ctx = _i64(10, 20)
    got = pricer.decode_chain_seconds(ctx, 3)
    target = [FakeCost().pass_seconds_sums(2 * (1 + g), 30, 0, 0, n_seqs=2) for g in range(4)]
    draft = [0.0] + [0.010 + 0.001 * 2 * (g + 1) + 1e-5 * 30 for g in (1, 2, 3)]
    assert got == pytest.approx([d + t for d, t in zip(draft, target, strict=True)])
    assert serial_passes(_block(), 7) == 1  # the framework's per-draft-pass overhead once
    assert chain_draft_seconds(_block(), 3, ctx) == pytest.approx(draft[3])


def test_dflash_is_vllms_dflash_to_the_scheduler():
    # vllm/config/speculative.py max_num_new_slots_for_drafting: 0 for dflash;
    # VllmConfig.num_lookahead_tokens: K + 1; use_eagle_block_drop: False; V1 async: yes
    t = TRAITS["dflash"]
    assert (t.input_slots, t.extra_lookahead, t.eagle_type, t.async_ok) == (0, 1, False, True)
    d = Drafter("dflash", _block())
    assert input_slots(d, True) == 0
    assert lookahead_slots(d, FixedGamma(4)) == 5
    assert lookahead_slots(Drafter("draft_model"), FixedGamma(4)) == 4


def _dflash(s):
    draft = _block(FakeCost(0.001, 0.0))
    return replace(s, draft=draft, drafter=Drafter("dflash", draft))


def test_dflash_takes_no_input_slot_from_the_budget(engine_path):
    """Three 3-token prompts, then verifies of 1 + γ=4 tokens under a 15-token budget and
    max_num_seqs 4 (as tests/sim/test_scheduling.py's draft-model case, where each request
    takes a slot beside its tokens: 5 + 1, 5 + 1, 2): DFlash's drafting takes none, so all
    three verify 5 tokens."""
    s = _dflash(setup(table([0.0] * 3, [3] * 3, [20] * 3), policy=lambda: FixedGamma(4),
                      acceptance=AcceptAll(), max_batched_tokens=15, max_num_seqs=4,
                      chunked=True, chunk=15))
    res = simulate(s, path=engine_path)
    first = next(it for it in res.iterations if it.decode_seqs)
    assert (first.decode_seqs, first.verify_tokens, first.drafted_tokens) == (3, 15, 12)
    assert all(r.finished and r.emitted_tokens == 20 for r in res.requests)


def test_dflash_reserves_k_plus_one_lookahead_slots(engine_path):
    """A 23-token prompt, then a verify of 1 + γ=4 tokens: 23 + 5 tokens and K lookahead
    slots fill 32 slots, two 16-token blocks, for a draft model; DFlash's K + 1 (its bonus
    query) need a third."""
    tab = table([0.0], [23], [8])
    kw = dict(policy=lambda: FixedGamma(4), acceptance=AcceptAll())
    plain = setup(tab, draft=FakeCost(0.001, 0.0), **kw)
    blocks = [simulate(s, path=engine_path).iterations[1].kv_blocks_used
              for s in (plain, _dflash(setup(tab, **kw)))]
    assert blocks == [2, 3]


def _ids(model: str) -> str:
    return {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b"}[model]


def _sets(parsed) -> dict:
    return {k: json.loads(v) for k, v in (t.split("=", 1) for t in parsed.sets)}


VLLM = "vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config "


def test_vllm_dflash_is_one_block_of_num_speculative_tokens():
    p = parse_vllm_serve(VLLM + "'{\"method\": \"dflash\", \"model\": "
                         "\"z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat\", "
                         "\"num_speculative_tokens\": 15, \"parallel_drafting\": true}'", _ids)
    s = _sets(p)
    assert s["models.method"] == "dflash"
    spec = s["variants"][1]
    assert spec["policy"] == {"kind": "fixed", "gamma": 15}
    assert spec["drafter"] == {"method": "dflash"}
    assert s["scheduler.async_scheduling"] is True  # the V1 runner schedules dflash async
    assert any("16 queries per request" in n for n in p.notes)


@pytest.mark.parametrize("config, words", [
    ('{"method": "mtp", "num_speculative_tokens": 3, "parallel_drafting": true}',
     "parallel_drafting: not modelled for mtp"),
    ('{"method": "dspark", "model": "x/y", "num_speculative_tokens": 7}', "got 'dspark'")])
def test_vllm_parallel_drafting_not_modelled_is_refused(config, words):
    # (draft_model's and eagle3's, PARD and P-EAGLE, are: tests/sim/test_parallel_drafting.py)
    with pytest.raises(UserError, match=words):
        parse_vllm_serve(VLLM + f"'{config}'", _ids)


SGLANG = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
          "--speculative-algorithm DFLASH --speculative-draft-model-path "
          "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat")


@pytest.mark.parametrize("flags, gamma", [("", 15), (" --speculative-num-draft-tokens 8", 7),
                                          (" --speculative-dflash-block-size 8", 7),
                                          (" --speculative-dflash-block-size 8 "
                                           "--speculative-num-draft-tokens 8", 7),
                                          (" --speculative-num-steps 3", 15)])
def test_sglang_dflash_drafts_block_size_minus_one(flags, gamma):
    s = _sets(parse_sglang(SGLANG + flags, _ids))
    assert s["models.method"] == "dflash"
    assert s["variants"][1]["policy"] == {"kind": "fixed", "gamma": gamma}
    assert s["variants"][1]["drafter"] == {"method": "dflash"}


@pytest.mark.parametrize("text, words", [
    (SGLANG + " --speculative-dflash-block-size 8 --speculative-num-draft-tokens 16",
     "SGLang requires them equal"),
    ("SGLANG_SIMULATE_ACC_LEN=3 " + SGLANG, "does not simulate acceptance"),
    (SGLANG.split(" --speculative-draft")[0], "--speculative-draft-model-path: required"),
    ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
     "--speculative-algorithm EAGLE3 --speculative-dflash-block-size 8", "DFLASH only")])
def test_sglang_dflash_flags_are_checked(text, words):
    with pytest.raises(UserError, match=words):
        parse_sglang(text, _ids)


def test_a_dflash_run_end_to_end():
    result, _ = run(overrides=["models.method=dflash", "models.draft=null", "run.requests=30",
                               "acceptance={kind: preset, name: dflash-qwen3-8b-gsm8k-k15}",
                               "variants=[{name: none, policy: {kind: none}}, "
                               "{name: dflash, policy: {kind: fixed, gamma: 15}}]"],
                    write=False)
    none, dflash = result.variants
    assert all(r.finished for r in dflash.requests)
    assert sum(r.accepted_tokens for r in dflash.requests) > 0
    assert dflash.end_at < none.end_at


def test_the_dflash_preset_is_the_published_mean_with_its_source():
    p = load_presets()["dflash-qwen3-8b-gsm8k-k15"]
    assert (p.method, p.k, p.calibrated, p.mean_acceptance_length) == ("dflash", 15, True, 6.36)
    assert "sgl-project/sglang PR #16818" in p.source
    assert p.expected_length() == pytest.approx(6.36)


def test_a_dflash_run_gives_the_reference_records_on_the_compiled_path():
    """The compiled walk prices serial passes or Medusa's heads, not a block drafter's
    pass: the gate keeps DFlash on the reference path (it once took the walk, priced as
    Medusa's: p99 TPOT 3.32 ms against the reference's 3.23 on 200 requests)."""
    from sim import steady_kernel
    from sim.engine_path import PATHS

    if steady_kernel.compiled_walk() is None:
        pytest.skip("the walk is compiled only with numba")

    runs = [run(overrides=["models.method=dflash", "models.draft=null", "run.requests=60",
                           "acceptance={kind: iid, alpha: 0.8}",
                           "variants=[{name: d, policy: {kind: fixed, gamma: 7}}]"],
                write=False, engine_path=PATHS[p])[0].variants[0].requests
            for p in ("reference", "compiled")]
    assert [r.finished_at for r in runs[0]] == [r.finished_at for r in runs[1]]


def test_the_sglang_launch_line_of_a_dflash_variant_reads_back():
    from hardware.catalog import load_catalog
    from sim.engines.sglang import launch_command
    from sim.loading import load_scenario

    sc = load_scenario(None, ["models.method=dflash", "models.draft=null",
                              "scheduler.order=prefill_first",
                              "variants=[{name: d, policy: {kind: fixed, gamma: 7}}]"])
    line, notes = launch_command(sc, sc.variants[0], load_catalog())
    assert "--speculative-algorithm DFLASH" in line and not notes
    p = parse_sglang(line.replace("<a DFlash drafter trained for llama-3-8b>", "x"),
                     lambda m: "llama-3-8b")
    assert _sets(p)["variants"][1] == {"name": "dflash",
                                       "policy": {"kind": "fixed", "gamma": 7},
                                       "drafter": {"method": "dflash"}}
