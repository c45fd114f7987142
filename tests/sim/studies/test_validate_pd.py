"""Category H replayed by the simulator (``sim.studies.validate_pd``): each run's scenario
is its client's protocol and its pools, and a replayed run's TTFT holds its queue."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hardware import load_catalog
from hardware.timing.pd_rows import read_pd_rows
from hardware.timing.pd_serving import predict_pd
from hardware.timing.validation import PD_VALIDATION_CSV
from sim.build import setups
from sim.loading import load_scenario, repo_root
from sim.studies.validate_pd import (
    PROTOCOLS,
    protocol,
    recipe,
    row_sets,
    simulate_pd,
    simulate_row,
)

ROWS = read_pd_rows(PD_VALIDATION_CSV)


def _row(framework: str, **fields):
    row = next(r for r in ROWS if r.framework == framework and protocol(r) is not None)
    return dataclasses.replace(row, **fields)


def test_only_runs_whose_client_is_public_are_replayed():
    """InferenceX's SGLang and TensorRT-LLM runs (its database dump) are; the internal gap
    analysis's Qwen3-32B runs (a local file) are not."""
    replayed = [r for r in ROWS if protocol(r) is not None]
    assert len(replayed) == 56 and {r.model for r in replayed} == {"deepseek-v3"}
    assert all(protocol(r) is None for r in ROWS if r.model == "qwen3-32b")


@pytest.mark.parametrize("framework,rounds,flow,order", [
    ("sglang", 10, "sglang", "prefill_first"), ("trtllm", 8, "vllm", "vllm_v1")])
def test_a_runs_scenario_is_its_clients_protocol_on_its_pools(framework, rounds, flow, order):
    row = _row(framework)
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                       row_sets(row, load_catalog()))
    assert PROTOCOLS[framework].rounds == rounds
    assert sc.run.requests == rounds * row.concurrency
    w = sc.workload
    assert w.arrivals == "closed_loop"
    assert w.users == row.concurrency and w.think_mean_s == 0
    assert (w.prompt.low, w.prompt.high) == (int(0.8 * row.isl), row.isl)
    assert (w.output.low, w.output.high) == (int(0.8 * row.osl), row.osl)
    d = sc.disaggregation
    assert d.flow == flow and sc.scheduler.order == order
    assert (d.prefill.replicas, d.prefill.tp, d.prefill.ep) == \
        (row.prefill_workers, row.prefill_tp, row.prefill_ep)
    assert (d.decode.replicas, d.decode.tp, d.decode.ep) == \
        (row.decode_workers, row.decode_tp, row.decode_ep)
    dep = sc.deployment
    assert (dep.gpu, dep.weight_bits, dep.kv_bits, dep.fp4_format, dep.quantized) == \
        (row.gpu, row.weight_bits, row.kv_bits, row.fp4_format, row.quantized)
    setups(sc)  # it builds


def test_each_sglang_run_takes_its_recipes_recv_interval():
    """The GB200 and GB300 runs match one srt-slurm low-latency recipe each; their decode
    servers read new requests every 10 loops, except GB300 FP8's (every loop); every
    prefill server's 10 is set too. The B200 runs match none: SGLang's default."""
    cat = load_catalog()
    sglang = [r for r in ROWS if r.framework == "sglang" and protocol(r) is not None]
    matched = {r.line: recipe(r) for r in sglang}
    assert {r.gpu for r in sglang if matched[r.line] is None} == {"b200"}
    assert sum(m is not None for m in matched.values()) == 23
    for r in sglang:
        sc = load_scenario(repo_root() / "scenarios" / "default.yaml", row_sets(r, cat))
        d, m = sc.disaggregation, matched[r.line]
        want = (None, None) if m is None else (10, 1 if (r.gpu, r.compute_dtype) == (
            "gb300", "fp8") else 10)
        assert (d.prefill.recv_interval, d.decode.recv_interval) == want, r.line
    assert all(recipe(r) is None for r in ROWS if r.framework != "sglang")


@pytest.mark.slow
def test_a_replayed_run_queues_where_the_row_model_does_not():
    """At twice the prefill pool's concurrency per replica the replayed TTFT holds the
    prompts queued before each one: above the row model's one prefill and transfer, which
    it contains (a short output keeps the run small)."""
    cat = load_catalog()
    row = _row("sglang", osl=64, concurrency=16)
    sim, alone = simulate_row(row, cat), predict_pd(row, cat)
    assert sim.requests == 160
    assert sim.ttft_s > 2 * alone.prefill_s
    # its TPOT: decode steps of at most 16 sequences between two replicas, so not far
    # from the row model's step at the batch it states
    assert 0.5 < sim.tpot_s / alone.tpot_s < 1.5


@pytest.mark.slow
def test_the_check_summarises_and_keeps_the_runs_in_order():
    cat = load_catalog()
    rows = [_row("sglang", osl=32, concurrency=2), _row("trtllm", osl=32, concurrency=2),
            next(r for r in ROWS if protocol(r) is None)]
    one = simulate_pd(cat, rows, workers=1)
    two = simulate_pd(cat, rows, workers=2)
    assert [r.line for r in one.rows] == [rows[0].line, rows[1].line]
    assert [r.line for r in one.left_out] == [rows[2].line]
    np.testing.assert_array_equal(one.ttft_error, two.ttft_error)  # deterministic
    assert one.summary["all"]["rows"] == 2
