"""DeepSeek-V3 with its MTP module on one 8 x H200 server, end to end (small)."""

from __future__ import annotations

import pytest

from sim.build import cost_models
from sim.loading import load_scenario, repo_root
from sim.runner import run_scenario
from specdec.errors import UserError

PATH = repo_root() / "scenarios" / "deepseek-v3-mtp.yaml"
SHORT = ["run.requests=20", "run.horizon_s=null"]


def test_the_mtp_module_is_one_moe_block_sharded_like_the_target():
    sc = load_scenario(PATH, SHORT)
    mtp = next(v for v in sc.variants if v.name == "mtp")
    target, drafter, _ = cost_models(sc, True, mtp.drafter)
    draft = drafter.setup.cost
    assert (draft.dep.tp, draft.dep.ep, drafter.setup.replicas) == (8, 1, 1)
    shape = draft.dep.model.shape
    assert shape.n_layers == 1 and shape.n_moe_layers == 1 and shape.n_experts == 256
    # DeepSeek-V3 §1: 671B main model + 14B MTP module (rounded): 684.5B here
    total = target.dep.model.shape.total_params + shape.total_params
    assert total == pytest.approx(685e9, abs=1e9)
    # one block of 61 (plus the shared lm_head): a small share of the target's decode
    one = draft.pass_cost([1], [1024]).seconds
    assert 0 < one < 0.2 * target.pass_cost([1], [1024]).seconds


def test_a_short_deepseek_v3_mtp_run_completes_and_speculation_pays():
    res = run_scenario(load_scenario(PATH, SHORT), PATH.name)
    by_name = {s["name"]: s for s in res.summaries}
    for v in res.variants:
        assert len(v.requests) == 20 and all(r.finished for r in v.requests)
    assert by_name["mtp"]["speedup_vs_none"] > 1.0
    assert 1.0 < by_name["mtp"]["tokens_per_verify"] <= 2.0  # gamma 1


def test_deepseek_v3_at_16_bits_is_refused_on_8_h200():
    sc = load_scenario(PATH, [*SHORT, "deployment.weight_bits=16",
                              "deployment.compute_dtype=null"])
    with pytest.raises(UserError, match="deepseek-v3 does not fit on 8x1 h200"):
        cost_models(sc, False)


def test_the_shipped_scenario_replays_a_mooncake_trace_with_prefix_caching():
    """The issue's end-to-end case: DeepSeek-V3 + MTP on 8 x H200 against a Mooncake-format
    trace, reporting the prefix hit rate, TTFT, TPOT and the MTP speedup."""
    sc = load_scenario(PATH, SHORT)
    assert sc.workload.arrivals == "trace" and sc.workload.format == "mooncake"
    assert sc.scheduler.prefix_caching
    res = run_scenario(sc, PATH.name)
    by_name = {s["name"]: s for s in res.summaries}
    for s in by_name.values():
        # every request after the first finds the shared 1024-token system prompt cached
        assert 0.2 < s["prefix_hit_rate"] < 1.0
        assert s["ttft_p50_s"] > 0 and s["tpot_p50_s"] > 0
    # vLLM 0.33 hashes an MTP drafter's blocks with the token after them: where two
    # prompts part right after a shared block, that block is no hit for MTP
    assert 0.9 * by_name["none"]["prefix_hit_rate"] < by_name["mtp"]["prefix_hit_rate"] \
        < by_name["none"]["prefix_hit_rate"]
    assert by_name["mtp"]["speedup_vs_none"] > 1.2
