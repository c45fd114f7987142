"""What a measurement row predicts: one pass, or a serving metric built from passes.

``predict(row, cost)`` turns the cost model of the row's deployment into the row's metric
(:data:`hardware.timing.rows.METRICS`), so a measured TPOT or throughput can be compared
with (and fitted to) pass times:

- ``step_s``: one pass of ``batch`` sequences x ``tokens`` new tokens over ``context``.
- ``ttft_s``: the prefill pass of ``batch`` prompts of ``context`` tokens.
- ``tpot_s``: steady-state continuous batching at ``batch`` concurrent requests (a
  benchmark client's concurrency) with prompts of ``context`` and ``output_tokens``
  generated tokens. Every step decodes ``batch`` sequences at the mean context ``context +
  output_tokens / 2``; over ``output_tokens`` steps the other ``batch - 1`` requests'
  prompts are prefilled, as the framework's scheduler takes them in
  (``FrameworkSpec.max_num_batched_tokens``, ``chunked_prefill``, ``mixed_prefill``):
  packed into as few steps as its token budget allows (whole prompts only without chunked
  prefill), either inside the decode step (vLLM, TensorRT-LLM) or as prefill passes of
  their own that the decodes wait for (SGLang). Packing is what a closed-loop client with
  fixed prompt and output lengths keeps up: requests admitted together finish together and
  are replaced together. A request's own prefill is not in its TPOT. Requests beyond what
  the KV cache holds at full length wait for a slot (their wait is TTFT), so the running
  batch is at most capacity / (context + output_tokens).
- ``tokens_per_s_per_gpu``: a static batch (TensorRT-LLM's gptSessionBenchmark, FlexGen,
  ZeRO-Inference): one prefill pass of ``batch`` x ``context`` tokens, then
  ``output_tokens - 1`` decode passes of the whole batch as its context grows; generated
  tokens over the total time, per GPU. The decode passes are averaged over nine contexts
  spread over the generation (pass time is near-linear in context).

What is not modelled: queueing (the requests' arrival pattern), preemption, the client's
own latency, sampling-parameter costs, and prefix caching.
"""

from __future__ import annotations

import math

from hardware.catalog import Catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.timing.rows import MeasuredRow

__all__ = ["row_cost", "predict"]

_DECODE_POINTS = 9


def row_cost(row: MeasuredRow, catalog: Catalog, timing: str = "auto") -> CostModel:
    """The cost model of the row's deployment (``offload: auto`` leaves KV room for the
    whole batch; otherwise the memory a row's batch needs is not checked, see ``tpot_s``)."""
    total = row.context + max(row.output_tokens, row.tokens)
    dep = Deployment(
        model=catalog.model(row.model), gpu=catalog.gpu(row.gpu), tp=row.tp, pp=row.pp,
        weight_bits=row.weight_bits, kv_bits=row.kv_bits, compute_dtype=row.compute_dtype,
        offload_fraction=row.offload, offload_pin_memory=row.pin_memory,
        kv_tokens=row.batch * total if row.offload == "auto" else 0, timing=timing,
        framework=row.framework)
    return CostModel(dep, catalog)


def _decode(cost: CostModel, b: float, ctx: float) -> float:
    return cost.pass_seconds_sums(b, b * ctx, b * ctx, b, n_seqs=b)


def _tpot(cost: CostModel, b: float, ctx: float, out: float) -> float:
    """Mean seconds per generated token of ``b`` requests decoding at once (``tpot_s``)."""
    fw = cost.framework
    mean = ctx + out / 2
    # an engine runs only the sequences its KV cache holds; the rest wait (in TTFT)
    b = max(min(b, cost.kv_capacity_tokens() / (ctx + out)), 1.0)

    def step(x: float) -> float:  # b decodes + x prompt tokens (x / ctx prompts) in one pass
        prompts = x / ctx if x > 0 else 0.0
        return cost.pass_seconds_sums(b + x, b * mean, b * mean, b + x * ctx,
                                      n_seqs=b + prompts)

    def alone(x: float) -> float:  # x prompt tokens in a pass of their own
        return cost.pass_seconds_sums(x, 0.0, 0.0, x * ctx, n_seqs=x / ctx)

    prefill = (b - 1) * ctx  # the other requests' prompt tokens per ``out`` steps
    if prefill <= 0:
        return step(0.0)
    room = float(fw.max_num_batched_tokens) - (b if fw.mixed_prefill else 0.0)
    if not fw.chunked_prefill and ctx <= room:  # whole prompts only (one longer than the
        room = ctx * math.floor(room / ctx)  # budget has to be split: priced as chunks)
    room = max(room, 1.0)
    steps = prefill / room  # steps that carry prompt tokens
    full = math.floor(steps)
    rest = prefill - full * room
    if not fw.mixed_prefill:
        return step(0.0) + ((full * alone(room) if full else 0.0)
                            + (alone(rest) if rest > 0 else 0.0)) / out
    if steps >= out:  # more prompt tokens than the steps hold: every step is full (the
        return step(room)  # scheduler cannot keep up; queued requests wait in TTFT)
    busy = (full * step(room) if full else 0.0) + (step(rest) if rest > 0 else 0.0)
    idle = out - full - (1 if rest > 0 else 0)
    return (busy + idle * step(0.0)) / out


def predict(row: MeasuredRow, cost: CostModel) -> float:
    """The row's metric as ``cost`` prices it (seconds, or tokens/s per GPU)."""
    b, ctx, out = float(row.batch), float(row.context), float(row.output_tokens)
    if row.metric == "step_s":
        return cost.uniform_pass_seconds(row.batch, row.tokens, row.context)
    if row.metric == "ttft_s":
        return cost.uniform_pass_seconds(row.batch, row.context, 0)
    if row.metric == "tpot_s":
        return _tpot(cost, b, ctx, out)
    # tokens_per_s_per_gpu: one static batch, prefill then out - 1 decode passes
    prefill = cost.uniform_pass_seconds(row.batch, row.context, 0)
    steps = out - 1
    decode = sum(_decode(cost, b, ctx + 1 + steps * (i + 0.5) / _DECODE_POINTS)
                 for i in range(_DECODE_POINTS)) / _DECODE_POINTS * steps
    return b * out / (prefill + decode) / (row.tp * row.pp)
