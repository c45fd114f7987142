"""``python -m sglang.launch_server --model-path M [flags]`` as a scenario (flag names from
SGLang's ``python/sglang/srt/server_args.py``)."""

from __future__ import annotations

from collections.abc import Callable

from sim.engines.common import (
    NO_EFFECT,
    Parsed,
    flags_of,
    float_flag,
    int_flag,
    precision_flag,
    split,
)
from specdec.errors import UserError

SGLANG_METHODS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp",
                  "STANDALONE": "draft_model", "NGRAM": "ngram"}


def parse_sglang(text: str, resolve_model: Callable[[str], str]) -> Parsed:
    """``python -m sglang.launch_server --model-path M [flags]`` as overrides."""
    what = "--from-sglang"
    out = Parsed(what)
    head = ("python", "-m", "sglang.launch_server") if text.split()[:1] == ["python"] \
        else ("python3", "-m", "sglang.launch_server")
    pos, flags = flags_of(split(text, what, head), what, {"--trust-remote-code",
                                                           "--enable-metrics"})
    if pos:
        raise UserError(f"{what}: unexpected words {pos}")
    model = flags.pop("--model-path", None) or flags.pop("--model", None)
    if model is None:
        raise UserError(f"{what}: --model-path: required")
    out.set("models.target", resolve_model(model))
    out.set("name", "sglang-" + model.rstrip("/").split("/")[-1].lower())
    mapping = {"--tp-size": "deployment.tp", "--tp": "deployment.tp",
               "--pp-size": "deployment.pp", "--max-running-requests": "scheduler.max_num_seqs",
               "--chunked-prefill-size": "scheduler.chunk_tokens"}
    algo = steps = topk = ndraft = draft_path = None
    for name, value in flags.items():
        if precision_flag(out, name, value, what):  # --kv-cache-dtype, --quantization
            continue
        if name in mapping:
            out.set(mapping[name], int_flag(flags, name, what))
        elif name == "--speculative-algorithm":
            algo = value
        elif name == "--speculative-num-steps":
            steps = int_flag(flags, name, what)
        elif name == "--speculative-eagle-topk":
            topk = int_flag(flags, name, what)
        elif name == "--speculative-num-draft-tokens":
            ndraft = int_flag(flags, name, what)
        elif name == "--speculative-draft-model-path":
            draft_path = value
        elif name == "--mem-fraction-static":  # weights + KV pool share of each GPU
            out.set("deployment.gpu_memory_utilization", float_flag(flags, name, what))
        elif name in NO_EFFECT or name == "--enable-metrics":
            out.notes.append(f"{name}: not used by the simulation")
        else:
            raise UserError(f"{what}: {name}: not a launch_server flag SpecSim models")
    none = {"name": "none", "policy": {"kind": "none"}}
    if algo is None:
        out.set("variants", [none])
        return out
    if algo not in SGLANG_METHODS:
        raise UserError(f"{what}: --speculative-algorithm: one of "
                        f"{', '.join(SGLANG_METHODS)}, got {algo!r}")
    ours = SGLANG_METHODS[algo]
    steps = steps or 5  # SGLang's defaults for Llama when unset
    topk = topk or (4 if ours in ("eagle", "eagle3") else 1)
    policy = {"kind": "tree", "steps": steps, "topk": topk} if topk > 1 else \
        {"kind": "fixed", "gamma": steps}
    if ndraft is not None:
        out.notes.append(f"--speculative-num-draft-tokens {ndraft}: SpecSim verifies the "
                         "whole <topk,1,..,1> tree (no pruning to a token budget)")
    drafter = {"method": ours}
    if ours == "draft_model":
        if draft_path is None:
            raise UserError(f"{what}: --speculative-draft-model-path: required for {algo}")
        drafter["model"] = resolve_model(draft_path)
    out.set("models.method", ours)
    out.set("models.draft", None)
    out.set("variants", [none, {"name": algo.lower(), "policy": policy, "drafter": drafter}])
    return out
