"""Disaggregated prefill and decode (``disaggregation``): the two pools of a P/D deployment.

Without this section every replica prefills and decodes its own requests. With it, a
request's prompt runs on a prefill replica, its KV crosses a link to a decode replica, and
the decode replica writes its output (``sim.disagg`` says how, and where SpecSim departs
from the engines). Each pool is the scenario's ``deployment`` and ``scheduler`` with the
fields it names changed, so a pool says only how it differs: ``prefill: {replicas: 1}``,
``decode: {replicas: 2, max_num_seqs: 512}``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sim.kinds.base import MAX_REPLICAS, MAX_SEQS, Gpus, PosInt, RecvInterval, Strict, Tokens

# the pool fields that are the deployment's, and those that are the scheduler's
DEPLOYMENT_FIELDS = ("gpu", "tp", "ep", "weight_bits", "kv_bits", "compute_dtype",
                     "gpu_memory_utilization", "framework")
SCHEDULER_FIELDS = ("max_num_seqs", "max_batched_tokens", "chunk_tokens",
                    "num_gpu_blocks_override", "recv_interval")


class Pool(Strict):
    """One pool: how many replicas, and what differs from the scenario's ``deployment``
    and ``scheduler`` (null: the scenario's)."""

    replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS)] = 1
    gpu: str | None = None
    tp: Gpus | None = None
    ep: Gpus | None = None
    weight_bits: Literal[4, 8, 16] | None = None
    kv_bits: Literal[8, 16] | None = None
    compute_dtype: Literal["bf16", "fp8", "fp4"] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    framework: str | None = None
    max_num_seqs: Annotated[int, Field(ge=1, le=MAX_SEQS)] | None = None
    max_batched_tokens: Tokens | None = None
    chunk_tokens: Tokens | None = None
    num_gpu_blocks_override: PosInt | None = None
    # SGLang's --scheduler-recv-interval on this pool's servers (scheduler.recv_interval)
    recv_interval: RecvInterval | None = None

    def deployment_changes(self) -> dict:
        """The deployment fields this pool sets."""
        return {k: getattr(self, k) for k in DEPLOYMENT_FIELDS if getattr(self, k) is not None}

    def scheduler_changes(self) -> dict:
        """The scheduler fields this pool sets."""
        return {k: getattr(self, k) for k in SCHEDULER_FIELDS if getattr(self, k) is not None}


class Disaggregation(Strict):
    """xPyD: ``prefill`` and ``decode`` pools, the link the KV crosses, and what speculation
    does across it.

    ``link``: a links.yaml id each GPU's share of the KV crosses (null: the GPUs'
    ``node_link``, one NIC per GPU, e.g. InfiniBand NDR on an H100 server; ``nvlink5`` for
    pools in one GB200 NVL72 domain). ``draft_kv``: ``transfer`` sends the drafter's KV of
    the prompt with the target's (vLLM's NixlConnector with an EAGLE-3 head,
    vllm-project/vllm PRs #34529 and #35158; SGLang sends the EAGLE/MTP state with the KV);
    ``recompute`` leaves it behind and the decode replica runs the prompt through the
    drafter before its first draft (vLLM with Gemma-4's MTP drafter, whose KV group NIXL
    skips: vllm-project/vllm issue #54926). ``decode_router``: how a request picks its
    decode replica (the arrivals' router is ``deployment.router``, over the prefill pool).
    ``flow``: whose hand-off the pools follow: ``vllm`` (NixlConnector: the decode side
    picks and loads a request once it is prefilled, and recomputes its last prompt token,
    ``sim.disagg``) or ``sglang`` (the decode side allocates first, the KV leaves chunk by
    chunk as the prefill runs, the first token rides along, ``sim.pd_sglang``); null:
    ``sglang`` where the scheduler runs SGLang's order (``scheduler.order:
    prefill_first``, what ``--from-sglang`` sets), else ``vllm``.
    """

    prefill: Pool = Pool()
    decode: Pool = Pool()
    link: str | None = None
    draft_kv: Literal["transfer", "recompute"] = "transfer"
    decode_router: Literal["round_robin", "least_requests", "least_tokens"] = \
        "least_requests"
    flow: Literal["vllm", "sglang"] | None = None
