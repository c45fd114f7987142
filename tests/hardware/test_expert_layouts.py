"""Expert parallelism below the TP size (SGLang's and TensorRT-LLM's ``ep`` dividing
``tp``): each GPU holds E / ep experts, each split tp / ep ways (``Deployment.moe_tp``)."""

from __future__ import annotations

import pytest

from hardware.catalog import load_catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment, stage_layouts

CAT = load_catalog()


def _dep(ep: int, tp: int = 8, framework: str = "trtllm", timing: str = "roofline",
         model: str = "deepseek-v3") -> Deployment:
    return Deployment(CAT.model(model), CAT.gpu("h200"), tp=tp, ep=ep, weight_bits=8,
                      compute_dtype="fp8", timing=timing, framework=framework)


@pytest.mark.parametrize("ep, moe_tp", [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1)])
def test_the_tp_group_is_split_between_experts_and_their_shards(ep, moe_tp):
    dep = _dep(ep)
    assert dep.moe_tp == moe_tp
    assert dep.n_gpus == (8 if ep <= 8 else ep)  # ep > tp: data-parallel attention groups
    shape = dep.model.shape
    lay = stage_layouts(dep)[0]
    # E / ep experts, each a 1/moe_tp shard: the same routed bytes per GPU whatever the
    # split, as every expert is held once over the group
    assert lay.routed_params == shape.n_moe_layers * (shape.n_experts // ep) * (
        shape.expert_params // moe_tp)
    assert lay.routed_flop_params == pytest.approx(
        shape.n_moe_layers * shape.top_k * shape.expert_params / (ep * moe_tp))


def test_ep_below_tp_runs_on_one_tp_group_without_all_to_all():
    split, whole = CostModel(_dep(4), CAT), CostModel(_dep(8), CAT)
    a, b = split.pass_cost([1] * 8, [1024] * 8), whole.pass_cost([1] * 8, [1024] * 8)
    assert split.dep.attention_dp == 1
    assert a.comm_s == b.comm_s  # the TP all-reduces; no dispatch or combine
    assert split.resident_weight_bytes() == whole.resident_weight_bytes()


def test_the_measured_tables_are_read_at_the_engines_moe_tp_and_moe_ep(monkeypatch):
    from hardware.timing import aic

    seen = []
    real = aic.moe_table

    def spy(system, backend, hidden, inter, topk, experts, moe_tp, moe_ep, *args, **kw):
        seen.append((backend, moe_tp, moe_ep))
        return real(system, backend, hidden, inter, topk, experts, moe_tp, moe_ep, *args, **kw)

    monkeypatch.setattr(aic, "moe_table", spy)
    costs = {ep: CostModel(_dep(ep, timing="measured"), CAT) for ep in (2, 4, 8)}
    assert set(seen) == {("trtllm", 4, 2), ("trtllm", 2, 4), ("trtllm", 1, 8)}
    seconds = {ep: c.pass_cost([1] * 8, [1024] * 8).seconds for ep, c in costs.items()}
    assert len(set(seconds.values())) == 3  # three kernels, three times


def test_vllm_refuses_ep_below_tp_and_the_engines_that_split_take_it():
    from specdec.errors import UserError

    with pytest.raises(UserError, match="ep: 4 below tp 8 .* vLLM does not do"):
        CostModel(_dep(4, framework="vllm"), CAT)
    for framework in ("sglang", "trtllm"):
        assert CostModel(_dep(4, framework=framework), CAT).dep.moe_tp == 2
