"""The one door to measured kernel tables: NVIDIA's ``aiconfigurator-core`` (pinned 0.12.0).

``aiconfigurator-core`` (Apache-2.0) ships kernel timings measured per GPU, serving
framework and framework version: GEMMs by (m, n, k, dtype), context (prefill) and generation
(decode) attention by batch, sequence length, heads, KV heads, head width and dtypes, and
all-reduces by message size and GPU count. Its Rust engine answers op queries in
milliseconds (``EngineHandle.evaluate_ops_json``); a query takes microseconds, so it is never
asked on the engine's hot path: everything here tabulates or fits once per shape, returns
plain floats in **seconds**, and is cached for the process and on disk.

The disk cache (``$SPECSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/specsim`` or
``~/.cache/specsim``; ``SPECSIM_CACHE_DIR=off`` turns it off) holds each tabulated answer as
JSON, keyed by the pinned package version, the query grids below and the arguments, so a
later process skips loading the tables (about 2 s) and gets the same floats bit for bit. It
is an optimisation only: an unreadable or unwritable cache is recomputed, never an error.

Nothing else in SpecSim imports the package (it is imported lazily, on the first table);
``TablesUnavailable`` says in one line why a table cannot be had (package missing, another
version, a GPU, framework, dtype or shape the tables do not cover), and the caller falls
back to the calibrated roofline. Versions: the framework slot ``current`` of the pinned
package (vLLM 0.24.0, SGLang 0.5.14, TensorRT-LLM 1.3.0rc20; on A100 vLLM 0.14.0, SGLang
0.5.10, TensorRT-LLM 1.0.0) -- ``framework_version`` reports the one loaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import tempfile
from bisect import bisect_left
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from hardware.deployment import MOE_KERNELS

__all__ = ["PINNED", "TablesUnavailable", "GRID", "framework_version", "layer_table",
           "allreduce_table", "head_table", "attention_model", "decode_row", "decode_at",
           "gemm_seconds", "allreduce_seconds", "moe_table", "MOE_KERNELS", "mla_fit",
           "DECODE_BATCHES", "DECODE_LENGTHS"]

PINNED = "0.12.0"
BACKENDS = ("vllm", "sglang", "trtllm")
# Token counts the linear-layer tables are tabulated at (interpolated linearly between,
# extrapolated along the last segment beyond 32768).
GRID = tuple(range(1, 17)) + (20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384,
                              512, 640, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
                              12288, 16384, 32768)
_MS = 1e-3


class TablesUnavailable(Exception):
    """The measured tables cannot price this deployment; the message says why."""


@lru_cache(maxsize=1)
def _installed() -> None:
    """Raises TablesUnavailable unless the pinned package is installed (without importing it:
    the disk cache answers without the package's tables)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        have = version("aiconfigurator-core")
    except PackageNotFoundError:
        _package()  # says how to install it
        raise
    if have != PINNED:
        raise TablesUnavailable(f"aiconfigurator-core {have} is installed; SpecSim reads the "
                                f"tables of {PINNED}")


def _cache_dir() -> Path | None:
    """Where tabulated answers are kept, or None when the cache is off."""
    env = os.environ.get("SPECSIM_CACHE_DIR")
    if env == "off":
        return None
    if env:
        base = Path(env)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specsim"
    return base / f"aiconfigurator-core-{PINNED}"


def _disk_cached(fn):
    """Keep ``fn``'s answers (a str or a tuple of floats; or its TablesUnavailable) on disk."""

    @functools.wraps(fn)
    def wrapper(*args):
        _installed()
        where = _cache_path(fn.__name__, args)
        if where is None:
            return fn(*args)
        path, key = where
        try:
            doc = json.loads(path.read_text())
            if doc["key"] == key:
                if "unavailable" in doc:
                    raise TablesUnavailable(doc["unavailable"])
                value = doc["value"]
                return value if isinstance(value, str) else tuple(float(v) for v in value)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not cached yet, or unreadable: recompute
        try:
            value = fn(*args)
        except TablesUnavailable as err:
            _store(path, {"key": key, "unavailable": str(err)})
            raise
        _store(path, {"key": key, "value": value})
        return value

    return wrapper


def _cache_path(name: str, args: tuple) -> tuple[Path, str] | None:
    """(file, key) of one cached answer, or None when the cache is off."""
    folder = _cache_dir()
    if folder is None:
        return None
    key = repr((name, _CACHE_KEY, args))
    return folder / f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:20]}.json", key


def _store(path: Path, doc: dict) -> None:
    """Write ``doc`` to ``path`` atomically; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except OSError:
        pass


@lru_cache(maxsize=1)
def _package():
    """(get_database, EngineHandle, build_ops_json, ops, common), or TablesUnavailable."""
    try:
        from importlib.metadata import version

        from aiconfigurator_core.sdk import common
        from aiconfigurator_core.sdk import operations as ops
        from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json
        from aiconfigurator_core.sdk.perf_database import get_database
    except ImportError:
        raise TablesUnavailable(
            "aiconfigurator-core is not installed (it has wheels for Python >= 3.11 on Linux "
            "x86_64/aarch64 and macOS arm64: pip install aiconfigurator-core==0.12.0)"
        ) from None
    have = version("aiconfigurator-core")
    if have != PINNED:
        raise TablesUnavailable(f"aiconfigurator-core {have} is installed; SpecSim reads the "
                                f"tables of {PINNED}")
    # its loader warns about fallback rows of model families SpecSim never asks for
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    return get_database, EngineHandle, build_ops_json, ops, common


@cache
def _engine(system: str, backend: str):
    """(engine, framework version) for one GPU and framework."""
    get_database, engine_handle, *_ = _package()
    if backend not in BACKENDS:
        raise TablesUnavailable(f"no kernel tables for framework {backend!r}")
    try:
        db = get_database(system, backend, "current")
        return engine_handle.for_database(db), str(db.version)
    except Exception as err:  # the package raises several types; all mean "not covered"
        raise TablesUnavailable(f"no {backend} tables for {system}: {_first_line(err)}") \
            from None


def _first_line(err: Exception) -> str:
    """The error's first line without the package's install paths, at most 200 characters."""
    line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    line = re.sub(r" at /\S+?(;|$)", r"\1", line).removeprefix("perf database error: ")
    return line[:200]


@cache
@_disk_cached
def framework_version(system: str, backend: str) -> str:
    """The framework version whose tables are loaded for ``system``."""
    return _engine(system, backend)[1]


def _evaluate(system: str, backend: str, ops_list, **kw) -> list[float]:
    """Seconds of each op at the given query (is_context, batch_size, s, prefix, x)."""
    eng, _ = _engine(system, backend)
    build = _package()[2]
    try:
        rows = eng.evaluate_ops_json(build(ops_list), **kw)
    except Exception as err:
        raise TablesUnavailable(f"{backend} tables on {system}: {_first_line(err)}") from None
    return [r[1] * _MS for r in rows]


def _gemm_ops(gemms, quant: str):
    ops, common = _package()[3:5]
    mode = getattr(common.GEMMQuantMode, quant)
    return [ops.GEMM(f"g{i}", 1, n, k, mode) for i, (n, k) in enumerate(gemms)]


def gemm_seconds(system: str, backend: str, n: int, k: int, quant: str, m: int) -> float:
    """One GEMM (m x k) @ (k x n) in ``quant`` (bfloat16 or fp8)."""
    return _evaluate(system, backend, _gemm_ops([(n, k)], quant),
                     is_context=False, batch_size=1, s=1, x=m)[0]


def allreduce_seconds(system: str, backend: str, hidden: int, tp: int, tokens: int) -> float:
    """One framework all-reduce of ``tokens`` x ``hidden`` 16-bit values over ``tp`` GPUs."""
    ops = _package()[3]
    return _evaluate(system, backend, [ops.CustomAllReduce("ar", 1, hidden, tp)],
                     is_context=False, batch_size=1, s=1, x=tokens)[0]


@lru_cache(maxsize=512)
@_disk_cached
def layer_table(system: str, backend: str, gemms: tuple[tuple[int, int], ...],
                quant: str) -> tuple[float, ...]:
    """Seconds of one transformer block's linear layers at every token count of ``GRID``;
    ``gemms`` are the block's (n, k) per GPU, ``quant`` a GEMM mode: bfloat16, int8_wo,
    int4_wo (weight-only), fp8_block (block-scaled FP8 W8A8), fp8 (per-tensor FP8 W8A8
    whose activation scale is computed every pass, as measured) or fp8_static (per-tensor
    FP8 W8A8 with static activation scales).

    The tables measure per-tensor FP8 only with dynamic activation scales (the collector
    loads no input scale, so the engine computes one per call); fp8_static is the package's
    own derivation of the static kernel: the measured GEMM less the measured compute-scale
    kernel at the same (m, k), floored at the GEMM's roofline (aiconfigurator-core's
    ``operators/gemm.rs``). It is what aiconfigurator assumes for a per-tensor FP8
    checkpoint that does not mark its activations dynamic. Where the tables hold no
    compute-scale rows, fp8_static is TablesUnavailable."""
    return _gemm_table(system, backend, gemms, quant)


def _envelope(vals) -> tuple[float, ...]:
    """``vals`` over ``GRID`` made non-decreasing in the token count: the time at m tokens is
    at most the measured time at any larger tabulated count. The tables time one kernel
    configuration per size, and at some sizes (e.g. TensorRT-LLM's and vLLM's FP8 GEMMs at
    20-40 tokens, vLLM's at 160-384) it is slower than the one measured at a larger size; an
    engine can always run the larger size's kernel on a padded input (vLLM and TensorRT-LLM
    pad decode batches to their CUDA-graph sizes), so a pass never costs more for fewer
    tokens. Where the tables already rise with m the values are unchanged."""
    out = [float(v) for v in vals]
    for i in range(len(out) - 2, -1, -1):
        out[i] = min(out[i], out[i + 1])
    return tuple(out)


def _gemm_table(system: str, backend: str, gemms, quant: str) -> tuple[float, ...]:
    """The block's GEMMs summed at every token count of ``GRID``, each GEMM's curve first
    made non-decreasing (:func:`_envelope`); TensorRT-LLM's NVFP4 GEMMs as
    :data:`UNTUNED` says."""
    op_list = _gemm_ops(gemms, quant)
    per_m = [_evaluate(system, backend, op_list, is_context=False, batch_size=1, s=1, x=m)
             for m in GRID]  # [m][op]
    if (backend, quant) in UNTUNED:
        for other in BACKENDS:
            if other == backend:
                continue
            try:
                theirs = [_evaluate(system, other, op_list, is_context=False, batch_size=1,
                                    s=1, x=m) for m in GRID]
            except TablesUnavailable:
                continue
            per_m = [[min(a, b) for a, b in zip(mine, their, strict=True)]
                     for mine, their in zip(per_m, theirs, strict=True)]
    curves = [_envelope(col) for col in zip(*per_m, strict=True)]  # [op][m]
    return tuple(sum(ts) for ts in zip(*curves, strict=True))


# GEMM tables measured with the engine's untuned fallback kernel, which it does not serve
# with: TensorRT-LLM's NVFP4 GEMM (``torch.ops.trtllm.nvfp4_gemm``) picks its kernel with
# its AutoTuner among its CUTLASS, cuBLASLt and CUDA-core runners (NVIDIA/TensorRT-LLM
# ``tensorrt_llm/_torch/custom_ops/torch_custom_ops.py``, ``NVFP4GemmUnifiedRunner``),
# tuned at the engine's warm-up (``enable_autotuner``, on by default); on a tuning-cache
# miss it runs CUTLASS with tactic -1, its default configuration. The collector of the
# pinned tables times ``Linear.forward`` without entering ``autotune()`` (ai-dynamo/
# aiconfigurator ``collector/trtllm/collect_gemm.py``, ``run_gemm``), so its NVFP4 rows
# are the fallback's: on B200 at 4 tokens 1.85-4.8x the HBM bound at Llama-3.1-70B's TP 1
# shapes, slower at large k than its own FP8 GEMM (8192 x 51200: 107.6 against 84.2 us),
# and up to 2.25x vLLM's and SGLang's NVFP4 GEMMs at the same shapes (1.1x on the largest),
# while TensorRT-LLM serves NVFP4 Llama-3.1-70B faster than vLLM in the same silicon file
# (systems/silicon_sample.csv: vLLM's TPOT a median 7.8% above, -2% to +41% over 60
# pairs). No tuned table is measured, so each of its GEMMs is priced at the fastest NVFP4
# kernel the tables have for the shape on the GPU (the other frameworks', FlashInfer's and
# SGLang's CUTLASS / CuTe DSL kernels): an estimate of the tuned choice, borrowed, not
# TensorRT-LLM's own measurement (docs/timing.md, Blackwell).
UNTUNED = frozenset({("trtllm", "nvfp4")})


@lru_cache(maxsize=128)
@_disk_cached
def allreduce_table(system: str, backend: str, hidden: int, tp: int) -> tuple[float, ...]:
    """Seconds of one all-reduce of tokens x ``hidden`` 16-bit values over ``tp`` GPUs (the
    framework's own, e.g. vLLM's custom all-reduce under CUDA graphs) over ``GRID``, made
    non-decreasing (:func:`_envelope`)."""
    ops = _package()[3]
    op_list = [ops.CustomAllReduce("ar", 1, hidden, tp)]
    return _envelope(_evaluate(system, backend, op_list, is_context=False, batch_size=1, s=1,
                               x=m)[0] for m in GRID)


@lru_cache(maxsize=128)
@_disk_cached
def head_table(system: str, backend: str, n: int, k: int) -> tuple[float, ...]:
    """Seconds of the lm_head GEMM (16-bit, ``n`` vocabulary rows per GPU) over ``GRID``,
    made non-decreasing (:func:`_envelope`)."""
    op_list = _gemm_ops([(n, k)], "bfloat16")
    return _envelope(_evaluate(system, backend, op_list, is_context=False, batch_size=1, s=1,
                               x=m)[0] for m in GRID)


# Query points of the attention model: the decode (generation) kernel is tabulated over
# batches x KV lengths (interpolated between them); the prefill (context) kernel is fitted at
# batches x prompt lengths x cached prefixes, the ranges serving passes span. ``_DECODE`` are
# the points of MLA's fit (:func:`mla_fit`).
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DECODE_LENGTHS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
_DECODE = [(b, s) for b in (1, 4, 16, 64, 256) for s in (128, 512, 2048, 8192)]
_PREFILL = [(b, s, p) for b in (1, 4, 16, 64, 256)
            for s, p in ((128, 0), (512, 0), (2048, 0), (8192, 0), (512, 1024), (512, 4096),
                         (128, 2048)) if b * s <= 131072]


# what a cached answer depends on besides its arguments: bump the format when the tabulation
# changes in a way the grids do not show
_CACHE_KEY = (7, PINNED, GRID, DECODE_BATCHES, DECODE_LENGTHS, tuple(_DECODE),
              tuple(_PREFILL))


def decode_row(table, n: float) -> tuple[float, ...]:
    """The decode-attention table (rows over ``DECODE_BATCHES``, columns over
    ``DECODE_LENGTHS``) at ``n`` sequences, linear between the tabulated batches (the first
    row below the first, along the last two beyond the last)."""
    g = DECODE_BATCHES
    if n <= g[0]:
        return table[0]
    i = min(bisect_left(g, n), len(g) - 1)
    w = (n - g[i - 1]) / (g[i] - g[i - 1])
    lo, hi = table[i - 1], table[i]
    return tuple(a + (b - a) * w for a, b in zip(lo, hi, strict=True))


def decode_at(row: tuple[float, ...], length: float) -> float:
    """A :func:`decode_row` at a KV length per sequence: linear between the tabulated
    lengths, the first length's time below it (a kernel's fixed part), along the last two
    beyond the last."""
    g = DECODE_LENGTHS
    if length <= g[0]:
        return row[0]
    i = min(bisect_left(g, length), len(g) - 1)
    return row[i - 1] + (row[i] - row[i - 1]) * (length - g[i - 1]) / (g[i] - g[i - 1])


@lru_cache(maxsize=128)
@_disk_cached
def attention_model(system: str, backend: str, heads: int, kv_heads: int, head_dim: int,
                    kv_bits: int) -> tuple[float, ...]:
    """Per-layer attention of one GPU's heads: the measured decode kernel over a grid, plus
    what a prefill adds, fitted.

    A pass of ``n`` sequences feeding ``new`` tokens that read or write ``kv`` KV entries
    and attend ``keys`` (query, key) pairs costs ``decode(n, kv / n) + p_new·(new - n) +
    p_key·(keys - kv)`` seconds: the generation kernel at n sequences of the batch's mean
    KV length (tabulated at ``DECODE_BATCHES`` x ``DECODE_LENGTHS``, made non-decreasing
    along both as the GEMM curves are (:func:`_envelope`), interpolated linearly), and for
    the tokens and pairs beyond one per sequence and one per KV entry
    (prompts, chunks, verified guesses) two coefficients fitted by non-negative least
    squares on relative error to the measured context kernel at the ``_PREFILL`` points --
    a prefill of b prompts of s tokens after p cached ones has n = b, new = b·s,
    kv = b·(s + p), keys = b·(s·p + s(s+1)/2). A decode pass is the table exactly.

    Returns the table row by row, then ``p_new``, ``p_key``, then the median and the worst
    relative error of the model at the prefill points.
    """
    from scipy.optimize import nnls

    ops, common = _package()[3:5]
    kv_mode = common.KVCacheQuantMode.bfloat16 if kv_bits == 16 else common.KVCacheQuantMode.fp8
    gen = [ops.GenerationAttention("ga", 1, heads, kv_heads, kv_mode, head_size=head_dim)]
    raw = [_envelope(_evaluate(system, backend, gen, is_context=False, batch_size=b, s=s)[0]
                     for s in DECODE_LENGTHS) for b in DECODE_BATCHES]
    # non-decreasing in the batch too: more sequences of the same length never cost less
    table = list(zip(*(_envelope(col) for col in zip(*raw, strict=True)), strict=True))
    # prefill attention computes in 16 bits where the tables have it (vLLM has only that);
    # an FP8 KV cache on SGLang is measured with an FP8 prefill kernel only
    fmhas = [common.FMHAQuantMode.bfloat16] + ([common.FMHAQuantMode.fp8] if kv_bits == 8
                                               else [])
    for i, fmha in enumerate(fmhas):
        ctx = [ops.ContextAttention("ca", 1, heads, kv_heads, kv_mode, fmha,
                                    head_size=head_dim)]
        try:
            pre = [_evaluate(system, backend, ctx, is_context=True, batch_size=b, s=s,
                             prefix=p)[0] for b, s, p in _PREFILL]
            break
        except TablesUnavailable:
            if i == len(fmhas) - 1:
                raise
    base, extra = [], []
    for b, s, p in _PREFILL:
        base.append(decode_at(decode_row(table, b), s + p))
        new, kv, keys = b * s, b * (s + p), b * (s * p + s * (s + 1) / 2)
        extra.append((new - b, keys - kv))
    t = np.asarray(pre)  # [Q]
    a = np.asarray(extra, dtype=np.float64)  # [Q, 2]
    d = np.asarray(base)  # [Q]
    coef, _ = nnls(a / t[:, None], 1.0 - d / t)  # relative error, coefficients >= 0
    err = np.abs((d + a @ coef) / t - 1.0)  # [Q]
    return (*(v for row in table for v in row), float(coef[0]), float(coef[1]),
            float(np.median(err)), float(err.max()))


# ---- mixture of experts and MLA ------------------------------------------------------------
#
# The package answers MoE queries for shapes it has no rows for by borrowing another
# quantisation's curve (its "cross-profile transfer"); SpecSim uses only measured rows, so
# it first looks the exact shape up in the tables' own files.


def _table_file(system: str, backend: str, family: str, name: str):
    """The parquet file of one of the package's tables for ``system`` / ``backend``."""
    from pathlib import Path

    import aiconfigurator_core

    version = framework_version(system, backend)
    return Path(aiconfigurator_core.__file__).parent / "systems" / "data" / system / family \
        / backend / version / name


@cache
def _moe_kernels(system: str, backend: str, distribution: str) -> dict[tuple, frozenset]:
    """(quant, hidden, inter, topk, experts, moe_tp, moe_ep) of the rows measured under the
    token distribution ``distribution`` (balanced, power_law_1.01, power_law_1.2), each with
    the kernels (``kernel_source``) its rows were measured with."""
    import pandas as pd

    path = _table_file(system, backend, "moe", "moe_perf.parquet")
    try:
        df = pd.read_parquet(path, columns=["moe_dtype", "hidden_size", "inter_size", "topk",
                                            "num_experts", "moe_tp_size", "moe_ep_size",
                                            "distribution", "kernel_source"])
    except (OSError, ImportError, ValueError) as err:
        raise TablesUnavailable(f"no {backend} MoE tables for {system}: {_first_line(err)}") \
            from None
    df = df[df["distribution"] == distribution].drop(columns="distribution")
    out: dict[tuple, set] = {}
    for *key, kernel in df.drop_duplicates().itertuples(index=False, name=None):
        out.setdefault(tuple(key), set()).add(kernel)
    return {k: frozenset(v) for k, v in out.items()}


# The fused-MoE kernel families ``Deployment.moe_kernel`` names, and which of the kernel
# labels (``kernel_source``) of aiconfigurator-core 0.12.0's MoE rows each covers
# (:func:`moe_kernel_family`):
# trtllm_gen -- TensorRT-LLM's trtllm-gen fused-MoE kernels: TensorRT-LLM's own
#   (``moe_config.backend: TRTLLM`` -> ``TRTLLMGenFusedMoE`` for block-FP8 and NVFP4 experts:
#   NVIDIA/TensorRT-LLM tensorrt_llm/_torch/modules/fused_moe/create_moe.py @01f8de52,
#   get_moe_cls), and FlashInfer's binding of the same kernels that SGLang
#   (``--moe-runner-backend flashinfer_trtllm``) and vLLM run (flashinfer-ai/flashinfer
#   csrc/trtllm_fused_moe_kernel_launcher.cu, built on its trtllmGen_bmm_export): labels
#   with ``flashinfer_trtllm`` (``sglang_flashinfer_trtllm_moe``, ``vllm_*flashinfer_trtllm*``);
#   TensorRT-LLM's own tables do not time them (its collector times DeepGEMM for block-FP8
#   and CUTLASS for NVFP4 on SM100);
# deepgemm -- DeepGEMM's grouped GEMMs (TensorRT-LLM ``DEEPGEMM``): ``deepgemm``;
# cutlass -- CUTLASS grouped GEMMs (TensorRT-LLM ``CUTLASS``, FlashInfer's CUTLASS MoE):
#   labels with ``cutlass``;
# triton -- a Triton fused-MoE kernel (vLLM's and SGLang's default on Hopper): labels with
#   ``triton``, and ``vllm_fused_moe``, vLLM's ``fused_experts`` (a Triton kernel:
#   vllm-project/vllm vllm/model_executor/layers/fused_moe/fused_moe.py, fused_moe_kernel).
# Labels of no family (TensorRT-LLM's ``moe_torch_flow`` on the A100, the Marlin and MXFP4
# kernels) serve only an unset moe_kernel.
# (the names: hardware.deployment.MOE_KERNELS, Deployment.moe_kernel's field)
# labels the tables' engine keeps out of an op's default view (TensorRT-LLM's min-latency
# NVFP4 kernel, a view of its own: aiconfigurator_core sdk/operations/moe.py, MoE.load_data),
# so they do not decide which kernel a shape's default rows are
_MOE_SIDE_VIEWS = frozenset({"moe_torch_flow_min_latency"})


def moe_kernel_family(label: str) -> str | None:
    """The :data:`MOE_KERNELS` family a table's kernel label belongs to (see there), or
    None."""
    if label == "vllm_fused_moe" or "triton" in label:
        return "triton"
    for family, word in (("trtllm_gen", "flashinfer_trtllm"), ("deepgemm", "deepgemm"),
                         ("cutlass", "cutlass")):
        if word in label:
            return family
    return None


def moe_kernel_backend(system: str, backend: str, key: tuple, distribution: str,
                       kernel: str | None) -> str:
    """The framework whose tables price the routed experts of shape ``key`` (quant, hidden,
    inter, topk, experts, moe_tp, moe_ep) with ``kernel`` (a :data:`MOE_KERNELS` family;
    None: ``backend``'s own, whatever it measured): ``backend`` where every row of its
    default view for the shape is of that kernel, else the first other framework (vllm,
    sglang, trtllm) whose rows are -- borrowed, as :data:`UNTUNED` borrows GEMMs.
    TablesUnavailable where none is."""
    if kernel is None:
        return backend
    for other in (backend,) + tuple(b for b in BACKENDS if b != backend):
        try:
            labels = _moe_kernels(system, other, distribution).get(key, frozenset())
        except TablesUnavailable:
            continue
        labels = labels - _MOE_SIDE_VIEWS
        if labels and all(moe_kernel_family(k) == kernel for k in labels):
            return other
    raise TablesUnavailable(
        f"no framework's MoE tables on {system} time the {kernel} kernel for {key[0]} experts "
        f"(hidden {key[1]}, width {key[2]}, top-{key[3]} of {key[4]}) at moe_tp {key[5]} / "
        f"moe_ep {key[6]}")


@lru_cache(maxsize=64)
def moe_table(system: str, backend: str, hidden: int, inter: int, topk: int, experts: int,
              moe_tp: int, moe_ep: int, quant: str,
              distribution: str = "power_law_1.2",
              kernel: str | None = None) -> tuple[tuple[float, ...], str]:
    """(seconds of one MoE layer's routed experts (the fused-MoE kernel) at every total token
    count of ``GRID``, the framework whose tables they come from, or frameworks joined by
    ``+`` where per-tensor and block-FP8 rows come from two), measured with the tokens
    routed as ``distribution`` spreads them (``hardware.timing.measured.moe_distribution``):
    each GPU holds ``experts / moe_ep`` experts split ``moe_tp`` ways. ``quant``: bfloat16,
    fp8_block (block-scaled W8A8), nvfp4, or fp8 (a per-tensor W8A8 checkpoint: the faster
    of the per-tensor and the block-scaled kernels per size, of those the tables have for
    the shape -- an approximation: which MoE kernel an engine runs for per-tensor FP8
    experts is not modelled); ``kernel``: the kernel family (:data:`MOE_KERNELS`; None:
    whatever ``backend``'s tables measured), from another framework's tables where
    ``backend``'s do not time it (:func:`moe_kernel_backend`). Made non-decreasing in the
    token count (:func:`_envelope`). TablesUnavailable unless the shape has measured rows."""
    quants = ("fp8", "fp8_block") if quant == "fp8" else (quant,)
    shape = (hidden, inter, topk, experts, moe_tp, moe_ep)
    have, why = [], None
    for q in quants:
        try:
            source = moe_kernel_backend(system, backend, (q,) + shape, distribution, kernel)
        except TablesUnavailable as err:
            why = why or err
            continue
        if (q,) + shape in _moe_kernels(system, source, distribution):
            have.append((q, source))
    if not have:
        if why is not None:
            raise why
        raise TablesUnavailable(
            f"the {backend} MoE tables on {system} have no {quant} rows for hidden {hidden}, "
            f"expert width {inter}, top-{topk} of {experts} experts at moe_tp {moe_tp} / "
            f"moe_ep {moe_ep} ({distribution} routing)")
    ops, common = _package()[3:5]
    tables = []
    for q, source in have:
        op = ops.MoE("moe", 1, hidden, inter, topk, experts, moe_tp, moe_ep,
                     getattr(common.MoEQuantMode, q), distribution, 1)
        tables.append([_evaluate(system, source, [op], is_context=False, batch_size=1, s=1,
                                 x=m)[0] for m in GRID])
    lenders = "+".join(sorted({source for _, source in have}))
    return _envelope(min(vals) for vals in zip(*tables, strict=True)), lenders


@cache
def _mla_rows(system: str, backend: str) -> frozenset:
    """(phase, heads, kv dtype, gemm dtype) of the MLA module tables (DeepSeek-V3 shape)."""
    import pandas as pd

    out = set()
    for phase in ("context", "generation"):
        path = _table_file(system, backend, "mla", f"mla_{phase}_module_perf.parquet")
        try:
            df = pd.read_parquet(path, columns=["model", "num_heads", "kv_cache_dtype",
                                                "gemm_type"])
        except (OSError, ImportError, ValueError):
            continue
        df = df[df["model"] == "deepseek-ai/DeepSeek-V3"].drop(columns="model")
        out |= {(phase, *r) for r in df.itertuples(index=False, name=None)}
    return frozenset(out)


# Query points of the MLA fit: ``_DECODE`` and these prefills (the module tables hold no
# cached prefix, so prefills start from an empty cache).
_MLA_PREFILL = [(b, s) for b in (1, 4) for s in (128, 512, 2048, 8192)]


@lru_cache(maxsize=32)
def mla_fit(system: str, backend: str, heads: int, kv_bits: int,
            gemm: str) -> tuple[float, ...]:
    """DeepSeek-V3's whole MLA attention block on one GPU (``heads`` query heads: its
    projections, the latent attention and o_proj, as the package's module tables measure
    it) as ``a0 + a_seq·n + a_new·new + a_kv·kv + a_key·keys`` seconds per layer, fitted
    by non-negative least squares on relative error; ``gemm`` bfloat16 or fp8_block.
    Returns the coefficients, then the median and worst relative error."""
    from scipy.optimize import nnls

    kv = "bfloat16" if kv_bits == 16 else "fp8"
    rows_have = _mla_rows(system, backend)
    for phase in ("generation", "context"):
        if (phase, heads, kv, gemm) not in rows_have:
            raise TablesUnavailable(f"the {backend} MLA module tables on {system} have no "
                                    f"{phase} rows for {heads} heads, {kv} KV, {gemm} GEMMs")
    ops, common = _package()[3:5]
    kv_mode = getattr(common.KVCacheQuantMode, kv)
    fmha, g = common.FMHAQuantMode.bfloat16, getattr(common.GEMMQuantMode, gemm)
    gen = [ops.MLAModule("mla", 1, False, heads, kv_mode, fmha, g, native_num_heads=128)]
    ctx = [ops.MLAModule("mla", 1, True, heads, kv_mode, fmha, g, native_num_heads=128)]
    rows, times = [], []
    for b, s in _DECODE:
        times.append(_evaluate(system, backend, gen, is_context=False, batch_size=b, s=s)[0])
        rows.append((1.0, b, b, b * s, b * s))
    for b, s in _MLA_PREFILL:
        times.append(_evaluate(system, backend, ctx, is_context=True, batch_size=b, s=s,
                               prefix=0)[0])
        rows.append((1.0, b, b * s, b * s, b * s * (s + 1) / 2))
    a = np.asarray(rows, dtype=np.float64)  # [Q, 5]
    t = np.asarray(times)  # [Q]
    coef, _ = nnls(a / t[:, None], np.ones_like(t))
    err = np.abs(a @ coef / t - 1.0)  # [Q]
    return (*(float(c) for c in coef), float(np.median(err)), float(err.max()))
