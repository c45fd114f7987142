"""What a measurement row predicts: one pass, or a serving metric built from passes.

``predict(row, cost)`` turns the cost model of the row's deployment into the row's metric
(:data:`hardware.timing.rows.METRICS`), so a measured TPOT or throughput can be compared
with (and fitted to) pass times:

- ``step_s``: one pass of ``batch`` sequences x ``tokens`` new tokens over ``context``.
- ``ttft_s``: the prefill pass of ``batch`` prompts of ``context`` tokens.
- ``tpot_s``: steady-state continuous batching at ``batch`` concurrent requests (a
  benchmark client's concurrency) with prompts of ``context`` and ``output_tokens``
  generated tokens. Every step decodes ``batch`` sequences at the mean context ``context +
  output_tokens / 2``. The prompts are taken in as the framework's scheduler does
  (``FrameworkSpec.max_num_batched_tokens``, ``chunked_prefill``, ``mixed_prefill``),
  packed into as few passes as its token budget allows (whole prompts only without
  chunked prefill); a request's own prefill is not in its TPOT.

  Where prompts share the step with the decodes (vLLM v1, TensorRT-LLM), the decodes go
  first and prompts fill what the budget leaves, and the steady state priced is the spread
  one: over ``output_tokens`` steps the other ``batch - 1`` requests' prompts ride in the
  decode steps. (A perfectly regular closed loop would keep the requests admitted in one
  step in step -- the engine's does -- and then a request would not wait for its own
  step's prompts; the measured rows fit the spread state better, docs/timing.md.)

  Where a ready prefill batch runs instead of the decode batch (SGLang, ``mixed_prefill``
  false: ``Scheduler.get_next_batch_to_run``, see frameworks.yaml), a
  closed-loop client with fixed lengths keeps its requests in step: the cohort's prompts
  all run, as passes of their own, before any of them decodes; the cohort then decodes
  together, finishes together and is replaced together, its next prompts landing in TTFT.
  A request's TPOT holds its decode steps and the prefill passes after its own (a request
  in the first pass waits for all the others; the mean over the cohort is priced), over
  ``output_tokens - 1`` tokens (its first comes from its prefill). Requests beyond what
  the KV cache holds at full length wait for a slot (their wait is TTFT), so the running
  batch is at most capacity / (context + output_tokens).
- ``tokens_per_s_per_gpu``: a static batch (TensorRT-LLM's gptSessionBenchmark, FlexGen,
  ZeRO-Inference): one prefill pass of ``batch`` x ``context`` tokens, then
  ``output_tokens - 1`` decode passes of the whole batch as its context grows; generated
  tokens over the total time, per GPU. The decode passes are averaged over nine contexts
  spread over the generation (pass time is near-linear in context).
- ``max_load_tokens_per_s``: an offline max-load run (``trtllm-bench throughput``): all
  ``requests`` queued at once, every prompt ``context`` tokens and every output
  ``output_tokens``; total output tokens/s over all GPUs, stepped through the run's
  schedule. The engine runs at most ``batch`` requests (its max batch size) and as many
  whole requests as its KV cache holds with each one's prompt + output reserved, as
  TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler does (``kv_fraction``: the cache is
  that share of the memory the weights and the engine's own memory leave,
  ``FrameworkSpec.memory``, as TensorRT-LLM sizes it after a profiling pass; KV blocks are
  not modelled). Each step admits
  waiting prompts beside its decodes while the step's tokens stay within
  ``max_num_tokens`` (whole prompts, or a fluid of prompt tokens where the framework
  chunks them); a request admitted at step s decodes at steps s + 1 .. s +
  ``output_tokens`` - 1 and frees its slot after, and a stretch where nothing can be
  admitted until the oldest ones finish is priced once, at its middle context; with
  ``cuda_graph_batch_sizes`` (CUDA graphs with padding) such a step of decodes only runs
  at the next captured batch size up, the engine adding dummy requests (the sizes above
  its largest decode batch, min(``batch``, ``max_num_tokens``), dropped and that batch
  added: TensorRT-LLM's ``tensorrt_llm/_torch/pyexecutor/model_engine.py`` @001e6700,
  ``_filter_cuda_graph_batch_sizes``; ``cuda_graph_runner.py`` @7b437aaa,
  ``_round_up_batch_size`` and ``_get_padded_batch``; ``scheduler.py`` @034fffb0,
  ``can_run_cuda_graph``: no context requests), every dummy priced as a sequence of the step
  (its GEMMs, all-reduces and per-sequence cost; its own KV, a token each, is left out);
  steps that admit prompts run without a graph, as the engine's do. Ramp-up and
  drain are in the total. The capacity rule is TensorRT-LLM's: for vLLM, which admits on
  the current length and preempts, it is an approximation. Engines that run prefills alone
  (``mixed_prefill`` false) and pipelines (``pp`` > 1: micro-batches in flight) are
  refused for this metric.

What is not modelled: queueing (the requests' arrival pattern), preemption, the client's
own latency, sampling-parameter costs, prefix caching, CUDA-graph padding outside the
max-load rows that state their graphs, and the engine's own memory where a row states no
``kv_fraction`` (those rows keep the deployment's workspace margin).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque

import numpy as np

from hardware.catalog import Catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.timing.rows import MeasuredRow
from specdec.errors import UserError

__all__ = ["row_cost", "predict", "served_tpot", "decode_pool_tpot"]

_DECODE_POINTS = 9
_MAX_EVENTS = 2_000_000  # a max-load row's schedule: admissions + stretches of decodes
_CRUMB = 1e-9  # requests: less than this left of a chunked admission is float residue


def row_cost(row: MeasuredRow, catalog: Catalog, timing: str = "auto") -> CostModel:
    """The cost model of the row's deployment (``offload: auto`` leaves KV room for the
    whole batch; otherwise the memory a row's batch needs is not checked, see ``tpot_s``)."""
    total = row.context + max(row.output_tokens, row.tokens)
    memory = {} if row.gpu_memory_utilization is None else \
        {"workspace_fraction": 1.0 - row.gpu_memory_utilization}
    dep = Deployment(
        model=catalog.model(row.model), gpu=catalog.gpu(row.gpu), tp=row.tp, pp=row.pp,
        ep=row.ep,
        weight_bits=row.weight_bits, kv_bits=row.kv_bits, compute_dtype=row.compute_dtype,
        fp4_format=row.fp4_format, quantized=row.quantized, moe_kernel=row.moe_kernel,
        offload_fraction=row.offload, offload_pin_memory=row.pin_memory,
        kv_tokens=row.batch * total if row.offload == "auto" else 0, timing=timing,
        framework=catalog.framework_id(row.framework, row.framework_version),
        streaming=row.streaming, **memory)
    return CostModel(dep, catalog)


def _decode(cost: CostModel, b: float, ctx: float) -> float:
    return cost.pass_seconds_sums(b, b * ctx, b * ctx, b, n_seqs=b)


def _kv_tokens(row: MeasuredRow, cost: CostModel) -> float:
    """Tokens the row's KV cache holds: the deployment's rule, or with ``kv_fraction`` the
    engine's, TensorRT-LLM's: that fraction of the memory the weights and the engine's own
    memory leave (``FrameworkSpec.memory``: a profiling pass's activations at the step
    budget, collective buffers, the runtime's). The tightest pipeline stage decides."""
    if row.kv_fraction is None:
        return float(cost.kv_capacity_tokens())
    hbm = cost.dep.gpu.hbm_capacity_bytes
    memory, shape = cost.framework.memory, cost.dep.model.shape
    if memory is not None:
        cfg = cost.dep.model.config
        model_type = cfg.model_type
        if not shape.n_heads or (shape.n_experts and model_type not in memory.moe_models):
            raise UserError(f"kv_fraction: {row.model} under {row.framework}: the engine's "
                            f"memory (frameworks.yaml {row.framework}.memory) sizes dense "
                            f"transformers and the MoE model types "
                            f"{', '.join(memory.moe_models) or 'none'}; not {model_type}")
        moe = (model_type, shape.n_experts, shape.top_k, cost.dep.ep) if shape.n_experts \
            else None
        # activations as wide as the attention's heads by the config's head dim
        # (aiconfigurator's h: head_dim, else hidden / heads; DeepSeek's MLA: the hidden size)
        hbm -= memory.bytes_per_gpu(row.tp, cfg.num_attention_heads * cfg.d_head,
                                    _budget(row, cost), moe)
    return max(min(row.kv_fraction * (hbm - w) / per_token for w, per_token in
                   zip(cost.resident_weight_bytes(), cost.stage_kv_bytes_per_token,
                       strict=True)), 0.0)


def _budget(row: MeasuredRow, cost: CostModel) -> int:
    return row.max_num_tokens or cost.framework.max_num_batched_tokens


def _tpot(cost: CostModel, b: float, ctx: float, out: float, budget: int,
          kv_tokens: float, spec=None) -> float:
    """Mean seconds per generated token of ``b`` requests decoding at once (``tpot_s``).

    ``spec`` = (tokens each request feeds a step, tokens a step yields per request, the
    seconds ``f(x, b)`` of a step of b requests carrying x prompt tokens) prices
    speculative rounds instead of decode steps (``hardware.timing.spec_rows``): a request
    then takes ``out`` / yield steps, over which the other requests' prompts ride as they
    do in decode steps."""
    fw = cost.framework
    mean = ctx + out / 2
    b = _running(b, kv_tokens, ctx, out)
    per_step, al, spec_step = (1, 1.0, None) if spec is None else spec

    def step(x: float) -> float:  # b decodes + x prompt tokens (x / ctx prompts) in one pass
        if spec_step is not None:  # a speculative round of the b (KV-capped) requests
            return spec_step(x, b)
        prompts = x / ctx if x > 0 else 0.0
        return cost.pass_seconds_sums(b + x, b * mean, b * mean, b + x * ctx,
                                      n_seqs=b + prompts)

    def alone(x: float) -> float:  # x prompt tokens in a pass of their own
        return cost.pass_seconds_sums(x, 0.0, 0.0, x * ctx, n_seqs=x / ctx)

    rounds = out / al  # steps a request takes
    prefill = (b - 1) * ctx  # the other requests' prompt tokens per ``rounds`` steps
    if prefill <= 0:
        return step(0.0) / al
    room = float(budget) - (b * per_step if fw.mixed_prefill else 0.0)
    if not fw.chunked_prefill and ctx <= room:  # whole prompts only (one longer than the
        room = ctx * math.floor(room / ctx)  # budget has to be split: priced as chunks)
    room = max(room, 1.0)
    if not fw.mixed_prefill:
        return step(0.0) / al + _cohort_wait(b, ctx, room, alone) / max(out - 1.0, 1.0)
    steps = prefill / room  # steps that carry prompt tokens
    full = math.floor(steps)
    rest = prefill - full * room
    if steps >= rounds:  # more prompt tokens than the steps hold: every step is full (the
        return step(room) / al  # scheduler cannot keep up; queued requests wait in TTFT)
    busy = (full * step(room) if full else 0.0) + (step(rest) if rest > 0 else 0.0)
    idle = rounds - full - (1 if rest > 0 else 0)
    return (busy + idle * step(0.0)) / out


def _running(b: float, kv_tokens: float, ctx: float, out: float) -> float:
    """The requests an engine runs of ``b``: only those its KV cache holds at full length
    (prompt + output); the rest wait, in TTFT."""
    return max(min(b, kv_tokens / (ctx + out)), 1.0)


def decode_pool_tpot(cost: CostModel, batch: float, context: float, output: float) -> float:
    """Mean seconds per generated token on a decode replica of a disaggregated deployment
    (prefill and decode pools): ``batch`` sequences (at most what its KV cache holds, as
    ``tpot_s``) decode at the mean context ``context + output / 2``, one step a token; the
    replica runs no prompts (the prefill pool does), so the step is ``tpot_s``'s decode
    step without them."""
    b = _running(float(batch), float(cost.kv_capacity_tokens()), float(context),
                 float(output))
    return _decode(cost, b, context + output / 2)


def served_tpot(cost: CostModel, batch: float, context: float, output: float,
                spec=None) -> float:
    """:func:`_tpot` of ``batch`` concurrent requests at the framework's default step
    budget and the deployment's KV capacity (``spec``: speculative rounds, see there)."""
    return _tpot(cost, float(batch), float(context), float(output),
                 cost.framework.max_num_batched_tokens, float(cost.kv_capacity_tokens()),
                 spec)


def _cohort_wait(b: float, ctx: float, room: float, alone) -> float:
    """Mean seconds a request of a prefill-first engine's cohort waits between its first
    token and its first decode step: the cohort's ``b`` prompts of ``ctx`` tokens run as
    passes of ``room`` tokens (``alone(x)`` prices one), in order, before any of them
    decodes, and a request whose prompt ends in pass j waits for the passes after j. A
    fractional ``b`` (the KV cache's cap) is a fluid: its last part-request waits for no
    pass but counts in the mean, so the price is continuous in ``b`` only between the
    multiples of ``room / ctx`` requests."""
    tokens = b * ctx
    full = math.floor(tokens / room + _CRUMB)
    rest = tokens - full * room
    # prompts finished before pass j (j = 1 .. full - 1), every later pass a full one
    done = np.minimum(np.floor(np.arange(1, full) * room / ctx + _CRUMB), b).sum()
    wait = float(done) * alone(room) if full > 1 else 0.0
    if rest > _CRUMB * room and full:  # the last, partial pass
        wait += min(math.floor(full * room / ctx + _CRUMB), b) * alone(rest)
    return wait / b


def _graph_batches(sizes: tuple[int, ...], largest: int) -> tuple[int, ...]:
    """The decode batch sizes an engine runs as padded CUDA graphs, from the ones its run
    asked for: those up to its largest decode batch (``min(max batch size,
    max_num_tokens)``), and that largest batch itself when a size above it was asked for
    (TensorRT-LLM's ``_filter_cuda_graph_batch_sizes``, see the module notes)."""
    kept = tuple(s for s in sizes if s <= largest)
    if len(kept) < len(sizes) and (not kept or kept[-1] < largest):
        kept += (largest,)
    return kept


def _padded(graphs: tuple[int, ...], running: float) -> float:
    """The batch a step of ``running`` decodes runs at: the next captured size up (none
    captured, or more decodes than the largest: as it is)."""
    i = bisect_left(graphs, running - _CRUMB)
    return float(graphs[i]) if i < len(graphs) else running


def _max_load(row: MeasuredRow, cost: CostModel) -> float:
    """Total output tokens/s of an offline max-load run (``max_load_tokens_per_s``),
    stepped through the run's schedule.

    Requests admitted in the same step form a cohort; a step either admits a cohort
    (priced alone) or, when nothing can be admitted until the next cohort finishes, stands
    for that whole stretch of identical decode steps (priced once at its middle context).
    """
    isl, osl, n = row.context, row.output_tokens, row.requests
    budget, fw = _budget(row, cost), cost.framework
    if not fw.mixed_prefill:
        raise UserError(f"metric max_load_tokens_per_s is priced for "
                        f"engines that run prompts inside the decode step; framework "
                        f"{row.framework} does not (mixed_prefill false)")
    if row.pp > 1:
        raise UserError(f"metric max_load_tokens_per_s: pp {row.pp}: a pipeline keeps "
                        f"several micro-batches in flight, which this row model does not "
                        f"price; only pp 1 rows")
    fits = math.floor(_kv_tokens(row, cost) / (isl + osl))  # whole requests, reserved
    if fits < 1 or (budget < isl and not fw.chunked_prefill):
        raise UserError(f"{row.model} on {row.tp} x {row.gpu}: a request "
                        f"of {isl} + {osl} tokens does not fit (the KV cache holds "
                        f"{fits} such requests, the step budget is {budget} tokens)")
    cap = float(min(row.batch, fits))
    graphs = _graph_batches(row.cuda_graph_batch_sizes, min(row.batch, budget))
    pass_s = cost.pass_seconds_sums
    cohorts: deque[tuple[int, float]] = deque()  # (admission step, requests), oldest first
    running = admitted_steps = 0.0  # requests decoding; sum of requests x admission step
    waiting, t, total, events = float(n), 0, 0.0, 0
    while True:
        while cohorts and cohorts[0][0] + osl - 1 < t:  # finished by the previous step
            s, c = cohorts.popleft()
            running -= c
            admitted_steps -= c * s
        if not cohorts:
            if waiting < _CRUMB:
                break
            running = admitted_steps = 0.0  # no float residue between waves
        events += 1
        if events > _MAX_EVENTS:
            raise UserError(f"{n} requests of {isl} + {osl} tokens take "
                            f"more than {_MAX_EVENTS:,} scheduler events to price")
        room = (budget - running) / isl  # prompts the step budget holds beside the decodes
        a = min(waiting, cap - running, room if fw.chunked_prefill else math.floor(room))
        if waiting - a < _CRUMB:  # the last prompts: no float residue left waiting
            a = waiting
        if a > _CRUMB:  # decodes at their own contexts, beside a prompts of isl tokens
            ctx = running * (isl - 1 + t) - admitted_steps
            total += pass_s(running + a * isl, ctx, ctx, running + a * isl * isl,
                            n_seqs=running + a)
            cohorts.append((t, a))
            running += a
            admitted_steps += a * t
            waiting -= a
            t += 1
            continue
        # nothing can be admitted until the oldest cohort has finished: equal decode steps
        steps = cohorts[0][0] + osl - t
        ctx = running * (isl - 1 + t + (steps - 1) / 2) - admitted_steps
        b = _padded(graphs, running)  # decodes only: a CUDA graph's batch, dummies added
        total += steps * pass_s(b, ctx, ctx, b, n_seqs=b)
        t += steps
    return n * osl / total


def predict(row: MeasuredRow, cost: CostModel) -> float:
    """The row's metric as ``cost`` prices it (seconds, or tokens/s per GPU)."""
    b, ctx, out = float(row.batch), float(row.context), float(row.output_tokens)
    if row.metric == "step_s":
        return cost.uniform_pass_seconds(row.batch, row.tokens, row.context)
    if row.metric == "ttft_s":
        return cost.uniform_pass_seconds(row.batch, row.context, 0)
    if row.metric == "tpot_s":
        return _tpot(cost, b, ctx, out, _budget(row, cost), _kv_tokens(row, cost))
    if row.metric == "max_load_tokens_per_s":
        return _max_load(row, cost)
    # tokens_per_s_per_gpu: one static batch, prefill then out - 1 decode passes
    prefill = cost.uniform_pass_seconds(row.batch, row.context, 0)
    steps = out - 1
    decode = sum(_decode(cost, b, ctx + 1 + steps * (i + 0.5) / _DECODE_POINTS)
                 for i in range(_DECODE_POINTS)) / _DECODE_POINTS * steps
    return b * out / (prefill + decode) / (row.tp * row.pp)
