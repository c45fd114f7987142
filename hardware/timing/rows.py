"""Measurement rows: what ``specsim calibrate`` fits and ``specsim validate`` checks.

A CSV of measured step or serving times, one measurement per row. Columns (header names;
the first block is required, the second optional):

- ``model``, ``gpu``: catalog ids (``specsim hw list``); ``tp``, ``pp``: parallelism;
  ``weight_bits`` (16, 8, 4), ``kv_bits`` (16, 8), ``compute_dtype`` (bf16, fp16, fp8 or
  empty for the GPU's 16-bit dtype); ``batch``: sequences per step (or concurrent
  requests); ``context``: cached tokens per sequence before the step (the prompt length
  for serving metrics); ``tokens``: new tokens per sequence in the step (1 = decode);
  ``offload``: fraction of the weights in host memory, or ``auto``; ``measured_s``: the
  measurement, in seconds (or tokens/s for ``tokens_per_s_per_gpu``); ``source``: where it
  comes from (repository + path + commit, paper + table, vendor page).
- ``framework`` (default ``vllm``): a catalog framework id; ``framework_version``: the
  engine version the run used as its source states it (empty: not stated): a release the
  framework's catalog entry lists under ``versions`` prices the row with that release's
  overheads, any other with the entry's own; ``ep`` (default 1): the
  expert-parallel GPUs of an MoE model, as ``specsim hw step --ep`` takes them (1 splits
  every expert over the ``tp`` GPUs, ``tp`` gives each GPU whole experts, a larger multiple
  of ``tp`` adds data-parallel attention groups; other values are refused when the row is
  priced); ``fp4_format`` (``nvfp4`` or ``mxfp4``; empty: the model's, where its
  checkpoint ships FP4): 4-bit weights as FP4, which needs ``weight_bits`` 4;
  ``quantized`` (``all``, ``mlp`` or ``experts``; empty: ``all``, or the model's for its own
  FP4 checkpoint): which weights ``weight_bits`` applies to, the rest 16-bit
  (:attr:`hardware.deployment.Deployment.quantized_scope`); ``moe_kernel`` (``trtllm_gen``,
  ``deepgemm``, ``cutlass``, ``triton``; empty: whatever the framework's tables timed): the
  fused-MoE kernel the run's engine was set to (``Deployment.moe_kernel``); ``pin_memory`` (``true``
  default, or ``false``): whether offloaded weights sit in pinned host memory;
  ``streaming`` (``true`` default, or ``false``): whether the run streamed its tokens to a
  client (a server benchmark) or ran offline (``trtllm-bench throughput``, a generate
  script), which skips the framework's ``stream_seq_s``; ``metric`` (default
  ``step_s``, see :mod:`hardware.timing.serving`); ``output_tokens``: generated tokens per
  request (serving metrics); ``requests``: how many requests the run served
  (``max_load_tokens_per_s`` only, which needs it; there ``batch`` is the engine's max
  batch size and ``measured_s`` the total output tokens/s); ``max_num_tokens``: the step
  token budget the run set (default: the framework's ``max_num_batched_tokens``);
  ``kv_fraction``: the share of the memory the weights leave that the run gave the KV cache
  (TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction``; default: the deployment's workspace
  margin); ``gpu_memory_utilization``: the share of each GPU's memory the run gave the
  weights and the KV cache together (vLLM's ``--gpu-memory-utilization``, SGLang's
  ``--mem-fraction-static``: the deployment's rule with that share in place of its default
  0.9, :attr:`hardware.deployment.Deployment.workspace_fraction`, an approximation: SGLang
  takes it of the memory free before the weights load, vLLM keeps its profiled activation
  peak inside it; not with ``kv_fraction``)
  -- these three for ``tpot_s`` and ``max_load_tokens_per_s`` rows only;
  ``cuda_graph_batch_sizes`` (``max_load_tokens_per_s`` only): the decode batch sizes the
  run captured as CUDA graphs with padding on, space-separated and ascending
  (TensorRT-LLM's ``cuda_graph_config.batch_sizes`` with ``enable_padding``): a step of
  decodes only runs at the next captured size up (:mod:`hardware.timing.serving`);
  ``split``: ``fit`` or ``test`` (rows left empty count as ``fit``); ``category``: a label
  results are grouped by; ``notes``: free text.

Every problem is one UserError line naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from hardware.deployment import FP4_BITS, MOE_KERNELS, QUANTIZED
from hardware.models import read_utf8
from specdec.errors import UserError

__all__ = ["MeasuredRow", "read_rows", "REQUIRED", "OPTIONAL", "METRICS"]

REQUIRED = ("model", "gpu", "tp", "pp", "weight_bits", "kv_bits", "compute_dtype", "batch",
            "context", "tokens", "offload", "measured_s", "source")
OPTIONAL = ("framework", "framework_version", "ep", "pin_memory", "streaming", "metric",
            "output_tokens", "requests", "max_num_tokens", "kv_fraction",
            "gpu_memory_utilization", "cuda_graph_batch_sizes", "fp4_format", "quantized",
            "moe_kernel", "split", "category", "notes")
METRICS = ("step_s", "tpot_s", "ttft_s", "tokens_per_s_per_gpu", "max_load_tokens_per_s")


@dataclass(frozen=True)
class MeasuredRow:
    """One measurement (see the module notes for the columns)."""

    line: int
    model: str
    gpu: str
    tp: int
    pp: int
    weight_bits: int
    kv_bits: int
    compute_dtype: str | None
    batch: int
    context: int
    tokens: int
    offload: float | str
    measured: float
    source: str
    framework: str = "vllm"
    framework_version: str = ""
    ep: int = 1
    fp4_format: str | None = None
    quantized: str | None = None
    moe_kernel: str | None = None
    pin_memory: bool = True
    streaming: bool = True
    metric: str = "step_s"
    output_tokens: int = 0
    requests: int = 0
    max_num_tokens: int | None = None
    kv_fraction: float | None = None
    gpu_memory_utilization: float | None = None
    cuda_graph_batch_sizes: tuple[int, ...] = ()
    split: str = "fit"
    category: str = ""
    notes: str = ""
    path: str = ""  # the file the row was read from (for messages)


def cell_int(path, line, name, text, least):
    """An integer cell of at least ``least``; a one-line UserError naming file, line and
    column."""
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"{path}: line {line}: {name}: must be an integer, got {text!r}") \
            from None
    if value < least:
        raise UserError(f"{path}: line {line}: {name}: must be >= {least}, got {value}")
    return value


def cell_positive(path, line, name, text) -> float:
    """A finite number > 0 (a measured time); a one-line UserError naming file, line and
    column."""
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{path}: line {line}: {name}: must be a number, got {text!r}") \
            from None
    if not (value > 0 and math.isfinite(value)):
        raise UserError(f"{path}: line {line}: {name}: must be a finite number > 0, got "
                        f"{text!r}")
    return value


def _bool(path, line, name, text):
    """An optional true / false (any case); True when the cell is empty."""
    value = (text or "true").lower()
    if value not in ("true", "false"):
        raise UserError(f"{path}: line {line}: {name}: must be true or false, got {text!r}")
    return value == "true"


def _fraction(path, line, name, text):
    """An optional fraction in (0, 1]; None when the cell is empty."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{path}: line {line}: {name}: must be a number in (0, 1], got "
                        f"{text!r}") from None
    if not 0.0 < value <= 1.0:
        raise UserError(f"{path}: line {line}: {name}: must be in (0, 1], got {value:g}")
    return value


def _sizes(path, line, name, text) -> tuple[int, ...]:
    """An optional ascending list of positive integers, space-separated; () when empty."""
    sizes = []
    for word in text.split():
        try:
            size = int(word)
        except ValueError:
            raise UserError(f"{path}: line {line}: {name}: must be positive integers "
                            f"separated by spaces, got {word!r}") from None
        if size < 1 or (sizes and size <= sizes[-1]):
            raise UserError(f"{path}: line {line}: {name}: must be positive and ascending, "
                            f"got {text!r}")
        sizes.append(size)
    return tuple(sizes)


def precision_columns(path, line, get, weight_bits) -> tuple[str | None, str | None]:
    """A measurement row's optional ``fp4_format`` and ``quantized`` (None when empty,
    today's meaning), for this module's rows and ``hardware.timing.spec_rows``': FP4 needs
    4-bit weights and a scope short of ``all`` needs quantised ones."""
    fp4 = get.get("fp4_format") or None
    scope = get.get("quantized") or None
    for name, value, allowed in (("fp4_format", fp4, FP4_BITS), ("quantized", scope,
                                                                  QUANTIZED)):
        if value is not None and value not in allowed:
            raise UserError(f"{path}: line {line}: {name}: must be one of "
                            f"{', '.join(allowed)} (or empty), got {value!r}")
    if fp4 is not None and weight_bits != 4:
        raise UserError(f"{path}: line {line}: fp4_format: FP4 weights need weight_bits 4, "
                        f"got {weight_bits}")
    if scope not in (None, "all") and weight_bits == 16:
        raise UserError(f"{path}: line {line}: quantized: {scope} names the weights "
                        f"weight_bits quantizes, but weight_bits is 16")
    return fp4, scope


def check_columns(path: Path, header: list[str]) -> None:
    """Refuse a measurement CSV header naming a column twice (one would be dropped)."""
    names = [h.strip() for h in header]
    twice = next((h for h in names if names.count(h) > 1), None)
    if twice is not None:
        raise UserError(f"{path}: line 1: column {twice!r} given twice")


def check_cells(path: Path, line: int, raw: dict) -> None:
    """Refuse a row with more cells than the header has columns (csv.DictReader puts the
    rest under None, which no column reads)."""
    if None in raw:
        raise UserError(f"{path}: line {line}: {len(raw) - 1 + len(raw[None])} cells for "
                        f"{len(raw) - 1} columns")


def read_table(path: Path, required, columns, kind: str, make_row) -> list:
    """The rows of a measurement CSV of ``kind`` ("a speculative measurements file"): its
    header checked (every ``required`` column, none outside ``columns``, none twice), each
    row's cell count, then ``make_row(path, line, {column: its stripped text})``; one-line
    UserErrors naming the file and, for a row, the line. Leading lines starting with ``#``
    are comments (a file's sources), counted in the line numbers."""
    text = read_utf8(path, "measurements file", "a measurements file must be UTF-8 CSV")
    lines = text.splitlines()
    skip = 0
    while skip < len(lines) and lines[skip].startswith("#"):
        skip += 1
    reader = csv.DictReader(lines[skip:])
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in required if c not in header]
    if missing:
        raise UserError(f"{path}: missing column {missing[0]!r} ({kind} needs "
                        f"{', '.join(required)})")
    unknown = [c for c in header if c not in columns]
    if unknown:
        raise UserError(f"{path}: unknown column {unknown[0]!r} (columns: "
                        f"{', '.join(columns)})")
    check_columns(path, header)
    raws = list(reader)
    first = skip + 2  # the first row's line
    for i, raw in enumerate(raws):
        check_cells(path, first + i, raw)  # extra cells were a list under None: AttributeError
    rows = [make_row(path, first + i, {(k or "").strip(): (v or "").strip()
                                       for k, v in raw.items()}) for i, raw in enumerate(raws)]
    if not rows:
        raise UserError(f"{path}: no measurement rows")
    return rows


def _row(path: Path, line: int, raw: dict[str, str]) -> MeasuredRow:
    check_cells(path, line, raw)
    get = {k: (v or "").strip() for k, v in raw.items() if k is not None}
    for name in ("model", "gpu", "source"):
        if not get[name]:
            raise UserError(f"{path}: line {line}: {name}: must not be empty")
    try:
        measured = float(get["measured_s"])
    except ValueError:
        raise UserError(f"{path}: line {line}: measured_s: must be a number, got "
                        f"{get['measured_s']!r}") from None
    if not measured > 0:
        raise UserError(f"{path}: line {line}: measured_s: must be > 0, got {measured:g}")
    offload: float | str = get["offload"] or "0"
    if offload != "auto":
        try:
            offload = float(offload)
        except ValueError:
            raise UserError(f"{path}: line {line}: offload: must be a fraction in [0, 1] or "
                            f"'auto', got {offload!r}") from None
        if not 0.0 <= offload <= 1.0:
            raise UserError(f"{path}: line {line}: offload: must be in [0, 1], got "
                            f"{offload:g}")
    metric = get.get("metric") or "step_s"
    if metric not in METRICS:
        raise UserError(f"{path}: line {line}: metric: must be one of {', '.join(METRICS)}, "
                        f"got {metric!r}")
    pin = _bool(path, line, "pin_memory", get.get("pin_memory") or "")
    streaming = _bool(path, line, "streaming", get.get("streaming") or "")
    split = get.get("split") or "fit"
    if split not in ("fit", "test"):
        raise UserError(f"{path}: line {line}: split: must be fit or test, got {split!r}")
    out_tokens = cell_int(path, line, "output_tokens", get.get("output_tokens") or "0", 0)
    if metric != "step_s" and metric != "ttft_s" and out_tokens < 2:
        raise UserError(f"{path}: line {line}: output_tokens: metric {metric} needs >= 2 "
                        f"generated tokens per request, got {out_tokens}")
    max_load = metric == "max_load_tokens_per_s"
    for name, users in (("requests", ("max_load_tokens_per_s",)),
                        ("max_num_tokens", ("max_load_tokens_per_s", "tpot_s")),
                        ("kv_fraction", ("max_load_tokens_per_s", "tpot_s")),
                        ("gpu_memory_utilization", ("max_load_tokens_per_s", "tpot_s")),
                        ("cuda_graph_batch_sizes", ("max_load_tokens_per_s",))):
        if get.get(name) and metric not in users:
            raise UserError(f"{path}: line {line}: {name}: only {' and '.join(users)} rows "
                            f"use it; this row's metric is {metric}")
    if max_load and not get.get("requests"):
        raise UserError(f"{path}: line {line}: requests: metric {metric} needs the number "
                        f"of requests the run served")
    requests = cell_int(path, line, "requests", get["requests"], 1) if max_load else 0
    context = cell_int(path, line, "context", get["context"], 0)
    if max_load and context < 1:
        raise UserError(f"{path}: line {line}: context: metric {metric} needs prompts of "
                        f">= 1 token, got {context}")
    budget = get.get("max_num_tokens") or ""
    max_num_tokens = cell_int(path, line, "max_num_tokens", budget, 1) if budget else None
    kv_fraction = _fraction(path, line, "kv_fraction", get.get("kv_fraction") or "")
    utilization = _fraction(path, line, "gpu_memory_utilization",
                            get.get("gpu_memory_utilization") or "")
    if kv_fraction is not None and utilization is not None:
        raise UserError(f"{path}: line {line}: gpu_memory_utilization: give it or "
                        f"kv_fraction, not both (the engine sizes its KV cache one way)")
    graphs = _sizes(path, line, "cuda_graph_batch_sizes",
                    get.get("cuda_graph_batch_sizes") or "")
    framework = get.get("framework") or "vllm"
    if "@" in framework:
        raise UserError(f"{path}: line {line}: framework: {framework!r}: give the engine "
                        f"alone here and its release in the framework_version column")
    weight_bits = cell_int(path, line, "weight_bits", get["weight_bits"], 1)
    fp4_format, quantized = precision_columns(path, line, get, weight_bits)
    moe_kernel = get.get("moe_kernel") or None
    if moe_kernel is not None and moe_kernel not in MOE_KERNELS:
        raise UserError(f"{path}: line {line}: moe_kernel: must be one of "
                        f"{', '.join(MOE_KERNELS)} (or empty: the tables' own), got "
                        f"{moe_kernel!r}")
    return MeasuredRow(
        line=line, model=get["model"], gpu=get["gpu"],
        tp=cell_int(path, line, "tp", get["tp"], 1), pp=cell_int(path, line, "pp", get["pp"], 1),
        weight_bits=weight_bits,
        kv_bits=cell_int(path, line, "kv_bits", get["kv_bits"], 1),
        compute_dtype=get["compute_dtype"] or None,
        batch=cell_int(path, line, "batch", get["batch"], 1),
        context=context,
        tokens=cell_int(path, line, "tokens", get["tokens"], 1),
        offload=offload, measured=measured, source=get["source"],
        framework=framework,
        framework_version=get.get("framework_version", ""),
        ep=cell_int(path, line, "ep", get.get("ep") or "1", 1), fp4_format=fp4_format,
        quantized=quantized, moe_kernel=moe_kernel, pin_memory=pin,
        streaming=streaming,
        metric=metric,
        output_tokens=out_tokens, requests=requests, max_num_tokens=max_num_tokens,
        kv_fraction=kv_fraction, gpu_memory_utilization=utilization,
        cuda_graph_batch_sizes=graphs, split=split,
        category=get.get("category", ""),
        notes=get.get("notes", ""), path=str(path),
    )


def read_rows(path: str | Path) -> list[MeasuredRow]:
    """The rows of a measurement CSV (header as documented); one-line UserErrors."""
    path = Path(path)
    text = read_utf8(path, "measurements file", "a measurements file must be UTF-8 CSV")
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UserError(f"{path}: missing column {missing[0]!r} (needs {', '.join(REQUIRED)})")
    unknown = [c for c in header if c.strip() not in REQUIRED + OPTIONAL]
    if unknown:  # a misspelt optional column would otherwise be ignored
        raise UserError(f"{path}: unknown column {unknown[0]!r} (optional columns: "
                        f"{', '.join(OPTIONAL)})")
    check_columns(path, header)
    rows = [_row(path, i + 2, raw) for i, raw in enumerate(reader)]
    if not rows:
        raise UserError(f"{path}: no measurement rows")
    return rows
