"""The scenario reference (docs/reference/scenario.md), generated from the pydantic schema.

``scenario_reference(root)`` walks a pydantic model (``sim.scenario.Scenario``, which the
caller passes): one section per model class, one row per field with its type, default and
description (the class docstring and the field's comment-free annotation). A test checks
that the committed page equals this output, so the reference cannot drift from the schema.
Regenerate with::

    specsim reference > docs/reference/scenario.md
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing

from pydantic import BaseModel

HEADER = """\
# Scenario reference

Generated from the schema in `sim/scenario.py` by `specsim reference` — do not edit by hand
(`tests/reports/test_docs.py` fails when this page and the schema disagree).

A scenario is a YAML mapping; every field has a default, so a file names only what it
changes. Unknown keys are errors. Sections whose type is a union pick their form with
`kind:`. Values are checked when the file is loaded; a bad one is reported as
`file: section.field: problem, got value`. Any field can be overridden on the command
line with `--set dotted.key=value` (list items by index: `variants.1.policy.gamma=3`); a
problem an override brought in names it after the file,
`file (--set dotted.key=value): section.field: problem, got value` (likewise
`(--vary key=value)` for a sweep point and the candidates file and entry for a plan
candidate), also when it is found only as the scenario is built (unknown GPU, TP, memory).

Data files (every `file`, and `deployment.catalog`): a relative path written in a scenario
file is read from that file's folder, else from the repository root (so the shipped
scenarios' `workloads/traces/...` work from anywhere); one given with `--set` from the
working directory, else the repository root. The run folder's `scenario.yaml` holds the
absolute path that was read.
"""


def _type_name(tp) -> str:
    """A readable type: int, float > 0, list[int], one of 'a' | 'b', Section, ..."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        base, *meta = args
        bounds = _bounds([a for m in meta for a in getattr(m, "metadata", [m])], base)
        text = _type_name(base)
        return f"{text} ({', '.join(bounds)})" if bounds else text
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_name(a) for a in args if a is not type(None)]
        text = " \\| ".join(parts)
        return f"{text} or null" if type(None) in args else text
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    if origin is dict:
        return f"map[{_type_name(args[0])} → {_type_name(args[1])}]"
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return getattr(tp, "__name__", str(tp))


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """Every model reachable from ``root``, in first-seen order."""
    seen: list[type[BaseModel]] = []

    def visit(tp) -> None:
        if inspect.isclass(tp) and issubclass(tp, BaseModel):
            if tp in seen:
                return
            seen.append(tp)
            for f in tp.model_fields.values():
                visit(f.annotation)
            return
        for a in typing.get_args(tp):
            visit(a)

    visit(root)
    return seen


def _bounds(metadata, base=None) -> list[str]:
    """The bounds in a field's metadata; a length counts characters of a ``str`` ``base``."""
    out = []
    unit = "characters" if base is str else "items"
    for attr in metadata:
        for op, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="),
                        ("min_length", f"min {unit}"), ("max_length", f"max {unit}")):
            v = getattr(attr, op, None)
            if v is not None:
                out.append(f"{sym} {v}")
    return out


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """Trailing ``# comments`` on field lines of the class source (the schema's notes)."""
    notes: dict[str, str] = {}
    try:
        lines = inspect.getsource(model).splitlines()
    except (OSError, TypeError):
        return notes
    for line in lines:
        m = re.match(r"^\s{4}(\w+)\s*:[^#]*#\s*(.+)$", line)
        if m and m.group(1) in model.model_fields:
            notes[m.group(1)] = m.group(2).strip()
    return notes


def _default(field) -> str:
    if field.is_required():
        return "required"
    d = field.get_default(call_default_factory=True)
    if isinstance(d, BaseModel):
        d = d.model_dump(mode="json", exclude_none=True)
    elif isinstance(d, list):
        d = [x.model_dump(mode="json", exclude_none=True) if isinstance(x, BaseModel) else x
             for x in d]
    return "`" + json.dumps(d, ensure_ascii=False) + "`"


def scenario_reference(root: type[BaseModel]) -> str:
    """The reference page of the schema ``root`` as markdown."""
    out = [HEADER]
    for model in _models(root):
        out.append(f"## {model.__name__}\n")
        doc = model.__dict__.get("__doc__")  # its own, not one inherited from a base
        if doc:
            out.append(" ".join(doc.split()) + "\n")
        notes = _comments(model)
        out.append("| field | type | default | notes |")
        out.append("|---|---|---|---|")
        for name, f in model.model_fields.items():
            kind = _type_name(f.annotation)
            bounds = _bounds(f.metadata, f.annotation)
            if bounds:
                kind += f" ({', '.join(bounds)})"
            note = notes.get(name, "").replace("|", "\\|")
            out.append(f"| `{name}` | {kind} | {_default(f)} | {note} |")
        out.append("")
    return "\n".join(out)

