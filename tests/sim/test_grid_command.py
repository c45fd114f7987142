"""``specsim grid``: the lecture's §7 pattern read back from the CSV it writes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sim.cli import main

# the lecture's §7 pattern: its paper GPU
BASE = ["grid", "--target", "llama-3-8b", "--draft", "llama-3.2-1b", "--gpu", "h100",
        "--alpha", "0.8", "--timing", "paper"]


@pytest.fixture(scope="module")
def grid_csv(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid")
    assert main([*BASE, "--batches", "1,4,16,64,256,512", "--contexts", "128,512,1024",
                 "--out", str(out)]) == 0
    assert (out / "grid.png").stat().st_size > 10_000
    return pd.read_csv(out / "grid.csv").set_index(["batch", "context"])


def test_lecture_section_7_pattern(grid_csv):
    g = grid_csv
    # ≈ 1.74x at small batch (γ = 4).
    assert round(g.loc[(1, 1024), "best_speedup"], 2) == 1.74
    assert g.loc[(1, 1024), "best_gamma"] == 4
    # Context 128, batch 256: γ = 4 is below 1x (0.73x); the best γ is 1 at 1.03x.
    assert round(g.loc[(256, 128), "speedup_g4"], 2) == 0.73
    assert g.loc[(256, 128), "best_gamma"] == 1
    # Context 1024 stays above 1.6x at batch 256.
    assert g.loc[(256, 1024), "best_speedup"] > 1.6
    # The best γ falls (never rises) as the batch grows, at every context.
    for ctx in (128, 512, 1024):
        gammas = [g.loc[(b, ctx), "best_gamma"] for b in (1, 4, 16, 64, 256, 512)]
        assert gammas == sorted(gammas, reverse=True)
        assert gammas[0] > gammas[-1]
    # Batch 512, context 128: do not speculate.
    assert g.loc[(512, 128), "best_gamma"] == 0 and g.loc[(512, 128), "best_speedup"] == 1.0


def test_tree_grid_json(tmp_path, capsys):
    rc = main([*BASE, "--tree", "k,1,1,1", "--widths", "1,2", "--batches", "1,64",
               "--contexts", "1024", "--out", str(tmp_path), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 4 and (tmp_path / "tree_grid.png").exists()


@pytest.mark.parametrize("extra, msg", [
    (["--batches", "1,x"], "--batches"),
    (["--contexts", "-1"], "--contexts"),
    (["--tree", "k,1", "--contexts", "128,1024"], "one context"),
    (["--tree", "k,1", "--contexts", "128", "--simulate"], "--simulate"),
    # tree options without --tree used to be silently ignored
    (["--widths", "1,5"], "--widths: only applies to a tree grid"),
    (["--theta", "0.5"], "--theta: only applies to a tree grid"),
    (["--tokens-per-verify", "1.5"], "--tokens-per-verify: only applies to a tree grid"),
    # --tree without --contexts used to blame --contexts for the chain default list
    (["--tree", "k,1,1,1", "--widths", "1,5"], "--tree: a tree grid is at one context: give "
                                               "--contexts C"),
    (["--gpu", "nope"], "nope"),
])
def test_bad_input_one_line(tmp_path, capsys, extra, msg):
    args = [*BASE, "--out", str(tmp_path)]
    if "--gpu" in extra:
        args[args.index("--gpu") + 1] = extra[1]
        extra = []
    assert main([*args, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0]


@pytest.mark.parametrize("where", ["file", "proc"])
def test_out_that_cannot_be_a_folder_is_one_line(where, tmp_path, capsys):
    out = tmp_path / "f"
    out.write_text("x")
    path = str(out) if where == "file" else "/proc/specsim-x"
    assert main([*BASE, "--batches", "1", "--contexts", "128", "--out", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and path in err[0], err
    assert "Traceback" not in err[0]


def test_help_shows_the_list_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["grid", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default 1,4,16,64,256,512" in text and "default 128,512,1024,2048,4096" in text


def test_out_that_holds_files_is_refused_and_force_replaces_only_a_grid_folder(tmp_path,
                                                                              capsys):
    out = tmp_path / "g"
    out.mkdir()
    (out / "old.txt").write_text("someone's files")
    small = [*BASE, "--batches", "1", "--contexts", "128", "--out", str(out)]
    assert main(small) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists and is not empty; give --force" in err[0]
    assert main([*small, "--force"]) == 2  # not a folder SpecSim wrote: kept
    assert "not a folder SpecSim wrote" in capsys.readouterr().err
    assert (out / "old.txt").exists() and not (out / "grid.csv").exists()
    (out / "old.txt").unlink()
    assert main(small) == 0
    assert main(small) == 2
    assert main([*small, "--force"]) == 0  # a grid SpecSim wrote is replaced
    names = {p.name for p in out.iterdir()}
    assert {"grid.csv", "grid.png"} <= names
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


@pytest.mark.parametrize(("extra", "positions"), [
    ([], 8 + 1),  # a chain verify of gamma_max = 8 takes 9 positions
    (["--tree", "k,1,1", "--widths", "2"], 3 + 1),  # a tree of depth 3 takes 4
])
def test_contexts_past_the_models_positions_are_refused_as_hw_step_does(extra, positions,
                                                                        tmp_path, capsys):
    """llama-3-8b has 8192 positions: context 8192 - positions fits, one more does not."""
    limit = 8192
    args = [*BASE, "--batches", "1", *extra]
    assert main([*args, "--contexts", str(limit - positions), "--out", str(tmp_path / "a"),
                 "--json"]) == 0
    capsys.readouterr()
    assert main([*args, "--contexts", str(limit - positions + 1),
                 "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--contexts {limit - positions + 1}: llama-3-8b" in err[0]
    assert f"exceed max_position_embeddings {limit}" in err[0]
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("method", ["eagle3", "mtp", "ngram"])
def test_method_grids_price_the_methods_drafter(method, tmp_path, capsys):
    """--method builds the drafter as a scenario does: a head (cheaper than the 1B draft
    model, so it pays more at batch 1) or CPU lookup (no GPU time at all)."""
    base = [a for a in BASE if a not in ("--draft", "llama-3.2-1b")]
    cells = ["--batches", "1,64", "--contexts", "1024", "--json"]
    assert main([*base, "--method", method, *cells, "--out", str(tmp_path / "m")]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert main([*BASE, *cells, "--out", str(tmp_path / "d")]) == 0
    model = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["best_speedup"] > model[0]["best_speedup"] > 1.0
    assert main([*base, *cells, "--out", str(tmp_path / "x")]) == 2
    assert "--draft: required with --method draft_model" in capsys.readouterr().err


def test_simulated_method_grid_runs_the_engine(tmp_path, capsys):
    base = [a for a in BASE if a not in ("--draft", "llama-3.2-1b")]
    assert main([*base, "--method", "eagle3", "--simulate", "--batches", "1",
                 "--contexts", "128", "--gamma-max", "2", "--json",
                 "--out", str(tmp_path / "s")]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["best_speedup"] > 1.0 and row["fits"]


def test_method_mtp_grid_on_deepseek_v3(tmp_path, capsys):
    assert main(["grid", "--target", "deepseek-v3", "--method", "mtp", "--gpu", "h200",
                 "--tp", "8", "--compute-dtype", "fp8", "--alpha", "0.8", "--timing",
                 "roofline", "--batches", "1,8", "--contexts", "1024", "--gamma-max", "2",
                 "--json", "--out", str(tmp_path / "g")]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["batch"] for r in rows] == [1, 8] and all(r["best_speedup"] > 1.0 for r in rows)


def test_a_large_grid_is_summarised_and_its_figure_stays_small(tmp_path, capsys):
    """A 10,000-cell grid was silent, then printed 10,000 rows and wrote a 10 MB figure:
    past 200 rows it prints counts and the best rows, and says where the table is; past
    400 cells the heatmap's cells carry no text, its sides are bounded and it says so."""
    batches = ",".join(str(b) for b in range(1, 22))  # 21 x 20 = 420 cells
    contexts = ",".join(str(64 * c) for c in range(1, 21))
    out = tmp_path / "g"
    assert main([*BASE, "--batches", batches, "--contexts", contexts, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert lines[0] == (f"420 rows, past 200: the 10 with the highest best_speedup below, all "
                        f"of them in {out / 'grid.csv'}")
    assert lines[1].startswith("fit the GPU: ") and len(lines) == 2 + 11 + 3
    assert "grid: 100%" in printed.err and "420/420" in printed.err  # the progress bar
    assert len(pd.read_csv(out / "grid.csv")) == 420
    assert (out / "grid.png").stat().st_size < 400_000


def test_a_large_heatmap_is_unlabelled_and_bounded():
    from reports import figures

    grid = pd.DataFrame([{"batch": b, "context": c, "best_gamma": 2, "best_speedup": 1.2,
                          "fits": True} for b in range(1, 101) for c in range(1, 11)])
    fig = figures.speedup_heatmap(grid, "t")
    ax = fig.axes[0]
    assert len(ax.texts) == 0 and max(fig.get_size_inches()) <= figures.MAX_SIDE_IN
    assert len(ax.get_yticks()) <= figures.MAX_TICKS
    assert any("1000 cells, past 400: cells are not labelled" in t.get_text()
               for t in fig.texts)
    figures.close(fig)
    small = figures.speedup_heatmap(grid[grid["batch"] <= 4], "t")  # 40 cells: labelled
    assert len(small.axes[0].texts) == 40
    figures.close(small)


def test_no_progress_leaves_stderr_empty(tmp_path, capsys):
    assert main([*BASE, "--batches", "1,4", "--contexts", "128", "--no-progress",
                 "--out", str(tmp_path / "g")]) == 0
    assert capsys.readouterr().err == ""
