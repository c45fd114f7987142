"""``trtllm-serve MODEL [flags]`` with its ``--config`` (``--extra_llm_api_options``) YAML as
a scenario: TensorRT-LLM's PyTorch backend, its speculative config and its controls.

Flags from TensorRT-LLM's ``tensorrt_llm/commands/serve.py`` (github NVIDIA/TensorRT-LLM
@00209af1, ``get_llm_args`` and the ``serve`` command's options); the defaults it takes
from ``BuildConfig`` (tensorrt_llm/builder.py @008b2b8d: ``max_batch_size`` 2048,
``max_num_tokens`` 8192) and ``KvCacheConfig`` (``free_gpu_memory_fraction`` 0.9, as
``get_llm_args`` passes it). The YAML's keys are the LLM API's (``TorchLlmArgs``); the
speculative config's are ``DecodingBaseConfig``'s and its subclasses' (TensorRT-LLM
1.3.0rc29's LLM API reference): ``decoding_type`` MTP, Eagle3 (Eagle its alias), NGram or
DraftTarget, ``max_draft_len`` (MTP: ``num_nextn_predict_layers``), and the controls
``draft_len_schedule``, ``max_concurrency``, ``acceptance_rate_window_size`` and
``acceptance_rate_threshold`` (``sim.controllers.TrtllmSpeculation``). An assignment
``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS=N`` before the command forces the acceptance
(:func:`forced_acceptance`).

TensorRT-LLM schedules with its own capacity scheduler (GUARANTEED_NO_EVICT: a request is
admitted only with KV for its whole output) and, by default, without chunked prefill;
SpecSim runs vLLM v1's order with chunked prefill off, and says so in the notes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from sim.drafters import TRAITS, engine_names
from sim.engines.common import (
    KV_DTYPES,
    NO_EFFECT,
    TRTLLM_MOE_BACKENDS,
    TRTLLM_MOE_WRITES,
    Parsed,
    flags_of,
    float_flag,
    force_acceptance,
    int_flag,
    min_variance_marginals,
    split,
)
from specdec.errors import UserError

DEFAULT_MAX_BATCH = 2048
DEFAULT_MAX_TOKENS = 8192
# decoding_type -> SpecSim's drafting method
TRTLLM_METHODS = engine_names("trtllm")
_NO_EFFECT = {"--host", "--port", "--tokenizer", "--served-model-name", "--log-level",
              "--trust-remote-code", "--num-postprocess-workers", "--reasoning-parser",
              "--tool-parser", "--chat-template", "--revision", "--metadata-server-config-file"}
# LLM API keys that do not change what SpecSim simulates
_YAML_NO_EFFECT = {"print_iter_log", "return_perf_metrics", "enable_iter_perf_stats",
                   "trust_remote_code", "stream_interval", "num_postprocess_workers"}
# speculative-config keys that change what is accepted, not the timing
_SPEC_NO_TIMING = {"is_public_pool", "is_keep_all", "is_use_oldest", "max_matching_ngram_size",
                   "use_relaxed_acceptance_for_thinking", "relaxed_topk", "relaxed_delta",
                   "eagle3_one_model", "load_format"}
FORCE_ENV = "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"
_CONTROLS = ("draft_len_schedule", "max_concurrency", "acceptance_rate_window_size",
             "acceptance_rate_threshold")


def parse_trtllm(text: str, resolve_model: Callable[[str], str]) -> Parsed:
    """``trtllm-serve MODEL [flags]`` as overrides (the YAML of ``--config`` read too)."""
    what = "--from-trtllm"
    out = Parsed(what)
    env: dict[str, str] = {}
    words = split(text, what, ("trtllm-serve",), env)
    forced = env.pop(FORCE_ENV, None)
    if env:
        raise UserError(f"{what}: environment variable {sorted(env)[0]}: not modelled "
                        f"(SpecSim reads {FORCE_ENV})")
    pos, flags = flags_of(words, what, {"--trust-remote-code"})
    if "serve" in pos[:1]:  # "trtllm-serve serve MODEL" is the same command
        pos = pos[1:]
    if len(pos) != 1:
        raise UserError(f"{what}: one MODEL is required, got {pos}")
    target = resolve_model(pos[0])
    out.set("models.target", target)
    out.set("name", "trtllm-" + pos[0].rstrip("/").split("/")[-1].lower())
    out.set("deployment.framework", "trtllm")
    out.set("scheduler.order", "vllm_v1")
    out.notes.append("scheduler: TensorRT-LLM's capacity scheduler (GUARANTEED_NO_EVICT) is "
                     "not modelled; SpecSim runs vLLM v1's order with its budget and limits")
    limits = {"max_batch_size": DEFAULT_MAX_BATCH, "max_num_tokens": DEFAULT_MAX_TOKENS,
              "enable_chunked_prefill": False}
    config = flags.pop("--config", None)
    extra = flags.pop("--extra-llm-api-options", None)
    if config is not None and extra is not None:
        raise UserError(f"{what}: --config, --extra_llm_api_options: give one (the second "
                        "is the first's old name)")
    backend = flags.pop("--backend", "pytorch")
    if backend != "pytorch":
        raise UserError(f"{what}: --backend {backend}: SpecSim models the PyTorch backend")
    # the layout, settled once the YAML (whose keys win) is read: _layout
    layout = {"tensor_parallel_size": 1, "moe_expert_parallel_size": None,
              "moe_tensor_parallel_size": None, "enable_attention_dp": False}
    sizes = {"--tp-size": "tensor_parallel_size", "--ep-size": "moe_expert_parallel_size"}
    for name, value in flags.items():
        if name in sizes:
            layout[sizes[name]] = _number(int_flag, name, value, what)
        elif name == "--pp-size":
            out.set("deployment.pp", _number(int_flag, name, value, what))
        elif name == "--max-batch-size":
            limits["max_batch_size"] = _number(int_flag, name, value, what)
        elif name == "--max-num-tokens":
            limits["max_num_tokens"] = _number(int_flag, name, value, what)
        elif name == "--max-seq-len":
            out.set("scheduler.max_model_len", _number(int_flag, name, value, what))
        elif name in ("--kv-cache-free-gpu-memory-fraction", "--free-gpu-memory-fraction"):
            out.set("deployment.gpu_memory_utilization", _number(float_flag, name, value, what))
            out.notes.append(f"{_shown(name)}: the share of free memory after the weights, "
                             "taken as the share of the GPU the weights and KV cache may fill")
        elif name in _NO_EFFECT or name in NO_EFFECT:
            out.notes.append(f"{_shown(name)}: not used by the simulation")
        else:
            raise UserError(f"{what}: {_shown(name)}: not a trtllm-serve flag SpecSim models")
    spec = None
    path = config or extra
    if path is not None:
        spec = _yaml(out, Path(path), limits, layout, what)
    _layout(out, layout, f"{what}: {path}" if path is not None else what)
    out.set("scheduler.max_num_seqs", limits["max_batch_size"])
    out.set("scheduler.max_batched_tokens", limits["max_num_tokens"])
    out.set("scheduler.chunked_prefill", bool(limits["enable_chunked_prefill"]))
    none = {"name": "none", "policy": {"kind": "none"}}
    if spec is None:
        if forced is not None:
            out.notes.append(f"{FORCE_ENV}: no speculative_config, nothing to force")
        out.set("variants", [none])
        return out
    one_model = spec.get("eagle3_one_model", True) is not False
    variant = _speculation(out, spec, resolve_model, what)
    if forced is not None:
        force_acceptance(out, variant, forced_acceptance(
            forced, variant["drafter"]["method"], one_model, _deepest(variant), what),
            f"TensorRT-LLM's {FORCE_ENV}")
    out.set("models.method", variant["drafter"]["method"])
    out.set("models.draft", None)
    out.set("variants", [none, variant])
    return out


def _yaml(out: Parsed, path: Path, limits: dict, layout: dict, what: str) -> dict | None:
    """The ``--config`` YAML's keys into ``out``, ``limits`` and ``layout``; its speculative
    config."""
    from sim.loading import read_yaml

    try:
        doc = read_yaml(path, "TensorRT-LLM config")
    except UserError as e:
        raise UserError(f"{what}: --config {e}") from None
    where = f"{what}: {path}"
    spec = None
    for key, value in doc.items():
        if key in ("max_batch_size", "max_num_tokens"):
            limits[key] = _int(value, f"{where}: {key}")
        elif key == "enable_chunked_prefill":
            limits[key] = _bool(value, f"{where}: {key}")
        elif key == "speculative_config":
            if not isinstance(value, dict):
                raise UserError(f"{where}: speculative_config: a mapping")
            spec = value
        elif key == "kv_cache_config":
            _kv_cache(out, value, f"{where}: kv_cache_config")
        elif key == "moe_config":
            _moe_config(out, value, f"{where}: moe_config")
        elif key == "pipeline_parallel_size":
            out.set("deployment.pp", _int(value, f"{where}: {key}"))
        elif key in ("tensor_parallel_size", "moe_expert_parallel_size",
                     "moe_tensor_parallel_size"):
            layout[key] = _int(value, f"{where}: {key}")
        elif key == "enable_attention_dp":
            layout[key] = _bool(value, f"{where}: {key}")
        elif key in ("cuda_graph_config", "disable_overlap_scheduler"):
            out.notes.append(f"{path}: {key}: not priced (SpecSim prices a step's host work "
                             "the same with and without CUDA graphs or the overlap scheduler)")
        elif key in _YAML_NO_EFFECT:
            out.notes.append(f"{path}: {key}: not used by the simulation")
        else:
            raise UserError(f"{where}: {key}: not a TensorRT-LLM option SpecSim models")
    return spec


def _moe_config(out: Parsed, cfg, where: str) -> None:
    """``moe_config``: its ``backend`` is the fused-MoE kernel (deployment.moe_kernel)."""
    if not isinstance(cfg, dict):
        raise UserError(f"{where}: a mapping")
    for key, value in cfg.items():
        if key != "backend":
            raise UserError(f"{where}: {key}: not a TensorRT-LLM option SpecSim models")
        if value not in TRTLLM_MOE_BACKENDS:
            raise UserError(f"{where}: backend: one of {', '.join(TRTLLM_MOE_BACKENDS)} (the "
                            f"fused-MoE kernels SpecSim prices), got {value!r}")
        out.set("deployment.moe_kernel", TRTLLM_MOE_BACKENDS[value])


def _kv_cache(out: Parsed, cfg, where: str) -> None:
    if not isinstance(cfg, dict):
        raise UserError(f"{where}: a mapping")
    for key, value in cfg.items():
        if key == "free_gpu_memory_fraction":
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 < value <= 1:
                raise UserError(f"{where}: free_gpu_memory_fraction: a number in (0, 1], "
                                f"got {value!r}")
            out.set("deployment.gpu_memory_utilization", float(value))
        elif key == "dtype":
            if value not in KV_DTYPES:
                raise UserError(f"{where}: dtype: one of {', '.join(KV_DTYPES)}, got "
                                f"{value!r}")
            out.set("deployment.kv_bits", KV_DTYPES[value])
        elif key == "enable_block_reuse":
            out.set("scheduler.prefix_caching", _bool(value, f"{where}: {key}"))
        else:
            raise UserError(f"{where}: {key}: not a KV cache option SpecSim models")


def _speculation(out: Parsed, spec: dict, resolve_model, what: str) -> dict:
    """The speculative variant of a ``speculative_config`` mapping."""
    spec = dict(spec)
    where = f"{what}: speculative_config"
    kind = spec.pop("decoding_type", None)
    if kind not in TRTLLM_METHODS:
        raise UserError(f"{where}: decoding_type: one of {', '.join(TRTLLM_METHODS)}, got "
                        f"{kind!r}")
    method = TRTLLM_METHODS[kind]
    k = spec.pop("max_draft_len", None)
    layers = spec.pop("num_nextn_predict_layers", None)
    if method == "mtp" and layers is not None:
        k = layers if k is None else k  # MTP drafts one token per next-n module run
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UserError(f"{where}: max_draft_len (MTP: num_nextn_predict_layers): an integer "
                        f">= 1 is required, got {k!r}")
    drafter: dict = {"method": method}
    model = spec.pop("speculative_model", None) or spec.pop("speculative_model_dir", None)
    if method == "draft_model":
        if model is None:
            raise UserError(f"{where}: speculative_model: required for DraftTarget")
        drafter["model"] = resolve_model(model)
    elif model is not None:
        out.notes.append(f"speculative_model {model}: the {kind} head is priced from the "
                         "target's shape")
    if method == "ngram":
        drafter["proposal_rate"] = 1.0
        out.notes.append("NGram: every step drafts (proposal_rate 1; set "
                         "variants.1.drafter.proposal_rate for prompts without matches)")
    for key in sorted(spec):
        if key in _SPEC_NO_TIMING:
            out.notes.append(f"speculative_config {key}: changes what is accepted, which "
                             "comes from the scenario's acceptance model")
            spec.pop(key)
    policy: dict = {"kind": "trtllm", "max_draft_len": k}
    for key in _CONTROLS:
        if key in spec:
            policy[key] = spec.pop(key)
    for old in ("acceptance_window", "acceptance_length_threshold"):
        if old in spec:
            raise UserError(f"{where}: {old}: the older acceptance gate (per finished request) "
                            "is not modelled; acceptance_rate_window_size and "
                            "acceptance_rate_threshold are")
    if spec:
        raise UserError(f"{where}: {sorted(spec)[0]}: not modelled")
    if len(policy) == 2:
        policy = {"kind": "fixed", "gamma": k}
    out.notes.append(f"speculation: {kind}, {k} draft tokens per step"
                     + (" with TensorRT-LLM's controls" if policy["kind"] == "trtllm" else ""))
    return {"name": kind.lower(), "policy": policy, "drafter": drafter}


def _deepest(variant: dict) -> int:
    """The most draft tokens a step of ``variant`` drafts (its ``max_draft_len``)."""
    policy = variant["policy"]
    return policy["gamma"] if policy["kind"] == "fixed" else policy["max_draft_len"]


def forced_acceptance(text: str, method: str, one_model: bool, k: int,
                      what: str) -> list[float] | None:
    """P(draft position i accepted), i = 1..k, that ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS``
    (``text``: accepted *draft* tokens a step, the bonus token not counted; 0: off) forces
    on every generation request, or None.

    The one-model workers (MTP, EAGLE-3 unless ``eagle3_one_model: false``) read it as a
    number: its whole part accepted every step and one more with its fraction's probability,
    drawn per request and step, never past the step's draft length: github
    NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/interface.py @00b6d5a2,
    ``get_force_num_accepted_tokens_float`` and ``SpecWorkerBase._apply_force_accepted_tokens``
    -- the minimum-variance schedule of acceptance length 1 + N. The two-model path
    (DraftTarget, NGram, a two-model EAGLE-3) reads it as an integer
    (``get_force_num_accepted_tokens``, the same file, and
    tensorrt_llm/_torch/pyexecutor/sampler.py ``TorchSampler._process_draft_tokens_greedy``:
    min(N, drafted) accepted; the copy read in 2026-12, its commit not recorded), and
    warns and forces nothing on a fraction, which SpecSim refuses rather than guess."""
    name = f"{what}: {FORCE_ENV}"
    try:
        n = float(text)
    except ValueError:
        raise UserError(f"{name}: a number of accepted draft tokens, got {text!r}") from None
    if not (n >= 0 and math.isfinite(n)):
        raise UserError(f"{name}: accepted draft tokens per step, 0 or more, got {text!r}")
    two_model = method in ("draft_model", "ngram") or (method == "eagle3" and not one_model)
    if two_model and n != int(n):
        raise UserError(f"{name}: {text}: TensorRT-LLM's two-model path ({method}) reads "
                        "an integer only (a fraction forces nothing there)")
    if n == 0:
        return None
    return min_variance_marginals(1.0 + min(n, k), k)


def _shown(name: str) -> str:
    """A flag as trtllm-serve spells it (``--tp_size``; ``flags_of`` reads it as
    ``--tp-size``)."""
    return "--" + name.removeprefix("--").replace("-", "_")


def _number(read, name: str, value: str, what: str):
    """A flag's value read by ``int_flag`` or ``float_flag``, its errors naming the flag as
    trtllm-serve spells it."""
    return read({_shown(name): value}, _shown(name), what)


def _layout(out: Parsed, layout: dict, where: str) -> None:
    """The TP group's split as TensorRT-LLM's ``Mapping`` makes it (tensorrt_llm/mapping.py
    @05ebebb2, ``Mapping.__init__``): ``moe_tensor_parallel_size`` x
    ``moe_expert_parallel_size`` = ``tensor_parallel_size``, the one not given the quotient
    (neither: every expert split over the group). With ``enable_attention_dp`` each rank
    runs the attention on its own requests: SpecSim's tp 1 with ep the group's size (whole
    experts; ``hardware.deployment``), which needs ``moe_tensor_parallel_size`` 1."""
    tp, ep = layout["tensor_parallel_size"], layout["moe_expert_parallel_size"]
    moe_tp = layout["moe_tensor_parallel_size"]
    if ep is None:
        ep = 1 if moe_tp is None else tp // moe_tp
    if moe_tp is None:
        moe_tp = tp // ep
    if moe_tp * ep != tp:
        raise UserError(f"{where}: moe_tensor_parallel_size x moe_expert_parallel_size: "
                        f"{moe_tp} x {ep} must equal tensor_parallel_size {tp}")
    if layout["enable_attention_dp"] and tp > 1:
        if moe_tp != 1:
            raise UserError(f"{where}: enable_attention_dp: with experts split "
                            f"{moe_tp} ways (moe_tensor_parallel_size {moe_tp}) is not "
                            f"modelled: SpecSim's data-parallel attention takes whole "
                            f"experts (moe_expert_parallel_size {tp})")
        out.notes.append(f"enable_attention_dp: {tp} attention ranks of their own, "
                         f"priced as tp 1, ep {tp}: one scheduler over the {tp} groups, "
                         f"assumed evenly loaded (TensorRT-LLM balances them itself)")
        tp = 1
    out.set("deployment.tp", tp)
    out.set("deployment.ep", ep)


def _int(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: an integer >= 1, got {value!r}")
    return value


def _bool(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{where}: true or false, got {value!r}")
    return value


_DECODING = {m: t.trtllm[0] for m, t in TRAITS.items() if t.trtllm}  # what it writes


def serve_command(scenario, variant, catalog) -> tuple[str, str, list[str]]:
    """The ``trtllm-serve`` line and its ``--config`` YAML (``config.yaml``) that realise
    ``variant`` of ``scenario``, and what they cannot say (notes): the inverse of
    :func:`parse_trtllm` where TensorRT-LLM has a knob."""
    import shlex

    import yaml

    from sim.engines.vllm import hf_id

    d, lim, notes = scenario.deployment, scenario.scheduler, []
    target = catalog.model(scenario.models.target)
    words = ["trtllm-serve", hf_id(target)]
    config: dict = {}
    tp = d.tp
    if d.ep > d.tp:  # data-parallel attention: every rank of the world its own attention
        config["enable_attention_dp"] = True
        tp = d.ep
        if d.tp > 1:
            notes.append(f"deployment: tp {d.tp} within each of {d.ep // d.tp} data-parallel "
                         f"attention groups: TensorRT-LLM's attention DP runs each rank's "
                         f"attention alone (tp 1)")
    for flag, value, default in (("--tp_size", tp, 1), ("--pp_size", d.pp, 1),
                                 ("--ep_size", d.ep, 1)):
        if value != default:
            words += [flag, str(value)]
    words += ["--max_batch_size", str(lim.max_num_seqs), "--max_num_tokens",
              str(lim.max_batched_tokens)]
    if lim.max_model_len is not None:
        words += ["--max_seq_len", str(lim.max_model_len)]
    if lim.chunked_prefill:
        config["enable_chunked_prefill"] = True
    kv: dict = {"enable_block_reuse": bool(lim.prefix_caching)}
    if d.gpu_memory_utilization != 0.9:
        kv["free_gpu_memory_fraction"] = d.gpu_memory_utilization
    if d.kv_bits == 8:
        kv["dtype"] = "fp8"
    config["kv_cache_config"] = kv
    if d.moe_kernel is not None:
        config["moe_config"] = {"backend": TRTLLM_MOE_WRITES[d.moe_kernel]}
    spec = _speculative_config(scenario, variant, notes)
    if spec is not None:
        config["speculative_config"] = spec
    words += ["--config", "config.yaml"]
    notes.append("scheduling: TensorRT-LLM's own capacity scheduler, which SpecSim does not "
                 "model (the simulation ran vLLM v1's order)")
    return shlex.join(words), yaml.safe_dump(config, sort_keys=False), notes


def _speculative_config(scenario, variant, notes: list[str]) -> dict | None:
    """The ``speculative_config`` mapping of ``variant``, or None without speculation."""
    policy = variant.policy
    if policy.kind == "none":
        return None
    drafter = variant.drafter or scenario.models.drafter()
    kind = _DECODING.get(drafter.method)
    if kind is None:
        notes.append(f"drafting method {drafter.method}: TensorRT-LLM's PyTorch backend has "
                     "no such decoding_type")
        return None
    spec: dict = {"decoding_type": kind}
    if drafter.method == "draft_model":
        spec["speculative_model"] = f"<{getattr(drafter, 'model', None) or scenario.models.draft}>"
    elif drafter.method in ("eagle", "eagle3"):
        spec["speculative_model"] = f"<an Eagle3 head trained for {scenario.models.target}>"
    if policy.kind == "trtllm":
        spec["max_draft_len"] = policy.max_draft_len
        for key in ("draft_len_schedule", "max_concurrency", "acceptance_rate_threshold"):
            if getattr(policy, key) is not None:
                spec[key] = getattr(policy, key)
        if policy.acceptance_rate_window_size:
            spec["acceptance_rate_window_size"] = policy.acceptance_rate_window_size
    elif policy.kind == "fixed":
        spec["max_draft_len"] = policy.gamma
    else:
        from sim.engines.vllm import deepest

        depth = deepest(policy.model_dump())
        notes.append(f"policy {policy.kind}: TensorRT-LLM has no such knob; the config drafts "
                     f"a fixed chain of its deepest shape ({depth})")
        spec["max_draft_len"] = depth
    if kind == "MTP":
        spec["num_nextn_predict_layers"] = spec.pop("max_draft_len")
    return spec
