"""A corpus of bad inputs through the real command line: files, flags, catalogs, traces,
CSVs, metric dumps and engine command lines. Each must exit with code 2 and one line on
stderr that names what is wrong, print no traceback and leave no folder behind."""

from __future__ import annotations

import pytest

from sim.cli import main
from tests.sim.bad_input_cases import CASES


def test_the_corpus_is_big_enough():
    assert len(CASES) >= 150


@pytest.mark.parametrize("name, files, argv, expected", CASES,
                         ids=[c.values[0] if hasattr(c, "values") else c[0] for c in CASES])
def test_a_bad_input_is_one_line_exit_2_and_leaves_nothing(name, files, argv, expected,
                                                           tmp_path, capsys, monkeypatch):
    data = tmp_path / "in"
    data.mkdir()
    for fname, text in files.items():
        text = text.replace("{tmp}", str(data))
        if "\udcff" in text:
            (data / fname).write_bytes(text.encode("utf-8", "surrogateescape"))
        else:
            (data / fname).write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # default output folders would appear here
    args = [a.replace("{tmp}", str(data)) for a in argv]
    if args[0] in ("run", "sweep", "plan", "claims") and "--out" not in args:
        args += ["--out", str(work / "out")]
    if args[0] in ("run", "sweep", "plan"):
        args.append("--no-progress")
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert expected in lines[0], lines[0]
    assert list(work.iterdir()) == []  # no folder left behind
