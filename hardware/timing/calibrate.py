"""Fitting timing parameters to measurements: the work behind ``specsim calibrate``.

A *field* is one catalog number, addressed by its path: ``gpus.<id>.roofline.<name>``
(a GPU's calibrated roofline), ``links.<id>.collective.<name>`` (a link's α-β all-reduce)
or ``frameworks.<id>.<name>`` (a framework's overheads). :func:`fit` moves the chosen fields
to minimise the log error ``log(predicted / measured)`` over the rows marked ``fit``
(``scipy.optimize.least_squares`` within each field's bounds, with the Cauchy loss: squared
up to a 10% error, logarithmic beyond, so that a few rows no parameter explains do not set
them all), one group of fields that share fit rows at a time, and reports the median
absolute error on those rows and on the held-out (``test``) ones.
:func:`overrides` turns the result into a user catalog (``deployment.catalog``) that
overrides only the fitted fields.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hardware.catalog import Catalog, FrameworkVersion, release_name_ok
from hardware.timing.roofline import collective_params, roofline_params, weight_format
from hardware.timing.rows import MeasuredRow
from hardware.timing.serving import predict, row_cost
from specdec.errors import UserError

__all__ = ["BOUNDS", "Fit", "apply_fields", "default_fields", "field_entry", "fit",
           "overrides", "predictions"]

# field name -> (low, high, typical size): bounds and the scale the optimiser works in
BOUNDS: dict[str, tuple[float, float, float]] = {
    "eta_weights": (0.05, 1.0, 1.0), "eta_fp8": (0.05, 1.0, 1.0),
    "eta_int8": (0.05, 1.0, 1.0), "eta_int4": (0.05, 1.0, 1.0),
    "eta_kv": (0.05, 1.0, 1.0), "kv_half_seqs": (0.0, 256.0, 1.0),
    "eta_compute": (0.05, 1.0, 1.0),
    "eta_host": (0.05, 1.0, 1.0), "eta_host_pageable": (0.05, 1.0, 1.0),
    "weights_half_bytes": (0.0, 1e9, 1e6),
    "corner": (1.0, 63.0, 1.0),
    "call_s": (0.0, 1e-3, 1e-5), "step_s": (0.0, 1.0, 1e-4), "eta": (0.05, 1.0, 1.0),
    "layer_s": (0.0, 1e-2, 1e-5), "seq_s": (0.0, 1e-2, 1e-5), "tp_step_s": (0.0, 1e-2, 1e-5),
    "stream_seq_s": (0.0, 1e-2, 1e-5), "act_passes": (0.0, 200.0, 10.0),
    "host_efficiency": (0.05, 1.0, 1.0),
}
_LINK_STEP = (0.0, 1e-4, 1e-6)  # a link's per-ring-step latency: smaller than a pass's
ROBUST_SCALE = 0.1  # log error where the robust loss departs from the squared error
LOSS = "cauchy"  # scipy's rho(z) = ln(1 + z): a row 50% off weighs a tenth of a 10% one
RESTARTS = 5  # least-squares runs per group at most, each from where the last stopped
MAX_NFEV = 200  # evaluations per run
SETTLED = 1e-4  # a run that moves no field by more than this (relative) ends the restarts
INSIDE = 0.01  # a field starting on a bound starts this far inside (in typical sizes)
MIN_ROWS_PER_TERM = 6  # a framework's per-layer / per-sequence terms need this many fit rows


def _bounds(path: str) -> tuple[float, float, float]:
    section, _, name = path.split(".", 2)
    name = name.rsplit(".", 1)[-1]
    if section == "links" and name == "step_s":
        return _LINK_STEP
    return BOUNDS[name]


def _parse(path: str) -> tuple[str, str, str | None, str]:
    """(section, id, nested block or None, field) of a field path; UserError if unknown.
    A framework release's field, ``frameworks.<id>@<release>.<name>``, has the id
    ``<id>@<release>`` (a release's name may hold dots)."""
    parts = path.split(".")
    if parts[0] == "frameworks" and "@" in path and len(parts) >= 3:
        parts = [parts[0], ".".join(parts[1:-1]), parts[-1]]
    key, _, release = parts[1].partition("@") if len(parts) > 1 else ("", "", "")
    ok = (len(parts) == 4 and (parts[0], parts[2]) in (("gpus", "roofline"),
                                                       ("links", "collective"))) \
        or (len(parts) == 3 and parts[0] == "frameworks" and bool(key)
            and ("@" not in parts[1]
                 or (release_name_ok(release) and parts[2] in _RELEASE_FIELDS)))
    if not ok or parts[-1] not in BOUNDS:
        raise UserError(
            f"--fit: {path!r} is not a fittable field (gpus.<id>.roofline.<name>, "
            f"links.<id>.collective.<name>, frameworks.<id>.<name>, "
            f"frameworks.<id>@<release>.<{'|'.join(_RELEASE_FIELDS)}>; names: "
            f"{', '.join(BOUNDS)})")
    if len(parts) == 4:
        return parts[0], parts[1], parts[2], parts[3]
    return parts[0], parts[1], None, parts[2]


def field_entry(path: str) -> str:
    """The catalog entry a field path belongs to: a GPU's, link's or framework's id, or
    ``<framework>@<release>`` (UserError if the path is not a fittable field)."""
    return _parse(path)[1]


# what a framework release's own entry may override (hardware.catalog.FrameworkVersion)
_RELEASE_FIELDS = tuple(f for f in FrameworkVersion.model_fields if f != "source")


def _framework_value(catalog: Catalog, key: str, name: str) -> float:
    """A framework field as ``key`` (``<id>`` or ``<id>@<release>``) prices it: a release
    the entry does not list yet has the entry's own values."""
    base, _, release = key.partition("@")
    spec = catalog.framework(base)
    if release in spec.versions:
        spec = catalog.framework(key)
    return float(getattr(spec, name))


def current(catalog: Catalog, path: str) -> float:
    """The catalog's value of a field (a GPU's or link's defaults when it has no block)."""
    section, key, block, name = _parse(path)
    if section == "gpus":
        return float(getattr(roofline_params(catalog.gpu(key)), name))
    if section == "links":
        return float(getattr(collective_params(catalog.link(key)), name))
    return _framework_value(catalog, key, name)


def apply_fields(catalog: Catalog, paths: list[str], values) -> Catalog:
    """A copy of ``catalog`` with each field of ``paths`` set to its value."""
    gpus, links, fws = dict(catalog.gpus), dict(catalog.links), dict(catalog.frameworks)
    for path, value in zip(paths, values, strict=True):
        section, key, _, name = _parse(path)
        if section == "gpus":
            g = gpus[key]
            rp = roofline_params(g).model_copy(update={name: float(value), "calibrated": True})
            gpus[key] = g.model_copy(update={"roofline": rp})
        elif section == "links":
            lk = links[key]
            co = collective_params(lk).model_copy(update={name: float(value),
                                                          "calibrated": True})
            links[key] = lk.model_copy(update={"collective": co})
        elif "@" in key:  # a release's own value (an entry for it made if it has none)
            base, _, release = key.partition("@")
            spec = fws[base]
            own = spec.versions.get(release) or FrameworkVersion(source="specsim calibrate")
            own = own.model_copy(update={name: float(value)})
            fws[base] = spec.model_copy(update={"versions": {**spec.versions, release: own}})
        else:
            fws[key] = fws[key].model_copy(update={name: float(value)})
    return Catalog(gpus=gpus, links=links, models=catalog.models, frameworks=fws)


def predictions(rows: list[MeasuredRow], catalog: Catalog, timing: str = "auto"):
    """(predicted values, the backend that priced each row) for ``rows``."""
    pred, backends = [], []
    for r in rows:
        try:
            cost = row_cost(r, catalog, timing)
            pred.append(predict(r, cost))
        except UserError as e:  # a row that cannot be priced: say which
            raise UserError(f"{r.path or 'measurements'}: line {r.line}: {e}") from None
        backends.append(cost.backend)
    return np.asarray(pred), backends


def _bulk(row: MeasuredRow) -> bool:
    """Whether a row's passes are mostly prompt tokens, many more tokens than sequences
    (static-batch, max-load, TTFT and multi-token step rows): a heuristic for the rows that
    pin a per-token cost apart from a per-sequence one. A TPOT row's steps are mostly
    decodes, one token per sequence, where the two nearly coincide (the prompts packed
    into them separate them a little)."""
    return row.metric in ("max_load_tokens_per_s", "tokens_per_s_per_gpu", "ttft_s") \
        or (row.metric == "step_s" and row.tokens > 1)


def default_fields(rows: list[MeasuredRow], catalog: Catalog, timing: str = "auto"
                   ) -> list[str]:
    """The fields the rows can pin down: every framework's (and, on the rows of a release
    its entry lists under ``versions``, that release's) per-pass overhead (per layer,
    per sequence and per more tensor-parallel GPU where its fit rows -- at least
    ``MIN_ROWS_PER_TERM`` -- vary the model, the batch and the TP size; the last over the
    rows the kernel tables price only, since the TP link's call latency, which it would
    trade off with, is fitted on the rows the roofline prices), its elementwise kernels'
    ``act_passes`` where that many carry prompts in bulk over more than one model, and its
    streaming cost where that many rows stream and that many do not), and, for GPUs the
    roofline prices, the efficiencies of the formats, KV reads and host links they use,
    and the TP links' call latency."""
    fields: list[str] = []
    _, backends = predictions(rows, catalog, timing)
    by_tables = {id(r) for r, b in zip(rows, backends, strict=True) if b == "measured"}
    priced_by = [catalog.framework_id(r.framework, r.framework_version) for r in rows]
    for fw in sorted(set(priced_by)):  # each framework, and each release it lists apart
        mine = [r for r, key in zip(rows, priced_by, strict=True)
                if key == fw and r.split == "fit"]
        if not mine:
            continue
        fields.append(f"frameworks.{fw}.step_s")
        if len(mine) < MIN_ROWS_PER_TERM:  # too few rows for more than one overhead term
            continue
        if len({catalog.model(r.model).config.num_hidden_layers for r in mine}) > 1:
            fields.append(f"frameworks.{fw}.layer_s")
        if len({r.batch for r in mine}) > 1:
            fields.append(f"frameworks.{fw}.seq_s")
        if len({r.tp for r in mine if id(r) in by_tables}) > 1:
            fields.append(f"frameworks.{fw}.tp_step_s")
        bulk = [r for r in mine if _bulk(r)]
        shapes = {(m.config.num_hidden_layers, m.shape.hidden)
                  for m in (catalog.model(r.model) for r in bulk)}
        if len(bulk) >= MIN_ROWS_PER_TERM and len(shapes) > 1:  # layers x hidden vary
            fields.append(f"frameworks.{fw}.act_passes")
        streamed = sum(r.streaming for r in mine)
        if min(streamed, len(mine) - streamed) >= MIN_ROWS_PER_TERM:
            fields.append(f"frameworks.{fw}.stream_seq_s")
    for r, backend in zip(rows, backends, strict=True):
        if backend != "roofline" or r.split != "fit":
            continue
        gpu = catalog.gpu(r.gpu)
        dtype = r.compute_dtype or gpu.default_dtype
        fmt = weight_format(r.weight_bits, dtype)
        # FP4 W4A4 streams at eta_fp4, absent eta_fp8 (roofline.py): no GPU sets eta_fp4,
        # which is not a fittable field, so eta_fp8 is the field such a row pins
        name = {"w16": "eta_weights", "fp8": "eta_fp8", "int8": "eta_int8",
                "int4": "eta_int4", "fp4": "eta_fp8"}[fmt]
        fields.append(f"gpus.{gpu.id}.roofline.{name}")
        if r.offload:
            host = "eta_host" if r.pin_memory else "eta_host_pageable"
            fields.append(f"gpus.{gpu.id}.roofline.{host}")
        if r.tp > 1:
            link = gpu.node_link if r.tp > gpu.gpus_per_node else gpu.scale_up_link
            fields.append(f"links.{link}.collective.call_s")
    return list(dict.fromkeys(fields))


@dataclass(frozen=True)
class Fit:
    """A fit's fields, values before and after, and its errors (median |relative|)."""

    fields: list[str]
    before: list[float]
    values: list[float]
    fit_error: float
    test_error: float | None
    catalog: Catalog
    rows: list[MeasuredRow]
    predicted: np.ndarray
    backends: list[str]
    unmoved: tuple[str, ...] = ()  # fields no fit row depends on: left as they were
    unsettled: tuple[str, ...] = ()  # groups still moving after RESTARTS runs


def _median_abs(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.median(np.abs(pred / meas - 1.0)))


def _blocks(train, fields, catalog, timing, x, hi, scale):
    """The fields in groups that share no fit row, each with the rows it moves: fitted one
    group at a time, a field's value does not depend on fields it shares no measurement
    with (the joint problem is the sum of the groups'; one trust region over all of them
    stops where the worst-conditioned group does). A field's rows are those whose
    prediction a small step of it changes at the starting values (a field a max() hides
    there, e.g. a GPU-side efficiency under a slower host link, moves no row); a field that
    moves no row is left as it is."""
    base, _ = predictions(train, apply_fields(catalog, fields, x * scale), timing)
    moved = []
    for i in range(len(fields)):
        y = x.copy()
        step = 1e-3 * max(abs(x[i]), 1.0)
        y[i] = x[i] + step if x[i] + step <= hi[i] else x[i] - step
        pred, _ = predictions(train, apply_fields(catalog, fields, y * scale), timing)
        moved.append(set(np.flatnonzero(pred != base).tolist()))
    group = list(range(len(fields)))  # union-find over fields that move a common row

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    owner: dict[int, int] = {}
    for i, rows in enumerate(moved):
        for r in rows:
            if r in owner:
                group[root(i)] = root(owner[r])
            else:
                owner[r] = i
    blocks: dict[int, list[int]] = {}
    for i in range(len(fields)):
        if moved[i]:
            blocks.setdefault(root(i), []).append(i)
    return [(idx, sorted(set().union(*(moved[i] for i in idx)))) for idx in blocks.values()]


def _fit_block(train, fields, catalog, timing, x, block, rows_of, meas, lo, hi, scale):
    """Least squares over one group's fields on the rows they move, the rest held at x:
    (the values, whether the last run left them where it started)."""
    from scipy.optimize import least_squares

    mine = [train[r] for r in rows_of]
    target = meas[rows_of]
    names = [fields[i] for i in block]
    held = [f for i, f in enumerate(fields) if i not in block]
    held_values = [x[i] * scale[i] for i in range(len(fields)) if i not in block]
    base = apply_fields(catalog, held, held_values)

    def residuals(z):
        cat = apply_fields(base, names, z * scale[block])
        pred, _ = predictions(mine, cat, timing)
        return np.log(pred / target)

    # a robust loss on the log error: squared up to ~10%, growing only logarithmically
    # beyond, so a handful of rows the model cannot explain do not drag every parameter.
    # Where two terms trade off (a per-token and a per-sequence cost over decode rows) the
    # solver can stop on a flat stretch short of the minimum; it is restarted from where
    # it stopped until that no longer moves it, so a fit run again returns its result.
    # a start on a bound would stay there: the trust-region solver scales each step by the
    # distance to the bound, so a field shipped at its bound (a term fitted to 0) could
    # never leave it, whatever the rows. Start such a field a little inside (1% of its
    # typical size); where the rows want the bound, the fit returns to it.
    lo_z, hi_z = lo[block] / scale[block], hi[block] / scale[block]
    inside = INSIDE * np.minimum(1.0, hi_z - lo_z)
    z = np.clip(x[block], lo_z + inside, hi_z - inside)
    for _ in range(RESTARTS):
        res = least_squares(residuals, z, bounds=(lo_z, hi_z),
                            method="trf", loss=LOSS, f_scale=ROBUST_SCALE, diff_step=1e-4,
                            xtol=1e-10, ftol=1e-10, max_nfev=MAX_NFEV)
        moved = np.max(np.abs(res.x - z) / np.maximum(np.abs(z), 1e-3))
        z = res.x
        if moved < SETTLED:
            return z, True
    return z, False


def fit(rows: list[MeasuredRow], fields: list[str], catalog: Catalog,
        timing: str = "auto") -> Fit:
    """Least squares on log error over the ``fit`` rows (see the module notes), one group
    of fields that share rows at a time (:func:`_blocks`)."""
    if not fields:
        raise UserError("calibrate: nothing to fit (give --fit FIELD)")
    for f in fields:
        _parse(f)
    train = [r for r in rows if r.split == "fit"]
    if not train:
        raise UserError("calibrate: no rows with split 'fit' to fit on")
    meas = np.array([r.measured for r in train])
    lo, hi, scale = (np.array(v) for v in zip(*(_bounds(f) for f in fields), strict=True))
    before = [current(catalog, f) for f in fields]
    x = np.clip(before, lo, hi) / scale
    blocks = _blocks(train, fields, catalog, timing, x, hi / scale, scale)
    unsettled: list[str] = []
    for block, rows_of in blocks:
        x[block], settled = _fit_block(train, fields, catalog, timing, x, block, rows_of,
                                       meas, lo, hi, scale)
        if not settled:
            unsettled += [fields[i] for i in block]
    grouped = {i for block, _ in blocks for i in block}
    unmoved = tuple(f for i, f in enumerate(fields) if i not in grouped)
    values = [b if f in unmoved else v for f, b, v in zip(fields, before, x * scale,
                                                           strict=True)]
    fitted = apply_fields(catalog, fields, values)
    pred, backends = predictions(rows, fitted, timing)
    all_meas = np.array([r.measured for r in rows])
    is_test = np.array([r.split == "test" for r in rows])
    test = _median_abs(pred[is_test], all_meas[is_test]) if is_test.any() else None
    return Fit(fields, before, values, _median_abs(pred[~is_test], all_meas[~is_test]),
               test, fitted, rows, pred, backends, unmoved, tuple(unsettled))


def overrides(result: Fit, source: str) -> dict:
    """A user catalog (sections gpus / links / frameworks) with only the fitted fields
    (not the ``unmoved`` ones, which no fit row depends on).

    A GPU or link that had no calibrated block gets a whole one (its defaults plus the
    fitted values), since a block is either absent or complete; ``calibrated`` and
    ``source`` say where the numbers come from.
    """
    out: dict[str, dict] = {}
    fitted: dict[tuple[str, str], list[str]] = {}
    for path, value in zip(result.fields, result.values, strict=True):
        if path in result.unmoved:
            continue
        section, key, block, name = _parse(path)
        base, _, release = key.partition("@")
        entry = out.setdefault(section, {}).setdefault(base, {})
        if release:  # a framework release's own entry
            entry = entry.setdefault("versions", {}).setdefault(release, {})
        fitted.setdefault((section, key), []).append(name)
        if block is None:
            entry[name] = float(value)
            entry["source"] = source
            continue
        if block not in entry:
            spec = result.catalog.gpu(key) if section == "gpus" else result.catalog.link(key)
            entry[block] = {k: v for k, v in getattr(spec, block).model_dump().items()}
            entry[block]["was"] = entry[block]["source"]
        entry[block][name] = float(value)
        entry[block]["calibrated"] = True
    for (section, key), names in fitted.items():
        base, _, release = key.partition("@")
        entry = out[section][base]["versions"][release] if release else out[section][key]
        was = result.catalog.framework(base).versions.get(release) if release else None
        if was is not None and set(was.model_dump(exclude={"source"}, exclude_none=True)) \
                - set(names):  # a listed release keeps its other fields' source
            entry["source"] = f"{', '.join(names)} {source}; the other fields: {was.source}"
            continue
        block = next((b for b in ("roofline", "collective") if b in entry), None)
        if block is not None:
            was = entry[block].pop("was")
            rest = {k for k, v in entry[block].items()
                    if isinstance(v, float) and not isinstance(v, bool)} - set(names)
            entry[block]["source"] = f"{', '.join(names)} {source}" \
                + (f"; the other fields: {was}" if rest else "")
        else:
            entry["source"] = f"{', '.join(names)} {source}"
    return out
