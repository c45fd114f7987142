"""Run folders: where ``--out`` cannot be a folder, one line and exit 2 (no traceback)."""

from __future__ import annotations

import pytest
import yaml

from sim.cli import main
from sim.output import make_dir
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


def test_a_non_empty_out_is_refused_unless_forced_and_force_replaces_it_whole(tmp_path, capsys):
    from sim.cli import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "old.txt").write_text("an earlier run")
    args = ["run", "--set", "run.requests=5", "--no-report", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--out {out}: exists and is not empty; give --force to replace it, "
                        "or another folder")
    assert (out / "old.txt").exists()
    assert main([*args, "--force"]) == 0
    assert not (out / "old.txt").exists()  # replaced whole, not mixed
    assert yaml.safe_load((out / "meta.yaml").read_text())["complete"] is True
    assert not list(tmp_path.glob(".run.*"))  # no temporary folder left behind


def test_a_failing_report_leaves_no_folder(tmp_path, capsys):
    from sim.cli import main

    out = tmp_path / "run"
    assert main(["run", "--set", "run.requests=5", "--warmup", "1e6", "--out", str(out)]) == 2
    assert "--warmup 1e+06: the run's last request arrived" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())
