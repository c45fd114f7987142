"""Acceptance that belongs to a real draft: presets with sources, and real metrics dumps."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.errors import UserError
from workloads.acceptance import PositionalAcceptance
from workloads.engine_metrics import (
    read_prometheus,
    sglang_accept_length,
    vllm_unconditional_rates,
)
from workloads.presets import load_presets, preset

DATA = __import__("pathlib").Path(__file__).parent / "data"


def _half_ulp(values) -> float:
    """Half a unit of the last decimal the published rates are given to."""
    decimals = max((len(repr(float(v)).split(".")[1]) for v in values), default=0)
    return 0.5 * 10.0 ** -decimals


@pytest.mark.parametrize("name", sorted(load_presets()))
def test_each_preset_gives_its_published_mean_acceptance_length(name):
    p = load_presets()[name]
    assert p.source  # every preset says where its numbers come from
    # the published length is rounded to its last digit and each rate to its own: the
    # model's length may differ by those roundings and no more
    tol = _half_ulp([p.mean_acceptance_length]) + p.k * _half_ulp(p.rates)
    assert abs(p.expected_length() - p.mean_acceptance_length) <= tol + 1e-12


def test_unconditional_to_conditional_is_exact():
    u = [0.7296, 0.5208, 0.3545]
    p = preset("eagle3-llama-3.1-8b-mtbench-k3")
    assert p.conditional_rates() == pytest.approx([0.7296, 0.5208 / 0.7296, 0.3545 / 0.5208],
                                                  rel=1e-15)
    # P(positions 1..i all accepted) of the conditionals is the unconditional u_i again
    assert np.cumprod(p.conditional_rates()) == pytest.approx(u, rel=1e-15)
    # read as conditional by mistake, the same numbers under-predict the accepted tokens
    # per verify by 22% here (1.244 instead of 1.605)
    wrong = PositionalAcceptance(u).expected_tokens([1, 1, 1])
    assert wrong == pytest.approx(1 + 0.7296 * (1 + 0.5208 * (1 + 0.3545)), rel=1e-15)
    assert (wrong - 1) / (p.expected_length() - 1) < 0.78


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(UserError,
                       match="unknown acceptance preset 'nope'; known: dflash-.*, eagle3-"):
        preset("nope")


def test_a_vllm_dump_round_trips_to_the_rates_it_was_written_from():
    # written from u = (0.75, 0.5, 0.35) over 100 drafts on two engines
    rates, totals = vllm_unconditional_rates(DATA / "vllm_metrics.prom")
    assert rates == pytest.approx([0.75, 0.5, 0.35], rel=1e-15)
    assert totals == {"drafts": 100.0, "draft_tokens": 300.0, "accepted_tokens": 160.0}
    model = PositionalAcceptance.from_marginals(rates)
    # vLLM's mean acceptance length 1 + accepted / drafts = 2.6, exactly the model's
    assert model.expected_tokens([1, 1, 1]) == pytest.approx(1 + 160 / 100, rel=1e-15)


def test_a_vllm_dump_is_read_through_a_scenario():
    from sim.loading import load_scenario
    from sim.runner import run_scenario

    sc = load_scenario(None, [f"acceptance={{kind: vllm_metrics, file: "
                              f"{DATA / 'vllm_metrics.prom'}}}", "run.requests=20",
                              "variants=[{name: g3, policy: {kind: fixed, gamma: 3}}]"])
    s = run_scenario(sc).summaries[0]
    assert 2.0 < s["mean_acceptance_length"] < 3.2


@pytest.mark.parametrize("text, match", [
    ("vllm:spec_decode_num_drafts_total{engine=0} 1\n", "line 1: malformed labels"),
    ("vllm:spec_decode_num_drafts_total 1 2 3\n", "line 1: not a Prometheus sample"),
    ("vllm:spec_decode_num_drafts_total abc\n", "line 1: vllm:spec_decode_num_drafts_total: "
                                                "value is not a number"),
    ("vllm:spec_decode_num_drafts_total 0\n", "needs a count > 0"),
    ('vllm:spec_decode_num_drafts_total 10\n'
     'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 3\n',
     "needs positions 0..k-1, got \\[1\\]"),
    ('vllm:spec_decode_num_drafts_total 10\n'
     'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3\n'
     'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 5\n',
     "position 1: accepted per draft 0.5 must lie"),
    ('vllm:spec_decode_num_drafts_total{model_name="a"} 10\n'
     'vllm:spec_decode_num_drafts_total{model_name="b"} 10\n', "several models"),
])
def test_a_malformed_vllm_dump_is_one_line_with_the_line_number(tmp_path, text, match):
    p = tmp_path / "m.prom"
    p.write_text(text)
    with pytest.raises(UserError, match=match):
        vllm_unconditional_rates(p)


def test_sglang_accept_length_and_its_calibrated_model(tmp_path):
    p = tmp_path / "s.prom"
    p.write_text('# TYPE sglang:spec_accept_length gauge\n'
                 'sglang:spec_accept_length{model_name="m"} 3.2\n')
    assert sglang_accept_length(p) == 3.2
    assert read_prometheus(p) == [("sglang:spec_accept_length", {"model_name": "m"}, 3.2, 2)]
