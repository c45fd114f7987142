"""The one error type for input a user can fix.

It lives in the core because every package (core, hardware, workloads, sim) sits on top of
it, so all of them can raise it without import cycles. The command line reports it as one
line on stderr and exits with code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during long work; the message says what finished before it (the
    command line prints it as one line and exits with code 130)."""


class KeyGivenTwice(ValueError):
    """A JSON object gave ``key`` twice (``json`` keeps the last one, silently)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple]) -> dict:
    """``json.loads``' ``object_pairs_hook`` for user input: the object, or
    :class:`KeyGivenTwice` (the caller names the file, line or flag)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        keys = [k for k, _ in pairs]
        raise KeyGivenTwice(next(k for k in keys if keys.count(k) > 1))
    return obj


def json_object(text: str, where: str) -> dict:
    """The JSON object ``text`` holds, read as user input is (a key given twice refused,
    not kept last), or a one-line :class:`UserError` that starts with ``where`` (the file
    or flag): invalid JSON with the parser's reason and line, a key given twice, nesting
    too deep for the parser, or JSON that is not an object."""
    import json

    try:
        obj = json.loads(text, object_pairs_hook=unique_keys)
    except KeyGivenTwice as err:
        raise UserError(f"{where}: {err.key}: given twice") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: not valid JSON: {err.msg} at line {err.lineno}") from None
    except RecursionError:  # json recurses once per level
        raise UserError(f"{where}: nested too deeply") from None
    if not isinstance(obj, dict):
        raise UserError(f"{where}: must be a JSON object")
    return obj


class UserError(ValueError):
    """Bad input: a scenario, catalog, trace, argument or flag.

    The message is the whole one-line report and names the file and field where there is
    one, e.g. ``UserError("scenarios/x.yaml: workload.rate_per_s: must be > 0, got -1")``.
    """
