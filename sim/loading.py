"""Loading scenarios: YAML files, ``--set`` overrides, and one-line errors.

Every problem becomes a :class:`~specdec.errors.UserError` of one line naming the file and
the field, e.g. ``scenarios/x.yaml: workload.rate_per_s: must be > 0, got -1``; when the
bad value came from a ``--set`` override, the override is named after the file:
``scenarios/x.yaml (--set workload.rate_per_s=-1): workload.rate_per_s: must be > 0, got -1``.
:func:`blame` finds that override; ``sim.runner.build_overridden`` uses it for problems
found while building, and ``specsim sweep`` / ``plan`` label their own overrides
(``--vary key=value``, a candidates file's entry) the same way.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from sim.kinds.base import DATA_FILE, DISCRIMINATORS, union_members
from sim.paths import repo_root
from sim.scenario import Scenario
from specdec.errors import UserError

_MESSAGES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
    "too_short": "needs at least {min_length} item(s)",
    "too_long": "allows at most {max_length} item(s)",
    "string_pattern_mismatch": "must use only letters, digits and _ . = -, not dots alone",
    "string_too_long": "allows at most {max_length} characters",
}


def default_scenario_path() -> Path:
    """``scenarios/default.yaml`` under the repository root."""
    return repo_root() / "scenarios" / "default.yaml"


def parse_override(text: str, label: str | None = None) -> tuple[list[str], object]:
    """``'a.b.0.c=value'`` -> (['a', 'b', '0', 'c'], YAML-parsed value); errors name
    ``label`` (default ``--set text``, e.g. ``--vary key=value``)."""
    key, sep, raw = text.partition("=")
    keys = key.strip().split(".")
    if not sep or not all(k.strip() for k in keys):
        raise UserError(f"{label or f'--set {text}'}: expected key=value with a dotted key")
    try:
        value = load_yaml_text(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise UserError(f"{label or f'--set {text}'}: value is not valid YAML "
                        f"({_first_line(e)})") from None
    except RecursionError:  # as read_yaml: PyYAML's parser recurses once per level
        short = (label or f"--set {text}").partition("=")[0]  # not the thousands of [
        raise UserError(f"{short}=...: value nested too deeply") from None
    return [k.strip() for k in keys], value


def apply_overrides(doc: dict, overrides: list[str], labels: list[str] | None = None) -> dict:
    """A copy of ``doc`` with each ``key=value`` set (dotted keys; list items by index);
    errors name ``labels[i]`` (default ``--set overrides[i]``)."""
    out = copy.deepcopy(doc)
    for j, text in enumerate(overrides):
        label = labels[j] if labels is not None else f"--set {text}"
        keys, value = parse_override(text, label)
        node = out
        for i, k in enumerate(keys):
            last = i == len(keys) - 1
            if isinstance(node, list):
                if not k.isdigit() or int(k) >= len(node):
                    raise UserError(f"{label}: {'.'.join(keys[: i + 1])}: no such list item")
                k = int(k)
            elif not isinstance(node, dict):
                raise UserError(f"{label}: {'.'.join(keys[:i])} is not a mapping")
            if last:
                node[k] = value
            else:
                if isinstance(node, dict) and not isinstance(node.get(k), dict | list):
                    node[k] = {}
                node = node[k]
    return out


def read_yaml(path: Path, what: str = "scenario") -> dict:
    """The YAML mapping in ``path``, a ``what`` (named in errors: "scenario", "candidates
    file"...). A path that does not exist relative to the working directory is looked up
    under the repository root (see :func:`find_file`). Refused in one line: an unreadable
    or empty file, bytes that are not UTF-8, invalid YAML, a key given twice in one mapping
    (YAML would silently keep the last), and a document that is not a mapping."""
    path = find_file(path, what)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: cannot read {what}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read {what}: {e.strerror}") from None
    try:
        doc = load_yaml_text(text)
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML: {_first_line(e)}") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be a {what}") from None
    if doc is None:
        raise UserError(f"{path}: the {what} file is empty (write {{}} for all defaults)")
    if not isinstance(doc, dict):
        raise UserError(f"{path}: a {what} must be a YAML mapping, got {type(doc).__name__}")
    if what == "scenario":
        anchor_files(doc, Scenario, path.resolve().parent)
    return doc


def anchor_files(node, tp, folder: Path) -> None:
    """Make each relative data-file path in the scenario document ``node`` (a field typed
    ``sim.kinds.base.DataFile``, found by walking the schema ``tp`` along the document)
    absolute, in place: under ``folder`` (the scenario file's) where it exists there, else
    under the repository root where it exists there, else under ``folder`` (so an error
    names where it was looked for). Paths given later with ``--set`` are not the file's
    and keep ``sim.paths.resolve_file``'s working directory, then repository root. A
    document that does not fit the schema is left for validation to refuse."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    members = union_members(tp)
    if members is not None and isinstance(node, dict):
        key = next((k for k in DISCRIMINATORS
                    for m in members.values() if k in m.model_fields), None)
        tp = members.get(node.get(key, "poisson" if key == "arrivals" else None))
    if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(node, dict):
        for name, value in node.items():
            field = tp.model_fields.get(name) if isinstance(name, str) else None
            if field is None:
                continue
            if _is_data_file(field) and isinstance(value, str) and value:
                node[name] = str(_anchored(Path(value), folder))
            else:
                anchor_files(value, field.annotation, folder)
    elif isinstance(node, list):
        item = _child(tp, 0)
        for value in node:
            anchor_files(value, item, folder)


def _is_data_file(field) -> bool:
    """Whether a model field is a ``DataFile`` (``DataFile | None`` included)."""
    marks = [*field.metadata, *(m for a in typing.get_args(field.annotation)
                                 for m in typing.get_args(a)[1:])]
    return DATA_FILE in marks


def _anchored(p: Path, folder: Path) -> Path:
    if p.is_absolute() or (folder / p).exists() or not (repo_root() / p).exists():
        return p if p.is_absolute() else folder / p
    return repo_root() / p


def find_file(path: str | Path, what: str = "scenario") -> Path:
    """``path`` as given when it exists (relative to the working directory); else, for a
    relative path, the same path under the repository root, so ``specsim run
    scenarios/default.yaml`` works from any folder, as bare ``specsim run``, trace files and
    catalogs already do. Neither: a one-line error naming both places."""
    p = Path(path)
    if p.exists() or p.is_absolute():
        return p
    under = repo_root() / p
    if under.exists():
        return under
    raise UserError(f"{p}: {what} not found here or under {repo_root()}")


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last),
    and reads scientific notation without a dot (``1e-2``, ``3E+5``) as a number, as YAML
    1.2 does (PyYAML's YAML 1.1 would make it a string)."""

    def construct_mapping(self, node, deep=False):
        """The mapping of ``node``; a repeated key is a ConstructorError naming its line."""
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                duplicate = False  # an unhashable key; the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            if not isinstance(key, list | dict):
                seen.add(key)
        return super().construct_mapping(node, deep)


UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def load_yaml_text(text: str):
    """YAML text as Python values with :class:`UniqueKeyLoader`."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)


def validate(doc: dict, source: str) -> Scenario:
    """A validated Scenario, or the first problem as a one-line UserError."""
    try:
        return Scenario.model_validate(doc)
    except ValidationError as e:
        raise UserError(f"{source}: {format_error(e.errors()[0])}") from None


def overridden_doc(doc: dict, overrides: list[str], k: int, resolve_at: int | None = None,
                   labels: list[str] | None = None) -> dict:
    """``doc`` with the first ``k`` overrides applied. With ``resolve_at`` = n, the first n
    apply to ``doc`` as written and the rest to the resolved scenario (validated, every
    default filled in), so they may reach fields the file leaves out (``variants.1...``).
    ``labels[i]`` names ``overrides[i]`` in errors (default ``--set overrides[i]``)."""
    names = labels if labels is not None else [f"--set {t}" for t in overrides]
    if resolve_at is None or k <= resolve_at:
        return apply_overrides(doc, overrides[:k], names[:k])
    base = Scenario.model_validate(apply_overrides(doc, overrides[:resolve_at],
                                                   names[:resolve_at]))
    return apply_overrides(base.model_dump(mode="json"), overrides[resolve_at:k],
                           names[resolve_at:k])


def validate_overridden(doc: dict, overrides: list[str], source: str,
                        labels: list[str] | None = None,
                        resolve_at: int | None = None) -> Scenario:
    """``doc`` with ``overrides`` applied (see :func:`overridden_doc`), validated; a problem an
    override brought in names it: ``source (--set key=value): field: message``
    (``labels[i]`` instead of ``--set overrides[i]`` when given, e.g. ``--vary key=value``).

    The culprit is found by :func:`blame`. Only a failing load pays for its re-validations.
    """
    try:
        return Scenario.model_validate(
            overridden_doc(doc, overrides, len(overrides), resolve_at, labels))
    except ValidationError as e:
        problem = format_error(e.errors()[0])

    def problems(k: int) -> list[str]:
        try:
            Scenario.model_validate(overridden_doc(doc, overrides, k, resolve_at))
        except ValidationError as e:
            return [format_error(err) for err in e.errors()]
        return []

    raise UserError(f"{blame(problem, source, overrides, problems, labels)}: {problem}") from None


def blame(problem: str, source: str, overrides: list[str], problems, labels=None,
          shape=None) -> str:
    """Where ``problem`` (``field: message``) came from: ``source`` (the file is at fault) or
    ``source (label)`` for the override that brought it in.

    The culprit is the last override that set the failing field (or a section holding it).
    Failing that (a check of one field that another one decides, or a problem found while
    building), ``problems(k)`` lists the problems of the document with the first k overrides,
    k = 0, 1, ...: the culprit is the first override after which a problem of the same
    ``shape(problem)`` appears (the file alone, k = 0, when it already has it) -- or a later
    one that sets the same field again, up to the first after which ``problem`` itself
    appears. ``shape`` (default: the text itself) may hide numbers a later, unrelated
    override changes (a seed draws other request lengths). ``labels[i]`` names
    ``overrides[i]`` (default ``--set overrides[i]``).
    """
    names = labels if labels is not None else [f"--set {t}" for t in overrides]
    keys = [parse_override(t)[0] for t in overrides]
    field = problem.partition(": ")[0].split(".")
    for i in reversed(range(len(overrides))):
        if keys[i] == field[: len(keys[i])]:
            return f"{source} ({names[i]})"
    shape = shape or (lambda text: text)
    culprit = None
    for k in range(len(overrides) + 1):
        found = problems(k)
        if culprit is None and shape(problem) in (shape(p) for p in found):
            culprit = k
        elif culprit and _overlap(keys[k - 1], keys[culprit - 1]):
            culprit = k  # the same field set again: the value that stands is the culprit's
        if problem in found:
            return source if not culprit else f"{source} ({names[culprit - 1]})"
    raise AssertionError("the full override list has the problem, so some prefix of it must")


def _overlap(a: list[str], b: list[str]) -> bool:
    """Whether two dotted keys name the same field or one holds the other."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Read, override and validate a scenario (no path: ``scenarios/default.yaml``)."""
    if path is not None and not str(path).strip():  # Path("") is "." (a folder)
        raise UserError("scenario: the path is empty; give a scenario YAML file (or none "
                        "for scenarios/default.yaml)")
    p = Path(path) if path is not None else default_scenario_path()
    return validate_overridden(read_yaml(p), list(overrides or []), display_path(p))


def format_error(err: dict) -> str:
    """One pydantic error as ``field.path: message, got value``."""
    loc = field_path(err["loc"])
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == "value_error":
        # Our own validators put "field: message" in the text; it names the field.
        msg = str(ctx.get("error", err["msg"]))
        field, sep, rest = msg.partition(": ")
        if sep and " " not in field:
            return f"{'.'.join([*loc, field])}: {rest}"
        return f"{'.'.join(loc) or 'scenario'}: {msg}"
    if kind in _MESSAGES:
        msg = _MESSAGES[kind].format(**{k: _num(v) for k, v in ctx.items()})
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        members = union_members(_type_at(err["loc"])) or {}
        key = next((k for k in DISCRIMINATORS for m in members.values() if k in m.model_fields),
                   "kind")
        if not isinstance(got, dict):
            return f"{'.'.join(loc) or 'scenario'}: must be a mapping with {key}: one of " \
                   f"{', '.join(repr(t) for t in members)}, got {got!r}"
        loc.append(key)
        if kind == "union_tag_not_found":
            return f"{'.'.join(loc)}: required, one of {', '.join(repr(t) for t in members)}"
        got = ctx.get("tag")
        msg = f"must be one of {', '.join(repr(t) for t in members)}"
    elif kind == "literal_error":
        msg = f"must be one of {ctx.get('expected')}"
    else:
        msg = err["msg"][0].lower() + err["msg"][1:]
    where = ".".join(loc) or "scenario"
    if kind in ("missing", "extra_forbidden"):
        return f"{where}: {msg}"
    return f"{where}: {msg}, got {got!r}"


def _type_at(loc):
    """The schema type at a pydantic error location (union tags followed)."""
    tp = Scenario
    for x in loc:
        members = union_members(tp)
        tp = members[x] if members is not None and x in members else _child(tp, x)
    return tp


def field_path(loc) -> list[str]:
    """A pydantic error location as the scenario's field names: the schema is walked along
    ``loc`` and the entries that only pick a union member (its ``kind`` or ``arrivals``
    value) are dropped: ``variants.0.policy.fixed.gamma`` reads ``variants.0.policy.gamma``."""
    out, tp = [], Scenario
    for x in loc:
        members = union_members(tp)
        if members is not None and x in members:
            tp = members[x]
            continue
        out.append(str(x))
        tp = _child(tp, x)
    return out


def _child(tp, key):
    """The type at ``key`` inside ``tp`` (a model field, a list item, a mapping value)."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(key))
        return None if field is None else field.annotation
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):  # X | None: the non-None member
        rest = [a for a in args if a is not type(None)]
        return _child(rest[0], key) if len(rest) == 1 else None
    if origin is list and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _num(v):
    return f"{v:g}" if isinstance(v, float) else v


def display_path(p: Path) -> str:
    """``p`` relative to the working directory when it is below it (shorter messages)."""
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _first_line(e: Exception) -> str:
    """A YAML error as 'line L, column C: problem' (one line)."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return " ".join(str(e).split())
