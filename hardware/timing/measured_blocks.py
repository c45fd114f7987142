"""How a block's GEMMs are looked up in the kernel tables (``hardware.timing.aic``) for the
``measured`` timing (``hardware.timing.measured``): which GEMMs a block runs on one GPU
(``block_gemms``, ``moe_block_gemms``), in which of the tables' modes (``gemm_quant``; a
partly quantised block's attention and MLP each in its own: ``scoped_modes``,
``parts_table``), and an MoE block's routed experts from the fused-MoE rows under
aiconfigurator's power-law routing, never below the time to read the expert weights more
tokens touch (``moe_tables``)."""

from __future__ import annotations

from hardware.models import LLAMA_TYPES
from hardware.moe import touched_share
from hardware.timing import aic

__all__ = ["MLA_QUANT", "block_gemms", "gemm_quant", "moe_block_gemms", "moe_distribution",
           "moe_tables", "parts_table", "scoped_modes"]

# the tables' GEMM mode of a 16-bit or weight-only format (FP8: :func:`gemm_quant`)
_QUANT = {"w16": "bfloat16", "int8": "int8_wo", "int4": "int4_wo"}
# the tables' mode of FP4 W4A4 (compute_dtype fp4): NVFP4 GEMMs, fused-MoE and MLA rows;
# MXFP4 and FP4 weight-only (W4A16) are not mapped
_FP4_QUANT = {"nvfp4": "nvfp4"}

# the tables' FP8 W8A8 GEMM mode by how the deployment scales its values: per-tensor with
# static activation scales (aiconfigurator's derivation), with activation scales computed
# every pass (the measured per-tensor kernel: TensorRT-LLM's collector loads no input scale;
# vLLM 0.24.0's builds Fp8Config(activation_scheme="dynamic"), per-token scales on Hopper),
# or 128x128 weight blocks
_FP8_QUANT = {"tensor": "fp8_static", "dynamic": "fp8", "block": "fp8_block"}


def gemm_quant(fp8_scales: str, fmt: str, fp4: str | None = None) -> str:
    """The tables' GEMM mode for a weight format (``roofline.weight_format``): FP8 W8A8 as
    the deployment's ``fp8_scales`` says (``Deployment.fp8_scaling``: ``tensor`` ->
    ``fp8_static``, ``dynamic`` -> ``fp8``, ``block`` -> ``fp8_block``); FP4 W4A4 as its
    block format ``fp4`` (``nvfp4``). TablesUnavailable for FP4 the tables do not map."""
    if fmt == "fp8":
        return _FP8_QUANT[fp8_scales]
    if fp4 is not None:
        if fmt != "fp4" or fp4 not in _FP4_QUANT:
            raise aic.TablesUnavailable(
                f"{fp4} weights{'' if fmt == 'fp4' else ' run weight-only'} are not mapped "
                f"to the tables' FP4 rows (NVFP4 W4A4, compute_dtype fp4, is)")
        return _FP4_QUANT[fp4]
    return _QUANT[fmt]


def _linear_table(system: str, backend: str, gemms, quant: str) -> tuple[tuple, str]:
    """(:func:`aic.layer_table` of ``gemms`` in ``quant``, the mode that priced it): where
    the tables hold no compute-scale rows to derive static per-tensor FP8 from, its
    measured dynamic-scale kernel (``fp8``), which costs a little more. No GEMMs: zeros."""
    if not gemms:
        return tuple(0.0 for _ in aic.GRID), quant
    try:
        return aic.layer_table(system, backend, gemms, quant), quant
    except aic.TablesUnavailable:
        if quant != "fp8_static":
            raise
        return aic.layer_table(system, backend, gemms, "fp8"), "fp8"


def scoped_modes(dep, quant: str) -> tuple[str, str]:
    """(the attention GEMMs' mode, the MLP GEMMs' mode) of ``dep``: ``quant`` where its
    ``quantized_scope`` quantizes them, bfloat16 where the weights stay 16-bit."""
    scope = dep.quantized_scope
    return (quant if scope == "all" else "bfloat16",
            "bfloat16" if scope == "experts" else quant)


def parts_table(system: str, backend: str, gemms, n_attn: int, modes: tuple[str, str]
                 ) -> tuple[tuple, str]:
    """(the seconds over the grid of ``gemms``, their first ``n_attn`` the attention's in
    ``modes[0]``, the rest the MLP's in ``modes[1]``, and the modes for notes): one table
    where the modes agree (the same sums, in the same order, as before the scopes)."""
    attn, mlp = gemms[:n_attn], gemms[n_attn:]
    if modes[0] == modes[1]:
        table, q = _linear_table(system, backend, gemms, modes[0])
        return table, q
    a, qa = _linear_table(system, backend, attn, modes[0])
    m, qm = _linear_table(system, backend, mlp, modes[1])
    return tuple(x + y for x, y in zip(a, m, strict=True)), _modes_label(
        qa if attn else None, qm if mlp else None)


def _modes_label(attn: str | None, mlp: str | None) -> str:
    """The GEMM modes that priced a block, for notes: one mode, or each part's."""
    if attn is None or mlp is None or attn == mlp:
        return attn or mlp or "no"
    return f"{attn} attention, {mlp} MLP"



def block_gemms(dep) -> tuple[tuple[int, int], ...]:
    """(n, k) of each GEMM of one transformer block on one GPU of ``dep`` (TP-split)."""
    cfg, shape, tp = dep.model.config, dep.model.shape, dep.tp
    h, d = shape.hidden, shape.d_head
    if cfg.model_type == "medusa":  # one residual block: a replicated hidden x hidden linear
        return ((h, h),)
    q = shape.n_heads // tp * d
    kv = dep.kv_heads_per_gpu * d
    if cfg.model_type in (*LLAMA_TYPES, "mixtral", "qwen3_moe", "glm4_moe"):
        inter = cfg.intermediate_size // tp
        return ((q + 2 * kv, h), (h, q), (2 * inter, h), (h, inter))
    ffn = cfg.ffn_dim // tp
    return ((q + 2 * kv, h), (h, q), (ffn, h), (h, ffn))


_Gemms = tuple[tuple[int, int], ...]


def moe_block_gemms(dep) -> tuple[_Gemms, _Gemms, _Gemms]:
    """(n, k) of the GEMMs of an MoE model on one GPU: a block's attention (both kinds of
    block), a dense block's MLP (empty where every block is MoE) and an MoE block's shared
    experts (empty without any; ``moe_tables`` may run them beside the routed ones),
    routed experts and router excluded (the MoE table and a 16-bit GEMM price those).
    MLA's projections are in its module tables (``aic.mla_fit``), so not here."""
    cfg, shape, tp = dep.model.config, dep.model.shape, dep.tp
    h = shape.hidden
    attn = () if cfg.mla else block_gemms(dep)[:2]
    dense = ()
    if cfg.intermediate_size and not all(shape.moe_layers):
        inter = cfg.intermediate_size // tp
        dense = ((2 * inter, h), (h, inter))
    shared = (cfg.n_shared_experts or 0) * (cfg.moe_intermediate_size or 0) // tp
    return attn, dense, ((2 * shared, h), (h, shared)) if shared else ()



_MOE_QUANT = {"bfloat16": "bfloat16", "fp8_static": "fp8", "fp8": "fp8",
              "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
# the MLA module tables' GEMM mode by the attention GEMMs' mode (an FP8 checkpoint's MLA
# is DeepSeek-V3's block-scaled FP8)
MLA_QUANT = {"bfloat16": "bfloat16", "fp8_static": "fp8_block", "fp8": "fp8_block",
              "fp8_block": "fp8_block", "nvfp4": "nvfp4"}


def moe_distribution(cfg) -> str:
    """How the fused-MoE kernel's tokens are spread over the experts in the table rows that
    price it: aiconfigurator-core's own modelling choice (0.12.0, ``sdk/config.py``
    ``workload_distribution = "power_law"``, with the exponent its model classes set:
    ``sdk/models/deepseek.py`` 1.01 for the DeepSeek family, ``sdk/models/moe.py`` 1.2
    for the other MoE models), not the balanced rows, where every expert gets exactly its share --
    at a decode's few tokens that touches every expert, more than routing does."""
    return "power_law_1.01" if cfg.model_type in ("deepseek_v2", "deepseek_v3") \
        else "power_law_1.2"


def _expert_read_floor(block: tuple[float, ...], dep, width: int, moe_tp: int,
                       moe_ep: int) -> tuple[float, ...]:
    """An MoE block's seconds over the grid, never below its time at one token plus the
    time to read, at the GPU's datasheet bandwidth, the routed experts' weights that more
    tokens add.

    The tables' rows spread a pass's tokens over the experts by a power law (aiconfigurator's
    choice, :func:`moe_distribution`), so at a few tokens they touch about as many experts
    as one token does, and where the shared experts run on a second stream
    (``shared_expert_stream_tokens``) their latency-bound GEMMs hid the rest: a DeepSeek-V3
    4-token verify on 8 H200s came out 1% dearer than a decode, though routing its tokens
    uniformly touches 30.5 experts per layer instead of 8, about 1.5 ms more weights to read
    per GPU. Here each token goes to top_k of the experts uniformly
    (``hardware.moe.touched_share``, as the roofline prices them), and the weights of the
    experts touched beyond one token's are read in full, after what one token costs: SpecSim
    assumes that read is not hidden behind the block's latency-bound kernels (a choice,
    docs/timing.md)."""
    shape = dep.model.shape
    expert_bytes = 3 * shape.hidden * width * dep.stored_bits / 8 / moe_tp  # one GPU's share
    layer_bytes = expert_bytes * shape.n_experts / moe_ep  # every local expert, one layer
    miss = 1.0 - shape.top_k / shape.n_experts
    per_s = layer_bytes / dep.gpu.hbm_bytes_per_s
    base = block[0]  # the grid starts at one token
    return tuple(max(b, base + per_s * (touched_share(n, miss) - touched_share(1, miss)))
                 for n, b in zip(aic.GRID, block, strict=True))


def moe_tables(dep, system: str, backend: str, quant: str, modes: tuple[str, str],
                framework):
    """(a dense block's, an MoE block's seconds over the grid, an MoE block's with its
    shared experts on a second stream beside the routed ones -- the longer of the two --
    or None where the framework does not do that, the GEMM modes that priced the GEMMs and
    what priced the routed experts, for notes) of an MoE model, its routed experts in
    ``quant``, its attention and MLP GEMMs in ``modes`` (:func:`scoped_modes`): an MoE
    block is its GEMMs (attention, shared experts), the 16-bit router GEMM and the routed
    experts' fused-MoE kernel at moe_tp / moe_ep as the engine shards them (``ep`` 1: every
    expert split over tp; ``ep`` = tp: whole experts, E/ep per GPU; ``ep`` dividing tp: E/ep
    per GPU, each split tp/ep ways, ``Deployment.moe_tp``), with the kernel
    ``dep.moe_kernel`` names (``aic.moe_table``: another framework's tables where
    ``backend``'s do not time it)."""
    shape, cfg = dep.model.shape, dep.model.config
    if dep.attention_dp > 1:
        raise aic.TablesUnavailable(f"ep {dep.ep} > tp {dep.tp} (data-parallel attention "
                                    "with all-to-all) is not priced from the tables")
    if quant not in _MOE_QUANT:
        raise aic.TablesUnavailable(f"no {quant} MoE kernel tables")
    attn_g, dense_g, shared_g = moe_block_gemms(dep)
    moe_quant = _MOE_QUANT[quant]
    dense, used = parts_table(system, backend, attn_g + dense_g, len(attn_g), modes)
    fixed, _ = _linear_table(system, backend, attn_g, modes[0])
    shared, q_shared = _linear_table(system, backend, shared_g, modes[1])
    if not dense_g and shared_g:
        used = _modes_label(used if attn_g else None, q_shared)
    router = aic.layer_table(system, backend, ((shape.n_experts, shape.hidden),), "bfloat16")
    width = cfg.intermediate_size if cfg.model_type == "mixtral" else cfg.moe_intermediate_size
    moe_tp, moe_ep = dep.moe_tp, dep.ep
    routed, source = aic.moe_table(system, backend, shape.hidden, width, shape.top_k,
                                   shape.n_experts, moe_tp, moe_ep, moe_quant,
                                   moe_distribution(cfg), dep.moe_kernel)
    experts = "MoE kernel tables" if dep.moe_kernel is None else \
        f"MoE {dep.moe_kernel} kernel tables" + \
        ("" if source == backend else
         " of " + " and ".join(f"{lender} {aic.framework_version(system, lender)}"
                               for lender in source.split("+")) + " (borrowed)")
    summed = tuple(a + b + c + d for a, b, c, d in zip(fixed, router, shared, routed,
                                                        strict=True))
    summed = _expert_read_floor(summed, dep, width, moe_tp, moe_ep)
    if not (framework.shared_expert_stream_tokens and shared_g):
        return dense, summed, None, used, experts
    # the shared experts on a second stream: the longer of them and the routed ones
    beside = tuple(a + b + max(c, d) for a, b, c, d in zip(fixed, router, shared, routed,
                                                            strict=True))
    return dense, summed, _expert_read_floor(beside, dep, width, moe_tp, moe_ep), used, \
        experts
