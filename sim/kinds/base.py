"""The shared pieces of every scenario config: strict frozen models, bounded number types,
and the discriminated unions the registries are turned into."""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Annotated, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from sim.limits import (  # noqa: F401  (re-exported: the schema's bounds)
    MAX_COUNT,
    MAX_FLOAT,
    MAX_GAMMA,
    MAX_GPUS,
    MAX_RATE,
    MAX_RECV_INTERVAL,
    MAX_REPLICAS,
    MAX_REQUESTS,
    MAX_SECONDS,
    MAX_SEQS,
    MAX_TOKENS,
)


class DataFileMark:
    """Marks a field that names a data file (a trace, a CSV, a catalog): a relative path
    in a scenario file is read from that file's folder, else the repository root
    (``sim.loading.anchor_files`` makes it absolute when the file is read)."""


DATA_FILE = DataFileMark()
DataFile = Annotated[str, DATA_FILE, Field(min_length=1)]  # "" would read the folder

Pos = Annotated[float, Field(gt=0, le=MAX_FLOAT)]
NonNeg = Annotated[float, Field(ge=0, le=MAX_FLOAT)]
PosInt = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Prob = Annotated[float, Field(ge=0, le=1)]
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
NonNegSeconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
Rate = Annotated[float, Field(gt=0, le=MAX_RATE)]
Gamma = Annotated[int, Field(ge=1, le=MAX_GAMMA)]  # draft tokens, tree widths and depths
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Gpus = Annotated[int, Field(ge=1, le=MAX_GPUS)]
# SGLang's --scheduler-recv-interval: loops between reads of new requests (sim.recv)
RecvInterval = Annotated[int, Field(ge=1, le=MAX_RECV_INTERVAL)]
Rates = Annotated[list[Prob], Field(min_length=1, max_length=MAX_GAMMA)]  # one per position
Shape = Annotated[list[Gamma], Field(min_length=1, max_length=MAX_GAMMA)]  # widths per level
Vocab = Annotated[int, Field(ge=1, le=MAX_TOKENS)]


class Strict(BaseModel):
    """Frozen, unknown keys are errors (a typo must not be silently ignored), and types are
    strict: a bool is not a number (``rate_per_s: true`` is not 1.0), a string is neither
    a number nor a bool (``chunked_prefill: "yes"`` is not true), inf and nan are not
    numbers. Integers are accepted where a float is expected (YAML writes
    ``rate_per_s: 4``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


def tags_of(kind: type[BaseModel], key: str = "kind") -> tuple[str, ...]:
    """The literal values of ``kind``'s discriminator field ``key`` (one kind may stand for
    several values, e.g. a drafter for ``eagle`` and ``eagle3``)."""
    return typing.get_args(kind.model_fields[key].annotation)


def kind_union(kinds: Sequence[type[BaseModel]], key: str = "kind",
               default: str | None = None):
    """The discriminated union of ``kinds`` on their literal field ``key``.

    With ``default``, a mapping that leaves ``key`` out is read as that kind (the workload's
    ``arrivals`` defaults to poisson); without it the field is required.
    """
    tags = [t for k in kinds for t in tags_of(k, key)]
    if len(set(tags)) != len(tags):
        raise ValueError(f"registry: duplicate {key} values {tags}")
    if default is None:
        return Annotated[Union[tuple(kinds)], Field(discriminator=key)]  # noqa: UP007
    if any(len(tags_of(k, key)) != 1 for k in kinds):
        raise ValueError("registry: a union with a default takes one value per kind")

    def pick(value):
        if isinstance(value, dict):
            return value.get(key, default)
        return getattr(value, key, None)

    members = tuple(Annotated[k, Tag(t)] for k, t in zip(kinds, tags, strict=True))
    return Annotated[Union[members], Discriminator(pick)]  # noqa: UP007


DISCRIMINATORS = ("kind", "arrivals", "method")  # the fields a section's form is chosen by


def union_members(tp) -> dict[str, type[BaseModel]] | None:
    """Tag -> config class of a union made by :func:`kind_union` (an ``Annotated`` union of
    models with a literal ``kind`` or ``arrivals``), or None for any other type."""
    if typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) not in (Union, types.UnionType):
        return None
    args = [a for a in typing.get_args(tp) if a is not type(None)]  # X | None: X's members
    if len(args) == 1 and typing.get_origin(args[0]) is Annotated:
        return union_members(args[0])
    out = {}
    for member in args:
        kind = typing.get_args(member)[0] if typing.get_origin(member) is Annotated else member
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            return None
        key = next((k for k in DISCRIMINATORS if k in kind.model_fields), None)
        if key is None:
            return None
        for tag in tags_of(kind, key):
            out[tag] = kind
    return out
