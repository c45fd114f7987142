"""Reading scenario files: encodings, duplicate keys, empty files, what is read, where."""

from __future__ import annotations

import os

import pytest

from sim.loading import find_file, load_scenario, read_yaml, repo_root
from specdec.errors import UserError


def test_bytes_that_are_not_utf8_name_the_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(UserError) as err:
        load_scenario(f)
    assert str(err.value) == f"{f}: cannot read scenario: not UTF-8 text (byte 6)"


def test_a_key_given_twice_is_refused_with_its_line(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("run:\n  requests: 5\nworkload:\n  rate_per_s: 2\n  rate_per_s: 3\n")
    with pytest.raises(UserError) as err:
        read_yaml(f)
    assert str(err.value) == f"{f}: not valid YAML: line 5, column 3: duplicate key 'rate_per_s'"


def test_an_empty_file_is_refused_but_an_empty_mapping_is_all_defaults(tmp_path):
    (tmp_path / "e.yaml").write_text("# nothing\n")
    with pytest.raises(UserError, match=r"e\.yaml: the scenario file is empty"):
        read_yaml(tmp_path / "e.yaml")
    (tmp_path / "d.yaml").write_text("{}\n")
    assert read_yaml(tmp_path / "d.yaml") == {}


def test_the_reader_names_what_it_reads(tmp_path):
    with pytest.raises(UserError, match="cannot read candidates file: Is a directory"):
        read_yaml(tmp_path, "candidates file")


def test_a_relative_path_falls_back_to_the_repository_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_file("scenarios/default.yaml") == repo_root() / "scenarios" / "default.yaml"
    assert load_scenario("scenarios/default.yaml").name == load_scenario().name
    # The working directory wins when the file is there.
    os.makedirs("scenarios")
    (tmp_path / "scenarios" / "default.yaml").write_text("name: local\n")
    assert load_scenario("scenarios/default.yaml").name == "local"
    with pytest.raises(UserError) as err:
        load_scenario("scenarios/nope.yaml")
    assert str(err.value) == f"scenarios/nope.yaml: scenario not found here or under {repo_root()}"


def test_a_workload_section_without_a_rate_gets_the_documented_default(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("workload:\n  output: {kind: fixed, tokens: 10}\n")
    assert load_scenario(f).workload.rate_per_s == 4.0
    assert load_scenario(f).workload == load_scenario(f, ["workload.rate_per_s=4"]).workload


def test_types_are_strict_but_integers_are_numbers(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("workload: {rate_per_s: 3}\nscheduler: {chunked_prefill: false}\n")
    sc = load_scenario(f)
    assert sc.workload.rate_per_s == 3.0 and sc.scheduler.chunked_prefill is False
    for bad, message in [("run.requests=10.5", "run.requests: input should be a valid integer"),
                         ("run.seed=true", "run.seed: input should be a valid integer"),
                         ("models.target=3", "models.target: input should be a valid string")]:
        with pytest.raises(UserError, match=message):
            load_scenario(f, [bad])


def _replay(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    text = "arrival_at,prompt_tokens,output_tokens\n" + "".join(f"{t},10,{n}\n" for t, n in rows)
    (folder / "r.csv").write_text(text)


def test_a_relative_data_file_is_read_from_the_scenarios_folder(tmp_path, monkeypatch):
    """Not from the working directory, which holds another r.csv: the scenario's own (its
    folder's) is replayed, as docs/reference/scenario.md says."""
    from sim.build import setups

    _replay(tmp_path / "exp", [(0, 5), (1, 7)])
    _replay(tmp_path / "cwd", [(0, 99), (1, 99)])
    scenario = tmp_path / "exp" / "s.yaml"
    scenario.write_text("workload: {arrivals: replay, file: r.csv}\nrun: {requests: 2}\n"
                        "variants: [{name: none, policy: {kind: none}}]\n")
    monkeypatch.chdir(tmp_path / "cwd")
    sc = load_scenario(scenario)
    assert sc.workload.file == str(tmp_path / "exp" / "r.csv")
    assert list(setups(sc)[0][1].table.output_tokens) == [5, 7]
    # a --set path is the command line's: from the working directory
    sc = load_scenario(scenario, ["workload.file=r.csv"])
    assert list(setups(sc)[0][1].table.output_tokens) == [99, 99]


def test_a_shipped_scenarios_repository_paths_work_from_anywhere(tmp_path, monkeypatch):
    (tmp_path / "workloads" / "traces").mkdir(parents=True)  # a decoy under the cwd
    (tmp_path / "workloads" / "traces" / "perturbed-0.1-greedy.npz").write_text("not a trace")
    monkeypatch.chdir(tmp_path)
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml")
    assert sc.acceptance.file == str(repo_root() / "workloads/traces/perturbed-0.1-greedy.npz")


def test_every_data_file_field_is_anchored_and_a_missing_one_named_where_looked(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "deployment: {catalog: extra.yaml}\n"
        "workload: {prompt: {kind: empirical, file: lengths.csv, column: n}}\n"
        "acceptance: {kind: trace, file: t.npz}\n"
        "variants: [{name: a, policy: {kind: none}, acceptance: {kind: vllm_metrics, "
        "file: m.prom}}]\n")
    doc = read_yaml(scenario)
    assert doc["deployment"]["catalog"] == str(tmp_path / "extra.yaml")
    assert doc["workload"]["prompt"]["file"] == str(tmp_path / "lengths.csv")
    assert doc["acceptance"]["file"] == str(tmp_path / "t.npz")
    assert doc["variants"][0]["acceptance"]["file"] == str(tmp_path / "m.prom")
