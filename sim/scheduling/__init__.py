"""Continuous batching: which sequences run in the next iteration, with how many tokens.

Three orders, chosen by ``scheduler.order``:

- ``vllm_v1`` (default, ``sim.scheduling.vllm_v1``): vLLM v1's scheduler -- one token
  budget walked in ``running`` order, draft tokens cut to fit, lookahead KV slots, no
  admissions in an iteration that preempted;
- ``decode_first`` (``sim.scheduling.decode_first``): vLLM v0's chunked-prefill policy --
  decoders first (a decoder whose verify does not fit is left out whole), then prefill
  chunks, then admissions;
- ``prefill_first`` (``sim.scheduling.prefill_first``): SGLang's -- a prefill batch (prompts
  under way, then admissions, within the chunk budget) whenever one can be formed, else
  every running request decodes; prompts never share a pass with decodes.

All preempt by recompute from the back of the running order, so the front request always
progresses (``sim.scheduling.common.preempt_until_fits``).
"""

from __future__ import annotations

from sim.scheduling.common import Batch, SchedulerLimits
from sim.scheduling.decode_first import plan_decode_first
from sim.scheduling.prefill_first import plan_prefill_first
from sim.scheduling.vllm_v1 import plan_vllm_v1

ORDERS = {"vllm_v1": plan_vllm_v1, "decode_first": plan_decode_first,
          "prefill_first": plan_prefill_first}

__all__ = ["ORDERS", "Batch", "SchedulerLimits", "plan_decode_first", "plan_prefill_first",
           "plan_vllm_v1"]
