"""Loading scenarios: YAML files, ``--set`` overrides, and one-line errors.

Every problem becomes a :class:`~specdec.errors.UserError` of one line naming the file and
the field, e.g. ``scenarios/x.yaml: workload.rate_per_s: must be > 0, got -1``; when the
bad value came from a ``--set`` override, the override is named after the file:
``scenarios/x.yaml (--set workload.rate_per_s=-1): workload.rate_per_s: must be > 0, got -1``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from pydantic import ValidationError

from sim.scenario import TAGS, Scenario
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
    "string_pattern_mismatch": "must use only letters, digits and _ . = -",
}


def repo_root() -> Path:
    """The repository (package) root: the folder holding ``scenarios/`` and ``sim/``."""
    return Path(__file__).resolve().parent.parent


def default_scenario_path() -> Path:
    """``scenarios/default.yaml`` under the repository root."""
    return repo_root() / "scenarios" / "default.yaml"


def parse_override(text: str) -> tuple[list[str], object]:
    """``'a.b.0.c=value'`` -> (['a', 'b', '0', 'c'], YAML-parsed value)."""
    key, sep, raw = text.partition("=")
    keys = key.strip().split(".")
    if not sep or not all(k.strip() for k in keys):
        raise UserError(f"--set {text}: expected key=value with a dotted key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise UserError(f"--set {text}: value is not valid YAML ({_first_line(e)})") from None
    return [k.strip() for k in keys], value


def apply_overrides(doc: dict, overrides: list[str]) -> dict:
    """A copy of ``doc`` with each ``key=value`` set (dotted keys; list items by index)."""
    out = copy.deepcopy(doc)
    for text in overrides:
        keys, value = parse_override(text)
        node = out
        for i, k in enumerate(keys):
            last = i == len(keys) - 1
            if isinstance(node, list):
                if not k.isdigit() or int(k) >= len(node):
                    raise UserError(f"--set {text}: {'.'.join(keys[: i + 1])}: no such list item")
                k = int(k)
            elif not isinstance(node, dict):
                raise UserError(f"--set {text}: {'.'.join(keys[:i])} is not a mapping")
            if last:
                node[k] = value
            else:
                if isinstance(node, dict) and not isinstance(node.get(k), dict | list):
                    node[k] = {}
                node = node[k]
    return out


def read_yaml(path: Path) -> dict:
    """The YAML mapping in ``path`` (an empty file is an empty mapping)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise UserError(f"{path}: cannot read scenario: {e.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML: {_first_line(e)}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise UserError(f"{path}: a scenario must be a YAML mapping, got {type(doc).__name__}")
    return doc


def validate(doc: dict, source: str) -> Scenario:
    """A validated Scenario, or the first problem as a one-line UserError."""
    try:
        return Scenario.model_validate(doc)
    except ValidationError as e:
        raise UserError(f"{source}: {format_error(e.errors()[0])}") from None


def validate_overridden(doc: dict, overrides: list[str], source: str) -> Scenario:
    """``doc`` with ``overrides`` applied, validated; a problem an override brought in names
    it: ``source (--set key=value): field: message``.

    The culprit is the last override that set the failing field (or a section holding it);
    failing that (a check of one field that another one decides), the first override after
    which the problem appears among all the errors of ``doc`` with the first k overrides,
    k = 0, 1, ... -- the file alone (k = 0) is blamed when it already has the problem. Only
    a failing load pays for these re-validations.
    """
    try:
        return Scenario.model_validate(apply_overrides(doc, overrides))
    except ValidationError as e:
        problem = format_error(e.errors()[0])
    field = problem.partition(": ")[0].split(".")
    for text in reversed(overrides):
        keys = parse_override(text)[0]
        if keys == field[: len(keys)]:
            raise UserError(f"{source} (--set {text}): {problem}") from None
    for k in range(len(overrides) + 1):
        try:
            Scenario.model_validate(apply_overrides(doc, overrides[:k]))
        except ValidationError as e:
            if problem in (format_error(err) for err in e.errors()):
                where = source if k == 0 else f"{source} (--set {overrides[k - 1]})"
                raise UserError(f"{where}: {problem}") from None
    raise AssertionError("the full override list fails, so some prefix of it must")


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Read, override and validate a scenario (no path: ``scenarios/default.yaml``)."""
    p = Path(path) if path is not None else default_scenario_path()
    return validate_overridden(read_yaml(p), list(overrides or []), display_path(p))


def format_error(err: dict) -> str:
    """One pydantic error as ``field.path: message, got value``."""
    loc = [str(x) for x in err["loc"] if not (isinstance(x, str) and x in TAGS)]
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
    elif kind == "union_tag_invalid":
        loc.append("kind")
        got = ctx.get("tag")
        msg = f"must be one of {ctx.get('expected_tags')}"
    elif kind == "union_tag_not_found":
        loc.append("kind")
        return f"{'.'.join(loc)}: required (one of the known kinds)"
    elif kind == "literal_error":
        msg = f"must be one of {ctx.get('expected')}"
    else:
        msg = err["msg"][0].lower() + err["msg"][1:]
    where = ".".join(loc) or "scenario"
    if kind in ("missing", "extra_forbidden"):
        return f"{where}: {msg}"
    return f"{where}: {msg}, got {got!r}"


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
