"""The agreement table: ``python -m tests.conformance.report`` (needs vLLM 0.33.0, see
docs/conformance.md) runs every conformance workload through vLLM's scheduler and SpecSim's
and prints the table, then each first differing step and its explanation."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import vllm

from tests.conformance.cases import all_workloads, known_gap
from tests.conformance.specsim_side import run_specsim
from tests.conformance.vllm_side import VllmFactory, run_vllm
from tests.conformance.workload import Agreement, Workload, compare, format_table


def measure(w: Workload, factory: VllmFactory) -> Agreement:
    """``w``'s step-by-step agreement."""
    return compare(w.name, run_vllm(w, factory), run_specsim(w))


def explain(w: Workload, a: Agreement) -> str:
    """Why ``a`` differs: a known gap, or unexplained."""
    if a.first_diff is None:
        return ""
    return known_gap(w) or "UNEXPLAINED"


def main() -> None:
    root = Path(__file__).resolve().parents[2]
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                            "sim", "workloads", "hardware", "specdec"],
                           capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        factory = VllmFactory(Path(tmp))
        rows = [(w, measure(w, factory)) for w in all_workloads()]
    print(f"vLLM {vllm.__version__}, SpecSim {commit}" + (" (with uncommitted changes)"
                                                          if dirty else ""))
    print(format_table([a for _, a in rows]))
    for w, a in rows:
        if a.first_diff is not None:
            print(f"\n{a.name}: first difference at step {a.first_diff}: {explain(w, a)}")
            print(f"  vLLM:    {a.vllm_step}\n  SpecSim: {a.specsim_step}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
