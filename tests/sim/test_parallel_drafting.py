"""Parallel drafting (vLLM's ``parallel_drafting``): a draft model (PARD) or an EAGLE head
(P-EAGLE) proposing all K positions from one pass -- its input slots, its pass, the
budget, the command line and the refusals.

The slot counts are vLLM 0.33.0's (the PyPI wheel, ``vllm/_version.py`` commit
g4ba787ec9): ``SpeculativeConfig.max_num_new_slots_for_drafting`` in
vllm/config/speculative.py, whose table reads: EAGLE3 0, P-EAGLE (eagle3, parallel) K - 1,
DFlash 0, MTP 0, N-gram 0, draft model 1, PARD (draft_model, parallel) K. vllm-ascend's
test of the same property asserts, at K = 8, eagle3 parallel 7, draft_model parallel 8 and
draft_model plain 1.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hardware.draft import DraftSetup, block_pass, chain_draft_seconds, parallel_prefill_pass
from sim.drafters import Drafter, input_slots, lookahead_slots
from sim.engines.vllm import parse_vllm_serve
from sim.policies import FixedGamma
from sim.pricing import IterationPricer
from sim.runner import run, simulate
from specdec.errors import UserError
from tests.sim.fakes import AcceptAll, FakeCost, setup, table

# one pass: 10 ms + 1 ms per fed token + 0.01 ms per cached token it attends
DRAFT = FakeCost(0.010, 0.001, 1e-5)


def _parallel(short: int, cost=DRAFT, replicas=1) -> DraftSetup:
    return DraftSetup(cost=cost, replicas=replicas, one_pass=True, block=True,
                      parallel=short)


def _i64(*xs):
    return np.array(xs, dtype=np.int64)


@pytest.mark.parametrize("drafter, slots", [
    (Drafter("draft_model", parallel=True), 8),  # PARD: K
    (Drafter("eagle3", parallel=True), 7),  # P-EAGLE: K - 1
    (Drafter("eagle", parallel=True), 7),  # (use_eagle(): the same rule for eagle)
    (Drafter("draft_model"), 1),  # a plain draft model: one
    (None, 1),  # (None: a plain draft model)
    (Drafter("eagle3"), 0),
    (Drafter("dflash"), 0),
    (Drafter("mtp"), 0)])
def test_input_slots_at_k_8_are_vllms(drafter, slots):
    assert input_slots(drafter, True, 8) == slots
    assert input_slots(drafter, False, 8) == 0  # no speculation, no slots


def test_lookahead_slots_stay_one_per_draft_token():
    # vllm/config/vllm.py VllmConfig.num_lookahead_tokens: K for EAGLE types and draft
    # models, parallel or not (K + 1 only for DFlash)
    for d in (Drafter("draft_model", parallel=True), Drafter("eagle3", parallel=True)):
        assert lookahead_slots(d, FixedGamma(8)) == 8


def test_a_parallel_pass_refeeds_the_step_and_runs_its_new_queries_causally():
    # 3 rows of 60 cached tokens in all, K = 4. PARD: the 5 verified tokens and 4 new
    # (the bonus and 3 masks), 9 a row, 27 in all, one causal run after its context:
    # 9 x 60 + (3 x 81 + 27) / 2 keys
    assert block_pass(4, 60.0, 3, 0) == (27.0, 87.0, 675.0, 3.0)
    # P-EAGLE: the input shifted by one, so 8 a row: 8 x 60 + (3 x 64 + 24) / 2
    assert block_pass(4, 60.0, 3, 1) == (24.0, 84.0, 588.0, 3.0)
    # DFlash's block is unchanged: 5 non-causal queries a row
    assert block_pass(4, 60.0, 3) == (15.0, 75.0, 375.0, 3.0)
    # a prefilling row: its 8-token chunk at 0 context, then 4 new queries after it
    assert parallel_prefill_pass(4, 0, 8.0, 0.0, 0.0, 64.0, 1) == (
        12.0, 0.0 + 8.0 + 8.0 + 4.0, 0.5 * (64 + 8) + 4 * 8 + 0.5 * (16 + 4), 1.0)


def test_one_pass_of_every_row_when_a_sequence_speculates():
    """Three decoding sequences (10, 20, 30 cached) draft γ = 4 beside an 8-token prefill
    chunk: one pass of 3 x 9 + (8 + 4) tokens (PARD), not 4 serial passes."""
    pricer = IterationPricer(FakeCost(), _parallel(0))
    draft_s, _, _ = pricer.price(_i64(1, 1, 1, 1), _i64(10, 20, 30), _i64(0), _i64(8))
    new, kv, keys, _ = block_pass(4, 60.0, 3, 0)
    pre = parallel_prefill_pass(4, 0, 8.0, 0.0, 0.0, 64.0, 1)
    # (the fake prices 1e-5 s per token of context: KV read less the new tokens)
    assert draft_s == pytest.approx(0.010 + 0.001 * (new + pre[0])
                                    + 1e-5 * ((kv - new) + (pre[1] - pre[0])))
    # nothing drafted (γ = 0), or prefills alone: no pass
    assert pricer.price(_i64(0), _i64(10, 20), _i64(), _i64())[0] == 0.0
    assert pricer.price(_i64(1, 1), _i64(), _i64(0), _i64(8))[0] == 0.0


def test_the_pass_is_one_whatever_k_where_the_serial_draft_grows():
    """At batch 1 the parallel pass costs its fixed 10 ms once, plus 1 ms per token of its
    2K + 1 (PARD) or 2K (P-EAGLE) wide row at 100 tokens of context; the serial draft model
    pays the 10 ms K times, pass i at context 100 + i."""
    ctx = _i64(100)
    for k in (1, 2, 4, 8):
        pard = chain_draft_seconds(_parallel(0), k, ctx)
        peagle = chain_draft_seconds(_parallel(1), k, ctx)
        serial = chain_draft_seconds(DraftSetup(cost=DRAFT), k, ctx)
        assert pard == pytest.approx(0.010 + 0.001 * (2 * k + 1) + 1e-5 * 100)
        assert peagle == pytest.approx(0.010 + 0.001 * 2 * k + 1e-5 * 100)
        assert serial == pytest.approx(k * 0.010 + 0.001 * k + 1e-5 * (100 * k + k * (k - 1) / 2))


def _run_draft_s(parallel: bool, k: int) -> float:
    """Median draft seconds of a lone decoding sequence's iterations, Llama-3.1-8B with
    Llama-3.2-1B drafting on the default GPU."""
    ov = ["models.target=llama-3.1-8b", "models.method=draft_model",
          "models.draft=llama-3.2-1b", "run.requests=4", "workload.rate_per_s=0.2",
          "acceptance={kind: iid, alpha: 0.7}",
          f"variants=[{{name: d, policy: {{kind: fixed, gamma: {k}}}, drafter: "
          f"{{method: draft_model, parallel: {str(parallel).lower()}}}}}]"]
    res, _ = run(overrides=ov, write=False)
    its = [i.draft_s for i in res.variants[0].iterations if i.decode_seqs == 1]
    return float(np.median(its))


def test_on_a_real_pair_the_parallel_pass_barely_grows_with_k():
    """One decoding sequence: the 1B draft's one pass is weight-bound, so K = 8 costs
    within 5% of K = 1 (2.17 and 2.20 ms on the H100 when written), while the serial draft
    runs K passes (over 5x the time at K = 8)."""
    pard = {k: _run_draft_s(True, k) for k in (1, 8)}
    serial = {k: _run_draft_s(False, k) for k in (1, 8)}
    assert pard[8] < 1.05 * pard[1]
    assert serial[8] > 5 * serial[1]
    assert pard[8] < serial[8] / 5


def _pard(s, k=4):
    draft = _parallel(0, FakeCost(0.001, 0.0))
    return replace(s, draft=draft, drafter=Drafter("draft_model", draft, parallel=True))


def test_the_budget_sees_k_input_slots(engine_path):
    """Three 3-token prompts under a 15-token budget, PARD with γ = 4 (4 slots a request,
    vLLM's input_budget -= tokens + draft_slots, scheduling while input_budget > slots):
    the first step admits two (3 + 4 twice, 1 left); the next verifies the first's 5 and
    cuts the second's to 15 - 9 - 4 = 2 tokens (one draft), and the third still waits."""
    s = _pard(setup(table([0.0] * 3, [3] * 3, [20] * 3), policy=lambda: FixedGamma(4),
                    acceptance=AcceptAll(), max_batched_tokens=15, max_num_seqs=4,
                    chunked=True, chunk=15))
    res = simulate(s, path=engine_path)
    first, second = res.iterations[0], next(it for it in res.iterations if it.decode_seqs)
    assert first.prefill_tokens == 6
    assert (second.decode_seqs, second.verify_tokens) == (2, 7)
    assert all(r.finished and r.emitted_tokens == 20 for r in res.requests)


def test_a_budget_too_small_for_a_verify_and_its_slots_is_refused():
    # K = 8: a verify of 9 tokens and 8 slots do not fit a 16-token step
    with pytest.raises(UserError, match="scheduler.max_batched_tokens: 16 leaves 8 tokens"):
        run(overrides=["models.method=draft_model", "models.draft=llama-3.2-1b",
                       "models.target=llama-3.1-8b", "scheduler.max_batched_tokens=16",
                       "scheduler.chunk_tokens=16", "run.requests=2",
                       "variants=[{name: p, policy: {kind: fixed, gamma: 8}, drafter: "
                       "{method: draft_model, parallel: true}}]"], write=False)


def _ids(model: str) -> str:
    return {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
            "meta-llama/Llama-3.1-8B": "llama-3.1-8b", "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
            "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b"}[model]


def _sets(parsed) -> dict:
    return {k: json.loads(v) for k, v in (t.split("=", 1) for t in parsed.sets)}


VLLM = "vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config "
PARD = ('{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", '
        '"num_speculative_tokens": 8, "parallel_drafting": true}')


def test_vllm_pard_and_p_eagle_read_as_parallel_drafters():
    p = parse_vllm_serve(VLLM + f"'{PARD}'", _ids)
    s = _sets(p)
    assert s["variants"][1]["drafter"] == {"method": "draft_model", "model": "llama-3.2-1b",
                                           "parallel": True}
    assert s["variants"][1]["policy"] == {"kind": "fixed", "gamma": 8}
    assert s["scheduler.async_scheduling"] is True  # V1 runs draft models async
    assert any("8 input slots and 8 lookahead slots" in n for n in p.notes)
    e = _sets(parse_vllm_serve(VLLM + "'{\"method\": \"eagle3\", \"model\": \"x/y\", "
                               "\"num_speculative_tokens\": 8, \"parallel_drafting\": true}'",
                               _ids))
    assert e["variants"][1]["drafter"] == {"method": "eagle3", "parallel": True}


@pytest.mark.parametrize("config, words", [
    ('{"method": "mtp", "num_speculative_tokens": 3, "parallel_drafting": true}',
     "parallel_drafting: not modelled for mtp"),
    ('{"method": "medusa", "model": "x/y", "num_speculative_tokens": 3, '
     '"parallel_drafting": true}', "parallel_drafting: not modelled for medusa"),
    ('{"method": "eagle3", "model": "x/y", "num_speculative_tokens": 3, '
     '"parallel_drafting": 1}', "parallel_drafting: true or false, got 1"),
    ('{"method": "eagle3", "model": "x/y", "num_speculative_tokens": 3, '
     '"parallel_drafting": true, "speculative_token_tree": "[(0,), (1,), (0, 0)]"}',
     "speculative_token_tree: not modelled with parallel_drafting"),
    ('{"method": "draft_model", "model": "x/y", "num_speculative_tokens": 3, '
     '"parallel_drafting": true, "num_speculative_tokens_per_batch_size": [[1, 8, 2]]}',
     "num_speculative_tokens_per_batch_size: not modelled with parallel_drafting")])
def test_what_is_not_modelled_is_refused_in_one_line(config, words):
    with pytest.raises(UserError, match=words) as err:
        parse_vllm_serve(VLLM + f"'{config}'", _ids)
    assert "\n" not in str(err.value)


def test_a_drafter_that_cannot_draft_in_parallel_is_refused():
    with pytest.raises(UserError, match="parallel: ngram does not draft in parallel"):
        Drafter("ngram", parallel=True)
    with pytest.raises(UserError, match="variants.0.drafter.parallel"):
        run(overrides=["models.method=mtp", "models.draft=null", "models.target=llama-3.1-8b",
                       "variants=[{name: m, policy: {kind: fixed, gamma: 2}, drafter: "
                       "{method: mtp, parallel: true}}]"], write=False)


def test_no_serial_preset_is_taken_for_a_parallel_drafter():
    from sim.engines.vllm import preset_sets

    line = VLLM + ("'{\"method\": \"eagle3\", \"model\": \"x/y\", "
                   "\"num_speculative_tokens\": 3, \"parallel_drafting\": true}'")
    notes: list[str] = []
    assert preset_sets(parse_vllm_serve(line, _ids), "--from-vllm", notes) == []
    assert any("no acceptance preset measured for eagle3 with parallel_drafting" in n
               for n in notes)
    # the serial head takes the measured EAGLE-3 preset
    serial = parse_vllm_serve(line.replace(', \"parallel_drafting\": true', ""), _ids)
    assert preset_sets(serial, "--from-vllm", []) != []


def test_a_pard_run_from_vllm_speculates(tmp_path, capsys):
    from sim.cli import main

    assert main(["run", "--from-vllm", VLLM + f"'{PARD}'", "--set", "run.requests=30",
                 "--set", "acceptance={kind: iid, alpha: 0.7}", "--no-report", "--json",
                 "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    none, pard = doc["variants"]
    assert pard["name"] == "draft_model"
    # i.i.d. 0.7 with 8 guesses: (1 - 0.7^9) / 0.3 = 3.20 tokens a verify
    assert pard["mean_acceptance_length"] == pytest.approx(3.20, abs=0.2)
    assert pard["speedup_vs_none"] > 1.0
    assert any("parallel_drafting (PARD)" in n for n in doc["notes"])


def test_the_gate_keeps_a_parallel_drafter_on_the_reference_path():
    """The compiled walk prices serial passes or Medusa's heads: sim/gate.py closes it to a
    block setup, PARD's and P-EAGLE's included, and both paths give the same records."""
    from sim import steady_kernel
    from sim.build import setups
    from sim.cluster import fast_paths
    from sim.engine_path import PATHS
    from sim.loading import load_scenario

    if steady_kernel.compiled_walk() is None:
        pytest.skip("the walk is compiled only with numba")
    sets = ["models.method=eagle3", "models.draft=null", "models.target=llama-3.1-8b",
            "run.requests=40", "acceptance={kind: iid, alpha: 0.8}",
            "variants=[{name: p, policy: {kind: fixed, gamma: 4}, drafter: "
            "{method: eagle3, parallel: true}}]"]
    (_, s), = setups(load_scenario(None, sets))
    assert "block drafter" in fast_paths(s, PATHS["compiled"])["walk"]
    runs = [run(overrides=sets, write=False, engine_path=PATHS[p])[0].variants[0].requests
            for p in ("reference", "compiled")]
    assert [r.finished_at for r in runs[0]] == [r.finished_at for r in runs[1]]


def test_the_vllm_serve_line_of_a_pard_variant_reads_back():
    from hardware.catalog import load_catalog
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    sc = load_scenario(None, ["models.method=draft_model", "models.draft=llama-3.2-1b",
                              "models.target=llama-3.1-8b",
                              "variants=[{name: p, policy: {kind: fixed, gamma: 8}, "
                              "drafter: {method: draft_model, parallel: true}}]"])
    line, _ = serve_command(sc, sc.variants[0], load_catalog())
    assert '"parallel_drafting": true' in line
    again = _sets(parse_vllm_serve(line, _ids))
    assert again["variants"][1]["drafter"]["parallel"] is True
    assert again["variants"][1]["policy"] == {"kind": "fixed", "gamma": 8}
