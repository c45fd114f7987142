"""The ``measured`` timing: a pass as the sum of measured kernel times, plus the framework.

Per pipeline stage, per GPU, from the tables ``hardware.timing.aic`` reads for the GPU's
``tables`` system and the framework's ``tables`` set (tabulated once per shape, so a pass
costs a few interpolations):

- gemm_s      = layers x (the block's GEMMs at m = new tokens: q/k/v, o, gate/up, down, or
                OPT's fc1/fc2, per GPU under TP; an MoE block: its attention and shared-
                expert GEMMs, the 16-bit router GEMM and the fused-MoE kernel's measured
                time at the pass's tokens under aiconfigurator's power-law routing
                (``measured_blocks.moe_distribution``), the experts sharded as vLLM
                shards them -- the shared experts and the routed ones the longer of the
                two, not their sum, in passes the framework runs them on two streams
                (``shared_expert_stream_tokens``); MLA's projections are in its
                attention term; Medusa heads: one hidden x hidden
                GEMM per residual block) + the lm_head GEMM (16-bit; Medusa: one per
                head) at m = head tokens (min(new, 32 per sequence)), interpolated
                linearly between the tabulated token counts;
- allreduce_s = 2 x layers x the framework's all-reduce of new x hidden 16-bit values;
- elementwise_s = new x the kernels the tables leave out (normalisation, residual adds,
                rotary, activation, activation quantisation): the framework's
                ``act_passes`` hidden-wide 16-bit vectors per token per block at the
                GPU's HBM bandwidth (``base.elementwise_s_per_token``);
- attention_s = layers x (decode(n, kv / n) + p_new·(new - n) + p_key·(keys - kv)): the
                measured decode (generation) kernel of the GPU's heads at n sequences of
                the batch's mean KV length, interpolated in a table, and what prompts,
                chunks and verified guesses add beyond one token per sequence and one key
                per KV entry, fitted to the measured prefill (context) kernel (its median
                and worst error are in ``note``; ``aic.attention_model``); for MLA
                (DeepSeek-V3) ``a0 + a_seq·n + a_new·new + a_kv·kv + a_key·keys`` fitted to
                the package's module tables, the whole attention block with its
                projections;
- host_s, overhead_s as in the roofline (offloading is not in the tables; the framework's
  CPU-side ``step_s + tp_step_s·(tp - 1) + layer_s·layers + seq_s·sequences`` is not
  either);
- stage_s = max(gemm_s + attention_s + allreduce_s + elementwise_s, host_s) + overhead_s
  (the sum for a framework without ``offload_overlap``).

Not in the tables: normalisation, rotary and activation kernels (their bandwidth is the
fitted ``act_passes``, their launches in ``layer_s``), sampling and the embedding gather
(in ``step_s`` / ``seq_s``). ``compute_s`` and
``memory_s`` in the breakdown are the speed-of-light times of the pass's FLOPs and bytes at
the datasheet peaks (they only name the bound); ``parts`` has the measured terms.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from hardware.models import LLAMA_TYPES
from hardware.timing import aic
from hardware.timing.base import (
    ACT_BYTES,
    HEAD_TOKENS_PER_SEQ,
    Breakdown,
    elementwise_s_per_token,
    framework_seq_s,
    framework_step_s,
    largest,
)
from hardware.timing.measured_blocks import (
    MLA_QUANT,
    block_gemms,
    gemm_quant,
    moe_tables,
    parts_table,
    scoped_modes,
)
from hardware.timing.roofline import (
    collective_params,
    host_bytes_per_s,
    roofline_params,
    weight_format,
)

__all__ = ["MeasuredTiming"]

_GRID = tuple(float(m) for m in aic.GRID)
_LENGTHS = tuple(float(s) for s in aic.DECODE_LENGTHS)
_LAST = len(_LENGTHS) - 1
_FIXED_CACHE = 4096  # (new, n) pairs a one-stage timing remembers the fixed part of
# the families whose blocks the tables price (block_gemms, moe_block_gemms, the MLA tables)
_MEASURED_TYPES = (*LLAMA_TYPES, "opt", "medusa", "mixtral", "qwen3_moe", "deepseek_v3",
                   "deepseek_v2", "glm4_moe")


def _interp(vals: tuple[float, ...], x: float) -> float:
    """Piecewise-linear ``vals`` over ``_GRID`` at ``x`` (through 0 below the first point,
    along the last segment beyond the last)."""
    g = _GRID
    if x <= g[0]:
        return vals[0] * x / g[0]
    i = bisect_left(g, x)
    if i == len(g):
        i -= 1
    x0, x1 = g[i - 1], g[i]
    return vals[i - 1] + (vals[i] - vals[i - 1]) * (x - x0) / (x1 - x0)


@dataclass(frozen=True, slots=True)
class _Stage:
    lin: tuple[float, ...]  # gemm + allreduce + elem x tokens, over the grid
    gemm: tuple[float, ...]
    allreduce: tuple[float, ...] | None
    elem: float  # the elementwise kernels' seconds per new token
    head: tuple[float, ...] | None
    a0: float
    a_seq: float
    a_new: float
    a_kv: float
    a_key: float
    sol_per_token: float
    sol_per_key: float
    sol_weight: float
    sol_per_kv: float
    host_s: float
    fixed_s: float
    per_seq_s: float
    overlap: bool
    sol_routed: float = 0.0  # MoE: every local routed expert's bytes over the bandwidth
    miss: float = 1.0  # MoE: 1 - k/E
    decode: tuple[tuple[float, ...], ...] | None = None  # layers x the decode kernel table
    # passes of at most ``beside`` tokens (0: none) price ``lin_beside`` / ``gemm_beside``:
    # the shared experts beside the routed ones (FrameworkSpec.shared_expert_stream_tokens)
    beside: float = 0.0
    lin_beside: tuple[float, ...] | None = None
    gemm_beside: tuple[float, ...] | None = None


class MeasuredTiming:
    """Measured kernel tables for one deployment; raises ``aic.TablesUnavailable``."""

    name = "measured"

    def __init__(self, dep, counts, tp_link, pp_link, host_link, offload_fraction: float,
                 framework):
        gpu, shape, tp = dep.gpu, dep.model.shape, dep.tp
        system, backend = gpu.tables, framework.tables
        if system is None:
            raise aic.TablesUnavailable(f"gpu {gpu.id} has no measured kernel tables")
        if backend is None:
            raise aic.TablesUnavailable(f"framework {framework.name} has no kernel tables")
        if shape.layer_kinds:
            raise aic.TablesUnavailable(
                f"{dep.model.id} has {shape.n_window_layers} window and "
                f"{shape.n_linear_layers} linear-attention layers, and the tables' attention "
                f"rows attend to the whole context (docs/timing.md)")
        if dep.model.config.model_type not in _MEASURED_TYPES:
            raise aic.TablesUnavailable(f"the {dep.model.config.model_type} family's blocks "
                                        f"are not priced from the tables")
        if tp > gpu.gpus_per_node:
            raise aic.TablesUnavailable(f"tp {tp} spans servers; the tables cover one "
                                        f"server of {gpu.gpus_per_node} GPUs")
        if gpu.tables_max_tp is not None and tp > gpu.tables_max_tp:
            raise aic.TablesUnavailable(f"tp {tp}: the {system} tables measure all-reduces "
                                        f"over at most {gpu.tables_max_tp} GPUs")
        fmt = weight_format(dep.weight_bits, dep.dtype)
        version = aic.framework_version(system, backend)
        moe_beside = None
        quant = gemm_quant(dep.fp8_scaling, fmt, dep.fp4)
        modes = scoped_modes(dep, quant)
        if shape.n_experts:
            dense, moe, moe_beside, used, experts = moe_tables(dep, system, backend, quant,
                                                               modes, framework)
        else:
            dense, used = parts_table(system, backend, block_gemms(dep), 2, modes)
            moe, experts = None, ""
        ar = aic.allreduce_table(system, backend, shape.hidden, tp) if tp > 1 else None
        proj = dep.model.config.word_embed_proj_dim or shape.hidden
        head = aic.head_table(system, backend, math.ceil(dep.model.config.vocab_size / tp),
                              proj)
        lm_heads = dep.model.config.num_heads or 1  # Medusa: one lm_head per head
        if lm_heads > 1:
            head = tuple(lm_heads * x for x in head)
        decode, mla = None, None
        if not shape.n_heads:  # Medusa heads: no attention
            att, att_median, att_worst = (0.0,) * 5, 0.0, 0.0
        elif dep.model.config.mla:
            mla = MLA_QUANT.get(modes[0])
            if mla is None:
                raise aic.TablesUnavailable(f"the MLA module tables have no {modes[0]} GEMMs")
            *att, att_median, att_worst = aic.mla_fit(
                system, backend, shape.n_heads // tp, dep.kv_bits, mla)
        else:
            *flat, p_new, p_key, att_median, att_worst = aic.attention_model(
                system, backend, shape.n_heads // tp, dep.kv_heads_per_gpu, shape.d_head,
                dep.kv_bits)
            w = len(aic.DECODE_LENGTHS)
            decode = tuple(tuple(flat[i:i + w]) for i in range(0, len(flat), w))
            # p_new·(new - n) + p_key·(keys - kv) in the linear terms' slots
            att = (0.0, -p_new, p_new, -p_key, p_key)
        rp = roofline_params(gpu)
        peak, bw = gpu.peak(dep.dtype), gpu.hbm_bytes_per_s
        step_s = framework_step_s(framework, dep)
        stages = []
        for i, c in enumerate(counts):
            L = c.layers
            a = tuple(2 * L * x for x in ar) if ar is not None else None
            elem = elementwise_s_per_token(framework, dep, c)
            comm = a if a is not None else (0.0,) * len(_GRID)

            def stage_tables(moe_block, L=L, c=c, comm=comm, elem=elem):
                """(the stage's GEMMs, what runs at every new token: GEMMs, all-reduces,
                the elementwise kernels) over the grid, its MoE blocks ``moe_block``."""
                if moe_block is None:
                    g = tuple(L * x for x in dense)
                else:  # dense blocks, then MoE blocks (GEMMs + router + routed experts)
                    g = tuple((L - c.moe_layers) * x + c.moe_layers * y
                              for x, y in zip(dense, moe_block, strict=True))
                return g, tuple(x + y + elem * m for x, y, m in zip(g, comm, _GRID,
                                                                    strict=True))

            g, lin = stage_tables(moe)
            g_beside, lin_beside = (None, None) if moe_beside is None else \
                stage_tables(moe_beside)
            offloaded = offload_fraction * (c.weight_bytes + c.routed_bytes)
            stages.append(_Stage(
                lin=lin, gemm=g, allreduce=a, elem=elem, head=head if c.head_params else None,
                a0=L * att[0], a_seq=L * att[1], a_new=L * att[2], a_kv=L * att[3],
                a_key=L * att[4],
                sol_per_token=c.flop_per_token / peak, sol_per_key=c.flop_per_key / peak,
                sol_weight=c.weight_bytes / bw, sol_per_kv=c.kv_bytes_per_token / bw,
                host_s=(offloaded / host_bytes_per_s(host_link, rp, dep, framework)
                        + L * host_link.latency_s) if offloaded > 0 else 0.0,
                fixed_s=step_s + framework.layer_s * L,
                per_seq_s=framework_seq_s(framework, dep, i == len(counts) - 1),
                overlap=framework.offload_overlap,
                sol_routed=c.routed_bytes / bw, miss=c.expert_miss,
                decode=None if decode is None else tuple(tuple(L * x for x in row)
                                                         for row in decode),
                beside=float(framework.shared_expert_stream_tokens) if g_beside else 0.0,
                lin_beside=lin_beside, gemm_beside=g_beside,
            ))
        self._stages = tuple(stages)
        self._params = tuple(_stage_params(st) for st in stages)  # what the pass reads
        self._single = self._params[0] if len(stages) == 1 else None
        self._fixed: dict[tuple[float, float], tuple] = {}  # _fixed_single's memo
        pc = collective_params(pp_link)
        self._hop_fixed_s = pc.call_s + pc.step_s
        self._hop_per_token_s = shape.hidden * ACT_BYTES / (pp_link.bytes_per_s * pc.eta)
        kinds = f"{used} GEMMs" + (f"; {experts}" if moe else "") \
            + (f"; MLA module tables, {mla} GEMMs" if dep.model.config.mla else "")
        if decode is not None:
            fit = (f"; decode attention tabulated, prefill fit median {att_median:.0%}, "
                   f"worst {att_worst:.0%}")
        elif shape.n_heads:
            fit = f"; attention fit median {att_median:.0%}, worst {att_worst:.0%}"
        else:
            fit = "; no attention"
        self.note = (f"measured: aiconfigurator-core {aic.PINNED} tables {system} / "
                     f"{backend} {version} ({kinds}{fit}); framework {framework.name} "
                     f"{framework.version} overheads")

    @staticmethod
    def _stage_seconds(sp: tuple, new: float, kv: float, keys: float, n: float) -> float:
        """One stage's seconds (``sp``: its ``_stage_params``): the pass functions above,
        in the order the compiled kernels call them (``sim.kernels.base.pass_seconds``)."""
        p, grid, lin, head, _, dec, batches, lengths = sp
        b, w = pass_decode_weight(n, dec, batches)
        busy = pass_fixed(new, n, p, grid, lin) + p[3] * kv + p[4] * keys
        busy += pass_table(new if new < p[15] * n else p[15] * n, grid, head)
        busy += pass_decode(kv, n, b, w, dec, lengths)
        return pass_total(busy, n, p)

    def _fixed_single(self, new: float, n: float) -> tuple:
        """The one stage's parts fixed by (new, n), memoised: the engine prices the same
        batch shape again and again, its contexts growing (a bounded cache): (the fixed
        busy time, the lm_head's, the decode table's rows and weight, the all-reduce's)."""
        key = (new, n)
        fixed = self._fixed.get(key)
        if fixed is None:
            if len(self._fixed) >= _FIXED_CACHE:
                self._fixed.clear()
            p, grid, lin, head, allreduce, dec, batches, _ = self._single
            cap = p[15] * n
            fixed = self._fixed[key] = (
                pass_fixed(new, n, p, grid, lin), pass_table(new if new < cap else cap, grid,
                                                             head),
                *pass_decode_weight(n, dec, batches), pass_table(new, grid, allreduce))
        return fixed

    def _single_seconds(self, fixed: tuple, kv: float, keys: float, n: float) -> float:
        """``_stage_seconds`` of the one stage from its ``_fixed_single`` parts (the hot
        path)."""
        p, _, _, _, _, dec, _, lengths = self._single
        busy = fixed[0] + p[3] * kv + p[4] * keys
        busy += fixed[1]
        busy += pass_decode(kv, n, fixed[2], fixed[3], dec, lengths)
        return pass_total(busy, n, p)

    def seconds(self, new: float, kv: float, keys: float, n: float) -> float:
        """Seconds of one pass."""
        if self._single is not None:
            return self._single_seconds(self._fixed_single(new, n), kv, keys, n)
        return self.breakdown(new, kv, keys, n).seconds

    def seconds_bound(self, new: float, kv: float, keys: float, n: float) -> tuple[float, str]:
        """(seconds, the bound: speed-of-light compute vs memory, or comm or host)."""
        if self._single is None:
            b = self.breakdown(new, kv, keys, n)
            return b.seconds, b.bound
        # one stage: breakdown's figures without its parts
        fixed = self._fixed_single(new, n)
        p = self._single[0]
        compute, memory = pass_light(new, kv, keys, p)
        return self._single_seconds(fixed, kv, keys, n), largest(compute, memory, fixed[4],
                                                                 p[9])

    def kernel_params(self) -> tuple[np.ndarray, ...] | None:
        """The one stage's ``_stage_params`` as arrays, for a compiled pricer
        (``sim.steady_kernel``; the decode table [batches, lengths], no rows without one).
        None for a pipeline."""
        return None if self._single is None else _kernel_arrays(self._single)

    def kernel_stages(self) -> tuple:
        """Each pipeline stage's ``kernel_params`` (a tuple, one per stage), and the hop's
        fixed and per-token seconds: what the compiled walk prices a pipeline's stages with
        (``sim.kernels.base.stages_seconds``)."""
        return (tuple(_kernel_arrays(sp) for sp in self._params), self._hop_fixed_s,
                self._hop_per_token_s)

    def stage_seconds(self, new: float, kv: float, keys: float, n: float) -> tuple[float, ...]:
        """Each pipeline stage's seconds."""
        return tuple(self._stage_seconds(sp, new, kv, keys, n) for sp in self._params)

    def hop_seconds(self, new: float) -> float:
        """Seconds for one batch's activations to hop between two pipeline stages."""
        return self._hop_fixed_s + self._hop_per_token_s * new

    def breakdown(self, new: float, kv: float, keys: float, n: float) -> Breakdown:
        """The pass with its measured parts."""
        parts = dict.fromkeys(("gemm_s", "attention_s", "allreduce_s", "elementwise_s",
                               "host_s", "overhead_s"), 0.0)
        compute = memory = comm = host = 0.0
        stage_s = []
        cap = HEAD_TOKENS_PER_SEQ * n
        for st, sp in zip(self._stages, self._params, strict=True):
            gemm = _interp(st.gemm_beside if st.beside and new <= st.beside else st.gemm, new)
            if st.head is not None:
                gemm += _interp(st.head, new if new < cap else cap)
            ar = _interp(st.allreduce, new) if st.allreduce is not None else 0.0
            parts["gemm_s"] += gemm
            parts["allreduce_s"] += ar
            parts["elementwise_s"] += st.elem * new
            parts["attention_s"] += st.a0 + st.a_seq * n + st.a_new * new + st.a_kv * kv \
                + st.a_key * keys
            if st.decode is not None and n > 0:
                parts["attention_s"] += aic.decode_at(aic.decode_row(st.decode, n), kv / n)
            parts["host_s"] += st.host_s
            parts["overhead_s"] += st.fixed_s + st.per_seq_s * n
            sol_compute, sol_memory = pass_light(new, kv, keys, sp[0])
            compute += sol_compute
            memory += sol_memory
            comm += ar
            host += st.host_s
            stage_s.append(self._stage_seconds(sp, new, kv, keys, n))
        hops = len(stage_s) - 1
        hop_s = self.hop_seconds(new) if hops else 0.0
        comm += hops * hop_s
        if hops:
            parts["hops_s"] = hops * hop_s
        return Breakdown(sum(stage_s) + hops * hop_s, compute, memory, comm, host,
                         parts["overhead_s"], largest(compute, memory, comm, host),
                         tuple(stage_s), hop_s, parts)



def _kernel_arrays(sp: tuple) -> tuple[np.ndarray, ...]:
    """A stage's ``_stage_params`` as the compiled pricer takes them (arrays; the decode
    table [batches, lengths], no rows without one)."""
    p, grid, lin, head, allreduce, dec, batches, lengths = sp
    return (np.array(p), np.array(grid), np.array(lin), np.array(head, dtype=np.float64),
            np.array(allreduce, dtype=np.float64),
            np.array(dec) if dec else np.zeros((0, len(lengths))),
            np.array(batches, dtype=np.float64), np.array(lengths))


# -- one stage's pass, the formula stated once ----------------------------------------------
# A stage's parameters as the pass functions below read them (``_stage_params``; the compiled
# kernels take the same as arrays, ``MeasuredTiming.kernel_params``): p, the scalars in
# ``sim.kernels.base.PARAM_NAMES`` order; the token grid; the per-token table (GEMMs,
# all-reduces, elementwise kernels; with ``beside`` > 0 followed by its version for passes of
# at most ``beside`` tokens); the lm_head's and the all-reduce's tables (empty without one);
# the decode kernel's table [batches][lengths] (empty without one), its batches and lengths.
# Each function is plain arithmetic, compiled as it is for the kernels
# (``sim.steady_kernel``); its searches are written out, as numba compiles them.


def pass_fixed(new, n, p, grid, lin):
    """The part of a stage's busy time fixed by a pass's ``new`` tokens and ``n``
    sequences: the per-token table at ``new`` (through 0 below the grid, along its last
    segment beyond it) and attention's terms in n and new."""
    o = len(grid) if p[17] > 0.0 and new <= p[17] else 0  # lin's second half: ``beside``
    lo, hi = 0, len(grid)
    while lo < hi:
        mid = (lo + hi) // 2
        if grid[mid] < new:
            lo = mid + 1
        else:
            hi = mid
    i = lo
    if i == 0:
        busy = lin[o] * new / grid[0]
    else:
        if i == len(grid):
            i -= 1
        busy = lin[o + i - 1] + (lin[o + i] - lin[o + i - 1]) * (new - grid[i - 1]) \
            / (grid[i] - grid[i - 1])
    return busy + p[0] + p[1] * n + p[2] * new


def pass_table(x, grid, vals):
    """A table over the token grid (the lm_head's, the all-reduce's) at ``x`` tokens: 0
    without one, through 0 below the grid, along its last segment beyond it."""
    if len(vals) == 0:
        return 0.0
    if x <= grid[0]:
        return vals[0] * x / grid[0]
    lo, hi = 0, len(grid)
    while lo < hi:
        mid = (lo + hi) // 2
        if grid[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    i = lo if lo < len(grid) else len(grid) - 1
    return vals[i - 1] + (vals[i] - vals[i - 1]) * (x - grid[i - 1]) / (grid[i] - grid[i - 1])


def pass_decode_weight(n, dec, batches):
    """(row, weight) of the decode table ``dec`` at ``n`` sequences: rows ``row`` - 1 and
    ``row`` weighted ``weight`` (linear between the tabulated batches, along the last two
    beyond them), or (0, -1.0): the first row, at or below the first batch, or no table."""
    if len(dec) == 0 or n <= batches[0]:
        return 0, -1.0
    lo, hi = 0, len(batches)
    while lo < hi:
        mid = (lo + hi) // 2
        if batches[mid] < n:
            lo = mid + 1
        else:
            hi = mid
    b = lo if lo < len(batches) else len(batches) - 1
    return b, (n - batches[b - 1]) / (batches[b] - batches[b - 1])


def pass_decode(kv, n, b, w, dec, lengths):
    """The decode attention kernel's seconds for ``n`` sequences holding ``kv`` tokens, at
    their mean length (the first length's time below it, along the last two beyond), on
    the table's rows ``pass_decode_weight`` chose; 0 without a table or sequences."""
    if len(dec) == 0 or n <= 0:
        return 0.0
    length = kv / n
    lo, hi = 0, len(lengths)
    while lo < hi:
        mid = (lo + hi) // 2
        if lengths[mid] < length:
            lo = mid + 1
        else:
            hi = mid
    j = lo
    if j == 0:
        if w < 0.0:
            return dec[0][0]
        return dec[b - 1][0] + (dec[b][0] - dec[b - 1][0]) * w
    if j > len(lengths) - 1:
        j = len(lengths) - 1
    if w < 0.0:
        r0, r1 = dec[0][j - 1], dec[0][j]
    else:
        r0 = dec[b - 1][j - 1] + (dec[b][j - 1] - dec[b - 1][j - 1]) * w
        r1 = dec[b - 1][j] + (dec[b][j] - dec[b - 1][j]) * w
    return r0 + (r1 - r0) / (lengths[j] - lengths[j - 1]) * (length - lengths[j - 1])


def pass_total(busy, n, p):
    """A stage's seconds from its ``busy`` kernels' time: the host link's (overlapped with
    them or not) and the framework's overheads."""
    host = p[9]
    if p[12] != 0.0:
        t = busy if busy > host else host
    else:
        t = busy + host
    return t + p[10] + p[11] * n


def pass_light(new, kv, keys, p):
    """(compute, memory) seconds of a stage's pass at the datasheet peaks: they name the
    bound, the measured terms give the time."""
    return (p[5] * new + p[6] * keys,
            p[7] + p[8] * kv + p[13] * (1.0 - p[14] ** new) + p[16] * new)



def _stage_params(st: _Stage) -> tuple:
    """A stage's parameters as the pass functions read them (see above), as tuples."""
    p = (st.a0, st.a_seq, st.a_new, st.a_kv, st.a_key, st.sol_per_token, st.sol_per_key,
         st.sol_weight, st.sol_per_kv, st.host_s, st.fixed_s, st.per_seq_s, float(st.overlap),
         st.sol_routed, st.miss, float(HEAD_TOKENS_PER_SEQ), st.elem, st.beside)
    lin = st.lin if st.lin_beside is None else st.lin + st.lin_beside  # two halves
    return (tuple(float(x) for x in p), _GRID, tuple(lin), st.head or (),
            st.allreduce or (), st.decode or (), tuple(float(b) for b in aic.DECODE_BATCHES),
            _LENGTHS)

# the routed experts' kernel for a GEMM mode (int8/int4 weight-only: no such MoE rows); the
# MoE tables do not split per-tensor FP8 into static and dynamic activation scales
