"""``python -m sglang.launch_server --model-path M [flags]`` as a scenario (flag names from
SGLang's ``python/sglang/srt/server_args.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sim.controllers import SGLANG_SLOT_DEFAULTS, check_sglang_slots, sglang_initial_steps
from sim.drafters import TRAITS, engine_names
from sim.engines.common import (
    NO_EFFECT,
    SGLANG_MOE_RUNNERS,
    SGLANG_MOE_WRITES,
    Parsed,
    flags_of,
    float_flag,
    force_acceptance,
    int_flag,
    min_variance_marginals,
    precision_flag,
    split,
)
from sim.engines.vllm import deepest, hf_id
from sim.limits import MAX_RECV_INTERVAL
from specdec.errors import UserError, json_object

SGLANG_METHODS = engine_names("sglang")  # --speculative-algorithm -> SpecSim's method
# DFLASH's block (verify window) when neither --speculative-num-draft-tokens nor
# --speculative-dflash-block-size is given and the draft config names none: 16, its K 15
# (python/sglang/srt/arg_groups/speculative_hook.py, SGLang 0.5.14 wheel; it reads the draft
# config's block_size first, 16 in z-lab's -b16 drafters)
DFLASH_BLOCK = 16


# SGLang's chunked_prefill_size when unset, for GPUs of 60-160 GiB (H100, H200, A100-80GB;
# 2048-4096 below, 16384 above): github sgl-project/sglang
# python/sglang/srt/arg_groups/memory_hook.py @031ed82d8b5ec8db9cf88cffb057c2e91c964262,
# handle_gpu_memory_settings; max_prefill_tokens 16384: python/sglang/srt/server_args.py
DEFAULT_CHUNK = 8192
DEFAULT_MAX_PREFILL = 16384
# its max_running_requests when unset: int(KV pool tokens / context length x 512) clamped to
# 2048-4096, at most half the pool's tokens (github sgl-project/sglang
# python/sglang/srt/model_executor/model_runner.py @01cc04e2b5b01ce379698a3fee1bd17706e1d0ec,
# the max_num_reqs default); 48 with a speculative algorithm ("Max running requests is reset
# to 48 for speculative decoding": python/sglang/srt/server_args.py, its speculative
# decoding handling; the copies read in 2026-12, the commit not recorded)
DEFAULT_MAX_RUNNING = 2048
SPECULATIVE_MAX_RUNNING = 48


def _prefill_budget(out: Parsed, flags: dict, what: str) -> None:
    """``--chunked-prefill-size`` (the tokens of a prefill batch; 0 or less: no chunking,
    whole prompts up to ``--max-prefill-tokens``) as the scheduler's budget and chunk."""
    name, cap_name = "--chunked-prefill-size", "--max-prefill-tokens"
    cap = int_flag(flags, cap_name, what) if cap_name in flags else None
    size = int_flag(flags, name, what, low=-(2 ** 31)) if name in flags else None
    flags.pop(cap_name, None)
    flags.pop(name, None)
    if size is not None and size <= 0:
        budget = DEFAULT_MAX_PREFILL if cap is None else cap
        out.set("scheduler.chunked_prefill", False)
        out.set("scheduler.max_batched_tokens", budget)
        out.notes.append(f"{name} off: prefill batches of whole prompts up to {budget} "
                         "tokens; SpecSim refuses a prompt longer than that, which SGLang "
                         "runs alone in its batch")
        return
    budget = DEFAULT_CHUNK if size is None else size
    if size is None:
        out.notes.append(f"{name} unset: {DEFAULT_CHUNK} tokens per prefill batch, SGLang's "
                         "default on GPUs of 60-160 GiB (H100, H200, A100-80GB; it picks "
                         "2048-4096 below and 16384 above): give it for other GPUs")
    if cap is not None and cap < budget:
        out.notes.append(f"{cap_name} {cap} below {name} {budget}: prefill batches of "
                         f"{cap} tokens (SGLang lets a prompt being chunked fill up to "
                         f"{budget})")
        budget = cap
    out.set("scheduler.chunked_prefill", True)
    out.set("scheduler.max_batched_tokens", budget)
    out.set("scheduler.chunk_tokens", budget)


def parse_sglang(text: str, resolve_model: Callable[[str], str],
                 has_mtp: Callable[[str], bool] = lambda model_id: False) -> Parsed:
    """``python -m sglang.launch_server --model-path M [flags]`` as overrides.
    ``has_mtp(id)``: whether the target's checkpoint carries multi-token-prediction layers
    (DeepSeek-V3/R1's next-n layer): there SGLang's EAGLE runs that module, as its
    DeepSeek docs launch it (NEXTN is EAGLE's alias in SGLang)."""
    what = "--from-sglang"
    out = Parsed(what)
    env: dict[str, str] = {}
    first = next((w for w in text.split() if w != "env" and "=" not in w), "")
    head = ("python", "-m", "sglang.launch_server") if first == "python" \
        else ("python3", "-m", "sglang.launch_server")
    pos, flags = flags_of(split(text, what, head, env), what, {"--trust-remote-code",
                                                                "--enable-metrics",
                                                                "--disable-radix-cache",
                                                                "--speculative-adaptive",
                                                                "--enable-dp-attention"})
    if pos:
        raise UserError(f"{what}: unexpected words {pos}")
    model = flags.pop("--model-path", None) or flags.pop("--model", None)
    if model is None:
        raise UserError(f"{what}: --model-path: required")
    target = resolve_model(model)
    out.set("models.target", target)
    out.set("name", "sglang-" + model.rstrip("/").split("/")[-1].lower())
    # SGLang's timing and its scheduler: a prefill batch of at most chunked_prefill_size
    # tokens whenever one can be formed, else the decode batch (sim.scheduling.prefill_first)
    out.set("deployment.framework", "sglang")
    out.set("scheduler.order", "prefill_first")
    _prefill_budget(out, flags, what)
    # SGLang reuses cached prompt prefixes (its radix cache) unless told not to
    caching = flags.pop("--disable-radix-cache", None) is None
    if caching:
        out.notes.append("prefix caching: on, SGLang's default radix cache, simulated as "
                         "vLLM's block prefix cache: hits in whole blocks of "
                         "scheduler.block_size tokens (--disable-radix-cache turns it off)")
    out.set("scheduler.prefix_caching", caching)
    if "--max-running-requests" not in flags:
        if "--speculative-algorithm" in flags:
            out.set("scheduler.max_num_seqs", SPECULATIVE_MAX_RUNNING)
            out.notes.append(f"--max-running-requests unset: {SPECULATIVE_MAX_RUNNING}, what "
                             "SGLang resets it to for speculative decoding; the variant "
                             "without speculation runs under it too (SGLang without "
                             f"--speculative-algorithm would take {DEFAULT_MAX_RUNNING} or "
                             "more)")
        else:
            out.set("scheduler.max_num_seqs", DEFAULT_MAX_RUNNING)
            out.notes.append(f"--max-running-requests unset: {DEFAULT_MAX_RUNNING}, SGLang's "
                             "default where the KV pool holds at most four full contexts "
                             "(it takes up to 4096 for larger pools, never more than half "
                             "the pool's tokens); its admission by free KV binds first in "
                             "most runs")
    mapping = {"--pp-size": "deployment.pp", "--max-running-requests": "scheduler.max_num_seqs"}
    dp_attention = _layout(out, flags, what)
    algo = steps = topk = ndraft = draft_path = adaptive_cfg = block = None
    adaptive = flags.pop("--speculative-adaptive", None) is not None
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
        elif name == "--speculative-dflash-block-size":
            block = int_flag(flags, name, what)
        elif name == "--speculative-draft-model-path":
            draft_path = value
        elif name == "--speculative-adaptive-config":
            adaptive_cfg = value
        elif name == "--scheduler-recv-interval":
            _recv_interval(out, flags, what, dp_attention)
        elif name == "--mem-fraction-static":  # weights + KV pool share of each GPU
            out.set("deployment.gpu_memory_utilization", float_flag(flags, name, what))
        elif name == "--moe-runner-backend":
            if value not in SGLANG_MOE_RUNNERS:
                raise UserError(f"{what}: {name}: one of {', '.join(SGLANG_MOE_RUNNERS)} "
                                f"(the fused-MoE kernels SpecSim prices), got {value!r}")
            if SGLANG_MOE_RUNNERS[value] is not None:
                out.set("deployment.moe_kernel", SGLANG_MOE_RUNNERS[value])
        elif name in NO_EFFECT or name == "--enable-metrics":
            out.notes.append(f"{name}: not used by the simulation")
        else:
            raise UserError(f"{what}: {name}: not a launch_server flag SpecSim models")
    none = {"name": "none", "policy": {"kind": "none"}}
    if algo is None:
        simulated_acceptance(env, 1, what)  # its variables checked; nothing speculates
        out.set("variants", [none])
        return out
    if algo not in SGLANG_METHODS:
        raise UserError(f"{what}: --speculative-algorithm: one of "
                        f"{', '.join(SGLANG_METHODS)}, got {algo!r}")
    ours = SGLANG_METHODS[algo]
    if ours == "eagle" and has_mtp(target):
        # SGLang treats NEXTN as EAGLE and, for a checkpoint with next-n layers and no
        # --speculative-draft-model-path, drafts with the checkpoint's own MTP module
        # (python/sglang/srt/server_args.py, its speculative-decoding handling)
        ours = "mtp"
        out.notes.append(f"--speculative-algorithm {algo} on {target}: its checkpoint's "
                         "own MTP layer drafts (SGLang's DeepSeek launch; NEXTN is EAGLE's "
                         "alias there)")
    if adaptive_cfg is not None and not adaptive:
        out.notes.append("--speculative-adaptive-config: read only with "
                         "--speculative-adaptive (as SGLang reads it); not used")
    if adaptive and (algo not in ("EAGLE", "EAGLE3") or (topk or 1) != 1):
        adaptive = False  # SGLang's _maybe_disable_adaptive: static parameters
        out.notes.append("--speculative-adaptive: SGLang 0.5.14 runs it for EAGLE and "
                         "EAGLE3 with --speculative-eagle-topk 1 only, and falls back to the "
                         "static parameters here")
    if ours == "dflash":
        return _dflash(out, env, ndraft, block, steps, topk, draft_path, none, what)
    if block is not None:
        raise UserError(f"{what}: --speculative-dflash-block-size: DFLASH only")
    if adaptive:
        policy = sglang_adaptive_policy(out, adaptive_cfg, steps, what)
        steps = deepest(policy)
        if steps == 0:
            raise UserError(f"{what}: --speculative-adaptive-config {adaptive_cfg}: every "
                            "candidate_steps is 0: nothing speculates")
        topk = 1
    else:
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
    variant = {"name": algo.lower(), "policy": policy, "drafter": drafter}
    force_acceptance(out, variant, simulated_acceptance(env, steps, what),
                     "SGLang's simulated acceptance (SGLANG_SIMULATE_ACC_LEN; drawn per "
                     "sequence, where SGLang draws one length for the whole batch each step)")
    out.set("models.method", ours)
    out.set("models.draft", None)
    out.set("variants", [none, variant])
    return out


ADAPTIVE_SHARED = tuple(SGLANG_SLOT_DEFAULTS)  # the config file's shared thresholds


def sglang_adaptive_policy(out: Parsed, path: str | None, steps: int | None,
                           what: str) -> dict:
    """The ``sglang_adaptive`` policy of ``--speculative-adaptive`` (and its
    ``--speculative-adaptive-config`` JSON file: integer-string keys are batch-size slots,
    the others shared thresholds; SGLang 0.5.14's ``_load_adaptive_config``)."""
    policy: dict = {"kind": "sglang_adaptive"}
    if steps is not None:
        policy["steps"] = steps
    if path is None:
        out.notes.append("--speculative-adaptive: SGLang's default slots (batch sizes 1, 8, "
                         "32, 64: steps from [1, 3, 7], [0, 1, 3], [0, 1], [0])")
        return policy
    name = f"{what}: --speculative-adaptive-config {path}"
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UserError(f"{name}: cannot read it ({e.strerror})") from None
    cfg = json_object(text, name)
    slots = {k: v for k, v in cfg.items() if k.isdigit()}
    check_sglang_slots(slots, name)
    policy["slots"] = slots
    for key, value in cfg.items():
        if key in ADAPTIVE_SHARED:
            policy[key] = value
        elif not key.isdigit():
            out.notes.append(f"--speculative-adaptive-config: {key}: SGLang 0.5.14 does not "
                             "read it")
    if steps is None:
        policy["steps"] = sglang_initial_steps(slots)
    return policy


def _dflash(out: Parsed, env: dict, ndraft, block, steps, topk, draft_path, none,
            what: str) -> Parsed:
    """``--speculative-algorithm DFLASH``: a block of ``--speculative-dflash-block-size``
    (an alias of ``--speculative-num-draft-tokens``, which must match) tokens per verify,
    the current token and K = block - 1 drafts from one draft pass
    (python/sglang/srt/arg_groups/speculative_hook.py; dflash_worker_v2.py drafts
    ``[bs, block_size]``); num_steps and topk are forced to 1 there."""
    if block is not None and ndraft is not None and block != ndraft:
        raise UserError(f"{what}: --speculative-dflash-block-size {block} and "
                        f"--speculative-num-draft-tokens {ndraft}: SGLang requires them equal")
    size = block or ndraft
    if size is None:
        size = DFLASH_BLOCK
        out.notes.append(f"DFLASH block size unset: {DFLASH_BLOCK} (SGLang reads the draft "
                         "config's block_size, else 16): give --speculative-num-draft-tokens "
                         "for another drafter")
    if size < 2:
        raise UserError(f"{what}: --speculative-num-draft-tokens: DFLASH needs a block of "
                        f"at least 2 (the current token and a draft), got {size}")
    for name, value in (("--speculative-num-steps", steps), ("--speculative-eagle-topk", topk)):
        if value not in (None, 1):
            out.notes.append(f"{name} {value}: SGLang overrides it to 1 for DFLASH")
    if draft_path is None:
        raise UserError(f"{what}: --speculative-draft-model-path: required for DFLASH")
    out.notes.append(f"--speculative-draft-model-path {draft_path}: the DFLASH drafter is "
                     "priced from the target's shape (drafter.layers, 5 by default)")
    k = size - 1
    if env.get("SGLANG_SIMULATE_ACC_LEN") is not None:
        # only the EAGLE verify path reads it (speculative/eagle_utils.py, spec_utils.py)
        raise UserError(f"{what}: SGLANG_SIMULATE_ACC_LEN: SGLang's DFLASH worker does not "
                        "simulate acceptance; give the scenario's acceptance instead")
    simulated_acceptance(env, k, what)  # its other variables checked
    variant = {"name": "dflash", "policy": {"kind": "fixed", "gamma": k},
               "drafter": {"method": "dflash"}}
    out.set("models.method", "dflash")
    out.set("models.draft", None)
    out.set("variants", [none, variant])
    return out


SIMULATE_METHODS = ("match-expected", "multinomial")


def simulated_acceptance(env: dict[str, str], steps: int, what: str) -> list[float] | None:
    """The per-position acceptance SGLang forces with ``SGLANG_SIMULATE_ACC_LEN`` (a mean
    acceptance length, the bonus token included; 0 or less: off) for ``steps`` draft steps,
    or None; ``env`` is popped of the variables it reads (any other is an error).

    ``SGLANG_SIMULATE_ACC_METHOD`` ``match-expected`` (the default in SGLang's 2026
    releases) accepts the length, clamped to [1, steps + 1], rounded down or up so that its
    mean is the one asked;
    ``multinomial`` (the earlier default) draws it from a normal of that mean and standard
    deviation 1, clamped to [1, steps + 1] and rounded: github sgl-project/sglang
    python/sglang/srt/speculative/eagle_utils.py, ``_generate_simulated_accept_index``, and
    python/sglang/srt/environ.py (the copies read in 2026-12, their commit not recorded).
    SGLang draws one length per step for the whole batch; SpecSim draws each sequence's
    from the same distribution (``marginal`` rates: P(length > i) for draft position i).
    ``SGLANG_SIMULATE_ACC_TOKEN_MODE`` picks the token ids emitted, not their number."""
    import math

    text = env.pop("SGLANG_SIMULATE_ACC_LEN", None)
    method = env.pop("SGLANG_SIMULATE_ACC_METHOD", "match-expected")
    env.pop("SGLANG_SIMULATE_ACC_TOKEN_MODE", None)
    if env:
        raise UserError(f"{what}: environment variable {sorted(env)[0]}: not modelled (SpecSim "
                        "reads SGLANG_SIMULATE_ACC_LEN, SGLANG_SIMULATE_ACC_METHOD, "
                        "SGLANG_SIMULATE_ACC_TOKEN_MODE)")
    if text is None:
        return None
    try:
        length = float(text)
    except ValueError:
        raise UserError(f"{what}: SGLANG_SIMULATE_ACC_LEN: a number, got {text!r}") from None
    if method not in SIMULATE_METHODS:
        raise UserError(f"{what}: SGLANG_SIMULATE_ACC_METHOD: one of "
                        f"{', '.join(SIMULATE_METHODS)}, got {method!r}")
    if not length > 0:
        return None  # SGLang simulates only above 0
    if method == "match-expected":
        length = min(max(length, 1.0), steps + 1.0)  # SGLang clamps it so
        return min_variance_marginals(length, steps)

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    # P(rounded clamped length >= j + 1) = P(N(length, 1) >= j + 0.5), j = 1..steps
    return [1.0 - phi(j + 0.5 - length) for j in range(1, steps + 1)]


def _recv_interval(out: Parsed, flags: dict, what: str, dp_attention: bool) -> None:
    """``--scheduler-recv-interval N`` as ``scheduler.recv_interval`` (``sim.recv``). SGLang
    reads it as any integer and turns the skipper on only above 1
    (``SchedulerRecvSkipper.maybe_create``), so 1 or less is every loop; it refuses it with
    data-parallel attention (``dp_attention``: ``_layout``'s)."""
    name = "--scheduler-recv-interval"
    n = int_flag(flags, name, what, low=-(2 ** 31))
    if n <= 1:
        out.notes.append(f"{name} {n}: SGLang reads new requests every loop at 1 or less")
        n = 1
    if n > MAX_RECV_INTERVAL:
        raise UserError(f"{what}: {name}: must be <= {MAX_RECV_INTERVAL}, got {n}")
    if n > 1 and dp_attention:
        raise UserError(f"{what}: {name} {n} with --enable-dp-attention: SGLang refuses "
                        "the pair (SchedulerRecvSkipper asserts data-parallel attention off)")
    out.set("scheduler.recv_interval", n)


def _layout(out: Parsed, flags: dict, what: str) -> bool:
    """SGLang's parallel layout (its flags taken from ``flags``) as the deployment's tp and
    ep; whether attention runs data-parallel (SpecSim's ep above its tp). ``--tp-size`` is
    the world of GPUs; ``--ep-size`` (at most it) splits it between experts and their
    shards, ``moe_tp_size = tp_size // ep_size``
    (python/sglang/srt/distributed/parallel_state.py, release 0.5.14); with
    ``--enable-dp-attention``, ``--dp-size`` groups of ``tp_size / dp_size`` GPUs each run
    the attention on their own requests: SpecSim's tp of one group and ep the world, which
    needs whole experts (``--ep-size`` = ``--tp-size``). ``--dp-size`` without it (that many
    replicas) is not read: set the scenario's replicas instead."""
    world = ep = dp = 1
    for name in ("--tp-size", "--tp"):
        if name in flags:
            world = int_flag(flags, name, what)
            flags.pop(name)
    for name in ("--ep-size", "--ep", "--expert-parallel-size"):
        if name in flags:
            ep = int_flag(flags, name, what)
            flags.pop(name)
    dp_attention = flags.pop("--enable-dp-attention", None) is not None
    for name in ("--dp-size", "--dp"):
        if name in flags:
            dp = int_flag(flags, name, what)
            flags.pop(name)
            if not dp_attention and dp > 1:
                raise UserError(f"{what}: {name} {dp} without --enable-dp-attention: that "
                                f"many replicas behind SGLang's router; set the scenario's "
                                f"deployment.replicas instead")
    if world % ep:
        raise UserError(f"{what}: --ep-size {ep}: must divide --tp-size {world} (SGLang's "
                        f"moe_tp_size = tp_size // ep_size)")
    tp = world
    if dp_attention and dp > 1:
        if world % dp:
            raise UserError(f"{what}: --dp-size {dp}: must divide --tp-size {world}")
        if ep != world:
            raise UserError(f"{what}: --enable-dp-attention with --ep-size {ep} below "
                            f"--tp-size {world} (experts split {world // ep} ways) is not "
                            f"modelled: SpecSim's data-parallel attention takes whole experts "
                            f"(--ep-size {world})")
        tp = world // dp
        out.notes.append(f"--enable-dp-attention: {dp} attention groups of tp {tp}: one "
                         f"scheduler over them, assumed evenly loaded (SGLang runs one per "
                         f"group)")
    out.set("deployment.tp", tp)
    out.set("deployment.ep", ep)
    return ep > tp


def launch_command(scenario, variant, catalog) -> tuple[str, list[str]]:
    """The ``python3 -m sglang.launch_server`` line that realises ``variant`` of
    ``scenario``, and what it cannot say (notes): the inverse of :func:`parse_sglang` where
    SGLang has a knob."""
    import shlex

    d, lim, notes = scenario.deployment, scenario.scheduler, []
    target = catalog.model(scenario.models.target)
    words = ["python3", "-m", "sglang.launch_server", "--model-path", hf_id(target)]
    if d.ep > d.tp:  # data-parallel attention: the world of GPUs, in groups of tp
        words += ["--tp-size", str(d.ep), "--dp-size", str(d.ep // d.tp),
                  "--enable-dp-attention", "--ep-size", str(d.ep)]
    else:
        if d.tp > 1:
            words += ["--tp-size", str(d.tp)]
        if d.ep > 1:
            words += ["--ep-size", str(d.ep)]
    if d.pp > 1:
        words += ["--pp-size", str(d.pp)]
    words += ["--max-running-requests", str(lim.max_num_seqs)]
    if lim.chunked_prefill:
        words += ["--chunked-prefill-size", str(lim.max_batched_tokens)]
    else:
        words += ["--chunked-prefill-size", "-1", "--max-prefill-tokens",
                  str(lim.max_batched_tokens)]
    if not lim.prefix_caching:
        words.append("--disable-radix-cache")
    if d.gpu_memory_utilization != 0.9:
        words += ["--mem-fraction-static", f"{d.gpu_memory_utilization:g}"]
    if d.kv_bits == 8:
        words += ["--kv-cache-dtype", "fp8_e4m3"]
    if d.moe_kernel is not None:
        words += ["--moe-runner-backend", SGLANG_MOE_WRITES[d.moe_kernel]]
    if lim.recv_interval > 1:
        words += ["--scheduler-recv-interval", str(lim.recv_interval)]
    if lim.order != "prefill_first":
        notes.append(f"scheduling: SGLang schedules prefill batches first (scheduler.order "
                     f"prefill_first); the scenario ran {lim.order}")
    words += _speculation_flags(scenario, variant, notes)
    return shlex.join(words), notes


_ALGORITHMS = {m: t.sglang[0] for m, t in TRAITS.items() if t.sglang}  # what it writes


def _speculation_flags(scenario, variant, notes: list[str]) -> list[str]:
    """SGLang's speculative flags for ``variant``'s policy and drafter."""
    policy = variant.policy
    if policy.kind == "none":
        return []
    drafter = variant.drafter or scenario.models.drafter()
    algo = _ALGORITHMS.get(drafter.method)
    if algo is None:
        notes.append(f"drafting method {drafter.method}: SGLang has no such algorithm")
        return []
    words = ["--speculative-algorithm", algo]
    if drafter.method == "draft_model":
        words += ["--speculative-draft-model-path",
                  f"<{getattr(drafter, 'model', None) or scenario.models.draft}>"]
    elif drafter.method in ("eagle", "eagle3"):
        words += ["--speculative-draft-model-path",
                  f"<an {drafter.method} head trained for {scenario.models.target}>"]
    elif drafter.method == "dflash":  # its block: --speculative-num-draft-tokens below
        words += ["--speculative-draft-model-path",
                  f"<a DFlash drafter trained for {scenario.models.target}>"]
    if policy.kind == "sglang_adaptive":
        words.append("--speculative-adaptive")
        if policy.steps is not None:
            words += ["--speculative-num-steps", str(policy.steps)]
        if policy.slots is not None or policy.cuda_graph_bs is not None:
            notes.append("sglang_adaptive: write its slots and thresholds to a JSON file "
                         "for --speculative-adaptive-config")
        return words
    if policy.kind == "fixed":
        steps, topk = policy.gamma, 1
    elif policy.kind == "tree" and len(set(policy.shape[1:])) <= 1 and \
            set(policy.shape[1:]) <= {1}:
        steps, topk = len(policy.shape), policy.shape[0]
    else:
        depth = deepest(policy.model_dump())
        notes.append(f"policy {policy.kind}: SGLang has no such knob; the line drafts a fixed "
                     f"chain of its deepest shape ({depth})")
        steps, topk = depth, 1
    return [*words, "--speculative-num-steps", str(steps), "--speculative-eagle-topk",
            str(topk), "--speculative-num-draft-tokens", str(steps * topk + 1)]
