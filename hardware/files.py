"""Reading the files a catalog or a model config comes in: one-line errors, never a traceback.

:func:`format_validation` turns a pydantic error into ``file: field: message, got value``;
:func:`read_utf8` and :func:`hf_json` read a text or JSON file with one-line errors naming it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from specdec.errors import UserError, json_object

__all__ = ["format_validation", "hf_json", "read_utf8"]


def format_validation(file: str, prefix: str, err: ValidationError) -> str:
    """One line for the first error of a pydantic ``ValidationError``.

    Reads ``file: prefix.field: message, got value`` (``prefix`` may be empty, e.g. for a
    whole config.json); the field is omitted for whole-object checks.
    """
    errors = err.errors()
    # An unknown field is usually a misspelt known one: report it before the "missing".
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    parts = [p for p in (prefix, ".".join(str(x) for x in first["loc"])) if p]
    where = f"{file}: {'.'.join(parts)}" if parts else file
    msg = first["msg"].removeprefix("Value error, ")
    # a whole-object check (e.g. heads vs hidden size) would echo the whole mapping: skip it
    if first["type"] in ("missing", "model_type", "dict_type") or not first["loc"] \
            or isinstance(first["input"], dict):
        return f"{where}: {msg}"
    return f"{where}: {msg}, got {first['input']!r}"


def read_utf8(path: Path, what: str, rule: str) -> str:
    """The text of ``path``; one-line UserErrors for an unreadable or non-UTF-8 file.

    ``what`` names the file in "cannot read <what>", ``rule`` ends the UTF-8 message (e.g.
    "a catalog file must be UTF-8 YAML").
    """
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"{path}: cannot read {what}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise UserError(
            f"{path}: not a UTF-8 text file (byte 0x{err.object[err.start]:02x} at offset "
            f"{err.start}); {rule}"
        ) from None


def hf_json(path: Path) -> dict:
    """The JSON object in ``path`` (a ``config.json``); one-line UserErrors otherwise."""
    text = read_utf8(path, "model config", "a config.json must be UTF-8 JSON")
    return json_object(text, str(path))
