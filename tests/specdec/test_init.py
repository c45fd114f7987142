"""The package's public names: the ones issue #2 lists, called as listed, from ``specdec``."""

from __future__ import annotations

import numpy as np
import pytest

import specdec


def test_every_exported_name_exists():
    missing = [name for name in specdec.__all__ if not hasattr(specdec, name)]
    assert not missing
    assert len(set(specdec.__all__)) == len(specdec.__all__)


def test_the_sampling_api_at_module_level():
    p, q = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.2, 0.5, 0.15, 0.15])  # code 01 demo 1
    assert specdec.acceptance_probability(p, q) == pytest.approx(0.75, abs=1e-12)
    np.testing.assert_allclose(specdec.speculative_output_distribution(p, q), p, atol=1e-12)
    np.testing.assert_allclose(specdec.mss_output_distribution(p, q, 2), p, atol=1e-12)
    mss = specdec.mss_acceptance_probability(p, q, 2)
    # β_1 = 0.75; p_2 = [0.8, 0, 0.2, 0] overlaps q by 0.2 + 0.15: 1 − 0.25 · 0.65.
    assert mss == pytest.approx(1 - 0.25 * 0.65, abs=1e-12)
    assert specdec.naive_acceptance_probability(p, q, 2) < mss
    # The counter-examples stay reachable from the package, and stay wrong.
    assert specdec.total_variation(specdec.wrong_resample_from_p_output_distribution(p, q), p) > 0
    assert specdec.total_variation(specdec.wrong_topk_ratio_output_distribution(p, q, 2), p) > 0


def test_the_analysis_api_at_module_level():
    assert round(float(specdec.walltime_speedup(0.8, 5, 0.0)), 2) == 3.69
    assert round(float(specdec.ops_multiplier(0.8, 5)), 2) == 1.63  # c_hat defaults to 0
    assert specdec.expected_tokens(0.5, 1) == 1.5
    assert specdec.optimal_gamma(alpha=0.8, c=0.1, max_gamma=16) == 6
    assert specdec.optimal_gamma(alpha=0.8, c=0.1, max_gamma=4) == 4
    assert specdec.optimal_gamma(0.1, 0.2) == 0  # α < c: do not speculate
