"""The ``specsim`` command line: one entry point, one module per subcommand.

Each module in ``sim/commands/`` exposes ``add_parser(subparsers)``, which adds its
subcommand and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and
returning an exit code). Library code never prints; only these commands do.

Errors the user can fix (a bad scenario, an unknown GPU, a malformed trace) are raised as
:class:`specdec.errors.UserError` and reported here as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from specdec.errors import Interrupted, UserError

# Subcommand modules under sim/commands/, in the order ``--help`` lists them, with the line
# ``--help`` gives each. Only the chosen command's module is imported, so ``specsim --help``
# starts without numpy, pandas or matplotlib.
COMMANDS: dict[str, str] = {
    "trace": "record an acceptance trace from real speculative decoding on the tiny model",
    "speedup": "speculative-decoding speedup tables (analytic or on hardware)",
    "hw": "the hardware cost model: price one pass, list GPUs/links/models",
    "run": "simulate a scenario (default: scenarios/default.yaml)",
    "bench": "measure the simulator's speed (simulated requests per wall second)",
    "sweep": "run a scenario over a cartesian product of overrides",
    "grid": "batch x context (or tree width x batch) speedup grid and heatmap",
    "claims": "check the papers' claims (SpecInfer, Leviathan et al., lecture §7)",
    "plan": "cheapest deployment meeting an SLO (rate search with the simulator)",
    "calibrate": "fit timing parameters to measured step times; write a catalog",
    "validate": "the default timing against public measurements (median errors)",
    "reference": "the scenario file reference (markdown, from the schema)",
}


class _Subcommands:
    """The subparsers action as a command module sees it: ``add_parser`` fills in the line
    ``--help`` lists (``COMMANDS``), so each line is written once."""

    def __init__(self, action) -> None:
        self._action = action

    def add_parser(self, name: str, **kwargs):
        kwargs.setdefault("help", COMMANDS[name])
        return self._action.add_parser(name, **kwargs)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line on stderr (exit 2), as every other
    error of bad input is: the usage it prints first is what ``--help`` is for."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: every subcommand with its arguments, or, given ``command``, that
    one with its arguments and the others by name and help line only (their modules are not
    imported)."""
    parser = _Parser(
        prog="specsim",
        description=(
            "SpecSim: a discrete-event performance simulator for LLM serving with "
            "speculative decoding. Run 'specsim COMMAND --help' for each command."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, line in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(f"sim.commands.{name}").add_parser(_Subcommands(sub))
        else:
            sub.add_parser(name, help=line, add_help=False)
    return parser


def _command(argv: list[str]) -> str:
    """The subcommand ``argv`` names (its first word that is not an option), or ''."""
    return next((a for a in argv if not a.startswith("-")), "")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specdec-sim")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns the process exit code."""
    return _main(argv)[0]


def _main(argv: list[str] | None) -> tuple[int, str | None]:
    """(exit code, the command that ran, or None when none did)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(_command(argv))
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C while the command's module was still loading
        print("specsim: interrupted", file=sys.stderr)
        return 130, None
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2, None
    return _run(args), args.command


def _run(args) -> int:
    """Run the parsed command; one line on stderr and an exit code for what users cause."""
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: signals stay as they are
        previous = None
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"specsim {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: one line, no traceback
        what = f": {err}" if isinstance(err, Interrupted) and str(err) else ""
        print(f"specsim {args.command}: interrupted{what}", file=sys.stderr)
        return 130
    except RuntimeError as err:  # the engine's own guards (a livelock): a bug, said in one line
        if "livelock" not in str(err):
            raise
        print(f"specsim {args.command}: engine error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`specsim hw list | head`): stop quietly, as Unix tools do.
        # Point stdout at devnull so the interpreter's final flush cannot raise again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:  # stdout without a file descriptor (io.UnsupportedOperation)
            pass
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# Commands whose work is written, closed and flushed when they return, with nothing left
# running (their worker pools are shut down): the console script leaves without the
# interpreter's teardown. ``sweep`` is not one: on Dask, its client's threads and exit
# handlers are Dask's own.
FAST_EXIT = frozenset({"run", "plan", "bench", "claims", "grid", "speedup", "hw",
                       "validate"})


def entry() -> None:
    """The ``specsim`` console script (and ``python -m sim``): ``main()``, then exit.

    After a command in ``FAST_EXIT`` returns, stdout and stderr are flushed and the process
    ends with ``os._exit``: what the interpreter would do next is free every object the
    command made (pandas, matplotlib, the records), a few tenths of a second that the
    operating system does at once. Any other command, an error raised out of ``main`` and a
    ``main`` called from Python exit as usual."""
    code, command = _main(None)
    if command in FAST_EXIT:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):
            sys.exit(code)  # let the interpreter report or swallow it as it would
        os._exit(code)
    sys.exit(code)


def _terminate(signum, frame):
    """SIGTERM ends a command like Ctrl-C: staged output folders are removed on the way."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    entry()
