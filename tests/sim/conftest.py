"""The engine path fixture: the hand-checked semantic tests run on every path."""

from __future__ import annotations

import pytest

from sim.engine_path import PATHS


@pytest.fixture(scope="session", params=["reference", "compiled"])
def engine_path(request):
    """Each engine path a run can take (``sim.engine_path``): the reference scheduler one
    iteration at a time, and the compiled kernels from the first iteration (numba is a
    dependency wherever it has a wheel; without it, this is the reference path again)."""
    return PATHS[request.param]
