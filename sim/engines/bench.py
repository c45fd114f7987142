"""``vllm bench serve [flags]`` as the workload (vLLM's ``vllm/benchmarks/serve.py`` and
``vllm/benchmarks/datasets.py``: the random dataset's lengths, the request rate and the
burstiness of its gamma-distributed gaps, the prompt count)."""

from __future__ import annotations

import math

from sim.engines.common import Parsed, flags_of, float_flag, int_flag, split
from specdec.errors import UserError


def parse_vllm_bench(text: str) -> Parsed:
    """``vllm bench serve [flags]``: the workload (random dataset) and the request count."""
    what = "--bench"
    out = Parsed(what)
    pos, flags = flags_of(split(text, what, ("vllm", "bench", "serve")), what, {"--ignore-eos"})
    if pos:
        raise UserError(f"{what}: unexpected words {pos}")
    dataset = flags.pop("--dataset-name", "random")
    if dataset != "random":
        raise UserError(f"{what}: --dataset-name {dataset}: only the random dataset is "
                        "modelled (replay a trace file for others)")
    n = int_flag(flags, "--num-prompts", what) if "--num-prompts" in flags else 1000
    out.set("run.requests", n)
    ins = int_flag(flags, "--random-input-len", what) if "--random-input-len" in flags else 1024
    outs = int_flag(flags, "--random-output-len", what) if "--random-output-len" in flags else 128
    ratio = float_flag(flags, "--random-range-ratio", what) if "--random-range-ratio" in flags \
        else 0.0
    if not 0 <= ratio < 1:
        raise UserError(f"{what}: --random-range-ratio: must be in [0, 1), got {ratio:g}")
    rate = float_flag(flags, "--request-rate", what) if "--request-rate" in flags else \
        float("inf")
    burst = float_flag(flags, "--burstiness", what) if "--burstiness" in flags else 1.0
    # inf would be gaps of cv 0, refused as workload.cv, a field the command line never named
    if not 0 < burst < math.inf:
        raise UserError(f"{what}: --burstiness: must be a finite number > 0, got {burst:g}")
    workload: dict = {"prompt": _length(ins, ratio), "output": _length(outs, ratio)}
    if "--max-concurrency" in flags:
        users = int_flag(flags, "--max-concurrency", what)
        if rate != float("inf"):
            raise UserError(f"{what}: --max-concurrency with a finite --request-rate: not "
                            "modelled (a closed loop of that many users is, with rate inf)")
        workload.update(arrivals="closed_loop", users=users, think_mean_s=0.0)
    elif rate == float("inf"):
        workload["arrivals"] = "offline"
    elif burst == 1.0:
        workload.update(arrivals="poisson", rate_per_s=rate)
    else:  # vLLM: gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)): cv 1/sqrt(b)
        workload.update(arrivals="gamma", rate_per_s=rate, cv=burst ** -0.5)
    out.set("workload", workload)
    for name in flags:
        if name in ("--num-prompts", "--random-input-len", "--random-output-len",
                    "--random-range-ratio", "--request-rate", "--burstiness",
                    "--max-concurrency"):
            continue
        if name in ("--model", "--host", "--port", "--backend", "--base-url", "--endpoint",
                    "--tokenizer", "--seed", "--ignore-eos", "--percentile-metrics",
                    "--metric-percentiles", "--save-result", "--result-dir"):
            out.notes.append(f"{name}: not used by the simulation")
        else:
            raise UserError(f"{what}: {name}: not a vllm bench serve flag SpecSim models")
    return out


def _length(tokens: int, ratio: float) -> dict:
    """vLLM's random dataset lengths: uniform on [floor(n(1-r)), ceil(n(1+r))], or n."""
    if ratio == 0:
        return {"kind": "fixed", "tokens": tokens}
    return {"kind": "uniform", "low": max(1, math.floor(tokens * (1 - ratio))),
            "high": math.ceil(tokens * (1 + ratio))}
