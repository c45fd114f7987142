"""Fitting a framework's speculative overheads to speculative runs (category E).

A field is ``frameworks.<id>.speculation.<name>`` with ``<name>`` one of ``step_s``,
``seq_s``, ``tree_s`` or ``draft_step_s.<method>`` (``hardware.catalog.SpecOverheads``);
``<id>`` may be ``<framework>@<release>`` for a release the entry lists (its block replaces
the entry's). :func:`fit_spec` moves them to minimise the log error of the *speedup* over the
rows marked ``fit`` -- ``scipy.optimize.least_squares`` within ``[0, 10 ms]``, the Cauchy loss
of ``specsim calibrate`` -- and reports the median |error| of the speedup and of the
speculative TPOT on the fit rows and on the held-out ones.

The speedup is fitted rather than the speculative TPOT: it is what SpecSim answers, and a
row's plain run is priced with the timing of categories A-D, whose own error (a GPU or
engine release a few percent faster than its tables) the overheads should not absorb.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.catalog import SPEC_METHODS, Catalog, SpecOverheads
from hardware.spec_cost import SpecRound, spec_round
from hardware.timing.spec_rows import SpecRow, predict_spec, spec_costs
from specdec.errors import UserError

__all__ = ["SpecFit", "spec_default_fields", "fit_spec", "apply_spec_fields",
           "spec_predictions", "SPEC_FIELD_NAMES"]

SPEC_FIELD_NAMES = ("step_s", "seq_s", "tree_s", "draft_step_s")
HIGH_S = 0.01  # no speculative overhead is fitted above 10 ms
SCALE_S = 1e-4  # the optimiser works in units of 0.1 ms
INSIDE = 1.0  # 0.1 ms: where a field at its bound starts
MIN_ROWS = 6  # fit rows a framework's terms need (as calibrate's MIN_ROWS_PER_TERM)
MIN_METHOD_ROWS = 3  # fit rows of one method, at two depths or more, for its per-pass term
ROBUST_SCALE = 0.1
LOSS = "cauchy"


def _parse(path: str) -> tuple[str, str, str | None]:
    """(framework key, field, method or None) of a speculation field path."""
    parts = path.split(".")
    if len(parts) >= 4 and parts[0] == "frameworks" and "speculation" in parts:
        i = parts.index("speculation")
        key = ".".join(parts[1:i])
        rest = parts[i + 1:]
        if key and rest and rest[0] in ("step_s", "seq_s", "tree_s") and len(rest) == 1:
            return key, rest[0], None
        if key and len(rest) == 2 and rest[0] == "draft_step_s" and rest[1] in SPEC_METHODS:
            return key, rest[0], rest[1]
    raise UserError(f"--fit: {path!r} is not a speculative field (frameworks.<id>."
                    f"speculation.<step_s|seq_s|tree_s>, frameworks.<id>.speculation."
                    f"draft_step_s.<{'|'.join(SPEC_METHODS)}>)")


def is_spec_field(path: str) -> bool:
    """Whether ``path`` names a speculative overhead (``frameworks.<id>.speculation...``)."""
    return ".speculation." in path and path.startswith("frameworks.")


def _block(catalog: Catalog, key: str) -> SpecOverheads:
    spec = catalog.framework(key)
    return spec.speculation or SpecOverheads(source="specsim calibrate")


def current_spec(catalog: Catalog, path: str) -> float:
    """The catalog's value of a speculative field (0 where the block has none)."""
    key, name, method = _parse(path)
    if method is not None:  # the method's own, else the block's default, as priced
        return spec_round(catalog.framework(key), method).draft_step_s
    return float(getattr(_block(catalog, key), name))


def apply_spec_fields(catalog: Catalog, paths: list[str], values, source: str | None = None
                      ) -> Catalog:
    """A copy of ``catalog`` with each speculative field set to its value (a framework or
    release without a ``speculation`` block gets one; ``source`` replaces its source)."""
    fws = dict(catalog.frameworks)
    blocks: dict[str, SpecOverheads] = {}
    for path, value in zip(paths, values, strict=True):
        key, name, method = _parse(path)
        block = blocks.get(key) or _block(catalog, key)
        if method is not None:
            block = block.model_copy(update={"draft_step_s": {**block.draft_step_s,
                                                              method: float(value)}})
        else:
            block = block.model_copy(update={name: float(value)})
        blocks[key] = block
    for key, block in blocks.items():
        if source is not None:
            block = block.model_copy(update={"source": source})
        base, _, release = key.partition("@")
        entry = fws[base]
        if release:
            own = entry.versions[release].model_copy(update={"speculation": block})
            fws[base] = entry.model_copy(update={"versions": {**entry.versions,
                                                              release: own}})
        else:
            fws[base] = entry.model_copy(update={"speculation": block})
    return Catalog(gpus=catalog.gpus, links=catalog.links, models=catalog.models,
                   frameworks=fws)


def spec_predictions(rows: list[SpecRow], catalog: Catalog, timing: str = "auto"):
    """[SpecPrediction] of ``rows`` (each row's line named in an error)."""
    out = []
    for r in rows:
        try:
            out.append(predict_spec(r, catalog, timing))
        except UserError as e:
            raise UserError(f"{r.path or 'measurements'}: line {r.line}: {e}") from None
    return out


def spec_default_fields(rows: list[SpecRow], catalog: Catalog) -> list[str]:
    """The speculative fields the fit rows pin down, per framework (or listed release)
    that prices them, where it has at least ``MIN_ROWS`` fit rows: its per-round
    ``step_s``; a per-pass ``draft_step_s`` for each method with at least
    ``MIN_METHOD_ROWS`` fit rows at two or more draft depths (the slope of a line through
    them; methods drafting on the CPU take no pass); ``tree_s`` where ``MIN_ROWS`` fit rows
    verify trees and as many chains; ``seq_s`` where as many run more than one sequence and
    as many one."""
    fields: list[str] = []
    keys = [catalog.framework_id(r.framework, r.framework_version) for r in rows]
    for key in sorted(set(keys)):
        mine = [r for r, k in zip(rows, keys, strict=True) if k == key and r.split == "fit"]
        if len(mine) < MIN_ROWS:
            continue
        fields.append(f"frameworks.{key}.speculation.step_s")
        for method in sorted({r.method for r in mine}):
            of = [r for r in mine if r.method == method]
            passes = {1 if method == "medusa" else r.steps for r in of}  # one_pass heads
            if len(of) >= MIN_METHOD_ROWS and len(passes) > 1 \
                    and method not in ("ngram", "suffix"):
                fields.append(f"frameworks.{key}.speculation.draft_step_s.{method}")
        trees = sum(r.tree for r in mine)
        if min(trees, len(mine) - trees) >= MIN_ROWS:
            fields.append(f"frameworks.{key}.speculation.tree_s")
        many = sum(r.batch > 1 for r in mine)
        if min(many, len(mine) - many) >= MIN_ROWS:
            fields.append(f"frameworks.{key}.speculation.seq_s")
    return fields


@dataclass(frozen=True)
class SpecFit:
    """A speculative fit: fields, values before and after, the rows and their predictions,
    and the median |error| of the speedup and of the speculative TPOT, fit and held out."""

    fields: list[str]
    before: list[float]
    values: list[float]
    catalog: Catalog
    rows: list[SpecRow]
    predicted: list
    speedup_fit: float
    speedup_test: float | None
    tpot_fit: float | None
    tpot_test: float | None
    unmoved: tuple[str, ...] = ()  # fields no fit row depends on: left as they were


def errors(rows: list[SpecRow], preds) -> tuple[np.ndarray, np.ndarray]:
    """(speedup error, speculative TPOT error; NaN where a row published no TPOT) per row:
    predicted / measured - 1."""
    speed = np.array([p.speedup / r.measured_speedup - 1.0 for r, p in zip(rows, preds,
                                                                             strict=True)])
    tpot = np.array([np.nan if r.measured_spec_tpot is None
                     else p.spec_tpot_s / r.measured_spec_tpot - 1.0
                     for r, p in zip(rows, preds, strict=True)])
    return speed, tpot


def _median(e: np.ndarray) -> float | None:
    e = e[~np.isnan(e)]
    return float(np.median(np.abs(e))) if e.size else None


def fit_spec(rows: list[SpecRow], catalog: Catalog, fields: list[str] | None = None,
             timing: str = "auto") -> SpecFit:
    """Fit ``fields`` (default :func:`spec_default_fields`) on the rows marked fit."""
    from scipy.optimize import least_squares

    fields = list(dict.fromkeys(fields or spec_default_fields(rows, catalog)))
    if not fields:
        raise UserError("calibrate: no speculative field to fit: give --fit "
                        "frameworks.<id>.speculation.<field>, or at least "
                        f"{MIN_ROWS} fit rows of one framework")
    for f in fields:
        _parse(f)
    train = [r for r in rows if r.split == "fit"]
    if not train:
        raise UserError("calibrate: no fit rows (split fit) to fit on")
    keys = [catalog.framework_id(r.framework, r.framework_version) for r in train]
    costs = [spec_costs(r, catalog, timing) for r in train]  # the spec-free parts, once
    before = [current_spec(catalog, f) for f in fields]
    meas = np.array([r.measured_speedup for r in train])

    def rounds(values) -> dict[tuple[str, str], SpecRound]:
        cat = apply_spec_fields(catalog, fields, values)
        return {(k, r.method): spec_round(cat.framework(k), r.method)
                for k, r in zip(keys, train, strict=True)}

    def residual(x):
        by = rounds(np.asarray(x) * SCALE_S)
        pred = np.array([predict_spec(r, catalog, timing,
                                      costs=(c[0], c[1], by[(k, r.method)])).speedup
                         for r, c, k in zip(train, costs, keys, strict=True)])
        return np.log(pred / meas)

    # a field no fit row depends on (a tree term without tree rows) keeps its value
    x_before = np.array(before) / SCALE_S
    base = residual(x_before)
    moves = []
    for i in range(len(fields)):
        y = x_before.copy()
        y[i] += INSIDE
        moves.append(bool(np.any(residual(y) != base)))
    free = [i for i, m in enumerate(moves) if m]
    values = list(before)
    if free:
        def partial(z):
            x = x_before.copy()
            x[free] = z
            return residual(x)

        # a field on a bound starts a little inside it (least_squares' steps stall there)
        z0 = np.clip(x_before[free], INSIDE, HIGH_S / SCALE_S - INSIDE)
        res = least_squares(partial, z0, bounds=(0.0, HIGH_S / SCALE_S), loss=LOSS,
                            f_scale=ROBUST_SCALE, max_nfev=400)
        for i, z in zip(free, res.x, strict=True):
            values[i] = float(z * SCALE_S)
    fitted = apply_spec_fields(catalog, fields, values)
    preds = spec_predictions(rows, fitted, timing)
    speed, tpot = errors(rows, preds)
    test = np.array([r.split == "test" for r in rows])
    return SpecFit(fields, before, values, fitted, rows, preds,
                   _median(speed[~test]) or 0.0, _median(speed[test]),
                   _median(tpot[~test]), _median(tpot[test]),
                   tuple(f for f, m in zip(fields, moves, strict=True) if not m))
