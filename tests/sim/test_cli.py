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


def test_help_lists_every_command_with_the_line_its_module_would_give(capsys):
    from sim.cli import COMMANDS

    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name, line in COMMANDS.items():
        assert f"{name} {line}" in out


@pytest.mark.parametrize("argv, says", [
    (["run", "--seed", "abc"], "specsim run: error: argument --seed: invalid int value: 'abc'"),
    (["hw", "step", "--tree", "2,2", "--tokens", "4"],
     "specsim hw step: error: argument --tokens: not allowed with argument --tree"),
    (["bogus"], "specsim: error: argument COMMAND: invalid choice: 'bogus'"),
    (["run", "--no-such-flag"], "specsim: error: unrecognized arguments: --no-such-flag"),
    (["sweep", "--set", "run.seed=1", "--set", "run.seed = 2"],  # the last won, silently
     "specsim sweep: error: argument --set: run.seed given twice"),
    (["run", ""], "specsim run: error: argument scenario: the path is empty"),  # was "."
    (["plan", " ", "--target-rate", "1"], "specsim plan: error: argument scenario: the path"),
    (["plan", "scenarios/plan-llama70b.yaml", "--candidates", ""],
     "specsim plan: error: argument --candidates: the path is empty"),
    (["hw", "list", "--catalog", ""], "specsim hw list: error: argument --catalog: the path"),
])
def test_a_flag_argparse_refuses_is_one_line_exit_2(argv, says, capsys):
    """argparse printed its usage first: two or more lines for one error."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(says) and err[0].endswith("--help)"), err


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["sweep", "--help"], []])
def test_help_starts_without_the_numeric_stack(argv):
    """``specsim --help`` (and a command's own help) import only that command's module: no
    numpy, pandas or matplotlib (issue: start-up time)."""
    import subprocess
    import sys

    code = ("import sys, sim.cli\n"
            "try:\n    sim.cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', *sorted(m for m in ('numpy', 'pandas', 'matplotlib', 'scipy',"
            " 'simpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines()[-1] == "LOADED"


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: specsim" in capsys.readouterr().out


def test_every_subcommand_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, subparser in sub.choices.items():
        assert subparser.format_help().startswith("usage: specsim " + name)


def test_a_closed_pipe_ends_quietly(monkeypatch, capsys):
    """`specsim ... | head`: a BrokenPipeError ends the command with code 1, no traceback."""
    import sim.commands.hw as hw

    def broken(args):
        raise BrokenPipeError

    monkeypatch.setattr(hw, "run_list", broken)
    assert main(["hw", "list"]) == 1
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("call", ["sys.exit(sim.cli.main(['hw', 'list']))",
                                  "sys.argv = ['specsim', 'hw', 'list']; sim.cli.entry()"],
                         ids=["main", "console-script"])
def test_a_closed_pipe_through_a_real_pipe(call):
    """A real reader that closes early: exit 1 and nothing on stderr, through ``main`` and
    through the console script's fast exit."""
    import subprocess
    import sys

    code = ("import sys, sim.cli, sim.commands.hw as hw\n"
            "def flood(args):\n"
            "    for _ in range(100000):\n"
            "        print('x' * 100)\n"
            "hw.run_list = flood\n"
            f"{call}\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_the_console_script_leaves_with_everything_written(capsys):
    """``entry`` (the console script, ``python -m sim``) ends a finished command with
    ``os._exit`` after flushing: the same output and exit code as ``main``, for a command
    that prints a lot, a user error, and a command that exits as usual."""
    import subprocess
    import sys

    assert main(["hw", "list"]) == 0
    want = capsys.readouterr().out
    got = subprocess.run([sys.executable, "-m", "sim", "hw", "list"], capture_output=True,
                         text=True, timeout=120)
    assert (got.returncode, got.stdout, got.stderr) == (0, want, "")
    bad = subprocess.run([sys.executable, "-m", "sim", "bench", "--requests", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("specsim bench: error: --requests: must be in 1..")
    # the teardown is skipped (exit handlers do not run) for hw, not for reference
    code = ("import atexit, sys, sim.cli\n"
            "atexit.register(lambda: print('TEARDOWN', file=sys.stderr))\n"
            "sys.argv = ['specsim', *sys.argv[1:]]\n"
            "sim.cli.entry()\n")
    for argv, teardown in ((["hw", "list"], False), (["reference"], True)):
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                              text=True, timeout=120)
        assert ("TEARDOWN" in proc.stderr) == teardown, argv
