"""Run folders: where ``--out`` cannot be a folder, one line and exit 2 (no traceback)."""

from __future__ import annotations

import pytest

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
    assert "cannot create the folder" in _refused(tmp_path / "f" / "sub", capsys)


def test_make_dir_makes_parents(tmp_path):
    assert make_dir(tmp_path / "a" / "b", "--out").is_dir()
    with pytest.raises(UserError, match="--x"):
        make_dir("/proc/y", "--x")
