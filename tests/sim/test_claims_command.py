"""``specsim claims`` end to end through ``sim.cli.main``."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.studies.claims import VERDICTS


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_rows(capsys, tmp_path):
    code, out, _ = run(capsys, "claims", "--only", "leviathan", "--json", "--out",
                       str(tmp_path))
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 5
    for row in rows:
        assert {"claim", "paper", "specsim", "verdict", "assumptions"} <= set(row)
        assert row["verdict"] in VERDICTS
        inside = [c["inside"] for c in row["checks"]]
        assert row["verdict"] == ("inside" if all(inside) else
                                  "outside" if not any(inside) else "partly inside")
    assert (tmp_path / "claims.csv").exists() and (tmp_path / "report.md").exists()


def test_quick_table(capsys, tmp_path):
    code, out, _ = run(capsys, "claims", "--quick", "--only",
                       "specinfer-table2,trees-vs-load", "--out", str(tmp_path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["claim", "paper", "specsim", "verdict"]
    # 3 Table 2 rows + 3 tree rows (--quick keeps batch 64, which has a claim of its own)
    # + the 3 tree rows again on the default timing, each with an assumptions line, then
    # the footer
    assert len(lines) == 1 + 2 * 9 + 1
    assert sum("[analytic (default timing)]" in line for line in lines) == 3
    assert lines[-1].endswith(f"results: {tmp_path}/")
    # none of these rows carries a curve, so no figure is drawn
    assert (tmp_path / "claims.csv").exists() and not (tmp_path / "claims.png").exists()


def test_unknown_group_is_one_line_error(capsys):
    code, out, err = run(capsys, "claims", "--only", "bogus")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "specsim claims: error: --only: unknown claim group 'bogus'" in err


def test_help_lists_groups(capsys):
    try:
        main(["claims", "--help"])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    assert "specinfer-distributed" in out and "trees-vs-load" in out


@pytest.mark.slow
def test_full_run_every_row_has_a_verdict(capsys, tmp_path):
    # The full `specsim claims` (about 10-20 s here): every claim of the brief is present.
    code, out, _ = run(capsys, "claims", "--json", "--out", str(tmp_path))
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert len(rows) == 30  # 23 claims + the 7 section-7 claims again on the default timing
    assert sum(name.endswith("-default-timing") for name in rows) == 7
    assert rows["specinfer-tree-parallel-decoding"]["verdict"] == "not comparable"
    assert {r["verdict"] for r in rows.values()} <= set(VERDICTS)
    # batch 1..16, two modes, two single-node setups
    assert len(rows["specinfer-one-node"]["checks"]) == 20


def _verdicts(capsys, tmp_path, *flags):
    code, out, _ = run(capsys, "claims", *flags, "--json", "--out", str(tmp_path))
    assert code == 0
    return {r["claim"]: r["verdict"] for r in json.loads(out)}


def test_quick_verdicts_are_the_full_runs_batching(capsys, tmp_path):
    """--quick used to try only γ in {1, 4}: batch 256 / context 1024 came out 'outside'."""
    only = ("--only", "batching,trees-vs-load")
    quick = _verdicts(capsys, tmp_path / "q", "--quick", *only)
    assert quick == _verdicts(capsys, tmp_path / "f", *only)
    assert len(quick) == 14  # 7 claims on the paper GPU, each again on the default timing


@pytest.mark.slow
def test_quick_verdicts_are_the_full_runs(capsys, tmp_path):
    quick = _verdicts(capsys, tmp_path / "q", "--quick")
    assert quick == _verdicts(capsys, tmp_path / "f")
    assert len(quick) == 30


def test_claims_out_that_is_a_file_is_one_line(capsys, tmp_path):
    out = tmp_path / "f"
    out.write_text("x")
    code, _, err = run(capsys, "claims", "--only", "leviathan", "--out", str(out))
    assert code == 2 and err.count("\n") == 1
    assert f"--out {out}: exists and is not a folder" in err
