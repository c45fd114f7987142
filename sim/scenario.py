"""The scenario schema: frozen, typed, validated once at load (pydantic).

A scenario file is a small YAML override over these documented defaults. Sections:
``models`` (target/draft pair), ``deployment`` (GPU, parallelism, bits, replicas, router),
``scheduler`` (batching limits), ``workload`` (arrivals and lengths), ``acceptance`` (how
drafts are accepted), ``variants`` (speculation policies run side by side on the same
arrivals), ``run`` (request count or horizon, seed) and ``slo``. Loading, ``--set``
overrides and the one-line error messages live in ``sim.loading``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from hardware.catalog import DRAFT_METHODS
from hardware.deployment import FP4_BITS, MOE_KERNELS, QUANTIZED, TIMINGS
from sim.kinds.acceptance import Acceptance, IidAcc, SingleAcceptance
from sim.kinds.base import (
    MAX_REPLICAS,
    MAX_REQUESTS,
    MAX_SEQS,
    DataFile,
    Gpus,
    Pos,
    PosInt,
    Prob,
    RecvInterval,
    Seconds,
    Strict,
    Tokens,
)
from sim.kinds.disagg import Disaggregation
from sim.kinds.drafters import DrafterCfg
from sim.kinds.policies import FixedPolicy, NonePolicy, Policy
from sim.kinds.workload import PoissonWorkload, Workload
from sim.limits import MAX_NAME
from sim.llm_d import GUIDE_CPU_LRU_CAPACITY
from sim.methods import DEFAULT_DRAFTERS  # each method's own (models.method's drafter)
from sim.scheduling import ORDERS

# a scenario's or variant's name: it names folders (runs/<name>-<time>, the variants'), so
# not dots alone: a variant named '..' wrote its records into the run folder's parent
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.=-]*[A-Za-z0-9_=-][A-Za-z0-9_.=-]*$",
                            max_length=MAX_NAME)]


class Models(Strict):
    """The target, and how it is drafted for unless a variant says otherwise: ``method``
    (vLLM's names) with ``draft`` the drafting catalog model of ``draft_model``."""

    target: str = "llama-3-8b"
    draft: str | None = "llama-3.2-1b"  # draft_model only
    method: Literal[DRAFT_METHODS] = \
        "draft_model"

    @model_validator(mode="before")
    @classmethod
    def _no_default_draft(cls, data):
        # the default draft model belongs to draft_model only: another method has none, so
        # a dumped scenario (its reports re-read it) does not name one it never used
        if isinstance(data, dict) and data.get("method", "draft_model") != "draft_model" \
                and "draft" not in data:
            data = {**data, "draft": None}
        return data

    @model_validator(mode="after")
    def _draft_for_method(self):
        if self.method != "draft_model" and "draft" in self.model_fields_set \
                and self.draft is not None:
            raise ValueError(f"draft: a draft model is only used by method draft_model, not "
                             f"{self.method!r}; leave it out (or null)")
        return self

    def drafter(self):
        """The drafter config ``method`` stands for, with its defaults."""
        return DEFAULT_DRAFTERS[self.method]




class Deployment(Strict):
    """Hardware and parallelism of each replica."""

    gpu: str = "h100"
    tp: Gpus = 1
    pp: Gpus = 1
    # expert parallelism of an MoE target (vLLM's --enable-expert-parallel): 1 = every
    # expert split over tp; tp = whole experts, E/ep per GPU; tp x dp = dp data-parallel
    # attention groups with an all-to-all per MoE layer (the replica then has tp x dp x pp
    # GPUs)
    ep: Gpus = 1
    weight_bits: Literal[4, 8, 16] = 16
    # Real deployments often quantise the target and keep the small draft in 16 bits
    # (lecture §7.3: Llama-3-70B at 8 bits + a 16-bit Llama-3.2-1B draft).
    draft_weight_bits: Literal[4, 8, 16] | None = None  # the draft's; null = weight_bits
    kv_bits: Literal[8, 16] = 16
    # fp8 = FP8 W8A8 (needs weight_bits 8; the draft computes in fp8 only at 8 bits too);
    # fp4 = FP4 W4A4 at the GPU's FP4 peak (Blackwell; needs FP4 weights: weight_bits 4 and
    # an fp4_format, the target's only); null = the GPU's 16-bit dtype (bf16, fp16 on a T4)
    compute_dtype: Literal["bf16", "fp8", "fp4"] | None = None
    # 4-bit weights as FP4 with block scales: nvfp4 (an FP8 scale per 16 values, 4.5 bits a
    # weight) or mxfp4 (an E8M0 scale per 32, 4.25 bits); null = the model's where its
    # checkpoint ships FP4 (gpt-oss: mxfp4), else int4. Without compute_dtype fp4 they run
    # weight-only, dequantised to 16 bits (vLLM's Marlin MXFP4 path on Hopper)
    fp4_format: Literal[tuple(FP4_BITS)] | None = None
    # which of the target's weights weight_bits quantizes: all (every block weight; the
    # embedding and lm_head stay 16-bit), mlp (dense MLPs and experts; attention and router
    # 16-bit, TensorRT-LLM's min-latency DeepSeek-R1 recipe), experts (the routed experts
    # alone, gpt-oss's checkpoint); null = the checkpoint's where it ships FP4, else all
    quantized: Literal[QUANTIZED] | None = None
    # the fused-MoE kernel family the engine runs the routed experts with: trtllm_gen
    # (TensorRT-LLM moe_config.backend TRTLLM, SGLang --moe-runner-backend
    # flashinfer_trtllm), deepgemm, cutlass, triton; null = whatever the framework's measured
    # tables timed. Read by the measured timing only (from another framework's tables
    # where the engine's own do not time the kernel: the timing note says which)
    moe_kernel: Literal[MOE_KERNELS] | None = None
    # how FP8 W8A8 (compute_dtype fp8) scales its values, which picks the measured FP8 GEMM
    # kernel of the target's linear layers (attention, dense MLP, shared experts; the
    # routed experts and DeepSeek's MLA block keep their own FP8 tables): null = the
    # model's (the catalog's fp8_scales: ModelOpt-style per-tensor with static activation
    # scales, or DeepSeek-V3's 128x128 blocks); dynamic = per-tensor weights with
    # activation scales computed every pass, a 16-bit checkpoint quantized when loaded
    # (vLLM's and SGLang's --quantization fp8, which --from-vllm / --from-sglang set);
    # tensor, block. Drafts keep their model's. The roofline prices all three alike
    fp8_scales: Literal["tensor", "block", "dynamic"] | None = None  # null = the model's
    # weights kept in host memory and streamed every pass: a fraction, or "auto" (the
    # fewest whole layers that make the rest fit next to a KV cache of >= 20% of memory)
    offload_fraction: Prob | Literal["auto"] = 0.0
    # the offloaded weights sit in pinned (page-locked) host memory, as vLLM's
    # --cpu-offload-gb keeps them; false = pageable memory (Hugging Face Accelerate,
    # DeepSpeed's default, FlexGen --pin-weight 0), streamed at the GPU's
    # eta_host_pageable instead
    offload_pin_memory: bool = True
    # vLLM's --gpu-memory-utilization (SGLang's --mem-fraction-static): the share of each
    # GPU's memory the engine may take for weights and KV; the rest is its workspace
    # (activations, CUDA graphs), which SpecSim does not size (docs/timing.md)
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS)] = 1
    # how requests are spread over the replicas: in turn, to the fewest outstanding requests
    # or tokens, "kv_aware": NVIDIA Dynamo's KV router (prefix-cache hits against load;
    # sim/router.py), or "llm_d": llm-d's endpoint picker as its tiered-prefix-cache guide
    # configures it (queue, KV use, its own GPU and CPU prefix indexes; sim/llm_d.py)
    router: Literal["round_robin", "least_requests", "least_tokens", "kv_aware",
                    "llm_d"] = "round_robin"
    # the kv_aware router's weight of prefill blocks against active blocks (Dynamo's
    # --kv-overlap-score-weight; higher favours cache hits, lower spreads the load)
    kv_overlap_score_weight: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 1.0
    # the llm_d router's CPU-tier prefix scorer (the guide's cpu-prefix-cache-producer and
    # cpu-prefix-cache-scorer): null = on where scheduler.kv_offload_gib gives a CPU tier
    # (the tiered guide), off otherwise (its GPU-only twin)
    llm_d_cpu_scorer: bool | None = None
    # entries (prefix blocks of 64 tokens) the llm_d router's CPU index keeps a server (the
    # CPU producer's lruCapacityPerServer; the guide's 82000)
    llm_d_cpu_lru_capacity: Annotated[int, Field(ge=1, le=10**9)] = GUIDE_CPU_LRU_CAPACITY
    # "colocated": a copy of the draft on each of the target's GPUs, sharing their memory
    # (SpecInfer); "separate": the draft on a GPU of its own.
    draft_placement: Literal["colocated", "separate"] = "colocated"
    # a separate draft: "serial" alternates with the verify (draft + verify per iteration);
    # "parallel" drafts ahead while the target verifies (PEARL), chains only, no pipeline
    draft_overlap: Literal["serial", "parallel"] = "serial"
    catalog: DataFile | None = None  # an extra catalog YAML (GPUs, links, models, frameworks)
    # How passes are priced (docs/timing.md): "auto" = measured kernel tables where they
    # cover the GPU, framework, dtypes and model, else the calibrated roofline; "paper" =
    # the lecture's paper GPU (its numbers exactly).
    timing: Literal[TIMINGS] = "auto"  # hardware.deployment.TIMINGS names them
    # The serving engine whose kernel tables and overheads price the passes (catalog id:
    # vllm 0.24.0, sglang 0.5.14, trtllm 1.3.0rc20; see `specsim hw list`); <id>@<release>
    # takes the overheads fitted on that release's runs where the catalog lists them
    # (e.g. trtllm@1.0.0rc3, vllm@0.12.0)
    framework: str = "vllm"

    @model_validator(mode="after")
    def _fp8_needs_8_bits(self):
        if self.compute_dtype == "fp8" and self.weight_bits != 8:
            raise ValueError(f"compute_dtype: fp8 (W8A8) needs weight_bits 8, got "
                             f"{self.weight_bits}")
        if self.fp4_format is not None and self.weight_bits != 4:
            raise ValueError(f"fp4_format: FP4 weights need weight_bits 4, got "
                             f"{self.weight_bits}")
        if self.compute_dtype == "fp4" and self.weight_bits != 4:
            raise ValueError(f"compute_dtype: fp4 (W4A4) needs weight_bits 4, got "
                             f"{self.weight_bits}")
        if self.fp8_scales is not None and self.compute_dtype != "fp8":
            raise ValueError(f"fp8_scales: only FP8 W8A8 has them (compute_dtype fp8), got "
                             f"{self.fp8_scales!r} with compute_dtype {self.compute_dtype}")
        if self.kv_overlap_score_weight != 1.0 and self.router != "kv_aware":
            raise ValueError(f"kv_overlap_score_weight: only the kv_aware router weighs cache "
                             f"hits, got router {self.router}")
        if self.router != "llm_d":
            if self.llm_d_cpu_scorer is not None:
                raise ValueError(f"llm_d_cpu_scorer: only the llm_d router has a CPU prefix "
                                 f"scorer, got router {self.router}")
            if self.llm_d_cpu_lru_capacity != GUIDE_CPU_LRU_CAPACITY:
                raise ValueError(f"llm_d_cpu_lru_capacity: only the llm_d router keeps a CPU "
                                 f"prefix index, got router {self.router}")
        elif self.llm_d_cpu_scorer is False and \
                self.llm_d_cpu_lru_capacity != GUIDE_CPU_LRU_CAPACITY:
            raise ValueError("llm_d_cpu_lru_capacity: sizes the CPU prefix index, which "
                             "llm_d_cpu_scorer: false leaves out")
        return self


class Scheduler(Strict):
    """Continuous batching limits, as vLLM names them, and the scheduling order."""

    # "vllm_v1": one token budget in running order, draft tokens cut to fit, no admissions
    # in an iteration that preempted; "decode_first": vLLM v0's chunked-prefill policy;
    # "prefill_first": SGLang's (a prefill batch of at most max_batched_tokens whenever one
    # can be formed, else every running request decodes; --from-sglang sets it)
    order: Literal[tuple(ORDERS)] = "vllm_v1"  # sim.scheduling.ORDERS names them
    # the vLLM release whose v1 scheduling rules the vllm_v1 order follows (docs/background.md,
    # Scheduling): "0.33" admits a request only if its whole prompt fits the free KV
    # (scheduler_reserve_full_isl) and reserves lookahead slots for a new request's drafts;
    # "0.20" checks the whole prompt, no lookahead for new requests; "0.11" neither
    vllm_release: Literal["0.33", "0.20", "0.11"] = "0.33"  # its v1 rules (vllm_v1 only)
    # vLLM's --scheduler-reserve-full-isl (0.20 on): admit a request only when KV for its
    # whole prompt fits; null = the release's default (on; 0.11 has no such check)
    reserve_full_isl: bool | None = None  # --scheduler-reserve-full-isl; null: the release's
    # vLLM's --async-scheduling: step n + 1 is scheduled while step n runs, before its output
    # (admissions a step later, a wasted verify after a request's last token; vllm_v1 only,
    # on the reference engine path; --from-vllm turns it on as vLLM does)
    async_scheduling: bool = False
    # when the draft ingests tokens of iterations it did not draft for (policy γ = 0):
    # "every_step" (vLLM v1 drafts every step) or "catch_up" (when speculation resumes)
    draft_sync: Literal["every_step", "catch_up"] = "every_step"
    max_num_seqs: Annotated[int, Field(ge=1, le=MAX_SEQS)] = 256
    max_batched_tokens: Tokens = 8192
    chunked_prefill: bool = True
    chunk_tokens: Tokens = 512  # long_prefill_token_threshold: per request per step (vLLM: off)
    block_size: Annotated[int, Field(ge=1, le=1024)] = 16
    # vLLM's --num-gpu-blocks-override: a smaller KV pool per replica than memory allows
    # (null = all the memory left after the weights); more than fits is refused.
    num_gpu_blocks_override: PosInt | None = None
    # vLLM's --enable-prefix-caching (automatic prefix caching): full prompt blocks are
    # kept by content (workload hash_ids / shared_prefix_tokens) and a request that finds
    # its prefix cached skips prefilling it; freed cached blocks stay until LRU-evicted
    prefix_caching: bool = False
    # vLLM's --max-model-len: the longest request (prompt + output) the server takes; a
    # longer one is refused, and the KV pool must hold one such request (vLLM will not
    # start otherwise). null = the target's max_position_embeddings
    max_model_len: PosInt | None = None
    # vLLM's --kv-offloading-size: GiB of host memory per replica (vLLM: per engine, summed
    # over its GPUs) for a CPU tier below the prefix cache (vLLM 0.33's native
    # OffloadingConnector): full blocks are stored there as they are computed, evicted LRU,
    # and a request whose prefix misses the GPU cache but is found there loads it over
    # kv_offload_link, waiting meanwhile (sim.offload). Needs prefix_caching; null = none
    kv_offload_gib: Pos | None = None
    # the link CPU-tier loads cross (hardware/data/links.yaml); null = the GPU's host_link
    kv_offload_link: str | None = None
    # SGLang's --scheduler-recv-interval: while busy, its scheduler reads new requests only
    # every N-th loop (a decode step counts 1, the loop after a prefill reads at once, an
    # idle one too; sim.recv); 1 = every loop. prefill_first only (--from-sglang reads it)
    recv_interval: RecvInterval = 1

    @model_validator(mode="after")
    def _chunk_fits(self):
        for knob in ("vllm_release", "reserve_full_isl", "async_scheduling"):
            # a value other than the default (a resolved scenario writes every field: the
            # default release then comes back beside another order, and means nothing)
            default = type(self).model_fields[knob].default
            if getattr(self, knob) != default and knob in self.model_fields_set \
                    and self.order != "vllm_v1":
                raise ValueError(f"{knob}: only the vllm_v1 order follows a vLLM release's "
                                 f"rules, got order {self.order}")
        if self.reserve_full_isl and self.vllm_release == "0.11":
            raise ValueError("reserve_full_isl: vLLM 0.11 has no scheduler_reserve_full_isl "
                             "(it came in 0.20); give vllm_release 0.20 or later")
        if self.kv_offload_gib is not None:
            why = ("it is a tier below the prefix cache: set prefix_caching true"
                   if not self.prefix_caching else
                   f"vLLM's offload is modelled with the vllm_v1 order, got {self.order}"
                   if self.order != "vllm_v1" else
                   "not modelled with async_scheduling (vLLM 0.33's default; "
                   "--no-async-scheduling on a vllm serve line): set "
                   "scheduler.async_scheduling false"
                   if self.async_scheduling else None)
            if why:
                raise ValueError(f"kv_offload_gib: {why}")
        elif self.kv_offload_link is not None:
            raise ValueError("kv_offload_link: a link for the CPU tier's loads, which "
                             "kv_offload_gib turns on; give it too, or leave this out")
        if self.recv_interval != 1 and self.order != "prefill_first":
            raise ValueError(f"recv_interval: SGLang's --scheduler-recv-interval, only with "
                             f"its scheduler (order prefill_first), got order {self.order}")
        if self.chunked_prefill and self.chunk_tokens > self.max_batched_tokens:
            raise ValueError(
                f"chunk_tokens: must be <= max_batched_tokens ({self.max_batched_tokens}),"
                f" got {self.chunk_tokens}"
            )
        return self


class Variant(Strict):
    """One speculation policy to run; all variants share the scenario's arrivals. A variant
    may draft another way (``drafter``; default: ``models.method`` with ``models.draft``) and
    accept by its own model (``acceptance``; default: the scenario's), so one run compares a
    draft model with EAGLE-3 and n-gram drafting."""

    name: Name  # also a folder name
    policy: Policy
    drafter: DrafterCfg | None = None
    acceptance: SingleAcceptance | None = None


class StructuredOutput(Strict):
    """Requests whose output a grammar constrains (JSON schemas, regexes: vLLM's structured
    outputs, SGLang's constrained decoding), and what that does to their drafts. A draft
    token the grammar forbids is never accepted (the target samples under the grammar's
    mask); the engine either drops it and the drafts after it before the verify (vLLM
    without async scheduling: ``Scheduler.update_draft_token_ids`` keeps the prefix the
    grammar accepts, ``grammar.validate_tokens``) or verifies it and rejects it (vLLM with
    async scheduling: ``update_draft_token_ids_in_output`` puts placeholders in the slots
    already scheduled; SGLang: the verify's grammar mask, ``generate_token_bitmask``).
    Either way it is not counted as drafted (vLLM's ``num_draft_tokens`` leaves it out).
    The acceptance model gives the acceptance of the drafts the grammar allows."""

    share: Prob = 1.0  # requests with a grammar: each with this probability (seeded)
    # P(a draft token breaks the grammar | the drafts before it did not); drawn per step
    invalid_draft_rate: Annotated[float, Field(ge=0, lt=1)]
    # dropped | rejected; null: dropped under vllm_v1 without async scheduling, else rejected
    invalid_drafts: Literal["dropped", "rejected"] | None = None


class Run(Strict):
    """How long to run: a request count, a horizon in simulated seconds, or both (the
    horizon then cuts the run short; unfinished requests are recorded as such)."""

    requests: Annotated[int, Field(ge=1, le=MAX_REQUESTS)] | None = 1000
    horizon_s: Seconds | None = None
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0

    @model_validator(mode="after")
    def _some_bound(self):
        if self.requests is None and self.horizon_s is None:
            raise ValueError("requests: give requests, horizon_s, or both")
        return self


class Slo(Strict):
    """Latency targets a capacity plan must meet (percentiles over finished requests)."""

    ttft_p99_s: Seconds | None = None
    tpot_p99_s: Seconds | None = None


class Scenario(Strict):
    """A whole simulation: everything ``specsim run`` needs."""

    name: Name = "scenario"
    models: Models = Models()
    deployment: Deployment = Deployment()
    scheduler: Scheduler = Scheduler()
    workload: Workload = PoissonWorkload()
    acceptance: Acceptance = IidAcc(kind="iid", alpha=0.8)
    variants: list[Variant] = Field(
        default=[
            Variant(name="none", policy=NonePolicy(kind="none")),
            Variant(name="fixed-g4", policy=FixedPolicy(kind="fixed", gamma=4)),
        ],
        min_length=1,
    )
    run: Run = Run()
    slo: Slo = Slo()
    # prefill and decode on pools of their own, the KV sent between them (sim.disagg);
    # null: every replica does both
    disaggregation: Disaggregation | None = None
    # requests under a grammar and their drafts (sim.grammar); null: none
    structured_output: StructuredOutput | None = None

    @model_validator(mode="after")
    def _consistent(self):
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variants: names must be unique, got {names}")
        if self.workload.closed_loop() is not None and self.run.requests is None:
            raise ValueError("run.requests: required for a closed loop (how many to send)")
        needs_model = [v.name for v in self.variants if v.policy.kind != "none"
                       and (v.drafter or self.models.drafter()).method == "draft_model"
                       and getattr(v.drafter, "model", None) is None]
        if needs_model and self.models.draft is None:
            raise ValueError(f"models.draft: variants {needs_model} draft with a draft model "
                             "but none is set")
        if self.deployment.draft_overlap == "parallel":
            d = self.deployment
            if d.draft_placement != "separate":
                raise ValueError("deployment.draft_overlap: 'parallel' needs draft_placement "
                                 f"'separate' (a draft of its own to run ahead), got "
                                 f"{d.draft_placement!r}")
            if d.pp > 1:
                raise ValueError(f"deployment.draft_overlap: 'parallel' is not modelled with "
                                 f"pipeline stages, got pp {d.pp}")
            trees = [v.name for v in self.variants if not v.policy.chains_only]
            if trees:
                raise ValueError(f"deployment.draft_overlap: 'parallel' drafts chains only; "
                                 f"variants {trees} draft trees or per-sequence shapes")
        if self.disaggregation is not None:
            self._check_disaggregation()
        self._check_recv_interval()
        if self.structured_output is not None:
            self._check_structured_output()
        return self

    def invalid_drafts(self) -> str:
        """What the engine does with a draft the grammar forbids: ``dropped`` before the
        verify or ``rejected`` in it (``StructuredOutput.invalid_drafts``, its default by
        the scheduler)."""
        so, s = self.structured_output, self.scheduler
        if so.invalid_drafts is not None:
            return so.invalid_drafts
        return "dropped" if s.order == "vllm_v1" and not s.async_scheduling else "rejected"

    def _check_structured_output(self) -> None:
        """What structured output cannot combine with (not modelled there)."""
        d, s = self.deployment, self.scheduler
        refused = (("deployment.pp", d.pp > 1, "pipeline stages"),
                   ("disaggregation", self.disaggregation is not None,
                    "disaggregated prefill and decode"),
                   ("deployment.draft_overlap", d.draft_overlap == "parallel",
                    "a draft drafting ahead on its own GPU"))
        for field, bad, what in refused:
            if bad:
                raise ValueError(f"{field}: {what} with structured_output is not modelled")
        trees = [v.name for v in self.variants if not v.policy.chains_only]
        if trees:
            raise ValueError(f"structured_output: the grammar checks a chain's drafts in "
                             f"order; variants {trees} draft trees, which are not modelled "
                             "with it")
        if self.structured_output.invalid_drafts == "dropped" and s.async_scheduling:
            raise ValueError("structured_output.invalid_drafts: vLLM drops forbidden drafts "
                             "only without async scheduling (with it the verify's slots are "
                             "scheduled already: rejected)")

    def _check_recv_interval(self) -> None:
        """Where SGLang's ``--scheduler-recv-interval`` (``scheduler.recv_interval``, a
        pool's too) is refused or not modelled: with data-parallel attention SGLang asserts
        it off (``SchedulerRecvSkipper``), and the pipelined replica and vLLM's P/D flow
        have no loop that reads it (``sim.recv``)."""
        d, dis, n = self.deployment, self.disaggregation, self.scheduler.recv_interval
        # each server's (where its ep, tp and interval are named, its interval, tp, ep)
        servers = [("deployment", n, d.tp, d.ep)] if dis is None else [
            (f"disaggregation.{role}", p.recv_interval or n, p.tp or d.tp, p.ep or d.ep)
            for role, p in (("prefill", dis.prefill), ("decode", dis.decode))]
        for where, interval, tp, ep in servers:
            if interval == 1:
                continue
            refused = ((f"{where}.ep", ep > tp, f"data-parallel attention (ep {ep} above tp "
                        f"{tp}), which SGLang refuses with it"),
                       ("deployment.pp", d.pp > 1, "pipeline stages, not modelled with it"),
                       ("disaggregation.flow", dis is not None and dis.flow == "vllm",
                        "vLLM's P/D flow, not SGLang's"))
            for field, bad, what in refused:
                if bad:
                    raise ValueError(f"{field}: {what} (recv_interval {interval} is SGLang's "
                                     f"--scheduler-recv-interval)")

    def _check_disaggregation(self) -> None:
        """What a P/D scenario cannot combine with (not modelled there yet)."""
        d, s = self.deployment, self.scheduler
        if d.replicas != 1:
            raise ValueError(f"deployment.replicas: with disaggregation the pools give the "
                             f"replica counts (disaggregation.prefill.replicas, "
                             f"decode.replicas); leave it 1, got {d.replicas}")
        refused = (("deployment.pp", d.pp > 1, "pipeline stages"),
                   ("deployment.draft_overlap", d.draft_overlap == "parallel",
                    "a draft drafting ahead on its own GPU"),
                   ("scheduler.async_scheduling", s.async_scheduling, "async scheduling"))
        for field, bad, what in refused:
            if bad:
                raise ValueError(f"{field}: {what} with disaggregation is not modelled")
