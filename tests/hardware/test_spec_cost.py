"""The one formula of a speculative round's overheads (hardware.spec_cost), its catalog
block, and its use in the speedup tables."""

from __future__ import annotations

import numpy as np
import pytest

from hardware.catalog import load_catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.spec_cost import NO_SPEC, SpecRound, for_cost, round_seconds, spec_round
from specdec.errors import UserError

CAT = load_catalog()


def test_round_seconds_is_the_stated_sum_and_nothing_without_a_speculating_sequence():
    p = np.array([1e-3, 2e-5, 3e-4, 5e-4])  # step, per sequence, per pass, tree
    assert round_seconds(p, 0, 4, True) == 0.0
    assert round_seconds(p, -1, 4, False) == 0.0
    assert round_seconds(p, 8, 3, False) == pytest.approx(1e-3 + 8 * 2e-5 + 3 * 3e-4)
    assert round_seconds(p, 8, 3, True) == pytest.approx(1e-3 + 8 * 2e-5 + 3 * 3e-4 + 5e-4)
    assert round_seconds(p, 1, 0, False) == pytest.approx(1e-3 + 2e-5)  # a CPU drafter
    r = SpecRound(1e-3, 2e-5, 3e-4, 5e-4)
    assert r.seconds(8, 3, True) == round_seconds(p, 8, 3, True)


def test_a_framework_block_gives_each_method_its_own_pass_cost_or_the_default():
    vllm = CAT.framework("vllm")
    block = vllm.speculation
    assert block is not None and block.step_s > 0
    e3, e1 = spec_round(vllm, "eagle3"), spec_round(vllm, "eagle")
    assert e3.draft_step_s == block.draft_step_s["eagle3"] != e1.draft_step_s
    assert spec_round(vllm, "mtp").draft_step_s == block.draft_step_s["default"]  # none of its own
    assert spec_round(vllm, None) is NO_SPEC
    # no block (TensorRT-LLM: no fitted speculative overheads yet): nothing
    assert spec_round(CAT.framework("trtllm"), "eagle3").params.tolist() == [0.0] * 4


def test_the_paper_gpu_charges_no_speculative_overheads():
    dep = dict(model=CAT.model("llama-3-8b"), gpu=CAT.gpu("h100"))
    assert for_cost(CostModel(Deployment(**dep, timing="paper"), CAT), "eagle3") is NO_SPEC
    measured = for_cost(CostModel(Deployment(**dep, timing="roofline"), CAT), "eagle3")
    assert measured.step_s == CAT.framework("vllm").speculation.step_s


def test_a_catalog_speculation_block_is_checked(tmp_path):
    bad = tmp_path / "cat.yaml"
    bad.write_text("frameworks:\n  vllm:\n    speculation:\n      draft_step_s: {eagel: 1e-4}\n"
                   "      source: mine\n")
    with pytest.raises(UserError, match=r"frameworks\.vllm.*speculation.*eagel"):
        load_catalog(str(bad))
    neg = tmp_path / "neg.yaml"
    neg.write_text("frameworks:\n  vllm:\n    speculation: {step_s: -1, source: mine}\n")
    with pytest.raises(UserError, match="step_s"):
        load_catalog(str(neg))
    # a user catalog replaces a field of the block and keeps the others
    ok = tmp_path / "ok.yaml"
    ok.write_text("frameworks:\n  vllm:\n    speculation: {step_s: 0.002, source: mine}\n")
    spec = load_catalog(str(ok)).framework("vllm").speculation
    assert spec.step_s == 0.002
    assert spec.draft_step_s == CAT.framework("vllm").speculation.draft_step_s


def test_the_speedup_table_adds_the_round_to_the_drafting():
    from hardware.draft import DraftSetup
    from hardware.speedup import chain_table

    target = CostModel(Deployment(CAT.model("llama-3-8b"), CAT.gpu("h100")), CAT)
    draft = DraftSetup.colocated_with(CostModel(Deployment(
        CAT.model("llama-3.2-1b"), CAT.gpu("h100"), step_overhead=False), CAT), target)
    plain = chain_table(target, draft, 4, 512, 0.8, 3)
    spec = SpecRound(1e-3, 1e-5, 2e-4, 0.0)
    charged = chain_table(target, draft, 4, 512, 0.8, 3, spec)
    for a, b in zip(plain, charged, strict=True):
        assert b.draft_s - a.draft_s == pytest.approx(spec.seconds(4, a.gamma, False))
        assert b.verify_s == a.verify_s and b.speedup < a.speedup
