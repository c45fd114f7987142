"""SpecSim's ``vllm_v1`` order against vLLM 0.33.0's own v1 ``Scheduler``, step by step.

Each workload runs through vLLM's scheduler on the CPU (no model: a fake model step, see
``vllm_side``) and through SpecSim's reference scheduler (``specsim_side``), both sync, with
the same arrivals, lengths and accepted drafts; every step's scheduled requests, their
tokens, their draft tokens and the preempted requests must be the same. A difference is
allowed only where ``cases.GAPS`` names a known cause; a known gap that no longer shows
fails, so the list stays true.

Skipped without vLLM (``pip install -e '.[conformance]'``; docs/conformance.md). Run with
``-s`` to see the agreement table, or ``python -m tests.conformance.report``.
"""

from __future__ import annotations

import os

import pytest

os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"  # pinned before vLLM reads its environment
pytest.importorskip("vllm")

from tests.conformance.cases import all_workloads, known_gap  # noqa: E402
from tests.conformance.report import measure  # noqa: E402
from tests.conformance.vllm_side import VllmFactory  # noqa: E402
from tests.conformance.workload import format_table  # noqa: E402

WORKLOADS = all_workloads()


@pytest.fixture(scope="module")
def factory(tmp_path_factory) -> VllmFactory:
    return VllmFactory(tmp_path_factory.mktemp("vllm-models"))


@pytest.fixture(scope="module")
def measured() -> dict:
    """Agreements measured so far in this module, by workload name."""
    return {}


def _agreement(w, factory, measured):
    if w.name not in measured:
        measured[w.name] = measure(w, factory)
    return measured[w.name]


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_every_step_is_vllms(w, factory, measured):
    a = _agreement(w, factory, measured)
    gap = known_gap(w)
    if a.first_diff is None:
        assert gap is None, f"{w.name} no longer differs; take it out of cases.GAPS ({gap})"
        return
    where = (f"first difference at step {a.first_diff} of {a.steps}\n  vLLM:    {a.vllm_step}"
             f"\n  SpecSim: {a.specsim_step}")
    if gap is not None:
        pytest.xfail(f"{gap}; {where}")
    pytest.fail(f"{w.name}: {where}")


def test_the_agreement_table(factory, measured):
    rows = [_agreement(w, factory, measured) for w in WORKLOADS]
    table = format_table(rows)
    print("\n" + table)
    assert len(table.splitlines()) == len(WORKLOADS) + 2
    assert all(0 <= a.identical <= a.steps for a in rows)
