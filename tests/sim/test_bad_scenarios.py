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


def _run_error(args, tmp_path, capsys) -> str:
    code = main(["run", *args, "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert not (tmp_path / "o").exists()
    return err[0].removeprefix("specsim run: error: ")


@pytest.mark.parametrize(("sets", "expected"), [
    (["workload.rate_per_s=-1"],
     "(--set workload.rate_per_s=-1): workload.rate_per_s: must be > 0, got -1"),
    (["workload.rte_per_s=3"], "(--set workload.rte_per_s=3): workload.rte_per_s: unknown field"),
    (["foo.bar=1"], "(--set foo.bar=1): foo: unknown field"),
    (["workload.rate_per_s=abc"], "(--set workload.rate_per_s=abc): workload.rate_per_s: input "
                                  "should be a valid number, got 'abc'"),
    (["workload.rate_per_s.x=1"], "(--set workload.rate_per_s.x=1): workload.rate_per_s: input "
                                  "should be a valid number, got {'x': 1}"),
    # A check of one field that another decides: the override that brought the problem in.
    (["workload.arrivals=gamma"],
     "(--set workload.arrivals=gamma): workload.cv: required field is missing"),
    (["run.seed=3", "variants.1.name=none"],
     "(--set variants.1.name=none): variants: names must be unique, got ['none', 'none']"),
    # The override of the field is named, not a later other one (a key is given once).
    (["workload.rate_per_s=-2", "run.seed=3"],
     "(--set workload.rate_per_s=-2): workload.rate_per_s: must be > 0, got -2"),
])
def test_an_error_an_override_brought_in_names_it_after_the_file(sets, expected, tmp_path,
                                                                 capsys):
    from sim.loading import default_scenario_path, display_path

    args = [a for s in sets for a in ("--set", s)]
    assert _run_error(args, tmp_path, capsys) == f"{display_path(default_scenario_path())} " \
        + expected


@pytest.mark.parametrize("override", ["foo", "=3", "a..b=1", "workload.=1", " =1"])
def test_a_malformed_override_is_named_in_one_line(override, tmp_path, capsys):
    assert _run_error(["--set", override], tmp_path, capsys) == \
        f"--set {override}: expected key=value with a dotted key"


def test_an_error_in_the_file_is_not_blamed_on_an_override(tmp_path, capsys):
    path = HERE / "negative_rate.yaml"
    for sets in (["run.seed=1"], ["run.seed=1", "scheduler.max_num_seqs=8"]):
        args = [str(path), *(a for s in sets for a in ("--set", s))]
        line = _run_error(args, tmp_path, capsys)
        assert line.endswith("negative_rate.yaml: workload.rate_per_s: must be > 0, got -1")
        assert "--set" not in line
    # ... but the file's bad value set again by an override is the override's
    line = _run_error([str(path), "--set", "workload.rate_per_s=-1"], tmp_path, capsys)
    assert line.endswith("negative_rate.yaml (--set workload.rate_per_s=-1): "
                         "workload.rate_per_s: must be > 0, got -1")


# Problems found while BUILDING (catalog look-ups, TP, memory, KV) name the override too.
@pytest.mark.parametrize(("sets", "expected"), [
    (["deployment.gpu=h900"], "(--set deployment.gpu=h900): deployment: unknown gpu 'h900'"),
    (["deployment.tp=3"], "(--set deployment.tp=3): deployment: llama-3-8b: tp 3 does not "
                          "divide num_attention_heads 32"),
    (["run.seed=4", "models.target=llama-3-70b", "run.requests=5"],
     "(--set models.target=llama-3-70b): deployment: llama-3-70b does not fit on 1x1 h100"),
    (["scheduler.max_batched_tokens=4", "scheduler.chunk_tokens=4"],
     "(--set scheduler.max_batched_tokens=4): scheduler.max_batched_tokens: must be >= a "
     "verify pass of 5 tokens, got 4"),
    # Two problems in turn: the one that stands is named with the override that brought it.
    (["deployment.tp=3", "deployment.gpu=h900"],
     "(--set deployment.gpu=h900): deployment: unknown gpu 'h900'"),
    (["run.seed=2", "deployment.tp=5"],
     "(--set deployment.tp=5): deployment: llama-3-8b: tp 5 does not divide"),
])
def test_a_build_error_an_override_brought_in_names_it(sets, expected, tmp_path, capsys):
    from sim.loading import default_scenario_path, display_path

    args = [a for s in sets for a in ("--set", s)]
    line = _run_error(args, tmp_path, capsys)
    assert line.startswith(f"{display_path(default_scenario_path())} {expected}"), line


def test_a_build_error_is_not_blamed_on_a_later_seed(tmp_path, capsys):
    line = _run_error(["--set", "deployment.tp=3", "--seed", "5"], tmp_path, capsys)
    assert "(--set deployment.tp=3): deployment:" in line
    line = _run_error(["--seed", "5", "--set", "run.requests=3", "--set",
                       "workload.prompt={kind: fixed, tokens: 900000}"], tmp_path, capsys)
    assert "(--set workload.prompt={kind: fixed, tokens: 900000}): workload: request " \
        in line and "--seed" not in line


@pytest.mark.parametrize("name", ["unknown_gpu.yaml", "model_does_not_fit.yaml",
                                  "request_exceeds_kv.yaml"])
def test_a_build_error_in_the_file_is_not_blamed_on_an_override(name, tmp_path, capsys):
    path = HERE / name
    line = _run_error([str(path), "--set", "run.seed=1", "--set", "scheduler.max_num_seqs=8"],
                      tmp_path, capsys)
    assert f"{name}: {_expected(path)}" in line and "--set" not in line
