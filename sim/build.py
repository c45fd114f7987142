"""Resolving a scenario into runnable setups: cost models, requests, acceptance, policies.

One seed drives everything through ``numpy.random.SeedSequence(seed).spawn(4)``: the
workload (arrivals, lengths, tasks), the acceptance streams, the acceptance model's own
construction (e.g. the bursty regime tape), and the acceptance draws. Every variant gets
the same requests, streams and model, and a fresh generator for its draws from the same
child seed, so variants differ only by their policy (and the KV room the draft takes).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.cluster import Setup
from sim.drafters import ASYNC_METHODS, input_slots, lookahead_slots
from sim.grammar import grammar_for
from sim.kv import blocks_for
from sim.limits import MAX_ARRIVAL_S
from sim.llm_d import LlmdConfig
from sim.log import RequestTable
from sim.paths import resolve_file
from sim.scenario import Scenario
from sim.scheduling import SchedulerLimits
from specdec.errors import UserError
from workloads.prefix_blocks import prompt_block_keys
from workloads.requests import RequestColumns


def make_acceptance(cfg, rng: np.random.Generator):
    """The acceptance model a scenario's ``acceptance`` section describes."""
    return cfg.build(rng)


def make_requests(sc: Scenario, rng: np.random.Generator, stream_rng: np.random.Generator,
                  acceptance) -> RequestTable:
    """The request table: arrivals × lengths (× tasks), with acceptance streams, and with
    ``scheduler.prefix_caching`` each prompt's block keys (``workloads.prefix_blocks``)."""
    mix = sc.acceptance.kind == "task_mix"
    reqs = sc.workload.requests(sc.run.requests, sc.run.horizon_s, rng,
                                sc.acceptance.task_weights() if mix else None)
    if isinstance(reqs, RequestColumns):  # drawn as arrays
        cols, specs = reqs, None
    else:
        specs = reqs
        cols = RequestColumns(np.array([s.arrival_at for s in specs], dtype=np.float64),
                              np.array([s.prompt_tokens for s in specs], dtype=np.int64),
                              np.array([s.output_tokens for s in specs], dtype=np.int64),
                              np.zeros(len(specs), dtype=np.int64), [])
    late = np.flatnonzero(cols.arrival_at > MAX_ARRIVAL_S)  # nan (closed loop): not late
    if late.size:
        i = int(late[0])
        raise UserError(f"request {i} arrives at {cols.arrival_at[i]:.4g} s, past "
                        f"{MAX_ARRIVAL_S:.4g} s (2**52 us), beyond which float64 times "
                        "resolve no better than a microsecond and latencies would read 0: "
                        "raise the arrival rate or scale the trace's times down")
    if mix:
        names = [s.task for s in specs] if specs is not None else \
            [cols.task_names[k] for k in cols.task.tolist()]
        stream = acceptance.streams_for_tasks(names, stream_rng)
        task = acceptance.task_index(names)
    else:
        stream = acceptance.new_streams(len(cols), stream_rng)
        task = np.zeros(len(cols), dtype=np.int64)
    keys = starts = None
    if sc.scheduler.prefix_caching and specs is not None:  # which blocks hold the same tokens
        # (drawn columns share nothing: every block its own key, numbered by its place, as
        # sim.replica.make_prefix_cache numbers them without an array)
        keys, starts = prompt_block_keys(specs, sc.scheduler.block_size)
    return RequestTable(
        arrival_at=cols.arrival_at,
        prompt_tokens=cols.prompt_tokens,
        output_tokens=cols.output_tokens,
        task=task,
        stream=np.asarray(stream, dtype=np.int64),
        block_keys=keys,
        block_starts=starts,
    )


def _llm_d(sc: Scenario) -> LlmdConfig | None:
    """The llm_d router's knobs (None for another router): its CPU prefix scorer on where
    the scenario says, else where a CPU tier is configured, as llm-d's guides do."""
    d = sc.deployment
    if d.router != "llm_d":
        return None
    on = d.llm_d_cpu_scorer
    if on is None:
        on = sc.scheduler.kv_offload_gib is not None
    return LlmdConfig(cpu_scorer=on, cpu_lru_capacity=d.llm_d_cpu_lru_capacity)


def policy_factory(cfg, acceptance, max_running: int):
    """A zero-argument callable that builds one fresh policy (one per replica); a kind
    that reads the engine's most running requests (``takes_max_running``) gets them."""
    if getattr(cfg, "takes_max_running", False):
        return cfg.build(acceptance, max_running)
    return cfg.build(acceptance)


class DrafterError(UserError):
    """A drafter that cannot be built (its message names the field, not the section)."""


class DraftCosts:
    """``make_cost(model_spec, tp, ep)``: a drafting model's cost model on ``gpu`` at
    ``weight_bits`` (in ``compute_dtype`` only when that is 8 bits), ``kv_bits``, the
    ``timing`` backend and ``framework``; ``catalog`` for drafters that name a catalog
    model. Its passes run inside the target's engine step, so they do not pay the
    framework's per-step overhead nor its per-sequence one
    (``hardware.Deployment.step_overhead``). The drafter
    configs (``sim.kinds.drafters``) build with it, for a scenario (``for_scenario``) and
    for the speedup and grid tables alike. A drafting model with routed experts (an MTP
    layer of an MoE target) runs them with the target's ``moe_kernel``: the engine sets one
    MoE backend for both."""

    def __init__(self, catalog, gpu, weight_bits: int, kv_bits: int,
                 compute_dtype: str | None, timing: str, framework: str,
                 gpu_memory_utilization: float = 0.9, moe_kernel: str | None = None) -> None:
        self.catalog, self.gpu, self.moe_kernel = catalog, gpu, moe_kernel
        self.workspace_fraction = 1.0 - gpu_memory_utilization
        self.weight_bits, self.kv_bits = weight_bits, kv_bits
        self.compute_dtype = compute_dtype if weight_bits == 8 else None
        self.timing, self.framework = timing, framework

    @classmethod
    def for_scenario(cls, sc: Scenario, catalog, gpu) -> DraftCosts:
        """At ``deployment.draft_weight_bits`` (the target's when unset), the target's KV
        width, compute dtype, timing backend and framework."""
        d = sc.deployment
        bits = d.weight_bits if d.draft_weight_bits is None else d.draft_weight_bits
        return cls(catalog, gpu, bits, d.kv_bits, d.compute_dtype, d.timing, d.framework,
                   d.gpu_memory_utilization, d.moe_kernel)

    def __call__(self, spec, tp: int = 1, ep: int = 1):
        from hardware.cost import CostModel
        from hardware.deployment import Deployment

        return CostModel(Deployment(model=spec, gpu=self.gpu, tp=tp, ep=ep,
                                    weight_bits=self.weight_bits, kv_bits=self.kv_bits,
                                    compute_dtype=self.compute_dtype, timing=self.timing,
                                    framework=self.framework, step_overhead=False,
                                    workspace_fraction=self.workspace_fraction,
                                    moe_kernel=self.moe_kernel
                                    if spec.config.routed_experts else None),
                         self.catalog)


def cost_models(sc: Scenario, uses_draft: bool, drafter_cfg=None):
    """(target cost model, ``sim.drafters.Drafter`` or None, KV blocks per replica).

    ``drafter_cfg`` (a ``sim.kinds.drafters`` config; default ``models.method``'s) builds
    the drafter. A drafting model runs unsharded (tp = pp = 1) unless its ``tp`` says
    otherwise, at the target's timing backend and framework. Co-located, a copy sits on
    each of the target's GPUs and every cached token needs KV in both models
    (``hardware.draft.colocated_kv_capacity_tokens``); on its own GPU, the draft's KV must
    also fit there, so the smaller of the two capacities counts. A CPU drafter (n-gram)
    takes no GPU memory.
    """
    from hardware.catalog import load_catalog
    from hardware.cost import CostModel
    from hardware.deployment import Deployment
    from hardware.draft import colocated_kv_capacity_tokens

    d = sc.deployment
    catalog = load_catalog(extra=str(resolve_file(d.catalog)) if d.catalog else None)
    gpu = catalog.gpu(d.gpu)
    catalog.framework(d.framework)  # an unknown framework is named before anything else
    timing = {"timing": d.timing, "framework": d.framework}
    target = CostModel(
        Deployment(model=catalog.model(sc.models.target).servable("models.target"), gpu=gpu,
                   tp=d.tp, pp=d.pp, ep=d.ep, weight_bits=d.weight_bits, kv_bits=d.kv_bits,
                   offload_fraction=d.offload_fraction, offload_pin_memory=d.offload_pin_memory,
                   compute_dtype=d.compute_dtype, fp8_scales=d.fp8_scales,
                   workspace_fraction=1.0 - d.gpu_memory_utilization,
                   max_seqs=sc.scheduler.max_num_seqs, fp4_format=d.fp4_format,
                   quantized=d.quantized, moe_kernel=d.moe_kernel, **timing),
        catalog,
    )
    block = sc.scheduler.block_size
    if not uses_draft:
        return target, None, target.kv_capacity_tokens() // block
    cfg = drafter_cfg or sc.models.drafter()
    draft_model = catalog.model(sc.models.draft) if sc.models.draft else None
    try:
        drafter = cfg.build(target, draft_model, DraftCosts.for_scenario(sc, catalog, gpu),
                            d.draft_placement)
    except (ValueError, UserError) as e:
        raise DrafterError(str(e)) from None
    setup = drafter.setup
    if setup is None:
        tokens = target.kv_capacity_tokens()
    elif setup.placement == "separate":
        tokens = min(target.kv_capacity_tokens(), setup.cost.kv_capacity_tokens())
    else:
        tokens = colocated_kv_capacity_tokens(target, setup)
    return target, drafter, tokens // block


def max_verify_tokens(policy) -> int:
    """The most tokens one sequence can put into a verify pass under ``policy``: the root
    plus its largest shape's draft nodes (an adaptive tree <k,1,..,1> of depth d has k·d)."""
    return 1 + policy.max_nodes


def check_fits(sc: Scenario, table: RequestTable, blocks: int, verify: int, source: str,
               models=(), lookahead: int = 0):
    """Refuse requests that could never run, with the numbers that show why: more KV than a
    replica holds, more tokens than a pass allows, or more positions than one of ``models``
    (the catalog ``ModelSpec``s that see every token: the target, and the draft when one
    speculates) has, its ``max_position_embeddings``."""
    if len(table) == 0:
        raise UserError(f"{source}: workload: produced no requests (horizon too short?)")
    total = table.prompt_tokens + table.output_tokens  # [N]
    i = int(np.argmax(total))
    lim = sc.scheduler
    if lim.max_model_len is not None:
        for role, model in models:
            if lim.max_model_len > model.config.max_position_embeddings:
                raise UserError(
                    f"{source}: scheduler.max_model_len: {lim.max_model_len} is more than the "
                    f"{role} {model.id}'s max_position_embeddings "
                    f"{model.config.max_position_embeddings} (vLLM refuses it too)")
        if int(total[i]) > lim.max_model_len:
            raise UserError(
                f"{source}: workload: request {i} ({int(table.prompt_tokens[i])} prompt + "
                f"{int(table.output_tokens[i])} output tokens) is longer than "
                f"scheduler.max_model_len {lim.max_model_len} (vLLM refuses such a request)")
        need = int(blocks_for(lim.max_model_len, lim.block_size))
        if need > blocks:
            raise UserError(
                f"{source}: scheduler.max_model_len: one request of {lim.max_model_len} "
                f"tokens needs {need} KV blocks, but a replica holds {blocks} (vLLM will "
                f"not start; give a smaller max_model_len)")
    for role, model in models:
        limit = model.config.max_position_embeddings
        if int(total[i]) > limit:
            raise UserError(
                f"{source}: workload: request {i} ({int(table.prompt_tokens[i])} prompt + "
                f"{int(table.output_tokens[i])} output tokens) needs {int(total[i])} positions, "
                f"but the {role} {model.id} has max_position_embeddings {limit}")
    if verify > lim.max_batched_tokens:
        raise UserError(f"{source}: scheduler.max_batched_tokens: must be >= a verify pass of "
                        f"{verify} tokens, got {lim.max_batched_tokens}")
    # the longest request's KV at its last verify, with the lookahead slots reserved then
    need = int(blocks_for(int(total[i]) + verify + lookahead, lim.block_size))
    if need > blocks:
        raise UserError(
            f"{source}: workload: request {i} ({int(table.prompt_tokens[i])} prompt + "
            f"{int(table.output_tokens[i])} output tokens) needs {need} KV blocks, but a "
            f"replica of {sc.models.target} on {sc.deployment.tp}x{sc.deployment.pp} "
            f"{sc.deployment.gpu} holds {blocks}"
        )
    if not lim.chunked_prefill and int(total[i]) - 1 > lim.max_batched_tokens:
        raise UserError(
            f"{source}: scheduler.max_batched_tokens: with chunked_prefill off it must hold the "
            f"longest (re)prefill of {int(total[i]) - 1} tokens, got {lim.max_batched_tokens}"
        )


class _Section:
    """Re-raise a UserError from a lower layer prefixed with the scenario file and section."""

    def __init__(self, source: str, section: str) -> None:
        self.prefix = f"{source}: {section}: "

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if isinstance(err, UserError) and not str(err).startswith(self.prefix.split(": ")[0]):
            raise UserError(self.prefix + " ".join(str(err).split())) from None
        return False


def _blocks(sc: Scenario, blocks: int, source: str, variant: str) -> int:
    """The KV blocks per replica that requests can use: what fits, or vLLM's
    num_gpu_blocks_override (not more), less, in vLLM v1's order, the null block its pool
    keeps back (``vllm/v1/core/block_pool.py``, ``BlockPool.__init__``: N blocks give N - 1
    usable)."""
    override = sc.scheduler.num_gpu_blocks_override
    if override is not None and override > blocks:
        raise UserError(
            f"{source}: scheduler.num_gpu_blocks_override: must be <= the {blocks} KV blocks "
            f"that fit a replica of {sc.models.target} on {sc.deployment.tp}x"
            f"{sc.deployment.pp} {sc.deployment.gpu} (variant {variant}), got {override}")
    pool = blocks if override is None else override
    return pool - 1 if sc.scheduler.order == "vllm_v1" else pool


def _with_proposal_rate(drafter, acceptance_cfg):
    """A lookup drafter with its proposal rate: its own, else its acceptance preset's."""
    if drafter is None or drafter.method not in ("ngram", "suffix") \
            or drafter.proposal_rate is not None:
        return drafter
    rate = None
    if getattr(acceptance_cfg, "kind", None) == "preset":
        rate = acceptance_cfg.measured_for().proposal_rate
    if rate is None:
        raise UserError(f"drafter.proposal_rate: required for method {drafter.method} (the "
                        "share of steps with a match), unless the acceptance is a preset "
                        "that gives it")
    return replace(drafter, proposal_rate=rate)


def _measured_for(acceptance_cfg, drafter_cfg, models) -> list[str]:
    """A warning when an acceptance preset was measured for another method, target or draft."""
    if getattr(acceptance_cfg, "kind", None) != "preset":
        return []
    p = acceptance_cfg.measured_for()
    used = drafter_cfg.method
    problems = []
    if p.method != used:
        problems.append(f"method {p.method}, not {used}")
    if p.target_catalog is not None and p.target_catalog != models.target:
        problems.append(f"target {p.target_catalog}, not {models.target}")
    if used == "draft_model":
        draft = getattr(drafter_cfg, "model", None) or models.draft
        if draft not in p.draft:
            problems.append(f"draft {p.draft}, not {draft}")
    if not problems:
        return []
    return [f"acceptance preset {p.name} was measured for " + "; ".join(problems)
            + ": its rates may not hold for this deployment"]


def _check_async(sc: Scenario, source: str, method, variant: str) -> None:
    """Refuse scheduler.async_scheduling where vLLM does not run it or SpecSim does not
    model it."""
    why = None
    if method and method not in ASYNC_METHODS:
        why = (f"variant {variant!r} drafts with {method}, which vLLM 0.33 runs only "
               "with sync scheduling")
    elif sc.deployment.pp > 1:
        why = "vLLM 0.33 runs pipeline parallelism only with sync scheduling"
    elif sc.deployment.draft_overlap == "parallel":
        why = "a draft drafting ahead on its own GPU is not modelled with it"
    if why:
        raise UserError(f"{source}: scheduler.async_scheduling: {why}; set it false")


def setups(sc: Scenario, source: str = "scenario", record_bound: bool = True):
    """[(variant name, Setup)] for every variant of ``sc``, sharing one request table (a
    P/D scenario's: its decode pool's, with the prefill pool's in ``disagg``,
    ``sim.pd_pools.pool_setups``)."""
    if sc.scheduler.kv_offload_gib is not None:
        why = ("prefill/decode disaggregation" if sc.disaggregation is not None else
               "pipeline parallelism (deployment.pp > 1)" if sc.deployment.pp > 1 else None)
        if why:
            raise UserError(f"{source}: scheduler.kv_offload_gib: a CPU tier is not modelled "
                            f"with {why}; leave it out")
    if sc.disaggregation is not None:
        from sim.pd_pools import pool_setups

        return pool_setups(sc, source, record_bound, _one_pool)
    return _one_pool(sc, source, record_bound)


def _tier(sc: Scenario, source: str, target, drafter, variant: str):
    """The ``sim.offload.TierSpec`` of each replica of ``sc`` (vLLM's
    ``--kv-offloading-size``) for a variant with ``target``'s cost model and ``drafter``,
    or None without one."""
    from hardware.catalog import load_catalog
    from sim.offload import TierSpec, tier_blocks

    lim = sc.scheduler
    if lim.kv_offload_gib is None:
        return None
    d = sc.deployment
    catalog = load_catalog(extra=str(resolve_file(d.catalog)) if d.catalog else None)
    link_id = lim.kv_offload_link or target.dep.gpu.host_link
    try:
        link = catalog.link(link_id)
    except UserError as e:
        raise UserError(f"{source}: scheduler.kv_offload_link: {e}") from None
    # KV bytes per token on one GPU: the target's, and a drafter's in the same blocks
    per_gpu = float(max(target.stage_kv_bytes_per_token))
    if drafter is not None and drafter.setup is not None:
        per_gpu += float(max(drafter.setup.cost.stage_kv_bytes_per_token))
    # a copy per GPU, but one of an MLA latent every GPU of a one-node TP group holds alike
    # (vLLM's replicated_layout: offloading/config.py)
    dep = target.dep
    copies = 1 if dep.model.config.mla and dep.tp <= dep.gpu.gpus_per_node else dep.n_gpus
    blocks = tier_blocks(lim.kv_offload_gib, lim.block_size, per_gpu, copies)
    if blocks < 1:
        raise UserError(
            f"{source}: scheduler.kv_offload_gib: {lim.kv_offload_gib} GiB holds no KV block "
            f"of {lim.block_size} tokens ({per_gpu * lim.block_size * copies:.0f} bytes, "
            f"variant {variant}); give more")
    return TierSpec(lim.kv_offload_gib, blocks, link_id, link.bytes_per_s, link.latency_s,
                    per_gpu)


def _one_pool(sc: Scenario, source: str, record_bound: bool):
    """``setups`` of a scenario whose replicas all prefill and decode."""
    from hardware.draft import check_same_vocab
    from hardware.spec_cost import for_cost

    ss = np.random.SeedSequence(sc.run.seed).spawn(4)
    workload_rng, stream_rng, model_rng = (np.random.default_rng(s) for s in ss[:3])
    with _Section(source, "acceptance"):
        acceptance = make_acceptance(sc.acceptance, model_rng)
    with _Section(source, "workload"):
        table = make_requests(sc, workload_rng, stream_rng, acceptance)
    grammar = grammar_for(sc, len(table))
    lim = sc.scheduler
    limits = SchedulerLimits(lim.max_num_seqs, lim.max_batched_tokens, lim.chunked_prefill,
                             lim.chunk_tokens, lim.block_size, lim.order, lim.prefix_caching,
                             lim.vllm_release, lim.reserve_full_isl, lim.async_scheduling,
                             recv_interval=lim.recv_interval)
    users, think_s = 0, None
    with _Section(source, "workload"):
        loop = sc.workload.closed_loop()
    if loop is not None:
        users = loop.users
        think_s = loop.think_times(len(table) + users, np.random.default_rng(ss[2].spawn(1)[0]))
    out = []
    variant_rngs = ss[1].spawn(len(sc.variants))  # acceptance overrides' streams
    for i, v in enumerate(sc.variants):
        with _Section(source, f"variants.{i}"):
            acc, tab = acceptance, table
            if v.acceptance is not None:  # the variant's own model and its streams
                rng = np.random.default_rng(variant_rngs[i])
                acc = make_acceptance(v.acceptance, rng)
                tab = replace(table, stream=np.asarray(acc.new_streams(len(table), rng),
                                                       dtype=np.int64))
            make_policy = policy_factory(v.policy, acc, lim.max_num_seqs)
            probe = make_policy()
        cfg = v.drafter or sc.models.drafter()
        where = f"variants.{i}.drafter" if v.drafter else "models"
        if lim.async_scheduling:
            _check_async(sc, source, probe.uses_draft and cfg.method, v.name)
        if cfg.method == "medusa" and probe.uses_draft and probe.max_depth > cfg.heads:
            raise UserError(f"{source}: {where}: heads: {cfg.heads} Medusa heads propose at "
                            f"most {cfg.heads} positions, but variant {v.name!r} drafts "
                            f"{probe.max_depth} deep (give more heads or a shallower policy)")
        with _Section(source, "deployment"):
            try:
                target, drafter, blocks = cost_models(sc, probe.uses_draft, cfg)
            except DrafterError as e:
                raise UserError(f"{source}: {where}: {e}") from None
        with _Section(source, where):
            drafter = _with_proposal_rate(drafter, v.acceptance or sc.acceptance)
        blocks = _blocks(sc, blocks, source, v.name)
        draft = drafter.setup if drafter is not None else None
        models = [("target", target.dep.model)]
        if draft is not None and drafter.method == "draft_model":
            models.append(("draft", draft.cost.dep.model))
            with _Section(source, "models.draft"):
                check_same_vocab(target.dep.model, draft.cost.dep.model)
        check_fits(sc, tab, blocks, max_verify_tokens(probe), source, models,
                   lookahead_slots(drafter, probe))
        step, per_request = limits.step_budget(input_slots(drafter, probe.uses_draft,
                                                           probe.max_depth))
        if max_verify_tokens(probe) + per_request > step:
            raise UserError(
                f"{source}: scheduler.max_batched_tokens: {lim.max_batched_tokens} leaves "
                f"{step - per_request} tokens a step for a request beside the input slots "
                f"vLLM {lim.vllm_release} gives {drafter.method} drafting, less than variant "
                f"{v.name!r}'s verify of {max_verify_tokens(probe)} tokens")
        tier = _tier(sc, source, target, drafter if probe.uses_draft else None, v.name)
        out.append((v.name, Setup(
            table=tab, limits=limits if tier is None else replace(limits, offload=tier),
            kv_capacity_blocks=blocks, target_cost=target,
            draft=draft, make_policy=make_policy, acceptance=acc,
            seed=ss[3], replicas=sc.deployment.replicas, grammar=grammar,
            router=sc.deployment.router,
            router_weight=sc.deployment.kv_overlap_score_weight, llm_d=_llm_d(sc),
            record_bound=record_bound,
            pipeline_stages=sc.deployment.pp, closed_loop_users=users, think_s=think_s,
            draft_sync=lim.draft_sync,
            draft_overlap=sc.deployment.draft_overlap == "parallel" and draft is not None,
            drafter=drafter,
            spec=for_cost(target, drafter.method) if probe.uses_draft
            and drafter is not None else None,
            notes=tuple(_measured_for(v.acceptance or sc.acceptance, cfg, sc.models)
                        if probe.uses_draft else ()),
        )))
    return out
