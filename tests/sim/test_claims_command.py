"""``specsim claims`` end to end through ``sim.cli.main``."""

from __future__ import annotations

import json

import pytest

from reports.claims import VERDICTS
from sim.cli import main


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
    # 3 Table 2 rows + 2 tree rows (batch 64 is left out of --quick), each with an
    # assumptions line, then the footer
    assert len(lines) == 1 + 2 * 5 + 1
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
    assert len(rows) == 23
    assert rows["specinfer-tree-parallel-decoding"]["verdict"] == "not comparable"
    assert {r["verdict"] for r in rows.values()} <= set(VERDICTS)
    # batch 1..16, two modes, two single-node setups
    assert len(rows["specinfer-one-node"]["checks"]) == 20
