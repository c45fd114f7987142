"""Every broken scenario in bad_scenarios/ gives its one-line error and exit code 2."""

from pathlib import Path

import pytest

from sim.cli import main

HERE = Path(__file__).parent / "bad_scenarios"
CASES = sorted(HERE.glob("*.yaml"))


def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} lacks its '# expect:' line"
    return first.removeprefix("# expect: ")


def test_the_corpus_is_there():
    assert len(CASES) >= 20


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_scenario_is_refused_in_one_line(path, tmp_path, capsys):
    code = main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert _expected(path) in lines[0]
    assert path.name in lines[0]  # the file is named
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("override", "expected"), [
    ("workload.rate_per_s=-1", "workload.rate_per_s: must be > 0, got -1"),
    ("nonsense", "--set nonsense: expected key=value"),
    ("variants.7.policy.gamma=3", "variants.7: no such list item"),
    ("run.requests=[1", "value is not valid YAML"),
])
def test_bad_overrides_are_refused_in_one_line(override, expected, tmp_path, capsys):
    code = main(["run", "--set", override, "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0]
