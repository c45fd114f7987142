"""Shared pytest fixtures and test-process settings."""

from __future__ import annotations

import os

# The tiny transformer's matrices are small: BLAS threads only contend for the two CI
# cores (a trace recording ran 4x slower with them). Set before numpy loads BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import tempfile  # noqa: E402

# Measured kernel tables are tabulated afresh in every test session (not read from the
# user's cache, which an older checkout may have written): a cache folder of its own.
os.environ["SPECSIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="specsim-test-cache-")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402


def pytest_configure(config) -> None:
    """Compile the engine's kernels (numba, cached on disk) once, before any test runs and
    outside every test's timeout: in the controlling process, whose cache the test workers
    then read, or in the one process without xdist. Compiling both kinds of walk takes a
    minute or two on 2 cores, which a test that happened to be first used to spend inside
    its own 120 s."""
    if hasattr(config, "workerinput"):  # an xdist worker: its controller compiled them
        return
    from sim import steady_kernel

    if steady_kernel.available():
        steady_kernel.compiled()
        steady_kernel.compiled_walk(False)
        steady_kernel.compiled_walk(True)


@pytest.fixture
def rng() -> np.random.Generator:
    """A fixed-seed generator; tests that draw take it explicitly."""
    return np.random.default_rng(12345)

SMALL = {
    "name": "small",
    "workload": {"arrivals": "poisson", "rate_per_s": 6.0,
                 "prompt": {"kind": "fixed", "tokens": 128},
                 "output": {"kind": "fixed", "tokens": 48}},
    "acceptance": {"kind": "iid", "alpha": 0.8},
    "run": {"requests": 60, "seed": 7},
    "slo": {"ttft_p99_s": 0.5, "tpot_p99_s": 0.02},
}


@pytest.fixture
def small_scenario(tmp_path: Path) -> Path:
    """A 60-request Llama-3-8B scenario (none vs fixed γ = 4) as a YAML file."""
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(SMALL))
    return p


@pytest.fixture(scope="session")
def small_run(tmp_path_factory) -> Path:
    """A run folder of the small scenario written by ``specsim run`` (shared, read-only)."""
    from sim.cli import main

    d = tmp_path_factory.mktemp("run")
    src = d / "small.yaml"
    src.write_text(yaml.safe_dump(SMALL))
    assert main(["run", str(src), "--out", str(d / "out"), "--json"]) == 0
    return d / "out"
