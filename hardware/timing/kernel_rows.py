"""Kernel-only pass times read from the measured tables, as measurement rows.

``specsim calibrate --tables GPU`` fits a GPU's roofline (and its server link's α-β
all-reduce) to what its measured kernel tables say a pass costs -- GEMMs, attention and
all-reduces only, no framework overhead -- over a fixed grid of models, TP degrees, weight
formats, batches, contexts, verify widths and prefill chunks. The roofline then prices the
models, dtypes and shapes the tables do not cover (int8/int4 weight-only, head widths the
tables lack) consistently with the ones they do. Rows alternate fit / test in grid order.
"""

from __future__ import annotations

from hardware.catalog import Catalog, FrameworkSpec
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.timing.aic import TablesUnavailable
from hardware.timing.rows import MeasuredRow
from specdec.errors import UserError

__all__ = ["KERNELS", "GRID_MODELS", "kernel_catalog", "kernel_rows", "table_fields"]

KERNELS = "kernels"  # the framework id of a zero-overhead framework over some tables
GRID_MODELS = {  # model -> TP degrees tried (those that do not fit are skipped)
    "llama-3.1-8b": (1, 2), "llama-3.1-70b": (1, 2, 4, 8), "llama-2-7b": (1,),
    "llama-2-13b": (1, 2), "llama-3.2-1b": (1,), "opt-6.7b": (1,),
}
BATCHES = (1, 4, 16, 64, 256)
CONTEXTS = (128, 1024, 4096)
TOKENS = (1, 5)
PREFILLS = ((1, 512), (1, 2048), (4, 512))  # (batch, prompt tokens) at context 0


def kernel_catalog(catalog: Catalog, framework: str) -> Catalog:
    """``catalog`` plus the zero-overhead framework ``kernels`` over ``framework``'s tables."""
    fw = catalog.framework(framework)
    if fw.tables is None:
        raise UserError(f"--framework: {framework} has no kernel tables")
    zero = FrameworkSpec(id=KERNELS, name=f"{fw.name} kernel tables only",
                         version=fw.version, tables=fw.tables, step_s=0.0, layer_s=0.0,
                         seq_s=0.0, act_passes=0.0,
                         source="kernel time only: no framework overhead")
    return Catalog(gpus=catalog.gpus, links=catalog.links, models=catalog.models,
                   frameworks={**catalog.frameworks, KERNELS: zero})


def kernel_rows(gpu_id: str, catalog: Catalog) -> list[MeasuredRow]:
    """The grid's step rows, each measured by the tables (``catalog`` from
    :func:`kernel_catalog`); points the tables or the GPU's memory cannot take are left out."""
    gpu = catalog.gpu(gpu_id)
    if gpu.tables is None:
        raise UserError(f"--tables: gpu {gpu_id} has no measured kernel tables")
    formats = [(16, None)] + ([(8, "fp8")] if "fp8" in gpu.peak_flops_per_s else [])
    rows: list[MeasuredRow] = []
    for model, tps in GRID_MODELS.items():
        for tp in tps:
            for bits, dtype in formats:
                shapes = [(b, c, t) for b in BATCHES for c in CONTEXTS for t in TOKENS]
                shapes += [(b, 0, p) for b, p in PREFILLS]
                for b, c, t in shapes:
                    row = _row(gpu_id, catalog, model, tp, bits, dtype, b, c, t, len(rows))
                    if row is not None:
                        rows.append(row)
    if not rows:
        raise UserError(f"--tables: the tables of {gpu_id} priced no grid point")
    return rows


def _row(gpu_id, catalog, model, tp, bits, dtype, b, c, t, k) -> MeasuredRow | None:
    spec = catalog.model(model)
    try:
        dep = Deployment(spec, catalog.gpu(gpu_id), tp=tp, weight_bits=bits, kv_bits=16,
                         compute_dtype=dtype, kv_tokens=b * (c + t), timing="measured",
                         framework=KERNELS)
        cost = CostModel(dep, catalog)
    except (UserError, TablesUnavailable):
        return None
    if tp > 1 and spec.config.kv_heads % tp and tp % spec.config.kv_heads:
        return None
    seconds = cost.uniform_pass_seconds(b, t, c)
    return MeasuredRow(
        line=k + 1, model=model, gpu=gpu_id, tp=tp, pp=1, weight_bits=bits, kv_bits=16,
        compute_dtype=dtype, batch=b, context=c, tokens=t, offload=0.0, measured=seconds,
        source=cost.timing.note, framework=KERNELS, split="fit" if k % 2 == 0 else "test",
        category="kernels")


def table_fields(gpu_id: str, catalog: Catalog, rows: list[MeasuredRow]) -> list[str]:
    """The roofline fields the kernel rows determine, and the TP link's α-β fields."""
    names = ["eta_weights", "weights_half_bytes", "eta_kv", "kv_half_seqs", "eta_compute",
             "corner"]
    if any(r.compute_dtype == "fp8" for r in rows):
        names.insert(1, "eta_fp8")
    fields = [f"gpus.{gpu_id}.roofline.{n}" for n in names]
    if any(r.tp > 1 for r in rows):
        link = catalog.gpu(gpu_id).scale_up_link
        fields += [f"links.{link}.collective.{n}" for n in ("call_s", "step_s", "eta")]
    return fields
