"""Task mix: streams encode the task; each task's rows go to its own model."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.errors import UserError
from workloads.acceptance import IIDAcceptance, chain_widths
from workloads.bursty import BurstyAcceptance
from workloads.task_mix import TaskMixAcceptance


def _mix():
    return TaskMixAcceptance(
        {
            "never": (1.0, IIDAcceptance(0.0)),
            "always": (3.0, IIDAcceptance(1.0)),
            "bursty": (1.0, BurstyAcceptance(0.9, 0.2, 30, 30, np.random.default_rng(0))),
        }
    )


def test_streams_encode_tasks_and_route():
    mix = _mix()
    streams = mix.streams_for_tasks(
        ["never", "always", "bursty", "always"], np.random.default_rng(1)
    )
    assert mix.tasks_of(streams) == ["never", "always", "bursty", "always"]
    w = np.broadcast_to(chain_widths(4), (4, 4))
    a = mix.accept(streams, np.zeros(4, np.int64), w, np.random.default_rng(2))
    assert a[0] == 0 and a[1] == 4 and a[3] == 4 and 0 <= a[2] <= 4


def test_bursty_stream_keeps_its_tape_offset_through_the_mix():
    mix = _mix()
    bursty = mix.models[2]
    streams = mix.streams_for_tasks(["bursty"] * 50, np.random.default_rng(3))
    inner = streams >> 8
    pos = np.arange(50, dtype=np.int64)
    assert np.array_equal(bursty.regimes(inner, pos, 3), bursty.regimes(streams >> 8, pos, 3))
    w = np.broadcast_to(chain_widths(3), (50, 3))
    a_mix = mix.accept(streams, pos, w, np.random.default_rng(4))
    a_direct = bursty.accept(inner, pos, w, np.random.default_rng(4))
    assert np.array_equal(a_mix, a_direct)


def test_new_streams_follow_weights_and_expectations_are_weighted():
    mix = _mix()
    names = mix.tasks_of(mix.new_streams(20_000, np.random.default_rng(5)))
    assert np.mean([n == "always" for n in names]) == pytest.approx(0.6, abs=0.015)
    w = chain_widths(4)
    exact = 0.2 * 1 + 0.6 * 5 + 0.2 * mix.models[2].expected_tokens(w)
    assert mix.expected_tokens(w) == pytest.approx(exact, abs=1e-12)
    assert mix.mean_alpha == pytest.approx(0.6 + 0.2 * mix.models[2].mean_alpha)


def test_validation():
    with pytest.raises(UserError, match="at least one"):
        TaskMixAcceptance({})
    with pytest.raises(UserError, match="tasks.a"):
        TaskMixAcceptance({"a": (0.0, IIDAcceptance(0.5))})
    with pytest.raises(UserError, match="tasks.a"):
        TaskMixAcceptance({"a": (1.0, "iid")})
    with pytest.raises(UserError, match="unknown task 'z'"):
        _mix().streams_for_tasks(["z"], np.random.default_rng(0))
