"""The command line's shared behaviour: help, and one-line errors with exit code 2."""

from __future__ import annotations

import pytest

from sim.cli import build_parser, main


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("trace", "speedup", "hw"):
        assert name in out


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: specsim" in capsys.readouterr().out


def test_every_subcommand_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, subparser in sub.choices.items():
        assert subparser.format_help().startswith("usage: specsim " + name)
