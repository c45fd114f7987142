"""``specsim reference``: the scenario file reference, generated from the schema."""

from __future__ import annotations

import argparse

_HELP = """\
Print the scenario reference as markdown: every section and field of a scenario file, with
its type, bounds, default and notes, generated from the schema that validates scenarios
(so it cannot drift from what 'specsim run' accepts). docs/reference/scenario.md is this
output.

example:
  specsim reference > docs/reference/scenario.md
"""


def add_parser(subparsers) -> None:
    """Register ``specsim reference``."""
    p = subparsers.add_parser(
        "reference",
        description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Print the reference page."""
    from reports.schema_doc import scenario_reference
    from sim.scenario import Scenario

    print(scenario_reference(Scenario), end="")
    return 0
