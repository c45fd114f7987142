"""Replaying a scenario's acceptance model as a serving log would see it (lecture §4.5).

The run's records hold acceptance totals, not each verify's accepted count, so the run
report's tokens-per-verify histogram and run lengths come from replaying the model itself:
``n_streams`` requests verifying chains back to back (``workloads.replay_chain``), tabled
by ``reports.bursty``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.bursty import run_length_table, verify_histogram
from sim.build import make_acceptance
from sim.scenario import Scenario
from workloads import replay_chain


def scenario_histograms(scenario: dict, gamma: int, n_streams: int = 256,
                        n_verifies: int = 64, max_run: int = 64
                        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(verify histogram at γ, run lengths up to ``max_run``) for a resolved scenario's
    acceptance model.

    The replay's generator is seeded from the scenario's seed and a fixed tag, separate from
    the run's own streams: deterministic, but not the run's exact draws.
    """
    sc = Scenario.model_validate(scenario)
    seq = np.random.SeedSequence([sc.run.seed, 0x5EC5])
    build_rng, draw_rng = (np.random.default_rng(s) for s in seq.spawn(2))
    model = make_acceptance(sc.acceptance, build_rng)
    hist = verify_histogram(replay_chain(model, gamma, n_streams, n_verifies, draw_rng), gamma)
    runs = run_length_table(replay_chain(model, max_run, n_streams, 64, draw_rng), max_run)
    return hist, runs
