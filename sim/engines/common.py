"""What the engines' command-line parsers share: splitting a command line into its flags,
typed values with one-line errors, and the value maps (KV dtypes, quantization).

Each parser turns one command line into ``--set``-style overrides on the default scenario
(``key=value`` strings in the scenario's dotted keys) plus notes for the run: flags that do
not change performance are accepted and listed (never silently dropped), flags SpecSim does
not model are one-line errors naming the flag.
"""

from __future__ import annotations

import json
import re
import shlex

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

# the engines' names for the fused-MoE kernel (deployment.moe_kernel,
# hardware.deployment.MOE_KERNELS): SGLang's --moe-runner-backend (sgl-project/sglang
# python/sglang/srt/server_args.py and layers/moe/utils.py MoeRunnerBackend: auto, deep_gemm,
# triton, triton_kernel, flashinfer_trtllm, flashinfer_cutlass, flashinfer_mxfp4,
# flashinfer_cutedsl, cutlass) and TensorRT-LLM's moe_config.backend (NVIDIA/TensorRT-LLM
# tensorrt_llm/_torch/modules/fused_moe/create_moe.py @01f8de52, get_moe_cls: CUTLASS,
# VANILLA, CUTEDSL, DEEPGEMM, DENSEGEMM, TRTLLM, WIDEEP, TRITON); the ones that name no
# family SpecSim prices are refused on import
SGLANG_MOE_RUNNERS = {"flashinfer_trtllm": "trtllm_gen", "deep_gemm": "deepgemm",
                      "cutlass": "cutlass", "flashinfer_cutlass": "cutlass",
                      "triton": "triton", "auto": None}
SGLANG_MOE_WRITES = {"trtllm_gen": "flashinfer_trtllm", "deepgemm": "deep_gemm",
                     "cutlass": "cutlass", "triton": "triton"}
TRTLLM_MOE_BACKENDS = {"TRTLLM": "trtllm_gen", "DEEPGEMM": "deepgemm", "CUTLASS": "cutlass",
                       "TRITON": "triton"}
TRTLLM_MOE_WRITES = {v: k for k, v in TRTLLM_MOE_BACKENDS.items()}


class Parsed:
    """The overrides (in order) and notes one command line gives."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.sets: list[str] = []
        self.notes: list[str] = []
        # --quantization fp8: FP8 W8A8; what its scales are depends on the checkpoint
        # (online_fp8_sets, which knows the catalog)
        self.online_fp8 = False
        self.target: str | None = None

    def set(self, key: str, value) -> None:
        """Override ``key`` with ``value`` (written as JSON, which is YAML)."""
        if key == "models.target":
            self.target = value
        self.sets.append(f"{key}={json.dumps(value)}")


def checkpoint_precision_sets(parsed: Parsed, catalog, user_sets=()) -> None:
    """With no ``--quantization``, an engine loads the checkpoint in the precision it ships
    (DeepSeek-V3/R1: block-scaled FP8 weights, FP8 GEMMs), as ``specsim hw step`` prices it
    when no ``--weight-bits`` is given; the scenario's own default (16 bits) would price
    and size a checkpoint that is not the one served. The user's own ``--set
    deployment.weight_bits`` or ``compute_dtype`` (``user_sets``) wins."""
    keys = ("deployment.weight_bits=", "deployment.compute_dtype=")
    if parsed.target is None or any(t.replace(" ", "").startswith(keys)
                                    for t in [*parsed.sets, *user_sets]):
        return
    spec = catalog.model(parsed.target)
    if not spec.weight_bits or spec.weight_bits == 16:
        return
    bits, dtype = spec.precision(None, None)
    parsed.set("deployment.weight_bits", bits)
    if dtype is not None:
        parsed.set("deployment.compute_dtype", dtype)
    parsed.notes.append(f"{spec.id}: the checkpoint's own precision, {bits}-bit weights"
                        + (f" ({dtype} compute)" if dtype else "")
                        + ", as the engine loads it (--set deployment.weight_bits=... to "
                          "price another)")


def dense_moe_kernel_sets(parsed: Parsed, catalog) -> None:
    """An engine's MoE-kernel flag (``--moe-runner-backend``, ``moe_config.backend``) on a
    model with no routed experts configures nothing (the engines only consult it when they
    build an MoE layer); a deployment's ``moe_kernel`` there is refused, so it is dropped
    here with a note rather than carried into the scenario."""
    if parsed.target is None or catalog.model(parsed.target).config.routed_experts:
        return
    key = "deployment.moe_kernel="
    kept = [t for t in parsed.sets if not t.startswith(key)]
    if len(kept) < len(parsed.sets):
        parsed.sets = kept
        parsed.notes.append(f"{parsed.target} has no routed experts: its MoE kernel flag "
                            f"configures nothing, and the simulation does not use it")


def online_fp8_sets(parsed: Parsed, catalog) -> None:
    """``--quantization fp8`` on a 16-bit checkpoint quantizes it when loaded: one scale
    per weight matrix and the activations' scales computed every pass (vLLM's ``Fp8Config``
    defaults to ``activation_scheme="dynamic"``, per token where CUTLASS FP8 runs:
    vllm-project/vllm vllm/model_executor/layers/quantization/fp8.py @1436674b,
    ``Fp8Config.__init__`` and ``Fp8LinearMethod.__init__``), which
    ``deployment.fp8_scales: dynamic`` prices; a checkpoint that ships FP8 keeps its own
    scales (vLLM reads them from its quantization_config)."""
    if not parsed.online_fp8 or parsed.target is None:
        return
    spec = catalog.model(parsed.target)
    if spec.ships_fp8():
        parsed.notes.append(
            f"--quantization fp8: {spec.id} ships FP8 weights; priced with its own scales "
            f"({spec.fp8_scales})")
        return
    parsed.set("deployment.fp8_scales", "dynamic")
    parsed.notes.append(
        "--quantization fp8: the 16-bit checkpoint is quantized when loaded, so its "
        "activation scales are computed every pass; priced with the measured per-tensor "
        "FP8 kernel that does so (deployment.fp8_scales: dynamic, unless a --set says "
        "otherwise)")


_ENV_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def split(text: str, what: str, head: tuple[str, ...], env: dict | None = None) -> list[str]:
    """The words of a command line after its ``head`` (UserError when it does not start
    so). Leading ``NAME=value`` assignments (the shell's, optionally after ``env``) go to
    ``env`` where it is given, else they are an error."""
    if not text.strip():  # e.g. an unset shell variable: never the default scenario
        raise UserError(f"{what}: the command line is empty; give '{' '.join(head)} ...'")
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise UserError(f"{what}: cannot split the command line: {e}") from None
    if words[:1] == ["env"] and len(words) > 1 and _ENV_WORD.match(words[1]):
        words = words[1:]
    while words and _ENV_WORD.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        if env is None:
            raise UserError(f"{what}: environment variable {name}: not modelled for this "
                            "engine's command line")
        if name in env:
            raise UserError(f"{what}: environment variable {name}: given twice")
        env[name] = value
    for i, h in enumerate(head):
        if len(words) <= i or words[i] != h:
            raise UserError(f"{what}: must start with '{' '.join(head)}', got {text[:60]!r}")
    return words[len(head):]


def flags_of(words: list[str], what: str, booleans: set[str]) -> tuple[list[str], dict]:
    """(positional words, {flag: value}) of a command line (``--flag value``, ``--flag=v``,
    boolean flags without a value); a repeated flag is an error, and so is a value given to
    a boolean flag (``--enable-chunked-prefill=false``): the engines declare those with
    argparse's ``store_true`` or ``BooleanOptionalAction``, which take no value and refuse
    ``--flag=value`` ("ignored explicit argument"), vLLM's ``FlexibleArgumentParser``
    passing the word through unchanged (vllm/utils/argparse_utils.py @c836a6fe)."""
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
        if eq and name in booleans:
            negated = "--no-" + name.removeprefix("--")
            hint = f"give {name} or {negated}" if negated in booleans else f"give {name}"
            raise UserError(f"{what}: {name}: a switch, it takes no value, got {w!r} (the "
                            f"engine refuses it; {hint})")
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


def int_flag(flags: dict, name: str, what: str, low: int = 1) -> int:
    try:
        v = int(flags[name])
    except ValueError:
        raise UserError(f"{what}: {name}: must be an integer, got {flags[name]!r}") from None
    if v < low:
        raise UserError(f"{what}: {name}: must be >= {low}, got {v}")
    return v


def precision_flag(out: Parsed, name: str, value: str, what: str) -> bool:
    """Apply ``--kv-cache-dtype`` or ``--quantization`` (the same in vLLM and SGLang) to
    ``out``; False when ``name`` is neither."""
    if name == "--kv-cache-dtype":
        if value not in KV_DTYPES:
            raise UserError(f"{what}: --kv-cache-dtype: one of {', '.join(KV_DTYPES)}, "
                            f"got {value!r}")
        out.set("deployment.kv_bits", KV_DTYPES[value])
        return True
    if name == "--quantization":
        if value not in QUANTIZATION:
            raise UserError(f"{what}: --quantization {value}: not modelled; SpecSim knows "
                            f"{', '.join(QUANTIZATION)}")
        bits, dtype = QUANTIZATION[value]
        out.set("deployment.weight_bits", bits)
        if dtype == "fp8":
            out.set("deployment.compute_dtype", "fp8")
            out.online_fp8 = True
        return True
    return False


def float_flag(flags: dict, name: str, what: str) -> float:
    try:
        return float(flags[name])
    except ValueError:
        raise UserError(f"{what}: {name}: must be a number, got {flags[name]!r}") from None


def force_acceptance(out: Parsed, variant: dict, marginals: list[float] | None,
                     how: str) -> None:
    """Give the speculating ``variant`` the acceptance its engine forces (``marginals``:
    P(draft position i accepted), None: not forced), and say so in a note (``how``: the
    engine's mechanism and what SpecSim does differently)."""
    if marginals is None:
        return
    # the engines force a depth whatever the tree's width: coverage independent of it
    variant["acceptance"] = {"kind": "marginal", "marginals": marginals, "theta": 0.0}
    out.notes.append(f"forced acceptance: {how}, acceptance length {1 + sum(marginals):.4g} "
                     f"(per-position rates {', '.join(f'{r:.4g}' for r in marginals)}); the "
                     "drafts' content is not compared, so only timing is simulated")


def min_variance_marginals(length: float, k: int) -> list[float]:
    """P(draft position i accepted), i = 1..k, of the minimum-variance schedule for a mean
    acceptance length ``length`` (bonus token included, in [1, k + 1]): the whole part of
    length - 1 positions always accepted, the next with its fraction, the rest never --
    vLLM's ``_acceptance_length_to_rates`` and SGLang's ``match-expected`` alike."""
    drafts = float(length) - 1.0  # accepted draft tokens per step, in expectation
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (k - full - 1))[:k]
