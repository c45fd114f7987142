"""Request specs: building from sources with spawned generators, CSV round trip and errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specdec.errors import UserError
from workloads.arrivals import PoissonArrivals, ReplayArrivals
from workloads.lengths import FixedLength, LogNormalLength, UniformLength
from workloads.requests import (
    RequestSpec,
    build_requests,
    read_request_csv,
    request_columns,
    write_request_csv,
)


def _build(seed, output=None, tasks=None, **kw):
    return build_requests(
        PoissonArrivals(2.0),
        UniformLength(10, 100),
        output or LogNormalLength(0.7, median_tokens=120, max_tokens=1000),
        np.random.default_rng(seed),
        tasks=tasks,
        **kw,
    )


def test_build_requests_shapes_and_fields():
    specs = _build(1, n=500, tasks={"chat": 3.0, "code": 1.0})
    assert len(specs) == 500
    assert [s.id for s in specs] == list(range(500))
    t = np.array([s.arrival_at for s in specs])
    assert np.all(np.diff(t) >= 0)
    assert all(10 <= s.prompt_tokens <= 100 and 1 <= s.output_tokens <= 1000 for s in specs)
    share = np.mean([s.task == "chat" for s in specs])
    assert share == pytest.approx(0.75, abs=0.06)  # 500 draws: SD 0.019
    with pytest.raises(dataclasses.FrozenInstanceError):
        specs[0].task = "x"


@pytest.mark.parametrize("kw", [{"n": 300, "tasks": {"chat": 3.0, "code": 1.0}},
                                {"horizon_s": 50.0}])
def test_columns_are_the_specs_without_an_object_per_request(kw):
    """``request_columns`` draws what ``build_requests`` draws (same generators, same
    order): its arrays and its ``specs()`` are the specs."""
    specs = _build(7, **kw)
    cols = request_columns(PoissonArrivals(2.0), UniformLength(10, 100),
                           LogNormalLength(0.7, median_tokens=120, max_tokens=1000),
                           np.random.default_rng(7), **kw)
    assert len(cols) == len(specs) > 0 and cols.specs() == specs
    assert cols.arrival_at.tolist() == [s.arrival_at for s in specs]
    assert cols.prompt_tokens.tolist() == [s.prompt_tokens for s in specs]
    assert [cols.task_names[k] for k in cols.task] == [s.task for s in specs]
    assert cols.prompt_tokens.dtype == cols.output_tokens.dtype == np.int64


def test_horizon_mode():
    specs = _build(2, horizon_s=100.0)
    assert all(s.arrival_at < 100.0 for s in specs)
    assert all(s.task == "default" for s in specs)


def test_sources_are_independent_streams():
    # changing the output-length source must not move arrivals, prompts or tasks
    a = _build(3, n=200, tasks={"x": 1, "y": 1})
    b = _build(3, n=200, output=FixedLength(64), tasks={"x": 1, "y": 1})
    assert [(s.arrival_at, s.prompt_tokens, s.task) for s in a] == [
        (s.arrival_at, s.prompt_tokens, s.task) for s in b
    ]
    assert all(s.output_tokens == 64 for s in b)


def test_seeds():
    assert _build(4, n=50) == _build(4, n=50)
    assert _build(4, n=50) != _build(5, n=50)


def test_task_weight_validation():
    for tasks, frag in [({}, "at least one"), ({"a": 0}, "tasks.a"), ({"a": "x"}, "tasks.a")]:
        with pytest.raises(UserError, match=frag):
            _build(1, n=5, tasks=tasks)


def test_csv_round_trip(tmp_path):
    specs = _build(6, n=300, tasks={"chat": 1.0, "sum": 2.0})
    f = tmp_path / "trace.csv"
    write_request_csv(f, specs)
    back = read_request_csv(f)
    assert back == specs
    replay = ReplayArrivals(np.array([s.arrival_at for s in back]))
    assert np.array_equal(
        replay.sample(np.random.default_rng(0), n=300), [s.arrival_at for s in specs]
    )


def test_csv_optional_task_and_synonym(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,6\n1.5,7,8\n")
    assert read_request_csv(f) == [RequestSpec(0, 0.0, 5, 6), RequestSpec(1, 1.5, 7, 8)]


HEADER = "arrival_at,prompt_tokens,output_tokens,task\n"
BAD_FILES = [
    ("", "empty file"),
    ("arrival_at,prompt_tokens\n0,5\n", "line 1: missing column 'output_tokens'"),
    ("arrival_at,prompt_tokens,output_tokens,tsk\n0,1,1,a\n", "line 1: unknown column 'tsk'"),
    (HEADER, "no requests"),
    (HEADER + "0,5,6,a\nabc,5,6,a\n", "line 3: column 'arrival_at': not a number: 'abc'"),
    (HEADER + "-1,5,6,a\n", "line 2: column 'arrival_at': must be >= 0"),
    (HEADER + "nan,5,6,a\n", "line 2: column 'arrival_at': not finite"),
    (HEADER + "2,5,6,a\n1,5,6,a\n", "line 3: column 'arrival_at': times must not decrease"),
    (HEADER + "0,,6,a\n", "line 2: column 'prompt_tokens': missing value"),
    (HEADER + "0,5\n", "line 2: column 'output_tokens': missing value"),
    (HEADER + "0,5.5,6,a\n", "line 2: column 'prompt_tokens': not an integer: '5.5'"),
    (HEADER + "0,5,0,a\n", "line 2: column 'output_tokens': must be >= 1"),
    (HEADER + "0,5,-2,a\n", "line 2: column 'output_tokens': must be >= 1"),
    (HEADER + "0,5,6,a,extra\n", "line 2: 5 cells for 4 columns"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD_FILES)
def test_csv_rejects_bad_files_with_one_line(tmp_path, text, fragment):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(UserError) as info:
        read_request_csv(f)
    msg = str(info.value)
    assert msg.startswith(f"{f}: ")
    assert fragment in msg
    assert "\n" not in msg


def test_csv_missing_file(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        read_request_csv(tmp_path / "nope.csv")


def test_csv_that_is_not_utf8_is_one_line(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_bytes(b"arrival_at,prompt_tokens,output_tokens\n\xff\xfe,1,1\n")
    with pytest.raises(UserError, match=r"bad\.csv: cannot read: not UTF-8 text \(byte 39\)"):
        read_request_csv(f)
