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

# Subcommand modules under sim/commands/, in the order ``--help`` lists them.
COMMANDS: tuple[str, ...] = (
    "trace",
    "speedup",
    "hw",
    "run",
    "bench",
    "sweep",
    "grid",
    "claims",
    "plan",
    "calibrate",
    "validate",
    "reference",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="specsim",
        description=(
            "SpecSim: a discrete-event performance simulator for LLM serving with "
            "speculative decoding. Run 'specsim COMMAND --help' for each command."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"sim.commands.{name}").add_parser(sub)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specdec-sim")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
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


def _terminate(signum, frame):
    """SIGTERM ends a command like Ctrl-C: staged output folders are removed on the way."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
