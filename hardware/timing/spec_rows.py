"""Speculative-decoding measurements (validation category E): rows and their prediction.

A row is a published end-to-end run *with* speculation beside the same run *without* it:
``hardware/data/validation_spec.csv`` (and any CSV of the same columns a user gives
``specsim calibrate``). The published mean acceptance length is given to SpecSim, so a row
tests timing and engine behaviour alone, not acceptance. Columns:

- ``category`` (E), ``framework`` and ``framework_version`` (as in the other rows),
  ``model`` (the target, a catalog id), ``gpu``, ``tp``, ``ep``, ``weight_bits``,
  ``kv_bits``, ``compute_dtype`` (empty: the GPU's 16-bit dtype); optional
  ``fp4_format`` (``nvfp4``, ``mxfp4``: 4-bit weights as FP4), ``quantized`` (which of
  the target's weights ``weight_bits`` quantizes: ``all``, ``mlp``, ``experts``; empty:
  ``hardware.deployment.Deployment.quantized_scope``'s default) and ``draft_weight_bits``
  (an MTP module's or a head's bits; empty: the target's);
- ``method``: ``draft_model``, ``eagle``, ``eagle3``, ``mtp``, ``medusa``, ``ngram`` or
  ``suffix``; ``draft``: the draft model's catalog id for ``draft_model``, else the head's
  name (informational); ``draft_vocab``: an EAGLE-3 head's vocabulary (empty: 32000);
- ``shape``: ``chain:K`` (K drafted tokens per step) or
  ``tree:steps=S,topk=T,tokens=N`` (SGLang's EAGLE tree: S draft passes of T candidates
  per sequence after the first, N tokens verified per sequence, the root included);
- ``acceptance_length``: tokens per verify step, the bonus token included (vLLM's and
  SGLang's "acceptance length");
- ``load``: ``batch`` (``batch`` sequences decoding together, their prompts outside the
  measurement) or ``concurrency`` (a client keeping ``batch`` requests in flight, TPOT
  priced as the ``tpot_s`` rows of :mod:`hardware.timing.serving` are, the other requests'
  prompts inside the steps); ``context`` the prompt and ``output_tokens`` the generated
  tokens per request;
- ``metric``: ``tpot_s`` (seconds per output token of a request), ``tokens_per_s``
  (output tokens per second of the whole run) or ``speedup`` (only the ratio was
  published: ``measured_base`` 1); ``measured_base`` / ``measured_spec`` the run without
  and with speculation;
- ``split`` (``fit`` / ``test``), ``source``, ``notes``.

:func:`predict_spec` prices both runs: the plain one as a decode step (or a served TPOT) at
the mean context (prompt + half the output), the speculative one as an iteration -- the
draft's serial passes (``hardware.draft``), the verify pass over each sequence's drafted
tokens and its root, and what the engine spends around them (``hardware.spec_cost``, the
framework's overheads for the method) -- over ``acceptance_length`` tokens.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hardware.catalog import DRAFT_METHODS, Catalog, ModelSpec
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.draft import (
    DraftSetup,
    chain_draft_seconds,
    one_pass_seconds,
    tree_draft_seconds,
)
from hardware.heads import head_config, medusa_config
from hardware.models import read_utf8
from hardware.spec_cost import SpecRound, for_cost, serial_passes
from hardware.timing.rows import cell_int, cell_positive, precision_columns, read_table
from specdec.errors import UserError

__all__ = ["SPEC_COLUMNS", "SpecRow", "SpecPrediction", "read_spec_rows", "predict_spec",
           "spec_costs", "is_spec_csv"]

SPEC_COLUMNS = ("category", "framework", "framework_version", "model", "gpu", "tp", "ep",
                "weight_bits", "kv_bits", "compute_dtype", "fp4_format", "quantized",
                "draft_weight_bits", "method", "draft", "draft_vocab",
                "shape", "acceptance_length", "load", "batch", "context", "output_tokens",
                "metric", "measured_base", "measured_spec", "split", "source", "notes")
_REQUIRED = ("model", "gpu", "tp", "method", "shape", "acceptance_length", "load", "batch",
             "context", "output_tokens", "metric", "measured_base", "measured_spec", "source")
METHODS = DRAFT_METHODS
LOADS = ("batch", "concurrency")
SPEC_METRICS = ("tpot_s", "tokens_per_s", "speedup")
_TREE = re.compile(r"tree:steps=(\d+),topk=(\d+),tokens=(\d+)")


@dataclass(frozen=True)
class SpecRow:
    """One speculative run beside its plain twin (see the module notes)."""

    line: int
    model: str
    gpu: str
    tp: int
    method: str
    steps: int  # serial draft passes a round takes (K for a chain, S for a tree)
    topk: int  # candidates per sequence per draft pass after the first (1: a chain)
    verify_tokens: int  # tokens one sequence feeds the verify pass, its root included
    acceptance_length: float
    load: str
    batch: int
    context: int
    output_tokens: int
    metric: str
    measured_base: float
    measured_spec: float
    source: str
    shape: str = ""
    framework: str = "vllm"
    framework_version: str = ""
    ep: int = 1
    weight_bits: int = 16
    kv_bits: int = 16
    compute_dtype: str | None = None
    fp4_format: str | None = None
    quantized: str | None = None
    draft_weight_bits: int | None = None
    draft: str = ""
    draft_vocab: int | None = None
    split: str = "fit"
    category: str = "E"
    notes: str = ""
    path: str = ""

    @property
    def tree(self) -> bool:
        """Whether the round verifies a token tree (more than one candidate per level)."""
        return self.topk > 1

    @property
    def measured_speedup(self) -> float:
        """The published speedup: plain over speculative TPOT (the ratio of throughputs)."""
        if self.metric == "speedup":
            return self.measured_spec
        if self.metric == "tokens_per_s":
            return self.measured_spec / self.measured_base
        return self.measured_base / self.measured_spec

    @property
    def measured_spec_tpot(self) -> float | None:
        """The speculative run's seconds per output token of a request (None: a speedup
        alone was published)."""
        if self.metric == "speedup":
            return None
        if self.metric == "tokens_per_s":
            return self.batch / self.measured_spec
        return self.measured_spec


def is_spec_csv(path: str | Path) -> bool:
    """Whether a measurement CSV holds speculative rows (its header has
    ``acceptance_length``)."""
    text = read_utf8(Path(path), "measurements file", "a measurements file must be UTF-8 CSV")
    header = next(csv.reader(text.splitlines()[:1]), [])
    return "acceptance_length" in [h.strip() for h in header]


def read_spec_rows(path: str | Path) -> list[SpecRow]:
    """The rows of a speculative measurement CSV; one-line UserErrors naming the line."""
    return read_table(Path(path), _REQUIRED, SPEC_COLUMNS,
                      "a speculative measurements file", _row)


def _row(path: Path, line: int, get: dict[str, str]) -> SpecRow:
    where = f"{path}: line {line}"

    def integer(name: str, least: int, default: str | None = None) -> int:
        return cell_int(path, line, name, get.get(name) or (default or ""), least)

    def number(name: str) -> float:
        return cell_positive(path, line, name, get.get(name, ""))

    for name in ("model", "gpu", "source"):
        if not get.get(name):
            raise UserError(f"{where}: {name}: must not be empty")
    method = get["method"]
    if method not in METHODS:
        raise UserError(f"{where}: method: must be one of {', '.join(METHODS)}, got "
                        f"{method!r}")
    shape = get["shape"]
    if shape.startswith("chain:") and shape[6:].isdigit() and int(shape[6:]) >= 1:
        steps, topk, verify = int(shape[6:]), 1, int(shape[6:]) + 1
    elif (m := _TREE.fullmatch(shape)) is not None and int(m[1]) >= 1 and int(m[2]) >= 1 \
            and 2 <= int(m[3]) <= 1 + int(m[1]) * int(m[2]):
        steps, topk, verify = int(m[1]), int(m[2]), int(m[3])
    else:
        raise UserError(f"{where}: shape: 'chain:K' (K >= 1) or 'tree:steps=S,topk=T,"
                        f"tokens=N' (2 <= N <= 1 + S x T), got {shape!r}")
    al = number("acceptance_length")
    if not 1.0 <= al <= steps + 1:
        raise UserError(f"{where}: acceptance_length: a round of {steps} draft steps yields "
                        f"1..{steps + 1} tokens, got {al:g}")
    load = get["load"]
    if load not in LOADS:
        raise UserError(f"{where}: load: must be one of {', '.join(LOADS)}, got {load!r}")
    metric = get["metric"]
    if metric not in SPEC_METRICS:
        raise UserError(f"{where}: metric: must be one of {', '.join(SPEC_METRICS)}, got "
                        f"{metric!r}")
    base, spec = number("measured_base"), number("measured_spec")
    if metric == "speedup" and base != 1.0:
        raise UserError(f"{where}: measured_base: a speedup row gives 1, got {base:g}")
    split = get.get("split") or "fit"
    if split not in ("fit", "test"):
        raise UserError(f"{where}: split: must be fit or test, got {split!r}")
    framework = get.get("framework") or "vllm"
    if "@" in framework:
        raise UserError(f"{where}: framework: {framework!r}: give the engine alone here and "
                        f"its release in the framework_version column")
    vocab = get.get("draft_vocab") or ""
    if vocab and method != "eagle3":
        raise UserError(f"{where}: draft_vocab: only EAGLE-3 heads have their own "
                        f"vocabulary; method is {method}")
    if method == "draft_model" and not get.get("draft"):
        raise UserError(f"{where}: draft: give the draft model's catalog id for draft_model")
    weight_bits = integer("weight_bits", 1, "16")
    fp4_format, quantized = precision_columns(path, line, get, weight_bits)
    draft_bits = get.get("draft_weight_bits") or ""
    return SpecRow(
        line=line, model=get["model"], gpu=get["gpu"], tp=integer("tp", 1),
        method=method, steps=steps, topk=topk, verify_tokens=verify, acceptance_length=al,
        load=load, batch=integer("batch", 1), context=integer("context", 0),
        output_tokens=integer("output_tokens", 2), metric=metric, measured_base=base,
        measured_spec=spec, source=get["source"], shape=shape, framework=framework,
        framework_version=get.get("framework_version", ""), ep=integer("ep", 1, "1"),
        weight_bits=weight_bits, kv_bits=integer("kv_bits", 1, "16"),
        compute_dtype=get.get("compute_dtype") or None,
        fp4_format=fp4_format, quantized=quantized,
        draft_weight_bits=integer("draft_weight_bits", 1) if draft_bits else None,
        draft=get.get("draft", ""),
        draft_vocab=integer("draft_vocab", 1) if vocab else None, split=split,
        category=get.get("category") or "E", notes=get.get("notes", ""), path=str(path))


@dataclass(frozen=True)
class SpecPrediction:
    """Both runs of a row as SpecSim prices them: seconds per output token of a request
    without and with speculation, and the breakdown of one speculative round."""

    base_tpot_s: float
    spec_tpot_s: float
    draft_s: float
    verify_s: float
    round_s: float

    @property
    def speedup(self) -> float:
        return self.base_tpot_s / self.spec_tpot_s

    def metric(self, row: SpecRow) -> tuple[float, float]:
        """(plain, speculative) in the row's metric."""
        if row.metric == "tokens_per_s":
            return row.batch / self.base_tpot_s, row.batch / self.spec_tpot_s
        if row.metric == "speedup":
            return 1.0, self.speedup
        return self.base_tpot_s, self.spec_tpot_s


def spec_costs(row: SpecRow, catalog: Catalog, timing: str = "auto"
               ) -> tuple[CostModel, DraftSetup | None, SpecRound]:
    """The row's target cost model, its drafter (None: drafting on the CPU) and the
    framework's speculative overheads for its method."""
    framework = catalog.framework_id(row.framework, row.framework_version)
    target_spec = catalog.model(row.model)
    bits, dtype = target_spec.precision(row.weight_bits, row.compute_dtype)

    def deployment(model, tp: int, ep: int = 1, step_overhead: bool = True,
                   draft: bool = True) -> Deployment:
        """The target's deployment, or with ``draft`` a drafter's on the same GPUs: its
        own ``draft_weight_bits`` where the row gives them, the target's precision else
        (the target's FP4 format and quantized scope are the target's alone)."""
        b = row.draft_weight_bits if draft and row.draft_weight_bits else bits
        own = not draft or b == bits
        return Deployment(model=model, gpu=catalog.gpu(row.gpu), tp=tp, ep=ep,
                          weight_bits=b, kv_bits=row.kv_bits,
                          compute_dtype=dtype if own and b in (4, 8) else None,
                          fp4_format=row.fp4_format if own else None,
                          quantized=row.quantized if not draft else None,
                          timing=timing, framework=framework, step_overhead=step_overhead)

    target = CostModel(deployment(target_spec, row.tp, row.ep, draft=False), catalog)
    spec = for_cost(target, row.method)
    if row.method in ("ngram", "suffix"):
        return target, None, spec
    if row.method == "draft_model":
        draft = CostModel(deployment(catalog.model(row.draft), 1, step_overhead=False),
                          catalog)
        return target, DraftSetup.colocated_with(draft, target), spec
    config = target_spec.config
    if row.method == "medusa":
        heads = ModelSpec(id=f"{target_spec.id}-medusa", source="Medusa heads",
                          config=medusa_config(config, row.steps))
        cost = CostModel(deployment(heads, 1, step_overhead=False), catalog)
        return target, DraftSetup.colocated_with(cost, target, one_pass=True), spec
    vocab = (row.draft_vocab or 32000) if row.method == "eagle3" else None
    head = ModelSpec(id=f"{target_spec.id}-{row.method}", source=f"{row.method} head",
                     config=head_config(config, row.method, 1, vocab))
    if row.method == "mtp" and head.config.routed_experts:  # an MoE module, sharded
        cost = CostModel(deployment(head, row.tp, row.ep, step_overhead=False), catalog)
        return target, DraftSetup(cost=cost, placement="colocated"), spec
    cost = CostModel(deployment(head, 1, step_overhead=False), catalog)
    return target, DraftSetup.colocated_with(cost, target), spec


def predict_spec(row: SpecRow, catalog: Catalog, timing: str = "auto",
                 costs=None) -> SpecPrediction:
    """Both runs of ``row`` priced (``costs``: :func:`spec_costs`' answer, when the caller
    has it)."""
    from hardware.timing.serving import served_tpot

    target, draft, spec = costs or spec_costs(row, catalog, timing)
    ctx, out = float(row.context), float(row.output_tokens)
    mean = ctx + out / 2
    v = row.verify_tokens

    priced: dict[float, tuple[float, float]] = {}

    def drafting(b: float) -> tuple[float, float]:
        """(the draft's serial passes, the engine's overheads) of a round of b sequences."""
        if b not in priced:
            n = max(int(round(b)), 1)
            if draft is None:
                draft_s = 0.0
            elif draft.one_pass:
                draft_s = one_pass_seconds(draft, n)
            elif row.tree:
                draft_s = tree_draft_seconds(draft, [row.topk] + [1] * (row.steps - 1),
                                             np.full(n, mean))
            else:
                draft_s = chain_draft_seconds(draft, row.steps, np.full(n, mean))
            priced[b] = draft_s, spec.seconds(b, serial_passes(draft, row.steps), row.tree)
        return priced[b]

    def iteration(x: float, b: float) -> float:
        """A speculative round of b sequences with ``x`` prompt tokens (x / ctx prompts) in
        its verify pass and in the draft's first pass."""
        prompts = x / ctx if x > 0 else 0.0
        verify = target.pass_seconds_sums(b * v + x, b * mean, v * b * mean,
                                          b * v * v + x * ctx, n_seqs=b + prompts)
        extra = 0.0
        if x > 0 and draft is not None and not draft.one_pass:
            extra = draft.cost.pass_seconds_sums(x, 0.0, 0.0, x * ctx, n_seqs=prompts)
        draft_s, round_s = drafting(b)
        return draft_s + round_s + verify + extra

    al = row.acceptance_length
    b = float(row.batch)
    if row.load == "concurrency":
        base = served_tpot(target, row.batch, row.context, row.output_tokens)
        spec_tpot = served_tpot(target, row.batch, row.context, row.output_tokens,
                                spec=(v, al, iteration))
    else:
        base = target.pass_seconds_sums(b, b * mean, b * mean, b, n_seqs=b)
        spec_tpot = iteration(0.0, b) / al
    verify_s = target.pass_seconds_sums(b * v, b * mean, v * b * mean, b * v * v, n_seqs=b)
    draft_s, round_s = drafting(b)
    return SpecPrediction(base, spec_tpot, draft_s, verify_s, round_s)
