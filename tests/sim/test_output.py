"""Run folders: where ``--out`` cannot be a folder, one line and exit 2 (no traceback)."""

from __future__ import annotations

import pytest
import yaml

from sim.cli import main
from sim.output import MARKER, make_dir
from specdec.errors import UserError


def _refused(out, capsys) -> str:
    code = main(["run", "--set", "run.requests=3", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


def test_out_an_existing_file_is_refused(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("keep me")
    assert _refused(f, capsys).endswith(f"--out {f}: exists and is not a folder")
    assert f.read_text() == "keep me"


def test_out_where_no_folder_can_be_made_is_refused(tmp_path, capsys):
    assert _refused("/proc/x", capsys).endswith(
        "--out /proc/x: cannot create the folder: No such file or directory")
    (tmp_path / "f").write_text("")
    assert _refused(tmp_path / "f" / "sub", capsys).endswith(
        f"{tmp_path / 'f'}: exists and is not a folder")


def test_make_dir_makes_parents(tmp_path):
    assert make_dir(tmp_path / "a" / "b", "--out").is_dir()
    with pytest.raises(UserError, match="--x"):
        make_dir("/proc/y", "--x")


def test_a_non_empty_out_is_refused_unless_forced_and_force_replaces_an_earlier_run(
        tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", "--set", "run.requests=5", "--no-report", "--out", str(out)]
    assert main(args) == 0
    first = sorted(p.name for p in out.iterdir())
    assert MARKER in first
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--out {out}: exists and is not empty; give --force to replace it "
                        "(a folder SpecSim wrote), or another folder")
    assert main([*args, "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == first
    assert yaml.safe_load((out / "meta.yaml").read_text())["complete"] is True
    assert not list(tmp_path.glob(".run.*"))  # no temporary folder left behind


def _tree(folder):
    return sorted((str(p.relative_to(folder)), p.read_bytes() if p.is_file() else b"")
                  for p in folder.rglob("*"))


def _checkout(path):
    """A folder that looks like a git checkout: a .git folder and a file of the user's."""
    (path / ".git" / "objects").mkdir(parents=True)
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "thesis.tex").write_text("years of work")
    return path


def test_force_never_replaces_a_folder_specsim_did_not_write(tmp_path, capsys):
    repo = _checkout(tmp_path / "repo")
    before = _tree(repo)
    code = main(["run", "--set", "run.requests=3", "--no-report", "--no-progress",
                 "--out", str(repo), "--force"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"--out {repo}: not a folder SpecSim wrote (no {MARKER} file in it)" in err[0]
    assert _tree(repo) == before  # untouched
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]  # no staging left


def test_force_refuses_a_run_folder_with_a_file_added_to_it(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", "--set", "run.requests=3", "--no-report", "--no-progress", "--out",
            str(out)]
    assert main(args) == 0
    (out / "my-notes.txt").write_text("mine")
    before = _tree(out)
    assert main([*args, "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds 'my-notes.txt', which SpecSim did not write" in err[0]
    assert _tree(out) == before


def test_force_refuses_a_forged_or_broken_marker(tmp_path, capsys):
    out = _checkout(tmp_path / "repo")
    (out / MARKER).write_text('{"written_by": "specsim", "paths": ["thesis.tex"]}')
    before = _tree(out)
    assert main(["run", "--set", "run.requests=3", "--no-report", "--no-progress",
                 "--out", str(out), "--force"]) == 2
    assert "holds '.git', which SpecSim did not write" in capsys.readouterr().err
    (out / MARKER).write_text("not json")
    assert main(["run", "--set", "run.requests=3", "--no-report", "--no-progress",
                 "--out", str(out), "--force"]) == 2
    assert "not a folder SpecSim wrote" in capsys.readouterr().err
    assert [t for t in _tree(out) if t[0] != MARKER] == \
        [t for t in before if t[0] != MARKER]  # the marker aside, untouched


def test_force_refuses_the_working_directory_and_its_parents(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    args = ["run", "--set", "run.requests=3", "--no-report", "--no-progress"]
    assert main([*args, "--out", str(out)]) == 0
    monkeypatch.chdir(out)
    for target in (".", ".."):
        assert main([*args, "--out", target, "--force"]) == 2
        err = capsys.readouterr().err
        assert "holds the working directory" in err or "not a folder SpecSim wrote" in err
    assert (out / "meta.yaml").exists()


def test_force_refuses_a_link(tmp_path, capsys):
    real = tmp_path / "run"
    args = ["run", "--set", "run.requests=3", "--no-report", "--no-progress"]
    assert main([*args, "--out", str(real)]) == 0
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    assert main([*args, "--out", str(link), "--force"]) == 2
    assert "is a link" in capsys.readouterr().err
    assert link.is_symlink() and (real / "meta.yaml").exists()


@pytest.mark.parametrize("command", [
    ["sweep", "scenarios/default.yaml", "--vary", "workload.rate_per_s=1,2", "--set",
     "run.requests=3"],
    ["grid", "--target", "llama-3-8b", "--draft", "llama-3.2-1b", "--gpu", "h100",
     "--alpha", "0.8", "--batches", "1", "--contexts", "128"],
    ["claims", "--only", "leviathan"],
])
def test_every_command_that_writes_a_folder_keeps_a_checkout(command, tmp_path, capsys):
    repo = _checkout(tmp_path / "repo")
    before = _tree(repo)
    assert main([*command, "--out", str(repo), "--force"]) == 2
    assert "not a folder SpecSim wrote" in capsys.readouterr().err
    assert _tree(repo) == before


def test_a_failing_report_leaves_no_folder(tmp_path, capsys):
    from sim.cli import main

    out = tmp_path / "run"
    assert main(["run", "--set", "run.requests=5", "--warmup", "1e6", "--out", str(out)]) == 2
    assert "--warmup 1e+06: the run's last request arrived" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_an_empty_working_directory_as_out_is_refused_not_a_traceback(tmp_path, capsys,
                                                                      monkeypatch):
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["run", "--set", "run.requests=3", "--no-report", "--no-progress",
                 "--out", "."]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds the working directory" in err[0]
    assert list(tmp_path.iterdir()) == [here] and not list(here.iterdir())


def test_a_folder_that_changes_after_the_check_is_put_back(tmp_path, monkeypatch):
    """The folder is checked again once moved aside: a file added after the first check
    (a race) makes it go back untouched, and the finished run is discarded."""
    from sim import output

    out = tmp_path / "run"
    args = ["run", "--set", "run.requests=3", "--no-report", "--no-progress", "--out",
            str(out)]
    assert main(args) == 0
    first = output._check_replaceable

    def check_then_write(folder, flag):
        first(folder, flag)
        (folder / "late.txt").write_text("written between the check and the move")

    monkeypatch.setattr(output, "_check_replaceable", check_then_write)
    assert main([*args, "--force"]) == 2
    assert (out / "late.txt").read_text().startswith("written between")
    assert (out / "meta.yaml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
