"""``specsim hw``: price one pass (``hw step``), show the catalogs (``hw list``), and
``hw speedup`` -- the same command as ``specsim speedup`` (DESIGN.md lists it under ``hw``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from hardware import CostModel, Deployment, load_catalog
from hardware.catalog import Catalog
from hardware.deployment import FP8_SCALES, MOE_KERNELS, check_positions
from hardware.draft import tree_attended_keys, tree_nodes
from hardware.timing import gpu_timing_data
from sim.commands import speedup
from sim.commands._lists import check_bounds, document_bounds, file_path, tree_widths
from sim.commands._timing import add_timing_flags, offload_value
from sim.limits import MAX_GPUS, MAX_SEQS, MAX_TOKENS
from specdec.errors import UserError

# Ranges of hw step's integer flags (sim.limits).
STEP_BOUNDS = {"batch": (1, MAX_SEQS), "context": (0, MAX_TOKENS), "tokens": (1, MAX_TOKENS),
               "tp": (1, MAX_GPUS), "pp": (1, MAX_GPUS), "ep": (1, MAX_GPUS)}

STEP_HELP = """\
Price ONE forward pass of a model over a uniform batch with the cost model: each of
--batch sequences feeds --tokens new tokens (1 = decode, gamma+1 = verify, a tree's node
count, or a prefill chunk) on top of --context cached tokens. Prints the pass time, which
timing backend priced it (--timing: auto = measured kernel tables where they cover the
GPU, framework and model, else the calibrated roofline; paper = the lecture's paper GPU)
and its breakdown (compute, memory, communication, host transfer, overhead, the bound).
Example (lecture section 1.1): specsim hw step --model llama-3-8b --gpu h100 --batch 1
--context 1024 --tokens 1 --timing paper   ->  6.15 ms, memory-bound.
A token tree's verify: --tree 5,1,1,1 instead of --tokens feeds the root and every node of
the expansion tree <5,1,1,1> (21 tokens) and prices its attention with the tree mask (each
node sees the context and its ancestors only)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``specsim hw`` with its ``step`` and ``list`` actions."""
    parser = subparsers.add_parser(
        "hw",
        description="The hardware cost model and its catalogs.",
    )
    actions = parser.add_subparsers(dest="hw_action", metavar="ACTION")
    step = actions.add_parser(
        "step", help="price one forward pass", description=STEP_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_deployment_flags(step)
    step.add_argument("--batch", type=int, required=True,
                      help="sequences in the batch, >= 1 (required, no default)")
    step.add_argument("--context", type=int, required=True,
                      help="cached tokens per sequence before the pass, >= 0 (required, no "
                           "default); context + new tokens must not exceed the model's "
                           "max_position_embeddings")
    fed = step.add_mutually_exclusive_group()
    fed.add_argument("--tokens", type=int, default=1,
                     help="new tokens per sequence in this pass (default 1: a decode pass)")
    fed.add_argument("--tree", metavar="K1,K2,...",
                     help="verify the expansion tree <K1,...,Km> per sequence (its root and "
                          "nodes, attention under the tree mask) instead of --tokens")
    step.add_argument("--json", action="store_true", help="print a JSON object")
    document_bounds(step, STEP_BOUNDS)
    step.set_defaults(func=run_step)
    lst = actions.add_parser("list", help="show the GPU, link and model catalogs",
                             description="Show the catalogs (shipped plus --catalog files).")
    lst.add_argument("--catalog", action="append", metavar="FILE", type=file_path,
                     help="extra catalog YAML file (repeatable)")
    lst.add_argument("--json", action="store_true", help="print a JSON object")
    lst.set_defaults(func=run_list)
    spd = actions.add_parser(
        "speedup", help="the same as 'specsim speedup' (analytic or hardware speedup tables)",
        description=speedup.DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    speedup.add_arguments(spd)
    parser.set_defaults(func=lambda args: _no_action(parser))


def _no_action(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def add_deployment_flags(p: argparse.ArgumentParser) -> None:
    """The flags that describe one deployment (shared with ``specsim speedup``)."""
    p.add_argument("--model", required=True,
                   help="model id from the catalog, or a Hugging Face config.json path")
    p.add_argument("--gpu", required=True, help="GPU id from the catalog (see 'hw list')")
    p.add_argument("--tp", type=int, default=1,
                   help="tensor-parallel GPUs (default 1); more than the GPU's gpus_per_node "
                        "('hw list') span servers")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages (default 1)")
    p.add_argument("--ep", type=int, default=1,
                   help="expert-parallel GPUs of an MoE model (default 1: every expert split "
                        "over --tp); --tp: whole experts, E/ep per GPU (vLLM's "
                        "--enable-expert-parallel); a multiple tp x dp adds dp data-parallel "
                        "attention groups and an all-to-all per MoE layer")
    p.add_argument("--weight-bits", type=int, choices=(16, 8, 4),
                   help="bits per weight (default: the precision the catalog says the "
                        "checkpoint ships in, 16 unless it names one -- DeepSeek-V3: 8, with "
                        "FP8 compute; 8/4 = weight-only quantisation)")
    p.add_argument("--fp4-format", choices=("nvfp4", "mxfp4"),
                   help="4-bit weights as FP4 with block scales: nvfp4 (4.5 bits a weight) or "
                        "mxfp4 (4.25) (default: the checkpoint's where it ships FP4, else "
                        "int4) (deployment.fp4_format)")
    p.add_argument("--moe-kernel", choices=MOE_KERNELS,
                   help="the fused-MoE kernel family the engine runs an MoE model's routed "
                        "experts with: trtllm_gen (TensorRT-LLM moe_config.backend TRTLLM, "
                        "SGLang --moe-runner-backend flashinfer_trtllm), deepgemm, cutlass, "
                        "triton (default: whatever the framework's measured tables timed; "
                        "measured timing only) (deployment.moe_kernel)")
    p.add_argument("--quantized", choices=("all", "mlp", "experts"),
                   help="which weights --weight-bits quantizes: all block weights, the MLPs "
                        "and experts (attention and router stay 16-bit), or the routed "
                        "experts alone (default: the checkpoint's where it ships FP4, else "
                        "all) (deployment.quantized)")
    p.add_argument("--kv-bits", type=int, default=16, choices=(16, 8),
                   help="bits per cached K/V value (default 16)")
    p.add_argument("--offload", default="0", metavar="FRACTION",
                   help="fraction of the weights kept in host memory and streamed over the "
                        "GPU's host link every pass, or 'auto' (the fewest whole layers "
                        "that make the rest fit) (default 0)")
    p.add_argument("--pageable", action="store_true",
                   help="offloaded weights sit in pageable host memory (Hugging Face "
                        "Accelerate; DeepSpeed's default; FlexGen --pin-weight 0), which "
                        "streams slower than the pinned memory vLLM's --cpu-offload-gb uses "
                        "(deployment.offload_pin_memory: false)")
    p.add_argument("--tp-link", help="link id for TP all-reduces (default: the GPU's "
                                     "scale_up_link, or its node_link when --tp exceeds its "
                                     "gpus_per_node and the ring spans servers)")
    p.add_argument("--pp-link", help="link id for pipeline hops (default: the GPU's node_link)")
    p.add_argument("--catalog", action="append", metavar="FILE", type=file_path,
                   help="extra catalog YAML file adding or overriding ids (repeatable)")
    add_timing_flags(p)
    p.add_argument("--fp8-scales", choices=FP8_SCALES,
                   help="how FP8 W8A8 scales its values, which picks the measured FP8 "
                        "kernel (default the model's: per-tensor with static activation "
                        "scales, or block-scaled for DeepSeek-V3 and Qwen3-235B-A22B's "
                        "checkpoints; dynamic = activation scales computed every pass, a "
                        "16-bit checkpoint quantized when loaded, vLLM's --quantization "
                        "fp8) (deployment.fp8_scales)")


def build_cost(args: argparse.Namespace, catalog: Catalog, kv_tokens: int) -> CostModel:
    """The cost model for the deployment the flags describe, refusing one that cannot run."""
    for name in ("tp", "pp", "ep"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name}: must be >= 1, got {getattr(args, name)}")
    offload = offload_value(args.offload)
    catalog.framework(args.framework)  # an unknown framework lists the known ones
    model = catalog.model(args.model).servable("--model")
    bits, dtype = model.precision(args.weight_bits, args.compute_dtype)
    dep = Deployment(
        model=model,
        gpu=catalog.gpu(args.gpu),
        tp=args.tp,
        pp=args.pp,
        ep=args.ep,
        weight_bits=bits,
        kv_bits=args.kv_bits,
        offload_fraction=offload,
        offload_pin_memory=not args.pageable,
        tp_link=catalog.link(args.tp_link) if args.tp_link is not None else None,
        pp_link=catalog.link(args.pp_link) if args.pp_link is not None else None,
        kv_tokens=kv_tokens,
        compute_dtype=dtype,
        fp8_scales=args.fp8_scales,
        timing=args.timing,
        framework=args.framework,
        fp4_format=args.fp4_format,
        quantized=args.quantized,
        moe_kernel=args.moe_kernel,
    )
    return CostModel(dep, catalog)


def run_step(args: argparse.Namespace) -> int:
    """Handler of ``specsim hw step``."""
    check_bounds(args, STEP_BOUNDS)
    tokens, keys, positions = args.tokens, None, args.tokens
    if args.tree is not None:
        widths = tree_widths(args.tree)
        tokens = tree_nodes(widths)
        positions = len(widths) + 1  # a tree's nodes take depth + 1 positions, not one each
        keys = [tree_attended_keys(widths, args.context)] * args.batch
    catalog = load_catalog(args.catalog)
    check_positions(catalog.model(args.model), args.context, positions)
    cost = build_cost(args, catalog, kv_tokens=args.batch * (args.context + tokens))
    pc = cost.pass_cost([tokens] * args.batch, [args.context] * args.batch, keys=keys)
    dep = cost.dep
    capacity = cost.kv_capacity_tokens()
    result = {
        "model": dep.model.id, "gpu": dep.gpu.id, "tp": dep.tp, "pp": dep.pp,
        "weight_bits": dep.weight_bits, "fp4_format": dep.fp4,
        "quantized": dep.quantized_scope, "kv_bits": dep.kv_bits,
        "compute_dtype": dep.dtype, "fp8_scales": dep.fp8_scaling, "timing": dep.timing,
        "framework": dep.framework,
        "offload_fraction": cost.offload_fraction,
        "offload_pin_memory": dep.offload_pin_memory, "batch": args.batch,
        "context": args.context, "tokens": tokens, "tree": args.tree,
        **asdict(pc),
        "ridge_flop_per_byte": dep.gpu.ridge_flop_per_byte(dep.dtype),
        "kv_bytes_per_token": cost.kv_bytes_per_token,
        "kv_capacity_tokens": capacity,
        "kv_capacity_blocks": capacity // 16,
        "tp_link": cost.tp_link.id if dep.tp > 1 else None,
        "gpus_per_node": dep.gpu.gpus_per_node,
    }
    shape = dep.model.shape
    if shape.n_experts:  # MoE only: a dense model's record stays as it was
        result.update(ep=dep.ep, moe_kernel=dep.moe_kernel, n_gpus=dep.n_gpus,
                      attention_dp=dep.attention_dp,
                      n_experts=shape.n_experts, top_k=shape.top_k,
                      n_moe_layers=shape.n_moe_layers)
    else:
        del result["experts_touched"]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    ms = 1e3
    tree = f" (tree <{args.tree}>)" if args.tree is not None else ""
    ep = f", ep {dep.ep}" if dep.ep > 1 else ""
    weights = dep.weights_label(" weights", "-bit")
    print(f"{dep.model.id} on {dep.n_gpus} x {dep.gpu.id} (tp {dep.tp}, pp {dep.pp}{ep}, "
          f"{weights}, {dep.dtype} compute, {dep.kv_bits}-bit KV, offload "
          f"{cost.offload_fraction:g}): batch {args.batch} x {tokens} new tokens{tree} "
          f"over context {args.context}")
    print(f"  timing         {pc.note}")
    print(f"  pass           {pc.seconds * ms:9.3f} ms   ({pc.bound}-bound)")
    if pc.backend == "measured":
        terms = ", ".join(f"{k.removesuffix('_s')} {v * ms:.3f}" for k, v in pc.parts.items())
        print(f"  measured terms {terms} ms")
    sol = "   (speed of light at the datasheet peak)" if pc.backend == "measured" else ""
    print(f"  compute        {pc.compute_s * ms:9.3f} ms   {pc.flops:.3e} FLOPs{sol}")
    print(f"  memory         {pc.memory_s * ms:9.3f} ms   {pc.hbm_bytes:.3e} HBM bytes{sol}")
    spans = f", TP over {-(-dep.tp // dep.gpu.gpus_per_node)} servers" \
        if dep.tp > dep.gpu.gpus_per_node else ""
    links = [f"TP all-reduces over {cost.tp_link.id}{spans}"] if dep.tp > 1 else []
    if dep.attention_dp > 1:
        links.append(f"EP all-to-all over {cost.ep_link.id}")
    print(f"  communication  {pc.comm_s * ms:9.3f} ms"
          + (f"   ({', '.join(links)})" if links else ""))
    print(f"  host transfer  {pc.host_s * ms:9.3f} ms")
    print(f"  overhead       {pc.overhead_s * ms:9.3f} ms")
    if dep.pp > 1:
        stages = ", ".join(f"{s * ms:.3f}" for s in pc.stage_s)
        print(f"  stages         [{stages}] ms, hop {pc.hop_s * ms:.3f} ms")
    if shape.n_experts:
        dp = f", {dep.attention_dp} data-parallel attention groups" if dep.attention_dp > 1 \
            else ""
        n = args.batch * tokens
        print(f"  experts        {pc.experts_touched:.2f} of {shape.n_experts} routed experts "
              f"touched per MoE layer ({shape.n_moe_layers} layers, top-{shape.top_k}, "
              f"{n} token{'s' if n != 1 else ''}; ep {dep.ep}{dp})")
    print(f"  arithmetic intensity {pc.arithmetic_intensity:.2f} FLOP/byte "
          f"(ridge {result['ridge_flop_per_byte']:.0f} FLOP/byte at peak)")
    print(f"  KV cache: {cost.kv_bytes_per_token} bytes/token, capacity {capacity} tokens "
          f"({capacity // 16} blocks of 16)")
    return 0


def _release_term(name: str, value: float) -> str:
    """One of a framework release's own overheads, as ``hw list`` shows it."""
    if name == "act_passes":
        return f"{value:.1f} vectors/token/layer"
    if name == "step_s":
        return f"{value * 1e3:.3f} ms/pass"
    unit = {"tp_step_s": "per more TP GPU", "layer_s": "/layer", "seq_s": "/seq",
            "stream_seq_s": "/seq streaming"}[name]
    return f"{value * 1e6:.1f} us{'' if unit.startswith('/') else ' '}{unit}"


def _engine_memory(m) -> str:
    """A framework's own memory per GPU, as ``hw list`` shows it."""
    vectors = "/".join(f"{v:g}" for v in m.activation_vectors.values())
    degrees = "/".join(str(k) for k in m.activation_vectors)
    return (f"; own memory per GPU: {m.runtime_bytes / 2**30:.2f} GiB + activations "
            f"{vectors} hidden-wide vectors per budget token (TP {degrees})"
            + (f" + collective buffers {min(m.collective_bytes.values()) / 2**20:.0f}-"
               f"{max(m.collective_bytes.values()) / 2**20:.0f} MiB under TP"
               if m.collective_bytes else ""))


def run_list(args: argparse.Namespace) -> int:
    """Handler of ``specsim hw list``."""
    catalog = load_catalog(args.catalog)
    timing = {k: gpu_timing_data(v) for k, v in catalog.gpus.items()}
    if args.json:
        out = {
            "gpus": {k: {**v.model_dump(exclude={"id"}), "timing_data": timing[k]}
                     for k, v in catalog.gpus.items()},
            "links": {k: v.model_dump(exclude={"id"}) for k, v in catalog.links.items()},
            "frameworks": {k: v.model_dump(exclude={"id"})
                           for k, v in catalog.frameworks.items()},
            "models": {
                k: {**v.model_dump(exclude={"id": True, "config": _defaulted(v.config)},
                                   exclude_none=True),
                    "total_params": v.shape.total_params,
                    "streamed_params": v.shape.streamed_params,
                    "active_params": v.shape.active_params}
                for k, v in catalog.models.items()
            },
        }
        print(json.dumps(out, indent=2))
        return 0
    print("GPUs (dense 16-bit peak, memory bandwidth, capacity, eta_c/eta_m, overhead, $/h, "
          "GPUs per server):")
    for g in catalog.gpus.values():
        print(f"  {g.id:10s} {g.peak(g.default_dtype) / 1e12:6.0f} TFLOP/s "
              f"{g.hbm_bytes_per_s / 1e12:6.3f} TB/s {g.hbm_capacity_gib:5.0f} GiB  "
              f"{g.eta_compute:.2f}/{g.eta_memory:.2f}  {g.overhead_s * 1e3:.2f} ms  "
              f"${g.price_per_hour_usd:.2f}  {g.gpus_per_node}/node  {g.name}")
        t = timing[g.id]
        tables = "no measured tables" if t["tables"] is None else \
            f"measured tables {t['tables']}" + ("" if t["tables_here"] == "yes" else
                                                 " (not readable here: roofline)")
        print(f"  {'':10s} timing: {tables}; roofline {t['roofline']}: {t['source']}")
    print("Links (bandwidth per direction, per-message latency; all-reduce call + step "
          "latency and efficiency where calibrated):")
    for lk in catalog.links.values():
        co = lk.collective
        alpha = "" if co is None else \
            f"  call {co.call_s * 1e6:.1f} us + step {co.step_s * 1e6:.1f} us, eta {co.eta:.2f}"
        print(f"  {lk.id:12s} {lk.bytes_per_s / 1e9:7.2f} GB/s {lk.latency_s * 1e6:6.1f} us  "
              f"{lk.name}{alpha}")
    print("Frameworks (version, kernel tables, overhead per pass (+ per more TP GPU) + per "
          "layer + per sequence):")
    for f in catalog.frameworks.values():
        print(f"  {f.id:12s} {f.name} {f.version}  tables {f.tables or 'none'}  "
              f"{f.step_s * 1e3:.3f} ms"
              + (f" (+ {f.tp_step_s * 1e6:.1f} us per more TP GPU)" if f.tp_step_s else "")
              + f" + {f.layer_s * 1e6:.1f} us/layer + {f.seq_s * 1e6:.1f} us/seq"
              + (f" (+ {f.stream_seq_s * 1e6:.1f} us/seq streaming)" if f.stream_seq_s else "")
              + (f"; elementwise kernels {f.act_passes:.1f} hidden-wide vectors/token/layer"
                 if f.act_passes else "")
              + (f"; offload copies at {f.host_efficiency:.2f} of the host link's efficiency"
                 if f.host_efficiency != 1.0 else "")
              + (_engine_memory(f.memory) if f.memory is not None else "")
              + f"; scheduler: {f.max_num_batched_tokens} tokens/step, "
              + ("chunked" if f.chunked_prefill else "whole") + " prompts, "
              + ("with the decodes" if f.mixed_prefill else "prefill batches alone")
              + ("" if f.scheduler_source else " (SpecSim's defaults, not sourced)"))
        for release, own in f.versions.items():
            fields = own.model_dump(exclude={"source"}, exclude_none=True)
            own_terms = ", ".join(_release_term(k, v) for k, v in fields.items())
            print(f"  {'':12s} {f.id}@{release}: "
                  + (f"its own {own_terms} (the rest as above)" if fields
                     else "no overheads of its own (as above)"))
    print("Models (params total / read per pass (MoE: active per token), layers, heads/KV "
          "heads, vocab, tied):")
    for m in catalog.models.values():
        s, c = m.shape, m.config
        read = s.active_params if s.n_experts else s.streamed_params
        moe = f"  {s.n_moe_layers} MoE layers, top-{s.top_k} of {s.n_experts} experts" \
            if s.n_experts else ""
        mla = ", MLA" if c.mla else ""
        heads = f"{c.num_attention_heads:3d}/{c.kv_heads:<3d} heads" \
            if c.num_attention_heads else f"{c.num_heads:3d} Medusa heads"
        print(f"  {m.id:15s} {s.total_params / 1e9:8.3f}B / {read / 1e9:8.3f}B "
              f"{c.num_hidden_layers:3d} layers {heads} "
              f"vocab {c.vocab_size:6d} {'tied' if c.tied else 'untied'}{moe}{mla}")
    return 0


# MoE / MLA config fields with non-null defaults: listed only where a config sets them
_MOE_DEFAULTED = ("first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
                  "mlp_only_layers", "num_nextn_predict_layers", "mtp_module")


def _defaulted(config) -> set[str]:
    """The MoE / MLA fields a model config leaves at their defaults (left out of --json)."""
    return {f for f in _MOE_DEFAULTED if f not in config.model_fields_set}
