"""The trace file format: round trip, committed traces, one-line errors for malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specdec.errors import UserError
from specdec.traces import AcceptanceTrace, record_settings, regenerate
from workloads.trace_file import load_trace, save_trace

TRACES = Path(__file__).resolve().parents[2] / "workloads" / "traces"
COMMITTED = ["perturbed-0.1-greedy.npz", "perturbed-0.3-greedy.npz", "perturbed-0.3-t0.5.npz"]


@pytest.fixture(scope="module")
def small() -> AcceptanceTrace:
    return record_settings(draft="perturbed", sigma=0.3, temperature=0.5, tokens=60, prompts=2,
                           k_max=3, seed=2)


def arrays_of(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def test_round_trip(tmp_path, small):
    path = save_trace(tmp_path / "t.npz", small)
    back = load_trace(path)
    np.testing.assert_array_equal(back.ranks, small.ranks)
    np.testing.assert_array_equal(back.accept_prob, small.accept_prob)
    np.testing.assert_array_equal(back.sequence, small.sequence)
    assert back.meta == small.meta
    assert back.ranks.dtype == np.int32 and back.accept_prob.dtype == np.float64
    np.testing.assert_array_equal(back.run0, small.run0)


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_traces_regenerate_bit_identically(name):
    path = TRACES / name
    assert path.stat().st_size < 200_000
    trace = load_trace(path)
    again = regenerate(trace.meta)
    np.testing.assert_array_equal(again.ranks, trace.ranks)
    np.testing.assert_array_equal(again.sequence, trace.sequence)
    np.testing.assert_array_equal(again.accept_prob, trace.accept_prob)  # exact, not close
    assert again.meta == trace.meta


def test_committed_traces_order_the_drafts():
    alpha = {n: load_trace(TRACES / n).accept_prob[:, 0].mean() for n in COMMITTED}
    assert alpha["perturbed-0.1-greedy.npz"] > alpha["perturbed-0.3-greedy.npz"] > 0.3


def _write(path: Path, arrays: dict) -> Path:
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def _meta_with(arrays: dict, **changes) -> np.ndarray:
    meta = json.loads(str(arrays["meta_json"]))
    meta.update(changes)
    return np.array(json.dumps(meta))


def _corruptions(a: dict) -> list[tuple[str, dict, str]]:
    n, k = a["accept_prob"].shape
    dec = a["accept_prob"].copy()
    dec[3] = [0.9, 0.5, 0.95]
    return [
        ("missing ranks", {"ranks": None}, "ranks: missing array"),
        ("float ranks", {"ranks": a["ranks"].astype(np.float64)}, "ranks: dtype float64"),
        ("negative rank", {"ranks": np.where(np.arange(n) == 5, -1, a["ranks"]).astype(np.int32)},
         "ranks: must be >= 0"),
        ("1-D probs", {"accept_prob": a["accept_prob"][:, 0].copy()}, "accept_prob: 1-D"),
        ("short probs", {"accept_prob": a["accept_prob"][:-1]}, "accept_prob: shape"),
        ("prob > 1", {"accept_prob": a["accept_prob"] * 2.0 + 0.1}, "must lie in [0, 1]"),
        ("decreasing", {"accept_prob": dec}, "accept_prob: decreases in k at position 3"),
        ("sequence order", {"sequence": a["sequence"][::-1].copy()}, "sequence: ids must be"),
        ("int64 sequence", {"sequence": a["sequence"].astype(np.int64)}, "sequence: dtype int64"),
        ("version", {"format_version": np.array(9)}, "format_version: unknown version 9"),
        ("bad json", {"meta_json": np.array("{oops")}, "meta_json: invalid JSON"),
        ("meta list", {"meta_json": np.array("[1, 2]")}, "meta_json: must be a JSON object"),
        ("meta k", {"meta_json": _meta_with(a, k_max=k + 1)}, "meta_json.k_max"),
        ("meta tokens", {"meta_json": _meta_with(a, tokens=n + 1)}, "meta_json.tokens"),
        ("meta prompts", {"meta_json": _meta_with(a, prompts=[[1]])}, "meta_json.prompts"),
        ("meta lengths", {"meta_json": _meta_with(a, tokens_per_prompt=[n - 1, 1])},
         f"meta_json.tokens_per_prompt: [{n - 1}, 1] differs from the sequence lengths"),
        ("meta draft", {"meta_json": _meta_with(a, draft={"kind": "perturbed"})},
         "meta_json.draft: must be an object with kind, sigma, layers, ngram"),
        ("meta kind", {"meta_json": _meta_with(a, draft={**_draft(a), "kind": "oracle"})},
         "meta_json.draft.kind: 'oracle' is not one of"),
        ("meta temperature", {"meta_json": _meta_with(a, temperature=-1)},
         "meta_json.temperature: must be a number >= 0"),
        ("meta seed", {"meta_json": _meta_with(a, seed="0")}, "meta_json.seed: must be an integer"),
    ]


def _draft(a: dict) -> dict:
    return json.loads(str(a["meta_json"]))["draft"]


def test_malformed_files_give_one_line_errors(tmp_path, small):
    good = arrays_of(save_trace(tmp_path / "good.npz", small))
    for i, (label, change, message) in enumerate(_corruptions(good)):
        arrays = {k: v for k, v in {**good, **change}.items() if v is not None}
        path = _write(tmp_path / f"bad{i}.npz", arrays)
        with pytest.raises(UserError) as err:
            load_trace(path)
        text = str(err.value)
        assert "\n" not in text, label
        assert text.startswith(str(path) + ": "), label
        assert message in text, (label, text)


def test_missing_meta_key_and_unreadable_files(tmp_path, small):
    good = arrays_of(save_trace(tmp_path / "good.npz", small))
    meta = json.loads(str(good["meta_json"]))
    del meta["seed"]
    path = _write(tmp_path / "nometa.npz", {**good, "meta_json": np.array(json.dumps(meta))})
    with pytest.raises(UserError, match=r"meta_json\.seed: missing"):
        load_trace(path)
    (tmp_path / "junk.npz").write_text("not a zip file")
    with pytest.raises(UserError, match="junk.npz: not a valid trace file") as err:
        load_trace(tmp_path / "junk.npz")
    assert "pickle" not in str(err.value)  # numpy's advice to allow pickles misleads here
    (tmp_path / "folder.npz").mkdir()
    with pytest.raises(UserError, match="folder.npz: is a folder"):
        load_trace(tmp_path / "folder.npz")
    with pytest.raises(UserError, match="trace file not found"):
        load_trace(tmp_path / "absent.npz")


def test_saving_where_nothing_can_be_written_is_one_line(tmp_path, small):
    (tmp_path / "file").write_text("x")
    for bad in ("/proc/x.npz", tmp_path / "file" / "t.npz"):
        with pytest.raises(UserError, match="cannot write the trace") as err:
            save_trace(bad, small)
        assert str(err.value).startswith(f"{bad}: ") and "\n" not in str(err.value)
