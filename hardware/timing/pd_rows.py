"""Disaggregated-serving measurements: what ``specsim validate`` checks as category H.

A CSV of measured runs with a prefill pool and a decode pool (xPyD), one run a row with
its mean TTFT and TPOT. Columns (header names; all required but the precision columns,
``framework_version``, ``split``, ``category`` and ``notes``):

- ``model``, ``gpu``: catalog ids; ``framework``: a catalog framework id;
  ``framework_version``: the engine release the source states (empty: not stated; a
  release the framework's entry lists prices both pools with its overheads);
- ``weight_bits``, ``kv_bits``, ``compute_dtype``, ``fp8_scales`` (``tensor``, ``block``,
  ``dynamic`` or empty: the model's), ``fp4_format``, ``quantized``: the precision, as in
  :mod:`hardware.timing.rows`, the same in both pools;
- ``isl``, ``osl``: every request's prompt and output tokens; ``concurrency``: the
  client's requests in flight;
- ``prefill_workers``, ``prefill_tp``, ``prefill_ep``; ``decode_workers``, ``decode_tp``,
  ``decode_ep``: each pool's replicas and one replica's layout (``ep`` as in
  :mod:`hardware.timing.rows`: 1 splits every expert over the TP GPUs); ``decode_batch``:
  the sequences one decode replica runs;
- ``measured_ttft_s``, ``measured_tpot_s``: the run's mean TTFT and TPOT, seconds;
- ``source``, ``split`` (``fit`` or ``test``; empty: ``fit``), ``category``, ``notes``.

Every problem is one UserError line naming the file, the line and the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hardware.timing.rows import cell_int, cell_positive, precision_columns, read_table
from specdec.errors import UserError

__all__ = ["PdRow", "read_pd_rows", "PD_COLUMNS", "FP8_SCALES"]

_REQUIRED = ("model", "gpu", "framework", "weight_bits", "kv_bits", "isl", "osl",
             "concurrency", "prefill_workers", "prefill_tp", "prefill_ep", "decode_workers",
             "decode_tp", "decode_ep", "decode_batch", "measured_ttft_s", "measured_tpot_s",
             "source")
PD_COLUMNS = ("category", "model", "gpu", "framework", "framework_version", "weight_bits",
              "kv_bits", "compute_dtype", "fp8_scales", "fp4_format", "quantized", "isl",
              "osl", "concurrency", "prefill_workers", "prefill_tp", "prefill_ep",
              "decode_workers", "decode_tp", "decode_ep", "decode_batch", "measured_ttft_s",
              "measured_tpot_s", "split", "source", "notes")
FP8_SCALES = ("tensor", "block", "dynamic")


@dataclass(frozen=True)
class PdRow:
    """One disaggregated-serving run (see the module notes for the columns)."""

    line: int
    model: str
    gpu: str
    framework: str
    framework_version: str
    weight_bits: int
    kv_bits: int
    compute_dtype: str | None
    fp8_scales: str | None
    fp4_format: str | None
    quantized: str | None
    isl: int
    osl: int
    concurrency: int
    prefill_workers: int
    prefill_tp: int
    prefill_ep: int
    decode_workers: int
    decode_tp: int
    decode_ep: int
    decode_batch: int
    measured_ttft: float
    measured_tpot: float
    source: str
    split: str = "fit"
    category: str = "H"
    notes: str = ""
    path: str = ""


def read_pd_rows(path: str | Path) -> list[PdRow]:
    """The rows of a disaggregated-serving measurements CSV; one-line UserErrors."""
    return read_table(Path(path), _REQUIRED, PD_COLUMNS,
                      "a disaggregated-serving measurements file", _row)


def _row(path: Path, line: int, get: dict[str, str]) -> PdRow:
    where = f"{path}: line {line}"

    def integer(name: str, least: int) -> int:
        return cell_int(path, line, name, get.get(name, ""), least)

    def seconds(name: str) -> float:
        return cell_positive(path, line, name, get.get(name, ""))

    for name in ("model", "gpu", "framework", "source"):
        if not get.get(name):
            raise UserError(f"{where}: {name}: must not be empty")
    if "@" in get["framework"]:
        raise UserError(f"{where}: framework: {get['framework']!r}: give the engine alone "
                        f"here and its release in the framework_version column")
    split = get.get("split") or "fit"
    if split not in ("fit", "test"):
        raise UserError(f"{where}: split: must be fit or test, got {split!r}")
    scales = get.get("fp8_scales") or None
    if scales is not None and scales not in FP8_SCALES:
        raise UserError(f"{where}: fp8_scales: must be one of {', '.join(FP8_SCALES)} (or "
                        f"empty), got {scales!r}")
    weight_bits = integer("weight_bits", 1)
    fp4_format, quantized = precision_columns(path, line, get, weight_bits)
    osl = integer("osl", 2)  # a TPOT needs two output tokens
    return PdRow(
        line=line, model=get["model"], gpu=get["gpu"], framework=get["framework"],
        framework_version=get.get("framework_version", ""), weight_bits=weight_bits,
        kv_bits=integer("kv_bits", 1), compute_dtype=get.get("compute_dtype") or None,
        fp8_scales=scales, fp4_format=fp4_format, quantized=quantized,
        isl=integer("isl", 1), osl=osl, concurrency=integer("concurrency", 1),
        prefill_workers=integer("prefill_workers", 1), prefill_tp=integer("prefill_tp", 1),
        prefill_ep=integer("prefill_ep", 1), decode_workers=integer("decode_workers", 1),
        decode_tp=integer("decode_tp", 1), decode_ep=integer("decode_ep", 1),
        decode_batch=integer("decode_batch", 1),
        measured_ttft=seconds("measured_ttft_s"), measured_tpot=seconds("measured_tpot_s"),
        source=get["source"], split=split, category=get.get("category") or "H",
        notes=get.get("notes", ""), path=str(path))
