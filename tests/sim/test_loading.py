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
