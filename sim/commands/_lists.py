"""Numbers given on the command line: comma-separated lists (``--tree 3,1,1``,
``--widths``) and the bounds of size-like flags.

Every size-like flag has an upper bound, so that no flag can make a command run for hours
by accident. A command lists its bounds in one table, ``{dest: (least, most)}``;
``document_bounds`` writes them into the flags' ``--help`` and ``check_bounds`` refuses a
value outside them before any work is done, with the bound in the message.
"""

from __future__ import annotations

import argparse

from sim.limits import MAX_GAMMA, MAX_TREE_NODES, MAX_WORKERS, draft_nodes
from specdec.errors import UserError

Bounds = dict[str, tuple[int, int]]


def int_list(text: str, flag: str, minimum: int | None = None, what: str = "values",
             maximum: int | None = None, max_count: int | None = None) -> list[int]:
    """``"3,1,1"`` -> ``[3, 1, 1]``; a one-line UserError naming ``flag`` otherwise.

    With ``minimum`` / ``maximum``, every value must be >= / <= it (``what`` names the
    values in the message); with ``max_count``, at most that many values.
    """
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"{flag}: must be comma-separated integers, got {text!r}") from None
    if minimum is not None and any(v < minimum for v in values):
        raise UserError(f"{flag}: {what} must be >= {minimum}, got {text!r}")
    if maximum is not None and any(v > maximum for v in values):
        raise UserError(f"{flag}: {what} must be <= {maximum}, got {text!r}")
    if max_count is not None and len(values) > max_count:
        raise UserError(f"{flag}: at most {max_count} values, got {len(values)}")
    return values


def _flag(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    for action in parser._actions:
        if action.dest == dest and action.option_strings:
            return action
    raise KeyError(dest)


def document_bounds(parser: argparse.ArgumentParser, bounds: Bounds) -> None:
    """Append each bounded flag's range to its help line (``bounds``: dest -> range)."""
    for dest, (least, most) in bounds.items():
        action = _flag(parser, dest)
        action.help = f"{action.help or ''} [{least}..{most}]".lstrip()


def check_bounds(args: argparse.Namespace, bounds: Bounds) -> None:
    """Refuse a flag given outside its range (a flag left at None is not checked)."""
    for dest, (least, most) in bounds.items():
        value = getattr(args, dest, None)
        if value is not None and not least <= value <= most:
            flag = "--" + dest.replace("_", "-")
            raise UserError(f"{flag}: must be in {least}..{most}, got {value}")


def tree_widths(text: str, flag: str = "--tree") -> list[int]:
    """An expansion tree ``k1,k2,...``: each width and the depth in 1..MAX_GAMMA, and at
    most MAX_TREE_NODES nodes (k1 + k1*k2 + ...), as a scenario's ``expansion`` is bounded."""
    widths = int_list(text, flag, minimum=1, maximum=MAX_GAMMA, max_count=MAX_GAMMA,
                      what="every expansion width")
    if draft_nodes(widths) > MAX_TREE_NODES:
        raise UserError(f"{flag}: the tree <{text}> has more than {MAX_TREE_NODES} nodes; "
                        f"at most {MAX_TREE_NODES}")
    return widths


def float_list(text: str, flag: str) -> list[float]:
    """``"1.63,2.34"`` -> ``[1.63, 2.34]``; a one-line UserError naming ``flag`` otherwise."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"{flag}: must be comma-separated numbers, got {text!r}") from None


def workers_flag(value: int | None) -> int:
    """``--workers``: the given number of local processes (1..MAX_WORKERS), or by default
    the CPUs, at most 5."""
    if value is None:
        import os

        return max(1, min(os.cpu_count() or 1, 5))
    if not 1 <= value <= MAX_WORKERS:
        raise UserError(f"--workers: must be in 1..{MAX_WORKERS}, got {value}")
    return value


# the flags whose values the library checks under their own names (``alpha: ...``)
LIBRARY_FLAGS = ("alpha", "c", "theta", "tokens-per-verify", "gamma-max")


def as_flag_error(err: UserError) -> UserError:
    """``err`` with a library check's field named as the flag the user typed
    (``alpha: must be in [0, 1]`` -> ``--alpha: ...``), else ``err`` itself."""
    head, sep, _ = str(err).partition(":")
    return UserError(f"--{err}") if sep and head in LIBRARY_FLAGS else err


def _nonempty_path(what: str):
    """An argparse ``type`` of a path naming ``what``: an empty one (an unset shell
    variable) is refused, not read as the working directory."""
    def path(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"the path is empty; give {what}")
        return text
    return path


scenario_path = _nonempty_path("a scenario YAML file")  # run, sweep, plan's scenario
file_path = _nonempty_path("a YAML file")  # --catalog, --candidates
