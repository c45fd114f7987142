"""Real deployments' command lines as scenario overrides: ``vllm serve``, SGLang's
``launch_server`` and ``vllm bench serve``.

Each parser turns one command line into ``--set``-style overrides on the default scenario
(``key=value`` strings in the scenario's dotted keys) plus notes for the run: flags that do
not change performance are accepted and listed (never silently dropped), flags SpecSim does
not model are one-line errors naming the flag. Flag names, values and defaults follow vLLM's
``vllm/engine/arg_utils.py``, ``vllm/config/speculative.py``, ``vllm/benchmarks/serve.py``
and ``vllm/benchmarks/datasets.py``, and SGLang's ``python/sglang/srt/server_args.py``.

Model ids (Hugging Face ids or paths) are resolved to catalog ids by ``resolve_model``
(``hardware.Catalog.model`` knows the aliases); an unknown one says how to add it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable

from specdec.errors import UserError

# Flags that do not change what SpecSim simulates: accepted, and listed in the run's notes.
NO_EFFECT = {"--host", "--port", "--served-model-name", "--trust-remote-code",
             "--disable-log-requests", "--disable-log-stats", "--api-key", "--seed",
             "--uvicorn-log-level", "--enable-log-requests", "--log-level", "--tokenizer",
             "--download-dir", "--revision", "--dtype"}
KV_DTYPES = {"auto": 16, "bfloat16": 16, "float16": 16, "fp8": 8, "fp8_e4m3": 8,
             "fp8_e5m2": 8}
# --quantization -> (weight bits, compute dtype): FP8 W8A8, or 4-bit weight-only kernels
QUANTIZATION = {"fp8": (8, "fp8"), "awq": (4, "bf16"), "gptq": (4, "bf16"),
                "awq_marlin": (4, "bf16"), "gptq_marlin": (4, "bf16")}
# vLLM's speculative methods -> SpecSim's drafter methods
VLLM_METHODS = {"draft_model": "draft_model", "eagle": "eagle", "eagle3": "eagle3",
                "mtp": "mtp", "deepseek_mtp": "mtp", "ngram": "ngram", "suffix": "suffix"}
SGLANG_METHODS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp",
                  "STANDALONE": "draft_model", "NGRAM": "ngram"}


class Parsed:
    """The overrides (in order) and notes one command line gives."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.sets: list[str] = []
        self.notes: list[str] = []

    def set(self, key: str, value) -> None:
        """Override ``key`` with ``value`` (written as JSON, which is YAML)."""
        self.sets.append(f"{key}={json.dumps(value)}")


def _split(text: str, what: str, head: tuple[str, ...]) -> list[str]:
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise UserError(f"{what}: cannot split the command line: {e}") from None
    for i, h in enumerate(head):
        if len(words) <= i or words[i] != h:
            raise UserError(f"{what}: must start with '{' '.join(head)}', got {text[:60]!r}")
    return words[len(head):]


def _flags(words: list[str], what: str, booleans: set[str]) -> tuple[list[str], dict]:
    """(positional words, {flag: value}) of a command line (``--flag value``, ``--flag=v``,
    boolean flags without a value); a repeated flag is an error."""
    pos, flags, i = [], {}, 0
    while i < len(words):
        w = words[i]
        if not w.startswith("-"):
            pos.append(w)
            i += 1
            continue
        name, eq, value = w.partition("=")
        name = "--" + name.lstrip("-").replace("_", "-") if name.startswith("--") else name
        if name in flags:
            raise UserError(f"{what}: {name}: given twice")
        if eq:
            flags[name] = value
        elif name in booleans:
            flags[name] = True
        elif i + 1 < len(words):
            flags[name] = words[i + 1]
            i += 1
        else:
            raise UserError(f"{what}: {name}: needs a value")
        i += 1
    return pos, flags


def _int(flags: dict, name: str, what: str, low: int = 1) -> int:
    try:
        v = int(flags[name])
    except ValueError:
        raise UserError(f"{what}: {name}: must be an integer, got {flags[name]!r}") from None
    if v < low:
        raise UserError(f"{what}: {name}: must be >= {low}, got {v}")
    return v


def _float(flags: dict, name: str, what: str) -> float:
    try:
        return float(flags[name])
    except ValueError:
        raise UserError(f"{what}: {name}: must be a number, got {flags[name]!r}") from None


def parse_vllm_serve(text: str, resolve_model: Callable[[str], str]) -> Parsed:
    """``vllm serve MODEL [flags]`` as overrides; see the module docstring."""
    what = "--from-vllm"
    out = Parsed(what)
    booleans = {"--enable-chunked-prefill", "--no-enable-chunked-prefill",
                "--enable-prefix-caching", "--no-enable-prefix-caching", "--trust-remote-code",
                "--disable-log-requests", "--disable-log-stats", "--enable-log-requests",
                "--enforce-eager"}
    pos, flags = _flags(_split(text, what, ("vllm", "serve")), what, booleans)
    model = pos[0] if pos else flags.pop("--model", None)
    if model is None or len(pos) > 1:
        raise UserError(f"{what}: give exactly one model (vllm serve MODEL ...), got {pos}")
    out.set("models.target", resolve_model(model))
    out.set("name", "vllm-" + model.rstrip("/").split("/")[-1].lower())
    mapping = {"--tensor-parallel-size": "deployment.tp", "-tp": "deployment.tp",
               "--pipeline-parallel-size": "deployment.pp", "-pp": "deployment.pp",
               "--max-num-seqs": "scheduler.max_num_seqs",
               "--max-num-batched-tokens": "scheduler.max_batched_tokens",
               "--long-prefill-token-threshold": "scheduler.chunk_tokens",
               "--block-size": "scheduler.block_size",
               "--num-gpu-blocks-override": "scheduler.num_gpu_blocks_override"}
    spec = None
    for name, value in flags.items():
        if name in mapping:
            out.set(mapping[name], _int(flags, name, what))
        elif name == "--kv-cache-dtype":
            if value not in KV_DTYPES:
                raise UserError(f"{what}: --kv-cache-dtype: one of {', '.join(KV_DTYPES)}, "
                                f"got {value!r}")
            out.set("deployment.kv_bits", KV_DTYPES[value])
        elif name == "--quantization":
            if value not in QUANTIZATION:
                raise UserError(f"{what}: --quantization {value}: not modelled; SpecSim knows "
                                f"{', '.join(QUANTIZATION)}")
            bits, dtype = QUANTIZATION[value]
            out.set("deployment.weight_bits", bits)
            if dtype == "fp8":
                out.set("deployment.compute_dtype", "fp8")
        elif name in ("--enable-chunked-prefill", "--no-enable-chunked-prefill"):
            out.set("scheduler.chunked_prefill", name == "--enable-chunked-prefill")
        elif name == "--speculative-config":
            spec = value
        elif name in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
            if name == "--enable-prefix-caching":
                raise UserError(f"{what}: {name}: prefix caching is not modelled yet")
            out.notes.append(f"{name}: prefix caching off, as SpecSim models")
        elif name == "--enforce-eager":
            out.notes.append(f"{name}: not modelled (no CUDA-graph effects are priced)")
        elif name in NO_EFFECT:
            out.notes.append(f"{name}: no effect on performance, not used")
        else:
            raise UserError(f"{what}: {name}: not a vllm serve flag SpecSim models")
    _speculation(out, spec, resolve_model)
    return out


def _speculation(out: Parsed, spec: str | None, resolve_model) -> None:
    """The variants: plain decoding, and the ``--speculative-config`` drafter if given."""
    what = out.what
    none = {"name": "none", "policy": {"kind": "none"}}
    if spec is None:
        out.set("variants", [none])
        return
    try:
        cfg = json.loads(spec)
    except json.JSONDecodeError as e:
        raise UserError(f"{what}: --speculative-config: not JSON: {e.msg}") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{what}: --speculative-config: must be a JSON object")
    method = cfg.pop("method", None) or ("draft_model" if "model" in cfg else None)
    if method not in VLLM_METHODS:
        raise UserError(f"{what}: --speculative-config: method: one of "
                        f"{', '.join(VLLM_METHODS)}, got {method!r}")
    k = cfg.pop("num_speculative_tokens", None)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise UserError(f"{what}: --speculative-config: num_speculative_tokens: an integer "
                        f">= 1 is required, got {k!r}")
    ours = VLLM_METHODS[method]
    drafter: dict = {"method": ours}
    draft_model = cfg.pop("model", None)
    if ours == "draft_model":
        if draft_model is None:
            raise UserError(f"{what}: --speculative-config: model: required for {method}")
        drafter["model"] = resolve_model(draft_model)
        tp = cfg.pop("draft_tensor_parallel_size", None)
        if tp is not None:
            drafter["tp"] = tp
    elif draft_model is not None:
        out.notes.append(f"--speculative-config model {draft_model}: the {method} head is "
                         "priced from the target's shape")
    for key in ("prompt_lookup_max", "prompt_lookup_min"):
        if key in cfg:
            out.notes.append(f"--speculative-config {key}: changes what n-gram drafting "
                             "accepts, which comes from the scenario's acceptance model")
            cfg.pop(key)
    if cfg:
        raise UserError(f"{what}: --speculative-config: {sorted(cfg)[0]}: not modelled")
    out.set("models.method", ours)
    out.set("models.draft", None)
    out.set("variants", [none, {"name": method, "policy": {"kind": "fixed", "gamma": k},
                                "drafter": drafter}])
    out.notes.append(f"speculation: {method}, {k} tokens per step")


def parse_sglang(text: str, resolve_model: Callable[[str], str]) -> Parsed:
    """``python -m sglang.launch_server --model-path M [flags]`` as overrides."""
    what = "--from-sglang"
    out = Parsed(what)
    head = ("python", "-m", "sglang.launch_server") if text.split()[:1] == ["python"] \
        else ("python3", "-m", "sglang.launch_server")
    pos, flags = _flags(_split(text, what, head), what, {"--trust-remote-code",
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
        if name in mapping:
            out.set(mapping[name], _int(flags, name, what))
        elif name == "--kv-cache-dtype":
            if value not in KV_DTYPES:
                raise UserError(f"{what}: --kv-cache-dtype: one of {', '.join(KV_DTYPES)}, "
                                f"got {value!r}")
            out.set("deployment.kv_bits", KV_DTYPES[value])
        elif name == "--quantization":
            if value not in QUANTIZATION:
                raise UserError(f"{what}: --quantization {value}: not modelled")
            out.set("deployment.weight_bits", QUANTIZATION[value][0])
        elif name == "--speculative-algorithm":
            algo = value
        elif name == "--speculative-num-steps":
            steps = _int(flags, name, what)
        elif name == "--speculative-eagle-topk":
            topk = _int(flags, name, what)
        elif name == "--speculative-num-draft-tokens":
            ndraft = _int(flags, name, what)
        elif name == "--speculative-draft-model-path":
            draft_path = value
        elif name in NO_EFFECT or name in ("--enable-metrics", "--mem-fraction-static"):
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


def parse_vllm_bench(text: str) -> Parsed:
    """``vllm bench serve [flags]``: the workload (random dataset) and the request count."""
    what = "--bench"
    out = Parsed(what)
    pos, flags = _flags(_split(text, what, ("vllm", "bench", "serve")), what, {"--ignore-eos"})
    if pos:
        raise UserError(f"{what}: unexpected words {pos}")
    dataset = flags.pop("--dataset-name", "random")
    if dataset != "random":
        raise UserError(f"{what}: --dataset-name {dataset}: only the random dataset is "
                        "modelled (replay a trace file for others)")
    n = _int(flags, "--num-prompts", what) if "--num-prompts" in flags else 1000
    out.set("run.requests", n)
    ins = _int(flags, "--random-input-len", what) if "--random-input-len" in flags else 1024
    outs = _int(flags, "--random-output-len", what) if "--random-output-len" in flags else 128
    ratio = _float(flags, "--random-range-ratio", what) if "--random-range-ratio" in flags \
        else 0.0
    if not 0 <= ratio < 1:
        raise UserError(f"{what}: --random-range-ratio: must be in [0, 1), got {ratio:g}")
    rate = _float(flags, "--request-rate", what) if "--request-rate" in flags else \
        float("inf")
    burst = _float(flags, "--burstiness", what) if "--burstiness" in flags else 1.0
    if not burst > 0:
        raise UserError(f"{what}: --burstiness: must be > 0, got {burst:g}")
    workload: dict = {"prompt": _length(ins, ratio), "output": _length(outs, ratio)}
    if "--max-concurrency" in flags:
        users = _int(flags, "--max-concurrency", what)
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
    import math

    if ratio == 0:
        return {"kind": "fixed", "tokens": tokens}
    return {"kind": "uniform", "low": max(1, math.floor(tokens * (1 - ratio))),
            "high": math.ceil(tokens * (1 + ratio))}


def preset_sets(parsed: Parsed, flag: str, notes: list[str]) -> list[tuple[str, str]]:
    """The acceptance of the speculating variant: a preset measured for its method and
    target (nearest to its tokens per step) when there is one; the note says which."""
    from workloads.presets import matching

    values = dict(t.split("=", 1) for t in parsed.sets)
    if "models.method" not in values:
        return []
    target, method = json.loads(values["models.target"]), json.loads(values["models.method"])
    variant = json.loads(values["variants"])[1]
    k = variant["policy"].get("gamma") or variant["policy"].get("steps")
    p = matching(method, target, k)
    if p is None:
        notes.append(f"{flag}: no acceptance preset measured for {method} on {target}: the "
                     "scenario's acceptance model is used (set variants.1.acceptance)")
        return []
    text = f"variants.1.acceptance={json.dumps({'kind': 'preset', 'name': p.name})}"
    notes.append(f"{flag}: acceptance: preset {p.name} ({p.dataset}, k {p.k}; {p.source})")
    return [(text, f"{flag} (acceptance preset {p.name})")]
