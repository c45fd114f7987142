"""Golden records: small runs of the shipped scenarios must give byte-identical CSVs.

Refactors (layering, a faster kernel) must not change what the engine computes. Each case
is a shipped scenario with a few requests and short outputs (so the committed files stay
small), plus cases that preempt, in one replica and in a pipeline. A change that *means*
to change the records regenerates them, and says so in its commit::

    SPECSIM_GOLDEN=write python -m pytest tests/sim/test_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sim.loading import load_scenario, repo_root
from sim.output import write_records
from sim.runner import run_scenario

GOLDEN = Path(__file__).parent / "golden"
SMALL = ["run.requests=8", "workload.output={kind: uniform, low: 4, high: 40}"]
CASES = {
    "default": ("default", SMALL),
    "adaptive-bursty-load": ("adaptive-bursty-load", SMALL),
    "high-load-ladder": ("high-load-ladder", SMALL),
    "llama70b-two-replicas": ("llama70b-two-replicas", SMALL),
    "pipeline-70b": ("pipeline-70b", SMALL),
    "specinfer-tree": ("specinfer-tree", SMALL),
    "task-mix-closed-loop": ("task-mix-closed-loop", SMALL),
    "offload-opt-13b": ("claims/specinfer-offload-opt-13b", SMALL),
    # a KV pool that holds a few of the default's prompts: preemption by recompute
    "default-preempting": ("default", [*SMALL, "run.requests=24", "workload.rate_per_s=200",
                                       "scheduler.num_gpu_blocks_override=300"]),
    # three pipeline stages and a tight pool: in-flight sequences are preempted too
    "pipeline-preempting": ("default", [
        "run.requests=12", "deployment.pp=3", "scheduler.num_gpu_blocks_override=30",
        "scheduler.chunk_tokens=64", "acceptance={kind: iid, alpha: 0.8}",
        "workload={arrivals: poisson, rate_per_s: 200, prompt: {kind: fixed, tokens: 200}, "
        "output: {kind: fixed, tokens: 60}}"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_records_are_byte_identical_to_the_golden_files(case, tmp_path):
    scenario, overrides = CASES[case]
    sc = load_scenario(repo_root() / "scenarios" / f"{scenario}.yaml", overrides)
    result = run_scenario(sc)
    write = os.environ.get("SPECSIM_GOLDEN") == "write"
    for v in result.variants:
        for kind in ("requests", "iterations"):
            name = f"{v.name}-{kind}.csv"
            got = tmp_path / name
            write_records(got, getattr(v, kind))
            want = GOLDEN / case / name
            if write:
                want.parent.mkdir(parents=True, exist_ok=True)
                want.write_bytes(got.read_bytes())
            assert want.exists(), f"no golden file {want} (SPECSIM_GOLDEN=write makes it)"
            assert got.read_bytes() == want.read_bytes(), (
                f"{case}: {name} differs from {want.relative_to(repo_root())}; diff it with "
                f"{got}")
