"""``specsim grid``: batch × context (or tree width × batch) speedup grids, CSV + heatmap."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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
from sim.drafters import METHODS
from sim.limits import MAX_GAMMA, MAX_GPUS, MAX_POINTS, MAX_SEQS, MAX_SIMULATED_CELLS, MAX_TOKENS
from specdec.errors import UserError

_HELP = """\
Where does speculation pay? For a target/draft pair on a GPU at acceptance rate alpha, a
grid over batch size x context (cached tokens per sequence) of the best gamma and its
speedup over plain decoding, every pass priced by the cost model and the acceptance from the
i.i.d. formula E(alpha, gamma) (the lecture's section 7 tables, from hardware/speedup.py).
Writes grid.csv (one row per cell: best_gamma, best_speedup, speedup_g1..gN, fits) and a
heatmap grid.png under --out. A grid of more than 200 rows prints a summary (counts and the
10 best rows) instead of every row; its heatmap leaves cells unlabelled past 400. Progress
goes to stderr (--no-progress: none).

--tree k,1,1,1 --contexts 1024 [--widths 1,2,3,4,5] instead makes a tree width x batch grid
at the one context --contexts gives (required with --tree)
(tokens per verify from the i.i.d. tree model with top-k coverage 1-(1-alpha)^(k^theta), or
measured values with --tokens-per-verify): tree_grid.csv and tree_grid.png.

Passes are priced with --timing (default auto: measured kernel tables where they cover the
GPU, framework and model, else the calibrated roofline; --timing paper gives the lecture's
numbers); --compute-dtype fp8 prices 8-bit FP8 W8A8 target and draft.

--simulate runs the engine instead: closed loop at a fixed concurrency = batch (all requests
at once, max_num_seqs = batch, one unchunked prefill, fixed short outputs), speedup = mean
TPOT without speculation / with each gamma.

example (the lecture's pattern on its paper GPU: ~1.74x at small batch, below 1x at
context 128 / batch 256 with gamma 4, best gamma falling as batch grows, context 1024
above 1.6x at batch 256):
  specsim grid --target llama-3-8b --draft llama-3.2-1b --gpu h100 --alpha 0.8 --timing paper
"""


BATCHES = "1,4,16,64,256,512"
PRINTED_ROWS = 200  # a grid with more rows prints a summary (its table is in grid.csv)
BEST_ROWS = 10  # rows the summary shows
CONTEXTS = "128,512,1024,2048,4096"
WIDTHS = "1,2,3,4,5"
BOUNDS = {"gamma_max": (1, MAX_GAMMA), "tp": (1, MAX_GPUS)}


def add_parser(subparsers) -> None:
    """Register ``specsim grid``."""
    p = subparsers.add_parser(
        "grid",
        description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", required=True, help="target model id (see 'specsim hw list')")
    p.add_argument("--draft", help="draft model id (required with --method draft_model, the "
                                   "default; not used by the other methods)")
    p.add_argument("--method", choices=METHODS, default="draft_model",
                   help="how the guesses are drafted, as a scenario's models.method: a draft "
                        "model (default), an EAGLE/EAGLE-3/MTP head built from the target, "
                        "Medusa heads (one per position of --gamma-max or the tree, all in "
                        "one pass), or n-gram/suffix lookup on the CPU (no GPU time; "
                        "simulated with proposal_rate 1)")
    p.add_argument("--gpu", required=True, help="GPU id")
    p.add_argument("--alpha", type=float, required=True, help="acceptance rate per guess, 0..1")
    p.add_argument("--batches", default=BATCHES,
                   help=f"batch sizes (comma list; default {BATCHES}) [1..{MAX_SEQS}]")
    p.add_argument("--contexts", default=None,
                   help=f"contexts in cached tokens (comma list; default {CONTEXTS}); with "
                        "--tree exactly one value, required")
    p.add_argument("--gamma-max", type=int, default=8, help="largest gamma tried (default 8)")
    p.add_argument("--tp", type=int, default=1, help="target tensor parallelism (default 1)")
    p.add_argument("--tree", help="tree template with one level k, e.g. k,1,1,1")
    p.add_argument("--widths", default=None,
                   help=f"values of k, with --tree only (default {WIDTHS})")
    p.add_argument("--theta", type=float, default=None,
                   help="top-k coverage exponent of the i.i.d. tree model, with --tree only "
                        "(default 1)")
    p.add_argument("--tokens-per-verify",
                   help="measured tokens per verify, one per width, with --tree only")
    p.add_argument("--simulate", action="store_true",
                   help="run the engine closed-loop at concurrency = batch (chains only)")
    p.add_argument("--catalog", action="append", metavar="FILE", type=file_path,
                   help="extra catalog YAML")
    add_timing_flags(p)
    p.add_argument("--out", default=None, help="output folder (default: runs/grid-<time>)")
    p.add_argument("--force", action="store_true",
                   help="replace --out if SpecSim wrote it (its .specsim-output marker "
                        "lists all it holds); any other folder is refused")
    p.add_argument("--json", action="store_true", help="print the grid as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    document_bounds(p, BOUNDS)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Build the grid, write CSV + heatmap, print it (an error naming the flag where a
    library check names its field)."""
    try:
        return _main(args)
    except UserError as err:
        raise as_flag_error(err) from None


def _main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from hardware.deployment import check_positions
    from reports import figures
    from reports.tables import json_records, write_table
    from sim.commands.bench import estimate
    from sim.output import check_out, default_run_dir, rebased, staged_folder
    from sim.studies.grid import make_pair

    if args.tree is None:
        given = [f for f, v in (("--widths", args.widths), ("--theta", args.theta),
                                ("--tokens-per-verify", args.tokens_per_verify)) if v is not None]
        if given:
            raise UserError(f"{given[0]}: only applies to a tree grid; add --tree (e.g. "
                            f"--tree k,1,1,1 --contexts 1024) or drop {given[0]}")
    elif args.contexts is None:
        raise UserError("--tree: a tree grid is at one context: give --contexts C (one value, "
                        "e.g. --contexts 1024)")
    check_bounds(args, BOUNDS)
    batches = int_list(args.batches, "--batches", minimum=1, maximum=MAX_SEQS)
    contexts = int_list(args.contexts or CONTEXTS, "--contexts", minimum=0, maximum=MAX_TOKENS)
    if not 0.0 <= args.alpha <= 1.0:
        raise UserError(f"--alpha: must be in [0, 1], got {args.alpha}")
    widths = None
    if args.tree is not None:
        widths = int_list(args.widths or WIDTHS, "--widths", minimum=1, maximum=MAX_GAMMA)
        from sim.studies.grid import parse_tree

        for _, tree in parse_tree(args.tree, widths):  # within a scenario's tree bounds
            tree_widths(",".join(map(str, tree)))
    cells = len(batches) * (len(widths) if widths else len(contexts))
    most = MAX_SIMULATED_CELLS if args.simulate else MAX_POINTS
    if cells > most:
        raise UserError(f"--batches/--contexts: the grid has {cells} cells; at most {most}"
                        + (" with --simulate (each runs the engine)" if args.simulate else ""))
    out = check_out(Path(args.out if args.out is not None else default_run_dir("grid")),
                    force=args.force)
    how = {"timing": args.timing, "framework": args.framework,
           "compute_dtype": args.compute_dtype}
    bits = {"weight_bits": 8, "draft_weight_bits": 8} if args.compute_dtype == "fp8" else {}
    # Every pass must fit the models' positions, as hw step and a scenario insist: a chain
    # verify at context C takes gamma_max + 1 new positions, a tree its depth + 1.
    new = len(args.tree.split(",")) + 1 if args.tree is not None else args.gamma_max + 1
    pair = make_pair(args.target, args.draft, args.gpu, tp=args.tp, catalog=args.catalog,
                     **bits, **how, method=args.method, heads=new - 1)  # Medusa: one per level
    drafting = [] if pair.draft is None else [pair.draft.cost.dep.model]
    for model in (pair.target.dep.model, *drafting):
        for ctx in contexts:
            try:
                check_positions(model, ctx, new)
            except UserError as e:
                raise UserError(f"--contexts {ctx}: {e}") from None
    drafter = args.draft if args.method == "draft_model" else args.method
    head = f"{args.target} + {drafter} on {args.gpu}" + (f" TP{args.tp}" if args.tp > 1
                                                             else "") \
        + f" ({pair.target.backend} timing)"
    if args.simulate and args.tree is None:
        # one wave of `batch` requests per cell and variant (none + each gamma)
        runs = sum(batches) * len(contexts) * (args.gamma_max + 1)
        line = estimate("speculative", runs, "specsim grid --simulate")
        if line is not None:
            print(line, file=sys.stderr)
    if args.tree is not None:
        if args.simulate:
            raise UserError("--simulate: only chain grids are simulated (drop --tree)")
        if len(contexts) != 1:
            raise UserError(f"--contexts: a tree grid takes one context, got {args.contexts!r}")
    bar = None

    def progress(k: int) -> None:
        # the bar starts with the first cell, after the checks made before it (--theta,
        # --tokens-per-verify): a refused grid is its one line, no bar before it
        nonlocal bar
        if bar is None:
            bar = tqdm(total=cells, desc="grid", unit="cell", file=sys.stderr,
                       disable=args.no_progress)
        bar.update(k)

    with staged_folder(out, "--out", args.force) as tmp:  # all of it, or nothing
        try:
            grid, stem, fig = _grid(args, pair, head, batches, contexts, widths, how, progress)
        finally:
            if bar is not None:
                bar.close()
        paths = rebased(write_table(grid, tmp / stem), tmp, out)
        png = rebased([figures.save(fig, tmp / f"{stem}.png")], tmp, out)[0]
    if args.json:
        rows = json_records(grid)
        print(json.dumps({"rows": rows, "files": [str(p) for p in [*paths, png]],
                          "timing": pair.target.backend, "timing_note": pair.target.timing.note,
                          "speculative_overheads": None if pair.spec is None
                          else pair.spec.note},
                         indent=2))
        return 0
    shown = grid.drop(columns=[c for c in grid.columns if c.startswith("speedup_g")])
    if len(shown) <= PRINTED_ROWS:
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    else:
        print(_summary(shown, paths[0]))
    spec = f"; {pair.spec.note}" if pair.spec is not None and pair.spec.params.any() else ""
    print(f"timing: {pair.target.timing.note}{spec}")
    print(f"table: {paths[0]}\nheatmap: {png}")
    return 0


def _summary(shown, table) -> str:
    """A grid past ``PRINTED_ROWS`` rows, summarised: its counts and its best rows."""
    key = "best_speedup" if "best_speedup" in shown.columns else "speedup"
    best = shown.sort_values(key, ascending=False, kind="stable").head(BEST_ROWS)
    fits = int(shown["fits"].sum())
    pays = int((shown[key] > 1.0).sum())
    return (f"{len(shown)} rows, past {PRINTED_ROWS}: the {len(best)} with the highest {key} "
            f"below, all of them in {table}\n"
            f"fit the GPU: {fits} of {len(shown)}; speculation pays ({key} > 1): {pays}\n"
            + best.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def _grid(args, pair, head, batches, contexts, widths, how, progress):
    """(the grid's table, its file stem, its heatmap) as the flags ask; ``progress(k)`` is
    told of each ``k`` cells finished."""
    from reports import figures
    from sim.studies.grid import chain_grid, simulate_grid, tree_grid

    if args.tree is not None:
        tokens = None
        if args.tokens_per_verify is not None:
            tokens = float_list(args.tokens_per_verify, "--tokens-per-verify")
        theta = 1.0 if args.theta is None else args.theta
        grid = tree_grid(pair, args.alpha, args.tree, widths, batches, contexts[0], theta,
                         tokens, progress)
        stem = "tree_grid"
        fig = figures.tree_heatmap(
            grid, f"{head}, tree <{args.tree}>, context {contexts[0]}",
            "tokens/verify: " + ("measured (given)" if tokens else
                                 f"i.i.d. α={args.alpha:g}, θ={theta:g}")
            + "; cost-model priced draft + verify.")
    else:
        if args.simulate:
            grid = simulate_grid(args.target, args.draft, args.gpu, args.alpha, batches,
                                 contexts, args.gamma_max, args.tp, **how, method=args.method,
                                 progress=progress)
            note = "Simulated closed loop at concurrency = batch; speedup = TPOT ratio."
        else:
            grid = chain_grid(pair, args.alpha, batches, contexts, args.gamma_max, progress)
            note = f"Analytic: E(α,γ) at α={args.alpha:g}, cost-model priced passes."
        stem = "grid"
        fig = figures.speedup_heatmap(grid, f"{head}, α = {args.alpha:g}: best speedup", note)
    return grid, stem, fig
