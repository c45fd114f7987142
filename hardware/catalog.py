"""GPU, link and model catalogs: typed, frozen entries loaded and validated from YAML.

The shipped catalogs live in ``hardware/data/{gpus,links,models}.yaml`` (their headers
document every field and its unit). A user catalog file has the same layout -- a mapping
with any of the sections ``gpus``, ``links``, ``models`` -- and adds ids or overrides shipped
ones (e.g. to calibrate ``eta_memory`` for a real machine). An entry for an id already known
needs only the fields it changes (``gpus: {h100: {eta_memory: 0.7}}``); a model's ``config``
is replaced whole. Every problem is reported as one :class:`UserError` line naming the file
and the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from hardware.models import (
    ModelConfig,
    ModelShape,
    format_validation,
    load_hf_config,
    model_shape,
    read_utf8,
)
from specdec.errors import UserError

__all__ = ["Catalog", "GpuSpec", "LinkSpec", "ModelSpec", "load_catalog", "DATA_DIR"]

DATA_DIR = Path(__file__).parent / "data"
_SECTIONS = ("gpus", "links", "models")

Dtype = Literal["bf16", "fp16", "fp8", "int8"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuSpec(_Frozen):
    """One GPU type: peaks, memory, calibration constants, links and price (units in names)."""

    id: str
    name: str
    peak_flops_per_s: dict[Dtype, PositiveFloat] = Field(min_length=1)
    hbm_bytes_per_s: PositiveFloat
    hbm_capacity_gib: PositiveFloat
    eta_compute: float = Field(gt=0, le=1)
    eta_memory: float = Field(gt=0, le=1)
    overhead_s: float = Field(ge=0)
    host_link: str
    scale_up_link: str
    node_link: str
    gpus_per_node: PositiveInt
    price_per_hour_usd: float = Field(ge=0)
    source: str

    @property
    def hbm_capacity_bytes(self) -> int:
        """Device memory in bytes."""
        return int(self.hbm_capacity_gib * 2**30)

    def ridge_flop_per_byte(self, dtype: str = "bf16") -> float:
        """Peak FLOP/s over peak bytes/s: the roofline's ridge point (no efficiency factors)."""
        return self.peak(dtype) / self.hbm_bytes_per_s

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; a dtype the chip lacks is a UserError."""
        try:
            return self.peak_flops_per_s[dtype]
        except KeyError:
            have = ", ".join(self.peak_flops_per_s)
            raise UserError(f"gpu {self.id}: no {dtype} peak (has {have})") from None

    @property
    def default_dtype(self) -> str:
        """The 16-bit compute dtype: bf16 where the chip has it, else fp16 (T4)."""
        return "bf16" if "bf16" in self.peak_flops_per_s else "fp16"


class LinkSpec(_Frozen):
    """One interconnect: bandwidth per direction (bytes/s) and per-message latency (s)."""

    id: str
    name: str
    bytes_per_s: PositiveFloat
    latency_s: float = Field(ge=0)
    source: str


class ModelSpec(_Frozen):
    """One model: its id, where its config comes from, and the config itself."""

    id: str
    source: str
    config: ModelConfig
    # other names of the model: Hugging Face ids of the checkpoint and its variants with the
    # same architecture (instruct tunes), as `vllm serve` takes them
    aliases: tuple[str, ...] = ()

    @property
    def shape(self) -> ModelShape:
        """Parameter counts (computed on demand; cheap)."""
        return model_shape(self.config)


_SPEC_TYPES: dict[str, type[_Frozen]] = {"gpus": GpuSpec, "links": LinkSpec, "models": ModelSpec}


@dataclass(frozen=True)
class Catalog:
    """All known GPUs, links and models, by id."""

    gpus: dict[str, GpuSpec] = field(default_factory=dict)
    links: dict[str, LinkSpec] = field(default_factory=dict)
    models: dict[str, ModelSpec] = field(default_factory=dict)

    def gpu(self, gpu_id: str) -> GpuSpec:
        """The GPU ``gpu_id``; an unknown id is a UserError listing the known ones."""
        return _lookup("gpu", gpu_id, self.gpus)

    def link(self, link_id: str) -> LinkSpec:
        """The link ``link_id``; an unknown id is a UserError listing the known ones."""
        return _lookup("link", link_id, self.links)

    def model(self, model_id: str) -> ModelSpec:
        """The model ``model_id``, or one loaded from a HF ``config.json`` path.

        A value ending in ``.json`` is read as a Hugging Face config file (Llama or OPT
        family); anything else must be a catalog id.
        """
        if model_id.endswith(".json"):
            return ModelSpec(id=model_id, source=model_id, config=load_hf_config(model_id))
        if model_id in self.models:
            return self.models[model_id]
        by_alias = {a.lower(): m for m in self.models.values() for a in m.aliases}
        if model_id.lower() in by_alias:
            return by_alias[model_id.lower()]
        known = ", ".join(sorted(self.models))
        raise UserError(f"unknown model {model_id!r} (known: {known}; or give its Hugging "
                        "Face config.json path, or add it to a catalog file with "
                        "deployment.catalog)")


def _lookup(kind: str, key: str, table: dict[str, Any]) -> Any:
    try:
        return table[key]
    except KeyError:
        known = ", ".join(sorted(table))
        raise UserError(f"unknown {kind} {key!r} (known: {known})") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    text = read_utf8(path, "catalog file", "a catalog file must be UTF-8 YAML")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise UserError(f"{path}: invalid YAML{where}: {problem}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a catalog file must be a mapping with sections gpus/links/models")
    for key in raw:
        if key not in _SECTIONS:
            raise UserError(f"{path}: unknown section {key!r} (known: {', '.join(_SECTIONS)})")
    return raw


def _parse(path: Path, raw: dict[str, Any], tables: dict[str, dict[str, Any]]) -> None:
    """Validate each entry of ``raw`` into ``tables`` (later files override earlier ids)."""
    for section, entries in raw.items():
        if not isinstance(entries, dict):
            raise UserError(f"{path}: {section}: must map ids to entries, got {entries!r}")
        for entry_id, body in entries.items():
            where = f"{section}.{entry_id}"
            if not isinstance(entry_id, str) or not entry_id or entry_id != entry_id.strip():
                raise UserError(f"{path}: {section}: bad id {entry_id!r}")
            if not isinstance(body, dict):
                raise UserError(f"{path}: {where}: must be a mapping of fields, got {body!r}")
            if "id" in body:
                raise UserError(f"{path}: {where}.id: the id is the entry's key; remove the field")
            base = tables[section].get(entry_id)
            if base is not None:  # overriding a known id: only the fields given change
                body = {**base.model_dump(exclude={"id"}), **body}
            try:
                tables[section][entry_id] = _SPEC_TYPES[section](id=entry_id, **body)
            except ValidationError as err:
                raise UserError(format_validation(str(path), where, err)) from None


def _check_links(origin: dict[str, Path], tables: dict[str, dict[str, Any]]) -> None:
    """Every link a GPU names must exist (reported against the file that defined the GPU)."""
    for gpu in tables["gpus"].values():
        for attr in ("host_link", "scale_up_link", "node_link"):
            link_id = getattr(gpu, attr)
            if link_id not in tables["links"]:
                known = ", ".join(sorted(tables["links"]))
                raise UserError(
                    f"{origin[gpu.id]}: gpus.{gpu.id}.{attr}: unknown link {link_id!r} "
                    f"(known: {known})"
                )


def _load(paths: tuple[Path, ...]) -> Catalog:
    tables: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
    origin: dict[str, Path] = {}
    for path in paths:
        raw = _read_yaml(path)
        _parse(path, raw, tables)
        origin.update({gpu_id: path for gpu_id in raw.get("gpus") or {}})
    _check_links(origin, tables)
    return Catalog(**tables)


def load_catalog(extra: str | Path | Sequence[str | Path] | None = None) -> Catalog:
    """The shipped catalogs plus optional user catalog file(s), later files overriding ids.

    The shipped-only catalog is read once and cached (entries are frozen, so sharing is
    safe); user files are read on every call so edits take effect.
    """
    shipped = tuple(DATA_DIR / f"{s}.yaml" for s in _SECTIONS)
    if extra is None:
        extras: tuple[Path, ...] = ()
    elif isinstance(extra, (str, Path)):
        extras = (Path(extra),)
    else:
        extras = tuple(Path(p) for p in extra)
    if not extras:
        return _shipped(shipped)
    return _load(shipped + extras)


@lru_cache(maxsize=1)
def _shipped(paths: tuple[Path, ...]) -> Catalog:
    return _load(paths)
