"""``vllm serve MODEL [flags]`` as a scenario (flag names and defaults from vLLM's
``vllm/engine/arg_utils.py`` and ``vllm/config/speculative.py``), and the acceptance preset
its speculating variant takes."""

from __future__ import annotations

import itertools
import json
import shlex
from collections.abc import Callable

from sim.drafters import ASYNC_METHODS, TRAITS, engine_names
from sim.engines.common import (
    NO_EFFECT,
    Parsed,
    flags_of,
    float_flag,
    force_acceptance,
    int_flag,
    min_variance_marginals,
    precision_flag,
    split,
)
from sim.limits import MAX_GAMMA, MAX_TREE_NODES, draft_nodes
from specdec.errors import UserError, json_object

# vLLM's speculative methods -> SpecSim's drafter methods
VLLM_METHODS = engine_names("vllm")  # --speculative-config method -> SpecSim's


def parse_vllm_serve(text: str, resolve_model: Callable[[str], str]) -> Parsed:
    """``vllm serve MODEL [flags]`` as overrides; see the module docstring."""
    what = "--from-vllm"
    out = Parsed(what)
    booleans = {"--enable-chunked-prefill", "--no-enable-chunked-prefill",
                "--enable-prefix-caching", "--no-enable-prefix-caching", "--trust-remote-code",
                "--disable-log-requests", "--disable-log-stats", "--enable-log-requests",
                "--enforce-eager", "--async-scheduling", "--no-async-scheduling",
                "--scheduler-reserve-full-isl", "--no-scheduler-reserve-full-isl"}
    pos, flags = flags_of(split(text, what, ("vllm", "serve")), what, booleans)
    model = pos[0] if pos else flags.pop("--model", None)
    if model is None or len(pos) > 1:
        raise UserError(f"{what}: give exactly one model (vllm serve MODEL ...), got {pos}")
    out.set("models.target", resolve_model(model))
    out.set("name", "vllm-" + model.rstrip("/").split("/")[-1].lower())
    mapping = {"--tensor-parallel-size": "deployment.tp", "-tp": "deployment.tp",
               "--pipeline-parallel-size": "deployment.pp", "-pp": "deployment.pp",
               "--max-num-seqs": "scheduler.max_num_seqs",
               "--max-num-batched-tokens": "scheduler.max_batched_tokens",
               "--block-size": "scheduler.block_size",
               "--num-gpu-blocks-override": "scheduler.num_gpu_blocks_override"}
    spec, caching, scheduling = None, None, None  # scheduling: async (True) or sync
    for name, value in flags.items():
        if precision_flag(out, name, value, what):  # --kv-cache-dtype, --quantization
            continue
        if name in mapping:
            out.set(mapping[name], int_flag(flags, name, what))
        elif name == "--max-model-len":
            length = model_len(value, what)
            if length is None:
                out.notes.append(f"--max-model-len {value}: vLLM fits the length to the KV "
                                 "cache; SpecSim takes the model's max_position_embeddings")
            else:
                out.set("scheduler.max_model_len", length)
        elif name in ("--enable-chunked-prefill", "--no-enable-chunked-prefill"):
            out.set("scheduler.chunked_prefill", name == "--enable-chunked-prefill")
        elif name == "--speculative-config":
            spec = value
        elif name == "--long-prefill-token-threshold":
            continue  # with the step budget, in _batch_defaults
        elif name == "--gpu-memory-utilization":
            out.set("deployment.gpu_memory_utilization", float_flag(flags, name, what))
        elif name == "--kv-offloading-size":  # GiB summed over the TP ranks (sim.offload)
            out.set("scheduler.kv_offload_gib", float_flag(flags, name, what))
        elif name == "--kv-offloading-backend":
            if value != "native":
                raise UserError(f"{what}: {name} {value}: not modelled; SpecSim's CPU tier "
                                "is vLLM's native offload (--kv-offloading-backend native)")
        elif name in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
            caching = name == "--enable-prefix-caching"
        elif name in ("--scheduler-reserve-full-isl", "--no-scheduler-reserve-full-isl"):
            out.set("scheduler.reserve_full_isl", name == "--scheduler-reserve-full-isl")
        elif name in ("--async-scheduling", "--no-async-scheduling"):
            scheduling = name == "--async-scheduling"
        elif name == "--enforce-eager":
            out.notes.append(f"{name}: not modelled (no CUDA-graph effects are priced)")
        elif name in NO_EFFECT:
            out.notes.append(f"{name}: no effect on performance, not used")
        else:
            raise UserError(f"{what}: {name}: not a vllm serve flag SpecSim models")
    if caching is None:  # vLLM v1 caches prefixes unless told not to
        caching = True
        out.notes.append("prefix caching: on, vLLM v1's default (--no-enable-prefix-caching "
                         "turns it off)")
    out.set("scheduler.prefix_caching", caching)
    _batch_defaults(out, flags)
    _speculation(out, spec, resolve_model)
    _async_scheduling(out, scheduling)
    return out


def _async_scheduling(out: Parsed, scheduling: bool | None) -> None:
    """vLLM's async scheduling: on by default where its V1 model runner supports it (not
    with a host n-gram or suffix proposer, Medusa, or pipeline parallelism), an error
    where ``--async-scheduling`` asks for it there, off with ``--no-async-scheduling``."""
    values = dict(t.split("=", 1) for t in out.sets)
    method = json.loads(values.get("models.method", "null"))
    pp = json.loads(values.get("deployment.pp", "1"))
    why = None
    if method is not None and method not in ASYNC_METHODS:
        why = f"{method} speculative decoding"
    elif pp > 1:
        why = "pipeline parallelism"
    if scheduling and why:
        raise UserError(f"{out.what}: --async-scheduling: vLLM 0.33's V1 model runner does "
                        f"not support it with {why}")
    if scheduling is None:
        scheduling = why is None
        out.notes.append("async scheduling: " + (
            "on, vLLM's default (each step scheduled while the last one runs; "
            "--no-async-scheduling turns it off)" if scheduling else
            f"off: vLLM turns it off with {why}"))
    out.set("scheduler.async_scheduling", scheduling)


_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}


def model_len(text: str, what: str) -> int | None:
    """vLLM's ``--max-model-len``: an integer, with a decimal (k, m, g) or binary (K, M, G)
    suffix as vLLM's ``human_readable_int`` reads it ('1k' 1000, '1K' 1024, '25.6k'
    25600); None for ``auto`` / -1 (vLLM fits it to the KV cache)."""
    import re

    value = str(text).strip()
    if value in ("auto", "-1"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgKMG]?)", value)
    if match is None or ("." in match[1] and match[2] not in "kmg") or \
            ("." in match[1] and not match[2]):
        raise UserError(f"{what}: --max-model-len: an integer such as 4096, 32k or 32K, or "
                        f"auto, got {text!r}")
    length = int(float(match[1]) * _SUFFIX[match[2]]) if match[2] else int(match[1])
    if length < 1:
        raise UserError(f"{what}: --max-model-len: must be >= 1, got {text!r}")
    return length


# vLLM's OpenAI server on GPUs of at least 70 GiB other than the A100 (H100, H200):
# max_num_batched_tokens 8192 and max_num_seqs 1024 when unset (2048 and 256 on the others):
# github vllm-project/vllm vllm/engine/arg_utils.py @99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b,
# EngineArgs._set_default_args; no per-request prefill cap (long_prefill_token_threshold 0
# with max_num_partial_prefills 1): vllm/config/scheduler.py
# @01230b40128e570a58e54e75f7e55c4d5cd9246d, SchedulerConfig
DEFAULT_BATCHED_TOKENS = 8192
DEFAULT_MAX_NUM_SEQS = 1024


def _batch_defaults(out: Parsed, flags: dict) -> None:
    """vLLM's own defaults for the batching limits the command line leaves unset (the
    scenario's defaults are SpecSim's, not vLLM's): its step budget, ``max_num_seqs`` (at
    most the budget, as vLLM takes it) and no per-request prefill cap
    (``--long-prefill-token-threshold`` 0; one above the budget is the budget)."""
    what = out.what
    given = "--max-num-batched-tokens" in flags
    budget = int_flag(flags, "--max-num-batched-tokens", what) if given \
        else DEFAULT_BATCHED_TOKENS
    unset = [f for f in ("--max-num-batched-tokens", "--max-num-seqs") if f not in flags]
    if not given:
        out.set("scheduler.max_batched_tokens", budget)
        if "--no-enable-chunked-prefill" in flags:
            out.notes.append("--no-enable-chunked-prefill without --max-num-batched-tokens: "
                             "vLLM then steps max(max_model_len, 8192) tokens; SpecSim "
                             f"takes {budget} and refuses a request whose prompt and output "
                             "exceed it: give --max-num-batched-tokens")
    if "--max-num-seqs" not in flags:
        out.set("scheduler.max_num_seqs", min(DEFAULT_MAX_NUM_SEQS, budget))
    if unset:
        out.notes.append(f"{', '.join(unset)} unset: vLLM's defaults on GPUs of at least "
                         f"70 GiB other than the A100 ({DEFAULT_BATCHED_TOKENS} tokens per "
                         f"step, {DEFAULT_MAX_NUM_SEQS} sequences at most the step's tokens; "
                         f"2048 and 256 on the others): give them for other GPUs")
    cap = int_flag(flags, "--long-prefill-token-threshold", what, low=0) \
        if "--long-prefill-token-threshold" in flags else 0
    out.set("scheduler.chunk_tokens", budget if cap == 0 or cap > budget else cap)


def _speculation(out: Parsed, spec: str | None, resolve_model) -> None:
    """The variants: plain decoding, and the ``--speculative-config`` drafter if given."""
    what = out.what
    none = {"name": "none", "policy": {"kind": "none"}}
    if spec is None:
        out.set("variants", [none])
        return
    cfg = json_object(spec, f"{what}: --speculative-config")
    method = cfg.pop("method", None) or ("draft_model" if "model" in cfg else None)
    if method not in VLLM_METHODS:
        raise UserError(f"{what}: --speculative-config: method: one of "
                        f"{', '.join(VLLM_METHODS)}, got {method!r}")
    k = cfg.pop("num_speculative_tokens", None)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise UserError(f"{what}: --speculative-config: num_speculative_tokens: an integer "
                        f">= 1 is required, got {k!r}")
    ours = VLLM_METHODS[method]
    # vllm/config/speculative.py (vLLM 0.33.0): dflash always drafts in parallel
    # (parallel_drafting set True for it); a draft model (PARD, K input slots) or an EAGLE /
    # EAGLE-3 head (P-EAGLE, K - 1) does with parallel_drafting: the drafter's ``parallel``
    parallel = cfg.pop("parallel_drafting", False)
    if not isinstance(parallel, bool):
        raise UserError(f"{what}: --speculative-config: parallel_drafting: true or false, got "
                        f"{parallel!r}")
    drafter: dict = {"method": ours}
    if parallel and ours != "dflash":
        if TRAITS[ours].parallel_slots is None:
            raise UserError(f"{what}: --speculative-config: parallel_drafting: not modelled "
                            f"for {method} (draft_model, PARD, and eagle / eagle3, P-EAGLE, "
                            "are; dflash always drafts a block)")
        for key, why in (("speculative_token_tree", "its one pass proposes a chain of K"),
                         ("num_speculative_tokens_per_batch_size",
                          "its input slots are set by the static K")):
            if key in cfg:
                raise UserError(f"{what}: --speculative-config: {key}: not modelled with "
                                f"parallel_drafting ({why})")
        drafter["parallel"] = True
        slots = k + TRAITS[ours].parallel_slots
        name = "PARD" if ours == "draft_model" else "P-EAGLE"
        shift = ", the input shifted by one" if ours != "draft_model" else ""
        out.notes.append(f"parallel_drafting ({name}): one causal draft pass of each "
                         f"request's step tokens, the bonus token and {k - 1} mask tokens"
                         f"{shift}; {slots} input slots and {k} lookahead slots per request "
                         "(vLLM 0.33)")
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
    if ours == "dflash":
        out.notes.append(f"dflash: one draft pass of {k + 1} queries per request (the bonus "
                         f"token and {k} masks), {k + 1} lookahead slots; priced as "
                         "drafter.layers (5, z-lab's) layers of the target's shape")
    if ours == "medusa":  # the checkpoint's num_heads is not on the command line
        if "speculative_token_tree" in cfg:
            raise UserError(f"{what}: --speculative-config: speculative_token_tree: vLLM's "
                            "Medusa proposes top-1 chains, not trees")
        drafter["heads"] = k
        out.notes.append(f"medusa: priced as {k} heads, one per speculative token (a "
                         "checkpoint with more heads runs them all: set "
                         "variants.1.drafter.heads)")
    policy: dict = {"kind": "fixed", "gamma": k}
    tree = cfg.pop("speculative_token_tree", None)
    if tree is not None:
        widths = expansion_of(tree, f"{what}: --speculative-config: speculative_token_tree")
        if k != draft_nodes(widths):
            raise UserError(f"{what}: --speculative-config: num_speculative_tokens: {k}, but "
                            f"speculative_token_tree has {draft_nodes(widths)} nodes "
                            "(vLLM drafts one token per node)")
        policy = {"kind": "tree", "expansion": widths}
    ladder = cfg.pop("num_speculative_tokens_per_batch_size", None)
    if ladder is not None:
        policy = _dynamic_sd(out, ladder, k, method, tree is not None, what)
    for key in ("prompt_lookup_max", "prompt_lookup_min"):
        if key in cfg:
            out.notes.append(f"--speculative-config {key}: changes what n-gram drafting "
                             "accepts, which comes from the scenario's acceptance model")
            cfg.pop(key)
    variant = {"name": method, "policy": policy, "drafter": drafter}
    if tree is not None and cfg.get("rejection_sample_method") == "synthetic":
        raise UserError(f"{what}: --speculative-config: rejection_sample_method synthetic "
                        "with a speculative_token_tree: its rates are per node there, which "
                        "SpecSim does not model (force a chain, or give the acceptance)")
    force_acceptance(out, variant, _synthetic_acceptance(cfg, k, what),
                     "vLLM's synthetic rejection sampler")
    if cfg:
        raise UserError(f"{what}: --speculative-config: {sorted(cfg)[0]}: not modelled")
    out.set("models.method", ours)
    out.set("models.draft", None)
    out.set("variants", [none, variant])
    shape = f"tree <{','.join(map(str, policy['expansion']))}>" if tree is not None else ""
    out.notes.append(f"speculation: {method}, {k} tokens per step" + (f" ({shape})" if shape
                                                                       else ""))


# the methods whose V1 proposers take a K per step (MethodTraits.dynamic_k)
DYNAMIC_SD_METHODS = tuple(m for m, t in TRAITS.items() if t.dynamic_k)


def _dynamic_sd(out: Parsed, ladder, k: int, method: str, tree: bool, what: str) -> dict:
    """The policy of vLLM's ``num_speculative_tokens_per_batch_size`` (Dynamic SD): a
    ``batch_ladder`` keyed on the requests each step schedules, its γ capped at ``k`` as
    vLLM caps them (``build_dynamic_sd_schedule_lookup``); for a method V1 cannot vary,
    the fixed chain vLLM falls back to. Rows are checked as vLLM checks them
    (``validate_and_normalize_dynamic_sd_schedule``), here for the shape and in
    ``sim.policies.BatchLadder`` for the order."""
    name = f"{what}: --speculative-config: num_speculative_tokens_per_batch_size"
    if not isinstance(ladder, list) or not ladder or not all(
            isinstance(row, list) and len(row) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in row)
            for row in ladder):
        raise UserError(f"{name}: a non-empty list of [range_start, range_end, "
                        f"num_speculative_tokens] integers, got {ladder!r}")
    if tree:
        raise UserError(f"{name}: with a speculative_token_tree: SpecSim's ladder drafts "
                        "chains")
    if method not in DYNAMIC_SD_METHODS:
        out.notes.append(f"num_speculative_tokens_per_batch_size: vLLM's V1 model runner "
                         f"does not vary K for {method} and drafts the static {k} tokens")
        return {"kind": "fixed", "gamma": k}
    rows = [[lo, hi, min(g, k)] if g >= 0 else [lo, hi, g] for lo, hi, g in ladder]
    if rows != ladder:
        out.notes.append(f"num_speculative_tokens_per_batch_size: every K capped at "
                         f"num_speculative_tokens {k}, as vLLM caps it")
    out.notes.append("num_speculative_tokens_per_batch_size: K by the requests each step "
                     "schedules, verified by the step after it (vLLM 0.33); the CUDA-graph "
                     "mode vLLM's V1 runner drops to with it (FULL_AND_PIECEWISE to "
                     "PIECEWISE) is not priced")
    return {"kind": "batch_ladder", "ladder": rows, "num_speculative_tokens": k}


def _synthetic_acceptance(cfg: dict, k: int, what: str) -> list[float] | None:
    """The per-position acceptance vLLM forces with ``rejection_sample_method:
    "synthetic"`` (popping its keys from ``cfg``), or None for real rejection sampling.

    vLLM takes exactly one of ``synthetic_acceptance_rates`` (``k`` unconditional,
    non-increasing probabilities that draft position i is accepted) or
    ``synthetic_acceptance_length`` (in [1, k + 1]: the minimum-variance schedule, the
    whole part of length - 1 positions always accepted, the next with the fractional part,
    the rest never): github vllm-project/vllm vllm/config/speculative.py,
    ``SpeculativeConfig._resolve_synthetic_acceptance_rates`` and
    ``_acceptance_length_to_rates`` (the copies read in 2026-12, their commit not recorded);
    the sampler accepts position i given i - 1 with rates[i] / rates[i - 1]
    (vllm/v1/sample/rejection_sampler.py), as SpecSim's ``marginal`` acceptance does.
    ``draft_sample_method`` changes what is accepted, not the timing."""
    method = cfg.pop("rejection_sample_method", "standard")
    rates = cfg.pop("synthetic_acceptance_rates", None)
    length = cfg.pop("synthetic_acceptance_length", None)
    sample = cfg.pop("draft_sample_method", "greedy")
    if sample not in ("greedy", "probabilistic"):
        raise UserError(f"{what}: --speculative-config: draft_sample_method: greedy or "
                        f"probabilistic, got {sample!r}")
    if method == "standard":
        if rates is not None or length is not None:
            raise UserError(f"{what}: --speculative-config: synthetic_acceptance_rates / "
                            "synthetic_acceptance_length are only valid with "
                            "rejection_sample_method 'synthetic' (as vLLM says)")
        return None
    if method != "synthetic":
        raise UserError(f"{what}: --speculative-config: rejection_sample_method: standard or "
                        f"synthetic are modelled, got {method!r}")
    if (rates is None) == (length is None):
        raise UserError(f"{what}: --speculative-config: rejection_sample_method 'synthetic' "
                        "needs exactly one of synthetic_acceptance_rates or "
                        "synthetic_acceptance_length")
    if rates is not None:
        if not isinstance(rates, list) or len(rates) != k or not all(
                isinstance(r, (int, float)) and not isinstance(r, bool) and 0.0 <= r <= 1.0
                for r in rates):
            raise UserError(f"{what}: --speculative-config: synthetic_acceptance_rates: "
                            f"{k} numbers in [0, 1] (one per speculative token), got "
                            f"{rates!r}")
        if any(rates[i] > rates[i - 1] for i in range(1, k)):
            raise UserError(f"{what}: --speculative-config: synthetic_acceptance_rates: must "
                            f"be non-increasing, got {rates!r}")
        return [float(r) for r in rates]
    if isinstance(length, bool) or not isinstance(length, (int, float)) \
            or not 1.0 <= length <= k + 1:
        raise UserError(f"{what}: --speculative-config: synthetic_acceptance_length: a "
                        f"number in [1, {k + 1}] (num_speculative_tokens + 1), got "
                        f"{length!r}")
    return min_variance_marginals(length, k)


def tree_paths(widths: list[int]) -> list[tuple[int, ...]]:
    """Every node of the expansion tree <k1..km> as vLLM's ``speculative_token_tree`` names
    it: the child indices from the root, level by level."""
    return [q for d in range(1, len(widths) + 1)
            for q in itertools.product(*(range(w) for w in widths[:d]))]


def expansion_of(text: str, what: str) -> list[int]:
    """The widths <k1..km> of a vLLM ``speculative_token_tree`` (a list of node paths, each
    a tuple of child indices from the root, e.g. ``"[(0,), (1,), (0, 0), (1, 0)]"``), when
    it is an expansion tree: every node of level d has k_{d+1} children. Another shape is
    an error (SpecSim verifies expansion trees)."""
    import ast

    try:
        paths = ast.literal_eval(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        # the parser's own limits: '-' * 100000 + '1' exhausts its memory or its recursion
        paths = None
    if not isinstance(paths, (list, tuple)) or not paths or not all(
            isinstance(p, tuple) and p and all(isinstance(i, int) and not isinstance(i, bool)
                                               and i >= 0 for i in p) for p in paths):
        shown = repr(text) if len(str(text)) <= 60 else f"{str(text)[:60]!r}... " \
            f"({len(str(text))} characters)"
        raise UserError(f"{what}: a list of node paths such as \"[(0,), (0, 0), (0, 1)]\" is "
                        f"required, got {shown}")
    depth = max(len(p) for p in paths)
    widths = [1 + max(p[d] for p in paths if len(p) > d) for d in range(depth)]
    _check_covering_size(widths, what)
    want = set(tree_paths(widths))
    if len(set(paths)) != len(paths) or set(paths) != want:
        raise UserError(f"{what}: not an expansion tree (every node of a level with the same "
                        f"number of children); SpecSim verifies trees <k1..km>, the nearest "
                        f"covering one is <{','.join(map(str, widths))}> with {len(want)} "
                        f"nodes, got {len(paths)}")
    return widths


def _check_covering_size(widths: list[int], what: str) -> None:
    """Refuse a tree whose covering expansion tree <k1..km> is past the bounds every tree
    has (``sim.limits``: depth and widths at most MAX_GAMMA, at most MAX_TREE_NODES draft
    nodes), before its nodes are listed: two paths 7 levels deep through child 20 cover
    21^7 = 1.8e9 nodes, a MemoryError after 25 s."""
    if len(widths) > MAX_GAMMA:
        raise UserError(f"{what}: a path {len(widths)} levels deep; trees are at most "
                        f"{MAX_GAMMA} deep")
    shape = f"<{','.join(map(str, widths))}>"
    if max(widths) > MAX_GAMMA:
        raise UserError(f"{what}: child index {max(widths) - 1}: the covering expansion "
                        f"tree {shape} is {max(widths)} wide; at most {MAX_GAMMA}")
    nodes = draft_nodes(widths)
    if nodes > MAX_TREE_NODES:
        raise UserError(f"{what}: the covering expansion tree {shape} has {nodes} nodes; "
                        f"at most {MAX_TREE_NODES}")


def preset_sets(parsed: Parsed, flag: str, notes: list[str],
                user_sets: list[str] = ()) -> list[tuple[str, str]]:
    """The acceptance of the speculating variant: a preset measured for its method and
    target (nearest to its tokens per step) when there is one; the note says which. The
    user's own ``--set acceptance=...`` (or ``variants.<i>.acceptance...``) wins over any
    preset, and the note says so."""
    from workloads.presets import matching

    values = dict(t.split("=", 1) for t in parsed.sets)
    if "models.method" not in values:
        return []
    keys = [t.partition("=")[0].strip() for t in user_sets]
    mine = [k for k in keys if k == "acceptance" or k.startswith("acceptance.")
            or (k.startswith("variants.") and ".acceptance" in k)]
    if "acceptance" in json.loads(values["variants"])[1]:  # forced by the command line
        scenario = [k for k in mine if not k.startswith("variants.")]
        if scenario:
            notes.append(f"{flag}: --set {scenario[-1]}: not used by the speculating "
                         "variant, whose acceptance the command line forces (--set "
                         "variants.1.acceptance=... replaces that)")
        return []
    if mine:
        notes.append(f"{flag}: acceptance: yours (--set {mine[-1]}), not a preset")
        return []
    target, method = json.loads(values["models.target"]), json.loads(values["models.method"])
    variant = json.loads(values["variants"])[1]
    if variant.get("drafter", {}).get("parallel"):  # PARD, P-EAGLE: none measured
        notes.append(f"{flag}: no acceptance preset measured for {method} with "
                     "parallel_drafting (the presets are serial drafters'): the scenario's "
                     "acceptance model is used (set acceptance)")
        return []
    p = matching(method, target, deepest(variant["policy"]))
    if p is None:
        notes.append(f"{flag}: no acceptance preset measured for {method} on {target}: the "
                     "scenario's acceptance model is used (set acceptance)")
        return []
    text = f"variants.1.acceptance={json.dumps({'kind': 'preset', 'name': p.name})}"
    notes.append(f"{flag}: acceptance: preset {p.name} ({p.dataset}, k {p.k}; {p.source}); "
                 "--set acceptance=... gives your own")
    return [(text, f"{flag} (acceptance preset {p.name})")]


def deepest(policy: dict) -> int:
    """The most tokens a policy (a scenario's ``policy`` as a mapping) drafts per step: a
    chain's γ, a tree's depth, a ladder's K, a controller's largest draft."""
    from sim.controllers import SGLANG_DEFAULT_SLOTS, sglang_deepest

    kind = policy["kind"]
    if kind == "sglang_adaptive":
        return sglang_deepest(policy.get("slots") or SGLANG_DEFAULT_SLOTS)
    if kind == "tree":
        return len(policy.get("expansion") or []) or policy["steps"]
    if kind == "batch_ladder":
        return policy.get("num_speculative_tokens") or max(g for _, _, g in policy["ladder"])
    for key in ("gamma", "max_draft_len", "max_gamma"):
        if policy.get(key):
            return policy[key]
    return 0


def hf_id(model) -> str:
    """A catalog model's Hugging Face id (its first alias with an organisation), else its id."""
    return next((a for a in model.aliases if "/" in a), model.id)


def serve_command(scenario, variant, catalog) -> tuple[str, list[str]]:
    """The ``vllm serve`` command line that realises ``variant`` of ``scenario``, and what
    it cannot say (notes). The inverse of :func:`parse_vllm_serve` where vLLM has a knob."""
    d, lim, notes = scenario.deployment, scenario.scheduler, []
    target = catalog.model(scenario.models.target)
    words = ["vllm", "serve", hf_id(target)]
    if d.moe_kernel is not None:
        notes.append(f"deployment.moe_kernel {d.moe_kernel}: vLLM chooses its fused-MoE kernel "
                     f"from the checkpoint, the GPU and its environment variables; the line "
                     f"sets none")
    if d.tp > 1:
        words += ["--tensor-parallel-size", str(d.tp)]
    if d.pp > 1:
        words += ["--pipeline-parallel-size", str(d.pp)]
    words += ["--max-num-seqs", str(lim.max_num_seqs),
              "--max-num-batched-tokens", str(lim.max_batched_tokens)]
    if lim.max_model_len is not None:
        words += ["--max-model-len", str(lim.max_model_len)]
    if not lim.chunked_prefill:
        words.append("--no-enable-chunked-prefill")
    elif lim.chunk_tokens < lim.max_batched_tokens:
        words += ["--long-prefill-token-threshold", str(lim.chunk_tokens)]
    # vLLM v1 caches prefixes by default: say which the scenario simulated
    words.append("--enable-prefix-caching" if lim.prefix_caching
                 else "--no-enable-prefix-caching")
    if lim.order == "vllm_v1" and lim.vllm_release != "0.11":
        # vLLM schedules asynchronously by default from 0.20 where it can: say which
        words.append("--async-scheduling" if lim.async_scheduling
                     else "--no-async-scheduling")
        if lim.reserve_full_isl is False:
            words.append("--no-scheduler-reserve-full-isl")
    if lim.order == "vllm_v1":
        notes.append(f"scheduling: vLLM {lim.vllm_release}'s rules (scheduler.vllm_release)")
    if d.gpu_memory_utilization != 0.9:  # vLLM's default
        words += ["--gpu-memory-utilization", f"{d.gpu_memory_utilization:g}"]
    if lim.kv_offload_gib is not None:  # vLLM's native CPU offload (sim.offload)
        words += ["--kv-offloading-size", f"{lim.kv_offload_gib:g}"]
        if lim.kv_offload_link is not None:
            notes.append(f"scheduler.kv_offload_link {lim.kv_offload_link}: the host link is "
                         "the machine's, not a vLLM flag")
    if d.kv_bits == 8:
        words += ["--kv-cache-dtype", "fp8"]
    if d.weight_bits == 8 and getattr(d, "compute_dtype", "bf16") == "fp8":
        scales = d.fp8_scales or target.fp8_scales
        if target.ships_fp8() or scales == "dynamic":
            # an FP8 checkpoint brings its own scales; a 16-bit one is quantized when
            # loaded, activation scales computed every pass (fp8_scales dynamic)
            words += ["--quantization", "fp8"]
        else:
            notes.append(f"FP8 W8A8 with {scales} scales: serve a checkpoint quantized that "
                         "way (NVIDIA ModelOpt FP8 for per-tensor static scales; "
                         "--quantization fp8 on the 16-bit one computes its activation "
                         "scales every pass, deployment.fp8_scales: dynamic)")
    elif d.weight_bits != 16:
        notes.append(f"{d.weight_bits}-bit weights: serve a checkpoint quantized that way "
                     "(AWQ/GPTQ for 4 bits)")
    if d.replicas > 1:
        notes.append(f"{d.replicas} replicas: run one such server per replica behind a "
                     "load balancer")
    spec = _speculative_config(scenario, variant, catalog, notes)
    if spec is not None:
        words += ["--speculative-config", json.dumps(spec)]
    return shlex.join(words), notes


def _speculative_config(scenario, variant, catalog, notes: list[str]) -> dict | None:
    policy = variant.policy
    if policy.kind == "none":
        return None
    drafter = variant.drafter or scenario.models.drafter()
    spec: dict = {"method": drafter.method}
    if getattr(drafter, "parallel", False):  # PARD, P-EAGLE (vLLM's parallel_drafting)
        spec["parallel_drafting"] = True
    if drafter.method == "draft_model":
        spec["model"] = hf_id(catalog.model(getattr(drafter, "model", None)
                                             or scenario.models.draft))
        if getattr(drafter, "tp", 1) > 1:
            spec["draft_tensor_parallel_size"] = drafter.tp
    elif drafter.method in ("eagle", "eagle3"):
        spec["model"] = f"<an {drafter.method} head trained for {scenario.models.target}>"
        notes.append("speculative-config model: name the EAGLE head checkpoint to serve")
    elif drafter.method == "medusa":
        spec["model"] = f"<{drafter.heads} Medusa heads trained for {scenario.models.target}>"
        notes.append("speculative-config model: name the Medusa heads checkpoint to serve "
                     "(vLLM's Medusa proposes top-1 chains, not trees)")
    if policy.kind == "fixed":
        spec["num_speculative_tokens"] = policy.gamma
    elif policy.kind == "tree" and drafter.method == "medusa":  # vLLM's: top-1 chains only
        depth = len(policy.shape)
        spec["num_speculative_tokens"] = depth
        notes.append(f"policy tree: vLLM's Medusa proposes top-1 chains, so the command "
                     f"drafts a chain of the tree's depth ({depth})")
    elif policy.kind == "tree":  # vLLM's speculative_token_tree: every node's path
        paths = tree_paths(policy.shape)
        spec["num_speculative_tokens"] = len(paths)
        spec["speculative_token_tree"] = str(paths)
        if drafter.method not in ("eagle", "eagle3"):
            notes.append("speculative_token_tree: vLLM's tree drafting is in its EAGLE "
                         "proposer (vllm/v1/spec_decode/eagle.py); check that your vLLM "
                         f"drafts trees for {drafter.method}")
    elif policy.kind == "batch_ladder":
        rows = sorted(policy.ladder)
        spec["num_speculative_tokens"] = policy.num_speculative_tokens or max(
            g for _, _, g in rows)
        spec["num_speculative_tokens_per_batch_size"] = [list(r) for r in rows]
        if policy.key != "scheduled" or policy.sticky:
            notes.append(f"num_speculative_tokens_per_batch_size: vLLM keys it on the "
                         f"requests each step schedules, not the policy's "
                         f"{'sticky ' if policy.sticky else ''}{policy.key} count")
    else:
        notes.append(f"policy {policy.kind}: vLLM has no such knob; the command drafts a "
                     "fixed chain of the policy's deepest shape")
        spec["num_speculative_tokens"] = deepest(policy.model_dump())
    return spec
