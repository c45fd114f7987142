"""Every size-like flag and scenario field has an upper bound (``sim.limits``): the value at
the bound passes validation, the one past it is refused with a one-line error that names the
flag or field and the bound. Values at the bound are checked by the validation alone (a
run at the bound would be hours long by design); values past it go through the real CLI."""

from __future__ import annotations

import shutil

import pytest

from sim import limits
from sim.cli import build_parser, main
from sim.commands import _lists, grid, hw, speedup, sweep, trace
from sim.loading import default_scenario_path, load_scenario, read_yaml, validate
from specdec.errors import UserError

HW = ["--model", "llama-2-7b", "--gpu", "a100-80gb"]
SPEEDUP = ["speedup", "--target", "llama-2-7b", "--draft", "llama-68m", "--gpu", "a100-80gb",
           "--batch", "1", "--context", "16", "--alpha", "0.8"]
GRID = ["grid", "--target", "llama-2-7b", "--draft", "llama-68m", "--gpu", "a100-80gb",
        "--alpha", "0.8", "--batches", "1", "--contexts", "16"]

# (argv without the flag, the flag, its module's bounds table, the bounds' key)
SCALAR_FLAGS = [
    (["hw", "step", *HW, "--context", "1"], "--batch", hw.STEP_BOUNDS, "batch"),
    (["hw", "step", *HW, "--batch", "1"], "--context", hw.STEP_BOUNDS, "context"),
    (["hw", "step", *HW, "--batch", "1", "--context", "1"], "--tokens", hw.STEP_BOUNDS,
     "tokens"),
    (["hw", "step", *HW, "--batch", "1", "--context", "1"], "--tp", hw.STEP_BOUNDS, "tp"),
    (["hw", "step", *HW, "--batch", "1", "--context", "1"], "--pp", hw.STEP_BOUNDS, "pp"),
    (["hw", "step", *HW, "--batch", "1", "--context", "1"], "--ep", hw.STEP_BOUNDS, "ep"),
    (SPEEDUP, "--gamma-max", speedup.BOUNDS, "gamma_max"),
    (SPEEDUP, "--tp", speedup.BOUNDS, "tp"),
    (SPEEDUP, "--batch", speedup.BOUNDS, "batch"),
    (SPEEDUP, "--context", speedup.BOUNDS, "context"),
    (GRID, "--gamma-max", grid.BOUNDS, "gamma_max"),
    (GRID, "--tp", grid.BOUNDS, "tp"),
    (["sweep", "scenarios/default.yaml"], "--workers", sweep.BOUNDS, "workers"),
    *[(["trace", "--tokens", "100", "--prompts", "10"], f"--{k.replace('_', '-')}",
       trace.BOUNDS, k) for k in trace.BOUNDS],
]


# commands cheap to run with a flag at its bound (a trace of 10^7 positions or 256 sweep
# workers is not: those are checked by the bounds table alone)
CHEAP_AT_THE_BOUND = ("hw", "speedup", "grid")


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` with ``flag`` and its value taken out (the test gives its own)."""
    if flag not in argv:
        return list(argv)
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize(("argv", "flag", "bounds", "key"), SCALAR_FLAGS,
                         ids=[f"{a[0]}{f}" for a, f, _, _ in SCALAR_FLAGS])
def test_scalar_flag_at_its_bound_passes_and_past_it_is_refused(argv, flag, bounds, key,
                                                                 tmp_path, capsys):
    least, most = bounds[key]
    argv = _without(argv, flag)
    parser = build_parser(argv[0])
    for value in (least, most):  # both ends pass the bounds check
        _lists.check_bounds(parser.parse_args([*argv, flag, str(value)]), bounds)
    if argv[0] in CHEAP_AT_THE_BOUND:  # and the command itself takes them
        for value in (least, most):
            code = main([*argv, flag, str(value), "--json", "--out", str(tmp_path / "b")]
                        if argv[0] == "grid" else [*argv, flag, str(value), "--json"])
            err = capsys.readouterr().err
            if code:  # refused for another reason (positions, memory, heads), not the range
                assert code == 2 and "must be in" not in err, err
            shutil.rmtree(tmp_path / "b", ignore_errors=True)
    for value in (least - 1, most + 1):
        extra = ["--out", str(tmp_path / "o")] if argv[0] in ("grid", "sweep") else []
        assert main([*argv, flag, str(value), *extra]) == 2
        assert f"{flag}: must be in {least}..{most}, got {value}" in _one_line_error(capsys)
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("command", "bounds"), [
    (["hw", "step"], hw.STEP_BOUNDS), (["speedup"], speedup.BOUNDS), (["grid"], grid.BOUNDS),
    (["sweep"], sweep.BOUNDS), (["trace"], trace.BOUNDS)])
def test_help_states_every_bound(command, bounds, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for least, most in bounds.values():
        assert f"[{least}..{most}]" in text


def test_bench_and_run_flags_bounds(tmp_path, capsys):
    assert main(["bench", "--requests", str(limits.MAX_REQUESTS + 1)]) == 2
    assert f"--requests: must be in 1..{limits.MAX_REQUESTS:g}" in _one_line_error(capsys)
    assert main(["run", "--load-curve", "--workers", str(limits.MAX_WORKERS + 1),
                 "--out", str(tmp_path / "o")]) == 2
    assert f"--workers: must be in 1..{limits.MAX_WORKERS}" in _one_line_error(capsys)


def test_list_flags_at_and_past_their_bounds():
    assert _lists.int_list(f"1,{limits.MAX_SEQS}", "--batches", 1,
                           maximum=limits.MAX_SEQS) == [1, limits.MAX_SEQS]
    with pytest.raises(UserError, match=f"--batches: values must be <= {limits.MAX_SEQS}"):
        _lists.int_list(f"1,{limits.MAX_SEQS + 1}", "--batches", 1, maximum=limits.MAX_SEQS)
    assert len(_lists.int_list(",".join(["1"] * 3), "--x", max_count=3)) == 3
    with pytest.raises(UserError, match="--x: at most 3 values, got 4"):
        _lists.int_list(",".join(["1"] * 4), "--x", max_count=3)


def test_tree_flags_at_and_past_their_bounds():
    g = limits.MAX_GAMMA
    assert _lists.tree_widths(str(g)) == [g]
    assert _lists.tree_widths(",".join(["1"] * g)) == [1] * g  # depth at the bound
    with pytest.raises(UserError, match=f"must be <= {g}"):
        _lists.tree_widths(str(g + 1))
    with pytest.raises(UserError, match=f"at most {g} values"):
        _lists.tree_widths(",".join(["1"] * (g + 1)))
    # 64 + 64 * 63 = 4096 nodes: at the bound; one more node past it.
    assert _lists.tree_widths("64,63") == [64, 63]
    with pytest.raises(UserError, match=f"more than {limits.MAX_TREE_NODES} nodes"):
        _lists.tree_widths("64,63,1")


def test_grid_cell_count_is_bounded(tmp_path, capsys):
    ones = ",".join(["1"] * 101)
    tens = ",".join(["16"] * 100)  # 101 x 100 = 10100 cells > MAX_POINTS
    argv = _without(_without(GRID, "--batches"), "--contexts")
    assert main([*argv, "--batches", ones, "--contexts", tens, "--out", str(tmp_path / "o")]) == 2
    assert f"at most {limits.MAX_POINTS}" in _one_line_error(capsys)
    few = ",".join(["1"] * 11)  # 11 x 100 = 1100 simulated cells > MAX_SIMULATED_CELLS
    assert main([*argv, "--batches", few, "--contexts", tens, "--simulate",
                 "--out", str(tmp_path / "o")]) == 2
    assert f"at most {limits.MAX_SIMULATED_CELLS} with --simulate" in _one_line_error(capsys)
    assert not (tmp_path / "o").exists()


# Scenario fields: (dotted key, its bound, an integer field or not)
FIELDS = [
    ("variants.1.policy.gamma", limits.MAX_GAMMA, True),
    ("scheduler.max_num_seqs", limits.MAX_SEQS, True),
    ("run.requests", limits.MAX_REQUESTS, True),
    ("deployment.tp", limits.MAX_GPUS, True),
    ("workload.rate_per_s", limits.MAX_RATE, False),
    ("run.horizon_s", limits.MAX_SECONDS, False),
    ("workload.prompt.tokens", limits.MAX_TOKENS, True),
]


@pytest.mark.parametrize(("key", "bound", "integer"), FIELDS, ids=[f[0] for f in FIELDS])
def test_scenario_field_at_its_bound_validates_and_past_it_is_refused(key, bound, integer):
    doc = read_yaml(default_scenario_path())
    doc["workload"]["prompt"] = {"kind": "fixed", "tokens": 16}
    node = doc
    *parents, leaf = key.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[leaf] = bound
    validate(doc, "s.yaml")  # the schema accepts the bound itself
    node[leaf] = bound + 1 if integer else bound * 1.5
    with pytest.raises(UserError) as err:
        validate(doc, "s.yaml")
    text = str(err.value)
    shown = str(bound) if integer else f"{bound:g}"
    assert "\n" not in text and f"s.yaml: {key}: must be <= {shown}, got " in text


def test_load_scenario_names_the_file_and_field_past_a_bound(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(f"run: {{requests: {limits.MAX_REQUESTS + 1}}}\n")
    with pytest.raises(UserError, match=r"s\.yaml.*run\.requests"):
        load_scenario(path)


def _numbers(node, path=""):
    """(path, schema) of every integer or number in a JSON schema."""
    if isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            yield path, node
        for key, value in node.items():
            yield from _numbers(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _numbers(value, f"{path}[{i}]")


def test_every_number_in_the_scenario_schema_has_an_upper_bound():
    """The schema behind the generated scenario reference: no integer or number field (in
    any section, any kind) is unbounded above."""
    from sim.scenario import Scenario

    found = list(_numbers(Scenario.model_json_schema()))
    assert len(found) > 50  # the walk does reach the fields
    unbounded = [p for p, s in found
                 if not {"maximum", "exclusiveMaximum", "const", "enum"} & set(s)]
    assert unbounded == []
