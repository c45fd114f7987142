"""``--set KEY=VALUE``, shared by run, sweep, plan and bench: repeatable, each key once."""

from __future__ import annotations

import argparse


class _Overrides(argparse.Action):
    """Appends each ``--set``; a key given twice is an error (the last would win
    silently), as ``sweep --vary`` refuses its keys twice."""

    def __call__(self, parser, namespace, value, option_string=None):
        got = list(getattr(namespace, self.dest) or [])
        key = value.partition("=")[0].strip()
        if any(v.partition("=")[0].strip() == key for v in got):
            parser.error(f"argument --set: {key} given twice (the last would win silently); "
                         f"give it once")
        setattr(namespace, self.dest, [*got, value])


def add_set_flag(p: argparse.ArgumentParser, help: str) -> None:
    """``--set`` into ``overrides`` (a list, empty by default)."""
    p.add_argument("--set", dest="overrides", action=_Overrides, default=[],
                   metavar="KEY=VALUE", help=help)
