"""Fixtures shared by the decoding-loop tests: one target, its prompts and greedy outputs."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.decoding import autoregressive_decode
from specdec.model import ModelConfig, TinyTransformer

N_NEW = 120  # tokens generated per prompt, as in the lecture's code 02 (3 prompts x 120)


@pytest.fixture(scope="session")
def target() -> TinyTransformer:
    return TinyTransformer.random(ModelConfig(), 0)


@pytest.fixture(scope="session")
def prompts() -> list[list[int]]:
    rng = np.random.default_rng(1)
    return [list(rng.integers(0, 48, 16)) for _ in range(3)]


@pytest.fixture(scope="session")
def greedy_refs(target, prompts) -> list[list[int]]:
    """The target's own greedy continuation of each prompt (computed once per session)."""
    return [autoregressive_decode(target, p, N_NEW).tokens for p in prompts]
