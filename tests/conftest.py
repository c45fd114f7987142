"""Shared pytest fixtures and test-process settings."""

from __future__ import annotations

import os

# The tiny transformer's matrices are small: BLAS threads only contend for the two CI
# cores (a trace recording ran 4x slower with them). Set before numpy loads BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng() -> np.random.Generator:
    """A fixed-seed generator; tests that draw take it explicitly."""
    return np.random.default_rng(12345)
