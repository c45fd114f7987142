"""``specsim speedup``: speculative-decoding speedup tables, analytic or priced on hardware."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from hardware import CostModel, Deployment, DraftSetup, load_catalog
from hardware.deployment import check_positions
from hardware.draft import check_colocated_memory, check_same_vocab, tree_nodes
from hardware.spec_cost import for_cost
from hardware.speedup import (
    analytic_table,
    best_analytic,
    best_chain,
    best_tree,
    chain_table,
    tree_table,
)
from sim.commands._lists import (
    as_flag_error,
    check_bounds,
    document_bounds,
    file_path,
    float_list,
    int_list,
    tree_widths,
)
from sim.commands._timing import add_timing_flags
from sim.drafters import CPU_METHODS, METHODS
from sim.limits import MAX_GAMMA, MAX_GPUS, MAX_SEQS, MAX_TOKENS
from specdec.errors import UserError

DESCRIPTION = """\
Two modes.

Analytic (lecture code 03 demo 2; Leviathan et al. Thm 3.8/3.11):
  specsim speedup --alpha 0.8 --c 0.1 [--gamma-max 8]
prints E(alpha, gamma), the wall-clock speedup E/(gamma*c + 1) and the arithmetic
multiplier for gamma = 1..N, and the optimal gamma (0 = do not speculate).

Hardware (code 03 demo 4, code 04 demo 5): every pass priced by the cost model at one
batch size and context, so verifying gamma+1 tokens may cost more than a decode pass:
  specsim speedup --target llama-3-8b --draft llama-3.2-1b --gpu h100 \\
      --batch 256 --context 128 --alpha 0.8
prints per gamma the verify/decode time ratio, the draft cost c (one draft pass over one
decode pass) and the speedup E * decode / (gamma draft passes + verify + the engine's
speculative overheads). Those overheads (rejection sampling, the proposer's inputs, per
draft pass, per sequence, tree building: the framework's, fitted on published speculative
runs, docs/timing.md) count in the draft cost c; the paper GPU has none.
Token trees: --tree gives the expansion widths <k1,...,km>; write k for the width to
sweep and list the widths with --widths, e.g. --tree k,1,1,1 --widths 1,5. Trees need the
tokens each verify yields per width (--tokens-per-verify, one value per width): these are
measurements (the lecture took 1.63 for width 1 and 2.34 for width 5 from its code 04
demo 2(b), tree expanded at level 1), not something the cost model can compute.
The draft's weights default to the target's --weight-bits (as a scenario's
deployment.draft_weight_bits); the lecture's section 7.3 trees pair an 8-bit Llama-3-70B
with a 16-bit draft: --weight-bits 8 --draft-weight-bits 16. The draft must share the
target's tokenizer (checked as equal vocab_size), and context + the tokens a pass adds must
stay within both models' max_position_embeddings.
The draft runs on the target's GPUs by default (one replica per GPU, serial with the
target); --draft-placement separate gives it GPUs of its own (still serial, no shared
memory). Passes are priced with --timing (default auto: measured kernel tables where they
cover the GPU, framework and model, else the calibrated roofline); the lecture's tables
come out exactly with --timing paper."""

ANALYTIC_ONLY = ("c",)
HARDWARE_ONLY = ("draft", "method", "gpu", "batch", "context", "tree", "widths",
                 "tokens_per_verify", "weight_bits", "kv_bits", "draft_weight_bits", "tp",
                 "draft_placement", "catalog", "timing", "framework", "compute_dtype")


# Ranges of the integer flags (nothing is clamped to a default; see sim.limits).
BOUNDS = {"gamma_max": (1, MAX_GAMMA), "tp": (1, MAX_GPUS), "batch": (1, MAX_SEQS),
          "context": (0, MAX_TOKENS)}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``specsim speedup``."""
    p = subparsers.add_parser(
        "speedup",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of both modes, and the handler (also used by ``specsim hw speedup``)."""
    p.add_argument("--alpha", type=float,
                   help="acceptance rate per guessed token, 0..1 (no default: required, "
                        "except for hardware trees)")
    p.add_argument("--c", type=float, help="analytic mode: draft pass time / target pass time "
                                           "(no default: required in analytic mode)")
    p.add_argument("--gamma-max", type=int, help="largest gamma in the table, >= 1 (default 8)")
    p.add_argument("--target", help="hardware mode: target model id or config.json path")
    p.add_argument("--draft", help="draft model id or config.json path; must have the "
                                   "target's vocab_size (shared tokenizer) (required with "
                                   "--target)")
    p.add_argument("--method", choices=METHODS,
                   help="hardware mode: how the guesses are drafted, as a scenario's "
                        "models.method (default draft_model: --draft drafts); eagle, eagle3 "
                        "and mtp build a head from the target, medusa builds one Medusa head "
                        "per position of the deepest chain or tree (one pass drafts them "
                        "all), ngram and suffix draft on the CPU (no GPU time)")
    p.add_argument("--gpu", help="GPU id (see 'specsim hw list') (required with --target)")
    p.add_argument("--batch", type=int,
                   help="sequences in the batch, >= 1 (no default: required with --target)")
    p.add_argument("--context", type=int,
                   help="cached tokens per sequence, >= 0 (no default: required with --target)")
    p.add_argument("--tp", type=int, help="target tensor parallelism, >= 1 (default 1)")
    p.add_argument("--weight-bits", type=int, choices=(16, 8, 4),
                   help="target weight bits (default: the precision the catalog says the "
                        "checkpoint ships in, else 16, as hw step)")
    p.add_argument("--draft-weight-bits", type=int, choices=(16, 8, 4),
                   help="draft weight bits (default: the target's --weight-bits, as a "
                        "scenario's deployment.draft_weight_bits; the lecture's section 7.3 "
                        "tables use a 16-bit draft: give 16)")
    p.add_argument("--kv-bits", type=int, choices=(16, 8), help="KV bits, both models "
                                                                "(default 16)")
    p.add_argument("--draft-placement", choices=("colocated", "separate"),
                   help="draft on the target's GPUs (default colocated) or on one GPU of "
                        "its own (separate)")
    p.add_argument("--tree", help="expansion widths k1,k2,...; 'k' marks the swept width "
                                  "(default: none, a chain table)")
    p.add_argument("--widths", help="values of k to sweep, e.g. 1,2,3,4,5 (needs a k in --tree)")
    p.add_argument("--tokens-per-verify", help="measured tokens per verify, one per width "
                                               "(required with --tree)")
    p.add_argument("--catalog", action="append", metavar="FILE", type=file_path,
                   help="extra catalog YAML file (repeatable; default: the shipped catalogs)")
    add_timing_flags(p, defaults=False)
    p.add_argument("--json", action="store_true", help="print a JSON object")
    document_bounds(p, BOUNDS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler: pick the mode from the flags, refuse mixtures with one line (naming the
    flag where a library check names its field)."""
    try:
        return _run(args)
    except UserError as err:
        raise as_flag_error(err) from None


def _run(args: argparse.Namespace) -> int:
    check_bounds(args, BOUNDS)
    if args.target is None:
        _refuse(args, HARDWARE_ONLY, "needs --target (hardware mode)")
        return _analytic(args)
    _refuse(args, ANALYTIC_ONLY, "is for the analytic mode; with --target c is computed")
    needed = ("draft",) if (args.method or "draft_model") == "draft_model" else ()
    if args.draft is not None and not needed:
        raise UserError(f"--draft {args.draft}: not used with --method {args.method} (its "
                        "drafter is built from the target); drop --draft")
    if args.method in CPU_METHODS:
        for flag, value in (("--draft-placement", args.draft_placement),
                            ("--draft-weight-bits", args.draft_weight_bits)):
            if value is not None:
                raise UserError(f"{flag} {value}: --method {args.method} drafts on the CPU "
                                f"(no draft model to place or quantise); drop {flag}")
    for name in (*needed, "gpu", "batch", "context"):
        if getattr(args, name) is None:
            raise UserError(f"--{name.replace('_', '-')}: required in hardware mode (--target)"
                            + (" with --method draft_model, the default" if name == "draft"
                               else ""))
    if args.tree is None:
        _refuse(args, ("widths", "tokens_per_verify"), "needs --tree")
        if args.alpha is None:
            raise UserError("--alpha: required for a chain table (or give --tree)")
    else:
        _refuse(args, ("alpha", "gamma_max"),
                "is not used with --tree (trees use --tokens-per-verify)")
    return _hardware(args)


def _refuse(args: argparse.Namespace, names: tuple[str, ...], why: str) -> None:
    for name in names:
        if getattr(args, name) is not None:
            raise UserError(f"--{name.replace('_', '-')} {why}")


def _analytic(args: argparse.Namespace) -> int:
    if args.alpha is None or args.c is None:
        raise UserError("analytic mode needs --alpha and --c (or give --target for hardware)")
    rows = analytic_table(args.alpha, args.c, 8 if args.gamma_max is None else args.gamma_max)
    best = best_analytic(args.alpha, args.c, rows)
    if args.json:
        print(json.dumps({"alpha": args.alpha, "c": args.c,
                          "rows": [asdict(r) for r in rows], "best": asdict(best)}, indent=2))
        return 0
    print(f"alpha {args.alpha:g}, c {args.c:g}")
    print("gamma  E(alpha,gamma)  speedup    ops")
    for r in rows:
        print(f"{r.gamma:5d}  {r.expected_tokens:14.3f}  {r.speedup:7.3f}  {r.ops:5.2f}")
    print(_best_line("gamma", best.gamma, best.speedup))
    return 0


def _hardware(args: argparse.Namespace) -> int:
    from sim.build import DraftCosts

    catalog = load_catalog(args.catalog)
    gpu = catalog.gpu(args.gpu)
    method = args.method or "draft_model"
    target_model = catalog.model(args.target).servable("--target")
    draft_model = catalog.model(args.draft).servable("--draft") if method == "draft_model" \
        else None
    if draft_model is not None:
        check_same_vocab(target_model, draft_model)
    kv_bits = 16 if args.kv_bits is None else args.kv_bits
    # the checkpoint's own precision (catalog) unless given, as hw step takes it
    weight_bits, compute_dtype = target_model.precision(args.weight_bits, args.compute_dtype)
    draft_bits = weight_bits if args.draft_weight_bits is None else args.draft_weight_bits
    tp = 1 if args.tp is None else args.tp
    placement = args.draft_placement or "colocated"
    trees, tokens = _trees(args) if args.tree is not None else ([], [])
    gamma_max = 8 if args.gamma_max is None else args.gamma_max
    new_max = max((tree_nodes(w) for _, w in trees), default=gamma_max + 1)
    # positions a sequence reaches: a chain's gamma drafts + the bonus token; a tree's depth + 1
    positions = max((len(w) + 1 for _, w in trees), default=gamma_max + 1)
    check_positions(target_model, args.context, positions)
    if draft_model is not None:
        check_positions(draft_model, args.context, positions)
    kv_tokens = args.batch * (args.context + new_max)
    catalog.framework(args.framework or "vllm")  # an unknown one lists the known ones
    timing = {"timing": args.timing or "auto", "framework": args.framework or "vllm"}
    target_dep = Deployment(target_model, gpu, tp=tp, weight_bits=weight_bits,
                            kv_bits=kv_bits, kv_tokens=kv_tokens,
                            compute_dtype=compute_dtype, **timing)
    target = CostModel(target_dep, catalog)
    make_cost = DraftCosts(catalog, gpu, draft_bits, kv_bits, compute_dtype, timing["timing"],
                           timing["framework"])
    if draft_model is not None:
        try:
            draft_cost = make_cost(draft_model)
        except UserError as err:
            raise UserError(
                f"draft {err} (asked for: target {target_model.id} tp {tp} on {gpu.id}, "
                f"draft {placement})"
            ) from None
        if placement == "colocated":
            draft = DraftSetup.colocated_with(draft_cost, target)
        else:
            draft = DraftSetup(draft_cost, placement="separate", replicas=1)
    else:
        from sim.studies.grid import drafter_setup

        # Medusa: a head for each position of the deepest chain or tree the table tries
        depth = max((len(w) for _, w in trees), default=gamma_max)
        draft = drafter_setup(method, target, None, make_cost, placement, heads=depth)
        draft_cost = None if draft is None else draft.cost
    head = {"target": target_dep.model.id, "method": method,
            "draft": None if draft is None else draft_cost.dep.model.id, "gpu": gpu.id,
            "batch": args.batch, "context": args.context,
            "draft_placement": None if draft is None else draft.placement, "tp": tp,
            "weight_bits": weight_bits, "draft_weight_bits": draft_bits, "kv_bits": kv_bits,
            "compute_dtype": target_dep.dtype, "timing": target.backend,
            "timing_note": target.timing.note,
            "draft_timing": None if draft is None else draft_cost.backend,
            "framework": target_dep.framework}
    check_colocated_memory(target, draft, kv_tokens)
    spec = for_cost(target, method)  # the engine's work around the passes (none on paper)
    head["speculative_overheads"] = spec.note
    if args.tree is None:
        rows = chain_table(target, draft, args.batch, args.context, args.alpha, gamma_max,
                           spec)
        best, key = best_chain(rows), "gamma"
        head["alpha"] = args.alpha
    else:
        rows = tree_table(target, draft, args.batch, args.context, trees, tokens, spec)
        best, key = best_tree(rows), "width"
    if args.json:
        print(json.dumps({**head, "decode_s": rows[0].decode_s,
                          "rows": [asdict(r) for r in rows], "best": asdict(best)}, indent=2))
        return 0
    drafter = f"{method} on the CPU (no GPU time)" if draft is None else \
        f"draft {head['draft']} ({draft_bits}-bit, {draft.placement})"
    print(f"{head['target']} ({weight_bits}-bit, tp {tp}) + {drafter} on {gpu.id}, "
          f"batch {args.batch}, context {args.context}"
          + (f", alpha {args.alpha:g}" if key == "gamma" else "")
          + f": decode pass {rows[0].decode_s * 1e3:.3f} ms")
    print(f"timing: {target.timing.note}"
          + ("" if draft is None or draft_cost.backend == target.backend else
             f"; draft: {draft_cost.timing.note}")
          + f"; draft ms include the {spec.note}")
    if key == "gamma":
        print("gamma  E(alpha,gamma)  verify ms  verify/decode  draft c  speedup")
        for r in rows:
            print(f"{r.gamma:5d}  {r.expected_tokens:14.3f}  {r.verify_s * 1e3:9.3f}  "
                  f"{r.verify_ratio:13.3f}  {r.c:7.3f}  {r.speedup:7.3f}")
    else:
        print("width  tree          nodes  tokens/verify  verify ms  verify/decode  draft c  "
              "speedup")
        for r in rows:
            shape = "<" + ",".join(map(str, r.tree)) + ">"
            print(f"{r.width:5d}  {shape:12s}  {r.nodes:5d}  {r.tokens_per_verify:13.3f}  "
                  f"{r.verify_s * 1e3:9.3f}  {r.verify_ratio:13.3f}  {r.c:7.3f}  "
                  f"{r.speedup:7.3f}")
    print(_best_line(key, getattr(best, key), best.speedup))
    return 0


def _best_line(key: str, value: int, speedup: float) -> str:
    if value == 0:
        return f"best: no speculation ({key} 0, speedup 1.000x)"
    return f"best: {key} {value}, speedup {speedup:.3f}x"


def _trees(args: argparse.Namespace) -> tuple[list[tuple[int, list[int]]], list[float]]:
    """(width, widths) pairs from --tree/--widths, and the --tokens-per-verify values."""
    if args.tokens_per_verify is None:
        raise UserError("--tokens-per-verify: required with --tree (measured, one per width)")
    tokens = float_list(args.tokens_per_verify, "--tokens-per-verify")
    parts = args.tree.split(",")
    if "k" in parts:
        if args.widths is None:
            raise UserError("--widths: required when --tree contains k (the swept width)")
        template = tree_widths(",".join("1" if p == "k" else p for p in parts))
        trees = [(w, [w if p == "k" else t for p, t in zip(parts, template, strict=True)])
                 for w in int_list(args.widths, "--widths", minimum=1, what="every width",
                                   maximum=MAX_GAMMA, max_count=MAX_GAMMA)]
        for _, widths in trees:
            tree_widths(",".join(map(str, widths)))
    else:
        if args.widths is not None:
            raise UserError("--widths needs a 'k' in --tree to mark the swept width")
        widths = tree_widths(args.tree)
        trees = [(widths[0], widths)]
    return trees, tokens
