"""Each model added for today's hardware runs end to end: ``specsim run`` on a deployment
it fits (a smoke test: it finishes every request and says which timing priced it)."""

from __future__ import annotations

import json

import pytest

from sim.cli import main

# model -> the deployment it runs on (16-bit unless the checkpoint ships FP8)
DEPLOYMENTS = {
    "gpt-oss-20b": ["deployment.gpu=h100"],
    "gpt-oss-120b": ["deployment.gpu=h100", "deployment.weight_bits=4"],
    "glm-4.5-air": ["deployment.gpu=h100", "deployment.tp=4"],
    "glm-4.5": ["deployment.gpu=h200", "deployment.tp=8", "deployment.weight_bits=8",
                "deployment.compute_dtype=fp8"],
    "llama-4-scout": ["deployment.gpu=h100", "deployment.tp=4"],
    "llama-4-maverick": ["deployment.gpu=h200", "deployment.tp=8",
                         "deployment.weight_bits=8", "deployment.compute_dtype=fp8"],
    "qwen3-next-80b-a3b": ["deployment.gpu=h100", "deployment.tp=4"],
    "deepseek-r1": ["deployment.gpu=h200", "deployment.tp=8", "deployment.weight_bits=8",
                    "deployment.compute_dtype=fp8", "deployment.fp8_scales=block"],
    "deepseek-v3.1": ["deployment.gpu=h200", "deployment.tp=8", "deployment.weight_bits=8",
                      "deployment.compute_dtype=fp8", "deployment.fp8_scales=block"],
}


@pytest.mark.parametrize("model", sorted(DEPLOYMENTS))
def test_each_new_model_runs(model, tmp_path, capsys):
    sets = [f"models.target={model}", "models.draft=null", "run.requests=20",
            "run.horizon_s=null", "variants=[{name: none, policy: {kind: none}}]",
            *DEPLOYMENTS[model]]
    code = main(["run", *[x for s in sets for x in ("--set", s)], "--json", "--no-progress",
                 "--out", str(tmp_path / "run")])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    (v,) = doc["variants"]
    assert v["finished"] == 20 and v["tpot_p50_s"] > 0
